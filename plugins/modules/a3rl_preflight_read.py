#!/usr/bin/python
"""Ansible module: what preflight reads on a node, in one call (free space, the NPU driver,
the device nodes). Reads only."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_preflight_read
short_description: Read a node's free space, its NPU driver and its NPU device nodes
description:
  - One module run instead of three (df, a stat, a find); every node pays a module start
    per task, so the preflight that runs on every site.yml reads everything at once.
  - Changes nothing; supports check mode.
options:
  driver_version_file:
    description: The file an installed NPU driver leaves (its version.info).
    type: path
    required: true
  device_pattern:
    description: Regular expression of the device node names to list under /dev.
    type: str
    required: true
"""

RETURN = r"""
df:
  description: The output of C(df -P -B1) (parsed on the controller by a3rl_parse_df).
  type: str
  returned: always
driver_installed:
  description: Whether the driver's version file exists.
  type: bool
  returned: always
devices:
  description: The matching device nodes, as /dev/<name> paths, sorted; empty without a driver.
  type: list
  returned: always
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "driver_version_file": {"type": "path", "required": True},
            "device_pattern": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    rc, out, err = module.run_command(["df", "-P", "-B1"], environ_update={"LC_ALL": "C"})
    # df exits 1 when one mount cannot be read (a stale NFS mount) but still lists the rest;
    # the controller's parser judges what is there.
    if rc not in (0, 1) or not out:
        module.fail_json(msg=f"df -P -B1 failed (rc {rc}): {err.strip()}")
    installed = os.path.exists(module.params["driver_version_file"])
    devices = []
    if installed:
        pattern = re.compile(module.params["device_pattern"])
        devices = sorted("/dev/" + n for n in os.listdir("/dev") if pattern.match(n))
    module.exit_json(changed=False, df=out, driver_installed=installed, devices=devices)


if __name__ == "__main__":
    main()
