"""The patch-series engine on real git repositories: order, atomicity, idempotence."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from a3rl.node.patch_series import (
    PatchSeriesError,
    apply,
    base_folder,
    discover,
    filevercmp,
    reset,
    version_key,
    version_sorted,
)

REPO = Path(__file__).resolve().parents[2]
GIT_ENV = dict(
    os.environ, LC_ALL="C", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t",
    GIT_AUTHOR_EMAIL="t@localhost", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@localhost",
    GIT_AUTHOR_DATE="2000-01-01T00:00:00+0000", GIT_COMMITTER_DATE="2000-01-01T00:00:00+0000",
)
LINES = "".join(f"line {n}\n" for n in range(1, 21))
PRISTINE = {
    "verl/trainer/core.py": LINES,
    "megatron/core/model.py": LINES.replace("line", "mcore"),
    "mindspeed/ops.py": "ops = 1\n",
    "vllm/engine.py": LINES.replace("line", "engine"),
    "vllm_ascend/worker.py": LINES.replace("line", "worker"),
    "README.md": "recipe\n",
}
PLAIN = "patches/verl/utils/hybrid_data_parallel/hdp.py"
RUNTIME = ("kernel_meta/op.o", ".cache/x/y.bin", "outputs/run1/log.txt")


# ------------------------------------------------------------------------ helpers


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, text=True,
                          capture_output=True).stdout.strip()


def diff(path: str, old: str | None, new: str | None) -> str:
    """A -p1 unified diff of one file (None: absent)."""
    a = (old or "").splitlines(keepends=True)
    b = (new or "").splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}",
                                        "/dev/null" if new is None else f"b/{path}"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def commit_files(src: Path, files: dict[str, str], message: str) -> str:
    """Commit ``files`` in ``src`` (the workdir reaches its objects through git alternates)."""
    for rel, content in files.items():
        write(src / rel, content)
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", message)
    return git(src, "rev-parse", "HEAD")


def commit_pristine(wd: Path, src: Path, files: dict[str, str]) -> str:
    """Commit ``files`` in ``src`` and make it the workdir's pristine tree, as the series
    leaves it (read-tree -u --reset)."""
    commit = commit_files(src, files, "pristine")
    git(wd, "update-ref", "refs/a3rl/pristine", commit)
    git(wd, "read-tree", "-u", "--reset", commit)
    git(wd, "update-ref", "--no-deref", "HEAD", commit)
    return commit


def edited(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def recipe_patches() -> dict[str, str]:
    """The recipe's series: four patches in three folders and at the top."""
    core, model = PRISTINE["verl/trainer/core.py"], PRISTINE["megatron/core/model.py"]
    return {
        "patches/megatron/0001-megatron-bugfix-model.patch":
            diff("megatron/core/model.py", model, edited(model, "mcore 3\n", "mcore three\n")),
        "patches/verl/0002-verl-bugfix-core.patch":
            diff("verl/trainer/core.py", core, edited(core, "line 5\n", "line five\n")),
        "patches/verl/0003-verl-feature-new.patch":
            diff("verl/trainer/new.py", None, "NEW = True\n"),
        "patches/vllm/0004-vllm-feature-engine.patch":
            diff("vllm/engine.py", PRISTINE["vllm/engine.py"],
                 edited(PRISTINE["vllm/engine.py"], "engine 10\n", "engine ten\n")),
    }


@pytest.fixture
def wd(tmp_path: Path) -> Path:
    """A workdir like a3rl_workdir's, with the recipe's patches/ inside its pristine tree."""
    src, wd = tmp_path / "src", tmp_path / "wd"
    git(tmp_path, "init", "-q", str(src))
    git(tmp_path, "init", "-q", str(wd))
    write(wd / ".git/objects/info/alternates", f"{src}/.git/objects\n")
    files = dict(PRISTINE, **recipe_patches())
    # A plain file beside the patches, which a patch edits (as the recipe's verl 0015
    # edits patches/verl/utils/hybrid_data_parallel/hdp.py).
    files[PLAIN] = "BINPACK = False\n"
    files["patches/verl/0015-verl-feature-binpack.patch"] = diff(
        PLAIN, "BINPACK = False\n", "BINPACK = True\n")
    commit_pristine(wd, src, files)
    for rel in RUNTIME:
        write(wd / rel, f"runtime {rel}\n")
    return wd


@pytest.fixture
def extra(tmp_path: Path) -> Path:
    worker = PRISTINE["vllm_ascend/worker.py"]
    d = tmp_path / "extra"
    write(d / "0001-vllm_ascend-bugfix-worker.patch",
          diff("vllm_ascend/worker.py", worker, edited(worker, "worker 7\n", "worker seven\n"))
          + diff("vllm_ascend/added.py", None, "ADDED = 1\n"))
    return d


def series(wd: Path, *extra: Path):
    return discover(str(wd / "patches"), [str(e) for e in extra])


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file under ``root``: content hash, plus mtime outside .git (git may refresh
    the mtime of an object it would have written again, never its content)."""
    snap = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            snap[rel] = (digest,) if rel.startswith(".git/") else (digest, p.stat().st_mtime_ns)
    return snap


def text(wd: Path, rel: str) -> str:
    return (wd / rel).read_text()


# ------------------------------------------------------------------------ sort -V


TRICKY = [
    "0007-verl-bugfix-x.patch", "0007-verl-feature-y.patch", "0007-verl-bugfix-x.py",
    "vllm/0001-vllm-a.patch", "vllm_ascend/0001-vllm_ascend-a.patch", "vllm-x", "vllm.x",
    "1.10", "1.9", "1.9.0", "1.09", "a~b", "a", "a~", "a~~", "~", "~a", "a.", "a..",
    ".", "..", ".hidden", ".hidden.patch", "..x", ".a", ".0", "a01", "a1", "a001b", "",
    "x.tar.gz", "x.tar", "x-1.2.tar.gz", "x-1.10.tar.gz", "patch", ".patch", "a/b", "a/b/c",
    "./patches/verl/0003-x.patch", "./patches/0001-top.patch", "./patches/.dot/0001-x.patch",
    "v1.2rc1", "v1.2~rc1", "v1.2", "z9999999999999999999999", "z10000000000000000000000",
]
ATOMS = ["0", "00", "007", "1", "9", "10", "99", "a", "b", "Z", "z", "~", ".", "-", "_", "/",
         "patch", ".patch", ".py", ".tar.gz", "verl", "vllm", "vllm_ascend", "megatron",
         "bugfix", "feature", "~rc1", "+", "#", "é", "0007-", "1.9", "1.10"]


def sort_v(names: list[str]) -> list[str]:
    out = subprocess.run(["sort", "-V"], input="".join(n + "\n" for n in names), text=True,
                         capture_output=True, check=True, env=dict(os.environ, LC_ALL="C"))
    return out.stdout.splitlines()


def test_version_sorted_matches_gnu_sort_v():
    rnd = random.Random(20240601)
    batches = [TRICKY]
    for _ in range(12):
        names = {"".join(rnd.choice(ATOMS) for _ in range(rnd.randint(1, 6)))
                 for _ in range(50)}
        batches.append(sorted(names | set(rnd.sample(TRICKY, 10))))
    assert sum(len(b) for b in batches) > 300
    for names in batches:
        shuffled = rnd.sample(names, len(names))
        assert version_sorted(shuffled) == sort_v(shuffled)


def test_version_order_basics():
    assert version_sorted(["1.10", "1.9", "a~b", "a"]) == ["1.9", "1.10", "a~b", "a"]
    assert filevercmp("a01", "a1") == 0 and version_key("a01") < version_key("a1")
    assert version_sorted(["10-x.patch", "9-x.patch"]) == ["9-x.patch", "10-x.patch"]


# ------------------------------------------------------------------------ discovery


def test_discover_orders_like_the_recipe(wd, extra):
    write(wd / "patches/verl/10-verl-feature-z.patch", diff("verl/z.py", None, "z\n"))
    write(wd / "patches/verl/9-verl-feature-y.patch", diff("verl/y.py", None, "y\n"))
    s = series(wd, extra)
    found = subprocess.run("find ./patches -type f -name '*.patch' | sort -V", shell=True,
                           cwd=wd, text=True, capture_output=True, env=dict(os.environ, LC_ALL="C"))
    recipe = [line[2:] for line in found.stdout.splitlines()]
    assert s.labels == recipe + ["extra/0001-vllm_ascend-bugfix-worker.patch"]
    assert "patches/verl/0015-verl-feature-binpack.patch" in s.labels
    assert all(label.endswith(".patch") for label in s.labels)  # no plain file
    assert s.patches[0].sha256 == hashlib.sha256(
        (wd / "patches" / recipe[0][len("patches/"):]).read_bytes()).hexdigest()


def test_digest_changes_with_any_change(wd, extra):
    base = series(wd, extra).digest
    assert series(wd, extra).digest == base
    p = wd / "patches/verl/0002-verl-bugfix-core.patch"
    digests = set()
    p.rename(p.with_name("0005-verl-bugfix-core.patch"))  # rename and reorder
    digests.add(series(wd, extra).digest)
    p.with_name("0005-verl-bugfix-core.patch").rename(p)
    write(p, p.read_text() + "\n")  # edit
    digests.add(series(wd, extra).digest)
    digests.add(series(wd).digest)  # remove the extra folder
    assert base not in digests and len(digests) == 3
    # A plain file beside the patches is not part of the series (a patch may edit it).
    before = series(wd, extra).digest
    write(wd / PLAIN, "BINPACK = None\n")
    assert series(wd, extra).digest == before


# ------------------------------------------------------------------------ apply


def test_clean_apply(wd, extra):
    r = apply(str(wd), series(wd, extra))
    assert (r["changed"], r["state"], r["reason"]) == (True, "applied", "first run")
    assert r["applied"][-1] == "extra/0001-vllm_ascend-bugfix-worker.patch"
    assert "line five\n" in text(wd, "verl/trainer/core.py")
    assert "mcore three\n" in text(wd, "megatron/core/model.py")
    assert "worker seven\n" in text(wd, "vllm_ascend/worker.py")
    assert text(wd, "verl/trainer/new.py") == "NEW = True\n"
    assert text(wd, "vllm_ascend/added.py") == "ADDED = 1\n"
    # The plain file stays beside the patches, edited by its patch; no copy of it
    # anywhere else in the tree.
    assert text(wd, PLAIN) == "BINPACK = True\n"
    assert git(wd, "ls-files", "*hdp.py") == PLAIN
    assert all(text(wd, rel) == f"runtime {rel}\n" for rel in RUNTIME)
    assert git(wd, "diff", "--stat") == ""  # worktree == index
    state = json.loads((wd / ".git/a3rl/series.json").read_text())
    assert state["tree"] == r["tree"] == git(wd, "write-tree")
    assert state["labels"] == r["applied"]


def test_rerun_is_unchanged_and_touches_nothing(wd, extra):
    apply(str(wd), series(wd, extra))
    before = snapshot(wd)
    r = apply(str(wd), series(wd, extra))
    assert (r["changed"], r["state"], r["reason"]) == (False, "unchanged", "")
    assert snapshot(wd) == before


def test_edited_patch_is_reapplied(wd, extra):
    apply(str(wd), series(wd, extra))
    core = PRISTINE["verl/trainer/core.py"]
    write(wd / "patches/verl/0002-verl-bugfix-core.patch",
          diff("verl/trainer/core.py", core, edited(core, "line 5\n", "line FIVE\n")))
    r = apply(str(wd), series(wd, extra))
    assert (r["state"], r["reason"]) == ("reapplied", "series changed")
    assert "line FIVE\n" in text(wd, "verl/trainer/core.py")
    assert "line five" not in text(wd, "verl/trainer/core.py")


def test_added_patch_reapplies_the_series_in_order(wd, tmp_path):
    core = PRISTINE["verl/trainer/core.py"]
    step1 = edited(core, "line 12\n", "line twelve\n")
    step2 = edited(step1, "line twelve\n", "line TWELVE\n")
    d = tmp_path / "extra"
    write(d / "9-verl-bugfix-a.patch", diff("verl/trainer/core.py", core, step1))
    assert apply(str(wd), series(wd, d))["state"] == "applied"
    # 10 after 9 (sort -V; plain sorting would put it first and fail).
    write(d / "10-verl-bugfix-b.patch", diff("verl/trainer/core.py", step1, step2))
    r = apply(str(wd), series(wd, d))
    assert (r["state"], r["reason"]) == ("reapplied", "series changed")
    assert r["applied"][-2:] == ["extra/9-verl-bugfix-a.patch", "extra/10-verl-bugfix-b.patch"]
    assert "line TWELVE\n" in text(wd, "verl/trainer/core.py")
    assert apply(str(wd), series(wd, d))["changed"] is False


def test_removed_extra_patch_takes_its_effect_and_files_away(wd, extra):
    apply(str(wd), series(wd, extra))
    r = apply(str(wd), series(wd))
    assert (r["state"], r["reason"]) == ("reapplied", "series changed")
    assert not (wd / "vllm_ascend/added.py").exists()
    assert text(wd, "vllm_ascend/worker.py") == PRISTINE["vllm_ascend/worker.py"]
    assert "line five\n" in text(wd, "verl/trainer/core.py")
    assert all(text(wd, rel) == f"runtime {rel}\n" for rel in RUNTIME)


def conflicting(wd: Path) -> None:
    """Turn the recipe's 3rd patch (of 4) into one whose first hunk applies on top of the
    2nd patch and whose second hunk does not (its context is not in the file)."""
    core = edited(PRISTINE["verl/trainer/core.py"], "line 5\n", "line five\n")
    bad = diff("verl/trainer/core.py", core,
               edited(edited(core, "line 2\n", "line two\n"), "line 15\n", "line XV\n"))
    assert "@@ -1,5 +1,5 @@" in bad and "@@ -12,7 +12,7 @@" in bad
    write(wd / "patches/verl/0003-verl-feature-new.patch",
          diff("verl/trainer/new.py", None, "NEW = True\n")
          + bad.replace(" line 14\n", " line fourteen\n"))


def assert_conflict_message(msg: str, wd: Path):
    label = "patches/verl/0003-verl-feature-new.patch"
    assert f"{label} (patch 3 of 5)" in msg
    assert "verl/trainer/core.py: hunk @@ -12,7 +12,7 @@" in msg
    assert ("applied before it (in a scratch index only): "
            "patches/megatron/0001-megatron-bugfix-model.patch, "
            "patches/verl/0002-verl-bugfix-core.patch.") in msg
    assert "left unchanged" in msg and "rebase" in msg and str(wd) in msg


def test_conflict_changes_nothing(wd):
    conflicting(wd)
    before = snapshot(wd)
    with pytest.raises(PatchSeriesError) as e:
        apply(str(wd), series(wd))
    assert_conflict_message(str(e.value), wd)
    assert snapshot(wd) == before
    assert not (wd / ".git/a3rl/series.json").exists()


def test_conflict_keeps_the_applied_series(wd, extra):
    good = apply(str(wd), series(wd, extra))
    saved = (wd / "patches/verl/0003-verl-feature-new.patch").read_text()
    conflicting(wd)
    before = snapshot(wd)
    with pytest.raises(PatchSeriesError):
        apply(str(wd), series(wd, extra))
    assert snapshot(wd) == before
    write(wd / "patches/verl/0003-verl-feature-new.patch", saved)
    again = apply(str(wd), series(wd, extra))
    assert (again["changed"], again["tree"]) == (False, good["tree"])


def test_hand_edit_is_undone(wd, extra):
    apply(str(wd), series(wd, extra))
    write(wd / "verl/trainer/core.py", "hand edit\n")
    r = apply(str(wd), series(wd, extra))
    assert (r["state"], r["reason"]) == ("reapplied", "tree drifted")
    assert "line five\n" in text(wd, "verl/trainer/core.py")
    (wd / "vllm_ascend/added.py").unlink()
    git(wd, "add", "-A", "vllm_ascend")  # drift in the index too
    assert apply(str(wd), series(wd, extra))["reason"] == "tree drifted"
    assert (wd / "vllm_ascend/added.py").exists()
    assert apply(str(wd), series(wd, extra))["changed"] is False


def test_moved_pristine_is_reapplied(wd, extra, tmp_path):
    apply(str(wd), series(wd, extra))
    commit_pristine(wd, tmp_path / "src", {"README.md": "recipe v2\n"})
    r = apply(str(wd), series(wd, extra))
    assert (r["state"], r["reason"]) == ("reapplied", "pristine changed")
    assert text(wd, "README.md") == "recipe v2\n"
    assert "line five\n" in text(wd, "verl/trainer/core.py")


def stage_commit(wd: Path, src: Path, files: dict[str, str]) -> str:
    """Commit ``files`` in ``src`` and stage it as a new composition, as a3rl_workdir
    does now (refs/a3rl/staged; the tracked files stay as they are)."""
    commit = commit_files(src, files, "staged")
    git(wd, "update-ref", "refs/a3rl/staged", commit)
    return commit


def test_staged_composition_the_series_does_not_fit_leaves_the_previous_tree(
        wd, extra, tmp_path):
    """Issue 19 item 3: a new composition (a new image) goes in only with its series
    applied; one the series does not apply to leaves the previous tree, series and
    pristine commit, and the next good composition replaces both in one switch."""
    good = apply(str(wd), series(wd, extra))
    pristine = git(wd, "rev-parse", "refs/a3rl/pristine")
    # The image's core.py no longer has the context of the recipe's verl patch.
    stage_commit(wd, tmp_path / "src", {"verl/trainer/core.py": "rewritten\n"})
    before = snapshot(wd)
    with pytest.raises(PatchSeriesError, match="0002-verl-bugfix-core"):
        apply(str(wd), series(wd, extra))
    assert snapshot(wd) == before
    assert git(wd, "rev-parse", "refs/a3rl/pristine") == pristine
    with pytest.raises(PatchSeriesError):  # --check fails as the run would
        apply(str(wd), series(wd, extra), check=True)
    # The next composition fits: switched to it, patched, and it is pristine now.
    commit = stage_commit(wd, tmp_path / "src", {"verl/trainer/core.py": PRISTINE[
        "verl/trainer/core.py"], "README.md": "image v2\n"})
    r = apply(str(wd), series(wd, extra))
    assert (r["state"], r["reason"]) == ("reapplied", "pristine changed")
    assert git(wd, "rev-parse", "refs/a3rl/pristine") == git(wd, "rev-parse", "HEAD") == commit
    assert subprocess.run(["git", "rev-parse", "--verify", "--quiet", "refs/a3rl/staged"],
                          cwd=wd, capture_output=True).returncode == 1
    assert text(wd, "README.md") == "image v2\n" and "line five\n" in text(
        wd, "verl/trainer/core.py")
    assert r["tree"] != good["tree"]
    assert apply(str(wd), series(wd, extra))["changed"] is False


def test_the_series_of_a_staged_composition_is_read_from_it(wd, tmp_path):
    """A first staging has no files in the working tree yet: the recipe's patches are
    read from the staged commit (the module's base_folder), the working tree's otherwise."""
    with base_folder(str(wd), "patches") as folder:
        assert folder == str(wd / "patches")
    files = {rel: (wd / rel).read_text() for rel in git(wd, "ls-files").split()}
    added = "patches/vllm/0005-vllm-feature-more.patch"
    files[added] = diff("vllm/more.py", None, "MORE = 1\n")
    stage_commit(wd, tmp_path / "src", files)
    assert not (wd / added).exists()
    with base_folder(str(wd), "patches") as folder:
        staged = discover(folder)
    assert staged.labels[-1] == added
    r = apply(str(wd), staged)
    assert r["state"] == "applied" and text(wd, "vllm/more.py") == "MORE = 1\n"
    with base_folder(str(wd), "patches") as folder:
        assert folder == str(wd / "patches")


def test_whitespace_tolerant_patch_is_idempotent(wd, extra, tmp_path):
    """The recipe's 0002 replaces "line 5"; the tree has "line<TAB>5" (why the recipe uses
    --ignore-whitespace). Undoing it gives "line 5", not the pristine line, so the check
    must not take that for drift: the second run is unchanged."""
    core = PRISTINE["verl/trainer/core.py"]
    commit_pristine(wd, tmp_path / "src", {"verl/trainer/core.py": edited(core, "line 5\n",
                                                                          "line\t5\n")})
    assert apply(str(wd), series(wd, extra))["changed"] is True
    assert "line 4\nline five\n" in text(wd, "verl/trainer/core.py")
    assert apply(str(wd), series(wd, extra))["changed"] is False


# ------------------------------------------------------------------------ check, reset, errors


def test_check_mode_changes_nothing(wd, extra):
    before = snapshot(wd)
    r = apply(str(wd), series(wd, extra), check=True)
    assert (r["changed"], r["state"], r["reason"]) == (True, "would_apply", "first run")
    assert snapshot(wd) == before
    applied = apply(str(wd), series(wd, extra))
    assert applied["tree"] == r["tree"]
    assert apply(str(wd), series(wd, extra), check=True)["state"] == "unchanged"
    conflicting(wd)
    before = snapshot(wd)
    with pytest.raises(PatchSeriesError) as e:
        apply(str(wd), series(wd, extra), check=True)
    assert "(patch 3 of 6)" in str(e.value)
    assert snapshot(wd) == before


def test_reset_restores_pristine_and_keeps_runtime_files(wd, extra):
    apply(str(wd), series(wd, extra))
    assert reset(str(wd), check=True)["state"] == "would_reset"
    r = reset(str(wd))
    assert (r["changed"], r["state"]) == (True, "reset")
    assert git(wd, "write-tree") == git(wd, "rev-parse", "refs/a3rl/pristine^{tree}")
    assert git(wd, "diff", "--stat") == ""
    assert not (wd / "vllm_ascend/added.py").exists()
    assert text(wd, PLAIN) == "BINPACK = False\n"
    assert not (wd / ".git/a3rl/series.json").exists()
    assert all(text(wd, rel) == f"runtime {rel}\n" for rel in RUNTIME)
    assert reset(str(wd))["changed"] is False


def test_corrupt_patch_is_named(wd):
    write(wd / "patches/verl/0002-verl-bugfix-core.patch",
          "--- a/verl/trainer/core.py\n+++ b/verl/trainer/core.py\n@@ -1,3 +1,3 @@\n"
          " line 1\n-line 2\ngarbage\n")
    before = snapshot(wd)
    with pytest.raises(PatchSeriesError) as e:
        apply(str(wd), series(wd))
    msg = str(e.value)
    assert "patches/verl/0002-verl-bugfix-core.patch (patch 2 of 5) is not a valid patch" in msg
    assert "corrupt patch at line 6" in msg and "regenerate" in msg
    assert snapshot(wd) == before


def test_hunks_are_found_in_git_format_patches():
    """Hunk headers are mapped in mail-style patches; a removed "-- x" line inside a hunk
    is not a file header."""
    from a3rl.node.patch_series import _hunks

    data = (b"From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n---\n a | 2 +-\n\n"
            b"diff --git a/verl/a.py b/verl/a.py\nindex 1..2 100644\n--- a/verl/a.py\n"
            b"+++ b/verl/a.py\n@@ -3,2 +3,2 @@ def f():\n--- x\n+++ y\n ctx\n"
            b"@@ -30 +30 @@\n-a\n+b\n"
            b"diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n"
            b"+++ b/new.py\n@@ -0,0 +1 @@\n+x\n-- \n2.39.5\n")
    found = [(h.old, h.new, h.oldpos, h.header, h.line) for h in _hunks(data)]
    assert found == [("verl/a.py", "verl/a.py", 3, "@@ -3,2 +3,2 @@", 11),
                     ("verl/a.py", "verl/a.py", 30, "@@ -30 +30 @@", 15),
                     (None, "new.py", 0, "@@ -0,0 +1 @@", 22)]


def test_not_a_workdir(tmp_path):
    with pytest.raises(PatchSeriesError, match="is not the top of a git repository"):
        apply(str(tmp_path), discover(str(write(tmp_path / "p/x.patch", "").parent)))


# ------------------------------------------------------------------------ Ansible module


def test_ansible_module_twice(wd, extra):
    # make test builds the venv first: a missing ansible is a broken set-up, not a skip.
    assert (REPO / ".venv/bin/ansible").exists(), "no .venv/bin/ansible: run make venv"

    def run(*extra_args: str) -> dict:
        proc = subprocess.run(
            [str(REPO / ".venv/bin/ansible"), "localhost", "-m", "a3rl_patch_series",
             "-M", "plugins/modules", "-a",
             json.dumps({"workdir": str(wd), "recipe_patch_dir": "patches",
                         "extra_patch_dirs": [str(extra)]}), *extra_args],
            cwd=REPO, capture_output=True, text=True,
            env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                     ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                     ANSIBLE_LOCALHOST_WARNING="0"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]

    first = run()
    assert (first["changed"], first["state"]) == (True, "applied")
    second = run()
    assert (second["changed"], second["state"]) == (False, "unchanged")
    assert text(wd, "vllm_ascend/added.py") == "ADDED = 1\n"


def test_a_state_that_names_an_edited_tree_fails_the_reverse_check(wd, extra):
    """The index, the work tree and the recorded tree agree, but that tree is not pristine
    + the series (a hand edit committed to the index and the state): only undoing the
    series and comparing with pristine notices."""
    apply(str(wd), series(wd, extra))
    write(wd / "verl/trainer/core.py", text(wd, "verl/trainer/core.py") + "hand edit\n")
    git(wd, "add", "-A", "verl")
    tree = git(wd, "write-tree")
    state_files = list((wd / ".git").rglob("*.json"))
    assert len(state_files) == 1, state_files
    state = json.loads(state_files[0].read_text())
    state["tree"] = tree
    state_files[0].write_text(json.dumps(state))
    r = apply(str(wd), series(wd, extra))
    assert (r["state"], r["reason"]) == ("reapplied", "reverse check failed")
    assert "hand edit" not in text(wd, "verl/trainer/core.py")
