#!/usr/bin/python
"""Ansible module: remove the recipe's cache set on a node and in its training container."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_cache_clean
short_description: Remove exactly the recipe's caches, on the node and in the training container
description:
  - Removes the given paths, each of which must be in the recipe's cache set
    (C(kernel_meta), C(.torchair_cache) and C(.cache) in the working directory,
    C(/root/.cache), C(/root/atc_data)). Empty, relative, C(/), C(..)-bearing, glob and
    symlink values are refused, and nothing is removed when any value is refused.
  - The same check and removal run inside the training container (C(docker exec), the
    engine's own code on stdin), when it is running. The role's action plugin passes that
    code (C(engine_source)), read on the controller.
  - Check mode - reports what would be removed and the bytes, removes nothing.
options:
  workdir:
    description: The recipe working directory.
    type: str
    required: true
  paths:
    description: The cache paths to remove.
    type: list
    elements: raw
    required: true
  container:
    description: The training container's name (empty - the node only).
    type: str
    default: ""
  engine_source:
    description:
      - The engine's source, run inside the container. Set by the role's action plugin;
        without it the module reads the source through its own loader, which Mitogen's
        does not offer.
    type: str
    default: ""
"""

RETURN = r"""
removed:
  description: Per side (host, container) the removed paths and their bytes.
  type: dict
  returned: always
kept:
  description: Paths not removed because a folder above them became a symbolic link after
    they were checked (the module then fails, naming them and what was removed).
  type: dict
  returned: always
freed:
  description: Bytes freed on this node (host and container).
  type: int
  returned: always
"""

import inspect
import json

from ansible.module_utils import a3rl_cache_clean as engine
from ansible.module_utils.basic import AnsibleModule


def engine_source(module):
    """The engine's source: from the action plugin, else through Python's own loader
    (AnsiballZ's zip can give it; Mitogen's module_utils loader cannot)."""
    if module.params["engine_source"]:
        return module.params["engine_source"]
    try:
        return inspect.getsource(engine)
    except (OSError, TypeError) as exc:
        module.fail_json(msg=f"cannot read the cache-clean engine's source to run it in the "
                             f"container ({exc}). Nothing was removed. Fix: run the "
                             "cache_clean role (its action plugin passes the source).")


def in_container(module, name, paths, workdir, check):
    rc, out, err = module.run_command(
        ["docker", "inspect", "--format", "{{.State.Running}}", name])
    if rc != 0 or out.strip() != "true":
        return None
    args = json.dumps({"paths": paths, "workdir": workdir, "check": check})
    rc, out, err = module.run_command(
        ["docker", "exec", "-i", name, "python3", "-", "--json", args],
        data=engine_source(module), binary_data=True)
    if rc != 0:
        module.fail_json(msg=f"the cache clean in container {name} failed: {err.strip()[-500:]}")
    result = json.loads(out.strip().splitlines()[-1])
    if "error" in result:
        module.fail_json(msg=f"in container {name}: {result['error']}. Nothing was removed.")
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "workdir": {"type": "str", "required": True},
            "paths": {"type": "list", "elements": "raw", "required": True},
            "container": {"type": "str", "default": ""},
            # Not a secret: kept out of the result's invocation for its size.
            "engine_source": {"type": "str", "default": "", "no_log": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    kept = {}
    try:
        # Every value on both sides is checked before anything is removed.
        engine.clean(p["paths"], p["workdir"], check=True)
        removed = {}
        if p["container"]:
            seen = in_container(module, p["container"], p["paths"], p["workdir"], True)
            if seen is not None and not module.check_mode:
                seen = in_container(module, p["container"], p["paths"], p["workdir"], False)
            if seen is not None:
                removed["container"] = seen["removed"]
                kept.update({f"{p['container']}:{k}": v for k, v in seen.get("kept", {}).items()})
        host = engine.clean(p["paths"], p["workdir"], check=module.check_mode)
        removed["host"] = host["removed"]
        kept.update(host["kept"])
    except engine.CacheError as e:
        # A link on the way has its own fix in the message; any other refusal is a value.
        fix = ("" if "symlink" in str(e) else
               " Fix: cache_clean_paths may only name the recipe's caches.")
        module.fail_json(msg=f"{e}. Nothing was removed.{fix}")
    freed = sum(sum(side.values()) for side in removed.values())
    if kept:
        # A folder above a path became a link between the check and the removal.
        module.fail_json(
            msg="kept " + "; ".join(f"{k!r}: {why}" for k, why in kept.items())
            + f". Removed: {sorted({v for side in removed.values() for v in side}) or 'nothing'}."
            " Fix: find who made the link (it points where the clean must not go), set the "
            "working directory to its real path, then run again.",
            changed=any(removed.values()), removed=removed, kept=kept, freed=freed)
    module.exit_json(changed=any(removed.values()), removed=removed, kept=kept, freed=freed)


if __name__ == "__main__":
    main()
