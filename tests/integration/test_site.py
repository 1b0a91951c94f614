"""site.yml on a 2-node simulated cluster: it passes, it is idempotent, and preflight
refuses bad input with a clear message before anything on any node changes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from a3rl.sim import cluster, podman

from .conftest import ansible_warnings, failure_text, kinds_in_order, mark, play, snapshot

DRIVER_VERSION_INFO = "/usr/local/Ascend/driver/version.info"


def _provisioned(c: cluster.Cluster) -> bool:
    """Whether an earlier run installed the NPU driver on any node of ``c``."""
    return any(podman.exec_(n.container, "test", "-e", DRIVER_VERSION_INFO,
                            check=False).returncode == 0 for n in c.members())


@pytest.fixture(scope="module")
def bare(sim) -> Iterator[cluster.Cluster]:
    """Nodes as new A3 machines, for site.yml on Ansible's default strategy: the worker's
    own cluster when no earlier module on this worker touched it, else one of this
    module's own (module fixtures provision under Mitogen, conftest.provision, and a
    module may leave its cluster unconverged, e.g. with the training container recreated
    without the recipe's requirements)."""
    if not _provisioned(sim):
        yield sim
        return
    name = f"{sim.name}-site"
    own = cluster.up(name, nodes=sim.nodes, log=print, trainer="standin")
    try:
        yield own
    finally:
        cluster.down(name, log=print)


def test_site_passes_from_bare_nodes_and_second_run_changes_nothing(bare):
    """site.yml from bare nodes to a running Ray cluster on Ansible's default strategy: the
    one such run the suite relies on."""
    # Bare, as new A3 machines: no NPU devices and no npu-smi before the driver.
    assert not _provisioned(bare)
    for node in bare.members():
        found = podman.exec_(node.container, "sh", "-c",
                             "ls /dev | grep -c '^davinci' ; command -v npu-smi", check=False)
        assert found.stdout.split()[:1] == ["0"] and "npu-smi" not in found.stdout, \
            found.stdout
    first = play("site.yml", bare.inventory_dir)
    assert first.ok, failure_text(first)
    assert set(first.stats["ok"]) == {"node1", "node2"}
    assert first.changed > 0
    # A fresh node: the driver first, then the firmware (the vendor's order).
    for node in bare.members():
        assert kinds_in_order(first, node.hostname) == ["driver", "firmware"]
    second = play("site.yml", bare.inventory_dir)
    assert second.ok, failure_text(second)
    assert second.changed == 0, second.stats["changed"]
    # `a3rl demo`'s first play, fresh and again: no warning from Ansible (issue 23).
    assert ansible_warnings(first) == [] and ansible_warnings(second) == []


def test_site_in_check_mode(bare):
    """On the cluster the test above converged, --check reports no change."""
    result = play("site.yml", bare.inventory_dir, check=True)
    assert result.ok, failure_text(result)
    assert result.changed == 0
    assert ansible_warnings(result) == []


def test_preflight_records_the_derived_nic(sim):
    result = play("playbooks/preflight.yml", sim.inventory_dir)
    assert result.ok, failure_text(result)
    events = (result.record / "artifacts").rglob("job_events/*.json")
    text = "\n".join(p.read_text() for p in events)
    assert "cluster NIC eth0 (" + sim.members()[1].ip + ")" in text


def _two_heads(groups):
    groups["head"]["hosts"].update(groups["workers"]["hosts"])


def _duplicate_ip(groups):
    node1_ip = groups["head"]["hosts"]["node1"]["cluster_ip"]
    groups["workers"]["hosts"]["node2"]["cluster_ip"] = node1_ip


def _wrong_nic(groups):
    groups["workers"]["hosts"]["node2"]["cluster_nic"] = "lo"


BAD_INVENTORIES = {
    "two heads": (_two_heads,
                  "the 'head' group must hold exactly one host (found 2: node1, node2)"),
    "duplicate IP": (_duplicate_ip, "node2: cluster_ip 10.213."),
    "wrong NIC": (_wrong_nic, "node2: cluster_nic lo does not hold cluster_ip"),
}


@pytest.mark.parametrize("case", list(BAD_INVENTORIES))
def test_preflight_refuses_bad_inventory_without_changes(sim, inventory_copy, case):
    edit, expected = BAD_INVENTORIES[case]
    inv = inventory_copy[1](edit)
    before = mark(sim)
    result = play("site.yml", inv)
    assert not result.ok
    assert expected in failure_text(result)
    assert "Fix:" in failure_text(result)
    assert result.changed == 0
    assert snapshot(sim) == before


def test_preflight_refuses_missing_device_without_changes(sim):
    # Preflight checks the devices where the driver is installed (it creates them).
    node2 = sim.members()[1]
    if podman.exec_(node2.container, "test", "-f", "/usr/local/Ascend/driver/version.info",
                    check=False).returncode != 0:
        driver = play("playbooks/npu_driver.yml", sim.inventory_dir)
        assert driver.ok, failure_text(driver)
    podman.exec_(node2.container, "rm", "/dev/davinci7")
    try:
        before = mark(sim)
        result = play("site.yml", sim.inventory_dir)
        assert not result.ok
        text = failure_text(result)
        assert "node2: found 15 NPU devices, expected npus_per_node=16" in text
        assert "/dev/davinci7" in text
        # Only node2 has problems; node1 fails at the gate that stops the whole run.
        problem_hosts = {h for h, t, _ in result.failures if "every problem" in t}
        assert problem_hosts == {"node2"}
        assert "Preflight failed on node2" in text
        assert result.changed == 0
        assert snapshot(sim) == before
    finally:
        podman.exec_(node2.container, "systemctl", "restart", "a3rl-sim-devices.service")
    # The device is back: preflight passes again (the next module's site.yml converges).
    again = play("playbooks/preflight.yml", sim.inventory_dir)
    assert again.ok, failure_text(again)


def test_preflight_refuses_unknown_host_key(sim, inventory_copy, tmp_path: Path):
    """Host keys are checked: a node whose recorded key is wrong is refused."""
    inv, _ = inventory_copy
    node2 = sim.members()[1]
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")],
                   check=True)
    forged = (tmp_path / "k.pub").read_text().split()[:2]
    lines = [ln for ln in sim.known_hosts.read_text().splitlines()
             if not ln.startswith(node2.ip + " ")]
    lines.append(f"{node2.ip} {forged[0]} {forged[1]}")
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(lines) + "\n")
    gv = inv / "group_vars" / "a3_nodes.yml"
    gv.write_text(gv.read_text().replace(str(sim.known_hosts), str(known)))
    before = mark(sim)
    result = play("site.yml", inv,
                  extra_env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp")})
    assert not result.ok
    text = failure_text(result)
    assert "node2: unreachable over SSH" in text
    assert "Host key verification failed" in text  # ssh's own verdict, not our hint
    assert result.changed == 0
    assert snapshot(sim) == before
