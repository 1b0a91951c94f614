#!/usr/bin/python
"""Ansible module (controller only): one dataset converted to verl parquet in the store."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_dataset
short_description: Convert a raw dataset of the artifact store into verl's parquet files
description:
  - Runs on the controller (C(delegate_to) localhost) with the project's Python, which has
    the a3rl package and pyarrow.
  - Converts the raw artifact with a3rl.planning.datasets, checks every output against the schema
    verl reads, and records the files in the store's C(manifest.json) as
    C(dataset:<name>). A schema problem fails naming file, row and column; nothing is
    recorded then.
  - Unchanged raw files, converter and parameters with intact outputs - nothing is done.
  - Supports check mode.
options:
  store:
    description: The artifact store folder.
    type: path
    required: true
  name:
    description: The dataset's name (a key of a3rl_datasets).
    type: str
    required: true
  spec:
    description: The a3rl_datasets entry (source, format, dest, params).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Data | Convert deepscaler
  a3rl_dataset:
    store: /srv/a3rl/artifacts
    name: deepscaler
    spec: {source: deepscaler, format: deepscaler, dest: data/deepscaler}
  delegate_to: localhost
"""

RETURN = r"""
action:
  description: present, prepared or would_prepare.
  type: str
  returned: always
entry:
  description: The store record (files with sha256 and size).
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "store": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "spec": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        from a3rl.planning.dataset_store import DatasetError, ensure
    except ImportError as e:
        module.fail_json(msg=f"the controller's Python lacks the a3rl package or pyarrow ({e}). "
                             "Fix: run ansible-playbook from the project's venv (make venv).")
    p = module.params
    try:
        result = ensure(p["store"], p["name"], p["spec"], check=module.check_mode)
    except DatasetError as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
