"""A second simulated cluster of 4 nodes, in a module of its own so that `make test` can
run it beside test_ray's cluster: Ray on the nodes themselves (no container engine), and
the NPU driver's roll in batches, which needs more than two nodes to show."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from a3rl.sim import cluster, podman

from .conftest import NAME, events, failure_text, play
from .test_ray import alive, npu_total

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy).
PLAY_STRATEGY = "mitogen"


@pytest.fixture(scope="module")
def four() -> Iterator[cluster.Cluster]:
    c = cluster.up(f"{NAME}-ray4", nodes=4, log=print, trainer="standin")
    try:
        yield c
    finally:
        cluster.down(f"{NAME}-ray4", log=print)


HOST_MODE = {"a3rl_ray_mode": "host", "ray_cluster_ray_command": "/opt/a3rl/ray/bin/ray"}


def test_an_open_files_limit_the_node_cannot_grant_fails_naming_the_host(four):
    """More open files than the kernel allows (fs.nr_open): the env check names each node,
    the limit and the fix. The next test renders the scripts again with the default."""
    result = play("playbooks/recipe_env.yml", four.inventory_dir,
                  extravars={**HOST_MODE, "recipe_env_open_files": 2097152})
    assert not result.ok
    text = " ".join(failure_text(result).split())
    assert {h for h, _, _ in result.failures} == {n.hostname for n in four.members()}, text
    for node in four.members():
        assert f"{node.hostname}: sourcing /etc/a3rl/env/cluster_env.sh and model_env.sh on " \
               "the node gave rc=1" in text, text
    assert "open files: cannot modify limit" in text, text
    assert "open files 2097152). Fix: if the open-files limit is refused, raise the " \
           "node's hard limit" in text, text


def test_four_nodes_in_host_mode(four):
    """Ray on the nodes themselves (no container engine)."""
    c = four
    extra = HOST_MODE
    for pb in ("playbooks/recipe_env.yml", "playbooks/ray.yml"):
        result = play(pb, c.inventory_dir, extravars=extra)
        assert result.ok, failure_text(result)
    head = c.members()[0]
    assert npu_total(head) == 64
    assert sorted(alive(head)) == sorted(n.ip for n in c.members())
    again = play("playbooks/ray.yml", c.inventory_dir, extravars=extra)
    assert again.ok and again.changed == 0, again.stats["changed"]


ROLL_PLAY = "NPU driver | Install, upgrade and verify the driver and firmware"


def _sh(node: cluster.Node, script: str) -> int:
    return podman.exec_(node.container, "sh", "-c", script, check=False).returncode


def test_a_failed_driver_batch_stops_the_roll(four, tmp_path: Path):
    """Batches of 2: node1's package pin is wrong, node2's is right. node1 is refused
    before its run user exists, node2 installs and keeps no staged package, and the
    second batch (node3, node4) runs no task of the role. (Before the fix the second batch
    ran: a failure inside the role's block, which has an `always`, was not counted by
    max_fail_percentage. Now the role fails the node outside the block, which ends the
    play; the play's pre-task, kept for any failure the count misses, names the node that
    stopped the roll on each node it keeps from starting.)"""
    inv = tmp_path / "inventory"
    shutil.copytree(four.inventory_dir, inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    groups = hosts["all"]["children"]["a3_nodes"]["children"]
    groups["head"]["hosts"]["node1"]["npu_driver_driver_sha256"] = "0" * 64
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    result = play("playbooks/npu_driver.yml", inv, extravars={"npu_driver_batch": 2})
    assert not result.ok
    text = " ".join(failure_text(result).split())
    failed = {h for h, _, _ in result.failures}
    assert "node1" in failed and failed <= {"node1", "node3", "node4"}, text
    assert f"expected {'0' * 64}" in text and "Nothing was installed" in text
    for node in failed - {"node1"}:
        assert f"{node}: not started, because node1 failed in an earlier batch of the " \
               "driver roll" in text, text
    node1, node2, node3, node4 = four.members()
    version = "test -f /usr/local/Ascend/driver/version.info"
    user = "id HwHiAiUser >/dev/null 2>&1"
    staged = "ls /var/cache/a3rl/npu/*.run >/dev/null 2>&1"
    # node1: refused before the run user was created or anything was staged.
    assert (_sh(node1, version), _sh(node1, user), _sh(node1, staged)) == (1, 1, 2)
    # node2: installed, its run user created, the staged package removed afterwards.
    assert (_sh(node2, version), _sh(node2, user), _sh(node2, staged)) == (0, 0, 2)
    # The second batch never started: no npu_driver task of the roll (the play after the
    # one that plans every node first) ran on node3 or node4.
    ran = {e["event_data"]["host"] for e in events(result)
           if e["event"].startswith("runner_on_") and e["event_data"].get("role") == "npu_driver"
           and e["event_data"].get("play") == ROLL_PLAY}
    assert ran == {"node1", "node2"}, ran
    for node in (node3, node4):
        assert _sh(node, version) == 1 and _sh(node, user) == 1, node.hostname
