"""The training play on the simulated cluster, end to end: plan, Hydra check against the
staged verl configs, submit through Ray's job API, follow, collect, report; double submit,
stop, a failing job, refused plans.

GRPO runs are REAL verl 0.6.0 on CPU (the plan's CPU profile, a3rl.sim.cpu_profile, with
the tiny random Qwen3 and one worker per node over gloo); DAPO runs (no CPU profile) and
the refused plans use the STAND-IN trainer (docs/testing.md, "Which trainer")."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from a3rl.node import metrics
from a3rl.paths import project_root
from a3rl.sim import cluster

from .conftest import ansible_warnings, failure_text, play, provision

# The plays run on Ansible's default strategy, as `a3rl demo` runs train.yml: the module
# checks that such a run prints no Ansible warning (Mitogen's opt-in prints two).

TRAIN = "playbooks/train.yml"
SHORT = ["trainer.total_training_steps=2"]


@pytest.fixture(scope="module")
def up(sim) -> Iterator[cluster.Cluster]:
    """The worker's cluster with the real-verl training image for this module (the other
    modules run the stand-in trainer, so the 2.9 GB layer loads on one cluster only); the
    inventory goes back to the stand-in trainer afterwards (the next module's site.yml
    loads that image again)."""
    real = cluster.up(sim.name, nodes=sim.nodes, log=print, trainer="verl")
    try:
        yield provision(real)
    finally:
        cluster.up(sim.name, nodes=sim.nodes, log=print, trainer="standin")


def _events(result) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in
                   (result.record / "artifacts").rglob("job_events/*.json")),
                  key=lambda e: e.get("counter", 0))


def _submission_id(result) -> str:
    """The submitted job's id: the last plan set (on the simulator, a GRPO plan's CPU
    profile replaces the real plan after its checks, under an id of its own)."""
    ids = [facts["train_job_plan"]["submission_id"] for e in _events(result)
           if "train_job_plan" in (facts := e.get("event_data", {}).get("res", {})
                                   .get("ansible_facts", {}))]
    assert ids, "no plan in the run's events"
    return ids[-1]


def _jobs(sim) -> list[dict]:
    from a3rl.sim import podman

    out = podman.exec_(sim.members()[0].container, "python3", "-c",
                       "import urllib.request; print(urllib.request.urlopen("
                       "'http://127.0.0.1:8260/api/jobs/').read().decode())").stdout
    return json.loads(out)


@pytest.mark.parametrize("algo", ["grpo", "dapo"])
def test_a_run_end_to_end_to_its_report(up, algo):
    result = play(TRAIN, up.inventory_dir,
                  extravars={"algo": algo, "overrides": SHORT, "train_job_poll": 1})
    assert result.ok, failure_text(result)
    # `a3rl demo`'s second play: no warning from Ansible (issue 23).
    assert ansible_warnings(result) == []
    ident = _submission_id(result)
    # Following showed progress: every poll carried the job's step (none before the first
    # step line), and the last one the final step of the total verl announced.
    follow = [e["event_data"]["res"] for e in _events(result)
              if e["event"] in ("runner_retry", "runner_on_ok")
              and e["event_data"].get("task") == "Train | Follow the job until it ends"]
    assert len(follow) >= 2 and all("progress" in r for r in follow), follow
    seen = [r["progress"]["step"] or 0 for r in follow]
    assert seen == sorted(seen) and follow[-1]["progress"]["step"] == 2
    assert follow[-1]["progress"]["total_steps"] == 2
    assert "perf/throughput" in follow[-1]["progress"]["metrics"]
    stdout = "".join(p.read_text() for p in result.record.glob("artifacts/*/stdout"))
    assert f"{ident} SUCCEEDED, step 2/2: " in stdout
    assert ident.startswith(f"a3rl-{algo}-qwen3_32b-real-")
    run = project_root() / "runs" / ident
    steps = metrics.read_jsonl(run / "metrics.jsonl")
    assert [s["step"] for s in steps] == [1, 2]
    assert "perf/throughput" in steps[0]
    report = (run / "report.md").read_text()
    assert (run / "metrics.png").stat().st_size > 1000
    log = (run / "job.log").read_text()
    if algo == "dapo":
        assert all(s["simulated"] for s in steps) and "train/num_gen_batches" in steps[0]
        assert ident in report and "simulated" in report.lower()
        assert "STAND-IN" in log
        # The stand-in reserved every NPU of both nodes through Ray; each node saw its own.
        assert "reserving 2 x 16 NPUs" in log
        for n in (1, 2):
            assert f"node {n}/2: " in log and f": node{n} (" in log
        assert log.count("(16 devices") == 2
    else:
        # Real verl: its own metric lines, scores from the configured reward, the layer
        # acting in the workers, one worker on the second node (Ray prefixes its lines
        # with that node's address), and the label.
        assert not any(s.get("simulated") for s in steps)
        assert all("critic/score/mean" in s and "actor/pg_loss" in s for s in steps)
        assert "STAND-IN trainer" not in log
        assert "a3rl verl CPU stand-in: verl.workers.rollout.base" in log
        assert "using customized reward function 'compute_score' from " in log
        assert "(WorkerDict pid=" in log and f", ip={up.members()[1].ip})" in log
        assert "real verl on CPU, tiny model: not comparable with the recipe's figures" in report
        assert "trainer.device: npu -> cpu" in report
    again = play(TRAIN, up.inventory_dir, extravars={"algo": algo, "overrides": SHORT})
    assert again.ok and again.changed == 0, again.stats.get("changed")
    assert sum(j.get("submission_id") == ident for j in _jobs(up)) == 1


def test_no_second_submit_while_running_then_stop(up):
    # Long enough to be stopped: the CPU profile's few rows are one step's worth an epoch.
    args = {"algo": "grpo", "overrides": ["trainer.total_training_steps=200",
                                          "trainer.total_epochs=100"],
            "train_job_follow": False}
    first = play(TRAIN, up.inventory_dir, extravars=args)
    assert first.ok and first.changed > 0, failure_text(first)
    ident = _submission_id(first)
    second = play(TRAIN, up.inventory_dir, extravars=args)
    assert second.ok and second.changed == 0, second.stats.get("changed")
    assert sum(j.get("submission_id") == ident for j in _jobs(up)) == 1
    # Real verl: stop it once its workers run on both nodes; none is left afterwards.
    assert _wait(lambda: all(_trainers(up, n) for n in up.members()), 600), \
        [_trainers(up, n) for n in up.members()]
    stopped = play(TRAIN, up.inventory_dir, extravars={**args, "train_job_action": "stop"})
    assert stopped.ok and stopped.changed > 0, failure_text(stopped)
    state = {j["submission_id"]: j["status"] for j in _jobs(up)}
    assert state[ident] == "STOPPED"
    assert _wait(lambda: not any(_trainers(up, n) for n in up.members()), 120), \
        [_trainers(up, n) for n in up.members()]
    status = play(TRAIN, up.inventory_dir, extravars={**args, "train_job_action": "status"})
    assert status.ok and status.changed == 0
    # An ended job is submitted again only when asked, under the same id.
    rerun = play(TRAIN, up.inventory_dir, extravars={**args, "train_job_rerun": True})
    assert rerun.ok and rerun.changed > 0, failure_text(rerun)
    state = {j["submission_id"]: j["status"] for j in _jobs(up)}
    assert state[ident] in ("PENDING", "RUNNING")
    assert sum(j.get("submission_id") == ident for j in _jobs(up)) == 1
    again = play(TRAIN, up.inventory_dir, extravars={**args, "train_job_rerun": True})
    assert again.ok and again.changed == 0  # active: never submitted twice
    assert play(TRAIN, up.inventory_dir, extravars={**args, "train_job_action": "stop"}).ok


def test_a_failing_job_fails_the_play_with_its_id_and_last_lines(up):
    # A data file removed from the nodes: real verl's own loader fails, and the play quotes
    # it. (Three steps: a plan of its own, not the end-to-end test's ended job.)
    from a3rl.sim import podman

    data = "/data/a3rl/data/deepscaler/train.parquet"
    for node in up.members():
        podman.exec_(node.container, "mv", data, data + ".aside")
    try:
        result = play(TRAIN, up.inventory_dir, extravars={
            "algo": "grpo", "overrides": ["trainer.total_training_steps=3"]})
    finally:
        for node in up.members():
            podman.exec_(node.container, "mv", data + ".aside", data)
    assert not result.ok
    text = failure_text(result)
    ident = _submission_id(result)
    assert f"job {ident} FAILED" in text, text
    # verl's own error, raised in the staged, patched verl of the working directory
    last = text.split("Last log lines:", 1)[1]
    assert f"FileNotFoundError: Unable to find '{data}'" in last, text
    assert "/data/a3rl/llm_rl/qwen3/verl/" in last, text
    assert (project_root() / "runs" / ident / "job.log").is_file()


def _trainers(sim, node) -> list[str]:
    """verl's trainer processes (Ray actors) in the node's training container."""
    from a3rl.sim import podman

    out = podman.exec_(node.container, "docker", "exec", "a3rl-train", "ps", "-eo", "args",
                       check=False).stdout
    return [line for line in out.splitlines()
            if line.startswith(("ray::WorkerDict", "ray::TaskRunner"))]


def _wait(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(3)
    return cond()


def test_a_hydra_typo_is_refused_naming_the_key_before_submit(up):
    before = len(_jobs(up))
    result = play(TRAIN, up.inventory_dir,
                  extravars={"algo": "grpo", "overrides": ["trainer.nnode=2"]})
    assert not result.ok
    assert "trainer.nnode" in failure_text(result) and "Nothing was submitted" in failure_text(
        result)
    assert len(_jobs(up)) == before


@pytest.mark.parametrize(("extravars", "needle"), [
    ({"model": "qwen3_235b", "weights": "random"}, "needs at least 128 NPUs"),
    ({"features": "resampler", "overrides": ["data.shuffle=True"]}, "shuffle"),
    # The pinned recipe predates the resampler's module (issue 19 item 10).
    ({"features": "resampler"}, "It comes with recipe commit ba7be607"),
    ({"features": "warp_drive"}, "unknown feature"),
    ({"weights": "random"}, "no random-weights grpo run for qwen3_32b"),
])
def test_invalid_plans_are_refused_before_anything_is_submitted(up, extravars, needle):
    before = len(_jobs(up))
    result = play(TRAIN, up.inventory_dir, extravars={"algo": "grpo", **extravars})
    assert not result.ok
    assert needle in failure_text(result), failure_text(result)
    assert len(_jobs(up)) == before


def test_the_plan_cli_prints_the_job_without_a_cluster(capsys):
    from a3rl.cli import main

    assert main(["plan", "--algo", "grpo", "--model", "qwen3_235b", "--nodes", "8"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["config_name"] == "ppo_megatron_trainer"
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=4" in job["overrides"]
