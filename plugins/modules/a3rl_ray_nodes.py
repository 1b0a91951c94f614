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

from ansible.module_utils.a3rl_rayjobs import RayApiError, auth_headers, request
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "token_env_file": {"type": "path"},
            "timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    headers = auth_headers(module.params["token_env_file"])
    url = module.params["url"].rstrip("/") + "/api/v0/nodes?detail=true&limit=10000"
    try:
        body = request(url, headers=headers, timeout=module.params["timeout"])
    except RayApiError as e:
        module.exit_json(changed=False, reachable=False, nodes=[], error=str(e))
    if not isinstance(body, dict):
        module.exit_json(changed=False, reachable=False, nodes=[],
                         error=f"unexpected answer from {url}: {str(body)[:200]}")
    nodes = body.get("data", {}).get("result", {}).get("result", [])
    module.exit_json(changed=False, reachable=True, nodes=nodes)


if __name__ == "__main__":
    main()
