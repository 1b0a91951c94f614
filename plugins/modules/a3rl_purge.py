#!/usr/bin/python
"""Ansible module: remove what the project's records say it placed on a node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_purge
short_description: Remove the files the project's records name, and say what was kept
description:
  - Each entry names one kind of record (see a3rl.node.purge) - stamped (verified copies and
    their stamps), tree (the files of the tree a git checkout carrying the project's ref
    placed, unedited; or a folder holding the project's record file), files (named files
    in a folder).
  - Nothing else under an entry's top folder is removed; what stays is returned as kept.
  - Check mode - reports what would be removed, removes nothing.
options:
  entries:
    description: The records to purge by.
    type: list
    elements: dict
    required: true
"""

RETURN = r"""
removed:
  description: The removed paths and their bytes.
  type: dict
  returned: always
kept:
  description: Per top folder, the files left there (count, the first paths).
  type: dict
  returned: always
changed_since:
  description: Recorded files whose size or content changed since they were placed (kept).
  type: list
  returned: always
repositories_kept:
  description: Trees whose repository (.git) stays, because other files stay beside it or
    it holds refs of its own.
  type: list
  returned: always
behind_links:
  description: Recorded paths reached through a folder that is a symbolic link (kept, with
    their stamps).
  type: list
  returned: always
"""

from ansible.module_utils import a3rl_purge as engine
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={"entries": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    try:
        result = engine.purge(module.params["entries"], check=module.check_mode)
    except (engine.PurgeError, OSError) as e:
        module.fail_json(msg=f"{e}. Fix: correct teardown_purge_records.")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
