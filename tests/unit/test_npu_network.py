"""NPU network checks (a3rl.node.npu_network): hccn_tool output, the device-IP plan, which
devices ping which, the verdict and its messages, the all-reduce test's output; and the
simulator's stand-in hccn_tool run for real in a temporary root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
try:
    from a3rl.node import npu_network as nn
    from a3rl.sim import inventory
    from a3rl.sim.cluster import Node
except ImportError:  # not installed into this interpreter: use the source tree
    sys.path.insert(0, str(REPO / "tools"))
    from a3rl.node import npu_network as nn
    from a3rl.sim import inventory
    from a3rl.sim.cluster import Node

HCCN_TOOL = REPO / "tools/a3rl/sim/files/hdk-standin/hccn_tool"

# Huawei's published sample of a cross-node device ping (MindSpeed-LLM / MindIE docs).
PING_OK = """device 0 PING 10.10.100.10
recv seq=0,time=0.067000ms
recv seq=1,time-0.049000ms
recv seq=2,time=0.047000ms
3 packets transmitted, 3 received, 0.00% packet loss
"""
PING_LOSS = """device 0 PING 10.10.100.10
recv time out seq=0
recv seq=1,time=0.097000ms
recv seq=2,time=0.066000ms
3 packets transmitted, 2 received, 33.33% packet loss
"""
# The HCCL Test guide's sample (execution.md), first rows.
ALLREDUCE = """the minbytes is 8192, maxbytes is 67108864, iters is 20, warmup_iters is 5
data_size(Bytes): |   avg_time(us): | alg_bandwidth(GB/s): | check_result:
8192              |     764.55    |       0.00998        | success
16384             |     858.80    |       0.01777        | success
33554432          |    1714.85    |      18.22317        | success
67108864          |    2630.20    |      23.76245        | success
"""


# --- parsing -------------------------------------------------------------------------------

def test_parse_ip_link_health():
    assert nn.parse_ip("ipaddr:192.168.1.8\nnetmask:255.255.255.0\n") == {
        "address": "192.168.1.8", "netmask": "255.255.255.0"}
    # -vnic -g output must not be taken for the RoCE port's address.
    assert nn.parse_ip("vnic ipaddr: 1.2.3.4\nvnic netmask: 255.0.0.0\n") == {
        "address": None, "netmask": None}
    assert nn.parse_ip("") == {"address": None, "netmask": None}
    assert nn.parse_link("link status: UP\n") == "UP"
    assert nn.parse_link("link status: DOWN") == "DOWN"
    assert nn.parse_link("vnic link status: UP") is None
    assert nn.parse_net_health("net health status: Success\n") == "Success"
    assert nn.parse_net_health("net health status: Receive timeout\n") == "Receive timeout"
    assert nn.parse_net_health("garbage") is None


def test_parse_ping():
    ok = nn.parse_ping(PING_OK)
    assert ok["ok"] and ok["received"] == 3 and ok["loss_pct"] == 0.0
    assert ok["rtt_ms"] == [0.067, 0.049, 0.047]  # the sample's "time-" typo is read too
    loss = nn.parse_ping(PING_LOSS)
    assert not loss["ok"] and loss["received"] == 2 and loss["timeouts"] == [0]
    assert loss["loss_pct"] == pytest.approx(33.33)
    assert not nn.parse_ping("")["ok"]
    unreachable = nn.parse_ping("device 1 PING 10.0.0.9\n"
                                "From 10.0.0.9 icmp_seq=0 Destination Host Unreachable\n"
                                "3 packets transmitted, 0 received, 100.00% packet loss\n")
    assert unreachable["unreachable"] and not unreachable["ok"]


# --- the inventory's plan --------------------------------------------------------------------

def _plan(base: int, n: int = 4) -> list[str]:
    return [f"10.0.0.{base + d}" for d in range(n)]


def test_plan_problems():
    assert nn.plan_problems({"node1": [], "node2": None}, "bad", 4) == []
    assert nn.plan_problems({"node1": _plan(1), "node2": _plan(11)}, "255.255.255.0", 4) == []
    problems = nn.plan_problems(
        {"node1": _plan(1, 3), "node2": ["10.0.0.1", "x", "10.0.0.13", "10.0.0.14"]},
        "255.255.0.255", 4)
    text = "\n".join(problems)
    assert "npu_device_netmask '255.255.0.255' is not an IPv4 netmask" in text
    assert "node1: npu_device_ips has 3 entries, npus_per_node is 4" in text
    assert "node2: npu_device_ips[1] = 'x' is not an IPv4 address" in text
    assert "node2 device 0 and node1 device 0 are both planned as 10.0.0.1" in text
    assert "must be a list" in nn.plan_problems({"node1": "10.0.0.1"}, "255.255.255.0", 4)[0]


# --- which devices ping which --------------------------------------------------------------------

def test_small_clusters_ping_every_pair():
    hosts = [f"n{i}" for i in range(4)]
    pairs = nn.node_pairs(hosts, all_pairs_max_nodes=8)
    assert pairs == [("n0", "n1"), ("n0", "n2"), ("n0", "n3"), ("n1", "n2"), ("n1", "n3"),
                     ("n2", "n3")]
    assert nn.node_pairs(["n0"]) == [] and nn.node_pairs([]) == []


def test_large_clusters_sample_a_ring_and_random_pairs_deterministically():
    hosts = [f"node{i}" for i in range(1, 65)]
    pairs = nn.node_pairs(hosts, all_pairs_max_nodes=8, random_peers=2, seed=7)
    assert pairs == nn.node_pairs(hosts, all_pairs_max_nodes=8, random_peers=2, seed=7)
    assert pairs != nn.node_pairs(hosts, all_pairs_max_nodes=8, random_peers=2, seed=8)
    as_sets = {frozenset(p) for p in pairs}
    assert len(as_sets) == len(pairs)  # no pair twice
    assert all(a != b for a, b in pairs)
    for i in range(64):  # the ring is always there
        assert frozenset((hosts[i], hosts[(i + 1) % 64])) in as_sets
    # each node added up to 2 random partners on top of the ring's 64 pairs
    assert 64 < len(pairs) <= 64 + 2 * 64
    degree = {h: sum(h in p for p in pairs) for h in hosts}
    assert min(degree.values()) >= 3  # ring (2) + at least its own random draw
    assert len(pairs) < 64 * 63 // 2 / 10  # far fewer than all 2016 pairs


def test_ping_plan_splits_devices_between_both_sides():
    addresses = {"a": {0: "10.0.0.1", 1: "10.0.0.2", 2: "10.0.0.3"},
                 "b": {0: "10.0.0.11", 1: "10.0.0.12"}}  # b's device 2 failed its checks
    plan = nn.ping_plan(["a", "b"], addresses, [("a", "b")])
    assert plan["a"] == [{"device": 0, "address": "10.0.0.11", "source_address": "10.0.0.1",
                          "peer": "b", "peer_device": 0}]
    assert plan["b"] == [{"device": 1, "address": "10.0.0.2", "source_address": "10.0.0.12",
                          "peer": "a", "peer_device": 1}]
    assert nn.ping_count(plan) == 2


# --- the verdict -------------------------------------------------------------------------------

def probe(addresses, link=None, health=None, errors=None, found=True, reboot=False,
          would_set=()):
    """A module probe result as the stand-in's outputs make it."""
    link, health, errors = link or {}, health or {}, errors or {}
    devices = {}
    for d, addr in enumerate(addresses):
        devices[str(d)] = {
            "ip": f"ipaddr:{addr}\nnetmask:255.255.255.0\n" if addr else "",
            "link": f"link status: {link.get(d, 'UP')}\n",
            "health": f"net health status: {health.get(d, 'Success')}\n",
            "errors": dict(errors.get(d, {})),
        }
        if not addr:
            devices[str(d)]["errors"]["ip"] = f"Get ip address failed: device {d} has none."
    return {"found": found, "tool": "/t/hccn_tool", "reboot_pending": reboot,
            "devices": devices if found else {}, "would_set": list(would_set)}


HOSTS = ["node1", "node2"]
PLANS = {"node1": _plan(1), "node2": _plan(11)}


def _report(probes, plans=None, pings=None, **kw):
    return nn.report(HOSTS, probes, PLANS if plans is None else plans, "255.255.255.0", 4,
                     pings, **kw)


def _all_ok_pings(plan):
    return {h: [{**p, "rc": 0, "output": PING_OK} for p in ps] for h, ps in plan.items()}


def test_healthy_cluster_passes_with_one_table():
    probes = {"node1": probe(_plan(1)), "node2": probe(_plan(11))}
    assessed = nn.assess(HOSTS, probes, PLANS, "255.255.255.0", 4)
    plan = nn.ping_plan(HOSTS, assessed["addresses"], nn.node_pairs(HOSTS))
    assert nn.ping_count(plan) == 4
    r = _report(probes, pings=_all_ok_pings(plan))
    assert r["failed"] == [] and all(v == [] for v in r["problems"].values())
    assert r["summary"] == "NPU network: 8/8 devices on 2 node(s) healthy, 4 device pair(s) pinged"
    lines = r["table"].splitlines()
    assert lines[0].split() == ["node", "dev", "address", "link", "health", "pings", "ok",
                                "result"]
    assert len(lines) == 2 + 8
    assert lines[2].split() == ["node1", "0", "10.0.0.1/255.255.255.0", "UP", "Success",
                                "1/1", "ok"]


def test_each_device_fault_is_named_with_host_device_and_what_to_check():
    probes = {
        "node1": probe(["10.0.0.1", None, "10.0.0.9", "10.0.0.4"], link={3: "DOWN"},
                       health={3: "Fault"}),
        "node2": probe(_plan(11), health={1: "Receive timeout"},
                       errors={2: {"link": "Device 2 does not exist"}}),
    }
    r = _report(probes)
    one, two = "\n".join(r["problems"]["node1"]), "\n".join(r["problems"]["node2"])
    assert ("node1: NPU device 1 has no IP address (`/t/hccn_tool -i 1 -ip -g`: Get ip address "
            "failed: device 1 has none.). Fix: run with -e npu_network_configure=true to apply "
            "the inventory's plan (10.0.0.2/255.255.255.0).") in one
    assert ("node1: NPU device 2 has IP 10.0.0.9/255.255.255.0, the inventory plans "
            "10.0.0.3/255.255.255.0. Fix: -e npu_network_configure=true applies the plan "
            "(`/t/hccn_tool -i 2 -ip -s address 10.0.0.3 netmask 255.255.255.0`)") in one
    assert "node1: NPU device 3: link is DOWN (`/t/hccn_tool -i 3 -link -g`). Check: the " \
        "cable or optical module of this port" in one
    assert "node1: NPU device 3: net health is Fault" in one
    assert "node2: NPU device 1: net health is Receive timeout" in two
    assert r["failed"] == ["node1", "node2"]
    refused = probe(_plan(1), errors={2: {"set": "ipaddr conflict: 10.0.0.3 is already the "
                                                "address of device 1."}})
    text = "\n".join(_report({"node1": refused, "node2": probe(_plan(11))})["problems"]["node1"])
    assert ("node1: NPU device 2: setting its planned address failed (`/t/hccn_tool -i 2 -ip -s "
            "address 10.0.0.3 netmask 255.255.255.0`): ipaddr conflict") in text
    assert ("node2: NPU device 2: `/t/hccn_tool -i 2 -link -g` failed: Device 2 does not "
            "exist. Check: the driver and the device (npu-smi info; npu-smi info -t health "
            "-i 1).") in two
    assert r["failed"] == ["node1", "node2"]
    assert "FAILED on node1, node2" in r["summary"]
    # Devices with their own problems are not pinged (their ping would only repeat them).
    assessed = nn.assess(HOSTS, probes, PLANS, "255.255.255.0", 4)
    assert assessed["addresses"] == {"node1": {0: "10.0.0.1"},
                                     "node2": {0: "10.0.0.11", 3: "10.0.0.14"}}


def test_init_is_pending_and_the_wait_replaces_the_health_it_read():
    first = probe(_plan(1), health={1: "Init", 2: "Init", 3: "Fault"},
                  errors={0: {"health": "busy"}})
    first["devices"]["0"]["health"] = "net health status: Init\n"  # its query failed
    first["checked_at"] = 100.0
    assert nn.health_pending(first) == [1, 2]  # not Fault, not a failed query
    assert nn.health_pending(None) == [] and nn.health_pending({"skipped": True}) == []
    settle = {"checked_at": 112.4, "devices": {
        "1": {"health": "net health status: Success\n", "errors": {}},
        "2": {"health": "net health status: Init\n", "errors": {}}}}
    assert nn.health_pending(settle) == [2]
    merged = nn.merge_health(first, settle)
    assert merged["settle_waited_s"] == 12
    assert merged["devices"]["1"]["health"] == "net health status: Success\n"
    assert merged["devices"]["3"] == first["devices"]["3"]  # not re-read: as probed
    assert first["devices"]["1"]["health"] == "net health status: Init\n"  # not mutated
    # No wait (skipped: nothing was at Init): the probe as it was.
    assert nn.merge_health(first, {"skipped": True}) == first
    assert nn.merge_health(first, None) == first
    # A re-read that fails becomes the device's health error.
    failed = nn.merge_health(first, {"checked_at": 101, "devices": {
        "2": {"health": "no answer within 60s", "errors": {"health": "no answer within 60s"}}}})
    assert failed["devices"]["2"]["errors"] == {"health": "no answer within 60s"}


def test_init_that_settles_passes_and_init_that_does_not_fails_naming_it():
    waited = probe(_plan(1), health={1: "Init"})
    waited["checked_at"] = 0.0
    settled = nn.merge_health(waited, {"checked_at": 20.0, "devices": {
        "1": {"health": "net health status: Success\n", "errors": {}}}})
    r = _report({"node1": settled, "node2": probe(_plan(11))})
    assert r["failed"] == [] and r["rows"]["node1"][1]["health"] == "Success"
    stuck = nn.merge_health(waited, {"checked_at": 180.0, "devices": {
        "1": {"health": "net health status: Init\n", "errors": {}}}})
    r = _report({"node1": stuck, "node2": probe(_plan(11), health={2: "Fault"})})
    one, two = "\n".join(r["problems"]["node1"]), "\n".join(r["problems"]["node2"])
    assert ("node1: NPU device 1: net health is still Init (detection initialising) after "
            "waiting 180 s for it to settle (`/t/hccn_tool -i 1 -net_health -g`): it did not "
            "settle. Check: a detect IP is set (`/t/hccn_tool -i 1 -netdetect -g`)") in one
    assert "-e npu_network_health_settle_timeout=<seconds>" in one
    assert "net health is Fault" not in one
    assert "node2: NPU device 2: net health is Fault (`/t/hccn_tool -i 2 -net_health -g`)" in two
    assert "still Init" not in two
    assert r["failed"] == ["node1", "node2"]
    assert r["rows"]["node1"][1]["health"] == "Init" and not r["rows"]["node1"][1]["ok"]
    # Never waited for (no wait result): said so, still a failure.
    text = "\n".join(_report({"node1": waited, "node2": probe(_plan(11))})["problems"]["node1"])
    assert "net health is still Init (detection initialising) and was not waited for" in text


def test_hccl_socket_env_names_the_cluster_nic_exactly():
    assert nn.hccl_socket_env("enp189s0f0", "10.0.0.1") == {
        "HCCL_SOCKET_IFNAME": "=enp189s0f0", "HCCL_SOCKET_FAMILY": "AF_INET"}
    assert nn.hccl_socket_env("eth0", "fd00::1")["HCCL_SOCKET_FAMILY"] == "AF_INET6"
    with pytest.raises(ValueError, match="node2: no NIC holds cluster_ip 10.0.0.2.*cluster_nic"):
        nn.hccl_socket_env(None, "10.0.0.2", "node2")


def test_no_plan_means_presence_and_uniqueness_only():
    probes = {"node1": probe(["10.0.0.1", None, "10.0.0.7", "10.0.0.4"]),
              "node2": probe(["10.0.0.11", "10.0.0.12", "10.0.0.7", "10.0.0.14"])}
    r = _report(probes, plans={})
    one = "\n".join(r["problems"]["node1"])
    assert "node1: NPU device 1 has no IP address" in one
    assert "declare npu_device_ips for this host in the inventory" in one
    assert ("node1: NPU device 2: address 10.0.0.7 is also used by node1 device 2 and node2 "
            "device 2.") in one
    assert "node2: NPU device 2: address 10.0.0.7 is also used by" in "\n".join(
        r["problems"]["node2"])


def test_missing_tool_fails_but_check_mode_skips_it():
    probes = {"node1": probe([], found=False), "node2": probe(_plan(11))}
    r = _report(probes)
    assert r["problems"]["node1"] == [
        "node1: /t/hccn_tool not found. It comes with the NPU driver: run "
        "playbooks/npu_driver.yml (or set npu_network_hccn_tool to its path)."]
    checked = _report(probes, check_mode=True)
    assert checked["problems"]["node1"] == [] and "node1" in checked["skipped"]
    assert "nothing to check in --check mode" in checked["table"]


def test_check_mode_counts_what_configure_would_set_as_planned():
    probes = {"node1": probe([None] * 4, would_set=range(4)), "node2": probe(_plan(11))}
    r = _report(probes, check_mode=True)
    assert r["failed"] == []
    assert "would be configured" in r["table"]
    # Not pinged: their addresses do not exist yet.
    assert nn.assess(HOSTS, probes, PLANS, "255.255.255.0", 4, check_mode=True)[
        "addresses"]["node1"] == {}


def test_pending_reboot_defers_a_silent_node_unless_required():
    silent = probe(_plan(1), errors={d: {"link": "dsmi_get_device_count failed",
                                         "health": "dsmi_get_device_count failed"}
                                     for d in range(4)}, reboot=True)
    probes = {"node1": silent, "node2": probe(_plan(11))}
    r = _report(probes)
    assert r["failed"] == [] and "node1" in r["deferred"]
    assert "checked after the reboot" in r["table"]
    required = _report(probes, require_active=True)
    assert required["failed"] == ["node1"]
    assert any("waits for a reboot to activate its new NPU driver. Fix: reboot it" in p
               for p in required["problems"]["node1"])


def test_failed_ping_names_both_ends_and_the_subnet():
    probes = {"node1": probe(_plan(1)), "node2": probe(["10.0.0.11", "10.0.0.12",
                                                        "10.0.0.13", "10.9.0.14"])}
    plans = {"node1": _plan(1), "node2": []}
    assessed = nn.assess(HOSTS, probes, plans, "255.255.255.0", 4)
    plan = nn.ping_plan(HOSTS, assessed["addresses"], nn.node_pairs(HOSTS))
    pings = _all_ok_pings(plan)
    lost = dict(pings["node1"][0], output=PING_LOSS, rc=1)  # node1 dev 0 -> node2 dev 0
    pings["node1"][0] = lost
    pings["node2"][-1] = dict(pings["node2"][-1], rc=1,  # node2 dev 3 -> node1 dev 3
                              output="device 3 PING 10.0.0.4\n3 packets transmitted, 0 "
                                     "received, 100.00% packet loss\n")
    r = _report(probes, plans=plans, pings=pings)
    one, two = "\n".join(r["problems"]["node1"]), "\n".join(r["problems"]["node2"])
    assert ("node1: NPU device 0 (10.0.0.1) cannot reach node2 NPU device 0 (10.0.0.11): 2 "
            "of 3 replies. Check: both ports' link and address") in one
    assert "TLS is the same on both (`hccn_tool -i 0 -tls -g`)" in one
    assert ("node2: NPU device 3 (10.9.0.14) cannot reach node1 NPU device 3 (10.0.0.4): 0 of "
            "3 replies. 10.0.0.4 is outside 10.9.0.14/255.255.255.0: without a gateway") in two
    assert r["failed"] == ["node1", "node2"]
    row = next(ln for ln in r["table"].splitlines() if ln.startswith("node2  0 "))
    assert "0/1 (no reply: node1:0)" in row and row.endswith("FAIL")


def test_a_ping_without_any_output_is_a_failure_too():
    probes = {"node1": probe(_plan(1)), "node2": probe(_plan(11))}
    assessed = nn.assess(HOSTS, probes, PLANS, "255.255.255.0", 4)
    plan = nn.ping_plan(HOSTS, assessed["addresses"], nn.node_pairs(HOSTS))
    pings = _all_ok_pings(plan)
    pings["node1"][0] = dict(pings["node1"][0], rc=124, output="no answer within 60s")
    r = _report(probes, pings=pings)
    assert "no result (rc 124: no answer within 60s)" in "\n".join(r["problems"]["node1"])


def test_big_tables_list_only_failing_devices():
    probes = {"node1": probe(_plan(1), link={2: "DOWN"}), "node2": probe(_plan(11))}
    r = _report(probes, max_rows=4)
    body = r["table"].splitlines()[2:]
    assert body[0].startswith("node1  2 ") and "FAIL" in body[0]
    assert body[1] == "(7 healthy devices not listed; more than 4 devices)"


# --- the bandwidth check -----------------------------------------------------------------------

def test_parse_allreduce_and_bus_bandwidth():
    parsed = nn.parse_allreduce(ALLREDUCE)
    assert parsed["header"] == {"minbytes": 8192, "maxbytes": 67108864, "iters": 20,
                                "warmup_iters": 5}
    assert [r["bytes"] for r in parsed["rows"]] == [8192, 16384, 33554432, 67108864]
    assert parsed["rows"][-1] == {"bytes": 67108864, "avg_us": 2630.2, "alg_gbs": 23.76245,
                                  "check": "success"}
    # The binary's own header spells aveg_time; both parse.
    assert nn.parse_allreduce(ALLREDUCE.replace("avg_time", "aveg_time"))["rows"] == \
        parsed["rows"]
    assert nn.bus_bandwidth(10.0, 8) == pytest.approx(17.5)
    assert nn.bus_bandwidth(10.0, 32) == pytest.approx(19.375)
    assert nn.bus_bandwidth(10.0, 1) == 10.0


def test_allreduce_verdict():
    hosts = ["node1", "node2"]
    ok = nn.allreduce_verdict(ALLREDUCE, 0, 32, 40.0, hosts)
    assert ok["ok"] and ok["peak"]["bytes"] == 67108864
    assert ok["peak"]["bus_gbs"] == pytest.approx(23.76245 * 62 / 32, abs=1e-4)
    slow = nn.allreduce_verdict(ALLREDUCE, 0, 32, 50.0, hosts)
    assert not slow["ok"]
    assert slow["problems"] == [
        "all-reduce bus bandwidth peaks at 46.040 GB/s (67108864 bytes, algorithm bandwidth "
        "23.762 GB/s) across 32 ranks on node1, node2, below "
        "npu_network_bandwidth_min_busbw_gbs=50.0. Check: the ping table for slow or lossy "
        "pairs, each port's speed (`hccn_tool -i N -speed -g`) and link errors (`hccn_tool -i "
        "N -link_stat -g`), the switch ports, and that HCCL_BUFFSIZE exceeds the largest size "
        "tested."]
    broken = nn.allreduce_verdict(ALLREDUCE.replace("| success\n16384", "| failed\n16384"),
                                  0, 32, 1.0, hosts)
    assert "result check failed at 1 size(s) (first: 8192 bytes)" in broken["problems"][0]
    crashed = nn.allreduce_verdict("the minbytes is 8192, maxbytes is 8192, iters is 20, "
                                   "warmup_iters is 5\nhccl interface return err "
                                   "./common/src/hccl_test_common.cc:538, retcode: 7\n",
                                   1, 32, 1.0, hosts)
    assert "failed (exit 1) across 32 ranks on node1, node2" in crashed["problems"][0]
    assert "retcode: 7" in crashed["problems"][0]
    assert "printed no result rows" in nn.allreduce_verdict("", 0, 32, 1.0, hosts)["problems"][0]


def test_manual_launcher_lines_and_hostfile():
    text = ("HYDRA_LAUNCH: /usr/local/bin/hydra_pmi_proxy --control-port node1:34652 --rmk user "
            "--launcher manual --demux poll --pgid 0 --retries 10 --usize -2 --proxy-id 0\n"
            "HYDRA_LAUNCH: /usr/local/bin/hydra_pmi_proxy --control-port node1:34652 --rmk user "
            "--launcher manual --demux poll --pgid 0 --retries 10 --usize -2 --proxy-id 1\n"
            "HYDRA_LAUNCH_END\n")
    cmds = nn.hydra_launch_commands(text)
    assert len(cmds) == 2 and cmds[1][0] == "/usr/local/bin/hydra_pmi_proxy"
    assert cmds[1][-2:] == ["--proxy-id", "1"]
    with pytest.raises(ValueError, match="did not print HYDRA_LAUNCH_END"):
        nn.hydra_launch_commands(text.replace("HYDRA_LAUNCH_END\n", ""))
    assert nn.mpich_hostfile([("10.0.0.1", 16), ("10.0.0.2", "16")]) == \
        "10.0.0.1:16\n10.0.0.2:16\n"


# --- the simulator's device-IP plan ---------------------------------------------------------------

def test_simulated_device_ip_plan():
    nodes = [Node(i, f"node{i}", f"10.213.7.{10 + i}", f"c{i}") for i in (1, 2)]
    plan = inventory.device_ips("10.213.7.0/24", nodes, 16)
    assert plan["node1"][0] == "10.214.7.1" and plan["node1"][15] == "10.214.7.16"
    assert plan["node2"][0] == "10.214.7.17" and len(plan["node2"]) == 16
    assert nn.plan_problems(plan, inventory.DEVICE_NETMASK, 16) == []
    assert inventory.hosts(nodes, plan)["all"]["children"]["a3_nodes"]["children"][
        "workers"]["hosts"]["node2"]["npu_device_ips"] == plan["node2"]
    with pytest.raises(ValueError, match="16 nodes x 16 NPUs do not fit"):
        inventory.device_ips("10.213.7.0/24",
                             [Node(i, f"n{i}", "x", "c") for i in range(16)], 16)


# --- the stand-in hccn_tool ---------------------------------------------------------------------

@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node's root with a driver and four dies (the stand-in reads only these)."""
    (tmp_path / "usr/local/Ascend/driver").mkdir(parents=True)
    (tmp_path / "usr/local/Ascend/driver/version.info").write_text("Version=25.3.rc1\n")
    (tmp_path / "dev").mkdir()
    for d in range(4):
        (tmp_path / f"dev/davinci{d}").touch()
    (tmp_path / "etc/a3rl-sim").mkdir(parents=True)
    return tmp_path


def hccn(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "A3RL_STANDIN_ROOT": str(root)}
    return subprocess.run([sys.executable, str(HCCN_TOOL), *args], env=env, text=True,
                          capture_output=True, timeout=30)


def test_standin_is_named_as_such():
    head = HCCN_TOOL.read_text().splitlines()[:4]
    assert any("STAND-IN for Huawei's `hccn_tool`" in ln for ln in head)


def test_standin_ip_set_and_get(node):
    got = hccn(node, "-i", "1", "-ip", "-g")
    assert got.returncode == 1 and "no ip address" in got.stdout
    assert hccn(node, "-i", "1", "-ip", "-s", "address", "10.0.0.2", "netmask",
                "255.255.255.0").returncode == 0
    got = hccn(node, "-i", "1", "-ip", "-g")
    assert got.returncode == 0 and got.stdout == "ipaddr:10.0.0.2\nnetmask:255.255.255.0\n"
    assert nn.parse_ip(got.stdout)["address"] == "10.0.0.2"
    # Written where the real tool writes it, and as the device's live address.
    assert "address_1=10.0.0.2\nnetmask_1=255.255.255.0" in (node / "etc/hccn.conf").read_text()
    assert "1 10.0.0.2 255.255.255.0" in (node / "etc/a3rl-sim/hccn-ip").read_text()
    # Setting it again changes the one line, keeps others.
    hccn(node, "-i", "0", "-ip", "-s", "address", "10.0.0.1", "netmask", "255.255.255.0")
    hccn(node, "-i", "1", "-ip", "-s", "address", "10.0.0.3", "netmask", "255.255.0.0")
    conf = (node / "etc/hccn.conf").read_text()
    assert conf.count("address_1=") == 1 and "address_1=10.0.0.3" in conf
    assert "address_0=10.0.0.1" in conf
    # Another die of this node already has it: refused, like the real conflict check.
    clash = hccn(node, "-i", "2", "-ip", "-s", "address", "10.0.0.1", "netmask",
                 "255.255.255.0")
    assert clash.returncode == 1 and "ipaddr conflict" in clash.stdout
    bad = hccn(node, "-i", "2", "-ip", "-s", "address", "10.0.0.300", "netmask",
               "255.255.255.0")
    assert bad.returncode == 1 and "invalid" in bad.stdout


def test_standin_link_and_health_knobs(node):
    assert hccn(node, "-i", "3", "-link", "-g").stdout == "link status: UP\n"
    assert hccn(node, "-i", "3", "-net_health", "-g").stdout == "net health status: Success\n"
    (node / "etc/a3rl-sim/hccn-link").write_text("# knob\n3 DOWN\n")
    assert hccn(node, "-i", "3", "-link", "-g").stdout == "link status: DOWN\n"
    # A port without link reports Fault, as Huawei's fault-injection guide shows.
    assert hccn(node, "-i", "3", "-net_health", "-g").stdout == "net health status: Fault\n"
    assert hccn(node, "-i", "2", "-link", "-g").stdout == "link status: UP\n"
    (node / "etc/a3rl-sim/hccn-health").write_text("2 Receive timeout\n")
    assert nn.parse_net_health(hccn(node, "-i", "2", "-net_health", "-g").stdout) == \
        "Receive timeout"
    (node / "etc/a3rl-sim/hccn-health").write_text("2 Sucess\n")  # a typo is refused
    typo = hccn(node, "-i", "2", "-net_health", "-g")
    assert typo.returncode == 1 and "unknown status 'Sucess'" in typo.stdout


def _booted(root: Path, seconds_ago: float) -> None:
    """The node's PID 1 started ``seconds_ago``: /proc/stat's btime plus its start ticks."""
    import time

    tck = os.sysconf("SC_CLK_TCK")
    btime = int(time.time() - seconds_ago) - 1000
    (root / "proc/1").mkdir(parents=True, exist_ok=True)
    (root / "proc/stat").write_text(f"cpu  1 2 3\nbtime {btime}\nprocesses 9\n")
    fields = ["S"] + ["0"] * 18 + [str(1000 * tck)] + ["0"] * 10
    (root / "proc/1/stat").write_text(f"1 (systemd (x)) {' '.join(fields)}\n")


def test_standin_net_health_reads_init_for_a_while_after_boot(node):
    _booted(node, 10)
    health = node / "etc/a3rl-sim/hccn-init"
    assert hccn(node, "-i", "1", "-net_health", "-g").stdout == "net health status: Success\n"
    health.write_text("# knob\nall 30\n3 5\n")
    # The documented output, with Init as the status (DCMI code 6).
    assert hccn(node, "-i", "1", "-net_health", "-g").stdout == "net health status: Init\n"
    assert nn.parse_net_health(hccn(node, "-i", "0", "-net_health", "-g").stdout) == "Init"
    # Device 3's own window (5 s) is over 10 s after boot: settled.
    assert hccn(node, "-i", "3", "-net_health", "-g").stdout == "net health status: Success\n"
    _booted(node, 40)  # later: every window is over
    assert hccn(node, "-i", "1", "-net_health", "-g").stdout == "net health status: Success\n"
    _booted(node, 1)  # a reboot starts the window again
    assert hccn(node, "-i", "1", "-net_health", "-g").stdout == "net health status: Init\n"
    # No link: Fault, whatever the window; an explicit status wins over it.
    (node / "etc/a3rl-sim/hccn-link").write_text("1 DOWN\n")
    assert hccn(node, "-i", "1", "-net_health", "-g").stdout == "net health status: Fault\n"
    (node / "etc/a3rl-sim/hccn-health").write_text("2 Receive timeout\n")
    assert "Receive timeout" in hccn(node, "-i", "2", "-net_health", "-g").stdout
    health.write_text("x 30\n")
    bad = hccn(node, "-i", "0", "-net_health", "-g")
    assert bad.returncode == 1 and "hccn-init: bad line 'x 30'" in bad.stdout


def _all_reduce_standin():
    import importlib.machinery
    import importlib.util

    path = REPO / "tools/a3rl/sim/files/cann-standin/standin-all_reduce_test"
    loader = importlib.machinery.SourceFileLoader("standin_all_reduce_test", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_standin_all_reduce_picks_the_host_nic_as_hccl_does():
    """The CANN reference's order: HCCL_IF_IP, HCCL_SOCKET_IFNAME (prefixes, =exact,
    ^exclusions), else names ascending with docker and lo last."""
    choose = _all_reduce_standin().choose_nic
    nics = [("lo", "127.0.0.1"), ("eth0", "10.0.0.1"), ("docker0", "172.17.0.1"),
            ("a3rlmgmt0", "198.51.100.2"), ("eth0.100", "10.1.0.1")]
    assert choose(nics, {}) == ("a3rlmgmt0", "198.51.100.2")  # the multi-NIC trap
    assert choose([n for n in nics if n[0] != "a3rlmgmt0"], {}) == ("eth0", "10.0.0.1")
    assert choose([("lo", "127.0.0.1"), ("docker0", "172.17.0.1")], {})[0] == "docker0"
    assert choose(nics, {"HCCL_SOCKET_IFNAME": "=eth0"}) == ("eth0", "10.0.0.1")
    assert choose(nics, {"HCCL_SOCKET_IFNAME": "=eth0.100"}) == ("eth0.100", "10.1.0.1")
    assert choose(nics, {"HCCL_SOCKET_IFNAME": "eth"}) == ("eth0", "10.0.0.1")
    assert choose(nics, {"HCCL_SOCKET_IFNAME": "=enp1,eth0"}) == ("eth0", "10.0.0.1")
    assert choose(nics, {"HCCL_SOCKET_IFNAME": "^=a3rlmgmt0,docker0"}) == ("eth0", "10.0.0.1")
    assert choose(nics, {"HCCL_SOCKET_IFNAME": "=enp1"}) is None
    assert choose(nics, {"HCCL_IF_IP": "10.1.0.1", "HCCL_SOCKET_IFNAME": "=eth0"}) == \
        ("eth0.100", "10.1.0.1")


def test_standin_refuses_what_the_real_tool_refuses(node):
    missing = hccn(node, "-i", "7", "-link", "-g")
    assert missing.returncode == 1 and "Device 7 does not exist" in missing.stdout
    for args in (["-i", "0", "-link"], ["-i", "x", "-link", "-g"], ["-i", "0", "-tls", "-g"],
                 ["-i", "0", "-ip", "-s", "address", "10.0.0.1"],
                 ["-i", "0", "-ping", "-g", "address", "10.0.0.1", "pkt", "70000"]):
        res = hccn(node, *args)
        assert res.returncode == 1, args
    assert "needs a simulated node" in hccn(node, "-i", "0", "-ping", "-g", "address",
                                            "10.0.0.1").stdout
    (node / "usr/local/Ascend/driver/version.info").unlink()
    nodriver = hccn(node, "-i", "0", "-link", "-g")
    assert nodriver.returncode == 1 and "driver is not installed" in nodriver.stdout
    assert hccn(node, "-h").returncode == 0
