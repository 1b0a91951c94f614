"""Issue 25 and issue 21 (small items): nothing a mistake in the inventory can delete,
nothing half-written kept as whole, every bad value refused with the variable and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from a3rl import artifacts, manifest
from a3rl import preflight as pf

# ----------------------------------------------------------- 25.1 artifact dest safety


@pytest.mark.parametrize(
    "dest, needle",
    [
        (".", "the store itself"),
        ("./", "the store itself"),
        ("a/..", "relative path inside the store"),
        ("manifest.json", "store's own file manifest.json"),
        (".lock", "store's own file .lock"),
        ("./manifest.json", "store's own file"),
        (5, "not a path string"),
        (["models"], "not a path string"),
    ],
)
def test_a_dest_that_is_the_store_or_its_own_files_is_refused(dest, needle):
    [msg] = artifacts.validate("m", {"kind": "file", "dest": dest})
    assert needle in msg and "artifact m" in msg and "Fix:" in msg


def test_a_dest_containing_another_entrys_dest_is_refused_naming_both():
    m = {
        "models": {"kind": "file", "dest": "models/", "path": "/x", "group": "w"},
        "big": {"kind": "modelscope", "id": "Qwen/Qwen3-32B", "dest": "models/Qwen3-32B",
                "group": "w", "revision": "a" * 40},
        "cfg": {"kind": "modelscope", "id": "Qwen/Qwen3-32B", "revision": "a" * 40,
                "dest": "models/Qwen3-32B-config", "group": "w"},
    }
    problems = manifest.artifact_problems(m, ["models", "big", "cfg"])
    assert len(problems) == 2, problems
    assert all("artifact models: dest 'models/' contains" in p and "Fix:" in p
               for p in problems)
    # the sibling with a common name prefix is not inside it
    assert manifest.artifact_problems(m, ["big", "cfg"]) != []  # still named via models
    del m["models"]
    assert manifest.artifact_problems(m, ["big", "cfg"]) == []
    same = {"a": {"kind": "file", "dest": "raw/x"}, "b": {"kind": "file", "dest": "raw//x/"}}
    assert "is the same path as" in artifacts.dest_overlap_problems(same)[0]


def test_preflight_refuses_overlapping_dests_before_any_fetch(tmp_path):
    m = {"all": {"kind": "file", "dest": "raw"}, "g": {"kind": "file", "dest": "raw/gsm8k"}}
    [msg] = pf.artifact_input_problems(m, str(tmp_path / "store"), probe=lambda _u: None)
    assert msg.startswith("controller: artifact all: dest 'raw' contains")


def test_a_folder_artifact_prunes_only_what_it_recorded_earlier(tmp_path):
    src = tmp_path / "gsm8k"
    (src / "main").mkdir(parents=True)
    (src / "main/a.parquet").write_text("a")
    store = tmp_path / "store"
    spec = {"kind": "file", "dest": "raw/gsm8k", "path": str(src)}
    artifacts.ensure(str(store), "g", spec)
    # a file put there by hand (or by another tool) is not this entry's to delete
    (store / "raw/gsm8k/vendor-notes.txt").write_text("kept")
    (src / "main/a.parquet").unlink()
    (src / "main/b.parquet").write_text("b")
    got = artifacts.ensure(str(store), "g", spec, refresh=True)["entry"]["files"]
    assert [f["path"] for f in got] == ["raw/gsm8k/main/b.parquet"]
    assert not (store / "raw/gsm8k/main/a.parquet").exists()
    assert (store / "raw/gsm8k/vendor-notes.txt").read_text() == "kept"


def test_a_folder_artifact_at_the_store_root_cannot_reach_the_manifest(tmp_path):
    store = tmp_path / "store"
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("f")
    artifacts.ensure(str(store), "a", {"kind": "file", "dest": "keep", "path": str(src)})
    with pytest.raises(artifacts.ArtifactError, match="the store itself"):
        artifacts.ensure(str(store), "b", {"kind": "file", "dest": ".", "path": str(src)})
    assert (store / "manifest.json").exists() and (store / "keep/f").exists()


# ------------------------------------------------------- 25.2 bundle tar cut short


REPO = Path(__file__).resolve().parents[2]


def _bundle_play(bundle: Path) -> str:
    import subprocess
    import sys

    proc = subprocess.run(
        # no inventory file: the implicit localhost, as on a connected machine's checkout
        [str(Path(sys.executable).with_name("ansible-playbook")),
         "-i", str(bundle.parent / "no-inventory"), str(REPO / "playbooks/bundle.yml"),
         "-e", '{"bundle_groups": ["none"]}',
         "-e", "bundle_tarball=true", "-e", f"a3rl_bundle_dir={bundle}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc.stdout


def test_a_bundle_tar_cut_short_is_packed_again(tmp_path):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"version": 1, "artifacts": {}}')
    (bundle / "x").write_text("x" * 20000)
    _bundle_play(bundle)
    tar = tmp_path / "b.tar"
    whole = tar.stat().st_size
    assert "changed=0" in _bundle_play(bundle)
    with open(tar, "r+b") as f:
        f.truncate(whole // 2)
    assert "changed=1" in _bundle_play(bundle)
    assert tar.stat().st_size == whole and not (tmp_path / "b.tar.part").exists()


# ------------------------------------------------- 21.6 cache clean, symlinked parent


def test_cache_clean_refuses_a_path_under_a_symlinked_parent(tmp_path):
    from a3rl import cache_clean

    root = tmp_path / "root"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "kernel_meta").mkdir(parents=True)
    (elsewhere / "kernel_meta/precious").write_text("not a cache of this job")
    (root / "data").mkdir(parents=True)
    (root / "data/job").symlink_to(elsewhere)
    with pytest.raises(cache_clean.CacheError, match="a folder above it is a symlink"):
        cache_clean.clean(["/data/job/kernel_meta"], "/data/job", root=str(root))
    assert (elsewhere / "kernel_meta/precious").exists()
    (root / "data/real/kernel_meta").mkdir(parents=True)
    got = cache_clean.clean(["/data/real/kernel_meta"], "/data/real", root=str(root))
    assert got["changed"] and not (root / "data/real/kernel_meta").exists()


# ---------------------------------------------------------- 21.7 rsync --protect-args


@pytest.mark.parametrize("tasks", ["pull.yml", "send.yml"])
def test_every_rsync_of_the_store_protects_its_arguments(tasks):
    import yaml

    text = (REPO / "roles/artifact_store/tasks" / tasks).read_text()
    rsyncs = [t for t in yaml.safe_load(text)
              if "rsync" in str(t.get("ansible.builtin.command", {}).get("argv", ""))[:20]]
    assert rsyncs, f"no rsync task found in {tasks}"
    for task in rsyncs:
        assert "--protect-args" in str(task["ansible.builtin.command"]["argv"]), task["name"]
