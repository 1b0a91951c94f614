"""Simulator pieces that need no containers: image identity, addressing, inventory."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

import pytest
import yaml

from a3rl.sim import cluster, inventory
from a3rl.sim.image import FILES, NODE_REQUIREMENTS, ImageSpec


def _spec_copy(tmp_path: Path) -> ImageSpec:
    files = tmp_path / "files"
    shutil.copytree(FILES, files)
    req = tmp_path / "req.txt"
    req.write_text(NODE_REQUIREMENTS.read_text())
    return ImageSpec(files_root=files, requirements=req)


def test_image_digest_is_stable_and_content_addressed(tmp_path):
    spec = _spec_copy(tmp_path)
    assert spec.digest() == _spec_copy(tmp_path / "again").digest()
    assert spec.digest() == ImageSpec().digest()  # same content as the real inputs
    before = spec.digest()
    (spec.files_root / "etc/a3rl-sim/README").write_text("changed\n")
    assert spec.digest() != before


def test_image_digest_follows_pins_and_packages_not_mirror(tmp_path):
    spec = _spec_copy(tmp_path)
    base = spec.digest()
    assert ImageSpec(files_root=spec.files_root, requirements=spec.requirements,
                     mirror="http://elsewhere/debian").digest() == base
    assert ImageSpec(files_root=spec.files_root, requirements=spec.requirements,
                     packages=("python3",)).digest() != base
    pins = spec.requirements.read_text()
    spec.requirements.write_text(pins.replace("ray==2.48.0", "ray==2.47.1"))
    assert spec.digest() != base


def test_ray_pinned_at_recipe_version():
    pins = [ln for ln in NODE_REQUIREMENTS.read_text().splitlines()
            if ln and not ln.startswith("#")]
    assert "ray==2.48.0" in pins
    assert all("==" in p for p in pins)


def test_subnets_stable_and_distinct():
    assert cluster.default_subnet("sim") == "10.213.0.0/24"
    assert cluster.default_subnet("a") == cluster.default_subnet("a")
    nets = {cluster.default_subnet(n) for n in ("pytest", "pytest-life", "bench")}
    assert len(nets) == 3
    for n in nets:
        assert ipaddress.ip_network(n).subnet_of(ipaddress.ip_network("10.213.0.0/16"))


def test_members_addresses_and_names():
    c = cluster.Cluster("x", 3, "10.213.9.0/24")
    assert [(m.hostname, m.ip, m.container) for m in c.members()] == [
        ("node1", "10.213.9.11", "a3rl-x-node1"),
        ("node2", "10.213.9.12", "a3rl-x-node2"),
        ("node3", "10.213.9.13", "a3rl-x-node3"),
    ]


def test_inventory_has_the_real_inventories_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "sim_dir", lambda: tmp_path)
    c = cluster.Cluster("inv", 3, "10.213.9.0/24")
    inventory.write(c, c.members())
    hosts = yaml.safe_load((c.inventory_dir / "hosts.yml").read_text())
    groups = hosts["all"]["children"]["a3_nodes"]["children"]
    assert list(groups["head"]["hosts"]) == ["node1"]
    assert list(groups["workers"]["hosts"]) == ["node2", "node3"]
    assert groups["workers"]["hosts"]["node3"] == {"ansible_host": "10.213.9.13",
                                                   "cluster_ip": "10.213.9.13"}
    real = yaml.safe_load(Path("inventory/a3_16/hosts.yml").read_text())
    assert set(real["all"]["children"]["a3_nodes"]["children"]) == set(groups)
    gv = yaml.safe_load((c.inventory_dir / "group_vars/a3_nodes.yml").read_text())
    assert f"UserKnownHostsFile={c.known_hosts}" in gv["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in gv["ansible_ssh_common_args"]


def test_down_finds_exactly_its_nodes_ssh_control_sockets(tmp_path, monkeypatch):
    """`sim down` removes its own nodes' ControlPath files and no other cluster's: the
    names are ansible-core's own (its ssh plugin's _create_control_path)."""
    from ansible.plugins.connection.ssh import Connection

    monkeypatch.setattr(cluster, "sim_dir", lambda: tmp_path / ".sim")
    mine = cluster.Cluster("one", 2, "10.213.90.0/24")
    inventory.write(mine, mine.members())
    ours = cluster._inventory_hosts(mine)
    assert ours == [("10.213.90.11", "root"), ("10.213.90.12", "root")]
    cp = tmp_path / "cp"
    cp.mkdir()
    for host in ("10.213.90.11", "10.213.90.12", "10.213.91.11"):
        name = Connection._create_control_path(host, None, "root") % {"directory": str(cp)}
        Path(name).write_text("")
    found = cluster.control_sockets(cp, ours)
    expected = {Path(Connection._create_control_path(h, None, "root") % {"directory": str(cp)})
                for h, _ in ours}
    assert set(found) == expected and len(found) == 2


def test_removing_the_nodes_tries_again_when_podman_fails_a_kill_race(monkeypatch):
    """podman 4.3's `rm -f` fails when its SIGKILL meets a container that stopped in the
    meantime (seen in CI-like runs); the stopped containers go on the next attempt, and a
    failure that persists is raised."""
    import subprocess

    from a3rl.sim import podman

    left = ["a3rl-t-node1", "a3rl-t-node2"]
    calls = []

    def run(args, **kw):
        calls.append((args, kw.get("check", True)))
        if len(calls) == 1:  # the race: podman fails, the containers are stopped by then
            return subprocess.CompletedProcess(args, 2, "", "container state improper")
        left.clear()
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(podman, "containers", lambda _f: [{"Names": [n]} for n in left])
    monkeypatch.setattr(podman, "run", run)
    monkeypatch.setattr(cluster.time, "sleep", lambda _s: None)
    cluster._remove_containers(cluster.Cluster("t", 0, "10.9.9.0/24"))
    # The first attempts do not raise; only the last one would.
    assert calls == [(["rm", "-f", "-t", "5", "a3rl-t-node1", "a3rl-t-node2"], False)] * 2
    assert left == []

    calls.clear()
    left[:] = ["a3rl-t-node1"]
    monkeypatch.setattr(podman, "run", lambda args, **kw: (
        (_ for _ in ()).throw(podman.PodmanError("still failing")) if kw.get("check", True)
        else subprocess.CompletedProcess(args, 2, "", "")))
    with pytest.raises(podman.PodmanError, match="still failing"):
        cluster._remove_containers(cluster.Cluster("t", 0, "10.9.9.0/24"))
