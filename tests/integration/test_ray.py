"""The Ray cluster on the simulator: it forms with every NPU, a re-run leaves it alone, it
heals (by a re-run, and by itself under systemd), its ports answer only the cluster, and
with a Ray that has token auth a job without the token is refused.

Order matters within this module (one cluster, states built on each other); the token
test runs last and leaves the nodes on the Ray 2.60 stand-in image, which the next
site.yml (test_site) puts back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from a3rl.sim import cann, cluster, podman
from a3rl.sim.image import ImageSpec, ensure_image

from .conftest import failure_text, play, provision

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
    head, worker = ray_up.members()[0], ray_up.members()[1]
    old = alive(head)[worker.ip]["start_time_ms"]
    in_container(worker, "pkill -9 -f [r]aylet/raylet")
    result = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert result.ok, failure_text(result)
    wait_for_npus(head, 32, 60)
    assert alive(head)[worker.ip]["start_time_ms"] > old


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


def test_firewall_can_be_left_to_the_site(ray_up):
    head = ray_up.members()[0]
    off = play("playbooks/ray.yml", ray_up.inventory_dir, extravars={"ray_cluster_firewall": False})
    assert off.ok, failure_text(off)
    chains = podman.exec_(head.container, "iptables", "-S").stdout
    assert "A3RL-RAY" not in chains
    on = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert on.ok, failure_text(on)
    assert "-A INPUT -j A3RL-RAY" in podman.exec_(head.container, "iptables", "-S").stdout
    assert npu_total(head) == 32
    # A rule lost since (a flushed chain) is put back by the next run.
    podman.exec_(head.container, "iptables", "-F", "A3RL-RAY")
    again = play("playbooks/ray.yml", ray_up.inventory_dir)
    assert again.ok and again.changed == 1, again.stats["changed"]
    assert "--dports 8260,10001:19999,29444,29450:29455 -j DROP" in podman.exec_(
        head.container, "iptables", "-S", "A3RL-RAY").stdout


def test_ray_ports_answer_only_the_cluster(ray_up):
    """A container on the nodes' network that is not in the inventory reaches SSH (so the
    path is open) but neither the GCS nor the dashboard nor a raylet; a worker does."""
    head, worker = ray_up.members()[0], ray_up.members()[1]
    probe = (
        "import socket,sys\n"
        "for p in map(int, sys.argv[2:]):\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try: s.connect((sys.argv[1], p)); print(p, 'open')\n"
        "    except OSError as e: print(p, 'closed', type(e).__name__)\n"
    )
    image = ensure_image(ImageSpec(), log=lambda _m: None)
    out = podman.run(["run", "--rm", "--network", ray_up.network, image, "python3", "-c", probe,
                      head.ip, "22", "29444", "8260", "29450", "10001"]).stdout
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert lines["22"] == "open"
    for port in ("29444", "8260", "29450", "10001"):
        assert lines[port].startswith("closed"), out
    inside = podman.exec_(worker.container, "python3", "-c", probe, head.ip, "29444").stdout
    assert "29444 open" in inside
    # The dashboard listens on the head's loopback only, firewall or not.
    listening = podman.exec_(head.container, "ss", "-ltn", check=False).stdout
    assert "127.0.0.1:8260" in listening and "0.0.0.0:8260" not in listening


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
    extra = {"a3rl_training_image_tag": archive.tag, "cann_image_tarball": str(archive.path),
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

