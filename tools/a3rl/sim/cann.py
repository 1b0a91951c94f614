"""The stand-in CANN training image for the simulator, as a ``docker save`` archive.

The real image is ~20 GB and built from the CANN base image, which cannot be fetched
here. The stand-in is the simulated node's own image plus what the simulator's
stand-in trainer needs (see ``files/cann-standin``), and the recipe image's framework
trees in ``/workspace`` (``image_workspace``). It is handed to the cluster the
way a real site hands over an offline image: one archive on the controller with its
sha256, which the ``cann_image`` role distributes and loads. Built once per content.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from a3rl.files import sha256_file
from a3rl.paths import cache_dir
from a3rl.planning.images import archive_image_id
from a3rl.sim import image_workspace, podman, upstreams

CONTEXT = Path(__file__).resolve().parent / "files" / "cann-standin"
# Ray 2.60.0 and its dependencies, pinned: the variant the token-auth tests run.
RAY_TOKEN_REQUIREMENTS = Path(__file__).resolve().parent / "ray-token-requirements.txt"
REPO = "a3rl/cann-standin"
# The thin layer that installs another Ray release over the stand-in's (ray_layer).
RAY_LAYER = Path(__file__).resolve().parent / "files" / "cann-standin-ray" / "Containerfile"
RAY_REPO = "a3rl/cann-standin-ray"


@dataclass(frozen=True)
class CannArchive:
    path: Path
    sha256: str
    name: str
    tag: str
    image_id: str

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"


def digest(node_image: str, workspace: str = "") -> str:
    h = hashlib.sha256(f"base={node_image}\n".encode())
    # The /workspace framework trees (image_workspace.digest).
    h.update(f"workspace={workspace}\n".encode())
    for f in sorted(CONTEXT.iterdir()):
        h.update(f.name.encode() + b"\n" + f.read_bytes())
    return h.hexdigest()[:16]


def ensure_archive(node_image: str, log: Callable[[str], None] = print,
                   ray_requirements: Path | None = None) -> CannArchive:
    """Build (once) and return the stand-in image archive for this node image.

    ``ray_requirements`` (a fully pinned requirements file, e.g. RAY_TOKEN_REQUIREMENTS)
    replaces the node image's Ray (the recipe's 2.48.0) with another release, as the
    token-authentication tests need: a thin layer on the stand-in (ray_layer), so that
    only Ray is installed again and a node that holds the stand-in loads one new layer.
    """
    up = upstreams.build(log)
    tag = digest(node_image, image_workspace.digest(up))
    out = cache_dir() / "sim-cann"
    out.mkdir(parents=True, exist_ok=True)
    meta = out / f"{tag}.json"
    tar = out / f"{tag}.tar"
    with open(out / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if meta.is_file() and tar.is_file():
            data = json.loads(meta.read_text())
            log(f"CANN image stand-in {REPO}:{tag} exists (content-addressed): reused")
            base = CannArchive(tar, data["sha256"], f"localhost/{REPO}", tag, data["image_id"])
        else:
            base = _build(node_image, tag, up, out, log)
    return base if ray_requirements is None else ray_layer(base, ray_requirements, log)


def _build(node_image: str, tag: str, up, out: Path, log: Callable[[str], None]) -> CannArchive:
    log(f"building the CANN image stand-in {REPO}:{tag}")
    with tempfile.TemporaryDirectory(dir=out) as ctx_dir:
        ctx = Path(ctx_dir)
        for f in CONTEXT.iterdir():
            shutil.copy(f, ctx / f.name)
        # Wheels come from the host (its TLS trust); sdists become wheels here.
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
             "-w", str(ctx / "wheels"), "-r", str(CONTEXT / "requirements.txt")],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"pip wheel for the CANN stand-in failed: {proc.stderr}")
        image_workspace.build(ctx / "workspace", up)
        ref = f"localhost/{REPO}:{tag}"
        podman.run(["build", "--quiet", "--build-arg", f"BASE={node_image}", "-t", ref,
                    str(ctx)], timeout=1200)
    archive = _save(ref, out, tag)
    log(f"CANN image stand-in built: {archive.path} ({archive.path.stat().st_size / 1e6:.0f} MB)")
    return archive


def _save(ref: str, out: Path, tag: str) -> CannArchive:
    """``podman save`` of ``ref`` as ``out/<tag>.tar`` (written whole, then renamed), with
    its record."""
    tar, partial = out / f"{tag}.tar", out / f".{tag}.tar.partial"
    partial.unlink(missing_ok=True)
    podman.run(["save", "--format", "docker-archive", "-o", str(partial), ref], timeout=1200)
    image_id = archive_image_id(partial)
    partial.rename(tar)
    data = {"sha256": sha256_file(tar), "image_id": image_id, "ref": ref}
    (out / f"{tag}.json").write_text(json.dumps(data, indent=1) + "\n")
    name, _, _ = ref.rpartition(":")
    return CannArchive(tar, data["sha256"], name, tag, image_id)


def ray_layer(base: CannArchive, requirements: Path,
              log: Callable[[str], None] = print) -> CannArchive:
    """The stand-in ``base`` with another Ray release installed over its own (once per
    content): a thin layer, ``FROM`` the base as the podman store holds it."""
    h = hashlib.sha256(f"base={base.ref}\n".encode())
    h.update(requirements.read_bytes() + RAY_LAYER.read_bytes())
    tag = h.hexdigest()[:16]
    out = cache_dir() / "sim-cann"
    with open(out / "build-ray.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        meta, tar = out / f"{tag}.json", out / f"{tag}.tar"
        if meta.is_file() and tar.is_file():
            data = json.loads(meta.read_text())
            log(f"CANN image stand-in with {requirements.name} {RAY_REPO}:{tag} exists: reused")
            return CannArchive(tar, data["sha256"], f"localhost/{RAY_REPO}", tag,
                               data["image_id"])
        log(f"building the CANN image stand-in's {requirements.name} layer {RAY_REPO}:{tag}")
        if not podman.image_exists(base.ref):
            podman.run(["load", "-i", str(base.path)], timeout=1200)
        with tempfile.TemporaryDirectory(dir=out) as ctx_dir:
            ctx = Path(ctx_dir)
            shutil.copy(RAY_LAYER, ctx / "Containerfile")
            shutil.copy(requirements, ctx / "requirements.txt")
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                 "--no-deps", "-d", str(ctx / "wheels"), "-r", str(requirements)],
                capture_output=True, text=True,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"pip download of {requirements.name} failed: {proc.stderr}")
            ref = f"localhost/{RAY_REPO}:{tag}"
            podman.run(["build", "--quiet", "--build-arg", f"BASE={base.ref}", "-t", ref,
                        str(ctx)], timeout=1200)
        archive = _save(ref, out, tag)
        log(f"CANN image stand-in with {requirements.name} built: {archive.path}")
        return archive
