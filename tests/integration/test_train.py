"""The training play on the simulated cluster, end to end: plan, Hydra check against the
staged verl configs, submit through Ray's job API, follow, collect, report; double submit,
stop, a failing job, refused plans.

GRPO runs are REAL verl 0.6.0 on CPU (the plan's CPU profile, a3rl.sim.cpu_profile, with
the tiny random Qwen3 and one worker per node over gloo); DAPO runs (no CPU profile) and
the refused plans use the STAND-IN trainer (docs/testing.md, "Which trainer")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from a3rl.node import metrics
from a3rl.paths import project_root
from a3rl.sim import cluster

from .conftest import ansible_warnings, failure_text, play, provision

# The plays run on Ansible's default strategy, as `a3rl demo` runs train.yml: the module
# checks that such a run prints no Ansible warning (Mitogen's opt-in prints two).

TRAIN = "playbooks/train.yml"
# Where the run supervisor keeps its state on the head.
SUPERVISE_DIR = yaml.safe_load((project_root() / "group_vars/all/cluster.yml").read_text())[
    "a3rl_supervise_dir"]
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


# A secret-looking override (a3rl.masking): real verl resolves it from the job's env, and
# no record a3rl writes holds its value.
SECRET = "+trainer.a3rl_probe_token=pr0be-s3cr3t-v4lue"


@pytest.mark.parametrize("algo", ["grpo", "dapo"])
def test_a_run_end_to_end_to_its_report(up, algo):
    overrides = SHORT + ([SECRET] if algo == "grpo" else [])
    result = play(TRAIN, up.inventory_dir,
                  extravars={"algo": algo, "overrides": overrides, "train_job_poll": 1})
    assert result.ok, failure_text(result)
    # `a3rl demo`'s second play: no warning from Ansible (issue 23).
    assert ansible_warnings(result) == []
    ident = _submission_id(result)
    # Following showed progress: every poll carried the job's step (none before the first
    # step line), and the last one the final step of the total verl announced. Real verl
    # runs for minutes, so it is polled while it runs; the stand-in's two steps take about
    # 7 s, which a loaded machine can spend before the first poll.
    follow = [e["event_data"]["res"] for e in _events(result)
              if e["event"] in ("runner_retry", "runner_on_ok")
              and e["event_data"].get("task") == "Train | Follow the job until it ends"]
    assert len(follow) >= (2 if algo == "grpo" else 1), follow
    assert all("progress" in r for r in follow), follow
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
        # The secret: a reference on the job's command line, its value nowhere in the
        # run's record (plan.json, status.json with the job's runtime_env, report.md, the
        # log). (The play's own record is scrubbed by the runner whatever the role does.)
        value = SECRET.split("=", 1)[1]
        job = next(j for j in _jobs(up) if j.get("submission_id") == ident)
        assert "${oc.env:A3RL_SECRET_TRAINER_A3RL_PROBE_TOKEN}" in job["entrypoint"]
        assert value not in job["entrypoint"]
        assert job["runtime_env"]["env_vars"]["A3RL_SECRET_TRAINER_A3RL_PROBE_TOKEN"] == value
        leaked = [str(f) for f in run.rglob("*") if f.is_file()
                  and value.encode() in f.read_bytes()]
        assert not leaked, leaked
        assert "A3RL_SECRET_TRAINER_A3RL_PROBE_TOKEN" in (run / "status.json").read_text()
    again = play(TRAIN, up.inventory_dir, extravars={"algo": algo, "overrides": overrides})
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
    # it. (Three steps: a plan of its own, not the end-to-end test's ended job.) The
    # supervisor resumes it once (max_tries=1), that attempt fails the same way, and it
    # gives up, saying why, with no trainer process left and no device held (a leftover
    # of an earlier crash holds /dev/davinci0 in the worker's training container).
    from a3rl.sim import podman

    data = "/data/a3rl/data/deepscaler/train.parquet"
    for node in up.members():
        podman.exec_(node.container, "mv", data, data + ".aside")
    worker = up.members()[1].container
    podman.exec_(worker, "docker", "exec", "-d", "a3rl-train", "sh", "-c",
                 "exec 3</dev/davinci0; exec sleep 1001")
    assert _wait(lambda: _leftover(worker), 30)
    try:
        result = play(TRAIN, up.inventory_dir, extravars={
            "algo": "grpo", "overrides": ["trainer.total_training_steps=3"],
            "run_supervisor_max_tries": 1, "run_supervisor_backoff": 1,
            "run_supervisor_poll": 3})
    finally:
        for node in up.members():
            podman.exec_(node.container, "mv", data + ".aside", data)
    assert not result.ok
    text = failure_text(result)
    ident = _submission_id(result)
    assert f"job {ident}-r2 FAILED" in text, text
    assert "The supervisor gave up: 1 resumed attempt(s) failed (max_tries=1)" in text, text
    assert "left without trainer processes or held NPU devices" in " ".join(text.split())
    assert not any(_trainers(up, n) for n in up.members())
    assert not _leftover(worker)
    # verl's own error, raised in the staged, patched verl of the working directory
    last = text.split("Last log lines:", 1)[1]
    assert f"FileNotFoundError: Unable to find '{data}'" in last, text
    assert "/data/a3rl/llm_rl/qwen3/verl/" in last, text
    assert (project_root() / "runs" / ident / "job.log").is_file()


def _leftover(container: str) -> bool:
    from a3rl.sim import podman

    return podman.exec_(container, "docker", "exec", "a3rl-train", "pgrep", "-f", "sleep 1001",
                        check=False).returncode == 0


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


@pytest.mark.parametrize(("override", "needle"), [
    ("trainer.nnode=2", "trainer.nnode is not a key of ppo_megatron_trainer"),
    # A key the plan does not set but verl's config has: only Hydra knows it.
    ("+trainer.log_val_generations=0",
     "trainer.log_val_generations is already a key of ppo_megatron_trainer"),
], ids=["typo", "plus on a key the config has"])
def test_a_key_hydra_refuses_is_named_before_submit(up, override, needle):
    before = len(_jobs(up))
    result = play(TRAIN, up.inventory_dir, extravars={"algo": "grpo", "overrides": [override]})
    assert not result.ok
    assert needle in failure_text(result), failure_text(result)
    assert "Nothing was submitted" in failure_text(result)
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
    from a3rl.controller.cli import main

    assert main(["plan", "--algo", "grpo", "--model", "qwen3_235b", "--nodes", "8"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["config_name"] == "ppo_megatron_trainer"
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=4" in job["overrides"]


def _marker(sim, run_dir: str) -> int:
    """The step verl's completion marker names in the run's checkpoint folder, read on
    the host's side of the nodes' shared folder (0 before the first checkpoint)."""
    path = sim.state / "shared" / run_dir.removeprefix(cluster.SHARED_DIR + "/") \
        / "latest_checkpointed_iteration.txt"
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _stop_now(sim, ident: str) -> None:
    """Stop the job through Ray's job API on the head at once (a play takes seconds)."""
    from a3rl.sim import podman

    podman.exec_(sim.members()[0].container, "python3", "-c",
                 "import urllib.request; urllib.request.urlopen(urllib.request.Request("
                 f"'http://127.0.0.1:8260/api/jobs/{ident}/stop', method='POST')).read()")


# The supervisor's seconds scaled to the tiny model's steps of a few seconds (its
# defaults are for the recipe's steps of hours).
FAST = {"run_supervisor_poll": 3, "run_supervisor_backoff": 2, "run_supervisor_hang_floor": 45,
        "run_supervisor_whole_timeout": 600, "train_job_supervisor_hang_first_step": 600}


def _supervisor_events(run) -> list[dict]:
    return [json.loads(line) for line in
            (run / "supervisor" / "events.jsonl").read_text().splitlines()]


def _pids(sim, node, title: str) -> list[tuple[int, str]]:
    """(pid, state) of the training container's processes whose title starts so."""
    from a3rl.sim import podman

    out = podman.exec_(node.container, "docker", "exec", "a3rl-train", "ps", "-eo",
                       "pid=,stat=,args=", check=False).stdout
    found = []
    for line in out.splitlines():
        pid, stat, args = (line.strip().split(None, 2) + ["", ""])[:3]
        if args.startswith(title):
            found.append((int(pid), stat))
    return found


def _resumed_to_the_end(up, ident: str, folder: str, steps: int) -> list[dict]:
    """The run finished every step after one restart, resuming after a checkpoint."""
    run = project_root() / "runs" / ident
    events = _supervisor_events(run)
    resub = [e for e in events if e["event"] == "resubmitted"]
    assert len(resub) == 1 and resub[0]["submission_id"] == f"{ident}-r2", events
    assert resub[0]["resume_from"].startswith(f"{folder}/global_step_"), resub
    done = int(resub[0]["resume_from"].rsplit("_", 1)[1])
    assert done >= 1
    assert events[-1]["event"] == "succeeded", events[-1]
    log = (run / "job.log").read_text()
    assert f"Resuming from {folder}/global_step_{done}" in log
    assert [s["step"] for s in metrics.read_jsonl(run / "metrics.jsonl")] == \
        list(range(1, steps + 1))
    report = (run / "report.md").read_text()
    assert "| restarts | 1 |" in report and "goodput (productive / wall)" in report
    return events


def test_a_killed_worker_is_found_first_and_the_run_resumed_by_the_supervisor(up):
    # The supervisor follows the run on the head; the controller is not needed: the
    # operator's `a3rl train` is interrupted (Ctrl-C, to its whole process group) while it
    # follows, and the same command later only reads what happened.
    from a3rl.sim import podman

    steps = 5
    args = {"algo": "grpo", "train_job_poll": 2, **FAST,
            "overrides": [f"trainer.total_training_steps={steps}", f"trainer.total_epochs={steps}"]}
    before = {j["submission_id"] for j in _jobs(up)}
    command = [str(Path(sys.executable).parent / "a3rl"), "train", "-i", str(up.inventory_dir),
               "--algo", "grpo", *(f"--override={o}" for o in args["overrides"]),
               *(f"-e{k}={v}" for k, v in args.items() if k not in ("algo", "overrides"))]
    follow = subprocess.Popen(command, cwd=project_root(), start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    worker = up.members()[1]
    try:
        assert _wait(lambda: {j["submission_id"] for j in _jobs(up)} - before, 300), _jobs(up)
        (ident,) = {j["submission_id"] for j in _jobs(up)} - before
        folder = f"/shared/checkpoints/{ident}"
        assert _wait(lambda: _marker(up, folder) >= 2, 600), _jobs(up)
        # The worker node's training container dies (its Ray with it: the job fails), then
        # is started again (Docker does not restart a killed container) and the node's Ray
        # unit rejoins the cluster: the supervisor waits for that before it resumes.
        podman.exec_(worker.container, "docker", "kill", "a3rl-train")
        assert follow.poll() is None, "the follow ended before it was interrupted"
        os.killpg(follow.pid, signal.SIGINT)
        assert follow.wait(120) != 0
    finally:
        if follow.poll() is None:
            os.killpg(follow.pid, signal.SIGKILL)
    assert _wait(lambda: _status(up, ident) == "FAILED", 300), _jobs(up)
    podman.exec_(worker.container, "docker", "start", "a3rl-train")
    followed = play(TRAIN, up.inventory_dir, extravars=args)
    assert followed.ok, failure_text(followed)
    # Followed again, never submitted again: one first attempt, the supervisor's second.
    ids = [j["submission_id"] for j in _jobs(up)]
    assert ids.count(ident) == 1 and ids.count(f"{ident}-r2") == 1, ids
    events = _resumed_to_the_end(up, ident, folder, steps)
    assert any(e["event"] in ("failed", "hang") for e in events), events
    bundle = project_root() / "runs" / ident / "supervisor" / "bundles" / ident
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["first"]["host"] == worker.hostname, summary
    # The nodes share one clock on the simulator: the offset is measured, not guessed.
    assert abs(summary["offsets"][up.members()[0].hostname]) < 1.0, summary["offsets"]
    assert summary["line"].startswith(f"first failure: {worker.hostname} at "), summary
    assert (bundle / "driver.log").stat().st_size > 0
    assert {p.name for p in bundle.glob("*.json")} >= {"summary.json", "node1.json"}


def test_a_hang_is_resumed_a_user_stop_is_not_and_resume_skips_a_cut_checkpoint(up):
    # Real verl on CPU, a checkpoint every step (the policy's default for real weights:
    # the recipe's step takes longer than the 60-minute bound), on the nodes' shared folder.
    # Each test here has a plan of its own (its number of steps), so its own submission id.
    # The step-based bound at an hour, the stall bound at 60 s: only the stall bound can
    # find the hang in time, and it must not fire on the healthy attempts (model load,
    # the first rollout) before and after it.
    from a3rl.sim import podman

    steps = 6
    args = {"algo": "grpo", "train_job_poll": 2, **FAST, "run_supervisor_hang_floor": 3600,
            "train_job_supervisor_hang_first_step": 3600, "run_supervisor_stall_bound": 60,
            "overrides": [f"trainer.total_training_steps={steps}", f"trainer.total_epochs={steps}"]}
    first = play(TRAIN, up.inventory_dir, extravars={**args, "train_job_follow": False})
    assert first.ok, failure_text(first)
    ident = _submission_id(first)
    plan = [facts["train_job_plan"] for e in _events(first)
            if "train_job_plan" in (facts := e.get("event_data", {}).get("res", {})
                                    .get("ansible_facts", {}))][-1]
    folder = plan["checkpoint"]["dir"]
    assert folder == f"/shared/checkpoints/{ident}" and plan["checkpoint"]["save_freq"] == 1
    assert _wait(lambda: _marker(up, folder) >= 2, 600), _jobs(up)
    # A hang: the worker node's trainer stopped (SIGSTOP). The supervisor finds no
    # progress (log, CPU time, stacks) within the stall bound, bundles the stacks, stops
    # the attempt and resumes the run.
    worker = up.members()[1]
    pids = _pids(up, worker, "ray::WorkerDict")
    assert len(pids) == 1, pids
    podman.exec_(worker.container, "docker", "exec", "a3rl-train", "kill", "-STOP",
                 str(pids[0][0]))
    stopped_at = time.time()
    assert _wait(lambda: _status(up, f"{ident}-r2") in ("PENDING", "RUNNING"), 400), _jobs(up)
    run = project_root() / "runs" / ident
    hang = next(e for e in _supervisor_events_on_head(up, ident) if e["event"] == "hang")
    # Found by the stall bound within 120 s of the stop, its time to detection recorded.
    assert hang["bound"] == "stall", hang
    assert hang["time"] - stopped_at <= 120, (hang, stopped_at)
    assert 60 < hang["detection_s"] <= hang["time"] - stopped_at + 10, hang
    # The resumed attempt stopped by its user: the supervisor does not resume it.
    _stop_now(up, f"{ident}-r2")
    assert _wait(lambda: _status(up, f"{ident}-r2") == "STOPPED", 120), _jobs(up)
    # (until its supervisor has seen that and ended, a resume is refused: it would resume)
    assert _wait(lambda: _supervisor_events_on_head(up, ident)[-1]["event"]
                 == "stopped-by-user", 60), _supervisor_events_on_head(up, ident)
    done = _marker(up, folder)
    assert 2 <= done < steps, f"the run ended before it was stopped (marker {done})"
    # A save cut short: a newer folder the marker does not cover is skipped, and said.
    cut = up.state / "shared" / "checkpoints" / ident / f"global_step_{steps + 1}" / "actor"
    cut.mkdir(parents=True)
    (cut / "model_world_size_2_rank_0.pt").write_bytes(b"cut short")
    resumed = play(TRAIN, up.inventory_dir, extravars={**args, "train_job_resume": True})
    assert resumed.ok, failure_text(resumed)
    # (the YAML callback folds a long message over lines: compared with single spaces)
    stdout = " ".join("".join(p.read_text() for p in resumed.record.glob(
        "artifacts/*/stdout")).split())
    assert f"{ident} resumes from {folder}/global_step_{done}" in stdout, stdout[-3000:]
    assert (f"global_step_{steps + 1} has no completion marker: "
            f"latest_checkpointed_iteration.txt names step") in stdout
    assert f"{ident}-r3 SUCCEEDED, step {steps}/{steps}" in stdout, stdout[-3000:]
    # verl's own words: it loaded the checkpoint and went on from its step, not step 0.
    assert f"Resuming from {folder}/global_step_{done}" in (run / "job.log").read_text()
    assert [s["step"] for s in metrics.read_jsonl(run / "metrics.jsonl")] == \
        list(range(1, steps + 1))
    assert {p.name for p in (run / "attempts").iterdir()} >= {
        f"{i}.{x}" for i in (ident, f"{ident}-r2", f"{ident}-r3") for x in ("log", "json")}
    report = (run / "report.md").read_text()
    assert "| restarts | 2 |" in report
    assert f"| time to detection | hang (stall bound) {hang['detection_s']:.0f} s |" in report
    # Every save verl timed (timing_s/save_checkpoint), over the wall time.
    assert "| checkpoint overhead (save / wall) | " in report
    assert "| checkpoint overhead (save / wall) | - |" not in report
    # The hang's bundle holds the stopped process's stacks (py-spy works on the simulator).
    node = json.loads((run / "supervisor" / "bundles" / ident / f"{worker.hostname}.json")
                      .read_text())
    stuck = [t for t in node["trainers"] if t["pid"] == pids[0][0]]
    assert stuck and stuck[0]["state"] == "T", node["trainers"]
    assert stuck[0]["stack"]["tool"] == "py-spy", stuck[0]["stack"]
    assert "Thread" in stuck[0]["stack"]["text"], stuck[0]["stack"]["text"][:2000]
    # A plain re-run follows the newest attempt and submits nothing; the attempt the user
    # stopped stays stopped (nothing resumed it).
    again = play(TRAIN, up.inventory_dir, extravars=args)
    assert again.ok and again.changed == 0, failure_text(again)
    # (Ray lists the supervisor's own drivers too, without a submission id)
    state = {j["submission_id"]: j["status"] for j in _jobs(up) if j.get("submission_id")}
    assert state[f"{ident}-r2"] == "STOPPED" and state[f"{ident}-r3"] == "SUCCEEDED"
    assert not any(s.startswith(f"{ident}-r4") for s in state)


def _status(sim, sid: str) -> str | None:
    return next((j["status"] for j in _jobs(sim) if j.get("submission_id") == sid), None)


def _supervisor_events_on_head(sim, run_id: str) -> list[dict]:
    """The supervisor's events as it writes them on the head (the run record has them
    once a play has followed the run)."""
    from a3rl.sim import podman

    out = podman.exec_(sim.members()[0].container, "cat",
                       f"{SUPERVISE_DIR}/{run_id}/events.jsonl").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]
