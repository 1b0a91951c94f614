"""The preflight rules, one behaviour each, on plain data shaped like Ansible's."""

from __future__ import annotations

import pytest

from a3rl import preflight as pf

GROUPS = {"a3_nodes": ["n1", "n2", "n3"], "head": ["n1"], "workers": ["n2", "n3"]}
HOSTVARS = {
    "n1": {"cluster_ip": "10.0.0.1", "ansible_host": "10.0.0.1"},
    "n2": {"cluster_ip": "10.0.0.2", "ansible_host": "10.0.0.2"},
    "n3": {"cluster_ip": "10.0.0.3", "ansible_host": "10.0.0.3"},
}


def test_topology_good_inventory_has_no_problems():
    assert pf.topology_problems(GROUPS, HOSTVARS) == []


def test_topology_two_heads_named():
    groups = {**GROUPS, "head": ["n1", "n2"], "workers": ["n3"]}
    [msg] = pf.topology_problems(groups, HOSTVARS)
    assert "exactly one host (found 2: n1, n2)" in msg and "Fix:" in msg


def test_topology_no_head():
    groups = {**GROUPS, "head": [], "workers": ["n1", "n2", "n3"]}
    [msg] = pf.topology_problems(groups, HOSTVARS)
    assert "found 0: none" in msg


def test_topology_head_also_worker_and_orphan():
    groups = {"a3_nodes": ["n1", "n2", "n3"], "head": ["n1"], "workers": ["n1", "n2"]}
    problems = pf.topology_problems(groups, HOSTVARS)
    assert any(p.startswith("n1: is in both") for p in problems)
    assert any(p.startswith("n3: is in 'a3_nodes' but in neither") for p in problems)


def test_topology_duplicate_cluster_ip_names_both_hosts():
    hv = {**HOSTVARS, "n3": {"cluster_ip": "10.0.0.2", "ansible_host": "10.0.0.3"}}
    [msg] = pf.topology_problems(GROUPS, hv)
    assert msg.startswith("n3: cluster_ip 10.0.0.2 is also the cluster_ip of n2")


def test_topology_duplicate_ansible_host():
    hv = {**HOSTVARS, "n3": {"cluster_ip": "10.0.0.3", "ansible_host": "10.0.0.1"}}
    [msg] = pf.topology_problems(GROUPS, hv)
    assert "ansible_host 10.0.0.1 is also used by n1" in msg


@pytest.mark.parametrize("ip", [None, "", "10.0.0.300", "fe80::1"])
def test_topology_missing_or_bad_ip(ip):
    hv = {**HOSTVARS, "n2": {"cluster_ip": ip, "ansible_host": "10.0.0.2"}}
    [msg] = pf.topology_problems(GROUPS, hv)
    assert msg.startswith("n2: ")


def test_topology_empty_parent_group():
    [msg] = pf.topology_problems({"head": []}, {})
    assert "'a3_nodes' is empty" in msg


FACTS = {
    "interfaces": ["lo", "eth0", "enp189s0-f1"],
    "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1"}},
    "eth0": {"device": "eth0", "ipv4": {"address": "10.0.0.1"},
             "ipv4_secondaries": [{"address": "10.0.0.100"}]},
    # Ansible stores interface facts under names with '-' turned into '_'.
    "enp189s0_f1": {"device": "enp189s0-f1", "ipv4": {"address": "192.168.5.1"}},
}


@pytest.mark.parametrize(
    ("ip", "nic"),
    [("10.0.0.1", "eth0"), ("10.0.0.100", "eth0"), ("192.168.5.1", "enp189s0-f1"),
     ("10.9.9.9", None)],
)
def test_nic_for_ip(ip, nic):
    assert pf.nic_for_ip(FACTS, ip) == nic


def test_nic_derived_when_not_named():
    assert pf.nic_problems("n1", FACTS, "192.168.5.1") == []


def test_nic_named_correctly():
    assert pf.nic_problems("n1", FACTS, "10.0.0.1", "eth0") == []


def test_wrong_nic_names_the_right_one():
    [msg] = pf.nic_problems("n1", FACTS, "10.0.0.1", "enp189s0-f1")
    assert "cluster_nic enp189s0-f1 does not hold cluster_ip 10.0.0.1" in msg
    assert "set cluster_nic: eth0" in msg


def test_nonexistent_nic():
    [msg] = pf.nic_problems("n1", FACTS, "10.0.0.1", "eth9")
    assert "eth9 does not exist" in msg


def test_ip_on_no_interface_lists_addresses():
    [msg] = pf.nic_problems("n1", FACTS, "10.9.9.9")
    assert "not on any interface" in msg and "eth0=10.0.0.1/10.0.0.100" in msg
    assert "127.0.0.1" not in msg


MGMT = ["davinci_manager", "devmm_svm", "hisi_hdc"]


def _devs(n: int, skip: tuple[int, ...] = ()) -> list[str]:
    return [f"/dev/davinci{i}" for i in range(n) if i not in skip] + [f"/dev/{m}" for m in MGMT]


def test_devices_complete():
    assert pf.npu_device_problems("n1", _devs(16), 16, MGMT) == []


def test_device_missing_is_named():
    [msg] = pf.npu_device_problems("n1", _devs(16, skip=(7,)), 16, MGMT)
    assert "found 15 NPU devices" in msg and "/dev/davinci7" in msg


def test_more_devices_than_declared():
    [msg] = pf.npu_device_problems("n1", _devs(16), 8, MGMT)
    assert "found 16 NPU devices, expected npus_per_node=8" in msg


def test_management_device_missing():
    paths = [p for p in _devs(16) if not p.endswith("hisi_hdc")]
    [msg] = pf.npu_device_problems("n1", paths, 16, MGMT)
    assert "/dev/hisi_hdc" in msg


DF = """Filesystem     1-blocks         Used    Available Capacity Mounted on
overlay    270000000000  20000000000  80000000000      24% /
/dev/vda   270000000000  20000000000  80000000000      24% /var/lib/docker
/dev/sdb  2000000000000 100000000000 500000000000       5% /data
tmpfs        1000000000            0   1000000000       0% /dev/shm
"""


def test_parse_df():
    mounts = pf.parse_df(DF)
    assert [m["mount"] for m in mounts] == ["/", "/var/lib/docker", "/data", "/dev/shm"]
    assert mounts[2]["size_available"] == 500000000000


def test_mount_for_longest_prefix():
    mounts = pf.parse_df(DF)
    assert pf.mount_for(mounts, "/data/a3rl/weights")["mount"] == "/data"
    assert pf.mount_for(mounts, "/datastore")["mount"] == "/"
    assert pf.mount_for(mounts, "/var/lib/docker")["mount"] == "/var/lib/docker"


def test_disk_enough():
    reqs = [{"path": "/data/a3rl", "min_free_gb": 400, "what": "weights"}]
    assert pf.disk_problems("n1", pf.parse_df(DF), reqs) == []


def test_disk_short_names_path_and_amounts():
    reqs = [{"path": "/data/a3rl", "min_free_gb": 600, "what": "weights"}]
    [msg] = pf.disk_problems("n1", pf.parse_df(DF), reqs)
    assert msg.startswith("n1: filesystem /data has 465.7 GB free, 600 GB needed")


def test_disk_needs_on_one_filesystem_add_up():
    reqs = [{"path": "/srv/a", "min_free_gb": 50, "what": "a"},
            {"path": "/srv/b", "min_free_gb": 50, "what": "b"}]
    [msg] = pf.disk_problems("n1", pf.parse_df(DF), reqs)
    assert "100 GB needed" in msg and "/srv/a (a); /srv/b (b)" in msg


def test_os_supported():
    facts = {"distribution": "openEuler", "architecture": "aarch64"}
    assert pf.os_problems("n1", facts, ["openEuler", "Ubuntu"], ["aarch64"]) == []


def test_os_and_arch_unsupported():
    facts = {"distribution": "CentOS", "distribution_version": "7", "architecture": "x86_64"}
    problems = pf.os_problems("n1", facts, ["openEuler"], ["aarch64"])
    assert len(problems) == 2
    assert "OS CentOS 7 is not supported" in problems[0]
    assert "architecture x86_64" in problems[1]
