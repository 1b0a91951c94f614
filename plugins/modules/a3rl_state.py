#!/usr/bin/python
"""Ansible module: probe or record a role's converged state on a node (a3rl.node.state).

Called through the action of the same name (plugins/action/a3rl_state.py), which adds the
key of the role's inputs; see that file and docs/architecture.md for how roles use it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_state
short_description: Probe or record whether a role's state on a node is as it left it
description:
  - C(probe) observes the watched items and compares them, and the inputs' key, with the
    stamp the role recorded after it last converged; reports C(converged) and the reasons
    it is not. A stale stamp is removed (kept in check mode).
  - C(record) observes the watched items and writes the stamp (temporary name, renamed).
    Nothing is written in check mode.
  - Never reports a change - the stamp is the project's own bookkeeping, not the node's
    configuration.
options:
  role:
    description: The role's name; the stamp is C(<dir>/<role>.json).
    type: str
    required: true
  mode:
    description: probe or record.
    type: str
    choices: [probe, record]
    default: probe
  key:
    description: The key of the role's inputs (the action computes it).
    type: str
    required: true
  inputs:
    description: The digest of each input by name (kept in the stamp to say which changed).
    type: dict
    default: {}
  watch:
    description: The items to observe, by kind (files, git, units, containers, images, commands).
    type: dict
    default: {}
  dir:
    description: Folder of the stamps.
    type: path
    default: /var/lib/a3rl/state
  tools:
    description:
      - Commands the role's tasks need on the node. Those not on C(PATH) are returned in
        C(missing_tools), so the role asks the package manager only for them (a package
        task per node and run costs a module run that reads the package cache).
    type: list
    elements: str
    default: []
"""

RETURN = r"""
converged:
  description: The stamp exists, its key matches and every watched item is as recorded.
  type: bool
  returned: mode probe
reasons:
  description: Why the role is not converged on this node.
  type: list
  returned: mode probe
missing_tools:
  description: The commands of C(tools) that are not on C(PATH), in the order given.
  type: list
  returned: always
"""

import shutil

from ansible.module_utils.a3rl_state import StateError, probe, record, stamp_path
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "role": {"type": "str", "required": True},
            "mode": {"type": "str", "choices": ["probe", "record"], "default": "probe"},
            "key": {"type": "str", "required": True, "no_log": False},
            "inputs": {"type": "dict", "default": {}},
            "watch": {"type": "dict", "default": {}},
            "dir": {"type": "path", "default": "/var/lib/a3rl/state"},
            "tools": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    missing = [t for t in p["tools"] if shutil.which(t) is None]
    try:
        path = stamp_path(p["dir"], p["role"])
        if p["mode"] == "record":
            if module.check_mode:
                module.exit_json(changed=False, recorded=False, missing_tools=missing)
            module.exit_json(changed=False, recorded=True, missing_tools=missing,
                             **record(path, p["key"], p["inputs"], p["watch"]))
        module.exit_json(changed=False, missing_tools=missing,
                         **probe(path, p["key"], p["inputs"], p["watch"]))
    except StateError as e:
        module.fail_json(msg=f"a3rl_state ({p['role']}): {e}")
    except OSError as e:
        module.fail_json(msg=f"a3rl_state ({p['role']}): {e}. Fix: check {p['dir']} on the node.")


if __name__ == "__main__":
    main()
