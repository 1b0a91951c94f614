"""The teardown purge (a3rl.node.purge): only what the project's records name goes; a file
placed by hand beside the project's files stays and is reported."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from a3rl.node import purge


def _placed(root, rel: str, data: bytes, stamps) -> None:
    """A copy the artifact store placed and verified: the file and its stamp."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = stamps / (rel + ".sha256")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(data).hexdigest()
    stamp.write_text(f"{sha}  {len(data)}  {path.stat().st_mtime_ns}\n")


def _data_entry(assets, under="data"):
    return {"kind": "stamped", "root": str(assets), "stamps": str(assets / ".a3rl/stamps"),
            "under": under, "top": str(assets / under)}


def test_stamped_copies_go_and_a_hand_placed_file_beside_them_stays(tmp_path):
    assets = tmp_path / "shared"
    stamps = assets / ".a3rl/stamps"
    _placed(assets, "data/deepscaler/train.parquet", b"t" * 10, stamps)
    _placed(assets, "data/deepscaler/valid.parquet", b"v" * 3, stamps)
    _placed(assets, "models/Qwen3-32B/config.json", b"{}", stamps)
    (assets / "data/deepscaler/notes.txt").write_text("mine")
    (assets / "data/other_team").mkdir()
    (assets / "data/other_team/x.parquet").write_text("theirs")
    entry = _data_entry(assets)
    seen = purge.purge([entry], check=True)
    assert set(seen["removed"]) == {str(assets / "data/deepscaler/train.parquet"),
                                    str(assets / "data/deepscaler/valid.parquet"),
                                    str(stamps / "data/deepscaler/train.parquet.sha256"),
                                    str(stamps / "data/deepscaler/valid.parquet.sha256")}
    assert (assets / "data/deepscaler/train.parquet").exists()  # check mode removed nothing
    got = purge.purge([entry])
    assert got["removed"] == seen["removed"] and got["changed"]
    assert not (assets / "data/deepscaler/train.parquet").exists()
    assert not (stamps / "data/deepscaler").exists()  # emptied stamp folders went too
    assert (assets / "data/deepscaler/notes.txt").read_text() == "mine"
    assert (assets / "data/other_team/x.parquet").read_text() == "theirs"
    assert (assets / "models/Qwen3-32B/config.json").exists()  # another word's files
    assert got["kept"] == {str(assets / "data"): {"files": 2, "first": [
        str(assets / "data/deepscaler/notes.txt"), str(assets / "data/other_team/x.parquet")]}}
    again = purge.purge([entry])
    assert again["removed"] == {} and not again["changed"]


def test_emptied_folders_go_but_the_top_folder_stays(tmp_path):
    assets = tmp_path / "a"
    _placed(assets, "models/Qwen3-32B/sub/w.bin", b"w", assets / ".a3rl/stamps")
    got = purge.purge([_data_entry(assets, "models")])
    assert not (assets / "models/Qwen3-32B").exists()
    assert (assets / "models").is_dir() and got["kept"] == {}


def test_a_recorded_file_changed_since_it_was_placed_is_kept(tmp_path):
    assets = tmp_path / "a"
    _placed(assets, "data/x/train.parquet", b"abc", assets / ".a3rl/stamps")
    (assets / "data/x/train.parquet").write_bytes(b"edited by hand")
    got = purge.purge([_data_entry(assets)])
    assert (assets / "data/x/train.parquet").exists()
    assert got["changed_since"] == [str(assets / "data/x/train.parquet")]


def test_a_file_named_like_a_stamp_but_not_one_is_left_alone(tmp_path):
    store = tmp_path / "artifacts"
    store.mkdir()
    (store / "notes").write_text("n")
    (store / "notes.sha256").write_text("not a stamp\n")
    (store / "orphan.sha256").write_text("a checksum list of mine\n")
    _placed(store, "verl.bundle", b"b" * 5, store)
    entry = {"kind": "stamped", "root": str(store), "stamps": str(store), "top": str(store)}
    got = purge.purge([entry])
    assert sorted(os.listdir(store)) == ["notes", "notes.sha256", "orphan.sha256"]
    assert got["kept"][str(store)]["files"] == 3


_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], check=True, env=_ENV,
                          capture_output=True, text=True).stdout.strip()


def _git_tree(path, ref: str | None) -> None:
    """A tree as the project's checkout leaves it (with ``ref``: HEAD detached at it, no
    branch), or someone's own repository (without: a commit on a branch)."""
    path.mkdir(parents=True)
    (path / "f.py").write_text("x")
    _git(path, "init", "-q")
    _git(path, "add", ".")
    if ref:
        commit = _git(path, "commit-tree", _git(path, "write-tree"), "-m", "x")
        _git(path, "update-ref", ref, commit)
        _git(path, "checkout", "-q", "--detach", commit)
    else:
        _git(path, "commit", "-qm", "x")


def test_source_trees_go_only_when_they_carry_the_projects_ref(tmp_path):
    src = tmp_path / "src"
    _git_tree(src / "verl", "refs/a3rl/pinned")
    _git_tree(src / "my-fork", None)
    (src / "a3rl-patches").mkdir()
    (src / "a3rl-patches/README.md").write_text("r")
    (src / "a3rl-patches/mine.patch").write_text("m")
    wheels = tmp_path / "wheels"
    (wheels / "0123456789abcdef").mkdir(parents=True)
    (wheels / "0123456789abcdef/requirements.txt").write_text("x")
    (wheels / "fedcba9876543210").mkdir()
    (wheels / "fedcba9876543210/old.whl").write_text("o")
    entries = [
        {"kind": "tree", "path": str(src), "children": True, "ref": "refs/a3rl/pinned",
         "top": str(src)},
        {"kind": "files", "path": str(src / "a3rl-patches"), "names": ["README.md"],
         "top": str(src)},
        {"kind": "files", "path": str(wheels), "names": ["0123456789abcdef"],
         "top": str(wheels)},
    ]
    got = purge.purge(entries)
    assert not (src / "verl").exists() and not (wheels / "0123456789abcdef").exists()
    assert (src / "my-fork/f.py").exists() and (src / "a3rl-patches/mine.patch").exists()
    assert (wheels / "fedcba9876543210/old.whl").exists()
    assert str(src / "my-fork/f.py") in got["kept"][str(src)]["first"]


def test_the_working_directory_goes_by_its_pristine_ref(tmp_path):
    wd = tmp_path / "llm_rl/qwen3"
    _git_tree(wd, "refs/a3rl/pristine")
    (tmp_path / "llm_rl/other").mkdir()
    entry = {"kind": "tree", "path": str(wd), "ref": "refs/a3rl/pristine",
             "top": str(tmp_path / "llm_rl")}
    got = purge.purge([entry])
    assert not wd.exists() and (tmp_path / "llm_rl/other").is_dir()
    assert got["kept"] == {} and got["repositories_kept"] == []
    _git_tree(wd, None)  # a folder there that the project did not build
    assert purge.purge([entry])["removed"] == {} and wd.exists()


def _workdir(wd) -> None:
    """A working directory as the staging step leaves it: tracked files of the pristine
    commit (no branch: HEAD unborn), the pristine ref, no other ref."""
    (wd / "verl/trainer").mkdir(parents=True)
    (wd / "verl/trainer/main.py").write_text("main\n")
    (wd / "verl/trainer/config.yaml").write_text("lr: 1\n")
    (wd / "run.sh").write_text("#!/bin/sh\n")
    os.symlink("verl", wd / "link")
    _git(wd.parent, "init", "-q", wd.name)
    _git(wd, "add", "-A")
    tree = _git(wd, "write-tree")
    _git(wd, "update-ref", "refs/a3rl/pristine", _git(wd, "commit-tree", tree, "-m", "p"))


def test_a_purge_of_the_working_directory_keeps_what_the_project_did_not_place(tmp_path):
    wd = tmp_path / "llm_rl/qwen3"
    wd.mkdir(parents=True)
    _workdir(wd)
    # What a run and a user leave there: a checkpoint, Hydra's outputs, a note, an edit.
    (wd / "ckpts/global_step_10").mkdir(parents=True)
    (wd / "ckpts/global_step_10/model.pt").write_bytes(b"w" * 100)
    (wd / "outputs/2026-12-01/10-00-00/.hydra").mkdir(parents=True)
    (wd / "outputs/2026-12-01/10-00-00/.hydra/config.yaml").write_text("x")
    (wd / "verl/trainer/my_notes.txt").write_text("mine")
    (wd / "run.sh").write_text("#!/bin/sh\necho my change\n")
    entry = {"kind": "tree", "path": str(wd), "ref": "refs/a3rl/pristine",
             "top": str(tmp_path / "llm_rl")}
    seen = purge.purge([entry], check=True)
    assert (wd / "verl/trainer/main.py").exists()  # check mode removes nothing
    got = purge.purge([entry])
    assert set(got["removed"]) == set(seen["removed"]) == {
        str(wd / "verl/trainer/main.py"), str(wd / "verl/trainer/config.yaml"),
        str(wd / "link")}
    assert (wd / "ckpts/global_step_10/model.pt").read_bytes() == b"w" * 100
    assert (wd / "outputs/2026-12-01/10-00-00/.hydra/config.yaml").exists()
    assert (wd / "verl/trainer/my_notes.txt").read_text() == "mine"
    assert "my change" in (wd / "run.sh").read_text()
    assert got["changed_since"] == [str(wd / "run.sh")]
    # The repository stays: it is what shows the user their edit.
    assert got["repositories_kept"] == [str(wd)] and (wd / ".git").is_dir()
    kept = got["kept"][str(tmp_path / "llm_rl")]
    assert kept["files"] == 5 and str(wd / ".git") + "/" in kept["first"]
    assert str(wd / "ckpts/global_step_10/model.pt") in kept["first"]


def test_the_working_directory_is_compared_with_the_patched_tree_the_series_recorded(tmp_path):
    wd = tmp_path / "llm_rl/qwen3"
    wd.mkdir(parents=True)
    _workdir(wd)
    (wd / "verl/trainer/config.yaml").write_text("lr: 2\n")  # as the patch series left it
    _git(wd, "add", "-A")
    patched = _git(wd, "write-tree")
    (wd / ".git/a3rl").mkdir()
    (wd / ".git/a3rl/series.json").write_text(json.dumps(
        {"pristine": _git(wd, "rev-parse", "refs/a3rl/pristine"), "tree": patched}))
    entry = {"kind": "tree", "path": str(wd), "ref": "refs/a3rl/pristine",
             "top": str(tmp_path / "llm_rl")}
    got = purge.purge([entry])
    assert got["changed_since"] == [] and got["repositories_kept"] == []
    assert not wd.exists() and (tmp_path / "llm_rl").is_dir()


@pytest.mark.parametrize("own_work", ["branch", "stash", "commit on top"])
def test_a_repository_holding_a_users_own_refs_is_kept(tmp_path, own_work):
    src = tmp_path / "src"
    _git_tree(src / "verl", "refs/a3rl/pinned")
    if own_work == "branch":
        _git(src / "verl", "branch", "mine")
    elif own_work == "stash":
        (src / "verl/f.py").write_text("edited")
        _git(src / "verl", "stash", "-q")
    else:
        _git(src / "verl", "commit", "-q", "--allow-empty", "-m", "mine")
    got = purge.purge([{"kind": "tree", "path": str(src), "children": True,
                        "ref": "refs/a3rl/pinned", "top": str(src)}])
    assert not (src / "verl/f.py").exists()  # the pinned file, unedited, goes
    assert (src / "verl/.git").is_dir() and got["repositories_kept"] == [str(src / "verl")]


@pytest.mark.parametrize("entry", [
    {"kind": "rmrf", "path": "/x", "top": "/x"},
    {"kind": "stamped", "root": "/", "stamps": "/s", "top": "/t"},
    {"kind": "stamped", "root": "rel", "stamps": "/s", "top": "/t"},
    {"kind": "tree", "path": "/data/src", "ref": "refs/a3rl/pinned", "top": "/data/src"},
    {"kind": "tree", "path": "/elsewhere/x", "ref": "refs/a3rl/pinned", "top": "/data"},
    {"kind": "files", "path": "/data/wheels", "names": [""], "top": "/data/wheels"},
    {"kind": "files", "path": "/data/wheels", "names": ["../x"], "top": "/data/wheels"},
    {"kind": "files", "path": "/data/../etc", "names": ["x"], "top": "/data"},
])
def test_a_malformed_entry_is_refused_before_anything_goes(tmp_path, entry):
    assets = tmp_path / "a"
    _placed(assets, "data/x/f", b"f", assets / ".a3rl/stamps")
    with pytest.raises(purge.PurgeError):
        purge.purge([_data_entry(assets), entry])
    assert (assets / "data/x/f").exists()


def test_an_empty_files_list_removes_nothing(tmp_path):
    (tmp_path / "w/keep").mkdir(parents=True)
    got = purge.purge([{"kind": "files", "path": str(tmp_path / "w"), "names": [],
                        "top": str(tmp_path / "w")}])
    assert got["removed"] == {} and (tmp_path / "w/keep").is_dir()


def test_a_dist_checkpoint_goes_by_its_record_file(tmp_path):
    models = tmp_path / "models"
    (models / "Qwen3-235B-A22B-mcore/iter_0000001").mkdir(parents=True)
    (models / "Qwen3-235B-A22B-mcore/a3rl-conversion.json").write_text("{}")
    (models / "my-checkpoint").mkdir()
    (models / "my-checkpoint/x").write_text("x")
    entry = {"kind": "tree", "path": str(models), "children": True,
             "marker": "a3rl-conversion.json", "top": str(models)}
    got = purge.purge([entry])
    assert sorted(os.listdir(models)) == ["my-checkpoint"]
    assert got["kept"][str(models)]["files"] == 1


def test_nothing_goes_through_a_folder_that_is_a_symbolic_link(tmp_path):
    """issue 53: a recorded path whose folder below top became a link (to someone's own
    data) is kept and reported: the records name what the project wrote, not where a link
    points now."""
    assets = tmp_path / "shared"
    stamps = assets / ".a3rl/stamps"
    _placed(assets, "data/ds/train.parquet", b"t" * 10, stamps)
    _placed(assets, "data/ds2/valid.parquet", b"v" * 3, stamps)
    theirs = tmp_path / "their-data"
    theirs.mkdir()
    (theirs / "train.parquet").write_bytes(b"T" * 10)  # the recorded size, their bytes
    (assets / "data/ds/train.parquet").unlink()
    (assets / "data/ds").rmdir()
    os.symlink(theirs, assets / "data/ds")
    got = purge.purge([_data_entry(assets)])
    assert (theirs / "train.parquet").read_bytes() == b"T" * 10
    assert got["behind_links"] == [str(assets / "data/ds/train.parquet")]
    assert (stamps / "data/ds/train.parquet.sha256").is_file()  # the record stays with it
    assert not (assets / "data/ds2").exists()  # the rest goes as before
    # A tree the project checked out, whose subfolder a user replaced by a link.
    wd = tmp_path / "llm_rl/qwen3"
    wd.mkdir(parents=True)
    _workdir(wd)
    mine = tmp_path / "my-trainer"
    (wd / "verl/trainer").rename(mine)
    os.symlink(mine, wd / "verl/trainer")
    got = purge.purge([{"kind": "tree", "path": str(wd), "ref": "refs/a3rl/pristine",
                        "top": str(tmp_path / "llm_rl")}])
    assert sorted(os.listdir(mine)) == ["config.yaml", "main.py"]
    assert sorted(got["behind_links"]) == [str(wd / "verl/trainer/config.yaml"),
                                           str(wd / "verl/trainer/main.py")]


def test_the_marks_of_copies_begun_on_shared_storage_go_with_their_copies(tmp_path):
    """stage.check_files marks a copy it begins on shared storage (<path>.sending beside
    the stamp): the purge removes the mark with the stamp, or when the file is not there,
    and keeps the mark of a cut copy that stays (listed)."""
    assets = tmp_path / "shared"
    stamps = assets / ".a3rl/stamps"
    _placed(assets, "data/ds/train.parquet", b"t" * 10, stamps)
    (stamps / "data/ds/train.parquet.sending").write_text("")  # stamped, mark left
    (stamps / "data/ds/gone.parquet.sending").write_text("")  # never arrived
    (assets / "data/ds/cut.parquet").write_bytes(b"c")  # a cut copy: not a3rl's to judge
    (stamps / "data/ds/cut.parquet.sending").write_text("")
    got = purge.purge([_data_entry(assets)])
    assert sorted(p.name for p in stamps.rglob("*") if p.is_file()) == ["cut.parquet.sending"]
    assert (assets / "data/ds/cut.parquet").exists()
    assert str(stamps / "data/ds/gone.parquet.sending") in got["removed"]
