#!/usr/bin/python
"""Ansible module: the Ray cluster's node list, read from the head's state API."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_ray_nodes
short_description: List the nodes of a Ray cluster from its head's state API
description:
  - Reads C(GET /api/v0/nodes) from the dashboard on the head (run it on the head).
  - With token authentication the token is read from a file on the node, so it never
    appears in the task's arguments or in logs.
  - Changes nothing; supports check mode.
options:
  url:
    description: The dashboard's base URL as seen from the node it runs on.
    type: str
    required: true
  token_env_file:
    description: >-
      An env file (C(KEY=value) lines) holding C(RAY_AUTH_TOKEN), sent as a bearer
      token when C(RAY_AUTH_MODE=token) is in it. Missing file means no token.
    type: path
  timeout:
    description: Seconds to wait for the API.
    type: int
    default: 10
"""

RETURN = r"""
reachable:
  description: Whether the API answered.
  type: bool
  returned: always
nodes:
  description: The state API's node entries (node_ip, state, resources_total, ...).
  type: list
  returned: always
error:
  description: Why the API could not be read.
  type: str
  returned: when not reachable
"""

import json
import os
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


def read_env_file(path):
    values = {}
    if not path or not os.path.exists(path):
        return values
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip().strip('"').strip("'")
    return values


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "token_env_file": {"type": "path"},
            "timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    env = read_env_file(module.params["token_env_file"])
    headers = {}
    if env.get("RAY_AUTH_MODE") == "token" and env.get("RAY_AUTH_TOKEN"):
        headers["Authorization"] = "Bearer " + env["RAY_AUTH_TOKEN"]
    url = module.params["url"].rstrip("/") + "/api/v0/nodes?detail=true&limit=10000"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=module.params["timeout"]) as resp:
            body = json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as e:
        module.exit_json(changed=False, reachable=False, nodes=[], error=str(e))
    nodes = body.get("data", {}).get("result", {}).get("result", [])
    module.exit_json(changed=False, reachable=True, nodes=nodes)


if __name__ == "__main__":
    main()
