"""The cache-clean rules (a3rl.node.cache_clean) and the status report (a3rl.controller.status)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from a3rl.controller import status
from a3rl.node import cache_clean

WD = "/data/a3rl/llm_rl/qwen3"


@pytest.mark.parametrize(("value", "rule"), [
    ("", "empty"), (None, "empty"), ("kernel_meta", "relative"), ("/", "root"),
    (f"{WD}/../x", "'..'"), (f"{WD}/kernel_*", "glob"), ("~/.cache", "relative"),
    ("/root/$X", "glob"), ("/etc", "not in the recipe's cache set"),
    (f"{WD}/verl", "not in the recipe's cache set"), ("//", "root"),
])
def test_hostile_values_are_refused_by_rule(value, rule):
    assert rule in cache_clean.check_value(value, WD)


def test_the_cache_set_is_exact():
    assert cache_clean.allowed(WD + "/") == [f"{WD}/kernel_meta", f"{WD}/.torchair_cache",
                                             f"{WD}/.cache", "/root/.cache", "/root/atc_data"]
    for bad in ("/", "", "data", "/data", "/data/*"):
        with pytest.raises(cache_clean.CacheError):
            cache_clean.allowed(bad)


def test_clean_in_a_root_removes_only_the_set_and_never_follows_links(tmp_path):
    root = str(tmp_path)
    wd = tmp_path / WD.lstrip("/")
    (wd / "kernel_meta/a").mkdir(parents=True)
    (wd / "kernel_meta/a/op.o").write_bytes(b"x" * 100)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/keep").write_text("keep")
    os.symlink(tmp_path / "outside", wd / "kernel_meta/link")
    (wd / "verl").mkdir()
    paths = cache_clean.allowed(WD)
    got = cache_clean.clean(paths, WD, check=True, root=root)
    assert got["removed"] == {f"{WD}/kernel_meta": 100 + len(str(tmp_path / "outside"))}
    assert (wd / "kernel_meta").exists()
    got = cache_clean.clean(paths, WD, root=root)
    assert not (wd / "kernel_meta").exists() and (tmp_path / "outside/keep").exists()
    assert (wd / "verl").exists()
    assert cache_clean.clean(paths, WD, root=root)["changed"] is False


def test_a_symlinked_cache_path_is_refused_before_anything_is_removed(tmp_path):
    root = str(tmp_path)
    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "root/atc_data")
    (tmp_path / "root/.cache").mkdir()
    # "is a symlink" alone is also in the symlinked-parent refusal, which a symlinked
    # path trips too: only the link's own refusal names where it points.
    with pytest.raises(cache_clean.CacheError,
                       match=r"^'/root/atc_data': is a symlink \(to '.*/elsewhere'\); refused"):
        cache_clean.clean(["/root/.cache", "/root/atc_data"], WD, root=root)
    assert (tmp_path / "root/.cache").exists()



def test_a_folder_that_becomes_a_link_after_the_check_removes_nothing_through_it(
        tmp_path, monkeypatch):
    """issue 53: the check found no link on the way; while the first path is removed, the
    working directory is replaced by a link to someone's data. The second path is then
    reached through that link: nothing is removed there, and the result names it."""
    root = tmp_path / "root"
    wd = root / WD.lstrip("/")
    (wd / "kernel_meta").mkdir(parents=True)
    (wd / "kernel_meta/op.o").write_text("ours")
    (root / "root/.cache").mkdir(parents=True)
    (root / "root/.cache/x").write_text("ours")
    theirs = tmp_path / "theirs"
    (theirs / "kernel_meta").mkdir(parents=True)
    (theirs / "kernel_meta/precious").write_text("not a cache")
    size = cache_clean._size

    def swap_then_size(path):
        if path.endswith("/root/.cache") and not wd.is_symlink():
            wd.rename(wd.with_name("qwen3.moved"))
            wd.symlink_to(theirs)
        return size(path)

    monkeypatch.setattr(cache_clean, "_size", swap_then_size)
    got = cache_clean.clean(["/root/.cache", f"{WD}/kernel_meta"], WD, root=str(root))
    assert (theirs / "kernel_meta/precious").read_text() == "not a cache"
    assert list(got["removed"]) == ["/root/.cache"] and not (root / "root/.cache").exists()
    assert got["kept"] == {f"{WD}/kernel_meta": "a folder above it is a symlink now (it was "
                                                "not when checked); nothing was removed there"}



def test_the_module_stops_and_names_a_path_it_kept_and_what_it_removed(monkeypatch, capsys):
    """A path kept because a folder above it became a link fails the task, naming it and
    what was removed (not a "freed N bytes" as if the clean were whole)."""
    import importlib.util
    import json
    import sys

    from ansible.module_utils import basic

    monkeypatch.setitem(sys.modules, "ansible.module_utils.a3rl_cache_clean", cache_clean)
    spec = importlib.util.spec_from_file_location(
        "a3rl_cache_clean_module",
        Path(__file__).resolve().parents[2] / "plugins/modules/a3rl_cache_clean.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def clean(paths, workdir, check=False, root="/"):
        if check:
            return {"removed": {}, "kept": {}, "freed": 0, "changed": False}
        return {"removed": {"/root/.cache": 5}, "kept": {f"{WD}/kernel_meta": "why"},
                "freed": 5, "changed": True}

    monkeypatch.setattr(cache_clean, "clean", clean)
    args = {"workdir": WD, "paths": ["/root/.cache", f"{WD}/kernel_meta"], "container": ""}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS",
                        json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")  # as AnsiballZ sets it
    with pytest.raises(SystemExit):
        module.main()
    got = json.loads(capsys.readouterr().out)
    assert got["failed"] and got["changed"] and got["kept"] == {f"{WD}/kernel_meta": "why"}
    assert got["msg"].startswith(f"kept '{WD}/kernel_meta': why. Removed: ['/root/.cache']. Fix:")

def _row(**kw):
    base = {"driver": "25.3.rc1", "firmware": "7.8", "npus": 16, "npu_problems": [],
            "image_id": "sha256:" + "a" * 64, "container": "running", "free_bytes": 10**12}
    return {**base, **kw}


def _members(*hosts, missing=()):
    return {"nodes": {h: {"joined": h not in missing, "npus": 16} for h in hosts},
            "strangers": []}


def test_status_healthy_cluster():
    got = status.report({"node1": _row(), "node2": _row()}, _members("node1", "node2"), [])
    assert got["healthy"] and got["problems"] == []
    assert "joined, 16 NPU" in got["table"] and "node2" in got["table"]


def test_status_names_each_problem():
    got = status.report(
        {"node1": _row(npu_problems=["node1: NPU 3 chip 0 is Critical"]),
         "node2": _row(container="exited", image_id="sha256:" + "b" * 64, free_bytes=5)},
        _members("node1", "node2", missing=("node2",)),
        [{"submission_id": "j1", "status": "RUNNING"}], min_free_bytes=10**9)
    text = " | ".join(got["problems"])
    assert not got["healthy"]
    for needle in ("NPU 3", "node2: the training container is exited", "differs",
                   "node2: not in the Ray cluster", "node2: 5 bytes free"):
        assert needle in text, needle
    assert got["jobs"] == ["j1: RUNNING"]


def test_status_without_ray():
    got = status.report({"node1": _row()}, {}, [])
    assert "does not answer" in got["problems"][0] and "no answer" in got["table"]


def test_the_container_side_clean_honours_check(tmp_path, capsys):
    """``main`` is what runs inside the training container: --check there removes nothing."""
    import json

    wd = tmp_path / "wd"
    (wd / "kernel_meta").mkdir(parents=True)
    (wd / "kernel_meta/op.o").write_bytes(b"x" * 10)
    args = {"paths": [f"{wd}/kernel_meta"], "workdir": str(wd), "check": True}
    assert cache_clean.main(["-", "--json", json.dumps(args)]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == {f"{wd}/kernel_meta": 10}
    assert (wd / "kernel_meta/op.o").exists()
    args["check"] = False
    cache_clean.main(["-", "--json", json.dumps(args)])
    assert json.loads(capsys.readouterr().out)["changed"] is True
    assert not (wd / "kernel_meta").exists()


def test_the_action_hands_the_module_the_engine_it_ships(monkeypatch):
    """Under Mitogen a module cannot read its module_utils' source (its loader compiles
    without keeping it): the action reads the engine on the controller, from the
    module_utils path, and it is the engine the module imports."""
    import importlib.util

    from ansible import constants as C

    from a3rl.paths import project_root

    root = project_root()
    spec = importlib.util.spec_from_file_location(
        "a3rl_cache_clean_action", root / "roles/cache_clean/action_plugins/a3rl_cache_clean.py")
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    monkeypatch.setattr(C, "DEFAULT_MODULE_UTILS_PATH", [str(root / "plugins/module_utils")])
    assert action.engine_source() == Path(cache_clean.__file__).read_text()
    monkeypatch.setattr(C, "DEFAULT_MODULE_UTILS_PATH", [str(root / "roles")])
    with pytest.raises(Exception, match="none of the module_utils paths"):
        action.engine_source()
