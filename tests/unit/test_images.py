"""Image references and docker-archives."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from a3rl.planning.images import (
    archive_image_id,
    dockerfile_fixed,
    dockerfile_instructions,
    registry_host,
)
from a3rl.sim import upstreams


@pytest.mark.parametrize(
    ("ref", "host"),
    [("127.0.0.1:5000/a3rl/img:tag", "127.0.0.1:5000"),
     ("quay.io/ascend/cann:8.5.0", "quay.io"),
     ("localhost/a3rl/img:1", "localhost"), ("ascend/cann:tag", "docker.io"),
     ("ubuntu:22.04", "docker.io"),
     ("registry.local:443/x@sha256:" + "a" * 64, "registry.local:443")],
)
def test_registry_host(ref, host):
    assert registry_host(ref) == host


def _archive(tmp_path, manifest) -> str:
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_archive_id_docker_and_oci_layouts(tmp_path):
    assert archive_image_id(_archive(tmp_path, [{"Config": "abc123.json"}])) == "sha256:abc123"
    assert archive_image_id(_archive(tmp_path, [{"Config": "blobs/sha256/def456"}])) == \
        "sha256:def456"


def test_archive_with_two_images_is_refused(tmp_path):
    with pytest.raises(ValueError, match="holds 2 images"):
        archive_image_id(_archive(tmp_path, [{"Config": "a.json"}, {"Config": "b.json"}]))


# ----------------------------------------------------------------- Dockerfile fixes

FIX = "mooncake_installer_order"


def _instructions(text: str) -> list[str]:
    lines = text.splitlines()
    return ["\n".join(lines[a:b + 1]) for a, b in dockerfile_instructions(text)]


def _index(instructions: list[str], needle: str) -> int:
    return next(n for n, ins in enumerate(instructions) if needle in ins)


def test_the_stand_in_dockerfile_has_the_recipes_ordering_defect():
    ins = _instructions(upstreams.DOCKERFILE_TEXT)
    assert _index(ins, "tools/mooncake_installer.sh /workspace/Mooncake") < \
        _index(ins, "standin.git vllm-ascend")


def test_the_fix_moves_the_mooncake_step_after_the_vllm_ascend_clone_only():
    before = _instructions(upstreams.DOCKERFILE_TEXT)
    fixed = dockerfile_fixed(upstreams.DOCKERFILE_TEXT, [FIX])
    after = _instructions(fixed)
    assert sorted(after) == sorted(before)  # the same instructions, none edited
    assert _index(after, "tools/mooncake_installer.sh /workspace/Mooncake") == \
        _index(after, "standin.git vllm-ascend") + 1
    assert after[0].startswith("ARG BASE=") and after[1] == "FROM ${BASE}"
    assert f"project fix {FIX} applied" in fixed.splitlines()[-1]
    assert dockerfile_fixed(upstreams.DOCKERFILE_TEXT, []) == upstreams.DOCKERFILE_TEXT


def test_the_fix_fails_loudly_once_upstream_fixed_it():
    fixed = dockerfile_fixed(upstreams.DOCKERFILE_TEXT, [FIX])
    with pytest.raises(ValueError, match="fixed upstream.*drop mooncake_installer_order"):
        dockerfile_fixed(fixed, [FIX])
    without = upstreams.DOCKERFILE_TEXT.replace("/workspace/vllm-ascend/tools/", "/opt/")
    with pytest.raises(ValueError, match="no instruction copies tools/mooncake_installer.sh"):
        dockerfile_fixed(without, [FIX])
    with pytest.raises(ValueError, match="known fixes: mooncake_installer_order"):
        dockerfile_fixed(upstreams.DOCKERFILE_TEXT, ["mooncake"])
