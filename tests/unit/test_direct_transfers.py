"""The artifact store's rsync transfers (roles/artifact_store/tasks/pull.yml and send.yml),
run for real with the argv the tasks build, over a remote shell that runs the far end
locally: a copy of any length ends as the source (rsync's --append skipped a copy as
long as the source or longer, and nothing repaired it), and a cut copy resumes."""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from a3rl.node import stage
from a3rl.paths import project_root

TASKS = project_root() / "roles/artifact_store/tasks"

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")


def _rsh(tmp_path: Path) -> str:
    """A remote shell for rsync that runs the far end here: it drops ``-l user`` and the
    host, and runs the rest (rsync --server ...) as it is."""
    script = tmp_path / "rsh"
    script.write_text('#!/bin/sh\nwhile [ "$1" = "-l" ]; do shift 2; done\nshift\nexec "$@"\n')
    script.chmod(0o755)
    return str(script)


def _task(name: str, title: str) -> dict[str, Any]:
    return next(t for t in yaml.safe_load((TASKS / name).read_text()) if t["name"] == title)


def _pull_argv(rsh: str, stager: Path, controller: Path) -> list[str]:
    argv = _task("pull.yml", "Artifacts | Pull the stager's store to the controller")[
        "ansible.builtin.command"]["argv"]
    values = {"artifact_store_rsh": rsh, "artifact_store_remote": "root@stager",
              "artifact_store_stager_dir": str(stager), "artifact_store_dir": str(controller)}
    return [jinja2.Template(a).render(values) for a in argv]


def _send_argv(rsh: str, store: Path, node: Path, item: str) -> list[str]:
    title = "Artifacts | Send the missing files directly (a partial copy resumes)"
    expr = _task("send.yml", title)["ansible.builtin.command"]["argv"]
    values = {"artifact_store_rsh": rsh, "artifact_store_bwlimit": 0,
              "artifact_store_dir": str(store), "artifact_store_remote": "root@node1",
              "artifact_store_node_dir": str(node), "item": item}
    return ast.literal_eval(jinja2.Template(expr).render(values).strip())


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=True)


@pytest.mark.parametrize("copy", [b"old version, longer than the new one", b"X" * 20],
                         ids=["longer", "same size, other bytes"])
def test_the_direct_send_makes_a_node_copy_of_any_length_the_store_file(tmp_path, copy):
    store, node = tmp_path / "store", tmp_path / "node"
    (store / "w").mkdir(parents=True)
    (node / "w").mkdir(parents=True)
    (store / "w/a.bin").write_bytes(b"new version, 20 byte")
    (node / "w/a.bin").write_bytes(copy)
    os.utime(node / "w/a.bin", (1e9, 1e9))  # written at another time than the store's
    _run(_send_argv(_rsh(tmp_path), store, node, "w/a.bin"))
    assert (node / "w/a.bin").read_bytes() == b"new version, 20 byte"


def test_the_direct_send_resumes_a_cut_copy_from_what_it_holds(tmp_path):
    store, node = tmp_path / "store", tmp_path / "node"
    store.mkdir()
    node.mkdir()
    data = os.urandom(4 << 20)
    (store / "a.bin").write_bytes(data)
    (node / "a.bin").write_bytes(data[: 3 << 20])
    argv = _send_argv(_rsh(tmp_path), store, node, "a.bin")
    out = _run(argv[:1] + ["--stats"] + argv[1:]).stdout
    assert (node / "a.bin").read_bytes() == data
    literal = int(next(line for line in out.splitlines() if line.startswith("Literal data"))
                  .split(":")[1].split()[0].replace(",", ""))
    assert literal <= (1 << 20) + 65536, out  # the held 3 MiB did not cross again


def test_the_pull_makes_the_controllers_copies_the_stagers_whatever_their_length(tmp_path):
    stager, controller = tmp_path / "stager", tmp_path / "controller"
    (stager / "git").mkdir(parents=True)
    (controller / "git").mkdir(parents=True)
    (stager / "manifest.json").write_text('{"artifacts": {}}\n')
    (controller / "manifest.json").write_text('{"artifacts": {"an older": "record"}}\n')
    (stager / "git/fw.bundle").write_bytes(b"short")
    (controller / "git/fw.bundle").write_bytes(b"a longer, older bundle")
    _run(_pull_argv(_rsh(tmp_path), stager, controller))
    assert (controller / "manifest.json").read_text() == '{"artifacts": {}}\n'
    assert (controller / "git/fw.bundle").read_bytes() == b"short"
    # Unchanged since: a second pull transfers nothing.
    assert _run(_pull_argv(_rsh(tmp_path), stager, controller)).stdout == ""


def test_the_check_after_a_transfer_says_which_copies_it_removed_and_which_it_kept(tmp_path):
    def rec(path: str, data: bytes) -> dict[str, Any]:
        return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

    (tmp_path / "long.bin").write_bytes(b"0123456789+")
    (tmp_path / "short.bin").write_bytes(b"0123")
    files = [rec("long.bin", b"0123456789"), rec("short.bin", b"0123456789"),
             rec("gone.bin", b"0123456789")]
    with pytest.raises(stage.StageError) as e:
        stage.check_files(str(tmp_path), files, require=True, host="node1")
    msg = str(e.value)
    assert "removed (damaged, or longer than the file): long.bin;" in msg
    assert "kept, shorter than the file" in msg and "record): short.bin;" in msg
    assert "not there: gone.bin." in msg
    assert not (tmp_path / "long.bin").exists() and (tmp_path / "short.bin").exists()
