"""The simulator's stand-in upstream repositories (``a3rl.sim.upstreams``).

They replace GitHub and gitcode for the roles that fetch framework sources and the
recipe, so these tests check what those roles will rely on: the pins resolve to the
recorded shas, clones work by path and over http (submodule included), the recipe's own
scripts build its working directory and apply its series (or stop at the conflicting
patch), and every build gives the same shas.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from a3rl.sim import upstreams

ROOT = Path(__file__).resolve().parents[2]

FRAMEWORK_FOLDERS = {"verl": "verl", "megatron": "Megatron-LM", "mindspeed": "MindSpeed",
                     "vllm": "vllm", "vllm_ascend": "vllm-ascend"}
CLEAN = [
    "patches/0001-feature-model-converter.patch",
    "patches/megatron/0001-megatron-bugfix-state_ten-verification.patch",
    "patches/megatron/0002-megatron-feature-enable_hdp.patch",
    "patches/mindspeed/0001-mindspeed-bugfix-builder.patch",
    "patches/verl/0001-verl-feature-recompute_old_log_prob.patch",
    "patches/verl/0002-verl-feature-onload_offload.patch",
    "patches/verl/0015-verl-feature-hdp_binpack_optimization.patch",
    "patches/vllm/0001-vllm-feature-disable_gc.patch",
    "patches/vllm_ascend/0001-vllm_ascend-feature-bs_threshold_for_spec_decode.patch",
]
EXTRA = "patches/verl/0003-verl-feature-use_rollout_log_probs.patch"
CONFLICT = "patches/vllm_ascend/0002-vllm_ascend-bugfix-disabled_fia.patch"


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**clean, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-c", "advice.detachedHead=false", *args], cwd=cwd,
                          env=env(), capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def up() -> upstreams.Upstreams:
    return upstreams.build(log=lambda _msg: None)


def test_the_build_digest_follows_the_stand_ins_files(tmp_path, monkeypatch) -> None:
    """The stand-ins' files (files/upstream-standins) are part of the content address, so
    an edited file rebuilds the repositories; dot files are not (a wheel leaves them out)."""
    files = tmp_path / "files"
    shutil.copytree(upstreams.FILES, files)
    monkeypatch.setattr(upstreams, "FILES", files)
    before = upstreams.digest()
    (files / "megatron/.cache").write_text("not a payload\n")
    assert upstreams.digest() == before
    script = files / "recipe" / upstreams.RECIPE_SUBDIR / "build_project.sh"
    script.write_text(script.read_text() + "# edited\n")
    assert upstreams.digest() != before


@pytest.fixture(scope="module")
def workspace(up, tmp_path_factory) -> Path:
    """The recipe's /workspace: checkouts of the pinned refs, verl with its cherry-pick."""
    ws = tmp_path_factory.mktemp("workspace")
    manifest = upstreams.manifest_overrides(up)
    for name, folder in FRAMEWORK_FOLDERS.items():
        git(ws, "clone", "-q", manifest[name]["url"], folder)
        git(ws / folder, "checkout", "-q", manifest[name]["ref"])
    for pick in manifest["verl"]["cherry_picks"]:
        git(ws / "verl", "fetch", "-q", "origin", pick["fetch"])
        git(ws / "verl", "cherry-pick", "-n", "-X", "theirs", pick["commit"])
    return ws


def run_recipe(up, workspace: Path, commit: str, dest: Path
               ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The recipe's procedure: checkout, build_project.sh, apply_all_patches.sh."""
    git(dest.parent, "clone", "-q", up.url("recipe"), dest.name)
    git(dest, "checkout", "-q", commit)
    wd = dest / up.recipe_subdir
    subprocess.run(["bash", "build_project.sh"], cwd=wd, check=True, capture_output=True,
                   env={**env(), "FRAMEWORKS_DIR": str(workspace)})
    proc = subprocess.run(["bash", "apply_all_patches.sh"], cwd=wd, env=env(),
                          capture_output=True, text=True)
    return proc, wd


def applied(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split("[SUCCESS]: ")[1] for line in proc.stdout.splitlines()
            if "[SUCCESS]: " in line]


@pytest.fixture(scope="module")
def clean_layout(up, workspace, tmp_path_factory) -> Path:
    proc, wd = run_recipe(up, workspace, up.recipe_commits["clean"],
                          tmp_path_factory.mktemp("clean") / "recipe")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert applied(proc) == CLEAN
    return wd


def test_refs_resolve_as_recorded(up):
    for name, ref in up.refs.items():
        assert git(up.root / f"{name}.git", "rev-parse", f"{ref}^{{commit}}") \
            == up.commits[name], name
    verl = up.root / "verl.git"
    assert git(verl, "cat-file", "-t", "v0.6.0") == "tag"
    for ref in ("refs/heads/pr-3427", "refs/pull/3427/head"):
        assert git(verl, "rev-parse", ref) == up.verl_pick
    assert git(verl, "rev-parse", f"{up.verl_pick}^") == up.commits["verl"]
    assert git(verl, "diff", "--numstat", f"{up.verl_pick}^", up.verl_pick) \
        == "1\t1\tverl/models/mcore/config_converter.py"
    # MindSpeed is pinned by sha and its branch moved on, as upstream's did.
    mindspeed = up.root / "mindspeed.git"
    assert git(mindspeed, "rev-parse", "master^") == up.refs["mindspeed"]
    gitlink = git(up.root / "vllm_ascend.git", "ls-tree", "v0.14.0rc1",
                  "csrc/third_party/catlass")
    assert gitlink.split()[:3] == ["160000", "commit", up.commits["vllm_ascend_sub"]]
    recipe = up.root / "recipe.git"
    commits = up.recipe_commits
    assert up.refs["recipe"] == commits["clean"]
    assert git(recipe, "rev-parse", "main") == commits["extra"]
    assert git(recipe, "rev-parse", "conflict") == commits["conflict"]
    assert git(recipe, "rev-parse", "main^", "conflict^").split() == [commits["clean"]] * 2


def test_every_repository_says_it_is_a_stand_in(up):
    for bare in sorted(up.root.glob("*.git")):
        assert upstreams.NOTE in (bare / "description").read_text()
        readme = git(bare, "show", "HEAD:README.md")
        message = git(bare, "log", "-1", "--format=%B", "HEAD")
        assert upstreams.NOTE in readme or upstreams.NOTE in message, bare.name
    for path in ("recipe/dapo/config/dapo_megatron_trainer.yaml", "recipe/dapo/main_dapo.py",
                 "recipe/dapo/dapo_ray_trainer.py", "recipe/r1_ascend/__init__.py"):
        head = git(up.root / "verl.git", "show", f"v0.6.0:{path}").splitlines()[0]
        assert head.startswith("# STAND-IN made by a3rl's simulator"), path


def test_verl_tree_is_the_real_sdist(up):
    listed = set(git(up.root / "verl.git", "ls-tree", "-r", "--name-only", "v0.6.0").split())
    with tarfile.open(upstreams.verl_sdist(log=lambda _msg: None)) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile()}
        kept = {n for n in members
                if n not in ("PKG-INFO", "setup.cfg") and ".egg-info/" not in n}
        assert kept == {n for n in listed if not n.startswith("recipe/")}
        name = "verl/trainer/config/actor/actor.yaml"
        real = tar.extractfile(members[name])
        assert real is not None
        assert git(up.root / "verl.git", "show", f"v0.6.0:{name}") \
            == real.read().decode().strip()


def test_a_second_build_is_reused_at_once(up):
    start = time.monotonic()
    again = upstreams.build(log=lambda _msg: None)
    assert time.monotonic() - start < 1.0
    assert again == up


def test_clone_by_path_gets_the_submodule_at_the_gitlink(up, tmp_path):
    git(tmp_path, "clone", "-q", up.url("vllm_ascend"), "va")
    git(tmp_path / "va", "checkout", "-q", "v0.14.0rc1")
    git(tmp_path / "va", "-c", "protocol.file.allow=always", "submodule", "update", "--init")
    sub = tmp_path / "va/csrc/third_party/catlass"
    assert git(sub, "rev-parse", "HEAD") == up.commits["vllm_ascend_sub"]
    assert (sub / "include/catlass/catlass.hpp").is_file()


def test_clone_over_http_gets_the_submodule_and_the_pick(up, tmp_path):
    with upstreams.serve(up.root) as served:
        assert served.snapshot() == []  # nothing fetched until a client asks
        git(tmp_path, "clone", "-q", f"{served.base_url}/vllm_ascend.git", "va")
        git(tmp_path / "va", "checkout", "-q", "v0.14.0rc1")
        git(tmp_path / "va", "submodule", "update", "--init")
        sub = tmp_path / "va/csrc/third_party/catlass"
        assert git(sub, "rev-parse", "HEAD") == up.commits["vllm_ascend_sub"]
        assert git(sub, "remote", "get-url", "origin") \
            == f"{served.base_url}/vllm_ascend_sub.git"
        # verl the recipe's way: the tag, then the pull request's ref, cherry-picked.
        git(tmp_path, "clone", "-q", f"{served.base_url}/verl.git", "verl")
        git(tmp_path / "verl", "checkout", "-q", "v0.6.0")
        git(tmp_path / "verl", "fetch", "-q", "origin", "pull/3427/head")
        git(tmp_path / "verl", "cherry-pick", "-n", "-X", "theirs", up.verl_pick[:7])
        assert '"masked_softmax_fusion": False' in \
            (tmp_path / "verl/verl/models/mcore/config_converter.py").read_text()
        requests = served.snapshot()
    for repo in ("vllm_ascend", "vllm_ascend_sub", "verl"):
        assert any(r.startswith(f"/{repo}.git/info/refs") for r in requests), repo
        assert any(r.startswith(f"/{repo}.git/objects/") for r in requests), repo


def test_the_clean_series_applies_with_the_recipes_scripts(up, clean_layout):
    wd = clean_layout
    assert "recompute_old_log_prob: True" in (wd / upstreams.ACTOR_YAML).read_text()
    assert "moe_grouped_gemm" in (wd / "converter_hf_to_mcore.py").read_text()
    assert "gc.set_threshold(0)" in (wd / "vllm/entrypoints/llm.py").read_text()
    # The plain files stay beside the patches (none copied into the trees); verl/0015
    # edited one, and megatron/0002's import of it as patches... resolves from here.
    assert not (wd / "vllm_ascend/spec_decode/sam_proposer.py").exists()
    assert not (wd / "verl/utils/hybrid_data_parallel").exists()
    assert "BINPACK = True\n" in (wd / upstreams.HDP).read_text()
    assert "from patches.verl.utils.hybrid_data_parallel.hdp import" in \
        (wd / "megatron/core/parallel_state.py").read_text()
    subprocess.run([sys.executable, "-c", "import megatron.core.parallel_state"], cwd=wd,
                   check=True)
    assert (wd / "verl/trainer/main_dapo.py").is_file()
    assert (wd / "verl/trainer/config/dapo_megatron_trainer.yaml").is_file()
    assert (wd / "megatron/core/parallel_state.py").is_file()
    assert (wd / "r1_ascend/__init__.py").is_file()
    # The cherry-pick reached the layout; the patches' paths are the recipe repo's.
    assert '"masked_softmax_fusion": False' in \
        (wd / "verl/models/mcore/config_converter.py").read_text()
    for rel in CLEAN:
        assert "diff --git a/llm_rl/qwen3/" in (wd / rel).read_text()
    # verl/0002 was made after verl/0001: its context carries 0001's key.
    assert "\n recompute_old_log_prob: True\n" in (wd / CLEAN[5]).read_text()


def test_the_projects_extra_patches_apply_after_the_clean_series(clean_layout, tmp_path):
    patches = upstreams.extra_patches(tmp_path / "extra")
    assert [p.name for p in patches] == ["0001-verl-bugfix-visible_devices_keyword.patch"]
    for patch in patches:
        assert "diff --git a/verl/" in patch.read_text()
        git(clean_layout, "apply", "--ignore-whitespace", f"--directory={upstreams.RECIPE_SUBDIR}",
            str(patch))
    assert '"ASCEND_RT_VISIBLE_DEVICES" if is_npu_available' in \
        (clean_layout / "verl/utils/device.py").read_text()


def test_the_extra_series_applies_and_so_do_the_projects_patches(up, workspace, tmp_path):
    proc, wd = run_recipe(up, workspace, up.recipe_commits["extra"], tmp_path / "recipe")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert applied(proc) == CLEAN[:6] + [EXTRA] + CLEAN[6:]
    assert "use_rollout_log_probs: False" in (wd / upstreams.ACTOR_YAML).read_text()
    for patch in upstreams.extra_patches(tmp_path / "extra"):
        git(wd, "apply", "--ignore-whitespace", f"--directory={upstreams.RECIPE_SUBDIR}",
            str(patch))


def test_the_conflict_series_stops_at_the_conflicting_patch(up, workspace, tmp_path):
    proc, wd = run_recipe(up, workspace, up.recipe_commits["conflict"], tmp_path / "recipe")
    assert proc.returncode != 0
    assert applied(proc) == CLEAN
    assert f"[FAIL]: {CONFLICT}" in proc.stderr
    assert "patch does not apply" in proc.stderr


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


def test_the_engine_gives_the_recipes_tree_in_one_run(up, workspace, tmp_path):
    """The engine on the layout build_project.sh gives, gives file for file what the
    recipe's apply_all_patches.sh gives; a second run changes nothing (the patch that
    edits a plain file beside the patches included)."""
    from a3rl.node import patch_series

    git(tmp_path, "clone", "-q", up.url("recipe"), "recipe")
    git(tmp_path / "recipe", "checkout", "-q", up.recipe_commits["clean"])
    wd = tmp_path / "recipe" / up.recipe_subdir
    subprocess.run(["bash", "build_project.sh"], cwd=wd, check=True, capture_output=True,
                   env={**env(), "FRAMEWORKS_DIR": str(workspace)})
    git(wd, "init", "-q")
    git(wd, "add", "-A")
    git(wd, "commit", "-q", "-m", "pristine")
    git(wd, "update-ref", patch_series.PRISTINE_REF, "HEAD")

    def run() -> dict:
        return patch_series.apply(str(wd), patch_series.discover(str(wd / "patches"),
                                                                 recipe_strip=3))

    first = run()
    assert first["state"] == "applied" and first["applied"] == CLEAN
    proc, script = run_recipe(up, workspace, up.recipe_commits["clean"], tmp_path / "script")
    assert proc.returncode == 0, proc.stderr
    assert _files(wd) == _files(script)
    second = run()
    assert (second["changed"], second["state"]) == (False, "unchanged"), second["reason"]


def test_hydra_composes_the_override_only_after_the_patch(workspace, clean_layout,
                                                        monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    override = "actor_rollout_ref.actor.recompute_old_log_prob=False"
    stock = workspace / "verl/verl/trainer/config"
    with initialize_config_dir(config_dir=str(stock), version_base=None):
        with pytest.raises(ConfigCompositionException, match="Could not override"):
            compose("ppo_megatron_trainer", overrides=[override])
    patched = clean_layout / "verl/trainer/config"
    monkeypatch.chdir(clean_layout)  # the DAPO config's search path is relative to it
    with initialize_config_dir(config_dir=str(patched), version_base=None):
        cfg = compose("ppo_megatron_trainer", overrides=[override])
        assert cfg.actor_rollout_ref.actor.recompute_old_log_prob is False
        dapo = compose("dapo_megatron_trainer", overrides=[override, "data.train_batch_size=32"])
        assert dapo.data.gen_batch_size == 32
        assert dapo.reward_model.reward_manager == "dapo"


def test_builds_are_deterministic(up, tmp_path):
    sdist = upstreams.verl_sdist(log=lambda _msg: None)
    record = upstreams._build_into(tmp_path / "again", sdist, log=lambda _msg: None)
    assert record == {"refs": up.refs, "commits": up.commits, "verl_pick": up.verl_pick,
                      "recipe_commits": up.recipe_commits}
    ours = tmp_path / "again/project-patches"
    for patch in upstreams.extra_patches(tmp_path / "cached"):
        assert (ours / patch.name).read_bytes() == patch.read_bytes()


def test_manifest_overrides_point_at_the_repositories(up):
    by_path = upstreams.manifest_overrides(up)
    assert by_path["verl"] == {
        "url": up.url("verl"), "ref": "v0.6.0",
        "cherry_picks": [{"commit": up.verl_pick, "fetch": "refs/heads/pr-3427"}]}
    assert by_path["mindspeed"] == {"url": up.url("mindspeed"), "ref": up.commits["mindspeed"]}
    assert by_path["vllm_ascend"]["submodules"] is True
    assert by_path["recipe"] == {"url": up.url("recipe"), "ref": up.recipe_commits["clean"],
                                 "subdir": "llm_rl/qwen3"}
    served = upstreams.manifest_overrides(up, base_url="http://127.0.0.1:8080/")
    assert {v["url"] for v in served.values()} == {
        f"http://127.0.0.1:8080/{n}.git"
        for n in ("verl", "megatron", "mindspeed", "vllm", "vllm_ascend", "recipe")}


# The real upstreams' ref names at the project's pins, as measured on the public
# repositories (shared/reference/real-upstreams.md, "Pins"). A stand-in must carry these
# names, not ones of our own: an invented tag (vllm-ascend "v0.14.0", which upstream never
# published) let the manifest pin it and every simulated fetch succeed.
REAL_REFS = {"verl": "v0.6.0", "megatron": "core_v0.12.1", "vllm": "v0.14.1",
             "vllm_ascend": "v0.14.0rc1"}


def test_stand_in_refs_are_the_real_ref_names(up):
    assert {name: up.refs[name] for name in REAL_REFS} == REAL_REFS


def test_manifest_pins_the_refs_the_stand_ins_carry(up):
    manifest = yaml.safe_load((ROOT / "group_vars/all/artifacts.yml").read_text())
    pins = manifest["a3rl_artifacts"]
    assert {name: pins[name]["ref"] for name in REAL_REFS} == REAL_REFS


# The recipe's reward rule (real-upstreams.md, "Run scripts at the pin"): 1.0 when the
# ground truth is a substring of the solution or equals the last \boxed{} content (the
# string "None" without a box); else 0.0.
@pytest.mark.parametrize("solution, truth, score", [
    (r"so \boxed{\frac{1}{2}}", r"\frac{1}{2}", 1.0),
    (r"so \boxed{3}", "4", 0.0),
    ("the answer is 12", "2", 1.0),                       # substring: pays
    (r"\boxed{1} then \boxed{a{b}}", "a{b}", 1.0),        # last box, braces matched
    (r"\boxed{5} then \boxed{6}", "5", 1.0),              # "5" is a substring
    (r"\boxed{x} and \boxed{7}", "y", 0.0),
    ("no box at all", "None", 1.0),                        # the "None" quirk, as mathruler
    ("no box", "8", 0.0),
])
def test_the_recipe_reward_is_in_the_working_directory_with_its_rule(clean_layout, solution,
                                                                     truth, score):
    """The path the GRPO plans pass (custom_reward_function.path=<workdir>/deepscaler.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("recipe_reward",
                                                  clean_layout / "deepscaler.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "STAND-IN" in (clean_layout / "deepscaler.py").read_text()
    assert mod.compute_score("deepscaler", solution, truth) == score


def test_the_resampler_release_has_the_module_the_pin_lacks(up, workspace, clean_layout,
                                                            tmp_path):
    """runs.yml's needs_code path for the resampler: absent at the pin (the stand-in's
    clean commit), present in the later release (the stand-in's resampler commit)."""
    runs = yaml.safe_load((ROOT / "group_vars/all/runs.yml").read_text())
    [need] = runs["a3rl_features"]["resampler"]["needs_code"]
    assert need["path"] == upstreams.SAMPLER and "ba7be607" in need["release"]
    assert not (clean_layout / need["path"]).exists()
    proc, wd = run_recipe(up, workspace, up.recipe_commits["resampler"], tmp_path / "recipe")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert applied(proc) == CLEAN[:7] + [
        "patches/verl/0019-verl-feature-length_aware_resampler.patch"] + CLEAN[7:]
    assert "class LengthAwareEpochSampler" in (wd / need["path"]).read_text()


def test_the_stand_in_requirements_have_both_kinds_of_line(up):
    """Like the recipe's requirements.txt (real-upstreams.md): a pin published as a source
    archive only, and an unpinned line whose newest release is outside the image's range."""
    from packaging.specifiers import SpecifierSet

    lines = upstreams.REQUIREMENTS.splitlines()
    sdist, version = upstreams.SDIST_ONLY
    assert f"{sdist}=={version}" in lines and f"{upstreams.RANGED}[default]" in lines
    files = sorted(p.name for p in up.index.iterdir())
    stem = sdist.replace("-", "_")
    assert [f for f in files if f.startswith(stem)] == [f"{stem}-{version}.tar.gz"]
    versions = [f.split("-")[1] for f in files if f.startswith(upstreams.RANGED.replace("-", "_"))]
    image_range = SpecifierSet(upstreams.RANGED_CONSTRAINT.split(upstreams.RANGED)[1])
    assert max(versions, key=lambda v: tuple(map(int, v.split(".")))) not in image_range
    assert [v for v in versions if v in image_range] == ["2.48.0"]
    manifest = yaml.safe_load((ROOT / "group_vars/all/artifacts.yml").read_text())
    wheels = manifest["a3rl_artifacts"]["recipe_wheels"]
    assert wheels["build_from_sdist"] == ["pylatexenc", "zmq"]
    assert wheels["constraints"] == ["ray>=2.47.1,<=2.48.0"]
    assert upstreams.wheelhouse_overrides(up, wheels["constraints"])["constraints"] == [
        "ray>=2.47.1,<=2.48.0", upstreams.RANGED_CONSTRAINT]
