"""Ansible callback: print a followed training job's progress while the play waits on it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: a3rl_progress
type: aggregate
short_description: Show where a followed Ray job is (step, total, key metrics) on every poll
description:
  - The training play follows its job with an until-loop (C(a3rl_ray_jobs) action
    C(status) with C(progress)). Ansible's own output only says that the loop retries;
    this callback prints the job's state, step and latest key metrics instead, once per
    change, so a plain C(ansible-playbook) run shows the job moving.
  - Results without a C(progress) key are ignored, so it stays quiet for every other task.
requirements:
  - enabled in ansible.cfg (C(callbacks_enabled)) with the project's C(a3rl) package importable
"""

from ansible.plugins.callback import CallbackBase

try:
    from a3rl.node.metrics import progress_line
except ImportError:  # the venv's package is missing: say the step only
    def progress_line(progress):
        step, total = progress.get("step"), progress.get("total_steps")
        return "no step logged yet" if step is None else f"step {step}/{total or '?'}"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "a3rl_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._last: dict[str, str] = {}

    def _show(self, result) -> None:
        res = result._result
        progress = res.get("progress")
        if not isinstance(progress, dict):
            return
        host = result._host.get_name()
        job = res.get("job") or {}
        line = (f"{job.get('submission_id', 'job')} {job.get('status', '?')}, "
                f"{progress_line(progress)}")
        if self._last.get(host) != line:
            self._last[host] = line
            self._display.display(f"[{host}] {line}")

    def v2_runner_retry(self, result):
        self._show(result)

    def v2_runner_on_ok(self, result):
        self._show(result)
