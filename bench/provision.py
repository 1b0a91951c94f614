"""Benchmark: provisioning on fresh simulated clusters of 2, 4 and 8 nodes.

For each size, on a fresh cluster (node image already built): ``site.yml`` from bare
nodes (issue 9's target: t(8)/t(2) <= 1.5), then ``site.yml`` again (no-op; target:
<= 0.15 of the first run, with changed=0), then Ray stopped and started again, timed
from the task that starts the head to the end of the wait for every node and NPU
(target on 8 nodes: <= 30 s). Sizes are interleaved over the repeats so drift in the
machine's load spreads over all of them. The slowest tasks of the largest first run
show where the time goes.

    .venv/bin/python bench/provision.py [--runs 1] [--sizes 2 4 8] [--top 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from a3rl.controller.runner import run_play  # noqa: E402
from a3rl.sim import cluster  # noqa: E402
from timing import span, task_walls  # noqa: E402

NAME = "bench-prov"
RAY_FROM = "Ray | Restart the head when its settings changed or it is not serving"
RAY_TO = "Ray | Wait until every node has joined with all its NPUs"


def quiet(_msg: str) -> None:
    pass


def play(name: str, inv: Path, extra: dict | None = None):
    result = run_play(name, inv, extra or {}, quiet=True)
    if not result.ok:
        detail = "; ".join(f"{h} | {t} | {m[:300]}" for h, t, m in result.failures)
        raise SystemExit(f"{name} failed ({result.record}): {detail}")
    return result


def one(nodes: int) -> dict:
    cluster.down(NAME, log=quiet)
    c = cluster.up(NAME, nodes=nodes, log=quiet)
    try:
        first = play("site.yml", c.inventory_dir)
        noop = play("site.yml", c.inventory_dir)
        play("playbooks/ray.yml", c.inventory_dir, {"ray_action": "stop"})
        start = play("playbooks/ray.yml", c.inventory_dir, {"ray_action": "start"})
        return {"first_s": first.seconds, "noop_s": noop.seconds, "noop_changed": noop.changed,
                "ray_ready_s": span(start.record, RAY_FROM, RAY_TO),
                "ray_play_s": start.seconds, "first_record": first.record}
    finally:
        cluster.down(NAME, log=quiet)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    rows: dict[int, list[dict]] = {n: [] for n in a.sizes}
    for _ in range(a.runs):
        for n in a.sizes:
            rows[n].append(one(n))
            r = rows[n][-1]
            print(f"  {n} nodes: site {r['first_s']:.0f}s, no-op {r['noop_s']:.0f}s "
                  f"(changed={r['noop_changed']}), Ray ready {r['ray_ready_s']:.1f}s", flush=True)

    def med(n: int, key: str) -> float:
        return statistics.median(r[key] for r in rows[n])

    base = a.sizes[0]
    print(f"\nsite.yml on fresh simulated clusters, median of {a.runs} run(s), sizes interleaved")
    print(f"{'nodes':>5} {'site s':>7} {'vs ' + str(base):>6} {'no-op s':>8} {'no-op/site':>10} "
          f"{'changed':>7} {'Ray ready s':>11}")
    for n in a.sizes:
        changed = max(r["noop_changed"] for r in rows[n])
        print(f"{n:>5} {med(n, 'first_s'):>7.0f} {med(n, 'first_s') / med(base, 'first_s'):>6.2f} "
              f"{med(n, 'noop_s'):>8.0f} {med(n, 'noop_s') / med(n, 'first_s'):>10.2f} "
              f"{changed:>7} {med(n, 'ray_ready_s'):>11.1f}")
    largest = max(a.sizes)
    walls = task_walls(rows[largest][-1]["first_record"])
    print(f"\nslowest {a.top} tasks of site.yml on {largest} fresh nodes "
          f"({len(walls)} tasks, {rows[largest][-1]['first_s']:.0f} s)")
    for w in walls[: a.top]:
        print(f"{w['seconds']:>7.1f} s  {w['hosts']:>2} host(s)  {w['task']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
