#!/usr/bin/python
"""Ansible module: the Ray cluster's jobs, from the job REST API on the head."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_ray_jobs
short_description: List, submit, read or stop the jobs of a Ray cluster through its REST API
description:
  - Run it on the head. C(list) reads C(GET /api/jobs/) and returns every job and the
    active ones (PENDING or RUNNING). C(stop) asks Ray to stop the active jobs (or the
    given ones) and waits until they reach a terminal state.
  - C(submit) submits I(entrypoint) under I(submission_ids[0]) once; a job with that id
    (running or finished) is reported, never submitted again. C(status) returns one
    job's record, C(logs) its log.
  - With token authentication the token is read from a file on the node, so it never
    appears in the task's arguments or in logs.
  - Check mode - C(list) runs; C(stop) reports what it would stop.
options:
  url:
    description: The dashboard's base URL as the head reaches it.
    type: str
    required: true
  token_env_file:
    description: An env file holding C(RAY_AUTH_MODE) and C(RAY_AUTH_TOKEN); missing means no token.
    type: path
  action:
    description: list, stop, submit, status or logs.
    type: str
    choices: [list, stop, submit, status, logs]
    default: list
  submission_ids:
    description: The jobs to stop (default - every active job).
    type: list
    elements: str
  dest:
    description: With C(logs), write the log to this file on the head (returns its last lines).
    type: path
  entrypoint:
    description: The job's command (submit).
    type: str
  runtime_env:
    description: Ray runtime_env of the job (submit), e.g. C(env_vars), C(working_dir).
    type: dict
  metadata:
    description: Job metadata (submit).
    type: dict
  wait:
    description: Seconds to wait for stopped jobs to reach a terminal state.
    type: int
    default: 60
  reachable_only:
    description: When the API does not answer, report it instead of failing (no Ray running).
    type: bool
    default: false
  progress:
    description:
      - With C(status), also read the job's log and return where the job is - the latest
        step and its metrics, parsed from verl's console lines (C(a3rl.node.metrics.progress)).
    type: bool
    default: false
  rerun:
    description:
      - With C(submit), a job with this id that has ended (succeeded, failed or stopped)
        is deleted from Ray's job list and submitted again. An active job is never
        submitted twice.
    type: bool
    default: false
  supervisor_state:
    description:
      - With C(status), the run supervisor's C(state.json) on the head (run_supervisor
        role). When it exists, the job read is the attempt it follows (its
        C(submission_id)), and C(supervisor) returns the state (C(result) once the run is
        done, stopped by its user, or given up).
    type: path
  mask:
    description:
      - Values (a run's secrets) replaced by C(********) in every log text the module
        returns, keeps or writes (C(logs), the tail and progress of C(status)), because
        verl prints its resolved config, secrets included, to the job's log.
    type: list
    elements: str
    default: []
  tail_file:
    description:
      - With C(status) and I(progress), keep the log's last lines in this file on the head
        at every poll, and return them as C(tail) (with C(progress.step) as last seen)
        when the job's record is gone (the head restarted) or the API does not answer,
        so that a follow that loses its job can still say where it was.
    type: path
"""

RETURN = r"""
reachable:
  description: Whether the API answered.
  type: bool
  returned: always
jobs:
  description: Every job (submission_id, status, entrypoint, ...).
  type: list
  returned: always
active:
  description: One line per PENDING or RUNNING job.
  type: list
  returned: always
stopped:
  description: The jobs asked to stop.
  type: list
  returned: action=stop
over:
  description: >-
    Whether a follow is done: the attempt succeeded or was stopped, or failed or is
    unknown to Ray with no supervisor at work on it.
  type: bool
  returned: action=status
lost:
  description: Ray does not know the attempt (the head restarted, or it was deleted).
  type: bool
  returned: action=status
resuming:
  description: A run supervisor is at work on the run (its state has no result yet).
  type: bool
  returned: action=status
supervisor:
  description: The run supervisor's state (C(submission_id), C(tries), C(result)), or empty.
  type: dict
  returned: action=status with supervisor_state
progress:
  description: C(step), C(total_steps), C(simulated) and the latest step's C(metrics).
  type: dict
  returned: action=status with progress
tail:
  description: The log's last lines (C(logs)); with C(status) and I(tail_file), the ones kept there.
  type: list
  returned: action=logs, or action=status with tail_file
"""

import json
import os
import time

from ansible.module_utils.a3rl_metrics import progress
from ansible.module_utils.a3rl_rayjobs import (
    TERMINAL,
    RayApiError,
    active,
    auth_headers,
    delete,
    describe,
    follow_state,
    job,
    list_jobs,
    logs,
    masked_text,
    stop,
    submit,
)
from ansible.module_utils.basic import AnsibleModule

TAIL_LINES = 30


def keep_tail(path, text, where):
    """Replace ``path`` with the log's last lines and the progress seen with them."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"tail": text.splitlines()[-TAIL_LINES:], "progress": where}, f)
    os.replace(tmp, path)


def kept_tail(path):
    """What :func:`keep_tail` last kept, or empty when nothing was."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data.get("tail") or [], data.get("progress") or {}
    except (OSError, ValueError, AttributeError):
        return [], {}


def read_state(path):
    """The run supervisor's state.json, or empty when there is none (yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "token_env_file": {"type": "path"},
            "action": {"type": "str", "choices": ["list", "stop", "submit", "status", "logs"],
                       "default": "list"},
            "entrypoint": {"type": "str"},
            "dest": {"type": "path"},
            "runtime_env": {"type": "dict"},
            "metadata": {"type": "dict"},
            "submission_ids": {"type": "list", "elements": "str"},
            "wait": {"type": "int", "default": 60},
            "reachable_only": {"type": "bool", "default": False},
            "progress": {"type": "bool", "default": False},
            "tail_file": {"type": "path"},
            "mask": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "rerun": {"type": "bool", "default": False},
            "supervisor_state": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    headers = auth_headers(p["token_env_file"])
    keeps_tail = p["action"] == "status" and p["progress"] and p["tail_file"]
    try:
        jobs = list_jobs(p["url"], headers)
    except RayApiError as e:
        if keeps_tail:
            tail, where = kept_tail(p["tail_file"])
            module.fail_json(msg=f"the Ray job API on the head does not answer ({e})",
                             reachable=False, tail=tail, progress=where)
        if p["reachable_only"]:
            module.exit_json(changed=False, reachable=False, error=str(e), jobs=[], active=[],
                             stopped=[])
        module.fail_json(msg=f"the Ray job API on the head does not answer ({e}). Fix: start "
                             "Ray (playbooks/ray.yml), or check a3rl_ray_dashboard_bind.")
    running = active(jobs)
    result = {"reachable": True, "jobs": jobs, "active": [describe(j) for j in running]}
    if p["action"] == "list":
        module.exit_json(changed=False, **result)
    one = (p["submission_ids"] or [None])[0]
    if p["action"] == "status" and p["supervisor_state"]:
        state = read_state(p["supervisor_state"])
        result["supervisor"] = state
        one = state.get("submission_id") or one
    if p["action"] in ("submit", "status", "logs") and not one:
        module.fail_json(msg=f"action {p['action']} needs submission_ids: [<id>]")
    try:
        if p["action"] == "status":
            record = job(p["url"], headers, one) or {}
            if p["progress"] and record:
                text = masked_text(logs(p["url"], headers, one), p["mask"])
                result["progress"] = progress(text)
                if keeps_tail:
                    keep_tail(p["tail_file"], text, result["progress"])
                    result["tail"] = text.splitlines()[-TAIL_LINES:]
            elif keeps_tail:
                result["tail"], result["progress"] = kept_tail(p["tail_file"])
            # (the follow's failed_when may fail a result that the module returned: its
            # message then says what was seen, not Ansible's "Unknown error")
            module.exit_json(changed=False, job=record, msg=f"job {one}: " + (
                record.get("status") or "?" if record else "not known to Ray"),
                **follow_state(record, result.get("supervisor")), **result)
        if p["action"] == "logs":
            text = masked_text(logs(p["url"], headers, one), p["mask"])
            tail = text.splitlines()[-30:]
            if p["dest"]:
                with open(p["dest"], "w", encoding="utf-8") as f:
                    f.write(text)
                module.exit_json(changed=False, tail=tail, bytes=len(text.encode()), **result)
            module.exit_json(changed=False, logs=text, tail=tail, **result)
        if p["action"] == "submit":
            if not p["entrypoint"]:
                module.fail_json(msg="action submit needs entrypoint")
            existing = job(p["url"], headers, one)
            if existing is not None and p["rerun"] and existing.get("status") in TERMINAL:
                result["rerun_of"] = existing
                if module.check_mode:
                    module.exit_json(changed=True, submitted=False, job=existing, **result)
                if not delete(p["url"], headers, one):
                    module.fail_json(msg=f"Ray did not delete the ended job {one}, so it "
                                         "cannot be submitted again", **result)
                existing = None
            if existing is not None or module.check_mode:
                module.exit_json(changed=existing is None, submitted=False,
                                 job=existing or {}, **result)
            got = submit(p["url"], headers, one, p["entrypoint"], p["runtime_env"],
                         p["metadata"])
            module.exit_json(changed=got["submitted"], submitted=got["submitted"],
                             job=got["job"], **result)
    except RayApiError as e:
        if keeps_tail:
            result["tail"], result["progress"] = kept_tail(p["tail_file"])
        module.fail_json(msg=str(e), **result)
    ids = p["submission_ids"] or [j.get("submission_id") for j in running]
    ids = [i for i in ids if i and i in {j.get("submission_id") for j in running}]
    if module.check_mode or not ids:
        module.exit_json(changed=bool(ids), stopped=ids, **result)
    try:
        for ident in ids:
            stop(p["url"], headers, ident)
        deadline = time.monotonic() + p["wait"]
        while time.monotonic() < deadline:
            left = [j for j in active(list_jobs(p["url"], headers))
                    if j.get("submission_id") in ids]
            if not left:
                break
            time.sleep(1)
        else:
            module.fail_json(msg="job(s) still running after the stop request: "
                                 + ", ".join(describe(j) for j in left), **result)
    except RayApiError as e:
        module.fail_json(msg=str(e), **result)
    module.exit_json(changed=True, stopped=ids, **result)


if __name__ == "__main__":
    main()
