#!/usr/bin/python
"""Ansible module: the recipe working directory composed from the staged source trees."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_workdir
short_description: Compose the recipe working directory (build_project layout) from source trees
description:
  - Places files and folders of the source trees into the working directory by an ordered
    layout list (as the recipe's C(build_project.sh) copies them) and records the result
    as the pristine commit C(refs/a3rl/pristine) of a git repository there.
  - An unchanged composition changes nothing. A changed one switches the tracked files
    to the new pristine tree (the patch series is applied afterwards); untracked files -
    caches, outputs, data - are left alone.
  - Supports check mode.
options:
  workdir:
    description: The working directory.
    type: path
    required: true
  sources:
    description: Source trees by name (name to checkout folder).
    type: dict
    required: true
  layout:
    description: Ordered entries C({from, path, to}); C(path) is a file, folder or glob in the source.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Frameworks | Build the working directory
  a3rl_workdir:
    workdir: /data/a3rl/llm_rl/qwen3
    sources: {verl: /data/a3rl/src/verl}
    layout:
      - {from: verl, path: verl, to: verl}
"""

RETURN = r"""
commit:
  description: The pristine commit.
  type: str
  returned: when the sources are staged
tree:
  description: The pristine tree.
  type: str
  returned: when the sources are staged
"""

from ansible.module_utils.a3rl_stage import StageError, build_workdir
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "workdir": {"type": "path", "required": True},
            "sources": {"type": "dict", "required": True},
            "layout": {"type": "list", "elements": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = build_workdir(p["workdir"], p["sources"], p["layout"], check=module.check_mode)
    except StageError as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
