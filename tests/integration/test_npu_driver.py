"""The npu_driver role on the simulator, with the stand-in vendor packages: install,
idempotence, upgrade in batches, refusals (downgrade, bad checksum, sick chip), reboot."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from a3rl.sim import cluster, podman
from a3rl.sim.standins import build_driver_run

from .conftest import failure_text, play, provision

PLAY = "playbooks/npu_driver.yml"


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
def old_driver(tmp_path_factory) -> tuple[Path, str]:
    pkg = build_driver_run("25.2.1", tmp_path_factory.mktemp("old"))
    return pkg, hashlib.sha256(pkg.read_bytes()).hexdigest()


def test_fresh_install_then_idempotent(provisioned):
    # The NPU check itself waits for the reboot; see the last two tests.
    for node in provisioned.members():
        assert installed(node) == "25.3.rc1"
        assert installed(node, "firmware") == "7.8.0.2.212"
        assert podman.exec_(node.container, "id", "-gn", "HwHiAiUser").stdout.strip() == \
            "HwHiAiUser"
    again = play(PLAY, provisioned.inventory_dir)
    assert again.ok and again.changed == 0, again.stats


def _old(pkg_sha: tuple[Path, str], **extra) -> dict:
    pkg, sha = pkg_sha
    return {"npu_driver_version": "25.2.1", "npu_driver_driver_src": str(pkg),
            "npu_driver_driver_sha256": sha, **extra}


def test_downgrade_refused_then_upgrade_rolls_in_batches(provisioned, old_driver):
    refused = play(PLAY, provisioned.inventory_dir, extravars=_old(old_driver))
    assert not refused.ok
    assert "the installed driver 25.3.rc1 is newer than the pinned 25.2.1" in \
        failure_text(refused)
    assert all(installed(n) == "25.3.rc1" for n in provisioned.members())

    down = play(PLAY, provisioned.inventory_dir,
                extravars=_old(old_driver, npu_driver_allow_downgrade=True))
    assert down.ok, failure_text(down)
    assert all(installed(n) == "25.2.1" for n in provisioned.members())

    up = play(PLAY, provisioned.inventory_dir)
    assert up.ok, failure_text(up)
    assert all(installed(n) == "25.3.rc1" for n in provisioned.members())
    # serial: the installer ran on one node, then the other, never both at once.
    runs = []
    for f in (up.record / "artifacts").rglob("job_events/*.json"):
        ev = json.loads(f.read_text())
        data = ev.get("event_data", {})
        task = data.get("task", "")
        if ev.get("event") == "runner_on_ok" and "vendor installer" in task \
                and "for the driver" in task:
            runs.append((data["start"], data["end"], data["host"]))
    runs.sort()
    assert [h for _, _, h in runs] == ["node1", "node2"]
    assert runs[0][1] <= runs[1][0]
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
