#!/usr/bin/python
"""Ansible module: the recipe working directory composed from the staged source trees."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_workdir
short_description: Compose the recipe working directory (build_project layout) from source trees
description:
  - Places files and folders of the source trees into the working directory by an ordered
    layout list (as the recipe's C(build_project.sh) copies them) and records the result
    as a commit of a git repository there.
  - Sources are git checkouts on the node (I(sources)) or folders inside the training
    image (I(image_sources)), copied out of I(image) as files through a container that
    is created, never started, and removed; build products come along (vLLM-Ascend's
    compiled extension and C(_cann_ops_custom)); C(__pycache__) and C(.git) do not.
  - An unchanged composition changes nothing; the commit's message names the inputs
    (checkout commits, image id, a digest with the layout), and the same inputs copy
    nothing out of the image again. A
    changed one is staged as C(refs/a3rl/staged); the working tree does not change
    here. M(a3rl_patch_series) applies the series to it and switches the tracked files
    to the result in one step, or leaves the previous tree when a patch does not apply.
  - Supports check mode (a changed image is reported, not copied out).
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
    description: >-
      Ordered entries C({from, path, to}); C(path) is a file, folder or glob in the
      source.
    type: list
    elements: dict
    required: true
  image:
    description: The training image (name:tag) the I(image_sources) are copied out of.
    type: str
    default: ""
  image_sources:
    description: Sources by name that are folders inside I(image) (name to absolute folder).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Frameworks | Build the working directory
  a3rl_workdir:
    workdir: /data/a3rl/llm_rl/qwen3
    sources: {recipe: /data/a3rl/src/recipe}
    image: a3rl/verl-cann:8.5.0-a3
    image_sources: {verl: /workspace/verl}
    layout:
      - {from: recipe, path: llm_rl/qwen3, to: .}
      - {from: verl, path: verl, to: verl}
"""

RETURN = r"""
commit:
  description: The composition's commit (pristine, or staged for the series).
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
            "image": {"type": "str", "default": ""},
            "image_sources": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = build_workdir(p["workdir"], p["sources"], p["layout"], check=module.check_mode,
                               image=p["image"], image_sources=p["image_sources"])
    except StageError as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
