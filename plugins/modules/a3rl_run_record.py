#!/usr/bin/python
"""Ansible module (controller only): a training run's record, metrics and report."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_run_record
short_description: Parse a run's log into metrics and write its report under runs/<submission-id>/
description:
  - Runs on the controller (C(delegate_to: localhost)) with the project's Python.
  - Reads C(job.log) in I(run_dir), writes C(metrics.jsonl) (verl's console metrics per
    step, a3rl.node.metrics), C(plan.json), C(status.json), and C(report.md) with
    C(metrics.png) beside the recipe's published figures (a3rl.controller.report).
options:
  run_dir:
    description: The run's folder on the controller.
    type: path
    required: true
  plan:
    description: >-
      The plan (the job as a3rl.planning.plan rendered it, with algo, model, weights,
      features).
    type: dict
    required: true
  status:
    description: The job's record from Ray's job API.
    type: dict
    required: true
  attempt_id:
    description:
      - The submission id of the attempt recorded (the run's first, or C(<run id>-r<k>)).
        Its status goes to C(attempts/<id>.json); C(job.log) is made of every attempt's
        log in C(attempts/), in attempt order, and the report gets the run's goodput
        (a3rl.controller.goodput).
    type: str
  attempt_records:
    description: Ray's records of every attempt of the run, each written to C(attempts/<id>.json).
    type: list
    elements: dict
    default: []
"""

RETURN = r"""
steps:
  description: Steps parsed from the log.
  type: int
  returned: always
summary:
  description: a3rl.node.metrics.summary of the steps.
  type: dict
  returned: always
report:
  description: The markdown report's path.
  type: str
  returned: always
goodput:
  description: a3rl.controller.goodput.goodput of the run's attempts.
  type: dict
  returned: always
supervisor:
  description:
    - What the run supervisor did (C(supervisor/) in the run record, when it ran) -
      C(result), C(why) of its last event, C(events), and each forensic bundle's
      first-failure line.
  type: dict
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "plan": {"type": "dict", "required": True},
            "status": {"type": "dict", "required": True},
            "attempt_id": {"type": "str"},
            "attempt_records": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        from pathlib import Path

        from a3rl.controller import goodput, report
        from a3rl.node import metrics
        from a3rl.planning import checkpointing
    except ImportError as e:
        module.fail_json(msg=f"the controller's Python lacks the a3rl package ({e}). Fix: run "
                             "ansible-playbook from the project's venv (make venv).")
    p = module.params
    run = Path(p["run_dir"])
    attempts_dir = run / "attempts"
    if p["attempt_id"] and not module.check_mode:
        attempts_dir.mkdir(parents=True, exist_ok=True)
        for record in p["attempt_records"]:
            if record.get("submission_id"):
                _write(attempts_dir / f"{record['submission_id']}.json", record)
        _write(attempts_dir / f"{p['attempt_id']}.json", p["status"])
    supervised = _supervisor(run / "supervisor")
    # Every attempt's record and log, in attempt order: the run's log is their sequence.
    ids = sorted({f.name.rsplit(".", 1)[0] for f in attempts_dir.glob("*.json")}
                 | {f.name.rsplit(".", 1)[0] for f in attempts_dir.glob("*.log")},
                 key=checkpointing.attempt_of) if attempts_dir.is_dir() else []
    texts = [_read(attempts_dir / f"{i}.log") for i in ids]
    log = run / "job.log"
    text = "".join(t if not t or t.endswith("\n") else t + "\n" for t in texts) if ids \
        else (_read(log) if log.exists() else "")
    steps = metrics.parse_log(text)
    records = [_load(attempts_dir / f"{i}.json") or {"submission_id": i} for i in ids] \
        or [p["status"]]
    figures = goodput.goodput(records, [metrics.parse_log(t) for t in texts] if ids else [steps])
    if module.check_mode:
        module.exit_json(changed=False, steps=len(steps), summary=metrics.summary(steps),
                         report=str(run / "report.md"), goodput=figures, supervisor=supervised)
    os.makedirs(run, exist_ok=True)
    if ids:
        tmp = run / "job.log.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, log)
    metrics.write_jsonl(run / "metrics.jsonl", steps)
    _write(run / "plan.json", p["plan"])
    _write(run / "status.json", p["status"])
    md, _png = report.render(run, p["plan"], steps, p["status"], goodput=figures,
                             attempts=records, supervisor=supervised)
    module.exit_json(changed=True, steps=len(steps), summary=metrics.summary(steps),
                     report=str(md), goodput=figures, supervisor=supervised)


def _supervisor(folder):
    """The supervisor's story as the play copied it: its events and bundles' summaries."""
    events = []
    for line in _read(folder / "events.jsonl").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    if not events:
        return {}
    bundles = []
    for summary in sorted((folder / "bundles").glob("*/summary.json")):
        data = _load(summary) or {}
        bundles.append({"attempt": summary.parent.name, "line": data.get("line", ""),
                        "warnings": data.get("warnings") or [],
                        "folder": str(summary.parent)})
    last = events[-1]
    return {"result": (_load(folder / "state.json") or {}).get("result"),
            "why": last.get("why", ""), "events": events, "bundles": bundles}


def _write(path, data):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _read(path):
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    main()
