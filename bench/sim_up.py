"""Benchmark: simulated cluster start-up, to SSH-ready, and its host memory.

For N in 2, 4, 8 nodes (repeated, median reported): time from `sim up` to every node
accepting SSH with its recorded host key, the memory the node containers use (podman's
cgroup accounting) and the drop in the host's MemAvailable. The node image is built
once before timing, so this measures starting nodes, not building images. Ratios
between sizes come from the same run, side by side, because this machine is noisy.

    .venv/bin/python bench/sim_up.py [--runs 3] [--sizes 2 4 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from a3rl.sim import cluster, podman
from a3rl.sim.image import ensure_image

NAME = "bench"
UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def container_mem() -> int:
    names = [c["Names"][0] for c in podman.containers(f"{cluster.LABEL}={NAME}")]
    total = 0
    for row in json.loads(podman.run(["stats", "--no-stream", "--format", "json", *names]).stdout):
        used = row["mem_usage"].split("/")[0].strip()
        num = "".join(ch for ch in used if ch.isdigit() or ch == ".")
        total += int(float(num) * UNITS[used[len(num):].strip()])
    return total


def one(nodes: int, settle: float, parallel: int) -> dict[str, float]:
    cluster.down(NAME, log=lambda _m: None)
    before = mem_available()
    t0 = time.monotonic()
    cluster.up(NAME, nodes=nodes, log=lambda _m: None, parallel=parallel)
    ready = time.monotonic() - t0
    time.sleep(settle)
    row = {"ssh_ready_s": ready, "containers_mb": container_mem() / 1e6,
           "host_mb": (before - mem_available()) / 1e6}
    cluster.down(NAME, log=lambda _m: None)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--settle", type=float, default=5.0, help="seconds before reading memory")
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 4],
                    help="node starts at once; the largest size is also timed with each")
    a = ap.parse_args()
    ensure_image(log=lambda _m: None)
    results: dict[int, list[dict[str, float]]] = {n: [] for n in a.sizes}
    largest = max(a.sizes)
    starts: dict[int, list[float]] = {p: [] for p in a.parallel}
    # Interleave everything so drift in machine load spreads over all cases.
    for _ in range(a.runs):
        for n in a.sizes:
            results[n].append(one(n, a.settle, cluster.START_PARALLEL))
        for p in a.parallel:
            starts[p].append(one(largest, 0, p)["ssh_ready_s"])
    med = {n: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
           for n, rows in results.items()}
    base = a.sizes[0]
    print(f"sim up, median of {a.runs} runs (interleaved)")
    print(f"{'nodes':>5} {'ssh-ready s':>11} {'vs ' + str(base):>7} {'containers MB':>13} "
          f"{'MB/node':>8} {'host MB':>8}")
    for n in a.sizes:
        m = med[n]
        ratio = m["ssh_ready_s"] / med[base]["ssh_ready_s"]
        print(f"{n:>5} {m['ssh_ready_s']:>11.1f} {ratio:>7.2f} "
              f"{m['containers_mb']:>13.0f} {m['containers_mb'] / n:>8.0f} {m['host_mb']:>8.0f}")
    seq = statistics.median(starts[a.parallel[0]])
    print(f"\n{largest} nodes, node containers started N at once (median of {a.runs})")
    for p in a.parallel:
        t = statistics.median(starts[p])
        print(f"  parallel={p:<3} ssh-ready {t:5.1f} s   ratio to parallel={a.parallel[0]}: "
              f"{t / seq:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
