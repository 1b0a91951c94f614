"""The simulator's real-verl layer on the CANN image stand-in, as a ``docker save`` archive.

``files/cann-standin-verl`` is a thin image on top of the CANN image stand-in
(``a3rl.sim.cann``): the pinned dependencies of verl 0.6.0 for CPU
(``verl-cpu-requirements.txt``: torch 2.13.0 CPU build, transformers 4.57.6, ...) and the
simulator's CPU stand-in layer for verl (``files/verl-cpu-standin``). With it, the
training play's job runs real verl from the recipe working directory
(``docs/simulator.md``, "Real verl on CPU"). It is handed to the cluster as the training
image, like the base: one archive with its sha256 that ``cann_image`` loads.

Built once per machine and content (the tag hashes the base's tag, the requirements and
the layer's files) into the machine's cache (``a3rl.paths.machine_cache_dir``,
``~/.cache/a3rl/sim-cann-verl``), shared by every checkout and CI clone on the machine:
saving the 2.9 GB archive again per checkout would cost minutes each time. The wheels
are fetched once into ``~/.cache/a3rl/sim-verl-wheels`` (torch's CPU wheel from this
machine kind's local wheel folder, the rest from PyPI). Kept apart
from ``cann.py`` so the base image and this layer change independently.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from a3rl.files import sha256_file
from a3rl.paths import machine_cache_dir
from a3rl.planning.images import archive_image_id
from a3rl.sim import podman
from a3rl.sim.cann import CannArchive

HERE = Path(__file__).resolve().parent
CONTEXT = HERE / "files" / "cann-standin-verl"
LAYER = HERE / "files" / "verl-cpu-standin"
REQUIREMENTS = HERE / "verl-cpu-requirements.txt"
REPO = "a3rl/cann-standin-verl"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def digest(base: CannArchive) -> str:
    h = hashlib.sha256(f"base={base.ref}\n".encode())
    h.update(REQUIREMENTS.read_bytes())
    for root in (CONTEXT, LAYER):
        for f in _files(root):
            h.update(f.relative_to(root).as_posix().encode() + b"\n" + f.read_bytes())
    return h.hexdigest()[:16]


def wheels(log: Callable[[str], None] = print) -> Path:
    """Every pinned wheel in ``.cache/sim-verl-wheels`` (sdists built into wheels)."""
    out = machine_cache_dir() / "sim-verl-wheels"
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / (hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16] + ".done")
    # One pip at a time writes the folder (cluster.build_images fetches beside the tests).
    with open(out.parent / "sim-verl-wheels.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file():
            return out
        log(f"fetching the real-verl layer's wheels into {out}")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out),
             "-r", str(REQUIREMENTS)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"pip wheel for the real-verl layer failed: {proc.stderr[-2000:]}")
        stamp.write_text("")
    return out


def ensure_archive(base: CannArchive, log: Callable[[str], None] = print) -> CannArchive:
    """Build (once) and return the real-verl layer's archive on top of ``base``."""
    tag = digest(base)
    out = machine_cache_dir() / "sim-cann-verl"
    out.mkdir(parents=True, exist_ok=True)
    meta, tar = out / f"{tag}.json", out / f"{tag}.tar"
    with open(out / "build-verl.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if meta.is_file() and tar.is_file():
            data = json.loads(meta.read_text())
            log(f"real-verl image layer {REPO}:{tag} exists (content-addressed): reused")
            return CannArchive(tar, data["sha256"], f"localhost/{REPO}", tag, data["image_id"])
        t0 = time.monotonic()
        wheel_dir = wheels(log)
        if not podman.image_exists(base.ref):
            podman.run(["load", "-i", str(base.path)], timeout=1200)
        log(f"building the real-verl image layer {REPO}:{tag} on {base.ref}")
        with tempfile.TemporaryDirectory(dir=out) as ctx_dir:
            ctx = Path(ctx_dir)
            shutil.copy(CONTEXT / "Containerfile", ctx / "Containerfile")
            shutil.copy(REQUIREMENTS, ctx / "requirements.txt")
            shutil.copytree(wheel_dir, ctx / "wheels", ignore=shutil.ignore_patterns("*.done"))
            shutil.copytree(LAYER, ctx / "verl-cpu-standin",
                            ignore=shutil.ignore_patterns("__pycache__"))
            ref = f"localhost/{REPO}:{tag}"
            podman.run(["build", "--quiet", "--build-arg", f"BASE={base.ref}", "-t", ref,
                        str(ctx)], timeout=3600)
        partial = out / f".{tag}.tar.partial"
        partial.unlink(missing_ok=True)
        podman.run(["save", "--format", "docker-archive", "-o", str(partial), ref],
                   timeout=3600)
        image_id = archive_image_id(partial)
        partial.rename(tar)
        data = {"sha256": sha256_file(tar), "image_id": image_id, "ref": ref,
                "build_seconds": round(time.monotonic() - t0, 1)}
        meta.write_text(json.dumps(data, indent=1) + "\n")
        log(f"real-verl image layer built in {data['build_seconds']} s: {tar} "
            f"({tar.stat().st_size / 1e6:.0f} MB)")
        return CannArchive(tar, data["sha256"], f"localhost/{REPO}", tag, image_id)
