"""Ray on the nodes themselves (no container engine), on a second simulated cluster of 4
nodes. A module of its own so that `make test` can run it beside test_ray's cluster."""

from __future__ import annotations

from a3rl.sim import cluster

from .conftest import NAME, failure_text, play
from .test_ray import alive, npu_total


def test_four_nodes_in_host_mode():
    """A second cluster of 4 nodes, Ray on the nodes themselves (no container engine)."""
    c = cluster.up(f"{NAME}-ray4", nodes=4, log=print)
    try:
        extra = {"a3rl_ray_mode": "host", "ray_cluster_ray_command": "/opt/a3rl/ray/bin/ray"}
        for pb in ("playbooks/recipe_env.yml", "playbooks/ray.yml"):
            result = play(pb, c.inventory_dir, extravars=extra)
            assert result.ok, failure_text(result)
        head = c.members()[0]
        assert npu_total(head) == 64
        assert sorted(alive(head)) == sorted(n.ip for n in c.members())
        again = play("playbooks/ray.yml", c.inventory_dir, extravars=extra)
        assert again.ok and again.changed == 0, again.stats["changed"]
    finally:
        cluster.down(f"{NAME}-ray4", log=print)
