"""Write the simulated cluster's Ansible inventory.

Same groups and host variables as the real inventories (``inventory/a3_64``): one
``head``, the ``workers``, both under ``a3_nodes``; per host ``cluster_ip`` (and no
``cluster_nic``: preflight derives it, as it does for a real inventory that omits it).
Only what differs on the simulator goes into its group_vars, each line saying why.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from a3rl.files import sha256_file
from a3rl.planning import rolevars
from a3rl.sim import cpu_profile, upstreams

if TYPE_CHECKING:
    from a3rl.sim.cann import CannArchive
    from a3rl.sim.cluster import Cluster, Node

HEADER = "# Written by `a3rl sim up`; rewritten on every up, removed by `a3rl sim down`.\n"
# train_job's job profile on the simulator: the CPU profile unless the play turns it off.
PROFILE_SWITCH = "{{ a3rl_sim_cpu_profile if a3rl_sim_real_verl | bool else {} }}"


# The simulated NPU ports' addresses: 10.214.<the cluster subnet's third octet>.0/24,
# node k's device d at host part (k-1) * npus + d + 1. Each cluster has its own bridge,
# so the ports of two clusters never meet even where these subnets coincide.
DEVICE_NETMASK = "255.255.255.0"


def device_ips(cluster_subnet: str, nodes: list[Node], npus: int) -> dict[str, list[str]]:
    """The simulator's device-IP plan (``npu_device_ips`` per host), in device order."""
    third = ipaddress.ip_network(cluster_subnet).network_address.packed[2]
    if len(nodes) * npus > 254:
        raise ValueError(f"the simulated NPU subnet holds 254 ports: {len(nodes)} nodes x "
                         f"{npus} NPUs do not fit")
    return {n.hostname: [f"10.214.{third}.{k * npus + d + 1}" for d in range(npus)]
            for k, n in enumerate(nodes)}


def hosts(nodes: list[Node], device_plan: Mapping[str, list[str]] | None = None) -> dict:
    def entry(n: Node) -> dict:
        e = {"ansible_host": n.ip, "cluster_ip": n.ip}
        if device_plan and n.hostname in device_plan:
            e["npu_device_ips"] = list(device_plan[n.hostname])
        return e

    return {
        "all": {
            "children": {
                "a3_nodes": {
                    "children": {
                        "head": {"hosts": {nodes[0].hostname: entry(nodes[0])}},
                        "workers": {"hosts": {n.hostname: entry(n) for n in nodes[1:]}},
                    }
                }
            }
        }
    }


def group_vars(cluster: Cluster, packages: Mapping[str, Path] | None = None,
               cann_archive: CannArchive | None = None, npus: int | None = None,
               real_verl: bool = True) -> dict:
    from a3rl.sim.cluster import SHARED_DIR  # cluster imports this module

    npus = rolevars.npus_per_node() if npus is None else npus
    packages = packages or {}
    gv = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(cluster.key),
        # Host keys were read from each node through podman and recorded here.
        "ansible_ssh_common_args": (
            f"-o UserKnownHostsFile={cluster.known_hosts} -o StrictHostKeyChecking=yes"
        ),
        "npus_per_node": npus,
        "a3rl_simulated": True,
        # STAND-IN vendor packages (NPU driver and firmware .run) written by `sim up`.
        "a3rl_sim_standin_dir": str(cluster.standin_dir),
        "a3rl_default_model": "qwen3_32b",
        # Simulated nodes are containers on the build host's architecture.
        "preflight_supported_architectures": ["aarch64", "x86_64"],
        # The nodes share the host's disk: ask only for what the simulator itself writes.
        "preflight_disk_requirements": [
            {"path": "/var/lib/docker", "min_free_gb": 5, "what": "the training image"},
            {"path": "/data", "min_free_gb": 5, "what": "datasets, model files, checkpoints"},
        ],
        # Nodes are containers sharing the host's boot_id; PID 1's start time (in clock
        # ticks since the host booted) changes when a node reboots.
        "npu_driver_boot_time_command": "cut -d' ' -f22 /proc/1/stat",
        # podman caps the nodes' open files at 16384 (no CAP_SYS_RESOURCE on this host).
        "recipe_env_open_files": 16384,
        # Recipe drift against the STAND-IN recipe: its patch series at its pin, and the
        # open-files limit above as this site's deviation from the recipe's 32768.
        "a3rl_recipe_reviewed_patches": upstreams.reviewed_patches(),
        "a3rl_recipe_site_deviations": [
            {"area": "env", "key": "ulimit -n", "recipe": "32768",
             "reason": "podman caps the simulated nodes' open files at 16384"}],
        # Ray on 2 host cores shared by all nodes: two logical CPUs (a real-verl worker and
        # verl's TaskRunner on one node) and a 100 MB object store each.
        "ray_cluster_num_cpus": 2,
        "ray_cluster_object_store_bytes": 100_000_000,
        # Checkpoints on the folder every simulated node mounts from the host (/shared, the
        # same content on each), mounted into the training containers: a resume on either
        # node finds the whole checkpoint, as on a cluster's shared storage.
        "a3rl_checkpoint_dir": f"{SHARED_DIR}/checkpoints",
        "a3rl_checkpoint_shared": True,
        "training_container_extra_volumes": [f"{SHARED_DIR}:{SHARED_DIR}"],
        # The space check: the stand-in trainer writes no checkpoint, and real verl on CPU
        # saves the tiny model's (a few MB), not the published model's 459 GB.
        "train_job_checkpoint_bytes": 10_000_000,
        # The simulator's steps take seconds, not hours: the run supervisor looks often.
        "run_supervisor_poll": 3,
        # The stand-in hccn_tool keeps each die's port in the node's network namespaces,
        # which a training container does not share: the supervisor's whole-cluster check
        # reads Ray and npu-smi here; its net-health rule is tested by the unit tests only.
        "run_supervisor_net_check": False,
        # The stand-in image has no MindSpeed operators to pre-compile.
        "ray_cluster_pre_start_command": "",
        # A worker whose head is unreachable gives up after 15 s and starts again.
        "ray_cluster_gcs_reconnect_timeout_s": 15,
        # The training job's module: the STAND-IN trainer in the stand-in image, which
        # does everything verl's entrypoint does but the NPU math (a3rl_standin_trainer).
        "train_job_module_override": "a3rl_standin_trainer",
        # GRPO runs go to REAL verl 0.6.0 on CPU instead: the plan's CPU profile
        # (a3rl.sim.cpu_profile), with the CPU stand-in layer, in the real-verl image layer
        # (a cluster made with trainer="standin" has no such layer: the stand-in trainer).
        # The profile is data, a job profile train_job applies as it would a site's
        # (a3rl.planning.job_profile); -e a3rl_sim_real_verl=false turns it off for a play.
        "a3rl_sim_cpu_profile": cpu_profile.profile(),
        "a3rl_sim_real_verl": real_verl,
        "train_job_profile": PROFILE_SWITCH,
        # Real verl on CPU counts logical GPUs and reserves a custom `cpu` resource per
        # worker (one per node); two logical CPUs per node fit a worker beside verl's
        # TaskRunner (shared/reference/verl-cpu.md).
        "ray_cluster_num_gpus": 1,
        "ray_cluster_extra_resources": {"cpu": 1},
        # The stand-in NPU ports start without addresses, as new hardware does; the
        # inventory's plan (npu_device_ips per host) is applied by site.yml.
        "npu_device_netmask": DEVICE_NETMASK,
        "npu_network_configure": True,
        # The all-reduce test's STAND-IN (a timed TCP ring between the nodes, no NPU):
        # small sizes, and a floor a podman bridge on 2 shared cores clears.
        "npu_network_bandwidth_args": ["-b", "1M", "-e", "16M", "-f", "2", "-d", "fp32",
                                       "-o", "sum", "-w", "2", "-n", "5"],
        "npu_network_bandwidth_min_busbw_gbs": 0.01,
        "npu_network_bandwidth_timeout": 300,
    }
    for kind, path in packages.items():
        gv[f"npu_driver_{kind}_src"] = str(path)
        gv[f"npu_driver_{kind}_sha256"] = sha256_file(path)
    if cann_archive is not None:
        # STAND-IN for the CANN training image, handed over as an offline archive.
        gv.update({
            "a3rl_training_image_name": cann_archive.name,
            "a3rl_training_image_tag": cann_archive.tag,
            "cann_image_source": "tarball",
            "cann_image_tarball": str(cann_archive.path),
            "cann_image_tarball_sha256": cann_archive.sha256,
        })
    return gv


def artifact_overrides(upstream: Mapping[str, dict], packages: Mapping[str, Path],
                       cann_archive: CannArchive | None, hub_root: Path | None,
                       manifest: Mapping[str, dict], arch: str,
                       wheelhouse: Mapping | None = None) -> dict:
    """``a3rl_artifact_overrides`` of the simulator: where each manifest entry comes from.

    The frameworks and the recipe are the simulator's STAND-IN upstream repositories
    (``a3rl.sim.upstreams``); the wheelhouse is for the stand-in image's Python on this
    host's architecture, with ``wheelhouse`` (the stand-in packages' folder and
    constraints, ``upstreams.wheelhouse_overrides``); vendor packages and the image
    archive are the stand-ins ``sim up`` wrote. Datasets and models are STAND-IN hub
    repositories (``a3rl.sim.hub``, ``a3rl.sim.datasets_fixture``) handed over as
    folders on the controller, the way a site hands over files it already has (the hubs
    are not reachable here); the tests serve the same folders through the stand-in hub
    to run ModelScope's client.
    """
    ov: dict = {name: dict(spec) for name, spec in upstream.items()}
    ov["recipe_wheels"] = {"platforms": [f"manylinux2014_{arch}", "any"], "python_version": "3.11",
                           **(wheelhouse or {})}
    entry = {"driver": "npu_driver", "firmware": "npu_firmware"}
    for kind, path in packages.items():
        ov[entry[kind]] = {"path": str(path), "sha256": sha256_file(path)}
    if cann_archive is not None:
        ov["cann_image"] = {"path": str(cann_archive.path), "sha256": cann_archive.sha256}
    if hub_root is not None:
        for name, spec in manifest.items():
            # ModelScope entries, and files the site provides that the stand-in hub holds.
            if spec.get("kind") == "modelscope" or (spec.get("obtain") and spec.get("id")):
                ov[name] = {"kind": "file", "path": str(hub_repo(hub_root, spec)),
                            # the stand-ins are small: no disk-space floor
                            "size": 0}
    return ov


def hub_repo(root: Path, spec: Mapping) -> Path:
    """The stand-in hub folder of a ModelScope manifest entry."""
    kind = "datasets" if spec.get("repo_type") == "dataset" else "models"
    return root / kind / str(spec["id"])


def write(cluster: Cluster, nodes: list[Node], packages: Mapping[str, Path] | None = None,
          cann_archive: CannArchive | None = None, npus: int | None = None,
          overrides: Mapping | None = None,
          device_ips: Mapping[str, list[str]] | None = None, real_verl: bool = True) -> None:
    inv = cluster.inventory_dir
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text(
        HEADER + "---\n" + yaml.safe_dump(hosts(nodes, device_ips), sort_keys=False, width=1000)
    )
    gv = group_vars(cluster, packages, cann_archive, npus, real_verl)
    # The controller's artifact store of this cluster (fetched into from the stand-ins).
    gv["a3rl_artifact_dir"] = str(cluster.state / "store")
    (inv / "group_vars" / "a3_nodes.yml").write_text(
        HEADER + "---\n" + yaml.safe_dump(gv, sort_keys=False, width=1000))
    # group_vars/all: the bundle play runs on localhost, which only the `all` group reaches.
    (inv / "group_vars" / "all.yml").write_text(
        HEADER + "---\n" + yaml.safe_dump({"a3rl_artifact_overrides": dict(overrides or {})},
                                          sort_keys=False, width=1000))
