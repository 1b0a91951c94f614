#!/usr/bin/python
"""Ansible module: one node's relay of the artifact fan-out chain (run with async)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_fanout_relay
short_description: Receive the artifact stream, write and verify this node's files, forward the rest
description:
  - One link of the pipelined chain of C(a3rl.node.fanout). Started with C(async) and C(poll 0)
    on every node of the chain before the controller starts sending, collected with
    C(async_status).
  - Listens on I(listen) - a unix socket for the first node (the controller's stream
    arrives over SSH), the node's cluster address for the others, where only I(peer) is
    accepted and only with a hello that proves the run's I(token).
  - Each file of I(needed) is written under I(root) (a partial copy resumes) and hashed;
    a match is stamped as M(a3rl_artifact_files) stamps, a mismatch removed, a file cut
    short kept unstamped. The stream is forwarded to I(forward_to) for later positions.
  - Ends by itself when the stream ends, after I(io_timeout) seconds of silence, when no
    predecessor came within I(connect_timeout), or after I(deadline) seconds.
  - Network trouble is not a failure here - the result says what arrived, and the direct
    path after the chain sends the rest.
options:
  root:
    description: Folder the file paths are relative to.
    type: path
    required: true
  stamp_root:
    description: Folder of the stamps (default I(root)).
    type: path
  files:
    description: The planned stream, C({path, sha256, size, offset, last}) per file.
    type: list
    elements: dict
    required: true
  needed:
    description: The paths this node needs (the rest it only forwards).
    type: list
    elements: str
    required: true
  position:
    description: This node's position in the chain (0 - the first).
    type: int
    required: true
  listen:
    description: C(unix:PATH) or C(tcp:IP:PORT).
    type: str
    required: true
  peer:
    description: The predecessor's address (tcp), the only one accepted.
    type: str
  forward_to:
    description: The successor's C(IP:PORT), none for the last node.
    type: str
  source:
    description: This node's cluster address, the source of its connection to I(forward_to).
    type: str
  token:
    description: The run's secret; never sent over the network.
    type: str
    required: true
    no_log: true
  run:
    description: The run's id.
    type: str
    required: true
  connect_timeout:
    description: Seconds to wait for the predecessor, and to reach the successor.
    type: float
    default: 60
  io_timeout:
    description: Seconds of silence after which a hop is given up.
    type: float
    default: 60
  deadline:
    description: Seconds after which the relay gives up, whatever happens.
    type: float
    required: true
"""

EXAMPLES = r"""
- name: Artifacts | Start this node's relay
  a3rl_fanout_relay:
    root: /var/cache/a3rl/artifacts
    files: "{{ plan.files }}"
    needed: "{{ held.needed }}"
    position: 1
    listen: tcp:10.0.0.12:29470
    peer: 10.0.0.11
    token: "{{ token }}"
    run: "{{ plan.run }}"
    deadline: 600
  async: 630
  poll: 0
"""

RETURN = r"""
verified:
  description: Paths written, hashed and stamped by this relay.
  type: list
  returned: always
damaged:
  description: Paths whose sha256 did not match (removed).
  type: list
  returned: always
partial:
  description: Needed paths still not verified, with the bytes they hold.
  type: dict
  returned: always
upstream:
  description: C(complete), or what broke on the receiving side.
  type: str
  returned: always
downstream:
  description: C(complete), C(none) (the last node), or what broke on the forwarding side.
  type: str
  returned: always
"""

from ansible.module_utils.a3rl_fanout import relay
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "stamp_root": {"type": "path"},
            "files": {"type": "list", "elements": "dict", "required": True},
            "needed": {"type": "list", "elements": "str", "required": True},
            "position": {"type": "int", "required": True},
            "listen": {"type": "str", "required": True},
            "peer": {"type": "str"},
            "forward_to": {"type": "str"},
            "source": {"type": "str"},
            "token": {"type": "str", "required": True, "no_log": True},
            "run": {"type": "str", "required": True},
            "connect_timeout": {"type": "float", "default": 60},
            "io_timeout": {"type": "float", "default": 60},
            "deadline": {"type": "float", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, msg="check mode: no relay started")
    result = relay(p["root"], p["files"], p["needed"], p["position"], p["listen"], p["token"],
                   p["run"], peer=p["peer"], forward_to=p["forward_to"],
                   source=p["source"], stamp_root=p["stamp_root"],
                   connect_timeout=p["connect_timeout"],
                   io_timeout=p["io_timeout"], deadline=p["deadline"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
