"""The simulated cluster the integration tests run on, and helpers to look at its nodes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from a3rl.runner import PlayResult, run_play
from a3rl.sim import cluster, podman

# A second test session on this machine needs a cluster name of its own (podman's
# container names are global): A3RL_TEST_CLUSTER=dev pytest ...
NAME = os.environ.get("A3RL_TEST_CLUSTER", "pytest")
NODES = 2


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def sim() -> Iterator[cluster.Cluster]:
    problem = podman.available()
    if problem:
        pytest.fail(f"the simulator cannot run here: {problem}")
    c = cluster.up(NAME, nodes=NODES, log=print)
    yield c
    cluster.down(NAME, log=print)


@pytest.fixture
def inventory_copy(sim: cluster.Cluster, tmp_path: Path):
    """A writable copy of the simulator's inventory, and a function to edit its hosts."""
    dest = tmp_path / "inventory"
    shutil.copytree(sim.inventory_dir, dest)

    def edit(fn) -> Path:
        path = dest / "hosts.yml"
        data = yaml.safe_load(path.read_text())
        fn(data["all"]["children"]["a3_nodes"]["children"])
        path.write_text(yaml.safe_dump(data))
        return dest

    return dest, edit


def play(playbook: str, inventory: Path, **kw) -> PlayResult:
    return run_play(playbook, inventory, quiet=True, **kw)


def failure_text(result: PlayResult) -> str:
    return "\n".join(f"{h} | {t} | {m}" for h, t, m in result.failures)


def snapshot(sim: cluster.Cluster) -> dict[str, object]:
    """What a play could change on the nodes: files on the root filesystem newer than a
    marker (logs, and the /run and /tmp mount points whose entries come and go with SSH
    sessions, aside), the device nodes, and each container's start time."""
    state: dict[str, object] = {}
    for node in sim.members():
        files = podman.exec_(
            node.container, "sh", "-c",
            "find / -xdev -newer /run/a3rl-test-marker "
            "-not -path /tmp -not -path '/tmp/*' -not -path /run -not -path '/root/.ansible*' "
            # Logs (sshd logins in the journal) are expected to grow; they are not state.
            "-not -path '/var/log/*' 2>/dev/null "
            "|| true",
        ).stdout.split()
        devices = podman.exec_(node.container, "ls", "/dev").stdout.split()
        started = podman.run(["inspect", "-f", "{{.State.StartedAt}}", node.container]).stdout
        state[node.hostname] = (sorted(files), sorted(devices), started.strip())
    return state


def mark(sim: cluster.Cluster) -> dict[str, object]:
    """Touch the change marker on every node, then take the 'before' snapshot."""
    for node in sim.members():
        podman.exec_(node.container, "sh", "-c", "touch /run/a3rl-test-marker && sleep 0.01")
    return snapshot(sim)
