"""The dist-checkpoint conversion record (a3rl.node.conversion): reuse only on equal settings,
and a conversion that did not finish never takes the place of a finished one."""

from __future__ import annotations

import json

import pytest

from a3rl.node import conversion

WANT = {"model": "qwen3_235b", "source_digest": "abc", "converter_sha256": "def",
        "use_alltoall_overlap": "1", "nproc_per_node": "16"}


def _finish(tmp_path, name="out.partial", marker="x"):
    partial = tmp_path / name
    (partial / "release").mkdir(parents=True)
    (partial / "release" / "shard").write_text(marker)
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
    (tmp_path / "out.partial").mkdir()
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
    (out / "release").mkdir(parents=True)
    (out / "release/shard").write_text("theirs")
    st = conversion.status(str(out), WANT)
    assert not st["matches"] and st["foreign"]
    assert st["reasons"] == [f"{out} exists without a3rl-conversion.json: a3rl did not make "
                             "it (made by hand, or another team's), so it is neither "
                             "replaced nor removed"]
    partial = _finish(tmp_path)
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
