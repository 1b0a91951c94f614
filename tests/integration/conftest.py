"""The simulated cluster the integration tests run on, and helpers to look at its nodes."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from a3rl.controller import strategy
from a3rl.controller.runner import PlayResult, run_play
from a3rl.sim import cluster, podman

# A second test session on this machine needs a cluster name of its own (podman's
# container names are global): A3RL_TEST_CLUSTER=dev pytest ... Under pytest-xdist
# (`make test` runs modules side by side) each worker brings up its own cluster.
NAME = os.environ.get("A3RL_TEST_CLUSTER", "pytest")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    NAME = f"{NAME}-{WORKER}"
NODES = 2
# The shell's opt-in strategy never reaches the tests: each module says its own (below).
os.environ.pop(strategy.VARIABLE, None)
# The strategy of the plays a module asserts on: Ansible's default `linear` unless the
# module sets PLAY_STRATEGY = strategy.MITOGEN. The modules whose subject includes how a
# task reaches a node (site.yml's default path, --check, faults and reboots, bad input,
# the a3rl command) keep `linear`; the others assert on what the plays do, which is the
# same modules on the nodes under either strategy, and run under Mitogen, about half the
# time (bench/tuning.py). A3RL_TEST_PLAY_STRATEGY=linear puts every module on `linear`.
PLAY_STRATEGY_OVERRIDE = os.environ.get("A3RL_TEST_PLAY_STRATEGY", "").strip()
# A module's fixture first brings its cluster to the provisioned state with site.yml
# (provision()). That run prepares; it is not what the module tests, and it runs under the
# opt-in Mitogen strategy, which takes about half the time (bench/tuning.py). site.yml
# itself on the default strategy is test_site.py's subject (first run, changed=0, --check).
# A3RL_TEST_PROVISION_STRATEGY=linear puts the preparation on the default path too.
PROVISION_STRATEGY = os.environ.get("A3RL_TEST_PROVISION_STRATEGY", strategy.MITOGEN)

# The order modules start in (the Makefile passes --no-loadscope-reorder: by default
# pytest-xdist reorders --dist loadfile's modules by their number of tests). test_site
# first, so that it finds its worker's cluster bare and needs no cluster of its own (and
# the module after it on that worker starts from its converged nodes); then the longest
# first, so that the short ones fill in around them at the end (single-worker times of a
# run as CI makes it: test_train about 1,130 s, test_ray and test_faults about 820 s,
# docs/testing.md). The unit tests come right after test_site: on a fresh machine the
# other workers' first cluster waits for the node image and the CANN stand-in to be
# built (network and disk, 2-3 min), and the unit tests use the CPU meanwhile.
_ORDER = ("test_site", "test_train", "test_ray", "test_faults", "test_frameworks",
          "test_cann_image", "test_data_weights", "test_day2", "test_npu_driver",
          "test_check_mode", "test_npu_network", "test_bad_input", "test_container_engine",
          "test_ray_host_mode", "test_sim_lifecycle", "test_snapshot", "test_recipe_env",
          "test_fanout", "test_cli")


def _rank(item) -> int:
    stem = Path(str(item.fspath)).stem
    return _ORDER.index(stem) if stem in _ORDER else len(_ORDER)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # Stable: unit tests keep their order, between test_site and the other modules;
    # unranked integration modules keep theirs, after the ranked ones.
    items.sort(key=lambda i: 0.5 if "/integration/" not in str(i.fspath) else _rank(i))


@pytest.fixture(scope="module", autouse=True)
def play_strategy(request) -> Iterator[str]:
    """Every play of the module (``play()``, ``run_play`` and the ``a3rl`` command alike)
    runs under the module's PLAY_STRATEGY, through the opt-in's own variable."""
    name = PLAY_STRATEGY_OVERRIDE or getattr(request.module, "PLAY_STRATEGY", strategy.DEFAULT)
    strategy.env(name)  # refuses a name a3rl does not offer
    if name == strategy.DEFAULT:
        os.environ.pop(strategy.VARIABLE, None)
    else:
        os.environ[strategy.VARIABLE] = name
    yield name
    os.environ.pop(strategy.VARIABLE, None)


@pytest.fixture(scope="session")
def sim() -> Iterator[cluster.Cluster]:
    problem = podman.available()
    if problem:
        pytest.fail(f"the simulator cannot run here: {problem}")
    # The stand-in trainer: test_train switches its cluster to real verl for its module.
    c = cluster.up(NAME, nodes=NODES, log=print, trainer="standin")
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


def installer_runs(result: PlayResult) -> list[tuple[str, str, str, str]]:
    """(start, end, host, kind) of each vendor installer run of a play, in start order."""
    runs = []
    for ev in events(result):
        data = ev.get("event_data", {})
        task = data.get("task", "")
        if ev.get("event") == "runner_on_ok" and "Run the vendor installer" in task:
            kind = "driver" if "for the driver" in task else "firmware"
            runs.append((data["start"], data["end"], data["host"], kind))
    return sorted(runs)


def kinds_in_order(result: PlayResult, host: str) -> list[str]:
    """The vendor packages the play installed on ``host``, in the order it ran them."""
    return [kind for _, _, h, kind in installer_runs(result) if h == host]


def ansible_warnings(result: PlayResult) -> list[str]:
    """The warnings Ansible printed in the run (``[WARNING]: ...``, ``[DEPRECATION
    WARNING]: ...``; the lines after one, its origin, are not kept): a normal run has none."""
    text = "".join(p.read_text() for p in sorted(result.record.glob("artifacts/*/stdout")))
    return [line for line in text.splitlines()
            if line.startswith(("[WARNING]", "[DEPRECATION WARNING]"))]


def failure_text(result: PlayResult) -> str:
    return "\n".join(f"{h} | {t} | {m}" for h, t, m in result.failures)


# What a play can change on a node, each a filesystem of its own there: the root (the
# node's overlay), the engines' storage and the shared folder (bind mounts from the host),
# the simulator's knob folder (it holds the stand-in device state that `hccn_tool -ip -s`
# writes, the NVRAM of a real device), and /tmp (train_job and the bandwidth test write
# there). /run holds only daemons' and sessions' runtime state, except the fan-out's
# socket folder, which is listed when it exists. /proc, /sys and /dev are not files (the
# device nodes are compared on their own).
SNAPSHOT_ROOTS = ("/", "/var/lib/docker", "/var/lib/containers", "/shared", "/etc/a3rl-sim",
                  "/tmp")
SNAPSHOT_RUN = "/run/a3rl-fanout"
# Paths that change with every SSH login, every Ansible task or as time passes, not with
# what a play does: the journal and the other logs, Ansible's own temporary folders (its
# modules unpack into /tmp/ansible_*), systemd's private /tmp folders, the engines'
# container logs, Ray's session folders (on the node in host mode, in the container's
# writable layer otherwise: logs written every second), and the other mount points as
# seen from /.
SNAPSHOT_NOISE = ("/proc", "/sys", "/dev", "/run", "/tmp/systemd-private-*", "/tmp/ansible_*",
                  "/tmp/ray", "/var/log/*", "/root/.ansible",
                  "/var/lib/docker/containers/*/*-json.log*",
                  "/var/lib/docker/overlay2/*/diff/tmp/ray")
# Folders whose own times and size change whenever an entry comes and goes (Ansible's
# modules in the node's /tmp, Ray's workers in the container's): their entries are
# compared, not the folder itself.
SNAPSHOT_BUSY_DIRS = ("/tmp", "/var/lib/docker/overlay2/*/diff/tmp")
# Content is hashed where it is cheap and where configuration lives: regular files of
# up to 1 MiB under /etc (and the knob folder). Everywhere else a write shows in the
# size, the mtime or the ctime (which no program can set back).
SNAPSHOT_HASHED = ("/etc", "/etc/a3rl-sim")
_FORMAT = r"%p\t%y %m %U:%G %s %T@ %C@ %l\n"


def _listing_script() -> str:
    prune = " -o ".join(f"-path '{p}'" for p in SNAPSHOT_NOISE)
    busy = " -o ".join(f"-path '{p}'" for p in SNAPSHOT_BUSY_DIRS)
    roots = " ".join(SNAPSHOT_ROOTS)
    hashed = " ".join(SNAPSHOT_HASHED)
    # set -e and no redirection of stderr: a find or sha256sum that cannot read a
    # directory or a file exits non-zero, and the snapshot fails with its message. The
    # busy folders are descended into and printed as `busy`, without their times. The
    # device nodes come last, from the same exec (one podman exec per node: a podman
    # client costs about as much CPU as the listing itself).
    return (
        "set -eu\n"
        f"find {roots} -xdev \\( {prune} \\) -prune -o \\( {busy} \\) -printf '%p\\tbusy\\n' "
        f"-o -printf '{_FORMAT}'\n"
        f"if [ -e {SNAPSHOT_RUN} ]; then find {SNAPSHOT_RUN} -printf '{_FORMAT}'; fi\n"
        "echo '#sha256'\n"
        f"find {hashed} -xdev -type f -size -1025k -print0 | xargs -0r sha256sum\n"
        "echo '#dev'\n"
        "ls /dev\n"
    )


def _read_node(container: str, script: str) -> str:
    """The output of a listing script on the node."""
    for attempt in (1, 2):
        res = podman.exec_(container, "sh", "-c", script, check=False)
        errors = res.stderr.strip().splitlines()
        # A file removed between find's reading of its folder and its stat (a process's
        # temporary file) is read again once; any other error, or the same twice, fails.
        vanished = errors and all(e.endswith("No such file or directory") for e in errors)
        if res.returncode == 0 or not (vanished and attempt == 1):
            break
    if res.returncode != 0:
        raise AssertionError(f"{container}: the snapshot could not read the node "
                             f"(rc {res.returncode}): {res.stderr.strip()[-2000:]}")
    return res.stdout


def _node_listing(container: str) -> tuple[list[str], list[str]]:
    """The node's files (see :func:`node_files`) and the names in its /dev."""
    listing, _, rest = _read_node(container, _listing_script()).partition("#sha256\n")
    sums, _, dev = rest.partition("#dev\n")
    digests = {}
    for line in sums.splitlines():
        digest, _, path = line.partition("  ")
        digests[path] = digest
    files = []
    for line in listing.splitlines():
        path, _, meta = line.partition("\t")
        files.append(f"{path}\t{meta.rstrip()} {digests.pop(path, '')}".rstrip())
    found = {f.split("\t", 1)[0] for f in files}
    missing = [r for r in SNAPSHOT_ROOTS if r not in found]
    if missing or len(files) < 1000 or digests or "/etc/passwd" not in found:
        raise AssertionError(f"{container}: the snapshot's listing is not whole: "
                             f"{len(files)} entries, roots missing {missing}, hashed but not "
                             f"listed {sorted(digests)[:5]}")
    return sorted(set(f for f in files if not f.endswith("\tbusy"))), sorted(dev.split())


def node_files(container: str) -> list[str]:
    """One line per file, folder and link on the node's filesystems (``SNAPSHOT_ROOTS``):
    ``path<TAB>type mode uid:gid size mtime ctime [link target] [sha256]``; the busy
    folders themselves (``SNAPSHOT_BUSY_DIRS``) are left out, not their entries. Fails when
    the node cannot be read, or the listing is empty or lacks a root."""
    return _node_listing(container)[0]


def snapshot(sim: cluster.Cluster) -> dict[str, object]:
    """What a play could change on the nodes, per host: every file, folder and link on
    the node's filesystems with its type, mode, owner, size, mtime and ctime (and the
    sha256 of the small files under /etc), the device nodes, and the node container's
    start time. Noise (``SNAPSHOT_NOISE``) is left out. Fails when a node cannot be read.
    The nodes are read at the same time, one podman exec each."""
    members = sim.members()
    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        listings = list(pool.map(lambda n: _node_listing(n.container), members))
    started = podman.run(["inspect", "-f", "{{.State.StartedAt}}",
                          *(n.container for n in members)]).stdout.splitlines()
    if len(started) != len(members):
        raise AssertionError(f"podman inspect gave {len(started)} start times for "
                             f"{len(members)} nodes: {started}")
    state: dict[str, object] = {}
    for node, (files, devices), when in zip(members, listings, started, strict=True):
        if not devices:
            raise AssertionError(f"{node.container}: /dev lists nothing")
        state[node.hostname] = (files, devices, when.strip())
    return state


MARKER = "/run/a3rl-test-marker"


def _changes_script() -> str:
    """The entries whose mtime or ctime is newer than the marker (the node's filesystems
    as :func:`snapshot` reads them, the busy folders' own times left out), the names in
    the busy folders (an entry removed from one changes only the folder's times), the
    fan-out's socket folder, and the device nodes. A write, a chmod, a chown, a rename or
    a link count change sets the ctime, which no program can set back; a removal sets
    its folder's."""
    prune = " -o ".join(f"-path '{p}'" for p in SNAPSHOT_NOISE)
    busy = " -o ".join(f"-path '{p}'" for p in SNAPSHOT_BUSY_DIRS)
    newer = f"\\( -newer {MARKER} -o -cnewer {MARKER} \\)"
    return (
        "set -eu\n"
        f"find {' '.join(SNAPSHOT_ROOTS)} -xdev \\( {prune} \\) -prune -o \\( {busy} \\) "
        f"-o {newer} -printf '{_FORMAT}'\n"
        f"if [ -e {SNAPSHOT_RUN} ]; then find {SNAPSHOT_RUN} {newer} -printf '{_FORMAT}'; "
        f"echo '{SNAPSHOT_RUN} exists'; fi\n"
        "echo '#busy'\n"
        f"for d in {' '.join(SNAPSHOT_BUSY_DIRS)}; do "
        f"if [ -d \"$d\" ]; then find \"$d\" -mindepth 1 -maxdepth 1 \\( {prune} \\) "
        "-o -printf '%p\\n'; fi; done\n"
        "echo '#dev'\n"
        "ls /dev\n"
    )


def changes(sim: cluster.Cluster) -> dict[str, object]:
    """What changed on each node since :func:`mark`: cheaper than two snapshots (no
    listing of every file to compare on the controller) and as strict, for modules that
    check many cases one after the other against one mark. Equal to its value right
    after the mark when nothing changed since."""
    members = sim.members()

    def read(container: str) -> tuple[list[str], list[str], list[str]]:
        newer, _, rest = _read_node(container, _changes_script()).partition("#busy\n")
        names, _, dev = rest.partition("#dev\n")
        if not dev.split():
            raise AssertionError(f"{container}: /dev lists nothing")
        return sorted(newer.splitlines()), sorted(names.splitlines()), sorted(dev.split())

    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        listings = list(pool.map(lambda n: read(n.container), members))
    started = podman.run(["inspect", "-f", "{{.State.StartedAt}}",
                          *(n.container for n in members)]).stdout.splitlines()
    return {node.hostname: (*listing, when.strip())
            for node, listing, when in zip(members, listings, started, strict=True)}


def mark(sim: cluster.Cluster, settle: float = 3.0, attempts: int = 5) -> dict[str, object]:
    """Take the 'before' snapshot once the nodes are quiet. It also touches
    /run/a3rl-test-marker on every node, for tests that ask what is newer than the start
    of the case. A node still settling from what ran before (a training container that a
    module's last play has just recreated writes its first files for a few seconds) would
    fail every comparison after it: the snapshot is taken again ``settle`` seconds later
    until two agree, and a node that never settles fails here, naming what moved."""
    for _ in range(attempts):
        for node in sim.members():
            podman.exec_(node.container, "sh", "-c",
                         f"touch {MARKER} && sleep 0.01")
        before = snapshot(sim)
        time.sleep(settle)
        again = snapshot(sim)
        if again == before:
            return before
    moved = {h: sorted(set(again[h][0]) ^ set(before[h][0]))[:10]
             for h in before if again.get(h) != before[h]}
    raise AssertionError(f"the nodes did not settle in {attempts} tries {settle:.0f} s "
                         f"apart: {moved}")
