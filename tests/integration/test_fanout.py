"""The artifact fan-out on the simulator: the chain over real SSH (first hop, host keys
checked) and real TCP between the nodes, relays started with async and collected, the
rsync fallback, resume, re-run and check mode - through the role's own task file
(bench/fanout.yml includes roles/artifact_store tasks_from transfer)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from a3rl.paths import project_root
from a3rl.sim import podman

from .conftest import failure_text, mark, play, snapshot

PLAY = "bench/fanout.yml"
NODE_DIR = "/var/cache/a3rl/fantest"
SIZES = {"big/a.bin": 32 * 1024 * 1024, "b.bin": 4 * 1024 * 1024}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("fanout-store")
    files = []
    for rel, size in SIZES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        (root / rel).write_bytes(data)
        files.append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "size": size})
    return root, files


def extravars(store, **kw) -> dict:
    root, files = store
    return {"fanout_store": str(root), "fanout_files": files, "fanout_node_dir": NODE_DIR,
            # The test files are small: the chain must run all the same.
            "artifact_store_fanout_min_bytes": 0, **kw}


def sh(container: str, cmd: str, check: bool = True) -> str:
    return podman.exec_(container, "sh", "-c", cmd, check=check).stdout


def clean(sim) -> None:
    for n in sim.members():
        sh(n.container, f"rm -rf {NODE_DIR}")


def held(sim, store) -> dict[str, dict[str, str]]:
    """Per node, per file: its sha256 and whether a stamp marks it verified."""
    _, files = store
    out = {}
    for n in sim.members():
        row = {}
        for f in files:
            path = f"{NODE_DIR}/{f['path']}"
            s = sh(n.container, f"sha256sum {path} 2>/dev/null; test -f {path}.sha256 && "
                   "echo stamped", check=False).split()
            row[f["path"]] = (s[0] if s else "", "stamped" in s)
        out[n.hostname] = row
    return out


def all_verified(sim, store) -> bool:
    _, files = store
    want = {f["path"]: (f["sha256"], True) for f in files}
    return all(row == want for row in held(sim, store).values())


def events(result) -> list[dict]:
    evs = []
    for p in result.record.glob("artifacts/*/job_events/*.json"):
        if not p.name.endswith("-partial.json"):
            evs.append(json.loads(p.read_text()))
    return sorted(evs, key=lambda e: e.get("counter", 0))


def task_events(result, task: str, kind: str) -> list[dict]:
    return [e["event_data"] for e in events(result)
            if e.get("event") == kind and task in str(e.get("event_data", {}).get("task", ""))]


def direct_items(result) -> dict[str, int]:
    """Per host, the files the rsync fallback sent."""
    out: dict[str, int] = {}
    for d in task_events(result, "Send the missing files directly", "runner_item_on_ok"):
        out[d["host"]] = out.get(d["host"], 0) + 1
    return out


def plan_message(result) -> str:
    [d] = task_events(result, "Say how the copies go out", "runner_on_ok") or [{"res": {}}]
    return str(d["res"].get("msg", ""))


def relay_pids(container: str) -> list[int]:
    """The relay modules running on a node (their async wrappers aside)."""
    pids = []
    for line in sh(container, "ps -eo pid=,args=").splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2].endswith("AnsiballZ_a3rl_fanout_relay.py"):
            pids.append(int(parts[0]))
    return pids


def relay_processes(container: str) -> list[str]:
    """Relays and their async wrappers still running on a node."""
    return [line for line in sh(container, "ps -eo pid=,args=").splitlines()
            if "AnsiballZ_a3rl_fanout_relay.py" in line]


def no_relay_left(sim, within: float = 20) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(relay_processes(n.container) for n in sim.members()):
            return True
        time.sleep(0.5)
    return False


def wait_for_bytes(container: str, path: str, more_than: int, within: float = 60) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        size = int(sh(container, f"stat -c %s {path} 2>/dev/null || echo 0", check=False) or 0)
        if size > more_than:
            return size
        time.sleep(0.1)
    raise AssertionError(f"{path} did not pass {more_than} bytes within {within} s")


def test_chain_reaches_every_node_verified_and_a_rerun_changes_nothing(sim, store):
    clean(sim)
    result = play(PLAY, sim.inventory_dir, extravars=extravars(store))
    assert result.ok, failure_text(result)
    assert plan_message(result).startswith("chain:") and "node1 -> node2" in plan_message(result)
    assert all_verified(sim, store), held(sim, store)
    # The chain delivered everything: the direct path sent nothing.
    assert direct_items(result) == {}
    assert result.stats["changed"]["node1"] > 0 and result.stats["changed"]["node2"] > 0
    [sent] = task_events(result, "Stream the files once into the chain", "runner_on_ok")
    assert sent["res"]["error"] == "" and sent["res"]["sent"] == sum(SIZES.values())
    assert no_relay_left(sim, within=5)
    # The run's secret never reaches the record: every token Ansible saw is masked.
    text = "\n".join(p.read_text() for p in result.record.glob("artifacts/*/job_events/*"))
    tokens = set(re.findall(r'"token": "([^"]*)"', text))
    assert tokens == {"VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}, tokens
    for n in sim.members():
        # Nothing stays behind: the first relay's socket folder, the async job records.
        assert sh(n.container, "ls /run/a3rl-fanout 2>&1 || true").strip().endswith(
            "No such file or directory")
    again = play(PLAY, sim.inventory_dir, extravars=extravars(store))
    assert again.ok and again.changed == 0, again.stats
    assert plan_message(again) == ""  # nothing to send: no plan message at all


def test_check_mode_reports_and_changes_nothing(sim, store):
    clean(sim)
    before = mark(sim)
    result = play(PLAY, sim.inventory_dir, extravars=extravars(store), check=True)
    assert result.ok, failure_text(result)
    would = task_events(result, "Say which files would be sent", "runner_on_ok")
    assert {d["host"] for d in would} == {"node1", "node2"}
    assert all("along the chain node1 -> node2" in d["res"]["msg"] for d in would)
    assert snapshot(sim) == before
    assert not any(relay_processes(n.container) for n in sim.members())


def test_a_relay_killed_mid_stream_falls_back_and_ends_verified(sim, store):
    clean(sim)
    node2 = sim.members()[1].container
    big = f"{NODE_DIR}/big/a.bin"
    box: dict = {}
    # 4 MiB/s: the stream takes about 9 s, time to kill node2's relay in the middle.
    run = threading.Thread(target=lambda: box.update(result=play(
        PLAY, sim.inventory_dir, extravars=extravars(store, artifact_store_bwlimit=4096))))
    run.start()
    try:
        wait_for_bytes(node2, big, 4 * 1024 * 1024)
        [pid] = relay_pids(node2)
        inode = sh(node2, f"stat -c %i {big}").strip()
        sh(node2, f"kill -9 {pid}")
    finally:
        run.join(300)
    result = box["result"]
    assert result.ok, failure_text(result)
    assert all_verified(sim, store), held(sim, store)
    # node1's relay finished its own copies; node2 got the rest directly, and its partial
    # copy was resumed in place, not sent again from the start.
    assert direct_items(result).get("node1", 0) == 0
    assert direct_items(result)["node2"] >= 1
    assert sh(node2, f"stat -c %i {big}").strip() == inode
    told = task_events(result, "Say what the chain did not deliver", "runner_on_ok")
    assert {d["host"] for d in told} >= {"node2"}
    assert no_relay_left(sim, within=5)
    again = play(PLAY, sim.inventory_dir, extravars=extravars(store))
    assert again.ok and again.changed == 0, again.stats


def controller_ssh_pids(sim) -> list[int]:
    """The controller's ssh processes feeding this cluster's chain (found by the
    cluster's own key and the relay's socket folder in their arguments)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"ssh") and str(sim.key).encode() in args and any(
                b"/run/a3rl-fanout/" in a for a in args):
            pids.append(int(cmdline.parent.name))
    return pids


def _ansible_playbook(inventory: Path, extra: dict) -> subprocess.Popen:
    env = {**os.environ, "ANSIBLE_CONFIG": str(project_root() / "ansible.cfg"),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
           "ANSIBLE_HOST_KEY_CHECKING": "True"}
    return subprocess.Popen(["ansible-playbook", "-i", str(inventory), PLAY, "-e",
                             json.dumps(extra)], cwd=project_root(), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def test_an_interrupted_chain_resumes_from_the_smallest_offset(sim, store):
    """The whole run is killed mid-stream (the controller's ansible-playbook and its ssh):
    the relays end by themselves, the partial copies stay unstamped, and the next run
    streams each file from the smaller of the two partial sizes, into the same files."""
    clean(sim)
    node1, node2 = (n.container for n in sim.members())
    big = f"{NODE_DIR}/big/a.bin"
    proc = _ansible_playbook(sim.inventory_dir, extravars(store, artifact_store_bwlimit=4096))
    try:
        wait_for_bytes(node2, big, 4 * 1024 * 1024)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # Ansible's workers run in sessions of their own and outlive their parent: the
        # sender's ssh must die too for the controller to be gone.
        for pid in controller_ssh_pids(sim):
            os.kill(pid, signal.SIGKILL)
    assert no_relay_left(sim, within=20), "a relay outlived the run"
    sizes = [int(sh(c, f"stat -c %s {big}")) for c in (node1, node2)]
    inodes = [sh(c, f"stat -c %i {big}").strip() for c in (node1, node2)]
    assert all(0 < s < SIZES["big/a.bin"] for s in sizes), sizes
    for c in (node1, node2):
        assert sh(c, f"test -e {big}.sha256 || echo none").strip() == "none"
    result = play(PLAY, sim.inventory_dir, extravars=extravars(store))
    assert result.ok, failure_text(result)
    assert plan_message(result).startswith("chain:")
    [sent] = task_events(result, "Stream the files once into the chain", "runner_on_ok")
    assert sent["res"]["sent"] == sum(SIZES.values()) - min(sizes)
    assert direct_items(result) == {}
    assert [sh(c, f"stat -c %i {big}").strip() for c in (node1, node2)] == inodes
    assert all_verified(sim, store), held(sim, store)
