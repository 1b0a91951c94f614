"""Bring a simulated A3 cluster up and down.

Each node is a privileged podman container running systemd as PID 1 on a dedicated
network with fixed addresses (``node1..N``), reached by Ansible over real SSH with
recorded host keys. Everything the simulator makes carries the label
``a3rl.sim.cluster=<name>``, which is how ``down`` (and a later ``up`` after a crash)
finds exactly its own containers and networks and nothing else.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from a3rl.paths import project_root, sim_dir
from a3rl.planning import rolevars
from a3rl.sim import (
    cann,
    datasets_fixture,
    hub,
    inventory,
    podman,
    standins,
    upstreams,
    verl_image,
)
from a3rl.sim.image import ImageSpec, ensure_image

LABEL = "a3rl.sim.cluster"
# What a cluster's GRPO runs run (up(trainer=...)).
TRAINERS = ("verl", "standin")
DEFAULT_NAME = "sim"
SSH_READY_TIMEOUT = 120.0
# Where every node mounts the cluster's shared folder (.sim/<name>/shared).
SHARED_DIR = "/shared"
# Node containers started at once. bench/sim_up.py measured 4 at once 1.13x slower than
# one by one for 8 nodes (podman serialises on its locks; 2 cores), so: one by one.
START_PARALLEL = 1


@dataclass(frozen=True)
class Node:
    index: int
    hostname: str
    ip: str
    container: str


@dataclass(frozen=True)
class Cluster:
    """Names and addresses of one simulated cluster, derived from its name and size."""

    name: str
    nodes: int
    subnet: str

    @property
    def network(self) -> str:
        return f"a3rl-{self.name}"

    @property
    def state(self) -> Path:
        return sim_dir() / self.name

    @property
    def key(self) -> Path:
        return self.state / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state / "known_hosts"

    @property
    def standin_dir(self) -> Path:
        """Stand-in vendor packages (driver, firmware) made for this cluster."""
        return self.state / "standins"

    @property
    def inventory_dir(self) -> Path:
        if self.name == DEFAULT_NAME:
            return project_root() / "inventory" / "sim"
        return self.state / "inventory"

    def node_dir(self, node: Node) -> Path:
        return self.state / "nodes" / node.hostname

    def members(self) -> list[Node]:
        net = ipaddress.ip_network(self.subnet)
        base = net.network_address
        return [
            Node(i, f"node{i}", str(base + 10 + i), f"a3rl-{self.name}-node{i}")
            for i in range(1, self.nodes + 1)
        ]


def default_subnet(name: str) -> str:
    """A stable /24 per cluster name in 10.213.0.0/16, so two clusters never collide."""
    if name == DEFAULT_NAME:
        return "10.213.0.0/24"
    octet = 1 + int(hashlib.sha256(name.encode()).hexdigest(), 16) % 250
    return f"10.213.{octet}.0/24"


def _ensure_key(cluster: Cluster) -> None:
    cluster.state.mkdir(parents=True, exist_ok=True)
    if not cluster.key.is_file():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"a3rl-sim-{cluster.name}",
             "-f", str(cluster.key)],
            check=True,
        )


def _params(cluster: Cluster, npus: int) -> dict:
    """What a running cluster must match to be reused as it is."""
    return {"nodes": cluster.nodes, "subnet": cluster.subnet, "npus": npus, "shared": SHARED_DIR}


def _pins() -> dict:
    import yaml

    return yaml.safe_load((project_root() / "group_vars/all/versions.yml").read_text())


def _manifest() -> dict:
    import yaml

    path = project_root() / "group_vars/all/artifacts.yml"
    return yaml.safe_load(path.read_text())["a3rl_artifacts"]


def _write_standins(cluster: Cluster) -> list[Path]:
    """Stand-in driver and firmware packages at the project's pinned versions.

    Builds are byte-identical for the same versions, so rewriting them never shows up as
    a change to the roles that copy them.
    """
    pins = _pins()
    arch = os.uname().machine
    cluster.standin_dir.mkdir(parents=True, exist_ok=True)
    return [
        standins.build_driver_run(pins["a3rl_hdk_version"], cluster.standin_dir, arch),
        standins.build_firmware_run(pins["a3rl_npu_firmware_version"], cluster.standin_dir,
                                    arch, hdk_version=pins["a3rl_hdk_version"]),
    ]


def _ensure_network(cluster: Cluster) -> None:
    existing = podman.networks(f"{LABEL}={cluster.name}")
    if existing:
        subnets = [s.get("subnet") for s in existing[0].get("subnets") or []]
        if cluster.subnet in subnets:
            return
        podman.run(["network", "rm", "-f", existing[0]["name"]])
    want = ipaddress.ip_network(cluster.subnet)
    for other in podman.all_network_subnets():
        if ipaddress.ip_network(other, strict=False).overlaps(want):
            raise RuntimeError(
                f"subnet {cluster.subnet} overlaps podman network subnet {other}: "
                "pass another one with --subnet"
            )
    podman.run(["network", "create", "--subnet", cluster.subnet,
                "--label", f"{LABEL}={cluster.name}", cluster.network])


# The stand-in hccn_tool's simulated NPU ports (see tools/a3rl/sim/files/hdk-standin/hccn_tool).
HCCN_KNOBS = {
    "hccn-ip": "# <device> <address> <netmask>: each NPU port's live address (stand-in "
               "hccn_tool; -ip -s writes it); none = no address\n",
    "hccn-link": "# <device> DOWN: that NPU port has no link (stand-in hccn_tool); "
                 "empty = all UP\n",
    "hccn-health": "# <device> <net health status>: overrides the stand-in hccn_tool's; "
                   "empty = Success (Fault without link)\n",
    "hccn-init": "# <device|all> <seconds>: net health reads Init for that long after the "
                 "node booted (stand-in hccn_tool); empty = never\n",
}
# Where the stand-in driver installs hccn_tool on a node (the vendor's default path).
NODE_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"


def _write_node_conf(cluster: Cluster, node: Node, npus: int) -> Path:
    knobs = cluster.node_dir(node) / "etc-a3rl-sim"
    knobs.mkdir(parents=True, exist_ok=True)
    (knobs / "node.conf").write_text(f"# written by a3rl sim\nNPUS={npus}\n")
    health = knobs / "npu-health"
    if not health.exists():
        health.write_text("# <npu-id> <Health>, read by the stand-in npu-smi; empty = all OK\n")
    for knob, header in HCCN_KNOBS.items():
        if not (knobs / knob).exists():
            (knobs / knob).write_text(header)
    return knobs


def _start_node(cluster: Cluster, node: Node, image: str, npus: int) -> None:
    knobs = _write_node_conf(cluster, node, npus)
    ndir = cluster.node_dir(node)
    for sub in ("docker", "containers"):
        (ndir / sub).mkdir(parents=True, exist_ok=True)
    (cluster.state / "shared").mkdir(parents=True, exist_ok=True)
    podman.run([
        "run", "-d", "--name", node.container, "--hostname", node.hostname,
        "--label", f"{LABEL}={cluster.name}", "--label", f"a3rl.sim.node={node.hostname}",
        "--network", cluster.network, "--ip", node.ip,
        # systemd is PID 1, but podman's --systemd=always mode is off: on these cgroup v1
        # hosts it puts a *restarted* node's systemd into the host's name=systemd root
        # (and `podman exec` fails after that). The mounts systemd needs are given here.
        "--privileged", "--cgroupns=private", "--systemd=false", "--init=false",
        "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
        "--shm-size=512m",
        # A reboot inside the node (systemd exits) must bring the node back, as on hardware.
        "--restart=always",
        "-v", f"{cluster.key}.pub:/root/.ssh/authorized_keys:ro",
        "-v", f"{knobs}:/etc/a3rl-sim",
        # Engine storage on the host's filesystem: overlay works there, not on overlay.
        "-v", f"{ndir / 'docker'}:/var/lib/docker",
        "-v", f"{ndir / 'containers'}:/var/lib/containers",
        # Storage every node mounts with the same content (NFS on a real cluster), for the
        # tests of a3rl_shared_dir.
        "-v", f"{cluster.state / 'shared'}:{SHARED_DIR}",
        image,
    ])


def _ssh_port_open(ip: str) -> bool:
    try:
        with socket.create_connection((ip, 22), timeout=1):
            return True
    except OSError:
        return False


def _host_keys(node: Node) -> list[str]:
    """The node's public host keys, read through podman, not over the network."""
    out = podman.exec_(node.container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub").stdout
    return [line.split()[0] + " " + line.split()[1] for line in out.splitlines() if line.strip()]


def _wait_ssh(cluster: Cluster, nodes: list[Node], log: Callable[[str], None]) -> None:
    deadline = time.monotonic() + SSH_READY_TIMEOUT
    pending = list(nodes)
    while pending and time.monotonic() < deadline:
        pending = [n for n in pending if not _ssh_port_open(n.ip)]
        if pending:
            time.sleep(0.3)
    if pending:
        raise RuntimeError(
            "sshd did not come up on " + ", ".join(n.hostname for n in pending)
            + f" within {SSH_READY_TIMEOUT:.0f}s; see `podman logs <container>`"
        )
    lines = []
    for n in nodes:
        for key in _host_keys(n):
            lines.append(f"{n.ip} {key}")
    cluster.known_hosts.write_text("\n".join(lines) + "\n")
    # Prove key auth and the recorded host keys with the same ssh that Ansible uses.
    for n in nodes:
        probe = subprocess.run(_ssh_cmd(cluster, n, "true"), capture_output=True, text=True)
        if probe.returncode != 0:
            raise RuntimeError(f"{n.hostname}: SSH check failed: {probe.stderr.strip()}")
    log(f"SSH ready on {len(nodes)} node(s); host keys recorded in {cluster.known_hosts}")


def _ssh_cmd(cluster: Cluster, node: Node, *cmd: str) -> list[str]:
    return [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={cluster.known_hosts}", "-o", "ConnectTimeout=5",
        "-i", str(cluster.key), f"root@{node.ip}", *cmd,
    ]


def _running(cluster: Cluster) -> dict[str, dict]:
    return {c["Names"][0]: c for c in podman.containers(f"{LABEL}={cluster.name}")}


def up(
    name: str = DEFAULT_NAME,
    nodes: int = 2,
    subnet: str | None = None,
    npus: int | None = None,
    log: Callable[[str], None] = print,
    parallel: int = START_PARALLEL,
    trainer: str = "verl",
) -> Cluster:
    """Start (or reuse) a cluster of ``nodes`` nodes and write its inventory.

    ``trainer`` chooses the training image and what a GRPO run is: ``verl`` (the
    default, and ``a3rl demo``'s), the real-verl layer on the CANN image stand-in, so that
    GRPO runs real verl on CPU; ``standin``, the CANN image stand-in alone (the 2.9 GB
    layer is neither built nor loaded), so that every run uses the stand-in trainer.
    Switching an existing cluster rewrites its inventory; the next site.yml loads the image.

    A cluster that is already up with the same size and image is left as it is, so a
    repeated ``up`` changes nothing; anything else carrying the cluster's label (a stale
    or differently-sized earlier cluster) is removed first. ``npus`` defaults to the
    project's npus_per_node (group_vars/all/cluster.yml).
    """
    npus = rolevars.npus_per_node() if npus is None else npus
    problem = podman.available()
    if problem:
        raise RuntimeError(problem)
    if nodes < 1:
        raise ValueError("--nodes must be at least 1")
    if trainer not in TRAINERS:
        raise ValueError(f"trainer {trainer!r} is not one of {', '.join(TRAINERS)}")
    cluster = Cluster(name, nodes, subnet or default_subnet(name))
    image = ensure_image(ImageSpec(), log)
    # The training image: the CANN image stand-in, with the real-verl layer on top when
    # GRPO runs are to run real verl.
    cann_archive = cann.ensure_archive(image, log)
    if trainer == "verl":
        cann_archive = verl_image.ensure_archive(cann_archive, log)
    members = cluster.members()
    current = _running(cluster)
    want = {n.container for n in members}
    params = cluster.state / "cluster.json"
    healthy = (
        set(current) == want
        and all(c.get("State") == "running" and c.get("Image") == image for c in current.values())
        and cluster.known_hosts.is_file()
        and params.is_file() and json.loads(params.read_text()) == _params(cluster, npus)
    )
    if healthy:
        log(f"cluster {name!r} is already up with {nodes} node(s): reused")
        for n in members:
            _write_node_conf(cluster, n, npus)  # knob files added since the cluster was made
        _refresh_hccn_tool(cluster, members, log)
    else:
        if current:
            log(f"removing {len(current)} stale container(s) of cluster {name!r}")
            _remove_containers(cluster)
        # New nodes start empty, like freshly installed machines: no engine storage or
        # knobs left from an earlier cluster of this name.
        shutil.rmtree(cluster.state / "nodes", ignore_errors=True)
        shutil.rmtree(cluster.state / "shared", ignore_errors=True)
        _ensure_key(cluster)
        _ensure_network(cluster)
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(lambda n: _start_node(cluster, n, image, npus), members))
        _wait_ssh(cluster, members, log)
        log(f"{nodes} node(s) up in {time.monotonic() - t0:.1f}s")
    driver, firmware = _write_standins(cluster)
    packages = {"driver": driver, "firmware": firmware}
    hub_root = cluster.standin_dir / "hub"
    hub.write_models(hub_root)
    datasets_fixture.write_raw_datasets(hub_root)
    up = upstreams.build(log)
    manifest = _manifest()
    overrides = inventory.artifact_overrides(
        upstreams.manifest_overrides(up), packages, cann_archive,
        hub_root, manifest, os.uname().machine,
        wheelhouse=upstreams.wheelhouse_overrides(
            up, list(manifest.get("recipe_wheels", {}).get("constraints") or [])))
    inventory.write(cluster, members, packages, cann_archive, npus, overrides,
                    device_ips=inventory.device_ips(cluster.subnet, members, npus),
                    real_verl=trainer == "verl")
    (cluster.state / "cluster.json").write_text(json.dumps(_params(cluster, npus)) + "\n")
    return cluster


def build_images(log: Callable[[str], None] = print) -> list[cann.CannArchive]:
    """Build (once per content) every training image a cluster or a test may load: the
    CANN image stand-in, its real-verl layer (``up(trainer="verl")``) and its Ray 2.60
    layer (the token-authentication tests), with the node image they build on. Each
    build takes its own lock, so a ``up`` that needs one meanwhile waits for it instead
    of building it twice; what is already built is reused. The real-verl layer's wheels
    come first: they need only the network, not the images.

    ``make test`` starts this beside the tests (``tests/conftest.py``), so that the
    layers a fresh machine lacks are built while the first modules run, not inside the
    module that needs them. The Ray layer (about a minute) comes before the real-verl
    layer (about five): test_ray, which needs it, starts before test_train."""
    verl_image.wheels(log)
    base = cann.ensure_archive(ensure_image(ImageSpec(), log), log)
    ray = cann.ray_layer(base, cann.RAY_TOKEN_REQUIREMENTS, log)
    return [base, ray, verl_image.ensure_archive(base, log)]


def _remove_containers(cluster: Cluster, attempts: int = 3) -> None:
    """Remove the cluster's containers. podman 4.3 can fail a `rm -f` whose SIGKILL meets
    a container that stopped meanwhile ("container state improper: stopped"); the
    containers left are then stopped, and the next attempt removes them."""
    for attempt in range(1, attempts + 1):
        names = [c["Names"][0] for c in podman.containers(f"{LABEL}={cluster.name}")]
        if not names:
            return
        done = podman.run(["rm", "-f", "-t", "5", *names], timeout=300, check=attempt == attempts)
        if done.returncode == 0:
            return
        time.sleep(1)


def down(name: str = DEFAULT_NAME, log: Callable[[str], None] = print) -> None:
    """Remove every container, network and file the cluster ``name`` has; nothing else."""
    cluster = Cluster(name, 0, default_subnet(name))
    hosts = _inventory_hosts(cluster)
    _remove_containers(cluster)
    for net in podman.networks(f"{LABEL}={name}"):
        podman.run(["network", "rm", "-f", net["name"]])
    inv = cluster.inventory_dir
    if inv.exists():
        shutil.rmtree(inv)
    if cluster.state.exists():
        # Another `down` of the same name may be removing it too: not an error.
        shutil.rmtree(cluster.state, onerror=_gone_is_fine)
    # Ansible's SSH control sockets for these nodes would point at dead hosts (and a new
    # cluster of the same name reuses the addresses). Only these nodes' sockets: other
    # clusters' plays may be using theirs right now.
    for sock in control_sockets(project_root() / ".cache" / "cp", hosts):
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "a3rl-sim"],
                       capture_output=True, check=False, timeout=10)
        sock.unlink(missing_ok=True)
    log(f"cluster {name!r} removed")


def _gone_is_fine(func, path, exc_info) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def _inventory_hosts(cluster: Cluster) -> list[tuple[str, str]]:
    """(address, user) of each node in the cluster's inventory, if it has one."""
    import yaml

    path = cluster.inventory_dir / "hosts.yml"
    if not path.exists():
        return []
    gv = cluster.inventory_dir / "group_vars" / "a3_nodes.yml"
    user = str((yaml.safe_load(gv.read_text()) or {}).get("ansible_user", "root")
               if gv.exists() else "root")
    found: list[tuple[str, str]] = []
    groups = [(yaml.safe_load(path.read_text()) or {}).get("all", {})]
    while groups:
        group = groups.pop(0) or {}
        found += [(str(hv["ansible_host"]), user)
                  for hv in (group.get("hosts") or {}).values() if hv and hv.get("ansible_host")]
        groups += list((group.get("children") or {}).values())
    return found


def control_sockets(cp_dir: Path, hosts: list[tuple[str, str]]) -> list[Path]:
    """Ansible's ControlPath files for these (address, user) pairs: ansible-core names
    them sha1("<host>-<port>-<user>")[:10], with port None unless the inventory sets it."""
    out = []
    for host, user in hosts:
        for port in (None, 22):
            digest = hashlib.sha1(f"{host}-{port}-{user}".encode()).hexdigest()[:10]
            if (cp_dir / digest).exists():
                out.append(cp_dir / digest)
    return out


def status(name: str = DEFAULT_NAME) -> list[dict]:
    """One row per node: state, address, SSH reachability and stand-in NPU count."""
    rows = []
    for cname, c in sorted(_running(Cluster(name, 0, default_subnet(name))).items()):
        row = {"container": cname, "state": c.get("State"), "node": c.get("Labels", {}).get(
            "a3rl.sim.node", "?")}
        row["ip"] = ""
        if row["state"] == "running":
            ipout = podman.run(
                ["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                 cname], check=False).stdout.strip()
            row["ip"] = ipout
            row["ssh"] = _ssh_port_open(ipout) if ipout else False
            npus = podman.exec_(cname, "sh", "-c", "ls /dev | grep -c '^davinci[0-9]*$'",
                                check=False).stdout.strip()
            row["npus"] = int(npus) if npus.isdigit() else 0
        rows.append(row)
    return rows


def set_npu_health(name: str, node: str, npu: int, health: str) -> None:
    """Knob for tests: make the stand-in npu-smi report ``health`` for one NPU."""
    knob = sim_dir() / name / "nodes" / node / "etc-a3rl-sim" / "npu-health"
    if not knob.is_file():
        raise RuntimeError(f"no simulated node {node!r} in cluster {name!r}")
    lines = [ln for ln in knob.read_text().splitlines()
             if ln.startswith("#") or not ln.split() or ln.split()[0] != str(npu)]
    if health != "OK":
        lines.append(f"{npu} {health}")
    knob.write_text("\n".join(lines) + "\n")


def _refresh_hccn_tool(cluster: Cluster, members: list[Node], log: Callable[[str], None]) -> None:
    """A reused node whose stand-in driver predates the stand-in hccn_tool (or an older
    copy of it) gets the current one, where the driver package would have put it."""
    tool = standins.HCCN_TOOL.read_bytes()
    want = hashlib.sha256(tool).hexdigest()
    for n in members:
        have = podman.exec_(n.container, "sh", "-c",
                            f"test -d {NODE_HCCN_TOOL.rsplit('/', 1)[0]} || exit 3; "
                            f"sha256sum {NODE_HCCN_TOOL} 2>/dev/null || true", check=False)
        if have.returncode != 0 or have.stdout.split()[:1] == [want]:
            continue
        podman.run(["exec", "-i", n.container, "sh", "-c",
                    f"cat > {NODE_HCCN_TOOL}.new && chmod 0755 {NODE_HCCN_TOOL}.new && "
                    f"mv {NODE_HCCN_TOOL}.new {NODE_HCCN_TOOL}"], input=tool)
        log(f"{n.hostname}: stand-in hccn_tool refreshed in {NODE_HCCN_TOOL}")


def _knob_path(name: str, node: str, knob: str) -> Path:
    knobs = sim_dir() / name / "nodes" / node / "etc-a3rl-sim"
    if not knobs.is_dir():
        raise RuntimeError(f"no simulated node {node!r} in cluster {name!r}")
    return knobs / knob


def _set_device_line(name: str, node: str, knob: str, npu: int, value: str | None) -> None:
    """Replace device ``npu``'s line in a knob file (``value`` None removes it) and bring
    that port in line at once through the node's stand-in hccn_tool, when it has one."""
    path = _knob_path(name, node, knob)
    text = path.read_text() if path.exists() else HCCN_KNOBS.get(knob, "")
    lines = [ln for ln in text.splitlines()
             if ln.startswith("#") or not ln.split() or ln.split()[0] != str(npu)]
    if value is not None:
        lines.append(f"{npu} {value}")
    path.write_text("\n".join(lines) + "\n")
    podman.exec_(f"a3rl-{name}-{node}", "sh", "-c",
                 f"test -x {NODE_HCCN_TOOL} && {NODE_HCCN_TOOL} -i {npu} -link -g || true",
                 check=False)


def set_npu_link(name: str, node: str, npu: int, up: bool) -> None:
    """Knob for tests: take NPU port ``npu`` of ``node`` down (pulled cable) or back up."""
    _set_device_line(name, node, "hccn-link", npu, None if up else "DOWN")


def set_npu_net_health(name: str, node: str, npu: int, status: str = "Success") -> None:
    """Knob for tests: the net health hccn_tool reports for one port (Success restores)."""
    _set_device_line(name, node, "hccn-health", npu, None if status == "Success" else status)


def node_boot_time(name: str, node: str) -> float:
    """When the simulated node booted (its PID 1, systemd, started), as the stand-in
    hccn_tool reckons it: seconds since the epoch."""
    out = podman.exec_(f"a3rl-{name}-{node}", "sh", "-c",
                       "grep '^btime ' /proc/stat; cat /proc/1/stat; getconf CLK_TCK").stdout
    lines = out.splitlines()
    btime = int(lines[0].split()[1])
    ticks = int(lines[1].rsplit(")", 1)[1].split()[19])
    return btime + ticks / int(lines[2])


def set_npu_net_health_init(name: str, node: str, seconds: float | None,
                            devices: list[int] | None = None) -> None:
    """Knob for tests: the net health of ``devices`` (all when None) reads Init for
    ``seconds`` from now, as if the node had just booted (the window is counted from
    the node's boot, so it is set to the node's uptime plus ``seconds``); None: never."""
    path = _knob_path(name, node, "hccn-init")
    if seconds is None:
        path.write_text(HCCN_KNOBS["hccn-init"])
        return
    window = time.time() - node_boot_time(name, node) + seconds
    keys = [str(d) for d in devices] if devices is not None else ["all"]
    path.write_text(HCCN_KNOBS["hccn-init"] + "".join(f"{k} {window:.1f}\n" for k in keys))


def set_npu_device_ip(name: str, node: str, npu: int, address: str | None,
                      netmask: str = "255.255.255.0") -> None:
    """Knob for tests: the address NPU port ``npu`` actually has (None: no address), as if
    set by hand on the device, past the inventory's plan."""
    _set_device_line(name, node, "hccn-ip", npu,
                     None if address is None else f"{address} {netmask}")


def reset_npu_ports(name: str, node: str, addresses: list[str],
                    netmask: str = "255.255.255.0") -> None:
    """Knob for tests: every NPU port of ``node`` up, healthy, at ``addresses`` (device
    order), applied at once (one podman exec for the node)."""
    _knob_path(name, node, "hccn-link").write_text(HCCN_KNOBS["hccn-link"])
    _knob_path(name, node, "hccn-health").write_text(HCCN_KNOBS["hccn-health"])
    _knob_path(name, node, "hccn-init").write_text(HCCN_KNOBS["hccn-init"])
    _knob_path(name, node, "hccn-ip").write_text(
        HCCN_KNOBS["hccn-ip"] + "".join(f"{d} {a} {netmask}\n" for d, a in enumerate(addresses)))
    devices = " ".join(str(d) for d in range(len(addresses)))
    podman.exec_(f"a3rl-{name}-{node}", "sh", "-c",
                 f"test -x {NODE_HCCN_TOOL} || exit 0; "
                 f"for d in {devices}; do {NODE_HCCN_TOOL} -i $d -link -g >/dev/null; done",
                 check=False)


def npu_device_ip(name: str, node: str, npu: int) -> tuple[str, str] | None:
    """The address the knob file gives NPU port ``npu`` of ``node`` (None: none)."""
    path = _knob_path(name, node, "hccn-ip")
    for ln in (path.read_text() if path.exists() else "").splitlines():
        fields = ln.split("#", 1)[0].split()
        if fields[:1] == [str(npu)] and len(fields) >= 2:
            return fields[1], (fields[2] if len(fields) > 2 else "255.255.255.0")
    return None
