#!/usr/bin/python
"""Ansible module: one node's NPU network ports, read (and configured) with hccn_tool."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_npu_network
short_description: Read, configure and ping a node's NPU network ports with hccn_tool
description:
  - One call per node does all its devices, in parallel, so the check costs seconds.
  - C(probe) reads each device's address, link and net health (C(-ip -g), C(-link -g),
    C(-net_health -g)) and returns the raw outputs; the judging is done on the controller
    (C(a3rl.node.npu_network)). With I(configure) and a I(plan) it first sets each device
    whose address differs (C(-ip -s address A netmask M)), and only those.
  - C(health) reads only the net health (C(-net_health -g)) of the given devices; the
    role repeats it while a device reads C(Init) (its detection initialising).
  - C(ping) runs the given pings (C(-ping -g address A)) and returns their outputs.
  - Check mode - C(probe) reads and reports the devices it would configure; C(ping) runs
    (it changes nothing).
options:
  action:
    description: probe, health or ping.
    type: str
    choices: [probe, health, ping]
    default: probe
  hccn_tool:
    description: Path of hccn_tool on the node.
    type: path
    required: true
  devices:
    description: Device ids to read (C(-i N)).
    type: list
    elements: int
    default: []
  plan:
    description: Planned address per device, in device order; empty for no plan.
    type: list
    elements: str
    default: []
  netmask:
    description: Netmask of the planned addresses.
    type: str
    default: 255.255.255.0
  configure:
    description: Set the devices whose address differs from the plan.
    type: bool
    default: false
  pings:
    description: With C(ping), the pings to run, each with C(device) and C(address).
    type: list
    elements: dict
    default: []
  parallel:
    description: hccn_tool calls at once.
    type: int
    default: 4
  timeout:
    description: Seconds one hccn_tool call may take.
    type: int
    default: 60
  reboot_marker:
    description: File that exists while the node waits for a reboot after a driver install.
    type: path
"""

RETURN = r"""
found:
  description: Whether hccn_tool exists.
  type: bool
  returned: always
devices:
  description: >-
    Device id -> C(ip), C(link), C(health) (raw outputs) and C(errors) (query -> message).
  type: dict
  returned: probe, health
checked_at:
  description: When the devices were last read (seconds since the epoch, on the node).
  type: float
  returned: probe, health
would_set:
  description: Devices whose address differs from the plan (set unless in check mode).
  type: list
  returned: probe
set_errors:
  description: Device id -> why setting its address failed.
  type: dict
  returned: probe
pings:
  description: The pings given, each with C(output) and C(rc) added.
  type: list
  returned: ping
"""

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.a3rl_npu_network import QUERIES, parse_ip
from ansible.module_utils.basic import AnsibleModule

BUSY_RETRIES = 5


def hccn(tool, args, timeout):
    """(rc, output) of one hccn_tool call; retried while the tool says it is busy."""
    for attempt in range(BUSY_RETRIES):
        try:
            proc = subprocess.run([tool, *args], capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, f"no answer within {timeout}s"
        except OSError as e:
            return 127, str(e)
        out = (proc.stdout or "") + (proc.stderr or "")
        if "busy" not in out.lower() or attempt == BUSY_RETRIES - 1:
            return proc.returncode, out
        time.sleep(0.5 * (attempt + 1))
    return 1, "busy"


def query_devices(p, jobs, found, pool):
    """Run the (device, query) jobs at once; each answer into found[device][query], a
    failure into found[device]["errors"][query]."""
    tool, timeout = p["hccn_tool"], p["timeout"]
    answers = pool.map(lambda j: hccn(tool, ["-i", str(j[0]), *QUERIES[j[1]]], timeout), jobs)
    # No zip(strict=): nodes may run Python 3.9 (openEuler 22.03).
    for (dev, q), (rc, out) in zip(jobs, answers):  # noqa: B905
        entry = found.setdefault(str(dev), {"errors": {}})
        entry[q] = out
        entry["errors"].pop(q, None)
        if rc != 0:
            entry["errors"][q] = out.strip() or f"rc {rc}"


def health(p):
    found = {}
    with ThreadPoolExecutor(max_workers=max(1, p["parallel"])) as pool:
        query_devices(p, [(int(d), "health") for d in p["devices"]], found, pool)
    return {"changed": False, "devices": found, "checked_at": time.time()}


def probe(module, p):
    tool, timeout = p["hccn_tool"], p["timeout"]
    devices = [int(d) for d in p["devices"]]
    plan = list(p["plan"] or [])

    def query(jobs):
        query_devices(p, jobs, found, pool)

    found, would_set, set_errors, changed = {}, [], {}, False
    with ThreadPoolExecutor(max_workers=max(1, p["parallel"])) as pool:
        query([(d, q) for d in devices for q in QUERIES])
        if p["configure"] and plan:
            for dev in devices:
                if dev >= len(plan):
                    continue
                have = parse_ip(found[str(dev)]["ip"]) if "ip" not in found[str(dev)][
                    "errors"] else {}
                if (have.get("address"), have.get("netmask")) != (plan[dev], p["netmask"]):
                    would_set.append(dev)
            changed = bool(would_set) and module.check_mode  # what --check would change
            if would_set and not module.check_mode:
                results = pool.map(lambda d: hccn(
                    tool, ["-i", str(d), "-ip", "-s", "address", plan[d], "netmask",
                           p["netmask"]], timeout), would_set)
                for dev, (rc, out) in zip(would_set, results):  # noqa: B905
                    if rc == 0:
                        changed = True
                    else:
                        set_errors[str(dev)] = out.strip() or f"rc {rc}"
                # What the devices say now, not what was asked of them.
                query([(d, q) for d in would_set for q in QUERIES])
        for dev, message in set_errors.items():
            found[dev]["errors"]["set"] = message
    return {"changed": changed, "devices": found, "would_set": would_set,
            "set_errors": set_errors, "checked_at": time.time()}


def ping(p):
    tool, timeout = p["hccn_tool"], p["timeout"]

    def one(entry):
        args = ["-i", str(int(entry["device"])), "-ping", "-g", "address", str(entry["address"])]
        rc, out = hccn(tool, args, timeout)
        return {**entry, "rc": rc, "output": out}

    with ThreadPoolExecutor(max_workers=max(1, p["parallel"])) as pool:
        return list(pool.map(one, p["pings"]))


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["probe", "health", "ping"], "default": "probe"},
            "hccn_tool": {"type": "path", "required": True},
            "devices": {"type": "list", "elements": "int", "default": []},
            "plan": {"type": "list", "elements": "str", "default": []},
            "netmask": {"type": "str", "default": "255.255.255.0"},
            "configure": {"type": "bool", "default": False},
            "pings": {"type": "list", "elements": "dict", "default": []},
            "parallel": {"type": "int", "default": 4},
            "timeout": {"type": "int", "default": 60},
            "reboot_marker": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    marker = p["reboot_marker"]
    found = os.path.isfile(p["hccn_tool"]) and os.access(p["hccn_tool"], os.X_OK)
    base = {"found": found, "tool": p["hccn_tool"],
            "reboot_pending": bool(marker) and os.path.exists(marker)}
    if not found:
        module.exit_json(changed=False, devices={}, would_set=[], set_errors={}, pings=[],
                         **base)
    if p["action"] == "ping":
        module.exit_json(changed=False, pings=ping(p), **base)
    if p["action"] == "health":
        module.exit_json(**health(p), **base)
    module.exit_json(**probe(module, p), **base)


if __name__ == "__main__":
    main()
