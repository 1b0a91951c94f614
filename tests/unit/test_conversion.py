"""The dist-checkpoint conversion record (a3rl.node.conversion): reuse only on equal settings,
and a conversion that did not finish never takes the place of a finished one."""

from __future__ import annotations

import json
import os

import pytest

from a3rl.node import conversion

WANT = {"model": "qwen3_235b", "source_digest": "abc", "converter_sha256": "def",
        "use_alltoall_overlap": "1", "nproc_per_node": "16"}


def _finish(tmp_path, name="out.partial", marker="x"):
    """A finished conversion as the role leaves it: prepare's marked folder, the
    converter's output inside it."""
    partial = tmp_path / name
    conversion.prepare(str(tmp_path / name.removesuffix(".partial")), str(partial))
    (partial / "output/release").mkdir(parents=True)
    (partial / "output/release/shard").write_text(marker)
    return partial


def test_no_checkpoint_yet(tmp_path):
    st = conversion.status(str(tmp_path / "out"), WANT)
    assert not st["matches"] and st["reasons"] == ["there is no converted checkpoint yet"]
    assert st["free_bytes"] > 0


def test_commit_then_equal_settings_match(tmp_path):
    out = tmp_path / "out"
    conversion.commit(str(out), str(_finish(tmp_path)), WANT)
    assert not (tmp_path / "out.partial").exists()
    assert json.loads((out / conversion.RECORD).read_text()) == WANT
    assert conversion.status(str(out), WANT)["matches"]


def test_other_overlap_is_named(tmp_path):
    out = tmp_path / "out"
    conversion.commit(str(out), str(_finish(tmp_path)), WANT)
    st = conversion.status(str(out), {**WANT, "use_alltoall_overlap": "0"})
    assert not st["matches"]
    assert st["reasons"] == ["USE_ALLTOALL_OVERLAP was '1' at conversion, now '0'"]


def test_other_weights_or_converter_are_named(tmp_path):
    out = tmp_path / "out"
    conversion.commit(str(out), str(_finish(tmp_path)), WANT)
    st = conversion.status(str(out), {**WANT, "source_digest": "new", "converter_sha256": "n"})
    assert len(st["reasons"]) == 2
    assert any("HF weights" in r for r in st["reasons"])
    assert any("converter" in r for r in st["reasons"])


def test_unreadable_record(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / conversion.RECORD).write_text("{not json")
    st = conversion.status(str(out), WANT)
    assert not st["matches"] and "cannot be read" in st["reasons"][0]


def test_a_new_conversion_replaces_the_old_one(tmp_path):
    out = tmp_path / "out"
    conversion.commit(str(out), str(_finish(tmp_path, marker="old")), WANT)
    new = {**WANT, "use_alltoall_overlap": "0"}
    conversion.commit(str(out), str(_finish(tmp_path, marker="new")), new)
    assert (out / "release" / "shard").read_text() == "new"
    assert conversion.status(str(out), new)["matches"]
    assert not (tmp_path / "out.old").exists()


def test_an_empty_conversion_is_not_committed(tmp_path):
    out = tmp_path / "out"
    conversion.commit(str(out), str(_finish(tmp_path, marker="old")), WANT)
    conversion.prepare(str(out), str(tmp_path / "out.partial"))
    with pytest.raises(FileNotFoundError):
        conversion.commit(str(out), str(tmp_path / "out.partial"), {**WANT, "model": "x"})
    assert conversion.status(str(out), WANT)["matches"]


@pytest.mark.parametrize(("features", "env", "want"), [
    ([], {}, 1), ("no-alltoall_overlap", {}, 0), (["sam", "no-alltoall_overlap"], {}, 0),
    ([], {"USE_ALLTOALL_OVERLAP": 0}, 0), ("alltoall_overlap", {"USE_ALLTOALL_OVERLAP": 0}, 1),
    ("sam,no-alltoall_overlap", None, 0),
])
def test_the_runs_alltoall_overlap(features, env, want):
    model = {"features": {"USE_ALLTOALL_OVERLAP": 1}}
    assert conversion.alltoall_overlap(features, model, env) == want


def test_a_folder_a3rl_did_not_make_is_named_and_never_replaced(tmp_path):
    """issue 53: a dist-checkpoint folder without a3rl-conversion.json (made by hand, or
    another team's) is not "no converted checkpoint yet": it is named, and commit neither
    renames it to .old nor removes it."""
    out = tmp_path / "out"
    partial = _finish(tmp_path)  # a conversion finished before their folder came
    (out / "release").mkdir(parents=True)
    (out / "release/shard").write_text("theirs")
    st = conversion.status(str(out), WANT)
    assert not st["matches"] and st["foreign"]
    assert st["reasons"] == [f"{out} exists without a3rl-conversion.json: a3rl did not make "
                             "it (made by hand, or another team's), so it is neither "
                             "replaced nor removed"]
    with pytest.raises(FileExistsError, match="without a3rl-conversion.json"):
        conversion.prepare(str(out), str(partial))
    with pytest.raises(FileExistsError, match="without a3rl-conversion.json"):
        conversion.commit(str(out), str(partial), WANT)
    assert (out / "release/shard").read_text() == "theirs" and partial.is_dir()
    assert not (tmp_path / "out.old").exists()
    (tmp_path / "a-file").write_text("not a folder")  # a file there is not ours either
    assert conversion.status(str(tmp_path / "a-file"), WANT)["foreign"]


def test_an_old_folder_a3rl_did_not_make_is_kept(tmp_path):
    out = tmp_path / "out"
    conversion.commit(str(out), str(_finish(tmp_path, marker="old")), WANT)
    (tmp_path / "out.old").mkdir()
    (tmp_path / "out.old/notes").write_text("mine")
    assert not conversion.status(str(out), WANT)["foreign"]
    with pytest.raises(FileExistsError, match="out.old exists without"):
        conversion.commit(str(out), str(_finish(tmp_path, marker="new")), WANT)
    assert (tmp_path / "out.old/notes").read_text() == "mine"
    assert (out / "release/shard").read_text() == "old"


def _theirs(path):
    (path / "step_1").mkdir(parents=True)
    (path / "step_1/shard").write_text("theirs")


def test_a_partial_folder_a3rl_did_not_make_is_kept_and_named(tmp_path):
    """issue 53: a folder at <out>.partial without a3rl's mark (made by hand, another
    team's on shared storage) is named before the conversion starts, and neither prepare
    nor commit removes or moves it."""
    out, partial = tmp_path / "out", tmp_path / "out.partial"
    _theirs(partial)
    st = conversion.status(str(out), WANT)
    assert st["kept"] == [f"{partial} exists without a3rl-partial.json: a3rl did not make it "
                          "(made by hand, another team's, or left by an a3rl older than "
                          "that mark), so it is not removed"]
    for check in (True, False):
        with pytest.raises(FileExistsError, match="out.partial exists without a3rl-partial"):
            conversion.prepare(str(out), str(partial), check=check)
    (partial / "output").mkdir()
    (partial / "output/x").write_text("theirs too")
    with pytest.raises(FileExistsError, match="without a3rl-partial.json"):
        conversion.commit(str(out), str(partial), WANT)
    assert (partial / "step_1/shard").read_text() == "theirs" and not out.exists()
    # A link there is not ours either, even to a folder holding a mark.
    partial_link = tmp_path / "link.partial"
    partial_link.symlink_to(_finish(tmp_path, "real.partial"))
    assert conversion.kept(str(tmp_path / "link"))
    with pytest.raises(FileExistsError):
        conversion.prepare(str(tmp_path / "link"), str(partial_link))
    assert (tmp_path / "real.partial/output/release/shard").exists()


def test_what_an_interrupted_conversion_left_is_removed_and_the_converter_gets_an_empty_folder(
        tmp_path):
    """The marked folder is a3rl's: a second prepare removes what a cut conversion wrote,
    and the folder the converter writes is empty (the converter returns without converting
    into one that is not); the mark never reaches the checkpoint."""
    out, partial = tmp_path / "out", tmp_path / "out.partial"
    cut = _finish(tmp_path, marker="cut")
    assert conversion.status(str(out), WANT)["kept"] == []
    assert conversion.prepare(str(out), str(partial), check=True)
    assert (cut / "output/release/shard").exists()  # check mode removes nothing
    conversion.prepare(str(out), str(partial))
    assert sorted(os.listdir(partial)) == ["a3rl-partial.json"]
    assert not os.path.exists(conversion.output_of(str(partial)))
    (partial / "output").mkdir()
    (partial / "output/shard").write_text("whole")
    conversion.commit(str(out), str(partial), WANT)
    assert sorted(os.listdir(out)) == ["a3rl-conversion.json", "shard"]
    assert not partial.exists() and conversion.status(str(out), WANT)["matches"]


def test_an_old_folder_a3rl_did_not_make_is_named_before_the_conversion(tmp_path):
    out = tmp_path / "out"
    conversion.commit(str(out), str(_finish(tmp_path, marker="old")), WANT)
    _theirs(tmp_path / "out.old")
    assert conversion.status(str(out), WANT)["kept"] == [
        f"{out}.old exists without a3rl-conversion.json: a3rl did not make it (made by hand, "
        "or another team's), so it is neither replaced nor removed"]


# ----------------------------------------- the role, run on this machine (no simulator)

def _convert_play(tmp_path, partial_setup) -> tuple[int, str]:
    """The mcore_checkpoint role's convert tasks against localhost, up to the converter
    (no container here, so that task fails): what the play does with ``<out>.partial``."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd/converter_hf_to_mcore.py").write_text("# stand-in: never run here\n")
    record = tmp_path / "manifest.json"
    record.write_text(json.dumps({"artifacts": {"hf": {"files": [
        {"path": "model.safetensors", "sha256": "a" * 64, "size": 10}]}}}))
    partial_setup(tmp_path / "out.partial")
    variables = {
        "mcore_checkpoint_store_record": str(record), "mcore_checkpoint_source": "hf",
        "mcore_checkpoint_workdir": str(tmp_path / "wd"),
        "mcore_checkpoint_converter": "converter_hf_to_mcore.py",
        "mcore_checkpoint_dir": str(tmp_path / "out"), "mcore_checkpoint_hf_dir": str(tmp_path),
        "mcore_checkpoint_model": "m", "mcore_checkpoint_alltoall_overlap": 1,
        "mcore_checkpoint_nproc": 1, "mcore_checkpoint_shared": False,
        "mcore_checkpoint_container": "a3rl-no-such-container", "mcore_checkpoint_set_env": [],
        "mcore_checkpoint_space_factor": 1.0, "mcore_checkpoint_timeout": 30,
        "mcore_checkpoint_poll": 1, "a3rl_assets_dir": str(tmp_path / "assets")}
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: mcore_checkpoint, tasks_from: convert}\n")
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", json.dumps(variables), str(play)],
        cwd=repo, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(repo / "ansible.cfg")})
    return proc.returncode, proc.stdout


def test_the_role_keeps_a_partial_folder_a3rl_did_not_make_and_stops(tmp_path):
    """issue 53: the play removed <out>.partial whatever it was (ansible.builtin.file
    state=absent). A folder there without a3rl's mark is kept, named, and the play stops
    with the fix before the conversion starts."""
    rc, out = _convert_play(tmp_path, _theirs)
    assert rc != 0
    assert (tmp_path / "out.partial/step_1/shard").read_text() == "theirs"
    assert "Refuse to replace a folder a3rl did not make" in out
    assert f"{tmp_path}/out.partial exists without a3rl-partial.json" in out
    assert "Nothing was changed. Fix: move it away" in out
    # It stops at the refusal, before the task that would make the folder afresh (whose
    # module refuses too).
    assert "Make the marked folder" not in out and "Run the converter" not in out


def test_the_role_removes_what_its_own_cut_conversion_left(tmp_path):
    """A partial folder with the mark is a3rl's (an interrupted conversion): the play
    makes it afresh and hands the converter the empty output folder inside it."""
    def cut(partial):
        conversion.prepare(str(tmp_path / "out"), str(partial))
        (partial / "output").mkdir()
        (partial / "output/half").write_text("cut")

    rc, out = _convert_play(tmp_path, cut)
    assert rc != 0 and "Run the converter in the training container" in out, out[-2000:]
    assert sorted(os.listdir(tmp_path / "out.partial")) == ["a3rl-partial.json"]
