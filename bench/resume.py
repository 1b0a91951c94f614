"""Benchmark: one injected failure, with the run supervisor against the recipe's way.

On a simulated 2-node cluster with real verl on CPU (a3rl.sim.cpu_profile), the same
GRPO run of ``--steps`` steps runs twice, one after the other, and in each the worker
node's training container is killed once the run has passed ``--kill-after`` steps, and
started again once the job has failed:

* ``supervised``: a3rl's default for real weights: a checkpoint every step on the shared
  folder, the supervisor on the head resumes the run from the newest one;
* ``recipe``: ``trainer.save_freq=-1`` and no supervisor (-e train_job_checkpoint=false):
  the job fails, the steps done are lost, and the run is submitted again from step 0 as
  soon as ray.yml finds the cluster whole (a person who reacts at once: the most
  favourable case for it).

Each prints its goodput (a3rl.controller.goodput: the steps the final model went through, each
once, over the wall time from the first submission's start to the last one's end), its
wall time and restarts; then the ratio of the two goodputs.

    .venv/bin/python bench/resume.py [--steps 8] [--kill-after 3] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator

from a3rl.controller import goodput, strategy
from a3rl.controller.runner import run_play
from a3rl.node import metrics
from a3rl.paths import project_root
from a3rl.planning import checkpointing, rolevars
from a3rl.sim import cluster, podman

NAME = "bench-resume"
# The cluster-wide values (group_vars/all/cluster.yml), not copies of them.
PORT = int(rolevars.cluster_vars()["a3rl_ray_dashboard_port"])
CONTAINER = str(rolevars.cluster_vars()["a3rl_training_container_name"])
TRAIN = "playbooks/train.yml"


def api(c: cluster.Cluster, path: str, method: str = "GET") -> object:
    head = c.members()[0].container
    out = podman.exec_(head, "python3", "-c",
                       "import urllib.request,sys; r=urllib.request.Request("
                       f"'http://127.0.0.1:{PORT}{path}', method='{method}'); "
                       "sys.stdout.write(urllib.request.urlopen(r).read().decode())").stdout
    return json.loads(out) if out.strip().startswith(("{", "[")) else out


def job_log(c: cluster.Cluster, sid: str) -> str:
    got = api(c, f"/api/jobs/{sid}/logs")
    return got.get("logs", "") if isinstance(got, dict) else ""


def submission(result) -> str:
    ids = []
    for p in sorted((result.record / "artifacts").rglob("job_events/*.json")):
        facts = json.loads(p.read_text()).get("event_data", {}).get("res", {}) \
            .get("ansible_facts", {})
        if "train_job_plan" in facts:
            ids.append((json.loads(p.read_text()).get("counter", 0),
                        facts["train_job_plan"]["submission_id"]))
    return sorted(ids)[-1][1]


def wait(cond, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(2)
    raise SystemExit(f"timed out waiting for {what}")


def one(c: cluster.Cluster, variant: str, steps: int, kill_after: int) -> dict:
    args = {"algo": "grpo", "train_job_poll": 2, "run_supervisor_backoff": 2,
            "overrides": [f"trainer.total_training_steps={steps}",
                          f"trainer.total_epochs={steps}"],
            "train_job_checkpoint": "true" if variant == "supervised" else "false"}
    first = run_play(TRAIN, c.inventory_dir, quiet=True,
                     extravars={**args, "train_job_follow": False})
    if not first.ok:
        raise SystemExit(f"{variant}: the submit failed ({first.record})")
    sid = submission(first)
    wait(lambda: (metrics.progress(job_log(c, sid)).get("step") or 0) >= kill_after, 900,
         f"{variant}: step {kill_after}")
    # The worker's training container killed (the job fails), then started again (Docker
    # does not restart a killed container); its Ray unit rejoins the cluster.
    worker = c.members()[1].container
    podman.exec_(worker, "docker", "kill", CONTAINER)
    wait(lambda: (api(c, f"/api/jobs/{sid}") or {}).get("status") in
         ("FAILED", "STOPPED", "SUCCEEDED"), 900, "the job to fail")
    podman.exec_(worker, "docker", "start", CONTAINER)
    if variant == "recipe":
        lost = api(c, f"/api/jobs/{sid}")
        # ray.yml returns once every node's raylet is listed again: then a new submission
        # can place its workers (what the supervisor waits for by itself).
        whole = run_play("playbooks/ray.yml", c.inventory_dir, quiet=True)
        if not whole.ok:
            raise SystemExit(f"recipe: the cluster did not come back ({whole.record})")
        again = run_play(TRAIN, c.inventory_dir, quiet=True,
                         extravars={**args, "train_job_rerun": True})
        if not again.ok:
            raise SystemExit(f"recipe: the resubmission failed ({again.record})")
        last = api(c, f"/api/jobs/{sid}")
        figures = goodput.goodput([lost, last], [[], metrics.parse_log(job_log(c, sid))])
    else:
        figures = followed_goodput(c, args, sid, variant)
    return {"variant": variant, **figures}


def followed_goodput(c: cluster.Cluster, args: dict, sid: str, variant: str) -> dict:
    """The run followed to its end by the play; its goodput from the run record's
    attempts (Ray's records and each attempt's log)."""
    followed = run_play(TRAIN, c.inventory_dir, quiet=True, extravars=args)
    if not followed.ok:
        raise SystemExit(f"{variant}: the follow failed ({followed.record})")
    run = project_root() / "runs" / sid
    ids = sorted((p.stem for p in (run / "attempts").glob("*.json")),
                 key=checkpointing.attempt_of)
    records = [json.loads((run / "attempts" / f"{i}.json").read_text()) for i in ids]
    logs = [metrics.parse_log((run / "attempts" / f"{i}.log").read_text()) for i in ids]
    return goodput.goodput(records, logs)


@contextlib.contextmanager
def provisioned(name: str, keep: bool) -> Iterator[cluster.Cluster]:
    """A 2-node simulated cluster with real verl, site.yml run on it; removed afterwards
    unless ``keep``."""
    c = cluster.up(name, nodes=2, log=print, trainer="verl")
    try:
        site = run_play("site.yml", c.inventory_dir, quiet=True,
                        extra_env=strategy.env(strategy.MITOGEN))
        if not site.ok:
            raise SystemExit(f"site.yml failed ({site.record})")
        yield c
    finally:
        if not keep:
            cluster.down(name, log=print)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--kill-after", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    a = ap.parse_args()
    with provisioned(NAME, a.keep) as c:
        rows = [one(c, v, a.steps, a.kill_after) for v in ("supervised", "recipe")]
    print(f"\nOne GRPO run of {a.steps} steps (real verl on CPU, tiny model, 2 simulated "
          f"nodes); the worker's training container killed after step {a.kill_after}")
    print(f"{'variant':>10} {'goodput':>8} {'wall s':>7} {'productive s':>12} "
          f"{'lost s':>7} {'restarts':>8}")
    for r in rows:
        print(f"{r['variant']:>10} {r['goodput']:>8.3f} {r['wall_s']:>7.0f} "
              f"{r['productive_s']:>12.1f} {r['lost_s']:>7.0f} {r['restarts']:>8}")
    print(f"goodput ratio supervised / recipe: {rows[0]['goodput'] / rows[1]['goodput']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
