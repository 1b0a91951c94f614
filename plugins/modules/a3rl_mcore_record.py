#!/usr/bin/python
"""Ansible module: the record of a Megatron dist-checkpoint conversion (query or commit)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_mcore_record
short_description: Compare or commit the settings a dist-checkpoint was converted with
description:
  - C(query) reads C(<path>/a3rl-conversion.json) and says whether the checkpoint there was
    made with the settings in I(want) (and why not), with the free bytes where it goes.
  - C(prepare) makes I(partial) afresh with a3rl's mark (C(a3rl-partial.json)), for the
    converter to write into its C(output) folder; it removes an earlier I(partial) only
    when that holds the mark, and refuses (removing nothing) when it does not.
  - C(commit) moves a finished conversion from I(partial)'s C(output) to I(path) with its
    record, replacing an older checkpoint; an interrupted conversion never looks finished.
  - Check mode - query works; prepare refuses as it would, and prepare and commit report
    a change and do nothing.
options:
  path:
    description: The checkpoint folder.
    type: path
    required: true
  want:
    description: The settings (use_alltoall_overlap, source_digest, converter_sha256, ...).
    type: dict
    required: true
  state:
    description: query, prepare or commit.
    type: str
    choices: [query, prepare, commit]
    default: query
  partial:
    description: The marked folder the converter writes in (prepare, commit).
    type: path
"""

EXAMPLES = r"""
- name: Checkpoint | Compare the recorded settings
  a3rl_mcore_record:
    path: /data/a3rl/models/Qwen3-235B-A22B-mcore
    want: {use_alltoall_overlap: "1"}
  register: record
"""

RETURN = r"""
matches:
  description: The checkpoint exists and was made with I(want).
  type: bool
  returned: state=query
foreign:
  description: A folder is at I(path) without the record file (not made by a conversion);
    I(state=commit) refuses to replace it.
  type: bool
  returned: state=query
kept:
  description: What a conversion would have to replace or remove and must not, each
    named (I(path) or its C(.old) without the record, its C(.partial) without the mark).
  type: list
  returned: state=query
output:
  description: The folder the converter writes (inside I(partial)).
  type: str
  returned: state=prepare, state=commit
reasons:
  description: Why it does not match.
  type: list
  returned: state=query
free_bytes:
  description: Free bytes where the checkpoint goes.
  type: int
  returned: state=query
"""

from ansible.module_utils.a3rl_conversion import commit, output_of, prepare, status
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "want": {"type": "dict", "required": True},
            "state": {"type": "str", "choices": ["query", "prepare", "commit"], "default": "query"},
            "partial": {"type": "path"},
        },
        required_if=[("state", "commit", ["partial"]), ("state", "prepare", ["partial"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "query":
        module.exit_json(changed=False, **status(p["path"], p["want"]))
    try:
        if p["state"] == "prepare":
            prepare(p["path"], p["partial"], check=module.check_mode)
        elif not module.check_mode:
            commit(p["path"], p["partial"], p["want"])
    except FileExistsError as e:
        module.fail_json(msg=f"{e}. Nothing was changed. Fix: move it away (or remove it, if "
                             "it is not needed), or set mcore_checkpoint_dir to another "
                             "folder, then run again.")
    except OSError as e:
        module.fail_json(msg=f"{e}. Fix: look at the conversion's output above, then run again.")
    module.exit_json(changed=True, output=output_of(p["partial"]))


if __name__ == "__main__":
    main()
