"""Day-2 plays on the simulated cluster: the rolling cache clean (exactly the recipe's
caches, refused while a job runs, hostile values refused), teardown and status."""

from __future__ import annotations

import json

import pytest

from a3rl.sim import cluster, podman

from .conftest import failure_text, play, provision

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy).
PLAY_STRATEGY = "mitogen"

WORKDIR = "/data/a3rl/llm_rl/qwen3"
MINE = ("/data/a3rl/data/mine.txt", "/data/a3rl/models/mine")
CACHES = [f"{WORKDIR}/kernel_meta", f"{WORKDIR}/.torchair_cache", f"{WORKDIR}/.cache",
          "/root/.cache", "/root/atc_data"]


def sh(node: str, script: str, check: bool = True) -> str:
    return podman.exec_(node, "sh", "-c", script, check=check).stdout


def in_container(node: str, script: str) -> str:
    return sh(node, f"docker exec a3rl-train sh -c {json.dumps(script)}")


@pytest.fixture(scope="module")
def up(sim):
    return provision(sim)


def _seed(node: str) -> None:
    """Caches with files, nested folders and a symlink pointing outside them, on the node
    and in the container; and neighbours that must stay."""
    script = (
        f"mkdir -p {WORKDIR}/kernel_meta/a/b /root/.cache/pip /root/atc_data/x "
        f"{WORKDIR}/.torchair_cache {WORKDIR}/.cache && "
        f"head -c 4096 /dev/zero > {WORKDIR}/kernel_meta/a/b/op.o && "
        f"echo k > {WORKDIR}/.torchair_cache/g && echo c > {WORKDIR}/.cache/c && "
        "head -c 1000 /dev/zero > /root/.cache/pip/w && echo a > /root/atc_data/x/y && "
        "mkdir -p /root/keep && echo keep > /root/keep/file && "
        f"ln -sfn /root/keep {WORKDIR}/kernel_meta/outside && "
        f"echo stay > {WORKDIR}/kernel_meta_not_a_cache"
    )
    sh(node, script)
    in_container(node, "mkdir -p /root/.cache/torch /root/atc_data && "
                       "head -c 2000 /dev/zero > /root/.cache/torch/k && echo x > /root/atc_data/z")


def _unseed(node: str) -> None:
    """Remove what _seed put there, so the modules after this one find no caches."""
    sh(node, "rm -rf " + " ".join(CACHES) + f" /root/keep {WORKDIR}/kernel_meta_not_a_cache")
    in_container(node, "rm -rf /root/.cache /root/atc_data")


def _listing(node: str) -> tuple[str, str]:
    host = sh(node, f"find {WORKDIR} -maxdepth 1 | sort; find /root -maxdepth 2 | sort")
    cont = in_container(node, "find /root -maxdepth 2 | sort")
    return host, cont


def test_cache_clean_removes_exactly_the_cache_set_one_node_at_a_time(up):
    nodes = [n.container for n in up.members()]
    before = {}
    for n in nodes:
        _seed(n)
        before[n] = _listing(n)
    check = play("playbooks/cache_clean.yml", up.inventory_dir, check=True)
    assert check.ok, failure_text(check)
    for n in nodes:
        assert _listing(n) == before[n]  # --check removed nothing
    result = play("playbooks/cache_clean.yml", up.inventory_dir)
    assert result.ok, failure_text(result)
    for n in nodes:
        for path in CACHES:
            assert sh(n, f"test -e {path} && echo there || echo gone").strip() == "gone", path
        # What the symlink pointed to, and the neighbours, stay.
        assert sh(n, "cat /root/keep/file").strip() == "keep"
        assert sh(n, f"cat {WORKDIR}_not_a_cache 2>/dev/null; "
                     f"cat {WORKDIR}/kernel_meta_not_a_cache").strip() == "stay"
        assert in_container(n, "ls -A /root/.cache /root/atc_data 2>&1 || true").count(
            "No such file") == 2
        host_before, _ = before[n]
        host_after, _ = _listing(n)
        gone = set(host_before.split()) - set(host_after.split())
        stray = {g for g in gone if not any(g == c or g.startswith(c + "/") for c in CACHES)}
        assert not stray, stray
    # Rolling: node1's clean finished before node2's started.
    events = [json.loads(p.read_text()) for p in
              (result.record / "artifacts").rglob("job_events/*.json")]
    done = {e["event_data"]["host"]: e["created"] for e in events
            if e.get("event") == "runner_on_ok"
            and e["event_data"].get("task", "").startswith("Cache clean | Remove")}
    started = {e["event_data"]["host"]: e["created"] for e in events
               if e.get("event") == "runner_on_start"
               and e["event_data"].get("task", "").startswith("Cache clean | Remove")}
    assert done["node1"] < started["node2"], (done, started)
    again = play("playbooks/cache_clean.yml", up.inventory_dir)
    assert again.ok and again.changed == 0, again.stats.get("changed")


@pytest.mark.parametrize("value", [
    "", "relative/kernel_meta", "/", f"{WORKDIR}/../qwen3/kernel_meta",
    f"{WORKDIR}/kernel_*", "/etc", f"{WORKDIR}/verl", "~/.cache", "$HOME/.cache",
])
def test_hostile_cache_paths_are_refused_and_nothing_removed(up, value):
    node = up.members()[0].container
    _seed(node)
    try:
        before = _listing(node)
        result = play("playbooks/cache_clean.yml", up.inventory_dir,
                      extravars={"cache_clean_paths": ["/root/.cache", value]})
        assert not result.ok
        assert "Nothing was removed" in failure_text(result), failure_text(result)
        assert _listing(node) == before
    finally:
        _unseed(node)


def test_a_cache_path_that_is_a_symlink_is_refused(up):
    node = up.members()[0].container
    sh(node, "rm -rf /root/atc_data && mkdir -p /root/elsewhere && echo v > /root/elsewhere/v "
             "&& ln -s /root/elsewhere /root/atc_data")
    try:
        result = play("playbooks/cache_clean.yml", up.inventory_dir)
        assert not result.ok
        # Only the link's own refusal names its target (the symlinked-parent one, which a
        # symlinked path trips too, says "is a symlink" as well).
        assert "'/root/atc_data': is a symlink (to '/root/elsewhere')" in failure_text(result)
        assert sh(node, "cat /root/elsewhere/v").strip() == "v"
    finally:
        sh(node, "rm -f /root/atc_data; rm -rf /root/elsewhere")


def _events(result) -> list[dict]:
    return [json.loads(p.read_text()) for p in
            (result.record / "artifacts").rglob("job_events/*.json")]


def _job(node: str, ident: str, command: str = "sleep 300") -> None:
    in_container(node, f"ray job submit --address http://127.0.0.1:8260 --no-wait "
                       f"--submission-id {ident} -- {command}")


def test_refused_while_a_job_runs_then_teardown_and_site_bring_it_back(up):
    head = up.members()[0].container
    _job(head, "a3rl-test-sleeper")
    refused = play("playbooks/cache_clean.yml", up.inventory_dir)
    assert not refused.ok
    assert "a3rl-test-sleeper" in failure_text(refused), failure_text(refused)
    # Files placed by hand beside the project's: a purge removes only what the project's
    # records (the artifact store's stamps) name, and says what it kept.
    try:
        for n in up.members():
            sh(n.container, f"echo mine > {MINE[0]} && mkdir -p {MINE[1]} && echo w > {MINE[1]}/w")
        try:
            down = play("playbooks/teardown.yml", up.inventory_dir,
                        extravars={"teardown_purge": "data,weights"})
            assert down.ok, failure_text(down)
            for n in up.members():
                assert sh(n.container, "docker ps -aq --filter name=a3rl-train").strip() == ""
                # The image and sources stay; the data and weights the project placed go.
                assert sh(n.container, f"test -d {WORKDIR}/verl && echo kept").strip()
                assert sh(n.container, "test ! -e /data/a3rl/data/deepscaler && test ! -e "
                                       "/data/a3rl/.a3rl/stamps/data/deepscaler && echo gone"
                          ).strip() == "gone"
                assert sh(n.container, "find /data/a3rl/data /data/a3rl/models -type f | sort"
                          ).split() == [MINE[0], f"{MINE[1]}/w"]
            said = "\n".join(str(e["event_data"].get("res", {}).get("msg", ""))
                             for e in _events(down) if e.get("event") == "runner_on_ok")
            assert "kept 1 file(s) under /data/a3rl/data" in said, said
            assert "kept 1 file(s) under /data/a3rl/models" in said, said
            again = play("playbooks/teardown.yml", up.inventory_dir,
                         extravars={"teardown_purge": "data,weights"})
            assert again.ok and again.changed == 0, again.stats.get("changed")
        finally:
            for n in up.members():
                sh(n.container, f"rm -rf {MINE[0]} {MINE[1]}")
        status = play("playbooks/status.yml", up.inventory_dir)
        assert not status.ok
        assert "the training container is absent" in failure_text(status)
        back = play("site.yml", up.inventory_dir)
        assert back.ok, failure_text(back)
        healthy = play("playbooks/status.yml", up.inventory_dir)
        assert healthy.ok and healthy.changed == 0, failure_text(healthy)
    finally:
        # A failure above must not leave the tests after this one a torn-down cluster.
        if any(not sh(n.container, "docker ps -q --filter name=a3rl-train").strip()
               for n in up.members()):
            play("site.yml", up.inventory_dir)


def test_status_names_an_unhealthy_chip_and_a_missing_worker(up):
    cluster.set_npu_health(up.name, "node2", 3, "Critical")
    try:
        sick = play("playbooks/status.yml", up.inventory_dir)
        assert not sick.ok
        assert "node2" in failure_text(sick) and "davinci3" in failure_text(sick)
    finally:
        cluster.set_npu_health(up.name, "node2", 3, "OK")
    worker = up.members()[1].container
    sh(worker, "systemctl stop a3rl-ray.service")
    try:
        missing = play("playbooks/status.yml", up.inventory_dir)
        assert not missing.ok
        assert "node2: not in the Ray cluster" in failure_text(missing)
    finally:
        restored = play("playbooks/ray.yml", up.inventory_dir)
        assert restored.ok, failure_text(restored)


def test_purge_word_unknown_is_refused(up):
    result = play("playbooks/teardown.yml", up.inventory_dir,
                  extravars={"teardown_purge": "models"}, check=True)
    assert not result.ok and "unknown models" in failure_text(result)
