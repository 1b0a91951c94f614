"""The npu_network role on the simulator: the stand-in hccn_tool's ports are network
namespaces on the nodes' real bridge, so addresses, links and pings are real. A healthy
cluster passes (changed=0 again), each knob (port down, net health bad, address wrong or
missing) is caught with its message, the address plan is applied once and then left
alone, --check changes nothing, a ping that cannot arrive is named with both ends, the
training play refuses to submit (unless -e npu_network_check=false), and the all-reduce
test runs across the cluster and is recorded under runs/.

Every knob a test sets is put back, whatever happens: other modules share the cluster.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from a3rl.paths import project_root
from a3rl.sim import cluster, podman

from .conftest import failure_text, play, provision

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy).
PLAY_STRATEGY = "mitogen"

PLAY = "playbooks/npu_network.yml"
TRAIN_PLAY = "PLAY [Train | Submit, follow, stop or report the run]"
TOOL = cluster.NODE_HCCN_TOOL


def _log(result) -> str:
    return result.log.read_text() if result.log and result.log.exists() else ""


def _ready(sim) -> bool:
    """Driver (hccn_tool) and the training container with the HCCL test on every node,
    and the head's job API answering."""
    for n in sim.members():
        probe = podman.exec_(n.container, "sh", "-c",
                             f"test -x {TOOL} && docker exec a3rl-train test -x "
                             "/usr/local/Ascend/ascend-toolkit/latest/tools/hccl_test/bin/"
                             "all_reduce_test", check=False)
        if probe.returncode != 0:
            return False
    # The training test submits a job: the head's job API must answer. A module before this
    # one on the worker's cluster (test_npu_driver's rolls) can leave Ray stopped.
    api = podman.exec_(sim.members()[0].container, "curl", "-sf", "-m", "5",
                       "http://127.0.0.1:8260/api/jobs/", check=False)
    return api.returncode == 0


@pytest.fixture(scope="module")
def net(sim):
    """A provisioned cluster (site.yml only when a node lacks the driver or the training
    container, or the head's job API does not answer), whose planned device addresses are
    all in place."""
    if not _ready(sim):
        provision(sim)
    result = play(PLAY, sim.inventory_dir)
    assert result.ok, failure_text(result)
    return sim


def _plan(sim) -> dict[str, list[str]]:
    hosts = yaml.safe_load((sim.inventory_dir / "hosts.yml").read_text())
    groups = hosts["all"]["children"]["a3_nodes"]["children"]
    return {h: v["npu_device_ips"] for g in groups.values() for h, v in g["hosts"].items()}


@pytest.fixture
def restore(net):
    """Puts every port back as the plan has it: link up, health Success, planned address."""
    yield net
    plan = _plan(net)
    for node in net.members():
        cluster.reset_npu_ports(net.name, node.hostname, plan[node.hostname])


def test_healthy_cluster_passes_and_a_rerun_changes_nothing(net):
    first = play(PLAY, net.inventory_dir)
    assert first.ok, failure_text(first)
    log = _log(first)
    assert "NPU network: 32/32 devices on 2 node(s) healthy, 16 device pair(s) pinged" in log
    assert "node2  15   10.214." in log  # one table, a line per device
    assert first.changed == 0, first.stats.get("changed")
    checked = play(PLAY, net.inventory_dir, check=True)
    assert checked.ok and checked.changed == 0, failure_text(checked)


def test_each_knob_is_caught_with_its_message(restore):
    sim, plan = restore, _plan(restore)
    wrong = plan["node1"][6].rsplit(".", 1)[0] + ".250"
    cluster.set_npu_link(sim.name, "node2", 5, False)
    cluster.set_npu_net_health(sim.name, "node1", 9, "Receive timeout")
    cluster.set_npu_device_ip(sim.name, "node1", 6, wrong)
    cluster.set_npu_device_ip(sim.name, "node2", 4, None)
    result = play(PLAY, sim.inventory_dir, extravars={"npu_network_configure": False})
    assert not result.ok
    text = failure_text(result)
    assert f"node2: NPU device 5: link is DOWN (`{TOOL} -i 5 -link -g`). Check: the cable" in text
    assert "node2: NPU device 5: net health is Fault" in text  # what a port without link says
    assert "node1: NPU device 9: net health is Receive timeout" in text
    assert (f"node1: NPU device 6 has IP {wrong}/255.255.255.0, the inventory plans "
            f"{plan['node1'][6]}/255.255.255.0. Fix: -e npu_network_configure=true") in text
    assert "node2: NPU device 4 has no IP address" in text
    assert "-e npu_network_check=false skips the check" in text
    assert result.changed == 0
    # Reported, not "fixed": configure was off.
    assert cluster.npu_device_ip(sim.name, "node1", 6) == (wrong, "255.255.255.0")
    assert cluster.npu_device_ip(sim.name, "node2", 4) is None


def test_the_address_plan_is_applied_once_then_left_alone(restore):
    sim, plan = restore, _plan(restore)
    cluster.set_npu_device_ip(sim.name, "node1", 6, plan["node1"][6].rsplit(".", 1)[0] + ".250")
    cluster.set_npu_device_ip(sim.name, "node2", 4, None)
    dry = play(PLAY, sim.inventory_dir, check=True)
    assert dry.ok, failure_text(dry)
    assert "would be configured" in _log(dry)
    assert dry.stats["changed"] == {"node1": 1, "node2": 1}
    assert cluster.npu_device_ip(sim.name, "node2", 4) is None  # --check set nothing
    applied = play(PLAY, sim.inventory_dir)
    assert applied.ok, failure_text(applied)
    assert applied.stats["changed"] == {"node1": 1, "node2": 1}
    assert cluster.npu_device_ip(sim.name, "node1", 6) == (plan["node1"][6], "255.255.255.0")
    assert cluster.npu_device_ip(sim.name, "node2", 4) == (plan["node2"][4], "255.255.255.0")
    hccn_conf = podman.exec_(f"a3rl-{sim.name}-node2", "cat", "/etc/hccn.conf").stdout
    assert f"address_4={plan['node2'][4]}" in hccn_conf  # where the real tool writes it
    again = play(PLAY, sim.inventory_dir)
    assert again.ok and again.changed == 0, again.stats.get("changed")


def test_a_ping_that_cannot_arrive_names_both_ends(restore, inventory_copy):
    """No plan in the inventory: the moved address is unique, up and healthy, so only the
    real pings can tell that it is outside its peers' subnet."""
    sim = restore

    def no_plan(groups):
        for g in groups.values():
            for h in g["hosts"].values():
                h.pop("npu_device_ips", None)

    inv = inventory_copy[1](no_plan)
    moved = "10.215.99.4"
    cluster.set_npu_device_ip(sim.name, "node2", 3, moved)
    result = play(PLAY, inv)
    assert not result.ok
    text = failure_text(result)
    # Device 3 is odd: node2 pings node1 from it (even devices go the other way).
    assert (f"node2: NPU device 3 ({moved}) cannot reach node1 NPU device 3 "
            f"({_plan(sim)['node1'][3]}): 0 of 3 replies. {_plan(sim)['node1'][3]} is outside "
            f"{moved}/255.255.255.0: without a gateway") in text
    assert {h for h, t, _ in result.failures if "every problem" in t} == {"node2"}
    assert "NPU network check failed on node2 (see above)" in text  # node1 passed: the gate
    assert result.changed == 0


def test_training_refuses_to_submit_on_a_broken_network(restore):
    sim = restore
    cluster.set_npu_link(sim.name, "node1", 2, False)
    refused = play("playbooks/train.yml", sim.inventory_dir, extravars={"algo": "grpo"})
    assert not refused.ok
    text = failure_text(refused)
    assert "node1: NPU device 2: link is DOWN" in text
    assert "-e npu_network_check=false" in text
    assert TRAIN_PLAY not in _log(refused)  # the training play never started
    # Skipping the check on purpose reaches the training play and submits (a plan of its
    # own, not followed), which is then stopped.
    # The STAND-IN trainer: this test is about the network check, not about verl.
    own = {"algo": "grpo", "overrides": ["trainer.total_training_steps=3"],
           "a3rl_sim_real_verl": False}
    skipped = play("playbooks/train.yml", sim.inventory_dir,
                   extravars={**own, "npu_network_check": False, "train_job_follow": False})
    assert skipped.ok, failure_text(skipped)
    log = _log(skipped)
    assert "the NPU network is not checked (npu_network_check=false)" in log
    assert TRAIN_PLAY in log and " submitted" in log
    stopped = play("playbooks/train.yml", sim.inventory_dir,
                   extravars={**own, "train_job_action": "stop"})
    assert stopped.ok, failure_text(stopped)


def _record(result) -> Path:
    for line in _log(result).splitlines():
        if "record: " in line and "npu-network-" in line:
            return Path(line.split("record: ", 1)[1].strip().strip("'\""))
    raise AssertionError("no record path in the run's output")


def test_all_reduce_bandwidth_across_the_cluster_is_recorded(net):
    start = time.time()
    result = play(PLAY, net.inventory_dir, extravars={"npu_network_bandwidth": True})
    assert result.ok, failure_text(result)
    assert result.changed == 0
    record = _record(result)
    assert record.parent.resolve() == (project_root() / "runs").resolve()
    out = (record / "allreduce.log").read_text()
    assert "HYDRA_LAUNCH_END" in out  # launched through MPICH's manual launcher
    assert "the minbytes is 1048576, maxbytes is 16777216, iters is 5, warmup_iters is 2" in out
    assert "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:" in out
    assert "a3rl STAND-IN all_reduce_test: 32 ranks" in out
    verdict = json.loads((record / "result.json").read_text())
    assert verdict["ok"] and verdict["nranks"] == 32
    assert [r["bytes"] for r in verdict["rows"]] == [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]
    assert all(r["check"] == "success" and r["bus_gbs"] > 0 for r in verdict["rows"])
    assert record.stat().st_mtime >= start - 1
    # The scratch folder on the head is gone.
    assert podman.exec_(f"a3rl-{net.name}-node1", "sh", "-c",
                        "docker exec a3rl-train sh -c 'ls -d /tmp/a3rl-hccl-* 2>/dev/null'",
                        check=False).stdout.strip() == ""
    missing = play(PLAY, net.inventory_dir, extravars={
        "npu_network_bandwidth": True, "npu_network_bandwidth_container": "no-such-container"})
    assert not missing.ok
    for host in ("node1", "node2"):
        assert f"{host}: the training container no-such-container is not running (" in \
            failure_text(missing)
    # community.docker.docker_container_exec's words for it.
    assert ('Could not find container "no-such-container"). Fix: run site.yml (or '
            "playbooks/training_container.yml) first") in failure_text(missing)
    floor = 1e6
    slow = play(PLAY, net.inventory_dir, extravars={
        "npu_network_bandwidth": True, "npu_network_bandwidth_min_busbw_gbs": floor})
    assert not slow.ok
    text = failure_text(slow)
    assert f"below npu_network_bandwidth_min_busbw_gbs={floor}" in text
    assert "across 32 ranks on node1, node2" in text
    assert "Record: " in text and json.loads(
        (_record(slow) / "result.json").read_text())["ok"] is False


def test_net_health_at_init_passes_once_it_settles(restore):
    """Two ports of node2 read Init (detection initialising) as if the node had just
    booted: the check waits for them, shows that it does, and passes once they settle."""
    sim = restore
    cluster.set_npu_net_health_init(sim.name, "node2", 25, devices=[0, 5])
    result = play(PLAY, sim.inventory_dir, extravars={"npu_network_health_poll_interval": 2})
    assert result.ok, failure_text(result)
    log = _log(result)
    assert "node2: net health of NPU device(s) 0, 5 reads Init (detection initialising)" in log
    assert "node1: net health of NPU device(s)" not in log
    assert "NPU network: 32/32 devices on 2 node(s) healthy" in log
    assert result.changed == 0


def test_net_health_at_fault_or_never_settling_fails_naming_the_device(restore):
    """Fault is not waited for; Init that outlasts the bound fails, and says which."""
    sim = restore
    cluster.set_npu_net_health(sim.name, "node1", 7, "Fault")
    cluster.set_npu_net_health_init(sim.name, "node2", 3600, devices=[3])
    result = play(PLAY, sim.inventory_dir, extravars={
        "npu_network_health_settle_timeout": 4, "npu_network_health_poll_interval": 2})
    assert not result.ok
    text = failure_text(result)
    assert "node1: NPU device 7: net health is Fault" in text
    assert ("node2: NPU device 3: net health is still Init (detection initialising) after "
            "waiting ") in text
    assert "it did not settle" in text and "npu_network_health_settle_timeout" in text
    assert "node1: net health of NPU device(s)" not in _log(result)  # Fault: no wait
    assert result.changed == 0


MGMT_NIC = "a3rlmgmt0"  # sorts before eth0: HCCL's default choice without HCCL_SOCKET_IFNAME


def test_all_reduce_uses_each_nodes_cluster_nic_on_a_multi_nic_node(net):
    """node2 gets a second NIC in a subnet node1 cannot reach, named so that HCCL's
    default order (NIC names ascending) picks it: the test must still pass, its host
    socket on the cluster NIC, because HCCL_SOCKET_IFNAME names that NIC."""
    node2 = f"a3rl-{net.name}-node2"
    podman.exec_(node2, "sh", "-c",
                 f"ip link add {MGMT_NIC} link eth0 type macvlan mode bridge && "
                 f"ip addr add 198.51.100.2/24 dev {MGMT_NIC} && ip link set {MGMT_NIC} up")
    try:
        result = play(PLAY, net.inventory_dir, extravars={"npu_network_bandwidth": True})
        assert result.ok, failure_text(result)
        out = (_record(result) / "allreduce.log").read_text()
        assert "rank 0 host socket on eth0" in out
        assert "rank 16 host socket on eth0" in out
        assert MGMT_NIC not in out
    finally:
        podman.exec_(node2, "ip", "link", "del", MGMT_NIC, check=False)
