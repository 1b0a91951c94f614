#!/usr/bin/python
"""Ansible module: the controller's end of the artifact fan-out chain."""

from __future__ import annotations

DOCUMENTATION = r"""
module: a3rl_fanout_send
short_description: Stream the planned artifact files once, over SSH, into the chain's first relay
description:
  - Runs on the controller (C(delegate_to localhost)) after the relays were started. Opens
    the inventory's own SSH to the chain's first node (host keys checked) and streams the
    planned files out of the store into its relay.
  - A broken hop is not a failure here - the result's C(error) says what broke, and the
    direct path after the chain sends what did not arrive.
options:
  root:
    description: The store folder on the controller the file paths are relative to.
    type: path
    required: true
  files:
    description: The planned stream (C(plan.files)).
    type: list
    elements: dict
    required: true
  first:
    description: The first node - C(host), C(ssh) (the ssh command line), C(remote)
      (user@address), C(python) (its interpreter), C(socket) (its relay's socket).
    type: dict
    required: true
  token:
    description: The run's secret.
    type: str
    required: true
    no_log: true
  run:
    description: The run's id.
    type: str
    required: true
  bwlimit:
    description: Rate cap in KiB/s (0 - none), as rsync's --bwlimit.
    type: int
    default: 0
  connect_timeout:
    description: Seconds the first node waits for its relay.
    type: float
    default: 60
  io_timeout:
    description: Seconds a blocked send may wait.
    type: float
    default: 60
"""

EXAMPLES = r"""
- name: Artifacts | Stream the files into the chain
  a3rl_fanout_send:
    root: /srv/a3rl/artifacts
    files: "{{ plan.files }}"
    first: "{{ plan.first }}"
    token: "{{ token }}"
    run: "{{ plan.run }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
sent:
  description: Bytes of file content sent.
  type: int
  returned: when the stream started
seconds:
  description: Time the stream took.
  type: float
  returned: when the stream started
left_out:
  description: Store files left out because their size is not the recorded one.
  type: list
  returned: when the stream started
error:
  description: What broke, empty when the stream went through.
  type: str
  returned: always
"""

from ansible.module_utils.a3rl_fanout import send_over_ssh
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "required": True},
            "first": {"type": "dict", "required": True},
            "token": {"type": "str", "required": True, "no_log": True},
            "run": {"type": "str", "required": True},
            "bwlimit": {"type": "int", "default": 0},
            "connect_timeout": {"type": "float", "default": 60},
            "io_timeout": {"type": "float", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, error="", msg="check mode: nothing sent")
    result = send_over_ssh(p["root"], p["files"], p["first"], p["token"], p["run"],
                           bwlimit=p["bwlimit"], connect_timeout=p["connect_timeout"],
                           io_timeout=p["io_timeout"])
    # Sending changes nothing on the controller; the nodes report their own changes.
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
