"""The run supervisor's decisions, with Ray's API and the per-node actions faked: what it
tells apart (done, stopped by the user, failed, hung), what it does about it (bundle,
clean, wait for a whole cluster, resubmit from the newest complete checkpoint, give up
after K tries) and the bundle's first-failure summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from a3rl.node import checkpoints, first_failure, supervisor

NODES = {"node1": "10.0.0.1", "node2": "10.0.0.2"}
HEALTHY_SMI = """\
+------------------------------------------------------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 180.0       40                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3000 / 65536         |
+===========================+===============+====================================================+
"""


class FakeClock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeApi:
    """Ray's job API: each job's states over successive polls (the last one repeats)."""

    def __init__(self, clock: FakeClock, script: dict[str, list[tuple[str, str]]]):
        self.clock = clock
        self.script = script
        self.polls: dict[str, int] = {}
        self.submitted: list[tuple[str, str]] = []
        self.stopped: list[str] = []
        self.earlier: set[str] = set()  # attempts of an earlier run under the same id
        self.node_list = [{"node_ip": ip, "state": "ALIVE", "resources_total": {"NPU": 1}}
                          for ip in NODES.values()]

    def _now(self, sid):
        """The state the last job() call returned (its log goes with it)."""
        states = self.script[sid]
        i = max(self.polls.get(sid, 0) - 1, 0)
        return states[min(i, len(states) - 1)]

    def job(self, sid):
        # A resumed attempt is known to Ray once it was submitted.
        if sid not in self.script or ("-r" in sid and sid not in dict(self.submitted)
                                      and sid not in self.earlier):
            return None
        if sid in self.stopped:
            return {"submission_id": sid, "status": "STOPPED", "start_time": 0}
        self.polls[sid] = self.polls.get(sid, 0) + 1
        status, _ = self._now(sid)
        return {"submission_id": sid, "status": status, "message": f"{sid} says {status}",
                "start_time": 1000, "entrypoint": dict(self.submitted).get(sid)}

    def logs(self, sid):
        return self._now(sid)[1]

    def stop(self, sid):
        self.stopped.append(sid)
        return True

    def submit(self, sid, entrypoint, runtime_env, metadata):
        self.submitted.append((sid, entrypoint))
        self.script.setdefault(sid, [("RUNNING", "step:1 - a:1"), ("SUCCEEDED", "")])
        return {"submitted": True, "job": {}}

    def nodes(self):
        return self.node_list


class FakeOps:
    def __init__(self, clock=None):
        self.clock = clock
        self.progress = None  # the nodes' answer to ``progress`` at a time, when set
        self.calls: list[str] = []
        self.left: dict[str, list[dict]] = {}
        self.health = {ip: {"npu_smi": {"rc": 0, "out": HEALTHY_SMI, "err": ""},
                            "net_health": {"0": "net health status: Success"}}
                       for ip in NODES.values()}

    def __call__(self, action, args):
        self.calls.append(action)
        if action == "health":
            return {"nodes": self.health}
        if action == "progress":
            return {"nodes": self.progress(self.clock.now)} if self.progress else {}
        if action == "kill":
            return {"nodes": {ip: {"killed": [{"title": "ray::WorkerDict"}],
                                   "left": self.left.get(ip, [])}
                              for ip in NODES.values()}}
        return {"nodes": {ip: {"clock": 5.0, "head_clock": 5.0, "clock_error": 0.01,
                               "logs": {}, "trainers": []} for ip in NODES.values()}}


def _sup(tmp_path: Path, script, ckpt_dir: Path | None = None, **cfg):
    clock = FakeClock()
    api = FakeApi(clock, script)
    ops = FakeOps(clock)
    job = {"entrypoint": "cd /w && python3 -m verl.trainer.main_ppo --config-path=/c "
                         "--config-name=ppo_trainer trainer.save_freq=1",
           "config_name": "ppo_trainer", "overrides": ["trainer.save_freq=1"], "env": {}}
    config = {"run_id": "run", "submission_id": "run", "url": "http://x", "state_dir":
              str(tmp_path), "nodes": NODES, "npus_per_node": 1, "job": job,
              "checkpoint": {"dir": str(ckpt_dir) if ckpt_dir else None},
              "poll_s": 5, "backoff_s": 10, "hang_first_step_s": 300, "hang_floor_s": 60,
              # The stall bound off but where a test turns it on (its node reads are
              # ops calls the other tests do not count).
              "stall_bound_s": 0, "ops_command": ["false"], **cfg}
    sup = supervisor.Supervisor(config, api=api, ops=ops, clock=clock, sleep=clock.sleep)
    return sup, api, ops


def _events(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]


def _checkpoint(folder: Path, step: int) -> None:
    (folder / f"global_step_{step}" / "actor").mkdir(parents=True)
    (folder / f"global_step_{step}" / "actor" / "model.pt").write_bytes(b"x")
    (folder / f"global_step_{step}" / "data.pt").write_bytes(b"x")
    (folder / checkpoints.MARKER).write_text(str(step))


def test_a_run_that_succeeds_is_left_alone(tmp_path):
    sup, api, ops = _sup(tmp_path, {"run": [("RUNNING", "step:1 - a:1"), ("SUCCEEDED", "")]})
    assert sup.run() == 0
    assert api.submitted == [] and ops.calls == []
    assert json.loads((tmp_path / "state.json").read_text())["result"] == "succeeded"


def test_a_job_the_user_stopped_is_never_resumed(tmp_path):
    sup, api, ops = _sup(tmp_path, {"run": [("RUNNING", ""), ("STOPPED", "")]})
    assert sup.run() == 0
    assert api.submitted == [] and "kill" not in ops.calls
    assert _events(tmp_path)[-1]["event"] == "stopped-by-user"


def test_the_stop_action_marks_a_run_its_supervisor_was_resuming(tmp_path):
    # Between a failure and the resubmission the job is FAILED, not STOPPED: the play's
    # stop action (its unit stopped first) says so in the state, once.
    config = {"run_id": "run", "submission_id": "run", "url": "http://x",
              "state_dir": str(tmp_path)}
    (tmp_path / "state.json").write_text(json.dumps(
        {"run_id": "run", "submission_id": "run-r2", "tries": 1, "result": None}))
    assert supervisor.mark_stopped(config) is True
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["result"] == "stopped-by-user" and state["submission_id"] == "run-r2"
    assert _events(tmp_path)[-1]["event"] == "stopped-by-user"
    assert supervisor.mark_stopped(config) is False
    assert len(_events(tmp_path)) == 1


def test_a_failed_job_is_bundled_cleaned_and_resumed_from_the_newest_complete(tmp_path):
    ckpt = tmp_path / "ckpt"
    _checkpoint(ckpt, 1)
    _checkpoint(ckpt, 2)
    (ckpt / "global_step_3" / "actor").mkdir(parents=True)  # cut short: no marker for it
    sup, api, ops = _sup(tmp_path / "state", {"run": [("RUNNING", "step:2 - a:1"),
                                                      ("FAILED", "")]}, ckpt_dir=ckpt)
    (tmp_path / "state").mkdir()
    assert sup.run() == 0
    assert [sid for sid, _ in api.submitted] == ["run-r2"]
    entry = api.submitted[0][1]
    assert f"trainer.resume_from_path={ckpt}/global_step_2" in entry
    assert entry.startswith("cd /w && python3 -m verl.trainer.main_ppo")
    kinds = [e["event"] for e in _events(tmp_path / "state")]
    assert kinds == ["follow", "failed", "bundle", "cleaned", "backoff", "whole",
                     "resubmitted", "succeeded"]
    resub = _events(tmp_path / "state")[6]
    assert resub["skipped"] == ["global_step_3 has no completion marker: "
                                "latest_checkpointed_iteration.txt names step 2, so its save "
                                "did not finish"]
    assert ops.calls[:2] == ["report", "kill"]
    bundle = tmp_path / "state" / "bundles" / "run"
    assert (bundle / "summary.json").exists() and (bundle / "node2.json").exists()
    assert (bundle / "driver.log").exists()


def test_the_bundle_holds_no_secret_of_the_run(tmp_path):
    # verl prints its resolved config, secrets included, to the job's log and its workers'.
    secret = 'w4ndb-"key'
    sup, api, ops = _sup(tmp_path, {"run": [("RUNNING", f"api_key: {secret}\nstep:1"),
                                            ("FAILED", f"api_key: {secret}")]},
                         max_tries=0)
    sup.cfg["job"]["env"] = {"A3RL_SECRET_TRAINER_WANDB_API_KEY": secret, "HCCL_X": "1"}
    report = ops.__call__

    def ops_with_logs(action, args):
        got = report(action, args)
        if action == "report":
            for node in got["nodes"].values():
                node["logs"] = {"worker.out": f"(TaskRunner) api_key: {secret}"}
        return got
    sup.ops = ops_with_logs
    assert sup.run() == 0
    bundle = tmp_path / "bundles" / "run"
    texts = {p.name: p.read_text() for p in bundle.iterdir()}
    assert "node1.json" in texts and "driver.log" in texts
    assert not [n for n, t in texts.items() if "w4ndb" in t], texts
    assert supervisor.rayjobs.MASK in texts["driver.log"]
    assert supervisor.rayjobs.MASK in json.loads(texts["node1.json"])["logs"]["worker.out"]


def test_a_secret_in_a_failed_jobs_message_never_reaches_the_events(tmp_path, capsys):
    """issue 53: Ray's message of a FAILED job holds the tail of its log; the events (file
    and output) mask the run's own secret values in it."""
    secret = 'w4ndb-"key'
    sup, api, ops = _sup(tmp_path, {"run": [("FAILED", "")]}, max_tries=0)
    sup.cfg["job"]["env"] = {"A3RL_SECRET_TRAINER_WANDB_API_KEY": secret}
    failed = api.job
    api.job = lambda sid: {**failed(sid), "message": f"Job failed: api_key: {secret}"} \
        if failed(sid) else None
    assert sup.run() == 0
    text = (tmp_path / "events.jsonl").read_text()
    assert "w4ndb" not in text and "w4ndb" not in capsys.readouterr().out
    assert f"the job failed: Job failed: api_key: {supervisor.rayjobs.MASK}" in text


def test_a_hang_is_detected_within_its_bound_stopped_and_resumed(tmp_path):
    # Steps every 5 s (one per poll), then none: the bound is max(60, 3 x 5) = 60 s.
    script = [("RUNNING", "step:1 - a:1"), ("RUNNING", "step:2 - a:1"),
              ("RUNNING", "step:3 - a:1")]
    sup, api, ops = _sup(tmp_path, {"run": script})
    assert sup.run() == 0
    hang = next(e for e in _events(tmp_path) if e["event"] == "hang")
    assert "more than the bound of 60 s" in hang["why"] and "last step 3" in hang["why"]
    # Detected by the first poll past the bound (polls every 5 s).
    stuck_since = 1_000_000.0 + 2 * 5
    assert 60 < hang["time"] - stuck_since <= 60 + 5
    assert api.stopped == ["run"]
    # The stacks are taken before anything is stopped.
    assert ops.calls.index("report") < ops.calls.index("kill")
    assert [sid for sid, _ in api.submitted] == ["run-r2"]
    # No complete checkpoint: the attempt starts from step 0, and says so.
    assert "trainer.resume_mode=disable" in api.submitted[0][1]


def _trainers(moving_until: float, cpu_rate: float = 0.0, stacks: bool = True):
    """The nodes' ``progress`` answers: stacks that change until ``moving_until``, then
    stay (a stopped worker, its peers waiting); CPU time at ``cpu_rate`` cores."""
    def at(now):
        frozen = min(now, moving_until)
        return {ip: {"trainers": [{"pid": 7 + n, "cpu": cpu_rate * now,
                                   "stack": f"{ip}:{frozen}" if stacks else None}],
                     "npu_smi": None} for n, ip in enumerate(NODES.values())}
    return at


def test_a_stall_is_found_in_its_bound_long_before_the_step_bound(tmp_path):
    # The step bound at an hour, the stall bound at 60 s: the worker stops at +30 s.
    steps = [("RUNNING", f"step:{i} - a:1") for i in (1, 2, 3)]
    sup, api, ops = _sup(tmp_path, {"run": steps}, stall_bound_s=60,
                         hang_first_step_s=3600, hang_floor_s=3600)
    stuck = 1_000_000.0 + 30
    ops.progress = _trainers(stuck)
    assert sup.run() == 0
    hang = next(e for e in _events(tmp_path) if e["event"] == "hang")
    assert hang["bound"] == "stall", hang
    assert "more than the stall bound of 60 s" in hang["why"]
    # Nodes read every 10 s (a sixth of the bound): found at most a read past the bound.
    assert 60 < hang["detection_s"] <= 60 + 10
    assert 60 < hang["time"] - stuck <= 60 + 2 * 10
    assert [sid for sid, _ in api.submitted] == ["run-r2"]
    assert ops.calls.count("progress") >= 8


def test_the_step_bound_stays_the_backstop_when_every_node_looks_busy(tmp_path):
    # Stacks frozen but no py-spy (None) and a core busy: the stall bound sees progress.
    steps = [("RUNNING", f"step:{i} - a:1") for i in (1, 2, 3)]
    sup, api, ops = _sup(tmp_path, {"run": steps}, stall_bound_s=60)
    ops.progress = _trainers(0, cpu_rate=1.0, stacks=False)
    assert sup.run() == 0
    hang = next(e for e in _events(tmp_path) if e["event"] == "hang")
    assert hang["bound"] == "step" and "no new step for" in hang["why"]
    # The stall tracker saw progress at the last read: its quiet time is the detection.
    assert hang["detection_s"] <= 10


def test_a_healthy_start_up_never_trips_the_stall_bound(tmp_path):
    # No trainer process for 5 minutes (the driver imports, Ray places actors), then
    # model load and the first rollout: CPU time, no step line, no log.
    script = [("RUNNING", "")] * 80 + [("RUNNING", "step:1 - a:1"), ("SUCCEEDED", "")]
    sup, api, ops = _sup(tmp_path, {"run": script}, stall_bound_s=60,
                         hang_first_step_s=3600)
    start = 1_000_000.0

    def at(now):
        if now < start + 300:
            return {ip: {"trainers": [], "npu_smi": None} for ip in NODES.values()}
        return _trainers(0, cpu_rate=0.9, stacks=False)(now)
    ops.progress = at
    assert sup.run() == 0
    assert [e["event"] for e in _events(tmp_path)] == ["follow", "succeeded"]
    # Watched all along: the nodes read every 10 s, through start-up and the step.
    assert ops.calls.count("progress") >= 40


def test_a_failures_time_to_detection_is_since_ray_ended_the_job(tmp_path):
    sup, api, ops = _sup(tmp_path, {"run": [("RUNNING", ""), ("FAILED", "")]}, max_tries=0)
    job = api.job
    api.job = lambda sid: {**r, "end_time": 1_000_002_000} if (r := job(sid)) and \
        r["status"] == "FAILED" else r
    assert sup.run() == 0
    failed = next(e for e in _events(tmp_path) if e["event"] == "failed")
    assert failed["detection_s"] == 3.0  # failed at +2 s, seen by the poll at +5 s


def test_the_resumed_attempt_saves_at_the_measured_interval(tmp_path):
    # A save of 1 s measured by the failed attempt: Young/Daly (MTBF of 2 cards from the
    # Llama 3 rate) is thousands of steps, capped by the plan's save_freq.
    log = "step:1 - timing_s/step:5.0 - timing_s/save_checkpoint:1.0"
    sup, api, ops = _sup(tmp_path, {"run": [("RUNNING", log), ("FAILED", log)]})
    sup.cfg["job"] = {**sup.cfg["job"], "overrides": ["trainer.save_freq=4"]}
    assert sup.run() == 0
    resub = next(e for e in _events(tmp_path) if e["event"] == "resubmitted")
    assert "a save takes 1.0 s (measured), a step 5.0 s" in resub["save_freq"]
    assert "capped at 4 by the lost-work bound" in resub["save_freq"]
    assert "trainer.save_freq=4" in api.submitted[0][1]


def test_it_gives_up_after_max_tries_and_leaves_no_trainer(tmp_path):
    always = [("RUNNING", ""), ("FAILED", "")]
    script = {"run": always, "run-r2": always, "run-r3": always}
    sup, api, ops = _sup(tmp_path, script, max_tries=2)
    assert sup.run() == 0
    assert [sid for sid, _ in api.submitted] == ["run-r2", "run-r3"]
    last = _events(tmp_path)[-1]
    assert last["event"] == "gave-up" and "2 resumed attempt(s) failed" in last["why"]
    assert "left without trainer processes or held NPU devices" in last["why"]
    assert ops.calls[-1] == "kill"
    # Backoff doubles: 10 s, then 20 s.
    assert [e["seconds"] for e in _events(tmp_path) if e["event"] == "backoff"] == [10, 20]
    # A restarted unit (systemd) reads the result and does nothing more.
    again, api2, _ = _sup(tmp_path, script, max_tries=2)
    assert again.run() == 0 and api2.submitted == []


@pytest.mark.parametrize(("change", "needle"), [
    (lambda api, ops: api.node_list.pop(), "node2: 0 live raylets listed"),
    (lambda api, ops: api.node_list.append(dict(api.node_list[0])),
     "node1: 2 live raylets listed"),
    (lambda api, ops: ops.health["10.0.0.2"].update(
        npu_smi={"rc": 0, "out": HEALTHY_SMI.replace("| OK ", "| Alarm"), "err": ""}),
     "node2: NPU 0 chip 0 (/dev/davinci0) reports health Alarm"),
    (lambda api, ops: ops.health["10.0.0.1"].update(
        net_health={"0": "net health status: Fault"}), "node1: NPU port 0 net health Fault"),
])
def test_the_cluster_is_whole_only_when_every_check_passes(tmp_path, change, needle):
    sup, api, ops = _sup(tmp_path, {"run": [("SUCCEEDED", "")]})
    assert sup.whole_problems() == []
    change(api, ops)
    assert any(needle in p for p in sup.whole_problems()), sup.whole_problems()


def test_a_cluster_that_does_not_come_back_ends_the_run_with_the_reason(tmp_path):
    sup, api, ops = _sup(tmp_path, {"run": [("FAILED", "")]}, whole_timeout_s=30)
    api.node_list.pop()
    assert sup.run() == 0
    last = _events(tmp_path)[-1]
    assert last["event"] == "gave-up" and "did not become whole within 30 s" in last["why"]
    assert "node2: 0 live raylets" in last["why"] and api.submitted == []


def test_the_first_failure_is_a_dead_node_before_its_peers_errors():
    since = 0.0
    reports = {
        "node1": {"clock": 100.0, "head_clock": 100.0, "logs": {
            "/tmp/ray/session_x/logs/raylet.out":
                "[2026-12-05 13:20:01,123 E 12 34] node_manager.cc:1: peer went away"}},
        "node2": {"clock": 103.0, "head_clock": 100.0, "logs": {}},
    }
    s = first_failure.summarize(reports, dead=[{"host": "node2", "time": 5.0e9,
                                                "why": "health check failed"}],
                                expected=["node1", "node2"], since=since)
    assert s["first"]["host"] == "node2" and s["line"].startswith("first failure: node2")
    assert s["offsets"] == {"node1": 0.0, "node2": 3.0}
    assert any("node2's clock is +3.0 s off" in w for w in s["warnings"])
    # Without a death, the earliest error line across nodes, on the head's clock.
    s = first_failure.summarize(reports, dead=[], expected=["node1", "node2"], since=since)
    assert s["first"]["host"] == "node1" and "peer went away" in s["first"]["line"]


def test_error_lines_are_put_on_the_heads_clock_before_they_are_ordered():
    early = "[2026-12-05 13:20:01,000 E 1 1] a.cc:1: late node's first error"
    later = "[2026-12-05 13:20:02,000 E 1 1] b.cc:1: other error"
    reports = {"fast": {"clock": 10.0, "head_clock": 0.0, "logs": {"f.out": early}},
               "slow": {"clock": 0.0, "head_clock": 0.0, "logs": {"s.out": later}}}
    # "fast" runs 10 s ahead: its 13:20:01 is 13:19:51 on the head's clock.
    s = first_failure.summarize(reports, dead=[], expected=["fast", "slow"], since=0,
                                bound=60)
    assert s["first"]["host"] == "fast"
    reports["fast"]["clock"] = -10.0
    s = first_failure.summarize(reports, dead=[], expected=["fast", "slow"], since=0,
                                bound=60)
    assert s["first"]["host"] == "slow"


def test_a_traceback_without_timestamps_counts_at_its_files_last_write():
    lines = first_failure.error_lines(
        "/tmp/ray/session_x/logs/worker-1.err",
        "Traceback (most recent call last):\n  File x\nRuntimeError: boom\n", mtime=42.0)
    assert lines == [{"time": 42.0, "line": "RuntimeError: boom",
                      "source": "/tmp/ray/session_x/logs/worker-1.err (a traceback; its "
                                "last write)"}]


def test_cluster_ops_finds_trainer_processes_by_their_ray_titles(monkeypatch, tmp_path):
    from a3rl.node import cluster_ops

    procs = {"11": (b"ray::WorkerDict.actor_rollout_generate\0", "11 (ray::Work) T 1"),
             "12": (b"python3\0-m\0verl\0", "12 (python3) S 1"),
             "13": (b"ray::TaskRunner.run\0", "13 (ray::Task) R 1")}
    real_open = open

    def fake_open(path, mode="r", *a, **k):
        parts = str(path).split("/")
        if len(parts) == 4 and parts[1] == "proc" and parts[2] in procs:
            import io
            cmd, stat = procs[parts[2]]
            return io.BytesIO(cmd) if "b" in mode else io.StringIO(stat)
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(os, "listdir", lambda p: list(procs) + ["self"])
    monkeypatch.setattr("builtins.open", fake_open)
    found = cluster_ops.trainers()
    assert [(p["pid"], p["state"]) for p in found] == [(11, "T"), (13, "R")]


def test_giving_up_names_what_the_kill_left(tmp_path):
    always = [("RUNNING", ""), ("FAILED", "")]
    sup, api, ops = _sup(tmp_path, {"run": always, "run-r2": always}, max_tries=1)
    ip = next(iter(NODES.values()))
    ops.left = {ip: [{"pid": 7, "title": "python3 leftover", "devices": ["/dev/davinci3"]}]}
    assert sup.run() == 0
    last = _events(tmp_path)[-1]
    assert last["event"] == "gave-up"
    assert f"{ip}: pid 7 python3 leftover holding /dev/davinci3" in last["why"]
    assert "without trainer processes" not in last["why"]
    cleaned = [e for e in _events(tmp_path) if e["event"] == "cleaned"][-1]
    assert cleaned["left"] == {ip: ops.left[ip]}


def test_cluster_ops_kills_a_process_that_holds_a_device_file(tmp_path):
    # A real process with a stand-in device file open (a file named like /dev/davinciN
    # under tmp_path; the node's own /dev is not touched) and a trainer title no process
    # here has, so that nothing else on this machine is a target.
    import re
    import subprocess

    from a3rl.node import cluster_ops

    device = tmp_path / "davinci3"
    device.write_bytes(b"")
    pattern = re.compile(rf"^{re.escape(str(tmp_path))}/davinci[0-9]+$")
    with device.open("rb") as held:
        proc = subprocess.Popen(["sleep", "60"], stdin=held)
    try:
        found = cluster_ops.holders(pattern)
        assert [(p["pid"], p["devices"]) for p in found] == [(proc.pid, [str(device)])]
        got = cluster_ops.kill(settle=5, titles=("a3rl-test-no-such-title",), device=pattern)
        assert [p["pid"] for p in got["killed"]] == [proc.pid] and got["left"] == []
        proc.wait(timeout=5)
        assert proc.returncode == -9
        assert cluster_ops.holders(pattern) == []
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize(("status", "supervisor", "over", "lost", "resuming"), [
    ("RUNNING", {}, False, False, False),
    ("SUCCEEDED", {"result": None}, True, False, True),  # done whatever the supervisor does
    ("STOPPED", {"result": None}, True, False, True),  # the user's stop is never resumed
    ("FAILED", {}, True, False, False),  # no supervisor: the failure ends the follow
    ("FAILED", {"result": None}, False, False, True),  # the supervisor resumes it
    ("FAILED", {"result": "gave-up"}, True, False, False),
    (None, {"result": None}, False, True, True),  # Ray forgot it; the supervisor resumes
    (None, {}, True, True, False),
])
def test_a_follow_ends_when_nothing_will_resume_the_run(status, supervisor, over, lost,
                                                        resuming):
    from a3rl.node import rayjobs

    record = {"status": status} if status else {}
    assert rayjobs.follow_state(record, supervisor) == {
        "over": over, "lost": lost, "resuming": resuming}


class Crash(Exception):
    """The supervisor's process ending where it sleeps (a reboot, systemctl restart)."""


def _crash_at(clock: FakeClock, seconds: float):
    """A sleep that ends the process at the first wait of ``seconds``."""
    def sleep(wait):
        if wait == seconds:
            raise Crash
        clock.sleep(wait)
    return sleep


@pytest.mark.parametrize("crash_at", [10, 5])  # its backoff; its wait for a whole cluster
def test_a_restart_while_it_resumes_a_hung_run_carries_on_and_counts_the_try_once(
        tmp_path, crash_at):
    script = [("RUNNING", "step:1 - a:1"), ("RUNNING", "step:2 - a:1")]
    sup, api, ops = _sup(tmp_path, {"run": script}, whole_timeout_s=60)
    if crash_at == 10:  # its backoff (backoff_s 10)
        sup.sleep = _crash_at(sup.clock, crash_at)
    else:  # the first look at the cluster finds it short of a node
        api.node_list.pop()
    with pytest.raises(Crash):
        sup.run() if crash_at == 10 else _run_until_waiting(sup)
    assert api.stopped == ["run"]  # it stopped the hung job itself
    api.node_list = [{"node_ip": ip, "state": "ALIVE", "resources_total": {"NPU": 1}}
                     for ip in NODES.values()]
    again = supervisor.Supervisor(sup.cfg, api=api, ops=ops, clock=sup.clock,
                                  sleep=sup.clock.sleep)
    assert again.run() == 0
    kinds = [e["event"] for e in _events(tmp_path)]
    assert "stopped-by-user" not in kinds, kinds
    assert [sid for sid, _ in api.submitted] == ["run-r2"] and kinds[-1] == "succeeded"
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["tries"] == 1 and "recovering" not in state


def _run_until_waiting(sup):
    """run() with the first wait for a whole cluster crashing."""
    real = sup.sleep

    def sleep(wait):
        if any(e["event"] == "waiting" for e in _events(Path(sup.dir))):
            raise Crash
        real(wait)
    sup.sleep = sleep
    return sup.run()


def test_a_restart_between_the_submission_and_its_save_submits_the_attempt_once(tmp_path):
    sup, api, ops = _sup(tmp_path, {"run": [("FAILED", "")]})
    real_submit = api.submit

    def submit_then_crash(*args):
        real_submit(*args)
        raise Crash
    api.submit = submit_then_crash
    with pytest.raises(Crash):
        sup.run()
    api.submit = real_submit
    again = supervisor.Supervisor(sup.cfg, api=api, ops=ops, clock=sup.clock,
                                  sleep=sup.clock.sleep)
    assert again.run() == 0
    assert [sid for sid, _ in api.submitted] == ["run-r2"]
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["tries"] == 1 and state["result"] == "succeeded"


@pytest.mark.parametrize("error", [
    lambda argv, **kw: (_ for _ in ()).throw(
        supervisor.subprocess.TimeoutExpired(argv, kw["timeout"])),
    lambda argv, **kw: (_ for _ in ()).throw(FileNotFoundError(2, "No such file", argv[0])),
])
def test_a_cluster_ops_call_that_hangs_or_cannot_start_counts_the_try_and_gives_up(
        tmp_path, monkeypatch, error):
    monkeypatch.setattr(supervisor.subprocess, "run", error)
    sup, api, _ = _sup(tmp_path, {"run": [("FAILED", "")]}, whole_timeout_s=30)
    sup.ops = sup._ops
    assert sup.run() == 0
    events = _events(tmp_path)
    assert any(e["event"] == "ops-failed" for e in events)
    last = events[-1]
    assert last["event"] == "gave-up" and "did not become whole" in last["why"], last
    assert "node1: not cleaned (cluster_ops kill" in last["why"]
    assert api.submitted == []
    assert json.loads((tmp_path / "state.json").read_text())["tries"] == 1


def test_no_answer_from_cluster_ops_is_neither_clean_nor_whole(tmp_path):
    sup, api, ops = _sup(tmp_path, {"run": [("FAILED", "")]}, whole_timeout_s=30)
    sup.ops = lambda action, args: {}
    assert sup.whole_problems() == ["node1: no answer to the health check",
                                    "node2: no answer to the health check"]
    assert sup.run() == 0
    last = _events(tmp_path)[-1]
    assert last["event"] == "gave-up" and "node2: not cleaned" in last["why"], last
    assert api.submitted == []


def test_a_node_cleaned_late_is_cleaned_before_the_run_is_resubmitted(tmp_path):
    sup, api, ops = _sup(tmp_path, {"run": [("FAILED", "")]})
    answers = iter([{"nodes": {"10.0.0.1": {"killed": []}}}])
    real = ops.__call__
    sup.ops = lambda action, args: next(answers, None) or real(action, args) \
        if action == "kill" else real(action, args)
    assert sup.run() == 0
    kinds = [e["event"] for e in _events(tmp_path)]
    assert kinds.count("cleaned") == 2 and kinds.index("cleaned", 4) < kinds.index("whole")
    assert [sid for sid, _ in api.submitted] == ["run-r2"]


def test_a_cut_state_is_read_from_its_copy_and_never_reset(tmp_path):
    always = [("RUNNING", ""), ("FAILED", "")]
    sup, api, ops = _sup(tmp_path, {"run": always, "run-r2": always}, max_tries=1)
    sup.sleep = _crash_at(sup.clock, 10)
    with pytest.raises(Crash):
        sup.run()
    (tmp_path / "state.json").write_text('{"run_id": "run", "submiss')  # cut
    again = supervisor.Supervisor(sup.cfg, api=api, ops=ops, clock=sup.clock,
                                  sleep=sup.clock.sleep)
    assert again.state["tries"] == 1
    (tmp_path / "state.json.prev").write_text("")
    with pytest.raises(supervisor.StateError, match="cannot be read"):
        supervisor.Supervisor(sup.cfg, api=api, ops=ops, clock=sup.clock)


def _main_config(tmp_path: Path, **cfg) -> Path:
    config = {"run_id": "run", "submission_id": "run", "url": "http://127.0.0.1:9",
              "state_dir": str(tmp_path / "state"), "nodes": NODES, "job": {"x": 1}, **cfg}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_a_missing_or_full_state_folder_ends_it_with_the_code_systemd_does_not_restart(
        tmp_path, monkeypatch, capsys):
    unit = (Path(__file__).parents[2] / "roles/run_supervisor/templates/etc/systemd/system"
            / "a3rl-supervise@.service.j2").read_text()
    assert f"RestartPreventExitStatus={supervisor.CANNOT_GO_ON}" in unit
    path = _main_config(tmp_path)
    assert supervisor.main(["supervisor.py", str(path)]) == supervisor.CANNOT_GO_ON
    err = capsys.readouterr().err
    assert "cannot go on: cannot write" in err and "events.jsonl" in err
    (tmp_path / "state").mkdir()

    def full(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(supervisor.os, "fsync", full)
    assert supervisor.main(["supervisor.py", "--stopped", str(path)]) == supervisor.CANNOT_GO_ON
    err = capsys.readouterr().err
    assert "No space left on device" in err and len(err.strip().splitlines()) == 1
    assert "Fix: free space in (or make)" in err and "a3rl-supervise@run.service" in err
    assert not list((tmp_path / "state").glob("*.tmp"))


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("poll_s", "30s", "run_supervisor_poll '30s' is not a number of seconds above 0"),
    ("hang_floor_s", "nan", "run_supervisor_hang_floor 'nan' is not a number of seconds"),
    ("backoff_max_s", "inf", "run_supervisor_backoff_max 'inf' is not a number of seconds"),
    ("max_tries", -1, "run_supervisor_max_tries -1 is not a whole number at least 0"),
    ("whole_timeout_s", "2h", "run_supervisor_whole_timeout '2h'"),
    ("net_check", "maybe", "run_supervisor_net_check 'maybe' is not true or false"),
    ("log_lines", 2.5, "run_supervisor_log_lines 2.5 is not a whole number"),
])
def test_a_setting_that_is_not_its_type_is_refused_naming_its_variable(key, value, needle):
    problems: list[str] = []
    assert supervisor.typed_setting(key, value, problems) is None
    assert len(problems) == 1 and needle in problems[0] and "Fix:" in problems[0], problems


def test_settings_given_as_strings_are_read_as_their_types():
    problems: list[str] = []
    got = {k: supervisor.typed_setting(k, v, problems) for k, v in
           [("poll_s", "30"), ("max_tries", "0"), ("net_check", "false"),
            ("hang_factor", 3), ("log_lines", 300.0)]}
    assert problems == []
    assert got == {"poll_s": 30.0, "max_tries": 0, "net_check": False, "hang_factor": 3.0,
                   "log_lines": 300}
    assert type(got["log_lines"]) is int


def test_a_config_with_a_bad_setting_ends_it_before_it_acts(tmp_path, capsys):
    path = _main_config(tmp_path, hang_floor_s=float("nan"))
    (tmp_path / "state").mkdir()
    assert supervisor.main(["supervisor.py", str(path)]) == supervisor.CANNOT_GO_ON
    assert "config.json's hang_floor_s nan" in capsys.readouterr().err
    assert not (tmp_path / "state" / "events.jsonl").exists()


def test_a_rerun_resumes_under_an_attempt_number_its_earlier_run_did_not_use(tmp_path):
    # The run's first life left run-r2 in Ray's list; the rerun's own next attempt is r3.
    sup, api, ops = _sup(tmp_path, {"run": [("FAILED", "")], "run-r2": [("FAILED", "")]})
    api.earlier.add("run-r2")
    assert sup.run() == 0
    assert [sid for sid, _ in api.submitted] == ["run-r3"]
    resubmitted = [e for e in _events(tmp_path) if e["event"] == "resubmitted"]
    assert [e["attempt"] for e in resubmitted] == [3]
    assert _events(tmp_path)[-1]["event"] == "succeeded"
    assert json.loads((tmp_path / "state.json").read_text())["tries"] == 1
