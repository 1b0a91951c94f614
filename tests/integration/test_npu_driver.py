"""The npu_driver role on the simulator, with the stand-in vendor packages: install on
bare nodes (driver, then firmware), idempotence, upgrade in batches on the running
cluster (firmware first; Ray and the training container stopped and brought back),
refusals (a running job, downgrade, bad checksum, sick chip), reboot."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from a3rl.sim import cluster, podman
from a3rl.sim.standins import build_driver_run, build_firmware_run

from .conftest import events, failure_text, installer_runs, kinds_in_order, play, provision

PLAY = "playbooks/npu_driver.yml"
ROLL_PLAY = "NPU driver | Install, upgrade and verify the driver and firmware"
STEADY_PLAY = "NPU driver | Check the nodes that need no change"


def installed(node: cluster.Node, kind: str = "driver") -> str:
    text = podman.exec_(node.container, "cat",
                        f"/usr/local/Ascend/{kind}/version.info").stdout
    return next(ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("Version="))


def _wait_running(container: str, name: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = podman.exec_(container, "docker", "inspect", "-f", "{{.State.Running}}", name,
                             check=False).stdout.strip()
        if state == "true":
            return True
        time.sleep(1)
    return False


def boot_mark(node: cluster.Node) -> str:
    return podman.exec_(node.container, "sh", "-c", "cut -d' ' -f22 /proc/1/stat").stdout.strip()


@pytest.fixture(scope="module")
def provisioned(sim):
    return provision(sim)


@pytest.fixture(scope="module")
def old_packages(tmp_path_factory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("old")
    driver = build_driver_run("25.2.1", out)
    firmware = build_firmware_run("7.7.0.1.231", out)
    return {"npu_driver_version": "25.2.1", "npu_driver_driver_src": str(driver),
            "npu_driver_driver_sha256": hashlib.sha256(driver.read_bytes()).hexdigest(),
            "npu_driver_firmware_version": "7.7.0.1.231",
            "npu_driver_firmware_src": str(firmware),
            "npu_driver_firmware_sha256": hashlib.sha256(firmware.read_bytes()).hexdigest()}


@pytest.fixture(scope="module")
def old_driver(old_packages) -> tuple[Path, str]:
    return Path(str(old_packages["npu_driver_driver_src"])), str(
        old_packages["npu_driver_driver_sha256"])


def test_fresh_install_then_idempotent(provisioned):
    # On bare nodes the driver goes first, then the firmware: test_site's fresh run
    # checks that order (this module's cluster may have been provisioned before it).
    # The NPU check itself waits for the reboot; see the last two tests.
    for node in provisioned.members():
        assert installed(node) == "25.3.rc1"
        assert installed(node, "firmware") == "7.8.0.2.212"
        assert podman.exec_(node.container, "id", "-gn", "HwHiAiUser").stdout.strip() == \
            "HwHiAiUser"
    again = play(PLAY, provisioned.inventory_dir)
    assert again.ok and again.changed == 0, again.stats
    # Nothing to install and no reboot to do: the roll ran no task; every node was still
    # checked (device nodes, then npu-smi, deferred here while the reboot is pending).
    ran = {(e["event_data"].get("play"), e["event_data"]["host"]) for e in events(again)
           if e["event"].startswith("runner_on_") and e["event_data"].get("role") == "npu_driver"}
    assert not {p for p, _ in ran} & {ROLL_PLAY}, ran
    assert {h for p, h in ran if p == STEADY_PLAY} == {"node1", "node2"}, ran


def _old(pkg_sha: tuple[Path, str], **extra) -> dict:
    pkg, sha = pkg_sha
    return {"npu_driver_version": "25.2.1", "npu_driver_driver_src": str(pkg),
            "npu_driver_driver_sha256": sha, **extra}


def ray_members(sim: cluster.Cluster) -> list[str]:
    """The live Ray nodes' addresses, read on the head (empty when Ray does not answer)."""
    out = podman.exec_(sim.members()[0].container, "curl", "-sf", "-m", "5",
                       "http://127.0.0.1:8260/api/v0/nodes?detail=true", check=False)
    if out.returncode != 0:
        return []
    nodes = json.loads(out.stdout)["data"]["result"]["result"]
    return sorted(n["node_ip"] for n in nodes if n["state"] == "ALIVE")


def train_container_id(node: cluster.Node) -> str:
    return podman.exec_(node.container, "docker", "inspect", "-f", "{{.Id}} {{.State.Running}}",
                        "a3rl-train").stdout.strip()


def in_train(node: cluster.Node, script: str) -> str:
    return podman.exec_(node.container, "docker", "exec", "a3rl-train", "sh", "-c",
                        script).stdout


def test_upgrade_is_refused_while_a_job_runs_naming_it(provisioned, old_packages):
    head = provisioned.members()[0]
    in_train(head, "ray job submit --address http://127.0.0.1:8260 --no-wait "
                   "--submission-id a3rl-test-upgrade-sleeper -- sleep 300")
    try:
        refused = play(PLAY, provisioned.inventory_dir,
                       extravars={**old_packages, "npu_driver_allow_downgrade": True})
        assert not refused.ok
        text = failure_text(refused)
        assert "a job is running on the cluster: " in text and "a3rl-test-upgrade-sleeper" in text
        assert "npu_driver_force=true" in text
        assert refused.changed == 0
        assert all(installed(n) == "25.3.rc1" for n in provisioned.members())
    finally:
        in_train(head, "ray job stop --address http://127.0.0.1:8260 "
                       "a3rl-test-upgrade-sleeper >/dev/null 2>&1 || true")


def test_downgrade_refused_then_upgrade_rolls_in_batches(provisioned, old_packages):
    nodes = provisioned.members()
    refused = play(PLAY, provisioned.inventory_dir, extravars=old_packages)
    assert not refused.ok
    assert "the installed driver 25.3.rc1 is newer than the pinned 25.2.1" in \
        failure_text(refused)
    assert all(installed(n) == "25.3.rc1" for n in nodes)

    # On the running cluster: the idle training container and Ray are stopped for the
    # installer and brought back, the same container, Ray with every node.
    containers = {n.hostname: train_container_id(n) for n in nodes}
    assert all(c.endswith(" true") for c in containers.values()), containers
    members = ray_members(provisioned)
    assert members == sorted(n.ip for n in nodes)
    down = play(PLAY, provisioned.inventory_dir,
                extravars={**old_packages, "npu_driver_allow_downgrade": True})
    assert down.ok, failure_text(down)
    assert all(installed(n) == "25.2.1" for n in nodes)
    assert all(installed(n, "firmware") == "7.7.0.1.231" for n in nodes)

    up = play(PLAY, provisioned.inventory_dir)
    assert up.ok, failure_text(up)
    assert all(installed(n) == "25.3.rc1" for n in nodes)
    assert all(installed(n, "firmware") == "7.8.0.2.212" for n in nodes)
    # An upgrade: the firmware first, then the driver, on each node.
    for n in nodes:
        assert kinds_in_order(up, n.hostname) == ["firmware", "driver"]
    # serial: the installers ran on one node, then the other, never both at once.
    runs = installer_runs(up)
    assert [h for _, _, h, _ in runs] == ["node1", "node1", "node2", "node2"]
    assert runs[1][1] <= runs[2][0]
    assert {n.hostname: train_container_id(n) for n in nodes} == containers
    assert ray_members(provisioned) == members
    assert play(PLAY, provisioned.inventory_dir).changed == 0


def test_altered_package_is_refused_and_nothing_installed(provisioned, old_driver):
    pkg, _ = old_driver
    wrong = "0" * 64
    result = play(PLAY, provisioned.inventory_dir,
                  extravars=_old((pkg, wrong), npu_driver_allow_downgrade=True))
    assert not result.ok
    text = failure_text(result)
    assert f"{pkg}: has sha256 {hashlib.sha256(pkg.read_bytes()).hexdigest()}, expected {wrong}" \
        in text
    assert "Nothing was installed" in text
    assert all(installed(n) == "25.3.rc1" for n in provisioned.members())
    # The container (stopped for the downgrade) was started again after the refusal.
    assert all(train_container_id(n).endswith(" true") for n in provisioned.members())


def test_reboot_only_when_allowed_then_cleared(provisioned):
    nodes = provisioned.members()
    marker = "/var/lib/a3rl/npu-reboot-required"
    # The upgrade above left both nodes waiting for a reboot; not allowed: listed only.
    before = {n.hostname: boot_mark(n) for n in nodes}
    listed = play(PLAY, provisioned.inventory_dir)
    assert listed.ok and listed.changed == 0
    events = "\n".join(p.read_text() for p in (listed.record / "artifacts").rglob("*.json"))
    assert "takes effect after a reboot on: node1, node2" in events
    assert {n.hostname: boot_mark(n) for n in nodes} == before

    rebooted = play(PLAY, provisioned.inventory_dir,
                    extravars={"npu_driver_allow_reboot": True})
    assert rebooted.ok, failure_text(rebooted)
    for n in nodes:
        assert boot_mark(n) != before[n.hostname]
        assert podman.exec_(n.container, "test", "-e", marker, check=False).returncode == 1
        # The engine (enabled) and the training container (unless-stopped) come back.
        assert _wait_running(n.container, "a3rl-train")
    after = {n.hostname: boot_mark(n) for n in nodes}
    again = play(PLAY, provisioned.inventory_dir, extravars={"npu_driver_allow_reboot": True})
    assert again.ok and again.changed == 0
    assert {n.hostname: boot_mark(n) for n in nodes} == after


def test_unhealthy_chip_fails_naming_host_and_chip(provisioned):
    # After the reboot test: no reboot is pending, so the NPU check runs.
    cluster.set_npu_health(provisioned.name, "node2", 3, "Critical")
    try:
        result = play(PLAY, provisioned.inventory_dir)
        assert not result.ok
        text = failure_text(result)
        assert "node2: NPU 1 chip 1 (/dev/davinci3) reports health Critical" in text
        assert "node1:" not in text
    finally:
        cluster.set_npu_health(provisioned.name, "node2", 3, "OK")
    assert play(PLAY, provisioned.inventory_dir).ok
