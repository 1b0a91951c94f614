#!/usr/bin/python
"""Ansible module: which distributed artifact files a node holds, verified."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_artifact_files
short_description: Check (and stamp) a node's copies of artifact files against their sha256
description:
  - Sorts the files into verified (a stamp C(<file>.sha256) written after a passed check,
    and the right size) and needed (missing, partial, or damaged - a damaged copy is
    removed so that it is sent again; a partial one is kept for the transfer to resume).
  - A complete-size copy without a stamp is hashed once and stamped when it matches.
  - Before anything is removed, the bytes still to arrive are compared with the free space
    under I(root); a disk too small fails naming the host, the folder and both sizes.
  - In check mode nothing is hashed, stamped or removed.
options:
  root:
    description: Folder on the node the file paths are relative to.
    type: path
    required: true
  files:
    description: Files as C({path, sha256, size}).
    type: list
    elements: dict
    required: true
  require:
    description: Fail when any file is not verified (use after the transfer).
    type: bool
    default: false
  stamp_root:
    description: Folder of the stamps (default I(root), beside the files).
    type: path
  reader:
    description: This node only reads copies another node placed on shared storage
      (nothing hashed, stamped or removed; a missing file means the shared folder is
      not mounted here).
    type: bool
    default: false
  shared:
    description: I(root) is shared storage (a3rl_shared_dir), where a file at an
      artifact's path may be another team's copy - one that no transfer of a3rl's began
      and that is not a copy a3rl verified (unchanged since) is kept, whatever its size,
      and the task fails naming it (without I(shared) a damaged or longer copy is
      removed, to be sent again).
    type: bool
    default: false
  host:
    description: The inventory name, for the messages.
    type: str
    default: ""
  tools:
    description: Commands the transfer needs on the node; those not on C(PATH) are
      returned in I(missing_tools), so that the caller installs a package only when its
      command is missing (one module call fewer per node and transfer than asking the
      package manager every time).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Artifacts | Find the files this node still needs
  a3rl_artifact_files:
    root: /var/cache/a3rl/artifacts
    files: [{path: git/verl.bundle, sha256: "0123...", size: 1048576}]
  register: needed
"""

RETURN = r"""
verified:
  description: Paths held and verified.
  type: list
  returned: always
needed:
  description: Paths to transfer.
  type: list
  returned: always
stamped:
  description: Paths hashed and stamped by this run.
  type: list
  returned: always
removed:
  description: Damaged copies removed by this run.
  type: list
  returned: always
partial:
  description: Needed paths that hold part of the file, with their size in bytes (where
    a transfer resumes; the fan-out plans its offsets from them).
  type: dict
  returned: always
incoming_bytes:
  description: Bytes still to arrive.
  type: int
  returned: always
free_bytes:
  description: Free bytes under root.
  type: int
  returned: always
missing_tools:
  description: The I(tools) not found on C(PATH).
  type: list
  returned: always
"""

import os
import shutil

from ansible.module_utils.a3rl_stage import StageError, check_files
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "required": True},
            "require": {"type": "bool", "default": False},
            "stamp_root": {"type": "path"},
            "reader": {"type": "bool", "default": False},
            "host": {"type": "str", "default": ""},
            "shared": {"type": "bool", "default": False},
            "tools": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = check_files(p["root"], p["files"], verify=not module.check_mode,
                             require=p["require"] and not module.check_mode,
                             stamp_root=p["stamp_root"], reader=p["reader"], host=p["host"],
                             shared=p["shared"])
    except StageError as e:
        module.fail_json(msg=f"{e}")
    sizes = {f["path"]: int(f["size"]) for f in p["files"]}
    result["partial"] = {}
    for rel in [] if p["reader"] else result["needed"]:
        path = os.path.join(p["root"], rel)
        if os.path.isfile(path) and 0 < os.path.getsize(path) < sizes[rel]:
            result["partial"][rel] = os.path.getsize(path)
    result["missing_tools"] = [t for t in p["tools"] if shutil.which(t) is None]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
