"""`a3rl sim up` reuses what it can and `a3rl sim down` leaves nothing behind."""

from __future__ import annotations

import json
import time

from a3rl.controller.cli import main
from a3rl.sim import cluster, podman
from a3rl.sim.image import ImageSpec

from .conftest import NAME as SESSION

NAME = f"{SESSION}-life"


def _ids() -> list[str]:
    return sorted(c["Id"] for c in podman.containers(f"{cluster.LABEL}={NAME}"))


def test_up_status_reuse_down(capfd):
    # `a3rl sim` runs the simulator as a program of its own (python -m a3rl.sim): its
    # output reaches file descriptor 1, not sys.stdout, hence capfd.
    assert main(["sim", "up", "--name", NAME, "--nodes", "1"]) == 0
    first = _ids()
    assert len(first) == 1
    c = cluster.Cluster(NAME, 1, cluster.default_subnet(NAME))
    assert (c.inventory_dir / "hosts.yml").is_file()
    assert c.known_hosts.read_text().count(c.members()[0].ip) == 3  # rsa, ecdsa, ed25519

    # A second up changes nothing: same containers, image reused, not rebuilt.
    capfd.readouterr()
    assert main(["sim", "up", "--name", NAME, "--nodes", "1"]) == 0
    out = capfd.readouterr().out
    assert "reused" in out and "building" not in out
    assert _ids() == first

    assert main(["sim", "status", "--name", NAME]) == 0
    assert "node1" in capfd.readouterr().out

    # (site.yml --check on such a fresh 1-node cluster, which passes and changes nothing:
    # test_check_mode.py::test_site_check_mode_on_a_fresh_cluster_reports_what_it_would_do,
    # with the nodes-unchanged snapshot.)
    node = c.members()[0].container
    # A new node is bare, like a new A3 machine: no engine, no NPU device nodes, no
    # npu-smi ...
    assert podman.exec_(node, "sh", "-c", "command -v docker", check=False).returncode != 0
    assert podman.exec_(node, "test", "-e", "/usr/local/Ascend", check=False).returncode == 1
    assert podman.exec_(node, "sh", "-c", "ls /dev | grep -c '^davinci'",
                        check=False).stdout.strip() == "0"
    assert podman.exec_(node, "sh", "-c", "command -v npu-smi", check=False).returncode != 0
    # ... the stand-in driver installs with the vendor's command line and makes them, and
    # its npu-smi sees the node's 16 stand-in devices (8 A3 cards x 2 chips) ...
    [driver] = c.standin_dir.glob("Atlas-A3-hdk-npu-driver_*.run")
    podman.run(["cp", str(driver), f"{node}:/tmp/driver.run"])
    assert "All good" in podman.exec_(node, "bash", "/tmp/driver.run", "--check").stdout
    podman.exec_(node, "sh", "-c", "groupadd HwHiAiUser && useradd -g HwHiAiUser HwHiAiUser")
    rc = podman.exec_(node, "bash", "/tmp/driver.run", "--full", "--install-for-all", "--quiet",
                      check=False).returncode
    assert rc in (0, 2)  # 2 = installed, reboot needed (the vendor's code)
    info = podman.exec_(node, "npu-smi", "info").stdout
    assert info.count("Ascend910") == 16 and "Critical" not in info
    # ... and after a reboot they are there again, because the driver is installed.
    podman.run(["restart", "-t", "5", node])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and podman.exec_(
            node, "sh", "-c", "ls /dev | grep -c '^davinci'", check=False).stdout.strip() != "19":
        time.sleep(1)
    assert podman.exec_(node, "npu-smi", "info").stdout.count("Ascend910") == 16
    # ... and the NPU-health knob reaches it through the node's bind-mounted config.
    assert main(["sim", "npu-health", "--name", NAME, "--node", "node1", "--npu", "3"]) == 0
    assert "3 Critical" in podman.exec_(node, "cat", "/etc/a3rl-sim/npu-health").stdout
    health = podman.exec_(node, "npu-smi", "info", "-t", "health", "-i", "1").stdout
    assert "Critical" in health

    assert main(["sim", "down", "--name", NAME]) == 0
    assert _ids() == []
    assert not c.standin_dir.exists()
    assert podman.networks(f"{cluster.LABEL}={NAME}") == []
    assert not c.state.exists()
    assert not c.inventory_dir.exists()
    # The image is a cache, kept for the next up.
    assert podman.image_exists(ImageSpec().ref)
    # And status says so, with a non-zero exit for scripts.
    assert main(["sim", "status", "--name", NAME]) == 1


def test_up_replaces_a_stale_cluster_of_another_size():
    try:
        assert main(["sim", "up", "--name", NAME, "--nodes", "1"]) == 0
        # Simulate a crash that left one node stopped: the next up must not reuse it.
        podman.run(["stop", "-t", "1", f"a3rl-{NAME}-node1"])
        assert main(["sim", "up", "--name", NAME, "--nodes", "2"]) == 0
        states = {c["Names"][0]: c["State"] for c in podman.containers(f"{cluster.LABEL}={NAME}")}
        assert states == {f"a3rl-{NAME}-node1": "running", f"a3rl-{NAME}-node2": "running"}
        rows = cluster.status(NAME)
        assert [r["npus"] for r in rows] == [0, 0]  # new nodes: no driver, no devices
        assert all(r["ssh"] for r in rows)
    finally:
        main(["sim", "down", "--name", NAME])
    leftovers = podman.run(["ps", "-a", "--format", "json"]).stdout
    assert f"a3rl-{NAME}" not in json.dumps(json.loads(leftovers or "[]"))


def test_exec_answers_as_podman_exec_does(sim):
    """podman.exec_ joins a node's namespaces with nsenter instead of running `podman
    exec` (about 0.3 ms of CPU against 85): the same output, exit codes and environment,
    and podman's 125 for a node that is not there. (After a node restarts it finds the
    node's new init: test_up_status_reuse_down reads the devices right after a restart.)"""
    node = sim.members()[0].container
    for cmd in (["hostname"],
                ["sh", "-c", "echo $PATH $HOME $container $HOSTNAME $TERM; pwd; id -u; exit 3"],
                ["no-such-command"],
                ["ip", "-o", "-4", "addr", "show"],
                ["systemctl", "is-active", "ssh"],
                ["cat", "/proc/1/comm"]):
        want = podman.run(["exec", node, *cmd], check=False)
        got = podman.exec_(node, *cmd, check=False)
        assert (got.returncode, got.stdout) == (want.returncode, want.stdout), cmd
    assert podman.exec_(f"{node}-absent", "true", check=False).returncode == 125

