"""Benchmark: one hang, found by the step-based bound against the stall bound.

On a simulated 2-node cluster with real verl on CPU (a3rl.sim.cpu_profile), the same
GRPO run of ``--steps`` steps runs twice under the run supervisor, one after the other,
and in each the worker node's trainer (``ray::WorkerDict``) is stopped with SIGSTOP once
the run has passed ``--stop-after`` steps:

* ``step``: the stall bound off (``run_supervisor_stall_bound=0``): the hang is found
  when no new step came for ``run_supervisor_hang_floor`` seconds (``--floor``; the tiny
  model's steps of seconds make the floor the bound, as 3 x a Qwen3-235B step of
  7,780 s would on A3);
* ``stall``: the same, with the stall bound at ``--stall`` seconds.

Each prints its time to detection (the supervisor's ``hang`` event against the moment
of the stop), which bound fired, and its goodput (a3rl.controller.goodput, as
``resume.py``); then the ratios of the two.

    .venv/bin/python bench/hang.py [--steps 6] [--stop-after 2] [--floor 600] [--stall 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from a3rl.controller.runner import run_play
from a3rl.node import metrics
from a3rl.planning import rolevars
from a3rl.sim import cluster, podman

# (this folder is the script's first path entry: resume.py's helpers)
from resume import CONTAINER, followed_goodput, job_log, provisioned, submission, wait

NAME = "bench-hang"
TRAIN = "playbooks/train.yml"
SUPERVISE = rolevars.cluster_vars()["a3rl_supervise_dir"]


def events(c: cluster.Cluster, run_id: str) -> list[dict]:
    out = podman.exec_(c.members()[0].container, "cat", f"{SUPERVISE}/{run_id}/events.jsonl",
                       check=False).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def one(c: cluster.Cluster, variant: str, a: argparse.Namespace) -> dict:
    # total_epochs differs per variant only so that each is a run of its own (the plan's
    # id); total_training_steps ends both at the same step.
    epochs = a.steps + (variant == "stall")
    args = {"algo": "grpo", "train_job_poll": 2, "run_supervisor_poll": 3,
            "run_supervisor_backoff": 2, "run_supervisor_whole_timeout": 600,
            "run_supervisor_hang_floor": a.floor,
            "train_job_supervisor_hang_first_step": max(a.floor, 600),
            "run_supervisor_stall_bound": a.stall if variant == "stall" else 0,
            "overrides": [f"trainer.total_training_steps={a.steps}",
                          f"trainer.total_epochs={epochs}"]}
    first = run_play(TRAIN, c.inventory_dir, quiet=True,
                     extravars={**args, "train_job_follow": False})
    if not first.ok:
        raise SystemExit(f"{variant}: the submit failed ({first.record})")
    sid = submission(first)
    wait(lambda: (metrics.progress(job_log(c, sid)).get("step") or 0) >= a.stop_after, 900,
         f"{variant}: step {a.stop_after}")
    worker = c.members()[1].container
    pids = podman.exec_(worker, "docker", "exec", CONTAINER, "pgrep", "-f",
                        "^ray::WorkerDict").stdout.split()
    if len(pids) != 1:
        raise SystemExit(f"{variant}: {len(pids)} WorkerDict processes on the worker")
    podman.exec_(worker, "docker", "exec", CONTAINER, "kill", "-STOP", pids[0])
    stopped = time.time()
    wait(lambda: any(e["event"] == "hang" for e in events(c, sid)), a.floor + 900,
         f"{variant}: the hang to be found")
    hang = next(e for e in events(c, sid) if e["event"] == "hang")
    return {"variant": variant, "bound": hang.get("bound", "step"),
            "detected_s": hang["time"] - stopped, **followed_goodput(c, args, sid, variant)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--stop-after", type=int, default=2)
    ap.add_argument("--floor", type=float, default=600, help="run_supervisor_hang_floor")
    ap.add_argument("--stall", type=float, default=60, help="run_supervisor_stall_bound")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    a = ap.parse_args()
    with provisioned(NAME, a.keep) as c:
        rows = [one(c, v, a) for v in ("step", "stall")]
    print(f"\nOne GRPO run of {a.steps} steps (real verl on CPU, tiny model, 2 simulated "
          f"nodes); the worker's trainer stopped (SIGSTOP) after step {a.stop_after}; step "
          f"bound floor {a.floor:.0f} s, stall bound {a.stall:.0f} s")
    print(f"{'variant':>8} {'bound':>6} {'detected s':>10} {'goodput':>8} {'wall s':>7} "
          f"{'productive s':>12} {'lost s':>7} {'restarts':>8}")
    for r in rows:
        print(f"{r['variant']:>8} {r['bound']:>6} {r['detected_s']:>10.0f} {r['goodput']:>8.3f} "
              f"{r['wall_s']:>7.0f} {r['productive_s']:>12.1f} {r['lost_s']:>7.0f} "
              f"{r['restarts']:>8}")
    step, stall = rows
    print(f"time to detection stall / step: {stall['detected_s'] / step['detected_s']:.2f}; "
          f"goodput stall / step: {stall['goodput'] / step['goodput']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
