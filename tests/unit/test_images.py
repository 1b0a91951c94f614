"""Image references and docker-archives."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from a3rl.images import archive_image_id, registry_host


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
