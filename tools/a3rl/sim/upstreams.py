"""Stand-in upstream git repositories for the frameworks and the recipe.

The simulator has no route to GitHub or gitcode, yet the roles that fetch the framework
sources and the recipe must run against real git repositories: tags, a commit pin, a
cherry-pick fetched from a pull-request ref, a submodule, a patch series that applies or
fails. These repositories are STAND-INS made by a3rl's simulator, laid out like the
upstreams but not their code (each says so in a README, a file header or its commit
message), except verl, whose tree is the real verl 0.6.0 source distribution from PyPI:

* ``verl.git`` (volcengine/verl): tag ``v0.6.0`` = the sdist's tree plus small stand-ins for
  ``recipe/dapo`` and ``recipe/r1_ascend`` (the sdist has no ``recipe/``); branch ``pr-3427``
  (also ``refs/pull/3427/head``, as GitHub publishes it) = one commit on top, the stand-in
  for upstream commit 448c6c3 that the recipe cherry-picks with ``-n -X theirs``.
* ``megatron.git`` (NVIDIA/Megatron-LM) tag ``core_v0.12.1``; ``mindspeed.git``
  (Ascend/MindSpeed, branch ``master``) pinned by commit sha, with a later commit on top;
  ``vllm.git`` tag ``v0.14.1``; ``vllm_ascend.git`` tag ``v0.14.0rc1`` with a git submodule at
  ``csrc/third_party/catlass`` whose URL is relative (``../vllm_ascend_sub.git``), so it
  resolves whether the repositories are reached by path or over http.
* ``recipe.git`` (hicann/cann-recipes-train): ``llm_rl/qwen3`` with ``requirements.txt``,
  ``build_project.sh``, ``apply_all_patches.sh`` and a patch series, in four commits:
  ``clean``, ``extra`` (= ``main``: one more verl patch), ``conflict`` (branch
  ``conflict`` off ``clean``: a vllm_ascend patch whose context no longer matches) and
  ``resampler`` (branch off ``clean``: the later release with verl's length-aware
  resampler module, which the pin lacks).

The patches are made by ``git format-patch`` from a scratch repository holding the recipe's
working directory (the "build_project" layout) at ``llm_rl/qwen3``, so, like the real
recipe's, their paths are relative to the top of the recipe repository
(``a/llm_rl/qwen3/verl/trainer/config/actor/actor.yaml``): ``git apply`` run in
``llm_rl/qwen3`` of a recipe checkout resolves them there. Run in a folder outside any git
repository they do not apply; run inside another repository's subfolder, ``git apply``
skips them and still exits 0.

The stand-ins' files are in ``files/upstream-standins/``, one folder per repository laid
out as in it (``recipe/llm_rl/qwen3/build_project.sh``), with the stand-in source
archive's files (``sdist/``) and what the recipe's resampler patch adds; this module
commits them, makes the patches and tags.

Every commit has fixed author, committer and dates, so the shas are the same on every
machine and every build. Built once per content (this file, its files, the sdist's
sha256) under ``.cache/sim-upstreams/<digest>``; ``serve()`` publishes the folder over
git's "dumb" http protocol for tests that need a URL.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from a3rl.files import sha256_file
from a3rl.paths import cache_dir
from a3rl.sim import recipe_scripts

Log = Callable[[str], None]

VERL_VERSION = "0.6.0"
VERL_SDIST_SHA256 = "806ec5212f42c6a39143754ce86d2df28ab1373762d35846ca7b022bcb7b1402"
RECIPE_SUBDIR = "llm_rl/qwen3"
PICK_BRANCH = "pr-3427"
NOTE = "stand-in made by a3rl's simulator"
# The stand-ins' files, laid out as in their repositories: one folder per repository
# (the bare repository's name), plus the templates the code below fills in.
FILES = Path(__file__).resolve().parent / "files" / "upstream-standins"

# Fixed identity and dates: the shas depend on nothing else but the content.
_IDENT = {
    "GIT_AUTHOR_NAME": "a3rl simulator",
    "GIT_AUTHOR_EMAIL": "a3rl-sim@example.invalid",
    "GIT_AUTHOR_DATE": "2025-11-20T12:00:00+0000",
    "GIT_COMMITTER_NAME": "a3rl simulator",
    "GIT_COMMITTER_EMAIL": "a3rl-sim@example.invalid",
    "GIT_COMMITTER_DATE": "2025-11-20T12:00:00+0000",
}


@dataclass(frozen=True)
class Upstreams:
    """Where the stand-in repositories are and what their pins resolve to."""

    root: Path                      # folder with the bare repositories <name>.git
    refs: dict[str, str]            # name -> the ref an inventory pins (tag, sha)
    commits: dict[str, str]         # name -> full commit sha that ref resolves to
    verl_pick: str                  # full sha of the pr-3427 commit
    recipe_commits: dict[str, str]  # "clean", "extra", "conflict", "resampler" -> sha
    recipe_subdir: str = RECIPE_SUBDIR

    @property
    def index(self) -> Path:
        """Folder of the stand-in packages (a wheelhouse's ``find_links``)."""
        return self.root.parent / "pypi"

    def url(self, name: str) -> str:
        """Path of the bare repository ``name`` (usable as a git URL)."""
        return str(self.root / f"{name}.git")


# --------------------------------------------------------------------------- git


def _env() -> dict[str, str]:
    # The user's git config (hooks, signing, autocrlf, default branch) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_IDENT, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               LC_ALL="C", TZ="UTC", COLUMNS="80")
    return env


def _git(cwd: Path, *args: str) -> str:
    """Run git with the fixed identity; return stdout as is (patches keep their newline)."""
    proc = subprocess.run(
        ["git", "-c", "core.abbrev=7", "-c", "protocol.file.allow=always",
         "-c", "advice.detachedHead=false", *args],
        cwd=cwd, env=_env(), capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd} failed: {proc.stderr.strip()}")
    return proc.stdout


def _rev(repo: Path, ref: str) -> str:
    return _git(repo, "rev-parse", f"{ref}^{{commit}}").strip()


def _write(root: Path, files: dict[str, str], executable: tuple[str, ...] = ()) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if rel in executable else 0o644)


def _init(work: Path, branch: str = "main") -> Path:
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", branch)
    return work


def _commit(work: Path, message: str) -> str:
    _git(work, "add", "-A", "--force")
    _git(work, "commit", "-q", "-m", message)
    return _rev(work, "HEAD")


def _publish(work: Path, bare: Path, description: str, head: str = "main") -> None:
    """Copy every ref of ``work`` into a new bare repository, ready for dumb http."""
    _git(bare.parent, "init", "-q", "--bare", "-b", head, bare.name)
    (bare / "description").write_text(f"{description} ({NOTE})\n")
    _git(work, "push", "-q", str(bare), "refs/*:refs/*")
    _git(bare, "repack", "-a", "-d", "-q")
    _git(bare, "update-server-info")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise RuntimeError(f"stand-in patch: expected one {old!r} in {path}")
    path.write_text(text.replace(old, new))


def _d(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _header(upstream: str, what: str) -> str:
    return f"# STAND-IN made by a3rl's simulator for {upstream}: {what}\n"


def _payload(rel: str) -> str:
    """One file of ``FILES``, by its path there."""
    return (FILES / rel).read_text(encoding="utf-8")


def _files(root: Path) -> list[Path]:
    """The files under ``root``, sorted; not dot files (package-data's globs leave them
    out of a wheel) nor ``__pycache__``."""
    return [p for p in sorted(root.rglob("*")) if p.is_file() and not any(
        part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts)]


def _tree(folder: str) -> dict[str, str]:
    """Every file under ``FILES/folder``, by its path relative to that folder."""
    root = FILES / folder
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in _files(root)}


# --------------------------------------------------------------------------- verl


def verl_sdist(log: Log = print) -> Path:
    """The real verl 0.6.0 source distribution from PyPI, checked against its sha256."""
    out = cache_dir() / "sim-upstreams" / "sdist"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"verl-{VERL_VERSION}.tar.gz"
    with open(out / "download.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file() and sha256_file(path) == VERL_SDIST_SHA256:
            return path
        log(f"downloading the verl {VERL_VERSION} source distribution from PyPI")
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", f"verl=={VERL_VERSION}",
                 "--no-deps", "--no-binary", ":all:", "-d", tmp],
                capture_output=True, text=True,
            )
            got = Path(tmp) / path.name
            if proc.returncode != 0 or not got.is_file():
                raise RuntimeError(f"pip download verl=={VERL_VERSION} failed: {proc.stderr}")
            digest = sha256_file(got)
            if digest != VERL_SDIST_SHA256:
                raise RuntimeError(f"{got.name}: sha256 {digest}, expected {VERL_SDIST_SHA256}")
            got.replace(path)
    return path


def _extract_sdist(sdist: Path, dest: Path) -> None:
    """The sdist's tree without what packaging adds (PKG-INFO, egg-info, setup.cfg)."""
    prefix = f"verl-{VERL_VERSION}/"
    noise = {"PKG-INFO", "setup.cfg"}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            if not member.name.startswith(prefix):
                raise RuntimeError(f"{sdist.name}: unexpected member {member.name}")
            rel = member.name[len(prefix):]
            parts = Path(rel).parts
            if rel in noise or parts[0].endswith(".egg-info") or ".." in parts:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
            target.chmod(0o755 if member.mode & 0o100 else 0o644)


# The files verl's sdist lacks (files/upstream-standins/verl). The YAML stays here: yamllint
# lints every YAML file in the tree, and this one keeps the upstream file's style.
_VERL_RECIPE_FILES = {
    **_tree("verl"),
    "recipe/dapo/config/dapo_megatron_trainer.yaml": _d("""
        # STAND-IN made by a3rl's simulator for verl v0.6.0's
        # recipe/dapo/config/dapo_megatron_trainer.yaml (the PyPI sdist has no recipe/):
        # the same Hydra wiring and a few of its DAPO keys, not the whole file.
        hydra:
          searchpath:
            - file://verl/trainer/config

        defaults:
          - ppo_megatron_trainer
          - _self_

        data:
          gen_batch_size: ${data.train_batch_size}

        reward_model:
          reward_manager: dapo
          overlong_buffer:
            enable: False
            len: 0
            penalty_factor: 0.0
            log: False

        algorithm:
          filter_groups:
            _target_: verl.trainer.config.FilterGroupsConfig
            enable: False
            metric: null
            max_num_gen_batches: 0

        trainer:
          project_name: verl-dapo
        """),
}


def _build_verl(work: Path, bare: Path, sdist: Path) -> tuple[str, str]:
    """Return (v0.6.0 commit, pr-3427 commit)."""
    _init(work)
    _extract_sdist(sdist, work)
    _write(work, _VERL_RECIPE_FILES)
    tagged = _commit(work, _d(f"""
        verl {VERL_VERSION}, from the PyPI source distribution

        A {NOTE}, for volcengine/verl at tag v{VERL_VERSION}: the tree of
        verl-{VERL_VERSION}.tar.gz (sha256 {VERL_SDIST_SHA256}) without
        PKG-INFO, setup.cfg and egg-info, plus small stand-ins for recipe/dapo and
        recipe/r1_ascend, which the source distribution does not carry.
        """))
    _git(work, "tag", "-a", "-m", f"v{VERL_VERSION} ({NOTE})", f"v{VERL_VERSION}")
    _git(work, "checkout", "-q", "-b", PICK_BRANCH)
    _edit(work / "verl/models/mcore/config_converter.py",
          '"masked_softmax_fusion": True,', '"masked_softmax_fusion": False,')
    pick = _commit(work, _d(f"""
        [megatron] fix: do not fuse the masked softmax

        A {NOTE}, for upstream commit 448c6c3 (pull request 3427), which the
        Qwen3 recipe cherry-picks onto v{VERL_VERSION} with `git cherry-pick -n -X theirs`.
        It changes one line of a real verl file; the upstream change is not reproduced.
        """))
    _git(work, "update-ref", "refs/pull/3427/head", pick)
    _git(work, "checkout", "-q", "main")
    _publish(work, bare, "volcengine/verl")
    return tagged, pick


# --------------------------------------------------------------------- frameworks

_MEGATRON_FILES = _tree("megatron")
_MINDSPEED_FILES = _tree("mindspeed")
_VLLM_FILES = _tree("vllm")
_CATLASS_FILES = _tree("vllm_ascend_sub")

# .gitmodules stays here: a dot file in the source tree would be one that package-data's
# globs leave out.
_VLLM_ASCEND_FILES = {
    **_tree("vllm_ascend"),
    ".gitmodules": _d("""
        [submodule "csrc/third_party/catlass"]
        \tpath = csrc/third_party/catlass
        \turl = ../vllm_ascend_sub.git
        """),
}

CATLASS_PATH = "csrc/third_party/catlass"


def _build_frameworks(scratch: Path, root: Path) -> dict[str, str]:
    """megatron, mindspeed, vllm, vllm_ascend_sub, vllm_ascend: name -> pinned commit."""
    commits: dict[str, str] = {}

    work = _init(scratch / "megatron")
    _write(work, _MEGATRON_FILES)
    commits["megatron"] = _commit(work, f"Megatron-LM core_v0.12.1 ({NOTE})")
    _git(work, "tag", "-a", "-m", f"core_v0.12.1 ({NOTE})", "core_v0.12.1")
    _publish(work, root / "megatron.git", "NVIDIA/Megatron-LM")

    # MindSpeed is pinned by sha; upstream moved on since, so master is one commit ahead.
    work = _init(scratch / "mindspeed", branch="master")
    _write(work, _MINDSPEED_FILES)
    commits["mindspeed"] = _commit(work, f"MindSpeed at the commit the recipe pins ({NOTE})")
    _write(work, {"mindspeed/ops/__init__.py": _header("MindSpeed", "work after the pin")})
    _commit(work, f"Later MindSpeed work, past the recipe's pin ({NOTE})")
    _publish(work, root / "mindspeed.git", "Ascend/MindSpeed", head="master")

    work = _init(scratch / "vllm")
    _write(work, _VLLM_FILES)
    commits["vllm"] = _commit(work, f"vLLM v0.14.1 ({NOTE})")
    _git(work, "tag", "-a", "-m", f"v0.14.1 ({NOTE})", "v0.14.1")
    _publish(work, root / "vllm.git", "vllm-project/vllm")

    work = _init(scratch / "vllm_ascend_sub")
    _write(work, _CATLASS_FILES)
    commits["vllm_ascend_sub"] = _commit(work, f"catlass, a vLLM-Ascend submodule ({NOTE})")
    _publish(work, root / "vllm_ascend_sub.git", "catlass (vllm-ascend submodule)")

    work = _init(scratch / "vllm_ascend")
    _write(work, _VLLM_ASCEND_FILES)
    _git(work, "add", "-A")
    _git(work, "update-index", "--add", "--cacheinfo",
         f"160000,{commits['vllm_ascend_sub']},{CATLASS_PATH}")
    _git(work, "commit", "-q", "-m",
         f"vLLM-Ascend v0.14.0rc1 with its catlass submodule ({NOTE})")
    commits["vllm_ascend"] = _rev(work, "HEAD")
    _git(work, "tag", "-a", "-m", f"v0.14.0rc1 ({NOTE})", "v0.14.0rc1")
    _publish(work, root / "vllm_ascend.git", "vllm-project/vllm-ascend")
    return commits


# ------------------------------------------------------------------- package index

# STAND-IN packages for the two kinds of line in the recipe's requirements.txt that a
# wheelhouse must handle (shared/reference/real-upstreams.md: pylatexenc==2.10 and
# zmq==0.0.0 are published as source archives only; ray[default] is left unpinned while
# the recipe's Dockerfile installs ray>=2.47.1,<=2.48.0). Served from a local folder
# (the wheelhouse's find_links), next to the index pip already uses for the others.
SDIST_ONLY = ("a3rl-standin-sdist-only", "2.10")
RANGED = "a3rl-standin-ray"
RANGED_VERSIONS = ("2.48.0", "2.58.0")   # the newest is outside the image's range
RANGED_CONSTRAINT = f"{RANGED}>=2.47.1,<=2.48.0"
_ZIP_DATE = (2025, 11, 20, 12, 0, 0)

# An in-tree PEP 517 backend: the sdist builds with no build tool from an index, so the
# simulator and the unit tests build it offline (the real sdists use setuptools).
_BACKEND = _payload("sdist/_standin_backend.py")  # str.format: dist, version, date


def _metadata(dist: str, version: str, extra: bool = False) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}",
             f"Summary: {NOTE}"]
    if extra:
        lines.append("Provides-Extra: default")
    return "\n".join(lines) + "\n"


def _wheel(folder: Path, dist: str, version: str, module: str, extra: bool = False) -> None:
    import base64
    import zipfile

    mod = dist.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    files = {
        f"{mod}.py": module.encode(),
        f"{info}/METADATA": _metadata(dist, version, extra).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: a3rl-standin\n"
                         b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for n, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{n},sha256={digest},{len(data)}\n"
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(folder / f"{mod}-{version}-py3-none-any.whl", "w") as z:
        for n, data in files.items():
            z.writestr(zipfile.ZipInfo(n, _ZIP_DATE), data)


def _sdist(folder: Path, dist: str, version: str, module: str) -> None:
    import gzip
    import io

    mod = dist.replace("-", "_")
    top = f"{mod}-{version}"
    files = {
        "PKG-INFO": _metadata(dist, version),
        "pyproject.toml": _payload("sdist/pyproject.toml"),
        "_standin_backend.py": _BACKEND.format(dist=mod, version=version, date=_ZIP_DATE),
        f"{mod}.py": module,
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for n, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{n}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    with gzip.GzipFile(folder / f"{top}.tar.gz", "wb", mtime=0) as gz:
        gz.write(raw.getvalue())


def _build_index(folder: Path) -> None:
    """The stand-in packages of the recipe's requirements, as files in ``folder``."""
    folder.mkdir(parents=True)
    _sdist(folder, *SDIST_ONLY, _header("pylatexenc==2.10 and zmq==0.0.0",
                                        "published as a source archive only")
           + f'VERSION = "{SDIST_ONLY[1]}"\n')
    for version in RANGED_VERSIONS:
        _wheel(folder, RANGED, version, _header("ray", "unpinned in the recipe's requirements")
               + f'VERSION = "{version}"\n', extra=True)


# ------------------------------------------------------------------------- recipe

REQUIREMENTS = (
    "codetiming==1.4.0\ntabulate==0.9.0\n"
    # Like the recipe's pylatexenc==2.10 / zmq==0.0.0 (source archive only) and its
    # unpinned ray[default] (the image fixes the range): see "package index" above.
    f"{SDIST_ONLY[0]}=={SDIST_ONLY[1]}\n{RANGED}[default]\n"
)

# What the recipe's build_project.sh does (it hard-codes /workspace; the stand-in lets
# FRAMEWORKS_DIR move it). Like the recipe's, it does not stop at a failed copy.
BUILD_PROJECT_SH = _payload(f"recipe/{RECIPE_SUBDIR}/build_project.sh")
APPLY_ALL_PATCHES_SH = _payload(f"recipe/{RECIPE_SUBDIR}/apply_all_patches.sh")

DOCKERFILE = "Dockerfile.vllm_ascend.mindspeed.qwen3"
# The recipe's Dockerfile as published at the pin (shared/reference/real-upstreams.md):
# frameworks cloned into /workspace, then Mooncake, whose RUN copies
# /workspace/vllm-ascend/tools/mooncake_installer.sh before the RUN that clones
# vllm-ascend (so the build stops there), then vLLM, vLLM-Ascend, Ray. The stand-in keeps
# that order with no network: each "clone" is of an empty local repository.
DOCKERFILE_TEXT = _payload(f"recipe/{RECIPE_SUBDIR}/{DOCKERFILE}")

HDP = "patches/verl/utils/hybrid_data_parallel/hdp.py"
# The plain files beside the patches, at the recipe's paths (shared/reference/
# real-upstreams.md): imported by the patched trees as `patches.<path>`, never copied.
PLAIN_FILES = {f"patches/{rel}": text
               for rel, text in _tree(f"recipe/{RECIPE_SUBDIR}/patches").items()}

# files/upstream-standins/recipe, and the files made here.
_RECIPE_FILES = {
    **_tree("recipe"),
    f"{RECIPE_SUBDIR}/requirements.txt": REQUIREMENTS,
    # The train and env scripts (a3rl.planning.drift runs them with recorders).
    **recipe_scripts.files(RECIPE_SUBDIR),
}

ACTOR_YAML = "verl/trainer/config/actor/actor.yaml"
ACTOR_PY = "verl/workers/config/actor.py"


@dataclass(frozen=True)
class _Patch:
    path: str                         # under llm_rl/qwen3/patches/
    subject: str
    body: str
    edit: Callable[[Path], None]      # applied to the working directory


def _patch_converter(wd: Path) -> None:
    _edit(wd / "converter_hf_to_mcore.py",
          "    tfconfig.use_cpu_initialization = use_cpu_initialization\n",
          "    tfconfig.use_cpu_initialization = use_cpu_initialization\n"
          '    if os.getenv("USE_ALLTOALL_OVERLAP", "0") == "1":\n'
          "        tfconfig.moe_grouped_gemm = True\n")


def _patch_megatron(wd: Path) -> None:
    _edit(wd / "megatron/core/dist_checkpointing/strategies/torch.py",
          "    for key, sh_ten in list(state_dict.items()):\n",
          "    for key, sh_ten in list(state_dict.items()):\n"
          "        if sh_ten is None:\n"
          "            continue\n")


def _patch_mindspeed(wd: Path) -> None:
    _edit(wd / "mindspeed/op_builder/builder.py",
          "'-D_FORTIFY_SOURCE=2', '-O2']",
          "'-D_FORTIFY_SOURCE=2', '-O2',\n                '-include cstring']")


def _actor_key(after_yaml: str, after_py: str, comment: str, key: str, default: str):
    """An edit that adds ``key`` to verl's actor config (YAML) and its dataclass."""
    def edit(wd: Path) -> None:
        _edit(wd / ACTOR_YAML, after_yaml, f"{after_yaml}\n# {comment}\n{key}: {default}\n")
        _edit(wd / ACTOR_PY, after_py, f"{after_py}    {key}: bool = {default}\n")
    return edit


_patch_verl_recompute = _actor_key(
    "# Shuffle training data across PPO epochs\nshuffle: false\n",
    "    model_config: HFModelConfig = field(default_factory=BaseConfig)\n",
    "Recompute old_log_prob (False: reuse log_prob.detach(), needs ppo_epochs=1)",
    "recompute_old_log_prob", "True")
_patch_verl_offload = _actor_key(
    "recompute_old_log_prob: True\n", "    recompute_old_log_prob: bool = True\n",
    "Onload/offload the rollout model and KV cache by hand on NPUs",
    "manual_onload_offload", "False")
_patch_verl_rollout_log_probs = _actor_key(
    "manual_onload_offload: False\n", "    manual_onload_offload: bool = False\n",
    "Use the rollout's log-probs as old log-probs",
    "use_rollout_log_probs", "False")


def _patch_megatron_hdp(wd: Path) -> None:
    _edit(wd / "megatron/core/parallel_state.py",
          '''"""Model and data parallel groups."""\n''',
          '''"""Model and data parallel groups."""\n\n'''
          "from patches.verl.utils.hybrid_data_parallel.hdp import pack_sequences_into_buckets"
          "  # noqa: F401\n")


def _patch_verl_hdp_binpack(wd: Path) -> None:
    _edit(wd / HDP, "BINPACK = False\n", "BINPACK = True\n")


def _patch_vllm_gc(wd: Path) -> None:
    llm = wd / "vllm/entrypoints/llm.py"
    _edit(llm, "from collections.abc import Sequence\n",
          "import gc\nfrom collections.abc import Sequence\n")
    _edit(llm, "            step_outputs = self.llm_engine.step()\n",
          "            original_threshold = gc.get_threshold()\n"
          "            gc.set_threshold(0)\n"
          "            step_outputs = self.llm_engine.step()\n"
          "            gc.set_threshold(*original_threshold)\n")


_RUNNER = "vllm_ascend/worker/model_runner_v1.py"


def _patch_vllm_ascend_threshold(wd: Path) -> None:
    runner = wd / _RUNNER
    _edit(runner, "class NPUModelRunner:\n", "import os\n\n\nclass NPUModelRunner:\n")
    _edit(runner, "            return None\n",
          "            return None\n"
          '        threshold = int(os.getenv("VLLM_SPECULATIVE_BATCH_SIZE_THRE", "0"))\n'
          "        if threshold and len(valid_sampled_token_ids) > threshold:\n"
          "            return None\n")


def _patch_vllm_ascend_conflict(wd: Path) -> None:
    # Made against the tree without vllm_ascend/0001, touching the lines it changes.
    _edit(wd / _RUNNER,
          "        if not self.use_spec_decode:\n            return None\n"
          "        return self.drafter.propose(valid_sampled_token_ids)\n",
          "        if not self.use_spec_decode or self.drafter is None:\n            return []\n"
          "        return self.drafter.propose(valid_sampled_token_ids)\n")


def _patch_project_device(wd: Path) -> None:
    _edit(wd / "verl/utils/device.py",
          'return "CUDA_VISIBLE_DEVICES" if is_cuda_available else "ASCEND_RT_VISIBLE_DEVICES"',
          'return "ASCEND_RT_VISIBLE_DEVICES" if is_npu_available else "CUDA_VISIBLE_DEVICES"')


def _body(what: str) -> str:
    return f"{what}\n\nA {NOTE}: a small change in the spirit of the real patch."


CLEAN_SERIES = (
    _Patch("0001-feature-model-converter.patch", "Modify model converter",
           _body("Grouped GEMM for the MoE experts when USE_ALLTOALL_OVERLAP=1."),
           _patch_converter),
    _Patch("megatron/0001-megatron-bugfix-state_ten-verification.patch",
           "Update megatron: skip empty state tensors",
           _body("Check for empty (None) state tensors when converting optimizer state."),
           _patch_megatron),
    _Patch("megatron/0002-megatron-feature-enable_hdp.patch",
           "Update megatron: hybrid data parallel",
           _body("Import the hybrid data parallel helpers from the plain file beside the "
                 "patches,\nas patches.verl.utils.hybrid_data_parallel.hdp."),
           _patch_megatron_hdp),
    _Patch("mindspeed/0001-mindspeed-bugfix-builder.patch", "Update mindspeed: builder",
           _body("Include <cstring> explicitly: the header is missing with openEuler 24.03's "
                 "compiler."),
           _patch_mindspeed),
    _Patch("verl/0001-verl-feature-recompute_old_log_prob.patch",
           "Update verl: recompute_old_log_prob config",
           _body("Add the actor configuration key recompute_old_log_prob (default True)."),
           _patch_verl_recompute),
    _Patch("verl/0002-verl-feature-onload_offload.patch", "Update verl: manual onload/offload",
           _body("Add the actor configuration key manual_onload_offload (default False)."),
           _patch_verl_offload),
    _Patch("verl/0015-verl-feature-hdp_binpack_optimization.patch",
           "Update verl: hdp bin-packing",
           _body("Turn on bin-packing in the plain file beside the patches "
                 "(patches/verl/utils/\nhybrid_data_parallel/hdp.py), as the recipe's 0015 "
                 "edits it."),
           _patch_verl_hdp_binpack),
    _Patch("vllm/0001-vllm-feature-disable_gc.patch",
           "Update vllm: disable gc during the decode step",
           _body("Disable garbage collection around each engine step; restore it after."),
           _patch_vllm_gc),
    _Patch("vllm_ascend/0001-vllm_ascend-feature-bs_threshold_for_spec_decode.patch",
           "Update vllm_ascend: batch-size threshold for speculative decoding",
           _body("Skip drafting above VLLM_SPECULATIVE_BATCH_SIZE_THRE running sequences."),
           _patch_vllm_ascend_threshold),
)
EXTRA_PATCH = _Patch(
    "verl/0003-verl-feature-use_rollout_log_probs.patch",
    "Update verl: use the rollout's log-probs",
    _body("Add the actor configuration key use_rollout_log_probs (default False)."),
    _patch_verl_rollout_log_probs)
CONFLICT_PATCH = _Patch(
    "vllm_ascend/0002-vllm_ascend-bugfix-disabled_fia.patch",
    "Update vllm_ascend: no drafts without a drafter",
    _body("Return no drafts when the drafter is missing.\n\nMade against the unpatched "
          "runner: its context no longer matches\nonce vllm_ascend/0001 is applied."),
    _patch_vllm_ascend_conflict)
SAMPLER = "verl/experimental/dataset/length_bucket_sampler.py"


def _patch_verl_resampler(wd: Path) -> None:
    _write(wd, _tree("recipe-0019-resampler"))


# The later recipe release the seed describes (ba7be607, "add length-aware resampler for
# veRL rollout"; shared/reference/real-upstreams.md): the pin lacks its module.
RESAMPLER_PATCH = _Patch(
    "verl/0019-verl-feature-length_aware_resampler.patch",
    "Update verl: length-aware resampler",
    _body("Add verl.experimental.dataset.length_bucket_sampler (LengthAwareEpochSampler)."),
    _patch_verl_resampler)
PROJECT_PATCH = _Patch(
    "0001-verl-bugfix-visible_devices_keyword.patch",
    "verl: prefer ASCEND_RT_VISIBLE_DEVICES when NPUs are present",
    f"a3rl's own extra patch, applied after the recipe's series.\n\nA {NOTE}.",
    _patch_project_device)


def _checkout(url: str, dest: Path, ref: str) -> None:
    _git(dest.parent, "clone", "-q", "--no-checkout", url, dest.name)
    _git(dest, "checkout", "-q", ref)


def _frameworks_workspace(up_root: Path, refs: dict[str, str], pick: str, dest: Path) -> None:
    """Checkouts of the pinned refs, named as the recipe's /workspace names them."""
    dest.mkdir()
    for name, folder in (("verl", "verl"), ("megatron", "Megatron-LM"),
                         ("mindspeed", "MindSpeed"), ("vllm", "vllm"),
                         ("vllm_ascend", "vllm-ascend")):
        _checkout(str(up_root / f"{name}.git"), dest / folder, refs[name])
    _git(dest / "verl", "cherry-pick", "-n", "-X", "theirs", pick)


def frameworks_workspace(up: Upstreams, dest: Path) -> None:
    """The recipe image's ``/workspace`` framework trees (git checkouts, verl with the
    cherry-pick uncommitted, as the recipe's Dockerfile leaves it) at ``up``'s pins."""
    _frameworks_workspace(up.root, up.refs, up.verl_pick, dest)


def _format_patch(ws: Path, patch: _Patch, out: Path, relative: bool = False) -> None:
    """``relative``: paths relative to the working directory (the project's own patches,
    made with ``git diff`` in the working directory) instead of the recipe repository."""
    patch.edit(ws / RECIPE_SUBDIR)
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", f"{patch.subject}\n\n{patch.body}")
    rel = [f"--relative={RECIPE_SUBDIR}"] if relative else []
    text = _git(ws, "format-patch", "-1", "--stdout", "--no-signature", *rel, "HEAD")
    target = out / patch.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _build_recipe(scratch: Path, up_root: Path, refs: dict[str, str], pick: str,
                  project_out: Path) -> dict[str, str]:
    """The recipe repository; the project's extra patches go to ``project_out``."""
    workspace = scratch / "workspace"
    _frameworks_workspace(up_root, refs, pick, workspace)

    # The workshop holds the layout at llm_rl/qwen3, so the patches get the recipe's paths.
    ws = _init(scratch / "workshop")
    wd = ws / RECIPE_SUBDIR
    wd.mkdir(parents=True)
    script = scratch / "build_project.sh"
    script.write_text(BUILD_PROJECT_SH)
    subprocess.run(["bash", str(script)], cwd=wd, check=True, capture_output=True,
                   env={**_env(), "FRAMEWORKS_DIR": str(workspace)})
    _write(wd, PLAIN_FILES)  # a patch edits one of them
    _commit(ws, "the recipe's working directory after build_project.sh")

    patches = scratch / "patches"
    extra = scratch / "patches-extra"
    conflict = scratch / "patches-conflict"
    for p in CLEAN_SERIES:
        if p.path.startswith("vllm/"):
            _git(ws, "branch", "extra-base")
        if p.path.startswith("vllm_ascend/"):
            _git(ws, "branch", "conflict-base")
        _format_patch(ws, p, patches)
    resampler = scratch / "patches-resampler"
    _git(ws, "checkout", "-q", "-b", "resampler")
    _format_patch(ws, RESAMPLER_PATCH, resampler)
    _git(ws, "checkout", "-q", "-b", "extra", "extra-base")
    _format_patch(ws, EXTRA_PATCH, extra)
    _format_patch(ws, PROJECT_PATCH, project_out, relative=True)
    _git(ws, "checkout", "-q", "-b", "conflict", "conflict-base")
    _format_patch(ws, CONFLICT_PATCH, conflict)

    work = _init(scratch / "recipe")
    _write(work, _RECIPE_FILES, executable=(f"{RECIPE_SUBDIR}/build_project.sh",
                                            f"{RECIPE_SUBDIR}/apply_all_patches.sh"))
    series = work / RECIPE_SUBDIR / "patches"
    shutil.copytree(patches, series, dirs_exist_ok=True)
    commits = {"clean": _commit(work, f"Qwen3 RL recipe with its patch series ({NOTE})")}
    shutil.copytree(extra, series, dirs_exist_ok=True)
    commits["extra"] = _commit(work, f"Add {EXTRA_PATCH.path} ({NOTE})")
    _git(work, "checkout", "-q", "-b", "conflict", commits["clean"])
    shutil.copytree(conflict, series, dirs_exist_ok=True)
    commits["conflict"] = _commit(work, f"Add {CONFLICT_PATCH.path} ({NOTE})")
    _git(work, "checkout", "-q", "-b", "resampler", commits["clean"])
    shutil.copytree(resampler, series, dirs_exist_ok=True)
    commits["resampler"] = _commit(work, f"Add {RESAMPLER_PATCH.path}: the release with the "
                                         f"length-aware resampler ({NOTE})")
    _git(work, "checkout", "-q", "main")
    _publish(work, up_root / "recipe.git", "hicann/cann-recipes-train")
    return commits


# -------------------------------------------------------------------------- build


def _build_into(out: Path, sdist: Path, log: Log = print) -> dict:
    """Build every repository under ``out/repos`` and return the record of pins."""
    root = out / "repos"
    root.mkdir(parents=True)
    _build_index(out / "pypi")
    (out / "project-patches").mkdir()
    with tempfile.TemporaryDirectory(prefix="a3rl-upstreams-") as tmp:
        scratch = Path(tmp)
        log("building the stand-in upstream repositories (verl from its sdist)")
        verl, pick = _build_verl(scratch / "verl", root / "verl.git", sdist)
        commits = {"verl": verl, **_build_frameworks(scratch, root)}
        refs = {"verl": f"v{VERL_VERSION}", "megatron": "core_v0.12.1",
                "mindspeed": commits["mindspeed"], "vllm": "v0.14.1", "vllm_ascend": "v0.14.0rc1"}
        recipe = _build_recipe(scratch, root, refs, pick, out / "project-patches")
    refs["recipe"] = commits["recipe"] = recipe["clean"]
    return {"refs": refs, "commits": commits, "verl_pick": pick, "recipe_commits": recipe}


def digest() -> str:
    """Content address of a build: this module's source, its files and the verl sdist's
    sha256."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(recipe_scripts.__file__).read_bytes())
    for path in _files(FILES):
        h.update(f"\n{path.relative_to(FILES).as_posix()}\n".encode())
        h.update(path.read_bytes())
    h.update(f"\nverl-sdist={VERL_SDIST_SHA256}\n".encode())
    return h.hexdigest()[:16]


def _load(folder: Path) -> Upstreams:
    data = json.loads((folder / "upstreams.json").read_text())
    return Upstreams(root=folder / "repos", refs=data["refs"], commits=data["commits"],
                     verl_pick=data["verl_pick"], recipe_commits=data["recipe_commits"])


def build(log: Log = print) -> Upstreams:
    """Build (once per content) and return the stand-in upstream repositories."""
    base = cache_dir() / "sim-upstreams"
    base.mkdir(parents=True, exist_ok=True)
    tag = digest()
    final = base / tag
    with open(base / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "upstreams.json").is_file():
            log(f"stand-in upstream repositories {tag} exist (content-addressed): reused")
            return _load(final)
        sdist = verl_sdist(log)
        with tempfile.TemporaryDirectory(dir=base, prefix=f".{tag}-") as tmp:
            out = Path(tmp) / "out"
            record = _build_into(out, sdist, log)
            (out / "upstreams.json").write_text(json.dumps(record, indent=1) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            out.rename(final)
        log(f"stand-in upstream repositories built: {final / 'repos'}")
        return _load(final)


def extra_patches(dest: Path) -> list[Path]:
    """Write the project's own extra patch stand-ins into ``dest``; return their paths.

    They apply after the recipe's clean series and after its ``extra`` series. Their
    paths are relative to the working directory (``a/verl/...``), as ``git diff`` in the
    working directory writes them; the recipe's own are relative to its repository.
    """
    src = build(log=lambda _msg: None).root.parent
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for patch in sorted((src / "project-patches").glob("*.patch")):
        shutil.copy(patch, dest / patch.name)
        written.append(dest / patch.name)
    return written


def reviewed_patches() -> list[str]:
    """The stand-in recipe's patches at its pin (``clean``), as ``a3rl_recipe_reviewed_patches``
    lists the real recipe's: the simulator's inventory sets it, so that drift reports
    the ``extra`` and ``resampler`` releases' new patches."""
    return [p.path for p in CLEAN_SERIES]


def wheelhouse_overrides(up: Upstreams, constraints: list[str]) -> dict:
    """What the simulator adds to the wheelhouse entry: the stand-in packages' folder and
    the stand-in image's range for the unpinned stand-in line, after ``constraints``
    (the manifest's own, which pip ignores for packages not required)."""
    return {"find_links": [str(up.index)],
            "build_from_sdist": [SDIST_ONLY[0]],
            "constraints": [*constraints, RANGED_CONSTRAINT]}


def manifest_overrides(up: Upstreams, base_url: str | None = None) -> dict:
    """What an inventory sets to point the artifact manifest at these repositories.

    The URL is the bare repository's path, or ``{base_url}/{name}.git`` when the
    repositories are served (see ``serve``).
    """
    def url(name: str) -> str:
        return f"{base_url.rstrip('/')}/{name}.git" if base_url else up.url(name)

    return {
        "verl": {"url": url("verl"), "ref": up.refs["verl"],
                 "cherry_picks": [{"commit": up.verl_pick,
                                   "fetch": f"refs/heads/{PICK_BRANCH}"}]},
        "megatron": {"url": url("megatron"), "ref": up.refs["megatron"]},
        "mindspeed": {"url": url("mindspeed"), "ref": up.refs["mindspeed"]},
        "vllm": {"url": url("vllm"), "ref": up.refs["vllm"]},
        "vllm_ascend": {"url": url("vllm_ascend"), "ref": up.refs["vllm_ascend"],
                        "submodules": True},
        "recipe": {"url": url("recipe"), "ref": up.refs["recipe"],
                   "subdir": up.recipe_subdir},
    }


# -------------------------------------------------------------------------- serve


@dataclass
class Served:
    """A running dumb-http git server; ``requests`` lists every path asked for."""

    base_url: str
    requests: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, path: str) -> None:
        with self._lock:
            self.requests.append(path)

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.requests)


@contextmanager
def serve(root: Path) -> Iterator[Served]:
    """Serve ``root`` read-only over http on 127.0.0.1 (git's "dumb" protocol).

    Needs ``git update-server-info`` in every repository, which ``build`` runs.
    """
    served = Served(base_url="")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def send_head(self):
            served.record(self.path)
            return super().send_head()

        def log_message(self, format, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    served.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="a3rl-git-http", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
