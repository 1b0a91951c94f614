"""The recipe env on the simulated cluster: its probe skips the role only when the scripts,
the reserved HCCL ports and the values the scripts give where jobs run are as the last run
left them; damage to any of them on one node is repaired by the next run."""

from __future__ import annotations

from a3rl.sim import podman

from .conftest import failure_text, play, provision

ENV = "playbooks/recipe_env.yml"
PORTS = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def sh(node: str, script: str) -> str:
    return podman.exec_(node, "sh", "-c", script).stdout


def test_damaged_env_scripts_and_ports_are_repaired_by_a_rerun(sim):
    provision(sim)
    node1, node2 = (n.container for n in sim.members()[:2])
    script = "/etc/a3rl/env/cluster_env.sh"
    good = sh(node1, f"sha256sum {script}")
    ports = sh(node2, f"cat {PORTS}")
    assert "64021-64052" in ports
    # The kernel value alone (the sysctl file still says it) and one script's content.
    sh(node2, f"echo > {PORTS}")
    sh(node1, f"echo 'export MASTER_ADDR=10.0.0.1' >> {script}")
    repaired = play(ENV, sim.inventory_dir)
    assert repaired.ok, failure_text(repaired)
    assert set(repaired.stats["changed"]) == {"node1", "node2"}, repaired.stats["changed"]
    assert sh(node1, f"sha256sum {script}") == good
    assert sh(node2, f"cat {PORTS}") == ports
    again = play(ENV, sim.inventory_dir)
    assert again.ok and again.changed == 0, again.stats.get("changed")
    check = play(ENV, sim.inventory_dir, check=True)
    assert check.ok and check.changed == 0, failure_text(check)
