"""Container image archives (``docker save`` / ``podman save --format docker-archive``)."""

from __future__ import annotations

import json
import re
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


# ----------------------------------------------------------------- Dockerfile fixes
#
# The project's fixes to the recipe's Dockerfile, applied to the text before a build.
# Each names the defect it fixes and fails loudly when the Dockerfile no longer has it
# (the recipe fixed it upstream, or changed around it): a fix is never applied blindly.
# They are written as rules on instructions, not as a patch, so no line of the recipe's
# file is kept in this repository.


def dockerfile_instructions(text: str) -> list[tuple[int, int]]:
    """``(first, last)`` line indexes (0-based, inclusive) of each instruction: a line
    and the lines its trailing backslashes continue; blank and comment lines between
    instructions belong to none."""
    lines = text.splitlines()
    spans = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        first = i
        while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
        spans.append((first, i))
        i += 1
    return spans


# The recipe's Dockerfile at the pin copies /workspace/vllm-ascend/tools/mooncake_installer.sh
# in the Mooncake RUN, before the RUN that clones vllm-ascend (shared/reference/
# real-upstreams.md): as published the build stops there.
_MOONCAKE_COPY = re.compile(r"/workspace/vllm-ascend/tools/mooncake_installer\.sh")
_VLLM_ASCEND_CLONE = re.compile(r"git\s+clone[^&;|]*vllm-ascend")


def _fix_mooncake_installer_order(lines: list[str]) -> list[str]:
    text = "\n".join(lines)
    spans = dockerfile_instructions(text)

    def block(span: tuple[int, int]) -> str:
        return "\n".join(lines[span[0]:span[1] + 1])

    copies = [n for n, s in enumerate(spans) if _MOONCAKE_COPY.search(block(s))]
    clones = [n for n, s in enumerate(spans) if _VLLM_ASCEND_CLONE.search(block(s))]
    if not copies or not clones:
        missing = "copies tools/mooncake_installer.sh" if not copies else "clones vllm-ascend"
        raise ValueError(
            f"Dockerfile fix mooncake_installer_order: no instruction {missing}; the "
            "recipe's Dockerfile changed around the defect this fix moves. Fix: check the "
            "Dockerfile at the new recipe pin, and drop mooncake_installer_order from "
            "cann_image_build_fixes if it builds as published."
        )
    copy, clone = copies[0], clones[0]
    if copy > clone:
        raise ValueError(
            "Dockerfile fix mooncake_installer_order: the Dockerfile already copies "
            "tools/mooncake_installer.sh after cloning vllm-ascend (fixed upstream). Fix: "
            "drop mooncake_installer_order from cann_image_build_fixes."
        )
    a, b = spans[copy]
    moved = lines[a:b + 1]
    rest = lines[:a] + lines[b + 1:]
    end = spans[clone][1] - (b + 1 - a)
    return rest[:end + 1] + moved + rest[end + 1:]


DOCKERFILE_FIXES = {"mooncake_installer_order": _fix_mooncake_installer_order}


def dockerfile_fixed(text: str, fixes: list[str]) -> str:
    """``text`` with the named project fixes applied in order; ValueError (naming the
    fix and what to do) when a fix is unknown or its defect is not there."""
    lines = text.splitlines()
    for name in fixes or []:
        if name not in DOCKERFILE_FIXES:
            raise ValueError(
                f"cann_image_build_fixes names {name!r}; known fixes: "
                f"{', '.join(sorted(DOCKERFILE_FIXES))}. Fix: correct the name."
            )
        lines = DOCKERFILE_FIXES[name](lines)
        # At the end: a comment at the top would end the parser directives (# syntax=).
        lines.append(f"# a3rl: project fix {name} applied (roles/cann_image)")
    return "\n".join(lines) + "\n"
