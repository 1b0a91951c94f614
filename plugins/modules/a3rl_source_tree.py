#!/usr/bin/python
"""Ansible module: a framework's source tree at its pinned commit, from its git bundle."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_source_tree
short_description: Check out a framework at its pinned commit from a git bundle (no network)
description:
  - Clones the bundle into I(dest) when missing and checks out I(commit) detached; an
    existing checkout at the commit with no local changes is left alone.
  - Submodules are checked out from their own bundles at their recorded commits.
  - The tree is managed - hand edits to tracked files are discarded and reported (put
    changes in the project's C(patches/) instead).
  - Supports check mode.
options:
  bundle:
    description: The git bundle on the node (holds C(refs/a3rl/pinned)).
    type: path
    required: true
  dest:
    description: The checkout folder.
    type: path
    required: true
  commit:
    description: The pinned commit id (from the store manifest).
    type: str
    required: true
  submodules:
    description: Submodules as C({path, bundle, commit}).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Frameworks | Check out verl
  a3rl_source_tree:
    bundle: /var/cache/a3rl/artifacts/git/verl.bundle
    dest: /data/a3rl/src/verl
    commit: 0123456789abcdef0123456789abcdef01234567
"""

RETURN = r"""
action:
  description: clone or checkout, when changed.
  type: str
  returned: when changed
discarded:
  description: Tracked files whose local changes were discarded.
  type: list
  returned: always
"""

from ansible.module_utils.a3rl_stage import StageError, checkout
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "bundle": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "commit": {"type": "str", "required": True},
            "submodules": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = checkout(p["bundle"], p["dest"], p["commit"], p["submodules"],
                          check=module.check_mode)
    except StageError as e:
        module.fail_json(msg=str(e))
    if result["discarded"]:
        module.warn(f"{p['dest']}: local changes discarded in {', '.join(result['discarded'])}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
