"""Benchmark: artifact distribution, star vs chain, on links shaped to B Mbit/s.

One artifact of S MB goes to N nodes (N = 2, 4, 8 of one simulated 8-node cluster) through
the project's own distribution (bench/fanout.yml: roles/artifact_store, transfer.yml),
once as the star (-e artifact_fanout=star: rsync from the controller to each node) and
once as the chain (-e artifact_fanout=chain). Cases are interleaved, each repeated; the
medians are printed as time / (S/B), S/B being the time one copy takes on one link.

"Every machine, the controller included, has one link of B": with `tc`, a token bucket
(tbf) of rate B on each node's eth0 egress, inside the node's network namespace (the
nodes are privileged containers: they have CAP_NET_ADMIN), and one on the egress of the
simulator's own bridge for this cluster (podman's `podman<N>` device for the network
a3rl-<cluster>), which is the controller's way into the cluster. No other host device is
touched, and every qdisc added here is removed again, also on failure or Ctrl-C.

Times, from the play's own events:
- `data`: the phase that moves the bytes. Star: the rsync task and the sha256 check after
  it. Chain: from starting the relays (async) to collecting them (they hash in the
  stream and stamp before they end).
- `stream` (chain only): the sender's own time, from its first byte until the first relay
  closed, which it does after every node after it is done (hashed and stamped).
- `distribution`: from the plan until every node holds a verified copy (the end of
  "Verify the sent files by sha256"): the data phase plus the chain's bookkeeping tasks.
- `play`: the whole ansible-playbook run (SSH set-up, rsync installed, the checks).
Each Ansible task costs a fixed time per run (about a second on an idle 2-core machine,
several when it is loaded); the ratios to S/B shrink towards the data rate as S grows.

    .venv/bin/python bench/fanout.py [--size-mb 256] [--mbit 200] [--sizes 2 4 8]
                                     [--repeats 3] [--name fan8] [--keep]
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from a3rl.controller.runner import run_play
from a3rl.sim import cluster, podman

PLAY = "bench/fanout.yml"
NODE_DIR = "/var/cache/a3rl/fanbench"
FIRST = "Artifacts | Say how the copies go out"
LAST = "Artifacts | Verify the sent files by sha256"
STREAM = "Artifacts | Stream the files once into the chain"
DATA = {"star": ("Artifacts | Send the missing files directly (a partial copy resumes)", LAST),
        "chain": ("Artifacts | Start this node's relay", "Artifacts | Collect this node's relay")}


class Shaper:
    """tbf qdiscs on the nodes' eth0 and on the cluster's bridge; all removed by undo()."""

    def __init__(self, c: cluster.Cluster, mbit: int):
        self.c = c
        self.mbit = mbit
        self.done: list[tuple[str, str]] = []  # (where, device): container name or "host"
        nets = podman.json_out(["network", "inspect", c.network])
        self.bridge = nets[0].get("network_interface") or ""
        if not self.bridge.startswith("podman"):
            raise RuntimeError(f"network {c.network}: no podman bridge device ({self.bridge!r})")

    def _tbf(self) -> list[str]:
        # burst: at least one GSO super-packet (64 kB), and 10 ms worth of the rate.
        burst = max(256 * 1024, self.mbit * 1_000_000 // 8 // 100)
        return ["tbf", "rate", f"{self.mbit}mbit", "burst", str(burst), "latency", "100ms"]

    def apply(self) -> None:
        for n in self.c.members():
            podman.exec_(n.container, "tc", "qdisc", "replace", "dev", "eth0", "root",
                         *self._tbf())
            self.done.append((n.container, "eth0"))
        subprocess.run(["tc", "qdisc", "replace", "dev", self.bridge, "root", *self._tbf()],
                       check=True)
        self.done.append(("host", self.bridge))

    def undo(self) -> None:
        while self.done:
            where, dev = self.done.pop()
            if where == "host":
                subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], check=False,
                               capture_output=True)
            else:
                podman.exec_(where, "tc", "qdisc", "del", "dev", dev, "root", check=False)

    def show(self) -> str:
        out = subprocess.run(["tc", "qdisc", "show", "dev", self.bridge], capture_output=True,
                             text=True).stdout.strip()
        node = podman.exec_(self.c.members()[0].container, "tc", "qdisc", "show", "dev",
                            "eth0").stdout.strip()
        return f"{self.bridge}: {out}\nnode1 eth0: {node}"


def make_store(root: Path, size_mb: int) -> list[dict]:
    path = root / "bench" / "artifact.bin"
    path.parent.mkdir(parents=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(size_mb):
            block = os.urandom(1_000_000)
            f.write(block)
            h.update(block)
    return [{"path": "bench/artifact.bin", "sha256": h.hexdigest(), "size": size_mb * 1_000_000}]


def inventory_for(c: cluster.Cluster, n: int, dest: Path) -> Path:
    """A copy of the cluster's inventory with only its first n nodes."""
    inv = dest / f"inventory-{n}"
    if inv.exists():
        return inv
    shutil.copytree(c.inventory_dir, inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    groups = hosts["all"]["children"]["a3_nodes"]["children"]
    keep = {f"node{i}" for i in range(1, n + 1)}
    for g in groups.values():
        g["hosts"] = {h: v for h, v in (g.get("hosts") or {}).items() if h in keep}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return inv


def _ts(text: str | None) -> float | None:
    return datetime.datetime.fromisoformat(text).timestamp() if text else None


def _task_spans(record: Path) -> tuple[dict[str, tuple[float, float]], float, dict]:
    """Per task name (its first run): (start, end) from the events; the play's length; the
    chain sender's result (empty for the star)."""
    evs = []
    for p in record.glob("artifacts/*/job_events/*.json"):
        if not p.name.endswith("-partial.json"):
            evs.append(json.loads(p.read_text()))
    evs.sort(key=lambda e: e.get("counter", 0))
    spans: dict[str, list[float]] = {}
    sent: dict = {}
    for e in evs:
        task = str(e.get("event_data", {}).get("task", ""))
        if task == STREAM and e["event"] == "runner_on_ok":
            sent = e["event_data"].get("res") or {}
        when = _ts(e.get("created"))
        if e["event"] == "playbook_on_task_start":
            spans.setdefault(task, [when, when])
        elif e["event"].startswith("runner_on_") and task in spans:
            spans[task][1] = max(spans[task][1], _ts(e["event_data"].get("end")) or when)
    play = _ts(evs[-1]["created"]) - _ts(evs[0]["created"])
    return {k: (v[0], v[1]) for k, v in spans.items()}, play, sent


def timings(record: Path, mode: str) -> dict[str, float]:
    """Seconds from the run's events: the data phase (star: the rsync task and the sha256
    check after it; chain: from starting the relays to collecting them, which hash in
    the stream), the whole distribution (from the plan to every node verified) and the
    play."""
    spans, play, sent = _task_spans(record)
    first, last = DATA[mode]
    missing = [t for t in (FIRST, LAST, first, last) if t not in spans]
    if missing:
        raise RuntimeError(f"{record}: no events for {missing}")
    return {"data": spans[last][1] - spans[first][0],
            "transfer": spans[LAST][1] - spans[FIRST][0], "play": play,
            "stream": float(sent.get("seconds", 0.0))}


def clean(c: cluster.Cluster) -> None:
    for n in c.members():
        podman.exec_(n.container, "rm", "-rf", NODE_DIR)


def one(c: cluster.Cluster, inv: Path, mode: str, store: Path, files: list[dict]) -> dict:
    clean(c)
    extra = {"fanout_store": str(store), "fanout_files": files, "fanout_node_dir": NODE_DIR,
             "artifact_fanout": mode, "artifact_store_fanout_min_bytes": 0}
    r = run_play(PLAY, inv, extravars=extra, quiet=True)
    if not r.ok:
        raise RuntimeError(f"{mode} run failed: {r.failures} (record {r.record})")
    return {**timings(r.record, mode), "changed": r.changed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=256, help="artifact size S (MB, 10^6 B)")
    ap.add_argument("--mbit", type=int, default=200, help="link rate B (Mbit/s)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8], help="node counts N")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--name", default="fan8", help="simulated cluster to use (made and removed)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    args = ap.parse_args()

    one_copy = args.size_mb * 8 / args.mbit  # seconds: S / B
    c = cluster.up(args.name, nodes=max(args.sizes), log=lambda m: print(f"  {m}", flush=True))
    work = Path(tempfile.mkdtemp(prefix="a3rl-bench-fanout-"))
    shaper = Shaper(c, args.mbit)

    def restore(*_sig) -> None:
        shaper.undo()
        if _sig:
            sys.exit(130)

    atexit.register(restore)
    signal.signal(signal.SIGTERM, restore)
    signal.signal(signal.SIGINT, restore)
    rows: dict[tuple[int, str], list[dict]] = {}
    try:
        files = make_store(work / "store", args.size_mb)
        invs = {n: inventory_for(c, n, work) for n in args.sizes}
        shaper.apply()
        print(shaper.show(), flush=True)
        print(f"S = {args.size_mb} MB, B = {args.mbit} Mbit/s: S/B = {one_copy:.2f} s; "
              f"repeats {args.repeats}", flush=True)
        for rep in range(args.repeats):
            for n in args.sizes:
                # Alternate which mode goes first, so neither always runs on a warmer cache.
                modes = ("star", "chain") if (rep + n) % 2 == 0 else ("chain", "star")
                for mode in modes:
                    row = one(c, invs[n], mode, work / "store", files)
                    rows.setdefault((n, mode), []).append(row)
                    stream = (f"stream {row['stream']:5.1f} s "
                              f"({row['stream'] / one_copy:4.2f} x S/B), ") if row["stream"] else ""
                    print(f"  run {rep + 1} N={n} {mode:5}: {stream}data {row['data']:6.1f} s "
                          f"({row['data'] / one_copy:5.2f} x S/B), distribution "
                          f"{row['transfer']:6.1f} s ({row['transfer'] / one_copy:5.2f} x S/B), "
                          f"play {row['play']:6.1f} s", flush=True)
    finally:
        shaper.undo()
        clean(c)
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            cluster.down(args.name, log=lambda _m: None)

    print()
    print(f"{platform.node()}: {os.cpu_count()} cores, "
          f"{datetime.date.today().isoformat()}, S = {args.size_mb} MB, B = {args.mbit} Mbit/s, "
          f"S/B = {one_copy:.2f} s, medians of {args.repeats}")
    print()
    print("| N | chain stream / (S/B) | star data / (S/B) | chain data / (S/B) "
          "| star dist. / (S/B) | chain dist. / (S/B) | star / chain (dist.) "
          "| star dist. (s) | chain dist. (s) | star play (s) | chain play (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in args.sizes:
        med = {(mode, k): statistics.median(r[k] for r in rows[(n, mode)])
               for mode in ("star", "chain") for k in ("data", "transfer", "play", "stream")}
        print(f"| {n} | {med['chain', 'stream'] / one_copy:.2f} "
              f"| {med['star', 'data'] / one_copy:.2f} "
              f"| {med['chain', 'data'] / one_copy:.2f} "
              f"| {med['star', 'transfer'] / one_copy:.2f} "
              f"| {med['chain', 'transfer'] / one_copy:.2f} "
              f"| {med['star', 'transfer'] / med['chain', 'transfer']:.2f} "
              f"| {med['star', 'transfer']:.1f} | {med['chain', 'transfer']:.1f} "
              f"| {med['star', 'play']:.1f} | {med['chain', 'play']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
