"""The nodes-unchanged snapshot (conftest ``mark``/``snapshot``) that every "refused before
any node changes" row rests on: it is stable when nothing happens, it sees a change of
mode, owner or content (even with the mtime put back) on the root filesystem and a file
written on the bind mounts (/var/lib/docker, /shared), and it fails rather than compare
two empty listings. No play: the nodes are changed by ``podman exec`` between the two."""

from __future__ import annotations

import subprocess

import pytest

from a3rl.sim import podman

from .conftest import mark, node_files, snapshot

PROBE = "/etc/a3rl-snapshot-probe"
# name: (what changes, the path that must show in the difference)
CHANGES = {
    "chmod": (f"chmod 0600 {PROBE}", PROBE),
    "chown": (f"chown nobody {PROBE}", PROBE),
    # Same size, mtime put back: only the ctime and the content hash tell.
    "content with the mtime put back": (
        f"touch -r {PROBE} /run/a3rl-probe-ref && printf 'y\\n' > {PROBE} && "
        f"touch -r /run/a3rl-probe-ref {PROBE}", PROBE),
    # In a folder that was there before, so that the mount point's own time stays put.
    "a file under /var/lib/docker": ("echo x > /var/lib/docker/a3rl-probe/f",
                                     "/var/lib/docker/a3rl-probe/f"),
    "a file in /shared": ("echo x > /shared/a3rl-probe/f", "/shared/a3rl-probe/f"),
}


def _changed_paths(before: dict, after: dict, host: str) -> set[str]:
    b, a = set(before[host][0]), set(after[host][0])
    return {line.split("\t", 1)[0] for line in a ^ b}


def test_nothing_done_compares_equal(sim):
    before = mark(sim)
    for host, (files, devices, _started) in before.items():
        assert len(files) > 1000 and devices, host
    assert snapshot(sim) == before


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_change_on_a_node_is_seen(sim, name):
    change, path = CHANGES[name]
    node = sim.members()[-1]
    podman.exec_(node.container, "sh", "-c", f"printf 'x\\n' > {PROBE} && chmod 0644 {PROBE} && "
                 "mkdir -p /var/lib/docker/a3rl-probe /shared/a3rl-probe")
    try:
        before = mark(sim)
        podman.exec_(node.container, "sh", "-c", change)
        after = snapshot(sim)
        assert after != before, name
        assert path in _changed_paths(before, after, node.hostname), name
    finally:
        podman.exec_(node.container, "sh", "-c",
                     f"rm -rf {PROBE} /run/a3rl-probe-ref /var/lib/docker/a3rl-probe "
                     "/shared/a3rl-probe")


def test_a_node_that_cannot_be_read_fails_the_snapshot(sim):
    with pytest.raises(AssertionError, match="could not read the node"):
        node_files(f"{sim.members()[0].container}-absent")


def test_an_empty_listing_fails_the_snapshot(sim, monkeypatch):
    def empty(name, *cmd, check=True):
        return subprocess.CompletedProcess(["podman", "exec", name, *cmd], 0, "", "")

    monkeypatch.setattr(podman, "exec_", empty)
    with pytest.raises(AssertionError, match="not whole"):
        node_files(sim.members()[0].container)
