"""Check mode: every play runs with ``--check`` and changes nothing.

On the provisioned cluster, the plays that would do nothing report ``changed=0``; the
ones whose job is to change a running cluster (teardown, Ray stop/restart) report what
they would change. Either way every node is as before (files, devices, container start
times) and Ray keeps its members. ``site.yml --check`` on the provisioned cluster is
``test_site.py::test_site_in_check_mode``.

On a fresh cluster of its own (one node, named after the session's), ``site.yml --check``
fails nowhere and reports the changes a first run would make, stage by stage, without
making them (apt's package lists aside: see docs/bring-up.md, "--check").
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from a3rl.sim import cluster, podman

from .conftest import failure_text, mark, play, provision, snapshot
from .reliability_plugin import row

TRAIN = "playbooks/train.yml"
RAY = "playbooks/ray.yml"


@pytest.fixture(scope="module")
def provisioned(sim) -> cluster.Cluster:
    return provision(sim)


def _ray_members(sim: cluster.Cluster) -> list[tuple[str, float]]:
    """(node IP, start time) of every live Ray node, read on the head."""
    out = podman.exec_(sim.members()[0].container, "curl", "-sf", "-m", "5",
                       "http://127.0.0.1:8260/api/v0/nodes?detail=true", check=False)
    if out.returncode != 0:
        return []
    nodes = json.loads(out.stdout)["data"]["result"]["result"]
    return sorted((n["node_ip"], n["start_time_ms"]) for n in nodes if n["state"] == "ALIVE")


# play, extra vars, whether a real run would change the provisioned cluster
PLAYS: dict[str, tuple[str, dict, bool]] = {
    "train.yml -e train_job_action=status": (
        TRAIN, {"algo": "grpo", "train_job_action": "status"}, False),
    "train.yml -e train_job_action=stop": (
        TRAIN, {"algo": "grpo", "train_job_action": "stop"}, False),
    # With a cache seeded on a node (below): the clean would remove it.
    "cache_clean.yml": ("playbooks/cache_clean.yml", {}, True),
    "status.yml": ("playbooks/status.yml", {}, False),
    # (ray.yml's start is site.yml's last stage; restart is stop, then start.)
    "ray.yml -e ray_action=restart": (RAY, {"ray_action": "restart"}, True),
    # Without purge it does a subset of this.
    "teardown.yml -e teardown_purge=image,sources,data,weights": (
        "playbooks/teardown.yml", {"teardown_purge": "image,sources,data,weights"}, True),
}


@pytest.mark.parametrize("name", list(PLAYS))
def test_check_mode_on_the_provisioned_cluster_changes_nothing(provisioned, record_property,
                                                               name):
    playbook, extravars, would_change = PLAYS[name]
    expected = ("runs, reports the changes it would make, changes nothing" if would_change
                else "runs, reports changed=0, changes nothing")
    row(record_property, "check_mode", f"{name} (provisioned cluster)", expected)
    members = _ray_members(provisioned)
    assert len(members) == provisioned.nodes
    seeded = name == "cache_clean.yml"
    node = provisioned.members()[-1].container
    if seeded:
        podman.exec_(node, "sh", "-c", _SEED)
    try:
        before = mark(provisioned)
        result = play(playbook, provisioned.inventory_dir, extravars=extravars, check=True)
        row(record_property, "check_mode", f"{name} (provisioned cluster)", expected,
            observed=f"rc {result.rc}, changed={result.changed}, {result.seconds:.0f} s")
        assert result.ok, failure_text(result)
        if would_change:
            assert result.changed > 0, "check mode did not report what it would change"
        else:
            assert result.changed == 0, result.stats.get("changed")
        assert snapshot(provisioned) == before
        assert _ray_members(provisioned) == members
        if seeded:
            assert podman.exec_(node, "cat", "/root/atc_data/op.o").stdout == "compiled\n"
    finally:
        if seeded:
            podman.exec_(node, "rm", "-rf", "/root/atc_data")


# A compiled-operator cache on the last node, for cache_clean.yml's case.
_SEED = "mkdir -p /root/atc_data && echo compiled > /root/atc_data/op.o"


def _changed_by_play(result) -> dict[str, set[str]]:
    """The tasks that reported a change, by play."""
    plays: dict[str, set[str]] = {}
    for path in (result.record / "artifacts").rglob("job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("res", {}).get("changed"):
            plays.setdefault(data.get("play", ""), set()).add(data.get("task", ""))
    return plays


# Every stage after preflight has something to do on a fresh node; check mode must say so.
FIRST_RUN_STAGES = ("NPU driver", "Container engine", "CANN image", "Training container",
                    "Frameworks", "Data", "Weights", "Recipe env", "Ray")

# apt's package lists: check mode refreshes them on a node that has none (docs/bring-up.md). And
# /root itself: Ansible makes its remote temp folder, /root/.ansible, at first contact.
_APT = ("/var/lib/apt/lists", "/var/cache/apt")


# apt-get update writes under _APT (and its log); on the node's overlay root filesystem
# that copies their parent folders up, which changes those folders' ctime, not their
# content, mode, owner or mtime.
_APT_PARENTS = ("/var", "/var/lib", "/var/lib/apt", "/var/cache", "/var/log")


def _apt_parent_without_ctime(entry: str) -> str:
    path, _, meta = entry.partition("\t")
    if path not in _APT_PARENTS:
        return entry
    return path + "\t" + " ".join(meta.split(" ")[:5])  # kind mode owner size mtime


def _without_apt(state: dict) -> dict:
    return {h: ([_apt_parent_without_ctime(f) for f in files
                 if not f.startswith(_APT) and f.split("\t")[0] != "/root"],
                devices, started)
            for h, (files, devices, started) in state.items()}


@pytest.fixture(scope="module")
def fresh(sim) -> Iterator[cluster.Cluster]:
    name = f"{sim.name}-fresh"
    c = cluster.up(name, nodes=1, log=print, trainer="standin")
    try:
        yield c
    finally:
        cluster.down(name, log=print)


def test_site_check_mode_on_a_fresh_cluster_reports_what_it_would_do(fresh, record_property):
    expected = "fails nowhere, reports the first run's changes, changes nothing (apt lists aside)"
    row(record_property, "check_mode", "site.yml (fresh 1-node cluster)", expected)
    before = mark(fresh)
    result = play("site.yml", fresh.inventory_dir, check=True)
    plays = _changed_by_play(result)
    stages = sorted(p.split(" |")[0] for p in plays)
    row(record_property, "check_mode", "site.yml (fresh 1-node cluster)", expected,
        observed=f"rc {result.rc}, changed={result.changed}, {result.seconds:.0f} s; "
                 f"stages reporting changes: {', '.join(stages)}")
    assert result.ok, failure_text(result)
    for stage in FIRST_RUN_STAGES:
        assert any(p.startswith(stage + " |") for p in plays), (stage, stages)
    assert not any(p.startswith("Preflight") for p in plays), plays
    assert _without_apt(snapshot(fresh)) == _without_apt(before)
    node = fresh.members()[0].container
    # What changed /root's time is Ansible's own folder, and nothing else is new there.
    new_in_root = podman.exec_(node, "find", "/root", "-mindepth", "1", "-maxdepth", "1",
                               "-newer", "/run/a3rl-test-marker").stdout.split()
    assert new_in_root in ([], ["/root/.ansible"]), new_in_root
    assert podman.exec_(node, "sh", "-c", "command -v docker || true").stdout.strip() == ""
    # Nor on the controller: the artifact store (its folder, its lock) is not created.
    assert not (fresh.state / "store").exists()
    assert podman.exec_(node, "test", "-e", "/usr/local/Ascend/driver/version.info",
                        check=False).returncode != 0
