"""Benchmark: a no-op ``site.yml`` of this tree against an earlier tree, side by side.

Issue 24's target is a ratio to an earlier tree ("today's tree" when the issue was
filed, commit 9dbd476), not to a setting of this one, so the two trees run against one
simulated cluster, interleaved:

* the earlier tree is checked out read-only next to this one (``git worktree add
  --detach`` into a temporary folder, removed at the end) and runs with its own
  ``ansible.cfg``, plugins and ``a3rl`` package (``PYTHONPATH``), on this venv;
* the cluster comes from this tree's simulator and is converged by this tree first;
* before a tree's measured run, ``site.yml`` of that tree runs until it reports
  ``changed=0`` (the two trees write slightly different files, e.g. firewall rules),
  unmeasured; the measured run must report ``changed=0`` too, or the benchmark stops;
* variants (``baseline``, ``current``, ``current-mitogen``: this tree under the opt-in
  ``A3RL_STRATEGY=mitogen``) alternate within each round, and the order reverses every
  round; medians are reported with the ratio to ``baseline``.

Both trees run through plain ``ansible-playbook`` (the same path for both), with
controller CPU from ``getrusage(RUSAGE_CHILDREN)`` around each run.

    .venv/bin/python bench/noop.py [--nodes 8] [--runs 2] [--baseline 9dbd476]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from a3rl.controller import strategy
from a3rl.paths import project_root
from a3rl.sim import cluster

NAME = "bench-noop"
BASELINE = "9dbd476"  # the tree when issue 24 was filed (stop 27)
VARIANTS = ("baseline", "current", "current-mitogen")
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                   re.M)
SETTLE_RUNS = 3


@dataclass
class Run:
    seconds: float
    cpu: float
    changed: int
    failed: int
    log: str


def playbook(tree: Path, inventory: Path, env_extra: dict[str, str]) -> Run:
    """``site.yml`` of ``tree`` on ``inventory`` with ``tree``'s own settings and code."""
    env = dict(os.environ)
    env.pop(strategy.VARIABLE, None)
    env.update({
        "ANSIBLE_CONFIG": str(tree / "ansible.cfg"),
        "PYTHONPATH": str(tree / "tools"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    })
    env.update(env_extra)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         "site.yml"], cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows = RECAP.findall(proc.stdout)
    changed = sum(int(r[2]) for r in rows)
    failed = sum(int(r[3]) + int(r[4]) for r in rows)
    if proc.returncode != 0 or not rows:
        failed = max(failed, 1)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Run(seconds, cpu, changed, failed, proc.stdout[-3000:] + proc.stderr[-2000:])


def settle(tree: Path, inventory: Path, env_extra: dict[str, str], label: str) -> None:
    for _ in range(SETTLE_RUNS):
        r = playbook(tree, inventory, env_extra)
        if r.failed:
            raise SystemExit(f"{label}: site.yml failed while settling:\n{r.log}")
        if not r.changed:
            return
    raise SystemExit(f"{label}: site.yml still changes after {SETTLE_RUNS} runs:\n{r.log}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--baseline", default=BASELINE, help="git ref of the earlier tree")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    a = ap.parse_args()
    variants = ["baseline"] + [v for v in a.variants if v != "baseline"]
    root = project_root()
    work = Path(tempfile.mkdtemp(prefix="a3rl-noop-"))
    base_tree = work / "baseline"
    subprocess.run(["git", "-C", str(root), "worktree", "add", "--quiet", "--detach",
                    str(base_tree), a.baseline], check=True)
    trees = {"baseline": (base_tree, {}), "current": (root, {}),
             "current-mitogen": (root, strategy.env(strategy.MITOGEN))}
    # The stand-in trainer: the no-op does not depend on it, and the real-verl image layer
    # would only make the first converge longer.
    c = cluster.up(NAME, nodes=a.nodes, log=lambda _m: None, trainer="standin")
    times: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    try:
        t0 = time.monotonic()
        settle(root, c.inventory_dir, {}, "current (first run)")
        print(f"converged {a.nodes} nodes in {time.monotonic() - t0:.0f} s", flush=True)
        last_tree: Path | None = root
        for rnd in range(a.runs):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for v in order:
                tree, env_extra = trees[v]
                if tree != last_tree:
                    settle(tree, c.inventory_dir, env_extra, v)
                    last_tree = tree
                r = playbook(tree, c.inventory_dir, env_extra)
                if r.failed or r.changed:
                    raise SystemExit(f"{v}: the measured run was not a clean no-op "
                                     f"(changed={r.changed}, failed={r.failed}):\n{r.log}")
                times[v].append(r.seconds)
                cpu[v].append(r.cpu)
                print(f"  round {rnd + 1} {v:16} {r.seconds:6.1f} s, "
                      f"controller CPU {r.cpu:6.1f} s", flush=True)
    finally:
        if not a.keep:
            cluster.down(NAME, log=lambda _m: None)
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force",
                        str(base_tree)], check=False)
        if work.exists() and not any(work.iterdir()):
            work.rmdir()
    base = statistics.median(times["baseline"])
    print(f"\nno-op site.yml on {a.nodes} nodes, median of {a.runs} rounds (variants "
          f"interleaved, order reversed each round); baseline = {a.baseline}")
    print(f"{'variant':16} {'seconds':>8} {'vs baseline':>11} {'controller CPU s':>16}")
    for v in variants:
        m = statistics.median(times[v])
        print(f"{v:16} {m:>8.1f} {m / base:>11.2f} {statistics.median(cpu[v]):>16.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
