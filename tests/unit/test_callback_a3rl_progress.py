"""The a3rl_progress callback: a followed job's step and metrics, once per change."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from a3rl.paths import project_root


def _plugin():
    path = project_root() / "plugins" / "callback" / "a3rl_progress.py"
    spec = importlib.util.spec_from_file_location("a3rl_progress_cb", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cb = mod.CallbackModule()
    shown: list[str] = []
    cb._display = SimpleNamespace(display=shown.append)
    return cb, shown


def _result(res: dict, host: str = "node1"):
    return SimpleNamespace(_result=res, _host=SimpleNamespace(get_name=lambda: host))


def test_each_change_is_printed_once_and_other_tasks_are_ignored():
    cb, shown = _plugin()
    job = {"submission_id": "a3rl-grpo-x", "status": "RUNNING"}
    start = {"step": None, "total_steps": None, "metrics": {}}
    step1 = {"step": 1, "total_steps": 2, "simulated": True,
             "metrics": {"perf/throughput": 114.25, "timing_s/step": 4875.11}}
    cb.v2_runner_retry(_result({"job": job, "progress": start}))
    cb.v2_runner_retry(_result({"job": job, "progress": start}))
    cb.v2_runner_retry(_result({"job": job, "progress": step1}))
    cb.v2_runner_on_ok(_result({"changed": False, "msg": "another task"}))
    cb.v2_runner_on_ok(_result({"job": {**job, "status": "SUCCEEDED"}, "progress": step1}))
    assert shown == [
        "[node1] a3rl-grpo-x RUNNING, no step logged yet",
        "[node1] a3rl-grpo-x RUNNING, step 1/2: perf/throughput=114.2 timing_s/step=4875 "
        "(simulated)",
        "[node1] a3rl-grpo-x SUCCEEDED, step 1/2: perf/throughput=114.2 timing_s/step=4875 "
        "(simulated)",
    ]
