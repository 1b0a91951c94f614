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
    C(metrics.png) beside the recipe's published figures (a3rl.report).
options:
  run_dir:
    description: The run's folder on the controller.
    type: path
    required: true
  plan:
    description: The plan (the job as a3rl.plan rendered it, with algo, model, weights, features).
    type: dict
    required: true
  status:
    description: The job's record from Ray's job API.
    type: dict
    required: true
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
        },
        supports_check_mode=True,
    )
    try:
        from pathlib import Path

        from a3rl import report
        from a3rl.node import metrics
    except ImportError as e:
        module.fail_json(msg=f"the controller's Python lacks the a3rl package ({e}). Fix: run "
                             "ansible-playbook from the project's venv (make venv).")
    p = module.params
    run = Path(p["run_dir"])
    log = run / "job.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    steps = metrics.parse_log(text)
    if module.check_mode:
        module.exit_json(changed=False, steps=len(steps), summary=metrics.summary(steps),
                         report=str(run / "report.md"))
    os.makedirs(run, exist_ok=True)
    metrics.write_jsonl(run / "metrics.jsonl", steps)
    (run / "plan.json").write_text(json.dumps(p["plan"], indent=1, sort_keys=True) + "\n")
    (run / "status.json").write_text(json.dumps(p["status"], indent=1, sort_keys=True) + "\n")
    md, _png = report.render(run, p["plan"], steps, p["status"])
    module.exit_json(changed=True, steps=len(steps), summary=metrics.summary(steps),
                     report=str(md))


if __name__ == "__main__":
    main()
