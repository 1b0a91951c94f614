"""One role on one simulated node: converge, idempotence, check mode, verify.

The steps run in this order for each role ``A3RL_ROLE`` names (conftest.py):

- converge: the role's prerequisites (roles.py), then its stage play; it must pass;
- idempotence: the play again with ``a3rl_skip_converged=false``, so that every task
  runs (not only the converged-role probe): ``changed=0``; a plain re-run, which the
  probe may skip, must also say ``changed=0``;
- check mode: ``--check`` with every task running: it passes and reports ``changed=0``;
- verify: what the role is for, read on the node (VERIFY below; the roles without an
  entry are verified by their own checks, which run at the end of their converge).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from a3rl.controller.runner import PlayResult
from a3rl.sim import cluster, podman

from .conftest import ROLE_STRATEGY, failure_text, play
from .roles import ROLES

EVERY_TASK = {"a3rl_skip_converged": False}
CONTAINER = "a3rl-train"


def changed_tasks(result: PlayResult) -> list[str]:
    """``host | task`` of each task that reported a change, from the run's events."""
    found = []
    for path in sorted((result.record / "artifacts").rglob("job_events/*.json")):
        if path.name.endswith("-partial.json"):
            continue
        ev = json.loads(path.read_text())
        data = ev.get("event_data", {})
        if ev.get("event") == "runner_on_ok" and (data.get("res") or {}).get("changed"):
            found.append((ev.get("counter", 0), f"{data.get('host')} | {data.get('task')}"))
    return [t for _, t in sorted(found)]


def test_converge(converged):
    _, result = converged
    assert result.ok, failure_text(result)


def test_every_task_is_idempotent(converged, role):
    node, _ = converged
    again = play(node, ROLES[role].play, f"{role}: idempotence (every task)", ROLE_STRATEGY,
                 extravars=EVERY_TASK)
    assert again.ok, failure_text(again)
    assert again.changed == 0, changed_tasks(again)


def test_rerun_changes_nothing(converged, role):
    node, _ = converged
    again = play(node, ROLES[role].play, f"{role}: re-run (probe)", ROLE_STRATEGY)
    assert again.ok, failure_text(again)
    assert again.changed == 0, changed_tasks(again)


def test_check_mode_changes_nothing(converged, role):
    node, _ = converged
    check = play(node, ROLES[role].play, f"{role}: --check (every task)", ROLE_STRATEGY,
                 check=True, extravars=EVERY_TASK)
    assert check.ok, failure_text(check)
    assert check.changed == 0, changed_tasks(check)


# --- verify: what the role is for, read on the node -------------------------------------

def _sh(node: cluster.Node, script: str) -> str:
    return podman.exec_(node.container, "sh", "-c", script).stdout


def _verify_recipe_env(c: cluster.Cluster) -> None:
    head = c.members()[0]
    scripts = _sh(head, "ls /etc/a3rl/env").split()
    assert "cluster_env.sh" in scripts, scripts
    # What a job sources in the training container: this node's address as the head's.
    addr = _sh(head, f"docker exec {CONTAINER} bash -c "
                     "'. /etc/a3rl/env/cluster_env.sh >/dev/null 2>&1; echo $MASTER_ADDR'")
    assert addr.strip() == head.ip, addr
    assert "64021-64052" in _sh(head, "cat /proc/sys/net/ipv4/ip_local_reserved_ports")


def _verify_ray_cluster(c: cluster.Cluster) -> None:
    head = c.members()[0]
    assert _sh(head, "systemctl is-active a3rl-ray").strip() == "active"
    out = _sh(head, "curl -sf -m 5 http://127.0.0.1:8260/api/v0/nodes?detail=true")
    alive = [n for n in json.loads(out)["data"]["result"]["result"] if n["state"] == "ALIVE"]
    assert [n["node_ip"] for n in alive] == [head.ip], alive
    assert alive[0]["resources_total"].get("NPU") == 16, alive[0]["resources_total"]


def _verify_container_engine(c: cluster.Cluster) -> None:
    head = c.members()[0]
    assert _sh(head, "docker info -f '{{.Driver}}'").strip() == "overlay2"


def _verify_training_container(c: cluster.Cluster) -> None:
    head = c.members()[0]
    out = _sh(head, f"docker inspect -f '{{{{.State.Running}}}} {{{{.HostConfig.Privileged}}}}' "
                    f"{CONTAINER}")
    assert out.split() == ["true", "false"], out
    npus = _sh(head, f"docker exec {CONTAINER} sh -c 'ls /dev | grep -c ^davinci[0-9]*$'")
    assert npus.strip() == "16", npus


VERIFY: dict[str, Callable[[cluster.Cluster], None]] = {
    "recipe_env": _verify_recipe_env,
    "ray_cluster": _verify_ray_cluster,
    "container_engine": _verify_container_engine,
    "training_container": _verify_training_container,
}


def test_verify(converged, role):
    node, _ = converged
    check = VERIFY.get(role)
    if check is None:
        return  # the role's own checks ran at the end of its converge
    check(node)
