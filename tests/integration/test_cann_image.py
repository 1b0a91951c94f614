"""cann_image and training_container on the simulator: the stand-in CANN image archive is
loaded once per node with the same image ID everywhere, and the training container runs
with every NPU device, recreated only when its spec changes."""

from __future__ import annotations

import json
import subprocess

import pytest

from a3rl.images import archive_image_id
from a3rl.sim import podman, upstreams

from .conftest import failure_text, play

IMAGE_PLAY = "playbooks/cann_image.yml"
CONTAINER_PLAY = "playbooks/training_container.yml"


def image_ids(container: str, ref: str) -> list[str]:
    """The node's images tagged ``ref``, as "ref ID" lines. Other tags of the stand-in
    (a module before this one on the same cluster may have loaded another Ray variant)
    are not this play's business."""
    out = podman.exec_(container, "docker", "images", "--no-trunc", "--format",
                       "{{.Repository}}:{{.Tag}} {{.ID}}").stdout
    return sorted(line for line in out.splitlines() if line.split(" ")[0] == ref)


def train_inspect(container: str) -> dict:
    out = podman.exec_(container, "docker", "inspect", "a3rl-train").stdout
    return json.loads(out)[0]


@pytest.fixture(scope="module")
def site(sim):
    result = play("site.yml", sim.inventory_dir)
    assert result.ok, failure_text(result)
    return sim


def _archive(sim) -> tuple[str, str]:
    import yaml

    gv = yaml.safe_load((sim.inventory_dir / "group_vars/a3_nodes.yml").read_text())
    return gv["cann_image_tarball"], \
        f"{gv['a3rl_training_image_name']}:{gv['a3rl_training_image_tag']}"


def test_same_image_id_on_every_node(site):
    archive, ref = _archive(site)
    expected = f"{ref} {archive_image_id(archive)}"
    for node in site.members():
        assert image_ids(node.container, ref) == [expected]
    again = play(IMAGE_PLAY, site.inventory_dir)
    assert again.ok and again.changed == 0


def test_only_the_node_without_the_image_gets_it(site):
    node1, node2 = (n.container for n in site.members())
    _, ref = _archive(site)
    podman.exec_(node2, "docker", "rmi", "-f", ref)
    result = play(IMAGE_PLAY, site.inventory_dir)
    assert result.ok, failure_text(result)
    assert result.stats["changed"].get("node1", 0) == 0
    assert result.stats["changed"]["node2"] > 0
    assert image_ids(node1, ref) == image_ids(node2, ref) != []


def test_archive_goes_along_the_chain_when_every_node_needs_it(site):
    """The archive goes through the artifact distribution: with the chain's size floor
    lowered (the stand-in archive is below the default), both nodes get it along the
    chain, verified, load it, and keep no copy."""
    archive, ref = _archive(site)
    for node in site.members():
        podman.exec_(node.container, "docker", "rmi", "-f", ref)
    result = play(IMAGE_PLAY, site.inventory_dir,
                  extravars={"artifact_store_fanout_min_bytes": 0})
    assert result.ok, failure_text(result)
    out = (result.record / "artifacts").joinpath(
        next(p.name for p in (result.record / "artifacts").iterdir()), "stdout").read_text()
    assert "chain: 2 nodes need files" in out and "node1 -> node2" in out
    expected = f"{ref} {archive_image_id(archive)}"
    for node in site.members():
        assert image_ids(node.container, ref) == [expected]
        assert podman.exec_(node.container, "ls", "-A", "/var/cache/a3rl/images").stdout == ""
    again = play(IMAGE_PLAY, site.inventory_dir, extravars={"artifact_store_fanout_min_bytes": 0})
    assert again.ok and again.changed == 0


def test_altered_archive_is_refused(site, tmp_path):
    archive, ref = _archive(site)
    node2 = site.members()[1].container
    podman.exec_(node2, "docker", "rmi", "-f", ref)
    try:
        result = play(IMAGE_PLAY, site.inventory_dir,
                      extravars={"cann_image_tarball_sha256": "f" * 64})
        assert not result.ok
        text = failure_text(result)
        assert f"{archive}: has sha256" in text and "Nothing was loaded" in text
        assert image_ids(node2, ref) == []
    finally:
        assert play(IMAGE_PLAY, site.inventory_dir).ok


def test_training_container_has_every_npu_and_is_not_privileged(site):
    for node in site.members():
        info = train_inspect(node.container)
        assert info["State"]["Running"]
        assert info["HostConfig"]["Privileged"] is False
        assert info["HostConfig"]["NetworkMode"] == "host"
        devs = podman.exec_(node.container, "docker", "exec", "a3rl-train", "sh", "-c",
                            "ls /dev | grep -c '^davinci[0-9]*$'").stdout.strip()
        assert devs == "16"
        smi = podman.exec_(node.container, "docker", "exec", "a3rl-train",
                           "npu-smi", "info").stdout
        assert smi.count("Ascend910") == 16


def test_training_container_recreated_only_when_its_spec_changes(site):
    node = site.members()[0].container
    first = train_inspect(node)["Id"]
    assert play(CONTAINER_PLAY, site.inventory_dir).changed == 0
    assert train_inspect(node)["Id"] == first
    changed = play(CONTAINER_PLAY, site.inventory_dir,
                   extravars={"training_container_env": {"A3RL_PROBE": "1"}})
    assert changed.ok, failure_text(changed)
    second = train_inspect(node)
    assert second["Id"] != first and "A3RL_PROBE=1" in second["Config"]["Env"]
    restored = play(CONTAINER_PLAY, site.inventory_dir)
    assert restored.ok and restored.changed > 0
    third = train_inspect(node)["Id"]
    assert play(CONTAINER_PLAY, site.inventory_dir).changed == 0
    assert train_inspect(node)["Id"] == third


def _have(container: str, ref: str) -> str:
    return podman.exec_(container, "docker", "image", "inspect", "-f", "{{.Id}}", ref,
                        check=False).stdout.strip()


def test_registry_source_pulls_once_on_the_stager(site, tmp_path):
    """A real registry (Debian's docker-registry) on the stager node, at 127.0.0.1:5000."""
    node1, node2 = (n.container for n in site.members())
    _, ref = _archive(site)
    # Debian's default config points htpasswd at a folder: give it a real user file.
    podman.exec_(node1, "sh", "-c", """set -e
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >/dev/null
        python3 -W ignore -c 'import crypt; print("a3rl:" + crypt.crypt("s3cret",
            crypt.mksalt(crypt.METHOD_BLOWFISH)))' > /etc/docker/registry/htpasswd
        sed -i 's#path: /etc/docker/registry$#path: /etc/docker/registry/htpasswd#' \
            /etc/docker/registry/config.yml
        systemctl restart docker-registry""")
    remote = "127.0.0.1:5000/a3rl/cann-standin:pushed"
    podman.exec_(node1, "sh", "-c", f"""set -e
        docker login -u a3rl -p s3cret 127.0.0.1:5000 >/dev/null 2>&1
        docker tag {ref} {remote}
        docker push -q {remote} >/dev/null
        docker rmi {remote} >/dev/null
        docker logout 127.0.0.1:5000 >/dev/null""")
    extra = {"cann_image_source": "registry", "cann_image_registry_ref": remote,
             "cann_image_registry_username": "a3rl", "cann_image_registry_password": "s3cret",
             "cann_image_tag": "viaregistry", "cann_image_cache_dir": str(tmp_path)}
    result = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert result.ok, failure_text(result)
    want = _have(node1, "localhost/a3rl/cann-standin:viaregistry")
    assert want and _have(node2, "localhost/a3rl/cann-standin:viaregistry") == want
    # Pulled on the stager only: node2 never saw the registry reference.
    assert _have(node2, remote) == ""
    # The password never reached the play's output.
    assert "s3cret" not in (result.record / "artifacts").joinpath(
        next(p.name for p in (result.record / "artifacts").iterdir()), "stdout").read_text()
    [archive] = tmp_path.glob("*.tar")
    assert archive_image_id(archive) == want
    again = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert again.ok and again.changed == 0, again.stats


def test_build_source_builds_once_on_the_stager(site, tmp_path):
    """The stand-in recipe's Dockerfile.vllm_ascend.mindspeed.qwen3, by name, with its
    published ordering defect fixed by the project (as published it fails)."""
    node1, node2 = (n.container for n in site.members())
    _, ref = _archive(site)
    up = upstreams.build(log=lambda _msg: None)
    subprocess.run(["git", "clone", "-q", up.url("recipe"), str(tmp_path / "recipe")], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "recipe"), "checkout", "-q",
                    up.recipe_commits["clean"]], check=True)
    ctx = tmp_path / "recipe" / up.recipe_subdir
    extra = {"cann_image_source": "build", "cann_image_build_context": str(ctx),
             "cann_image_build_args": {"BASE": ref},
             "cann_image_tag": "viabuild", "cann_image_cache_dir": str(tmp_path / "cache")}
    result = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert result.ok, failure_text(result)
    want = _have(node1, "localhost/a3rl/cann-standin:viabuild")
    assert want and _have(node2, "localhost/a3rl/cann-standin:viabuild") == want
    label = podman.exec_(node2, "docker", "image", "inspect", "-f",
                         "{{index .Config.Labels \"a3rl.standin\"}}",
                         "localhost/a3rl/cann-standin:viabuild").stdout.strip()
    assert label.startswith("recipe Dockerfile stand-in"), label
    # Mooncake's step ran, after vllm-ascend was cloned.
    podman.exec_(node2, "docker", "run", "--rm", "--entrypoint", "test",
                 "localhost/a3rl/cann-standin:viabuild", "-f", "/workspace/Mooncake/installed")
    again = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert again.ok and again.changed == 0, again.stats
    # As published (no project fix) the stand-in, like the recipe's, stops at the copy.
    published = play(IMAGE_PLAY, site.inventory_dir,
                     extravars={**extra, "cann_image_build_fixes": [],
                                "cann_image_tag": "published"})
    assert not published.ok
    assert "mooncake_installer.sh" in failure_text(published)
