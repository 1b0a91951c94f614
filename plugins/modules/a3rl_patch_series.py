#!/usr/bin/python
"""Ansible module: the recipe's patch series on its working directory, all or nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_patch_series
short_description: Apply the recipe's patch series to its working directory, atomically
description:
  - Applies the patches under I(recipe_patch_dir) (as the staged composition has them,
    when one waits) in the recipe's order
    (C(find ./patches -type f -name "*.patch" | sort -V), each with
    C(git apply --ignore-whitespace)), then those of each of I(extra_patch_dirs) in the
    same order. The plain files beside the patches (C(*.py)) are not copied anywhere;
    the recipe's patches import them as C(patches.verl...) from the working directory,
    and a patch may edit them like any other tracked file.
  - The working directory must be a git repository whose pristine content is
    C(refs/a3rl/pristine) (made by M(a3rl_workdir)). A new composition staged by
    M(a3rl_workdir) (C(refs/a3rl/staged)) is the base instead; it becomes pristine when
    the tracked files switch to it with the series applied. A series that does not apply
    to it leaves the previous tree, series and pristine commit.
  - All or nothing. The series is applied in a scratch index first; the tracked files
    switch to the result only when every patch applied. A patch that does not apply
    fails the task with its name, position, file and hunk, and nothing is changed.
  - Idempotent. The applied series is recorded in C(.git/a3rl/series.json); the task is
    unchanged when the series, the pristine commit and the tracked files are as recorded
    (and undoing the series gives the pristine tree). Anything else - an edited, added,
    removed or renamed patch, a new pristine commit, a hand edit - resets the tracked
    files to pristine and applies the whole series again.
  - Untracked files in the working directory (caches, outputs) are never touched.
  - Supports check mode; it writes nothing into the repository, and fails as the real
    run would when the series does not apply.
options:
  workdir:
    description: The recipe working directory (top of its git repository).
    type: path
    required: true
  recipe_patch_dir:
    description: The recipe's C(patches/) folder; a relative path is taken from I(workdir).
    type: path
    required: true
  extra_patch_dirs:
    description:
      - Folders of the project's own C(*.patch) files, applied after the recipe's, each
        in C(sort -V) order. A relative path is taken from I(workdir).
    type: list
    elements: path
    default: []
  recipe_strip:
    description:
      - git apply's C(-p) for the recipe's patches. The recipe writes them relative to
        the top of its repository (C(a/llm_rl/qwen3/verl/...) gives 3); the extra
        patches are relative to I(workdir) (C(-p1)).
    type: int
    default: 1
  state:
    description:
      - C(applied) puts the series on the tree.
      - C(pristine) returns the tracked files to C(refs/a3rl/pristine) and forgets the
        series.
    type: str
    choices: [applied, pristine]
    default: applied
"""

EXAMPLES = r"""
- name: Frameworks | Apply the recipe's patch series and the project's own patches
  a3rl_patch_series:
    workdir: /data/a3rl/llm_rl/qwen3
    recipe_patch_dir: patches
    extra_patch_dirs:
      - /data/a3rl/extra_patches

- name: Frameworks | Return the working directory to its pristine sources
  a3rl_patch_series:
    workdir: /data/a3rl/llm_rl/qwen3
    recipe_patch_dir: patches
    state: pristine
"""

RETURN = r"""
state:
  description:
    - C(unchanged), C(applied) (first run), C(reapplied) or C(would_apply) (check mode);
      with I(state=pristine) C(unchanged), C(reset) or C(would_reset).
  type: str
  returned: always
  sample: reapplied
applied:
  description: Labels of the patches in the order applied (C(patches/...), C(extra/...)).
  type: list
  elements: str
  returned: always
  sample: [patches/megatron/0001-megatron-bugfix-x.patch, extra/0001-a3rl-feature-y.patch]
digest:
  description: sha256 over the series (labels, contents); empty for I(state=pristine).
  type: str
  returned: always
reason:
  description: >-
    Why the series was (re)applied or reset (C(first run), C(series changed),
    C(pristine changed), C(tree drifted), C(reverse check failed), ...); empty when unchanged.
  type: str
  returned: always
  sample: series changed
tree:
  description: The git tree id the tracked files now have (or would have, in check mode).
  type: str
  returned: always
"""

import os  # noqa: E402 - after the documentation blocks, as Ansible modules are laid out

from ansible.module_utils.a3rl_patch_series import (  # noqa: E402
    PatchSeriesError,
    apply,
    base_folder,
    discover,
    reset,
)
from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "workdir": {"type": "path", "required": True},
            "recipe_patch_dir": {"type": "path", "required": True},
            "extra_patch_dirs": {"type": "list", "elements": "path", "default": []},
            "recipe_strip": {"type": "int", "default": 1},
            "state": {"type": "str", "choices": ["applied", "pristine"], "default": "applied"},
        },
        supports_check_mode=True,
    )
    p = module.params
    workdir = p["workdir"]
    try:
        if p["state"] == "pristine":
            result = reset(workdir, check=module.check_mode)
        else:
            # The recipe's patches as the staged composition has them, when one waits.
            with base_folder(workdir, p["recipe_patch_dir"]) as recipe_dir:
                series = discover(recipe_dir,
                                  [os.path.join(workdir, d) for d in p["extra_patch_dirs"]],
                                  recipe_strip=p["recipe_strip"])
            result = apply(workdir, series, check=module.check_mode)
    except PatchSeriesError as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
