"""Ray start arguments, firewall rules, the auth decision and membership."""

from __future__ import annotations

import pytest

from a3rl.planning import ray
from a3rl.planning.ray import RayConfigError

PORTS = {"gcs": 29444, "dashboard": 8260, "client_server": 10001, "node_manager": 29450,
         "object_manager": 29451, "runtime_env_agent": 29452, "dashboard_agent_grpc": 29453,
         "dashboard_agent_http": 29454, "metrics_export": 29455, "min_worker": 10002,
         "max_worker": 19999}


@pytest.mark.parametrize(("version", "setting", "mode"), [
    ("2.48.0", "auto", "none"), ("2.52.0", "auto", "token"), ("2.60.0", "auto", "token"),
    ("2.60.0", "none", "none"), ("2.52.1", "token", "token"),
])
def test_auth_mode(version, setting, mode):
    assert ray.auth_mode(setting, version) == mode


def test_token_required_on_an_old_ray_is_refused():
    with pytest.raises(RayConfigError, match="Ray 2.48.0 has no token authentication"):
        ray.auth_mode("token", "2.48.0")


def test_multiport_spec_merges_neighbours():
    spec = ray.multiport_spec(ray.ports(PORTS))
    # The dashboard's and the autoscaler's metrics ports and Ray client's specific-server
    # ports are Ray's too.
    assert spec == "8260,10001:19999,23000:23999,29444,29450:29455,44217,44227"


def test_ports_refuse_duplicates_and_ports_in_the_worker_range():
    with pytest.raises(RayConfigError, match="used twice"):
        ray.ports({**PORTS, "dashboard": 29444})
    with pytest.raises(RayConfigError, match="inside the worker port range"):
        ray.ports({**PORTS, "dashboard": 12000})
    with pytest.raises(RayConfigError, match="specific-server ports 23000-23999"):
        ray.ports({**PORTS, "max_worker": 23500})


HEAD, W1, W2 = "10.0.0.11", "10.0.0.12", "10.0.0.13"
NODES = [HEAD, W1, W2]


def _rules(me, **kw):
    kw = {"peer_ports": ["64021:64052", "29470"], "ephemeral": ["32768:60999"], **kw}
    return ray.firewall_rules("A3RL-RAY", me, HEAD, NODES, PORTS, **kw)


def test_head_accepts_gcs_from_workers_and_nothing_of_ray_from_others():
    rules = _rules(HEAD, allowed=["192.168.7.0/24"])
    assert rules["input"] == [
        "-A A3RL-RAY -i lo -j RETURN",
        "-A A3RL-RAY -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        "-A A3RL-RAY -p icmp -j RETURN",
        "-A A3RL-RAY -p tcp -m multiport --dports 22 -j RETURN",
        "-A A3RL-RAY -s 10.0.0.12/32"
        " -p tcp -m multiport --dports 10002:19999,29444,29450:29451 -j RETURN",
        "-A A3RL-RAY -s 10.0.0.13/32"
        " -p tcp -m multiport --dports 10002:19999,29444,29450:29451 -j RETURN",
        "-A A3RL-RAY -s 192.168.7.0/24 -p tcp -m multiport --dports 8260,10001 -j RETURN",
        "-A A3RL-RAY -p tcp -m multiport --dports 8260,10001:19999,23000:23999,29444,"
        "29450:29455,44217,44227 -j DROP",
        "-A A3RL-RAY -s 10.0.0.12/32"
        " -p tcp -m multiport --dports 29470,32768:60999,64021:64052 -j RETURN",
        "-A A3RL-RAY -s 10.0.0.13/32"
        " -p tcp -m multiport --dports 29470,32768:60999,64021:64052 -j RETURN",
        "-A A3RL-RAY -j DROP",
    ]
    assert rules["output"] == [
        "-A A3RL-RAY-OUT -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        "-A A3RL-RAY-OUT -m owner --uid-owner 0 -j RETURN",
        "-A A3RL-RAY-OUT -o lo -p tcp -m multiport --dports 8260,10001:19999,23000:23999,"
        "29444,29450:29455,29470,44217,44227,64021:64052 -j REJECT --reject-with "
        "icmp-port-unreachable",
        "-A A3RL-RAY-OUT -d 10.0.0.12/32 -p tcp -m multiport --dports 8260,10001:19999,"
        "23000:23999,29444,29450:29455,29470,32768:60999,64021:64052 -j REJECT --reject-with "
        "icmp-port-unreachable",
        "-A A3RL-RAY-OUT -d 10.0.0.13/32 -p tcp -m multiport --dports 8260,10001:19999,"
        "23000:23999,29444,29450:29455,29470,32768:60999,64021:64052 -j REJECT --reject-with "
        "icmp-port-unreachable",
    ]


def test_over_ipv6_only_ssh_comes_in_and_only_root_reaches_ray():
    """Ray listens on [::] too and every node has a link-local address; the cluster talks
    IPv4, so IPv6 gets no peers at all."""
    rules = _rules(W1)
    assert rules["input6"] == [
        "-A A3RL-RAY -i lo -j RETURN",
        "-A A3RL-RAY -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        "-A A3RL-RAY -p ipv6-icmp -j RETURN",
        "-A A3RL-RAY -p tcp -m multiport --dports 22 -j RETURN",
        "-A A3RL-RAY -j DROP",
    ]
    assert rules["output6"][1:] == [
        "-A A3RL-RAY-OUT -m owner --uid-owner 0 -j RETURN",
        "-A A3RL-RAY-OUT -o lo -p tcp -m multiport --dports 8260,10001:19999,23000:23999,"
        "29444,29450:29455,29470,44217,44227,64021:64052 -j REJECT --reject-with "
        "icmp6-port-unreachable",
    ]


def test_a_worker_accepts_the_agent_from_the_head_only():
    rules = _rules(W1, allowed=["192.168.7.0/24"], open_ports=["2222"])
    peers = [r for r in rules["input"] if " -s " in r and "--dports 10002" in r]
    assert peers == [
        "-A A3RL-RAY -s 10.0.0.11/32"
        " -p tcp -m multiport --dports 10002:19999,29450:29451,29453:29454 -j RETURN",
        "-A A3RL-RAY -s 10.0.0.13/32"
        " -p tcp -m multiport --dports 10002:19999,29450:29451 -j RETURN",
    ]
    # No GCS on a worker, the allowed sources only reach the head, SSH at Ansible's port.
    assert not any("29444 " in r or "192.168.7.0" in r for r in rules["input"] if "RETURN" in r)
    assert "-A A3RL-RAY -p tcp -m multiport --dports 2222 -j RETURN" in rules["input"]
    assert rules["input"][-1] == "-A A3RL-RAY -j DROP"


@pytest.mark.parametrize("chain", ["A3RL-RAY\n-A INPUT -j ACCEPT", "A3RL RAY", "",
                                   "A3RL-RAY-WITH-A-VERY-LONG-NAME", "-j", "INPUT", "accept",
                                   "A3RL-RAY\n"])
def test_a_chain_name_that_is_not_one_is_refused(chain):
    """A newline in the name would add its own lines to the iptables-restore input."""
    with pytest.raises(RayConfigError, match="ray_cluster_firewall_chain"):
        ray.firewall_rules(chain, HEAD, HEAD, NODES, PORTS)
    with pytest.raises(RayConfigError, match="ray_cluster_firewall_chain"):
        ray.out_chain(chain)


def test_a_good_chain_name_is_kept():
    assert ray.out_chain("SITE_RAY-1") == "SITE_RAY-1-OUT"


def test_head_and_worker_arguments():
    head = ray.start_args(True, "10.0.0.11", "10.0.0.11", PORTS, 16, num_cpus=1)
    assert head[:2] == ["--head", "--port"]
    assert head[head.index("--dashboard-host") + 1] == "127.0.0.1"
    assert head[head.index("--resources") + 1] == '{"NPU":16}'
    assert head[head.index("--num-cpus") + 1] == "1"
    worker = ray.start_args(False, "10.0.0.12", "10.0.0.11", PORTS, 16)
    assert worker[:2] == ["--address", "10.0.0.11:29444"]
    assert "--dashboard-host" not in worker and "--num-cpus" not in worker
    cluster = ray.start_args(True, "10.0.0.11", "10.0.0.11", PORTS, 16, dashboard_bind="cluster")
    assert cluster[cluster.index("--dashboard-host") + 1] == "10.0.0.11"


def _node(ip, state="ALIVE", npu=16, start=1, head=False, node_id=None):
    return {"node_ip": ip, "state": state, "resources_total": {"NPU": float(npu), "CPU": 1.0},
            "start_time_ms": start, "is_head_node": head,
            "node_id": node_id or f"{ip.replace('.', '')}{start:04d}"}


EXPECTED = {"node1": "10.0.0.11", "node2": "10.0.0.12"}


def test_membership_complete():
    m = ray.membership([_node("10.0.0.11", head=True), _node("10.0.0.12")], EXPECTED, 16)
    assert m["ready"] and m["joined"] == ["node1", "node2"] and m["npu_total"] == 32
    assert m["nodes"]["node1"]["is_head"]


def test_membership_names_the_missing_and_ignores_the_dead():
    m = ray.membership([_node("10.0.0.11"), _node("10.0.0.12", state="DEAD")], EXPECTED, 16)
    assert not m["ready"] and m["missing"] == ["node2"] and m["npu_total"] == 16


def test_membership_waits_while_a_stale_entry_inflates_the_total():
    nodes = [_node("10.0.0.11"), _node("10.0.0.12", start=1), _node("10.0.0.12", start=9)]
    m = ray.membership(nodes, EXPECTED, 16)
    assert not m["missing"] and m["npu_total"] == 48 and not m["ready"]
    assert m["nodes"]["node2"]["start_time_ms"] == 9


def test_membership_counts_a_node_with_too_few_npus():
    m = ray.membership([_node("10.0.0.11"), _node("10.0.0.12", npu=8)], EXPECTED, 16)
    assert not m["ready"] and m["nodes"]["node2"]["npus"] == 8


def test_membership_reports_strangers():
    m = ray.membership([_node("10.0.0.11"), _node("10.0.0.12"), _node("10.0.0.99")],
                       EXPECTED, 16)
    assert m["strangers"] == ["10.0.0.99"] and not m["ready"]


def test_membership_is_not_ready_on_a_dead_raylets_entry():
    """node2's raylet was killed: the head still lists its entry (id a) ALIVE while the new
    raylet (id b) is starting. By IP and NPUs the cluster looks complete; by the running
    raylet's ID it is not, until b is listed and a is gone."""
    stale = [_node("10.0.0.11", node_id="h"), _node("10.0.0.12", node_id="a")]
    raylets = {"node1": ["h"], "node2": ["b"]}
    assert ray.membership(stale, EXPECTED, 16)["ready"]
    m = ray.membership(stale, EXPECTED, 16, raylets)
    assert not m["ready"] and m["not_live"] == ["node2"]
    both = [*stale, _node("10.0.0.12", start=9, node_id="b")]
    assert not ray.membership(both, EXPECTED, 16, raylets)["ready"]  # 48 NPUs listed
    new = [_node("10.0.0.11", node_id="h"), _node("10.0.0.12", start=9, node_id="b")]
    m = ray.membership(new, EXPECTED, 16, raylets)
    assert m["ready"] and m["not_live"] == []


def test_membership_names_a_node_that_runs_no_raylet():
    nodes = [_node("10.0.0.11", node_id="h"), _node("10.0.0.12", node_id="a")]
    m = ray.membership(nodes, EXPECTED, 16, {"node1": ["h"], "node2": []})
    assert not m["ready"] and m["not_live"] == ["node2"]


def test_raylet_node_ids_from_pgrep_lines():
    out = ("412 /opt/a3rl/ray/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet "
           "--raylet_socket_name=/tmp/ray/s/raylet --node_manager_port=29450 "
           "--node_id=9f3c0a1bE2 --node_ip_address=10.0.0.12\n"
           "913 /x/raylet/raylet --node_manager_port=29450 --node_id=77aa\n")
    assert ray.raylet_node_ids(out) == ["77aa", "9f3c0a1bE2"]
    assert ray.raylet_node_ids("") == [] and ray.raylet_node_ids(None) == []
    # A flag that only starts with the name is not it.
    assert ray.raylet_node_ids("1 raylet --node_id=12zz") == []


@pytest.mark.parametrize(("bind", "url"), [
    ("loopback", "http://127.0.0.1:8260"), ("cluster", "http://10.0.0.11:8260"),
    ("any", "http://127.0.0.1:8260"),
])
def test_dashboard_url_as_the_head_reaches_it(bind, url):
    assert ray.dashboard_url(bind, "10.0.0.11", 8260) == url


@pytest.mark.parametrize(("output", "version"), [
    ("ray, version 2.48.0\n", "2.48.0"), ("ray, version 2.60.0rc1", "2.60.0rc1"),
    ("", None), ("bash: ray: command not found", None),
])
def test_installed_version(output, version):
    assert ray.installed_version(output) == version


CHAIN_RULES = _rules(HEAD)
INPUT_HEAD = "-P INPUT ACCEPT\n"


def test_the_jump_first_guards_the_node():
    live = INPUT_HEAD + "-A INPUT -j A3RL-RAY\n-A INPUT -j ACCEPT\n"
    assert ray.jump_problems(live, "A3RL-RAY", CHAIN_RULES["input"]) == []


def test_a_jump_moved_below_an_accept_is_refused():
    """``iptables -C INPUT -j A3RL-RAY`` passes here; the ACCEPT above it lets everyone in."""
    live = INPUT_HEAD + "-A INPUT -j ACCEPT\n-A INPUT -j A3RL-RAY\n"
    problems = ray.jump_problems(live, "A3RL-RAY", CHAIN_RULES["input"])
    assert len(problems) == 1 and "INPUT rule 1 (-A INPUT -j ACCEPT)" in problems[0]
    assert "before the jump to A3RL-RAY" in problems[0]
    # Each of these lets past something the chain stops: Ray's GCS, any TCP or UDP, new
    # connections, a peer's every port, web ports, another chain.
    for rule in ("-A INPUT -p tcp -m tcp --dport 29444 -j ACCEPT",
                 "-A INPUT -p tcp -j ACCEPT",
                 "-A INPUT -p udp -j ACCEPT",
                 "-A INPUT -m conntrack --ctstate NEW -j ACCEPT",
                 "-A INPUT -s 10.0.0.0/8 -j ACCEPT",
                 "-A INPUT -s 10.0.0.12/32 -j ACCEPT",
                 "-A INPUT ! -i lo -j ACCEPT",
                 "-A INPUT -p tcp -m multiport --dports 80,443 -j ACCEPT",
                 "-A INPUT -p tcp -m multiport --dports 9000:10001 -j ACCEPT",
                 "-A INPUT -j DOCKER-USER",
                 "-A INPUT -j RETURN"):
        live = f"{INPUT_HEAD}{rule}\n-A INPUT -j A3RL-RAY\n"
        assert len(ray.jump_problems(live, "A3RL-RAY", CHAIN_RULES["input"])) == 1, rule


def test_rules_above_the_jump_that_the_chain_would_pass_anyway_are_fine():
    above = ["-A INPUT -i lo -j ACCEPT",
             "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
             "-A INPUT -m state --state ESTABLISHED -j ACCEPT",
             "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
             "-A INPUT -s 10.1.0.0/16 -p tcp -m tcp --dport 22 -j ACCEPT",
             "-A INPUT -p icmp -j ACCEPT",
             "-A INPUT -s 203.0.113.9/32 -j DROP",
             "-A INPUT -j LOG",
             "-A INPUT -p tcp"]
    live = INPUT_HEAD + "".join(r + "\n" for r in above) + "-A INPUT -j A3RL-RAY\n"
    assert ray.jump_problems(live, "A3RL-RAY", CHAIN_RULES["input"]) == []


def test_the_output_jump_is_checked_the_same_way():
    out = CHAIN_RULES["output"]
    first = "-P OUTPUT ACCEPT\n-A OUTPUT -j A3RL-RAY-OUT\n"
    assert ray.jump_problems(first, "A3RL-RAY-OUT", out, "OUTPUT") == []
    root = ("-P OUTPUT ACCEPT\n-A OUTPUT -m owner --uid-owner 0 -j ACCEPT\n"
            "-A OUTPUT -j A3RL-RAY-OUT\n")
    assert ray.jump_problems(root, "A3RL-RAY-OUT", out, "OUTPUT") == []
    anyone = "-P OUTPUT ACCEPT\n-A OUTPUT -o lo -j ACCEPT\n-A OUTPUT -j A3RL-RAY-OUT\n"
    [problem] = ray.jump_problems(anyone, "A3RL-RAY-OUT", out, "OUTPUT")
    assert problem.startswith("OUTPUT rule 1 (-A OUTPUT -o lo -j ACCEPT)")
    assert ray.jump_problems("-P OUTPUT ACCEPT\n", "A3RL-RAY-OUT", out, "OUTPUT") == [
        "OUTPUT has no jump to A3RL-RAY-OUT. Fix: ray-firewall apply."]


def test_no_jump_at_all():
    assert ray.jump_problems(INPUT_HEAD + "-A INPUT -j ACCEPT\n", "A3RL-RAY",
                             CHAIN_RULES["input"]) == [
        "INPUT has no jump to A3RL-RAY. Fix: ray-firewall apply."]


@pytest.mark.parametrize("where", ["node", "allowed"])
def test_an_ipv6_source_is_refused(where):
    """iptables (IPv4) cannot hold an IPv6 source; ip6tables is not managed, so an IPv6
    node or allowed source would be left open: refused by name."""
    nodes, allowed = ([HEAD, "fd00::11"], []) if where == "node" else (NODES, ["fd00::/64"])
    with pytest.raises(ray.RayConfigError, match="only IPv4 sources are supported"):
        ray.firewall_rules("A3RL-RAY", HEAD, HEAD, nodes, PORTS, allowed=allowed)


def test_multiport_takes_fifteen_slots_and_no_more():
    fifteen = list(range(1000, 1030, 2))
    assert len(ray.multiport_spec(fifteen).split(",")) == 15
    with pytest.raises(RayConfigError, match="16 port slots exceed iptables multiport's 15"):
        ray.multiport_spec([*fifteen, 1100])


# Issue 26, one-line mutations of the firewall checks that the tests above did not notice.

def test_ports_on_the_edges_of_the_worker_range_are_inside_it():
    for port in (10002, 19999):
        with pytest.raises(RayConfigError, match="inside the worker port range"):
            ray.ports({**PORTS, "dashboard": port})


@pytest.mark.parametrize("rule", [
    "-A INPUT -i eth0 -j ACCEPT",       # an interface other than loopback
    "-A INPUT -p all -j ACCEPT",        # every protocol, tcp included
    "-A INPUT -p ! udp -j ACCEPT",      # the old negation form: every protocol but udp
    "-A INPUT ! -p udp -j ACCEPT",      # the form iptables -S prints
])
def test_a_rule_above_the_jump_that_passes_tcp_counts_against(rule):
    live = f"{INPUT_HEAD}{rule}\n-A INPUT -j A3RL-RAY\n"
    assert len(ray.jump_problems(live, "A3RL-RAY", CHAIN_RULES)) == 1, rule


# ------------------------------------------------ the MindSpeed op pre-compile (issue 19)

PRECOMPILE_OPS = ["RotaryPositionEmbeddingOpBuilder", "RingAttentionUpdateOpBuilder",
                  "GMMOpBuilder", "GMMV2OpBuilder", "MatmulAddOpBuilder",
                  "GroupMatmulAddOpBuilder", "FusedAdamWV2OpBuilder"]


def _precompile(tmp_path, fail: str = ""):
    """The role's default pre-start command, rendered and run as ray-node.j2 runs it
    (a subshell under set -e), with a stand-in python3 that records where it ran."""
    import os
    import subprocess
    from pathlib import Path

    import jinja2
    import yaml

    root = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((root / "roles/ray_cluster/defaults/main.yml").read_text())
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    command = jinja2.Template(raw["ray_cluster_pre_start_command"]).render(
        a3rl_workdir=str(workdir))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    stub = bin_dir / "python3"
    stub.write_text(f'#!/bin/bash\necho "$PWD|$2" >> {log}\n'
                    f'case "$2" in *"{fail or "-"} "*) exit 3;; esac\n')
    stub.chmod(0o755)
    proc = subprocess.run(["bash", "-c", f"set -e\n( {command} )\necho started"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls, workdir


def test_precompile_runs_every_op_from_the_working_directory(tmp_path):
    proc, calls, workdir = _precompile(tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "started", proc.stderr
    assert sorted(c.split("|")[1].split("import ")[1].split(";")[0] for c in calls) == \
        sorted(PRECOMPILE_OPS)
    assert {c.split("|")[0] for c in calls} == {str(workdir)}
    assert any("mindspeed.op_builder.fused_adamw_v2_builder import FusedAdamWV2OpBuilder" in c
               for c in calls)


def test_a_failed_precompile_stops_the_start_and_names_the_op(tmp_path):
    proc, calls, workdir = _precompile(tmp_path, fail="GMMV2OpBuilder;")
    assert proc.returncode != 0 and "started" not in proc.stdout
    assert f"MindSpeed op pre-compile failed in {workdir}: GMMV2OpBuilder" in proc.stderr
    assert len(calls) == 7  # the others still ran


def test_logical_gpus_and_custom_resources_for_the_simulators_real_verl() -> None:
    args = ray.start_args(False, "10.0.0.12", "10.0.0.11", PORTS, 16, num_gpus=1,
                          extra_resources={"cpu": 1})
    assert args[args.index("--resources") + 1] == '{"NPU":16,"cpu":1}'
    assert args[args.index("--num-gpus") + 1] == "1"
    plain = ray.start_args(False, "10.0.0.12", "10.0.0.11", PORTS, 16)
    assert "--num-gpus" not in plain and plain[plain.index("--resources") + 1] == '{"NPU":16}'
    with pytest.raises(ValueError, match="cannot set NPU"):
        ray.start_args(False, "a", "b", PORTS, 16, extra_resources={"NPU": 1})


# What a leftover of an earlier start looks like to `ray stop` (Ray 2.48's RAY_PROCESSES):
# a process named raylet or ray::<task>, or one whose command line runs a Ray script.
_LEFTOVERS = {
    "nothing": None,
    "a raylet": "comm:raylet",
    "a Ray worker process": "comm:ray::IDLE",
    "a dashboard agent": "args:/opt/ray/lib/python3.11/site-packages/ray/dashboard/agent.py",
    "a log monitor": "args:/opt/ray/lib/python3.11/site-packages/ray/_private/log_monitor.py",
}


@pytest.mark.parametrize("leftover", list(_LEFTOVERS))
def test_the_start_script_stops_an_earlier_ray_only_when_one_is_left(tmp_path, leftover):
    """ray-node's start runs `ray stop --force` (a Ray import, about a CPU-second) only when
    pgrep finds a process it would kill. Run in a PID namespace of its own, so that the
    machine's other Ray clusters (the simulator's nodes) are not seen; the script's own
    shell, whose command line holds the patterns, must not count as a leftover."""
    import os
    import shutil
    import subprocess
    import sys

    from .role_templates import render

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("this test needs unshare (util-linux) and root for a PID namespace")
    calls = tmp_path / "calls"
    ray_stub = tmp_path / "ray"
    ray_stub.write_text(f'#!/bin/bash\necho "$1" >> {calls}\n')
    ray_stub.chmod(0o755)
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "cluster_env.sh").write_text("")
    script = tmp_path / "ray-node"
    script.write_text(render(
        "ray_cluster", "usr/local/lib/a3rl/ray-node.j2", ansible_managed="managed",
        ray_cluster_is_head=True, ray_cluster_mode="host", ray_cluster_container="unused",
        a3rl_env_dir=str(env_dir), ray_cluster_ray_command=str(ray_stub),
        ray_cluster_pre_start_command="", ray_cluster_start_args=["--head"]))
    # The decoy says when it is what it stands for (a loaded machine may take a while to
    # start a Python); the script runs only then.
    ready = tmp_path / "ready"
    kind, _, value = (_LEFTOVERS[leftover] or "").partition(":")
    rename = f"open('/proc/self/comm', 'w').write('{value}'); " if kind == "comm" else ""
    argv = f" {value}" if kind == "args" else ""
    decoy = (f"{sys.executable} -c \"import pathlib, time; {rename}"
             f"pathlib.Path('{ready}').touch(); time.sleep(60)\"{argv} &\n"
             f"for _ in $(seq 600); do [ -e {ready} ] && break; sleep 0.1; done\n"
             f"[ -e {ready} ] || {{ echo 'the decoy did not start' >&2; exit 9; }}\n"
             if kind else "")
    driver = tmp_path / "driver.sh"
    driver.write_text(f"{decoy}bash {script} start\n")
    proc = subprocess.run(["unshare", "--fork", "--pid", "--mount-proc", "bash", str(driver)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    expected = ["start"] if kind == "" else ["stop", "start"]
    assert calls.read_text().split() == expected, proc.stderr
