#!/usr/bin/python
"""Ansible module: a training run's verl checkpoints and the free space where they go."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_checkpoints
short_description: Read a run's verl checkpoints, the newest complete one, and the free space
description:
  - Reads only; changes nothing (so it runs the same in check mode).
  - Returns the free bytes at I(root) (or its nearest existing parent) for the plan's
    space check, and, for I(run_dir), every C(global_step_N) folder with whether it is
    complete (verl's completion marker C(latest_checkpointed_iteration.txt) names its step
    or a later one, C(actor/) holds files and C(data.pt) exists), the newest complete one
    and why each newer one was skipped (C(a3rl.node.checkpoints)).
options:
  root:
    description: The folder under which the runs' checkpoint folders go.
    type: path
    required: true
  run_dir:
    description: The run's own checkpoint folder (default - none is read).
    type: path
"""

RETURN = r"""
free_bytes:
  description: Free bytes at I(root) or its nearest existing parent.
  type: int
  returned: always
free_at:
  description: The existing folder the free bytes were read at.
  type: str
  returned: always
marker:
  description: The step the completion marker names (null without one).
  type: int
  returned: with run_dir
checkpoints:
  description: Every checkpoint folder, newest first (step, path, complete, why).
  type: list
  returned: with run_dir
newest:
  description: The newest complete checkpoint (step, path), or null.
  type: dict
  returned: with run_dir
skipped:
  description: Why each checkpoint newer than C(newest) was skipped.
  type: list
  returned: with run_dir
"""

from ansible.module_utils.a3rl_checkpoints import free_bytes, newest_complete, scan
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "run_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    free, at = free_bytes(p["root"])
    result = {"changed": False, "free_bytes": free, "free_at": at}
    if p["run_dir"]:
        found = scan(p["run_dir"])
        newest, skipped = newest_complete(p["run_dir"])
        result.update(marker=found["marker"], checkpoints=found["checkpoints"],
                      newest=newest, skipped=skipped)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
