"""The Ray cluster on the simulator: it forms with every NPU, a re-run leaves it alone, it
heals (by a re-run, and by itself under systemd), its ports answer only the cluster, and
with a Ray that has token auth a job without the token is refused.

Order matters within this module (one cluster, states built on each other); the token
test runs last and leaves the nodes on the Ray 2.60 stand-in image, which the next
module's provisioning site.yml on this worker's cluster puts back (about 210 s under a
loaded make test, bench/README.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from a3rl.planning import ray
from a3rl.sim import cann, cluster, podman
from a3rl.sim.image import ImageSpec, ensure_image

from .conftest import events, failure_text, play, provision

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy).
PLAY_STRATEGY = "mitogen"

CONTAINER = "a3rl-train"


def nodes_api(head: cluster.Node, token: str | None = None) -> list[dict]:
    """The head's node list, read on the head (the API listens on its loopback only)."""
    cmd = ["curl", "-sf", "-m", "5", "http://127.0.0.1:8260/api/v0/nodes?detail=true"]
    if token:
        cmd[1:1] = ["-H", f"Authorization: Bearer {token}"]
    out = podman.exec_(head.container, *cmd, check=False)
    if out.returncode != 0:
        return []
    return json.loads(out.stdout)["data"]["result"]["result"]


def alive(head: cluster.Node, token: str | None = None) -> dict[str, dict]:
    return {n["node_ip"]: n for n in nodes_api(head, token) if n["state"] == "ALIVE"}


def npu_total(head: cluster.Node, token: str | None = None) -> int:
    return int(sum(n["resources_total"].get("NPU", 0) for n in alive(head, token).values()))


def wait_for_npus(head: cluster.Node, want: int, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if npu_total(head) == want and len(alive(head)) * 16 == want:
            return time.monotonic() - t0
        time.sleep(2)
    raise AssertionError(f"the cluster did not get back to {want} NPUs in {timeout:.0f}s "
                         f"(now {npu_total(head)}: {sorted(alive(head))})")


def in_container(node: cluster.Node, script: str, *env: str, check: bool = True):
    args = ["docker", "exec"]
    for e in env:
        args += ["-e", e]
    return podman.exec_(node.container, *args, CONTAINER, "bash", "-c", script, check=check)


@pytest.fixture(scope="module")
def ray_up(sim) -> Iterator[cluster.Cluster]:
    yield provision(sim)


def test_site_ends_with_every_node_and_npu(ray_up):
    head = ray_up.members()[0]
    nodes = alive(head)
    assert sorted(nodes) == sorted(n.ip for n in ray_up.members())
    assert npu_total(head) == 16 * len(ray_up.members())
    assert nodes[head.ip]["is_head_node"]


def test_rerun_changes_nothing_and_keeps_ray_running(ray_up):
    head = ray_up.members()[0]
    before = {ip: n["start_time_ms"] for ip, n in alive(head).items()}
    result = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert result.ok, failure_text(result)
    assert result.changed == 0, result.stats["changed"]
    assert {ip: n["start_time_ms"] for ip, n in alive(head).items()} == before


def test_status_reports_every_node(ray_up):
    result = play("playbooks/ray.yml", ray_up.inventory_dir, extravars={"ray_action": "status"})
    assert result.ok, failure_text(result)
    assert result.changed == 0
    events = (result.record / "artifacts").rglob("job_events/*.json")
    text = "\n".join(p.read_text() for p in events)
    for n, role in zip(ray_up.members(), ["head", "worker"], strict=False):
        assert f"{n.hostname} ({n.ip}, {role}): joined, NPU 16, Ray 2.48.0, service active" in text
    assert "Ray cluster ready: 2/2 node(s) joined, 32/32 NPUs" in text


def test_env_scripts_name_each_nodes_own_nic_and_ip(ray_up):
    head = ray_up.members()[0]
    for n in ray_up.members():
        out = in_container(n, ". /etc/a3rl/env/cluster_env.sh && . /etc/a3rl/env/model_env.sh && "
                              "echo $MASTER_ADDR $MASTER_PORT $CURRENT_IP $SOCKET_IFNAME "
                              "$HCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME $TP_SOCKET_IFNAME "
                              "$NNODES ${VLLM_DP_SIZE-unset} $VLLM_SPECULATIVE_BATCH_SIZE_THRE "
                              "$VLLM_ASCEND_ENABLE_NZ")
        addrs = podman.exec_(n.container, "ip", "-o", "-4", "addr", "show").stdout
        nic = next(line.split()[1] for line in addrs.splitlines() if f" {n.ip}/" in line)
        assert nic
        # qwen3_32b on 2 nodes: no VLLM_DP_SIZE (the pin removed it); 128 / 4 = 32; NZ
        # off, as the recipe's ray_start_npu.sh sets it.
        assert out.stdout.split() == [head.ip, "29444", n.ip, nic, nic, nic, nic, "2",
                                      "unset", "32", "0"]
        reserved = podman.exec_(n.container, "cat", "/proc/sys/net/ipv4/ip_local_reserved_ports")
        assert "64021-64052" in reserved.stdout


def test_killed_worker_raylet_is_rejoined_by_a_rerun(ray_up):
    """Right after the kill the head still lists the worker ALIVE (until its health checks
    fail): the rerun's probe must see the raylet gone on the worker itself, not skip, and
    the run must not end on the dead raylet's entry: when it ends, the head lists the
    raylet the worker runs now, and only that one."""
    head, worker = ray_up.members()[0], ray_up.members()[1]
    old = alive(head)[worker.ip]["start_time_ms"]
    in_container(worker, "pkill -9 -f [r]aylet/raylet")
    result = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert result.ok, failure_text(result)
    probe = next(e["event_data"]["res"] for e in events(result)
                 if e.get("event") == "runner_on_ok"
                 and e["event_data"].get("host") == worker.hostname
                 and "Ray | Probe" in e["event_data"].get("task", ""))
    assert not probe["converged"], probe
    # Read at once, no waiting: the play's last check is what this row is about.
    running = ray.raylet_node_ids(podman.exec_(
        worker.container, "pgrep", "-a", "-f", "[r]aylet/raylet ", check=False).stdout)
    listed = [n for n in nodes_api(head) if n["state"] == "ALIVE" and n["node_ip"] == worker.ip]
    assert running and [n["node_id"] for n in listed] == running, (running, listed)
    assert listed[0]["start_time_ms"] > old
    assert npu_total(head) == 32


def test_stopped_head_is_restored_and_the_workers_rejoin(ray_up):
    head, worker = ray_up.members()[0], ray_up.members()[1]
    podman.exec_(head.container, "systemctl", "stop", "a3rl-ray")
    assert alive(head) == {}
    result = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert result.ok, failure_text(result)
    assert result.changed >= 2  # the head and the worker started again
    nodes = alive(head)
    assert sorted(nodes) == sorted([head.ip, worker.ip])
    assert npu_total(head) == 32


def test_stop_then_start(ray_up):
    head = ray_up.members()[0]
    stopped = play("playbooks/ray.yml", ray_up.inventory_dir, extravars={"ray_action": "stop"})
    assert stopped.ok, failure_text(stopped)
    assert alive(head) == {}
    for n in ray_up.members():
        enabled = podman.exec_(n.container, "systemctl", "is-enabled", "a3rl-ray", check=False)
        assert enabled.stdout.strip() == "disabled"
    started = play("playbooks/ray.yml", ray_up.inventory_dir, extravars={"ray_action": "start"})
    assert started.ok, failure_text(started)
    assert npu_total(head) == 32


def test_join_timeout_names_the_node_that_did_not_join(ray_up):
    """A worker whose Ray cannot start (its env script is broken) is named, with the fix."""
    head, worker = ray_up.members()[0], ray_up.members()[1]
    env = "/etc/a3rl/env/cluster_env.sh"
    podman.exec_(worker.container, "sh", "-c", f"cp {env} /root/env.bak && echo 'exit 3' >> {env}")
    try:
        podman.exec_(worker.container, "systemctl", "restart", "a3rl-ray")
        result = play("playbooks/ray.yml", ray_up.inventory_dir,
                      extravars={"ray_cluster_join_timeout": 20})
        assert not result.ok
        text = failure_text(result)
        assert "16 of 32 NPUs; not joined: node2" in text and "journalctl -u a3rl-ray" in text
    finally:
        podman.exec_(worker.container, "cp", "/root/env.bak", env)
    result = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert result.ok, failure_text(result)
    assert npu_total(head) == 32


def _ray_after(node: cluster.Node) -> list[str]:
    """What systemd orders the node's Ray unit after, as loaded now."""
    out = podman.exec_(node.container, "systemctl", "show", "-p", "After", "a3rl-ray.service")
    return out.stdout.strip().removeprefix("After=").split()


def test_firewall_can_be_left_to_the_site(ray_up):
    """Switched off and on again, the firewall goes and comes back, and Ray runs on through
    both: the ordering is a drop-in (a3rl-ray.service.d/a3rl-firewall.conf), so Ray's own
    unit does not change."""
    head = ray_up.members()[0]
    started = {ip: n["start_time_ms"] for ip, n in alive(head).items()}
    assert "a3rl-ray-firewall.service" in _ray_after(head)
    off = play("playbooks/ray.yml", ray_up.inventory_dir, extravars={"ray_cluster_firewall": False})
    assert off.ok, failure_text(off)
    chains = podman.exec_(head.container, "iptables", "-S").stdout
    assert "A3RL-RAY" not in chains
    assert "a3rl-ray-firewall.service" not in _ray_after(head)
    on = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert on.ok, failure_text(on)
    assert "-A INPUT -j A3RL-RAY" in podman.exec_(head.container, "iptables", "-S").stdout
    assert "a3rl-ray-firewall.service" in _ray_after(head)
    assert npu_total(head) == 32
    assert {ip: n["start_time_ms"] for ip, n in alive(head).items()} == started
    # A rule lost since (a flushed chain) is put back by the next run.
    podman.exec_(head.container, "iptables", "-F", "A3RL-RAY")
    again = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert again.ok and again.changed == 1, again.stats["changed"]
    rules = podman.exec_(head.container, "iptables", "-S", "A3RL-RAY").stdout
    assert "--dports 8260,10001:19999,23000:23999,29444,29450:29455,44217,44227 -j DROP" in rules
    assert rules.rstrip().endswith("-A A3RL-RAY -j DROP")


def test_an_edited_start_script_and_a_moved_jump_are_repaired(ray_up):
    """What the converged-role probe watches on a worker (roles/ray_cluster/vars/main.yml):
    an edited start script and a jump no longer first in INPUT each make the next run
    converge again; it puts both back and restarts that worker's Ray on the script, and
    the run after it changes nothing."""
    head, worker = ray_up.members()[0], ray_up.members()[1]
    script = "/usr/local/lib/a3rl/ray-node"
    podman.exec_(worker.container, "sh", "-c", f"echo '# edited' >> {script}")
    podman.exec_(worker.container, "iptables", "-I", "INPUT", "1", "-p", "udp", "-j", "ACCEPT")
    old = alive(head)[worker.ip]["start_time_ms"]
    fixed = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert fixed.ok, failure_text(fixed)
    assert fixed.changed >= 3, fixed.stats["changed"]  # script, firewall, restart
    edited = podman.exec_(worker.container, "grep", "-c", "# edited", script, check=False)
    assert edited.stdout.strip() == "0"
    rules = podman.exec_(worker.container, "iptables", "-S", "INPUT").stdout.splitlines()
    assert rules[1] == "-A INPUT -j A3RL-RAY", rules
    assert npu_total(head) == 32 and alive(head)[worker.ip]["start_time_ms"] > old
    again = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert again.ok and again.changed == 0, again.stats["changed"]


# Connects to every port given at once (3 s each) and prints {port: "open" | error name}.
PROBE = """
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
host = sys.argv[1]
def one(port):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(3)
    try:
        s.connect((host, port))
        return port, "open"
    except OSError as e:
        return port, type(e).__name__
    finally:
        s.close()
with ThreadPoolExecutor(64) as ex:
    print(json.dumps(dict(ex.map(one, map(int, sys.argv[2:])))))
"""

# The policy under test (roles/ray_cluster defaults, a3rl.planning.ray): Ray's ports, the ports the
# other nodes reach besides Ray's, and what each other node may open.
RAY_PORTS = {8260, 10001, 29444, *range(29450, 29456), 44217, 44227,
             *range(10002, 20000), *range(23000, 24000)}
PEER_PORTS = {29470, *range(64021, 64053)}
EPHEMERAL = range(32768, 61000)


def peer_may_open(port: int, to_head: bool) -> bool:
    """Whether the other node may open ``port`` here (ray.firewall_rules)."""
    ray_ports = {29450, 29451, *range(10002, 20000)} | ({29444} if to_head else {29453, 29454})
    return (port == 22 or port in ray_ports or port in PEER_PORTS
            or (port in EPHEMERAL and port not in RAY_PORTS))


def listening(node: cluster.Node) -> dict[int, str]:
    """TCP ports the node listens on (ss -ltnup, the containers' host network included),
    each with an address it listens on."""
    out = podman.exec_(node.container, "ss", "-ltnupH").stdout
    found: dict[int, str] = {}
    for line in out.splitlines():
        f = line.split()
        if f[0] != "tcp":
            continue
        addr, _, port = f[4].rpartition(":")
        found.setdefault(int(port), addr.strip("[]"))
    return found


def probe(where: list[str], host: str, ports) -> dict[int, str]:
    out = subprocess_out(where + ["python3", "-c", PROBE, host, *map(str, sorted(ports))])
    return {int(k): v for k, v in json.loads(out).items()}


def subprocess_out(args: list[str]) -> str:
    return podman.run(args).stdout


def test_ray_ports_answer_only_whom_they_must(ray_up):
    """During a job and a Ray-client session, every port the nodes listen on (read live)
    is probed from a host outside the inventory (IPv4 and IPv6 link-local), from the
    other node, and as an unprivileged user on a node: each answers exactly whom the
    firewall lets in (SSH everyone; Ray's ports each other node only as it needs them;
    Ray's ports on the node itself root only)."""
    head, worker = ray_up.members()[0], ray_up.members()[1]
    job = "python -c 'import ray, time; ray.init(); time.sleep(150)'"
    in_container(head, f"ray job submit --no-wait --address http://127.0.0.1:8260 -- {job}")
    client = ["docker", "exec", "-d", CONTAINER, "python", "-c",
              "import ray, time; ray.init('ray://127.0.0.1:10001'); time.sleep(150)"]
    # A client whose session server does not come up (seen on a loaded machine) is
    # started again, once a minute: the session, not the first attempt, is the subject.
    deadline, next_client = time.monotonic() + 240, 0.0
    while time.monotonic() < deadline:
        ports = listening(head)
        if any(23000 <= p < 24000 for p in ports) and any(10002 <= p < 20000 for p in ports):
            break
        if time.monotonic() >= next_client:
            podman.exec_(head.container, *client)
            next_client = time.monotonic() + 60
        time.sleep(3)
    else:
        pytest.fail(f"no Ray-client session and job workers listening: {sorted(listening(head))}")
    nodes = {head: listening(head), worker: listening(worker)}
    print({n.hostname: sorted(p) for n, p in nodes.items()})
    # Ray's doors this is about are among them.
    assert {29454, 44217, 44227, 10001} <= set(nodes[head])
    assert 29454 in nodes[worker]
    image = ensure_image(ImageSpec(), log=lambda _m: None)
    outside = ["run", "--rm", "--network", ray_up.network, image]
    for node, ports in nodes.items():
        wide = {p for p, a in ports.items() if not a.startswith("127.")}
        # From outside the inventory: SSH only, over IPv4 and IPv6 link-local.
        got = probe(outside, node.ip, wide)
        assert {p for p, r in got.items() if r == "open"} == {22}, (node.hostname, got)
        ll = podman.exec_(node.container, "sh", "-c", "ip -6 -o addr show dev eth0 scope link"
                          " | awk '{print $4}' | cut -d/ -f1").stdout.strip()
        got = probe(outside, f"{ll}%eth0", {p for p, a in ports.items()
                                            if a in ("*", "::", "0.0.0.0")})
        assert {p for p, r in got.items() if r == "open"} <= {22}, (node.hostname, got)
        # From the other node (root, as Ray there): what this node's part needs.
        other = worker if node is head else head
        got = probe(["exec", other.container], node.ip, wide)
        want = {p for p in wide if peer_may_open(p, to_head=node is head)}
        assert {p for p, r in got.items() if r == "open"} == want, (node.hostname, got)
        # An unprivileged user on the node: none of Ray's (or HCCL's) ports, whatever the
        # address; other ports (SSH, the user's own) as before.
        local = {p: ("127.0.0.1" if a in ("*", "0.0.0.0") or a.startswith("127.") else a)
                 for p, a in ports.items() if a not in ("::", "::1")}
        nobody = ["exec", node.container, "su", "-s", "/bin/sh", "nobody", "-c"]
        for host in set(local.values()):
            mine = {p for p, h in local.items() if h == host}
            out = subprocess_out(nobody + [f"python3 -c '{PROBE}' {host} "
                                           + " ".join(map(str, sorted(mine)))])
            got = {int(k): v for k, v in json.loads(out).items()}
            guarded = RAY_PORTS | PEER_PORTS
            assert {p for p, r in got.items() if r == "open"} == mine - guarded, (host, got)
        # ... nor any of the other node's but SSH.
        out = subprocess_out(["exec", other.container, "su", "-s", "/bin/sh", "nobody", "-c",
                              f"python3 -c '{PROBE}' {node.ip} "
                              + " ".join(map(str, sorted(wide)))])
        got = {int(k): v for k, v in json.loads(out).items()}
        assert {p for p, r in got.items() if r == "open"} == {22}, (node.hostname, got)
    # Root on the head still reaches the API (the role's own checks passed too).
    assert npu_total(head) == 32
    in_container(head, "ray job list --address http://127.0.0.1:8260 >/dev/null")


def test_head_container_restart_heals_without_ansible(ray_up):
    head = ray_up.members()[0]
    podman.exec_(head.container, "docker", "restart", CONTAINER)
    took = wait_for_npus(head, 32, 240)
    print(f"cluster whole again {took:.0f}s after the head's container restarted")


def test_token_auth_with_a_ray_that_has_it(ray_up):
    """Ray 2.60 in the image: token auth turns on by itself, a job without the token is
    refused, one with it runs, and the token is kept 0600 on the controller."""
    image = ensure_image(ImageSpec(), log=print)
    archive = cann.ensure_archive(image, log=print,
                                 ray_requirements=cann.RAY_TOKEN_REQUIREMENTS)
    extra = {"a3rl_training_image_name": archive.name, "a3rl_training_image_tag": archive.tag,
             "cann_image_tarball": str(archive.path),
             "cann_image_tarball_sha256": archive.sha256, "a3rl_ray_version": "2.60.0"}
    runs = []
    for pb in ("playbooks/cann_image.yml", "playbooks/training_container.yml",
               "playbooks/recipe_env.yml", "playbooks/ray.yml"):
        result = play(pb, ray_up.inventory_dir, extravars=extra)
        assert result.ok, failure_text(result)
        runs.append(result)
    token_file = ray_up.inventory_dir / ".secrets" / "ray_auth_token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    token = token_file.read_text().strip()
    head = ray_up.members()[0]
    assert npu_total(head, token) == 32
    assert nodes_api(head) == []  # no token: 401
    job = "python -c 'import ray; ray.init(); print(\"NPU\", ray.cluster_resources()[\"NPU\"])'"
    refused = in_container(head, f"ray job submit --address http://127.0.0.1:8260 -- {job}",
                           check=False)
    assert "Unauthorized" in refused.stdout + refused.stderr
    ran = in_container(head, f"ray job submit --address http://127.0.0.1:8260 -- {job}",
                       "RAY_AUTH_MODE=token", f"RAY_AUTH_TOKEN={token}")
    assert "NPU 32.0" in ran.stdout and "succeeded" in ran.stdout
    again = play("playbooks/ray.yml", ray_up.inventory_dir, extravars=extra)
    assert again.ok and again.changed == 0, again.stats["changed"]
    # The token is on no command line (every process on the nodes, the containers'
    # included, while Ray runs) and in no file of the runs' records.
    for node in ray_up.members():
        args = podman.exec_(node.container, "ps", "-eww", "-o", "args", "--no-headers").stdout
        assert "ray" in args and token not in args, node.hostname
    for run in [*runs, again]:
        leaked = [str(f) for f in run.record.rglob("*")
                  if f.is_file() and token in f.read_text(errors="ignore")]
        assert leaked == [], leaked


def test_a_ray_version_other_than_the_images_is_refused(ray_up):
    """After the token test: the image carries Ray 2.60. A pin of 2.48 is refused on every
    node, naming what the node has, and the running cluster is left alone."""
    token = (ray_up.inventory_dir / ".secrets" / "ray_auth_token").read_text().strip()
    head = ray_up.members()[0]
    result = play("playbooks/ray.yml", ray_up.inventory_dir,
                  extravars={"a3rl_ray_version": "2.48.0"})
    assert not result.ok
    text = failure_text(result)
    for node in ("node1", "node2"):
        assert f"{node}: `ray --version` in the container a3rl-train gave ray, version 2.60.0" \
            in " ".join(text.split()), text
    assert "expected ray 2.48.0. Fix: set a3rl_ray_version" in " ".join(text.split()), text
    assert result.changed == 0
    assert npu_total(head, token) == 32

