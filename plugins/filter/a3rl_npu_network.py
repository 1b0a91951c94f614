"""Ansible filters of the npu_network role, backed by ``a3rl.node.npu_network`` (tested there)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from a3rl.node import npu_network as nn


def _plans(hostvars, hosts, key="npu_network_plan"):
    return {h: list(hostvars[h].get(key) or []) for h in hosts}


def _probes(hostvars, hosts, key="npu_network_probe", settle="npu_network_settle"):
    """Each host's probe, with the net health its wait for Init last read."""
    return {h: nn.merge_health(dict(hostvars[h].get(key) or {}), hostvars[h].get(settle))
            for h in hosts}


def plan_problems(hosts, hostvars, netmask, npus):
    """Problems of the inventory's device-IP plan (``npu_network_plan`` per host)."""
    return nn.plan_problems(_plans(hostvars, hosts), netmask, int(npus))


def ping_plan(hosts, hostvars, netmask, npus, check_mode=False, require_active=False,
              all_pairs_max_nodes=8, random_peers=2, seed=0):
    """host -> the pings it runs, between the devices whose own checks passed."""
    assessed = nn.assess(hosts, _probes(hostvars, hosts), _plans(hostvars, hosts), netmask,
                         int(npus), check_mode=bool(check_mode),
                         require_active=bool(require_active))
    pairs = nn.node_pairs(list(assessed["addresses"]), int(all_pairs_max_nodes),
                          int(random_peers), seed)
    return nn.ping_plan(hosts, assessed["addresses"], pairs)


def report(hosts, hostvars, netmask, npus, check_mode=False, require_active=False,
           max_rows=128):
    """The verdict: table, summary, problems per host, failed hosts."""
    pings = {h: list((hostvars[h].get("npu_network_ping") or {}).get("pings") or [])
             for h in hosts}
    return nn.report(hosts, _probes(hostvars, hosts), _plans(hostvars, hosts), netmask,
                     int(npus), pings=pings, check_mode=bool(check_mode),
                     require_active=bool(require_active), max_rows=int(max_rows))


def hydra_launch_commands(text):
    try:
        return nn.hydra_launch_commands(text)
    except ValueError as e:
        raise AnsibleFilterError(str(e)) from None


def hccl_socket_env(nic, address, host=""):
    try:
        return nn.hccl_socket_env(nic, address, host)
    except ValueError as e:
        raise AnsibleFilterError(str(e)) from None


class FilterModule:
    def filters(self):
        return {
            "a3rl_npu_plan_problems": plan_problems,
            "a3rl_npu_ping_plan": ping_plan,
            "a3rl_npu_network_report": report,
            "a3rl_npu_health_pending": nn.health_pending,
            "a3rl_mpich_hostfile": nn.mpich_hostfile,
            "a3rl_hccl_socket_env": hccl_socket_env,
            "a3rl_hydra_launch_commands": hydra_launch_commands,
            "a3rl_allreduce_verdict": nn.allreduce_verdict,
        }
