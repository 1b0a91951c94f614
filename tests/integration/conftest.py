"""The simulated cluster the integration tests run on, and helpers to look at its nodes."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from a3rl import strategy
from a3rl.runner import PlayResult, run_play
from a3rl.sim import cluster, podman

# A second test session on this machine needs a cluster name of its own (podman's
# container names are global): A3RL_TEST_CLUSTER=dev pytest ... Under pytest-xdist
# (`make test` runs modules side by side) each worker brings up its own cluster.
NAME = os.environ.get("A3RL_TEST_CLUSTER", "pytest")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    NAME = f"{NAME}-{WORKER}"
NODES = 2
# Every play a test asserts on runs under Ansible's default strategy, whatever the shell
# that started pytest opted into.
os.environ.pop(strategy.VARIABLE, None)
# A module's fixture first brings its cluster to the provisioned state with site.yml
# (provision()). That run prepares; it is not what the module tests, and it runs under the
# opt-in Mitogen strategy, which takes about half the time (bench/tuning.py). site.yml
# itself on the default strategy is test_site.py's subject (first run, changed=0, --check).
# A3RL_TEST_PROVISION_STRATEGY=linear puts the preparation on the default path too.
PROVISION_STRATEGY = os.environ.get("A3RL_TEST_PROVISION_STRATEGY", strategy.MITOGEN)

# Longest first, so that under --dist loadfile the long modules start at once and the
# short ones fill in around them (single-worker times from CI and the helpers' runs, 2026-12-01).
_ORDER = ("test_ray", "test_faults", "test_site", "test_frameworks", "test_data_weights",
          "test_bad_input", "test_train", "test_day2", "test_check_mode", "test_ray_host_mode",
          "test_cann_image", "test_npu_network", "test_npu_driver", "test_fanout", "test_cli")


def _rank(item) -> int:
    stem = Path(str(item.fspath)).stem
    return _ORDER.index(stem) if stem in _ORDER else len(_ORDER)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # Stable: unit tests (rank len(_ORDER)) and unranked modules keep their order.
    items.sort(key=lambda i: 0 if "/integration/" not in str(i.fspath) else 1 + _rank(i))


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


def provision(c: cluster.Cluster) -> cluster.Cluster:
    """site.yml on ``c`` as a module's preparation (see PROVISION_STRATEGY): it must pass."""
    result = run_play("site.yml", c.inventory_dir, quiet=True,
                      extra_env=strategy.env(PROVISION_STRATEGY))
    assert result.ok, failure_text(result)
    return c


def events(result: PlayResult) -> list[dict]:
    """The run's ansible-runner events, in order (the partial ones aside)."""
    found = (json.loads(p.read_text())
             for p in (result.record / "artifacts").rglob("job_events/*.json")
             if not p.name.endswith("-partial.json"))
    return sorted(found, key=lambda e: e.get("counter", 0))


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
