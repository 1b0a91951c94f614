"""Ansible filter for the artifact fan-out plan (logic and tests in ``a3rl.node.fanout``)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from a3rl.node import fanout


def fanout_plan(nodes, files, *, port, mode="chain", min_bytes=0, run="",
                connect_timeout=60, io_timeout=60, min_rate=10e6):
    """a3rl.node.fanout.plan; a bad setting becomes a filter error carrying our message.
    ``port``, a3rl_fanout_port, has no default here: the role states it."""
    try:
        return fanout.plan([dict(n) for n in nodes], [dict(f) for f in files], mode=str(mode),
                           port=int(port), min_bytes=int(min_bytes), run=str(run),
                           connect_timeout=float(connect_timeout),
                           io_timeout=float(io_timeout), min_rate=float(min_rate))
    except fanout.FanoutError as e:
        raise AnsibleFilterError(str(e)) from None


class FilterModule:
    def filters(self):
        return {"a3rl_fanout_plan": fanout_plan}
