#!/usr/bin/python
"""Ansible module: one artifact of the manifest, fetched once into the artifact store."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_artifact
short_description: Fetch one artifact of the a3rl manifest into an artifact store, verified
description:
  - Makes the store folder hold the artifact as its manifest entry says (a git bundle at
    the pinned ref with its cherry-picks and submodules, an http download, a provided
    file, a ModelScope snapshot or a wheelhouse) and records it, with the sha256 and size
    of each file, in the store's C(manifest.json) only after its checksum passed.
  - Unchanged entry and intact files - nothing is fetched and no network is used.
  - An entry with a declared C(size) is fetched only when the store's disk has room for it.
  - With I(offline), nothing is ever fetched - a missing or damaged artifact is an error
    (an air-gapped site's bundle).
  - Supports check mode (reports what would be fetched, fetches nothing).
options:
  store:
    description: The store folder.
    type: path
    required: true
  name:
    description: The artifact's name in the manifest.
    type: str
    required: true
  spec:
    description: The manifest entry (C(kind) and the fields of that kind).
    type: dict
    required: true
  offline:
    description: Never fetch; verify only.
    type: bool
    default: false
  refresh:
    description: Fetch again even when the store holds the artifact.
    type: bool
    default: false
  token:
    description: A hub token (ModelScope), passed to the hub client only; never logged.
    type: str
  host:
    description: The fetch host's inventory name, for the messages.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Artifacts | Fetch verl into the store
  a3rl_artifact:
    store: /srv/a3rl/artifacts
    name: verl
    spec: {kind: git, url: https://github.com/volcengine/verl.git, ref: v0.6.0}
  delegate_to: localhost
"""

RETURN = r"""
action:
  description: present, fetched or would_fetch.
  type: str
  returned: always
entry:
  description: The artifact's record in the store manifest (files with sha256 and size, commit).
  type: dict
  returned: always
reason:
  description: Why it was fetched.
  type: str
  returned: when fetched
log:
  description: Progress lines of the fetch.
  type: list
  returned: always
"""

from ansible.module_utils.a3rl_artifacts import ArtifactError, ensure, url_credentials
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "store": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "spec": {"type": "dict", "required": True},
            "offline": {"type": "bool", "default": False},
            "refresh": {"type": "bool", "default": False},
            "token": {"type": "str", "no_log": True},
            "host": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    lines = []
    p = module.params
    # Echoed in the result (invocation): Ansible masks these values wherever they appear.
    module.no_log_values.update(url_credentials(p["spec"]))
    try:
        result = ensure(p["store"], p["name"], p["spec"], offline=p["offline"],
                        check=module.check_mode, refresh=p["refresh"], log=lines.append,
                        token=p["token"] or None, host=p["host"])
    except ArtifactError as e:
        module.fail_json(msg=str(e), log=lines)
    module.exit_json(log=lines, **result)


if __name__ == "__main__":
    main()
