"""Filter for the converged-role probes (plugins/action/a3rl_state.py)."""

from __future__ import annotations


def not_converged(hosts, hostvars, probe_var: str) -> bool:
    """True when any of ``hosts`` is not converged by its registered probe ``probe_var``
    (a probe that did not run counts as not converged). A role's tasks then run on every
    host of the play: the roles read each other's results across hosts, so they run for
    all or none."""
    for host in hosts:
        probe = hostvars[host].get(probe_var)
        if not isinstance(probe, dict) or probe.get("converged") is not True:
            return True
    return False


class FilterModule:
    def filters(self):
        return {"a3rl_not_converged": not_converged}
