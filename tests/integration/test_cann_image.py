"""cann_image and training_container on the simulator: the stand-in CANN image archive is
loaded once per node with the same image ID everywhere, and the training container runs
with every NPU device, recreated only when its spec changes."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a3rl.paths import project_root
from a3rl.planning.images import archive_image_id
from a3rl.sim import podman, upstreams

from .conftest import events, failure_text, play, provision

# What this module asserts on is the same under either strategy: its plays run under
# Mitogen (conftest.play_strategy).
PLAY_STRATEGY = "mitogen"

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
    return provision(sim)


# The image the registry serves and the base the recipe's Dockerfile builds on: the
# training image stand-in without its Ray environment, manuals and framework trees (the
# CANN base image has none in /workspace), in one layer: 258 MB instead of 927 (podman's
# count). What these tests check (one pull or build on the stager, one export, the same
# image ID on every node, the labels, the credentials) does not depend on the size; each
# export, send and load moves a quarter of it.
SLIM = "localhost/a3rl/cann-base-standin:slim"


def _slim(node: str, ref: str) -> str:
    podman.exec_(node, "sh", "-c", f"""docker build -q -t {SLIM} - >/dev/null <<'EOF'
FROM {ref} AS full
RUN rm -rf /opt/a3rl /workspace /usr/share/doc /usr/share/man /usr/share/locale \\
 && mkdir /workspace
FROM scratch
COPY --from=full / /
WORKDIR /workspace
EOF""")
    return SLIM


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
        # An init reaps what Ray and the jobs leave behind; the env scripts are the node's
        # and the container only reads them.
        assert info["HostConfig"]["Init"] is True
        env_mount = [m for m in info["Mounts"] if m["Destination"] == "/etc/a3rl/env"]
        assert [(m["Source"], m["RW"]) for m in env_mount] == [("/etc/a3rl/env", False)]
        refused = podman.exec_(node.container, "docker", "exec", "a3rl-train", "touch",
                               "/etc/a3rl/env/probe", check=False)
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr
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



def test_training_container_brought_back_where_it_was_removed(site):
    """The role's probe sees the container gone on one node: the next run brings it back
    there, leaves the other node's as it was, and the run after changes nothing."""
    node1, node2 = (n.container for n in site.members())
    kept = train_inspect(node1)["Id"]
    podman.exec_(node2, "docker", "rm", "-f", "a3rl-train")
    result = play(CONTAINER_PLAY, site.inventory_dir)
    assert result.ok, failure_text(result)
    assert result.stats["changed"].get("node1", 0) == 0
    assert result.stats["changed"]["node2"] > 0
    assert train_inspect(node2)["State"]["Running"]
    assert train_inspect(node1)["Id"] == kept
    again = play(CONTAINER_PLAY, site.inventory_dir)
    assert again.ok and again.changed == 0, again.stats

def _have(container: str, ref: str) -> str:
    return podman.exec_(container, "docker", "image", "inspect", "-f", "{{.Id}}", ref,
                        check=False).stdout.strip()


# The registry password, and the form Docker keeps a login in (base64 of user:password).
SECRETS = ("s3cret", base64.b64encode(b"a3rl:s3cret").decode())
# Where a Docker client config could be left on the stager: any user's home, the
# temporary folders, /etc and the role's staging folder.
_CONFIG_PLACES = "/root /home /tmp /var/tmp /etc /var/cache/a3rl"


def _credential_files(container: str) -> list[str]:
    """Files on the node that hold the registry password, in clear or as Docker's login."""
    pattern = " ".join(f"-e {s}" for s in SECRETS)
    out = podman.exec_(container, "sh", "-c",
                       f"places=$(for d in {_CONFIG_PLACES}; do [ -e $d ] && echo $d; done); "
                       f"grep -rlF --devices=skip {pattern} $places; "
                       "rc=$?; [ $rc -le 1 ] || exit $rc", check=False)
    assert out.returncode == 0, f"{container}: grep failed: {out.stderr}"
    # The registry's own user file holds a hash, not the password.
    return [f for f in out.stdout.split() if f]


# A registry that takes any login and never answers a pull: the play hangs in the pull.
HANGING_REGISTRY = """
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.rstrip("/") == "/v2":
            ok = bool(self.headers.get("Authorization"))
            self.send_response(200 if ok else 401)
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if not ok:
                self.send_header("WWW-Authenticate", 'Basic realm="a3rl"')
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        time.sleep(600)
    do_HEAD = do_GET
http.server.ThreadingHTTPServer(("127.0.0.1", 5001), H).serve_forever()
"""


def test_a_pull_killed_after_the_login_leaves_no_password_in_the_docker_config(site, tmp_path):
    """ansible-playbook killed mid-pull (no `always:` runs): the stager's
    ~/.docker/config.json never held the login."""
    node1 = site.members()[0].container
    script = base64.b64encode(HANGING_REGISTRY.encode()).decode()
    podman.exec_(node1, "sh", "-c", f"echo {script} | base64 -d > /run/a3rl-test-registry.py; "
                 "python3 /run/a3rl-test-registry.py >/dev/null 2>&1 & "
                 "echo $! > /run/a3rl-test-hanging-registry.pid")
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({
        "cann_image_source": "registry", "cann_image_registry_ref": "127.0.0.1:5001/a3rl/hang:x",
        "cann_image_registry_username": "a3rl", "cann_image_registry_password": "s3cret-hang",
        "cann_image_tag": "hang", "cann_image_cache_dir": str(tmp_path)}))
    root = project_root()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(site.inventory_dir),
         IMAGE_PLAY, "-e", f"@{extra}"], cwd=root, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg")})
    logged_in = "grep -l 5001 /root/.docker/config.json /run/a3rl-docker-config.*/config.json"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if podman.exec_(node1, "sh", "-c", f"{logged_in} 2>/dev/null", check=False).stdout:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the play never logged in (exit {proc.poll()})")
        time.sleep(2)  # well into the hanging pull
        assert proc.poll() is None, "the pull did not hang"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        podman.exec_(node1, "sh", "-c", "kill $(cat /run/a3rl-test-hanging-registry.pid); "
                     "rm -f /run/a3rl-test-hanging-registry.pid /run/a3rl-test-registry.py",
                     check=False)
    config = podman.exec_(node1, "cat", "/root/.docker/config.json", check=False).stdout
    assert "5001" not in config, config


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
    served = _slim(node1, ref)
    podman.exec_(node1, "sh", "-c", f"""set -e
        docker login -u a3rl -p s3cret 127.0.0.1:5000 >/dev/null 2>&1
        docker tag {served} {remote}
        docker push -q {remote} >/dev/null
        docker rmi {remote} >/dev/null
        docker logout 127.0.0.1:5000 >/dev/null""")
    extra = {"cann_image_source": "registry", "cann_image_registry_ref": remote,
             "cann_image_registry_username": "a3rl", "cann_image_registry_password": "s3cret",
             "cann_image_tag": "viaregistry", "cann_image_cache_dir": str(tmp_path)}
    checked = play(IMAGE_PLAY, site.inventory_dir, extravars=extra, check=True)
    assert checked.ok and checked.changed == 0, failure_text(checked)
    assert "would pull the image on node1, then distribute it" in _messages(checked)
    assert _have(node1, "localhost/a3rl/cann-standin:viaregistry") == ""
    result = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert result.ok, failure_text(result)
    want = _have(node1, "localhost/a3rl/cann-standin:viaregistry")
    assert want and _have(node2, "localhost/a3rl/cann-standin:viaregistry") == want
    # Pulled on the stager only: node2 never saw the registry reference.
    assert _have(node2, remote) == ""
    assert _credential_files(node1) == []
    [archive] = tmp_path.glob("*.tar")
    assert archive_image_id(archive) == want
    # The login folders, this run's and the one a killed run left, are gone; the stager's
    # own docker config never held a login.
    assert podman.exec_(node1, "sh", "-c", "ls -d /run/a3rl-docker-config.* 2>/dev/null",
                        check=False).stdout == ""
    config = podman.exec_(node1, "cat", "/root/.docker/config.json", check=False).stdout
    assert "127.0.0.1:5000" not in config and "127.0.0.1:5001" not in config, config
    again = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert again.ok and again.changed == 0, again.stats
    # The registry logout runs whatever happens: a pull that fails after the login leaves
    # no credential on the stager either.
    failed = play(IMAGE_PLAY, site.inventory_dir, extravars={
        **extra, "cann_image_registry_ref": remote.replace(":pushed", ":absent"),
        "cann_image_tag": "absent", "cann_image_cache_dir": str(tmp_path / "failed")})
    assert not failed.ok and "absent" in failure_text(failed), failure_text(failed)
    assert _credential_files(node1) == []
    # The password is in no file of any run record: stdout, the events, env, artifacts.
    for run in (result, again, failed):
        leaked = [str(f) for f in run.record.rglob("*")
                  if f.is_file() and any(s in f.read_text(errors="ignore") for s in SECRETS)]
        assert leaked == [], leaked


def _messages(result) -> str:
    return "\n".join(str(e.get("event_data", {}).get("res", {}).get("msg", ""))
                     for e in events(result))


def _exported(result) -> bool:
    """Whether the play exported the stager's image to the controller."""
    return any(e.get("event") == "runner_on_ok"
               and e["event_data"].get("task") == "CANN image | Export the image on the stager"
               for e in events(result))


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
    base = _slim(node1, ref)
    extra = {"cann_image_source": "build", "cann_image_build_context": str(ctx),
             "cann_image_build_args": {"BASE": base},
             "cann_image_tag": "viabuild", "cann_image_cache_dir": str(tmp_path / "cache")}
    # --check with no earlier archive: says it would build, and builds nothing.
    checked = play(IMAGE_PLAY, site.inventory_dir, extravars=extra, check=True)
    assert checked.ok and checked.changed == 0, failure_text(checked)
    assert "would build the image on node1, then distribute it" in _messages(checked)
    assert _have(node1, "localhost/a3rl/cann-standin:viabuild") == ""
    result = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert result.ok, failure_text(result)
    assert _exported(result)
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
    assert not _exported(again)  # the stager's image ID did not change
    # As published (no project fix) the stand-in, like the recipe's, stops at the copy.
    published = play(IMAGE_PLAY, site.inventory_dir,
                     extravars={**extra, "cann_image_build_fixes": [],
                                "cann_image_tag": "published"})
    assert not published.ok
    assert "mooncake_installer.sh" in failure_text(published)
    # An edited Dockerfile builds again, and the new image is exported and sent.
    dockerfile = ctx / "Dockerfile.vllm_ascend.mindspeed.qwen3"
    dockerfile.write_text(dockerfile.read_text() + "\nLABEL a3rl.test=built-again\n")
    rebuilt = play(IMAGE_PLAY, site.inventory_dir, extravars=extra)
    assert rebuilt.ok, failure_text(rebuilt)
    assert _exported(rebuilt)
    newer = _have(node1, "localhost/a3rl/cann-standin:viabuild")
    assert newer and newer != want and _have(node2, "localhost/a3rl/cann-standin:viabuild") == newer
    [archive] = (tmp_path / "cache").glob("*.tar")
    assert archive_image_id(archive) == newer
