"""Container image archives (``docker save`` / ``podman save --format docker-archive``)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path


def registry_host(ref: str) -> str:
    """The registry an image reference points at, as ``docker login`` wants it.

    The first path part is a registry host only if it has a dot or a port, or is
    ``localhost`` (Docker's own rule); otherwise the reference is on Docker Hub.
    """
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def archive_image_id(path: str | Path) -> str:
    """The image ID a ``docker load`` of this archive gives: its config blob's digest.

    Read from the archive's ``manifest.json`` without unpacking the layers, so every node's
    loaded image can be compared with the archive before and after distribution.
    """
    with tarfile.open(path) as tar:
        member = tar.extractfile("manifest.json")
        if member is None:
            raise ValueError(f"{path}: no manifest.json, not a docker-archive")
        manifest = json.load(member)
    if len(manifest) != 1:
        raise ValueError(f"{path}: holds {len(manifest)} images, expected one")
    config = manifest[0]["Config"]
    return "sha256:" + config.removeprefix("blobs/sha256/").removesuffix(".json")
