"""Converged-role probes: a3rl.node.state on the node, the a3rl_state action's inputs."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from a3rl.node import state
from a3rl.paths import project_root

from .conftest import run_module

ROOT = project_root()


def _action():
    spec = importlib.util.spec_from_file_location("a3rl_state_action",
                                                  ROOT / "plugins/action/a3rl_state.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def node(tmp_path: Path):
    managed = tmp_path / "etc" / "app.conf"
    managed.parent.mkdir()
    managed.write_text("a = 1\n")
    watch = {"files": [str(managed), str(tmp_path / "absent")],
             "commands": [["cat", str(managed)]]}
    return tmp_path / "state" / "role.json", managed, watch


def test_record_then_probe_is_converged(node):
    path, _managed, watch = node
    state.record(str(path), "k1", {"x": "1"}, watch)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert state.probe(str(path), "k1", {"x": "1"}, watch) == {"converged": True, "reasons": []}


def test_no_stamp_is_not_converged(node):
    path, _managed, watch = node
    got = state.probe(str(path), "k1", {}, watch)
    assert not got["converged"] and got["reasons"] == ["no record of an earlier converged run"]


@pytest.mark.parametrize("change, reason", [
    (lambda m: m.write_text("a = 2\n"), "sha256"),
    (lambda m: m.chmod(0o600), "mode"),
    (lambda m: m.unlink(), "type"),
])
def test_a_changed_file_is_named_and_the_probe_only_reads(node, change, reason):
    path, managed, watch = node
    state.record(str(path), "k1", {}, watch)
    stamp = path.read_bytes()
    change(managed)
    got = state.probe(str(path), "k1", {}, watch)
    assert not got["converged"] and path.read_bytes() == stamp
    assert any(r.startswith(f"file {managed}:") and reason in r for r in got["reasons"]), got


def test_a_file_appearing_where_none_was_is_a_change(node, tmp_path):
    path, _managed, watch = node
    state.record(str(path), "k1", {}, watch)
    (tmp_path / "absent").write_text("")
    assert not state.probe(str(path), "k1", {}, watch)["converged"]


def test_changed_inputs_are_named(node):
    path, _managed, watch = node
    state.record(str(path), "k1", {"a": "1", "b": "1"}, watch)
    got = state.probe(str(path), "k2", {"a": "1", "b": "2"}, watch)
    assert got["reasons"] == ["inputs changed: b"]


def test_garbled_stamp_is_not_trusted(node):
    path, _managed, watch = node
    state.record(str(path), "k1", {}, watch)
    path.write_text("{not json")
    assert not state.probe(str(path), "k1", {}, watch)["converged"]


def test_a_command_whose_output_changes_is_a_change(node, tmp_path):
    path, _managed, _ = node
    f = tmp_path / "out"
    f.write_text("x")
    watch = {"commands": [["cat", str(f)]]}
    state.record(str(path), "k", {}, watch)
    f.write_text("y")
    assert state.probe(str(path), "k", {}, watch)["reasons"] == [f"command cat {f}: output changed"]


def test_without_a_stamp_of_these_inputs_nothing_is_observed(node, tmp_path):
    """No stamp, or a stamp of other inputs: the role runs in full, so the probe runs none of
    the watched commands (they can cost seconds); with the stamp's key it runs them all."""
    path, _managed, _ = node
    ran = tmp_path / "ran"
    watch = {"commands": [["sh", "-c", f"echo x >> {ran}"]]}
    assert not state.probe(str(path), "k1", {}, watch)["converged"]
    assert not ran.exists()
    state.record(str(path), "k1", {}, watch)
    assert ran.read_text() == "x\n"
    got = state.probe(str(path), "k2", {}, watch)
    assert got == {"converged": False, "reasons": ["inputs changed: the key"]}
    assert ran.read_text() == "x\n"
    # With the key of the stamp the commands run (their output, none, is as recorded).
    assert state.probe(str(path), "k1", {}, watch) == {"converged": True, "reasons": []}
    assert ran.read_text() == "x\nx\n"


def test_bad_watch_lists_are_refused_by_a_probe_that_observes_nothing(node):
    path, _managed, _ = node
    for bad, message in (({"packages": ["x"]}, "unknown watch kind"),
                         ({"commands": ["cat /etc/hosts"]}, "argv list"),
                         ({"files": "/etc/hosts"}, "must be a list")):
        with pytest.raises(state.StateError, match=message):
            state.probe(str(path), "k1", {}, bad)


def test_bad_watch_lists_are_refused(node):
    path, _managed, _ = node
    with pytest.raises(state.StateError, match="unknown watch kind"):
        state.observe({"packages": ["x"]})
    with pytest.raises(state.StateError, match="argv list"):
        state.observe({"commands": ["cat /etc/hosts"]})
    with pytest.raises(state.StateError, match="plain name"):
        state.stamp_path("/x", "../etc")


def test_stamp_write_is_atomic_and_leaves_no_temporary(node):
    path, _managed, watch = node
    state.record(str(path), "k1", {}, watch)
    state.record(str(path), "k2", {}, watch)
    assert json.loads(path.read_text())["key"] == "k2"
    assert os.listdir(path.parent) == ["role.json"]


def test_role_inputs_are_what_its_files_name_less_its_own_results():
    names = _action().role_names("container_engine")
    assert {"container_engine_data_root", "container_engine_storage_driver",
            "container_engine_daemon_extra", "container_engine_packages"} <= set(names)
    # registered results, task variables and facts are not inputs
    assert not {"container_engine_info", "container_engine_apt", "container_engine_state",
                "container_engine_pending", "ansible_facts"} & set(names)
    # no stray words: every name is a variable the project or the inventory may define
    assert all(n.islower() for n in names), names


def test_included_roles_inputs_are_inputs_too():
    # datasets includes artifact_store; these are named only in artifact_store's files
    names = set(_action().role_names("datasets"))
    assert {"artifact_store_bwlimit", "artifact_store_fanout_min_bytes"} <= names


def test_the_code_digest_follows_every_file(tmp_path):
    act = _action()
    for part in ("roles/r/tasks", "plugins", "playbooks", "tools/a3rl/node", "group_vars"):
        (tmp_path / part).mkdir(parents=True)
    (tmp_path / "roles/r/tasks/main.yml").write_text("---\n")
    before = act.code_digest(tmp_path)
    (tmp_path / "roles/r/tasks/main.yml").write_text("--- \n")
    assert act.code_digest(tmp_path) != before


def test_secret_inputs_are_keyed_digests():
    act = _action()
    assert act.digest("s3cret", b"k" * 32).startswith("hmac:")
    assert act.digest("s3cret", b"k" * 32) != act.digest("s3cret", b"j" * 32)
    # timing fields of registered results never change a digest
    assert act.digest({"rc": 0, "start": "1", "delta": "2"}) == act.digest({"rc": 0, "start": "3"})


def test_the_probe_names_the_missing_tools_and_the_record_too(tmp_path):
    """Ray's firewall and the frameworks role ask the package manager for iptables and
    git only when the probe names them: through the action and the module (Ansible on
    localhost), a command on PATH is not listed, one that is not there is, in both modes;
    a record in a real run writes its stamp."""
    absent = "a3rl-test-no-such-command"
    args = {"role": "container_engine", "dir": str(tmp_path), "tools": ["sh", absent]}
    probed = run_module("a3rl_state", args)
    assert probed["missing_tools"] == [absent]
    assert probed["converged"] is False
    recorded = run_module("a3rl_state", {**args, "mode": "record"})
    assert recorded["missing_tools"] == [absent] and recorded["recorded"] is True
    assert (tmp_path / "container_engine.json").is_file()
    assert run_module("a3rl_state", {**args, "tools": []})["missing_tools"] == []
