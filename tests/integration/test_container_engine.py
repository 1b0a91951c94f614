"""The container_engine role on the simulator: the real Docker engine (Debian's docker.io)
under the node's systemd, configured, verified, restarted only when its settings change."""

from __future__ import annotations

import json

import pytest

from a3rl.sim import podman

from .conftest import events, failure_text, play

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy).
PLAY_STRATEGY = "mitogen"

PLAY = "playbooks/container_engine.yml"


def docker_info(container: str) -> dict:
    return json.loads(podman.exec_(container, "docker", "info", "--format", "{{json .}}").stdout)


def engine_pid(container: str) -> str:
    return podman.exec_(container, "systemctl", "show", "-p", "MainPID", "--value",
                        "docker").stdout.strip()


@pytest.fixture(scope="module")
def engine(sim):
    result = play(PLAY, sim.inventory_dir)
    assert result.ok, failure_text(result)
    return sim


def test_engine_runs_as_configured_and_is_idempotent(engine):
    for node in engine.members():
        info = docker_info(node.container)
        assert info["Driver"] == "overlay2"
        assert info["DockerRootDir"] == "/var/lib/docker"
        assert podman.exec_(node.container, "systemctl", "is-enabled", "docker").stdout.strip() \
            == "enabled"
    again = play(PLAY, engine.inventory_dir)
    assert again.ok and again.changed == 0, again.stats
    check = play(PLAY, engine.inventory_dir, check=True)
    assert check.ok and check.changed == 0, check.stats


def test_settings_change_restarts_the_engine_once(engine):
    node = engine.members()[0].container
    pid = engine_pid(node)
    changed = play(PLAY, engine.inventory_dir, extravars={"container_engine_log_max_file": 3})
    assert changed.ok, failure_text(changed)
    # daemon.json and the restart handler, on each node.
    assert changed.stats["changed"] == {"node1": 2, "node2": 2}
    daemon = json.loads(podman.exec_(node, "cat", "/etc/docker/daemon.json").stdout)
    assert daemon["log-opts"]["max-file"] == "3"
    assert engine_pid(node) != pid
    restored = play(PLAY, engine.inventory_dir)
    assert restored.ok and restored.changed > 0
    pid = engine_pid(node)
    assert play(PLAY, engine.inventory_dir).changed == 0
    assert engine_pid(node) == pid


def test_wrong_storage_driver_fails_and_a_rerun_recovers(engine):
    result = play(PLAY, engine.inventory_dir,
                  extravars={"container_engine_storage_driver": "btrfs"})
    assert not result.ok
    # The engine refuses to start: the restart fails on every node, pointing at the journal.
    assert {h for h, _, _ in result.failures} == {"node1", "node2"}
    assert "journalctl" in failure_text(result)
    restored = play(PLAY, engine.inventory_dir)
    assert restored.ok, failure_text(restored)


def _probes(result) -> dict[str, dict]:
    return {e["event_data"]["host"]: e["event_data"]["res"] for e in events(result)
            if e.get("event") == "runner_on_ok"
            and "Probe whether the engine" in e["event_data"].get("task", "")}


def test_a_node_changed_by_hand_is_found_by_the_probe_and_converged_again(engine):
    """The no-op skips the role's tasks on its probe (a3rl_state): a settings file edited
    on one node and the engine stopped on the other must still be repaired."""
    first, second = (n.container for n in engine.members())
    before = podman.exec_(first, "cat", "/etc/docker/daemon.json").stdout
    podman.exec_(second, "sh", "-c", "echo '{}' > /etc/docker/daemon.json")
    podman.exec_(first, "systemctl", "stop", "docker.socket", "docker")
    result = play(PLAY, engine.inventory_dir)
    assert result.ok, failure_text(result)
    probes = _probes(result)
    assert any("/etc/docker/daemon.json" in r for r in probes["node2"]["reasons"]), probes
    assert any("docker" in r and "active" in r for r in probes["node1"]["reasons"]), probes
    assert all(result.stats["changed"].get(h, 0) > 0 for h in ("node1", "node2")), result.stats
    assert podman.exec_(second, "cat", "/etc/docker/daemon.json").stdout == before
    assert podman.exec_(first, "systemctl", "is-active", "docker").stdout.strip() == "active"
    again = play(PLAY, engine.inventory_dir)
    assert again.ok and again.changed == 0, again.stats
    assert all(p["converged"] for p in _probes(again).values()), _probes(again)
    # Every task again when asked: the same result, through the role's own tasks.
    full = play(PLAY, engine.inventory_dir, extravars={"a3rl_skip_converged": False})
    assert full.ok and full.changed == 0, full.stats
    assert sum(full.stats["ok"].values()) > sum(again.stats["ok"].values())
