"""Bad input, each case refused before any node changes: the play fails with a message
that names the host (or the controller, or the inventory) and the fix, reports
``changed=0``, and every node is as it was (files, devices, container start times).

Cases already proved elsewhere (two heads, duplicate IPs, a wrong NIC, a missing device,
an unknown host key, hostile cache paths, ...) are rows of docs/reliability.md pointing at
their tests (``reliability_plugin.POINTERS``), not repeated here.

The nodes need not be provisioned: every case is refused before a stage would change
them. One change marker is set for the module; each case then reads what changed since
it (``conftest.changes``: entries newer than the marker, the busy folders' names, the
devices, the start times), which must equal what it read right after the mark (a file
changed by any case would be newer than the marker in every later read too, so a failing
case re-marks for the next one).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from a3rl.sim import podman

from .conftest import changes, failure_text, mark, play
from .reliability_plugin import row

SITE = "site.yml"
TRAIN = "playbooks/train.yml"
RAY = "playbooks/ray.yml"
CLEAN = "playbooks/cache_clean.yml"
ENV = "playbooks/recipe_env.yml"
ZERO = "0" * 64

Edit = Callable[[Path, object], None]  # (inventory copy, the cluster)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _hosts(fn: Callable[[dict, object], None]) -> Edit:
    def edit(inv: Path, sim) -> None:
        path = inv / "hosts.yml"
        data = _load(path)
        fn(data["all"]["children"]["a3_nodes"]["children"], sim)
        path.write_text(yaml.safe_dump(data))
    return edit


def _node2(key: str, value) -> Edit:
    def fn(groups, _sim):
        groups["workers"]["hosts"]["node2"][key] = value
    return _hosts(fn)


def _group_vars(**values) -> Edit:
    def edit(inv: Path, _sim) -> None:
        path = inv / "group_vars" / "a3_nodes.yml"
        data = _load(path)
        data.update(values)
        path.write_text(yaml.safe_dump(data))
    return edit


def _artifact(name: str, **values) -> Edit:
    """Merge ``values`` into the inventory's override of artifact ``name``."""
    def edit(inv: Path, _sim) -> None:
        path = inv / "group_vars" / "all.yml"
        data = _load(path)
        data.setdefault("a3rl_artifact_overrides", {}).setdefault(name, {}).update(values)
        path.write_text(yaml.safe_dump(data))
    return edit


def _no_head(groups, _sim):
    groups["workers"]["hosts"].update(groups["head"]["hosts"])
    groups["head"]["hosts"] = {}


def _outside(groups, _sim):
    groups["spare"] = {"hosts": {"node2": groups["workers"]["hosts"].pop("node2")}}


def _no_ip(groups, _sim):
    del groups["workers"]["hosts"]["node2"]["cluster_ip"]


def _same_address(groups, _sim):
    groups["workers"]["hosts"]["node2"]["ansible_host"] = \
        groups["head"]["hosts"]["node1"]["ansible_host"]


def _foreign_ip(groups, sim):
    # In the cluster's subnet, on no node: the inventory says an address the node lacks.
    groups["workers"]["hosts"]["node2"]["cluster_ip"] = _spare_address(sim)


def _unreachable(groups, sim):
    groups["workers"]["hosts"]["node2"]["ansible_host"] = _spare_address(sim)


def _head_outside_top(inv: Path, sim) -> None:
    path = inv / "hosts.yml"
    data = _load(path)
    children = data["all"]["children"]["a3_nodes"]["children"]
    data["all"]["children"]["head"] = children.pop("head")
    path.write_text(yaml.safe_dump(data))


def _one_machine_twice(inv: Path, sim) -> None:
    """node2's entry reaches node1's machine by another name for its address (its 32-bit
    number, which ssh resolves like the dotted form), known to ssh under that name too."""
    path = inv / "hosts.yml"
    data = _load(path)
    groups = data["all"]["children"]["a3_nodes"]["children"]
    addr = groups["head"]["hosts"]["node1"]["ansible_host"]
    alias = str(int(ipaddress.IPv4Address(addr)))
    groups["workers"]["hosts"]["node2"]["ansible_host"] = alias
    path.write_text(yaml.safe_dump(data))
    known = Path(sim.known_hosts).read_text().splitlines()
    extra = [alias + line[len(addr):] for line in known if line.startswith(addr + " ")]
    (inv / "known_hosts").write_text("\n".join(known + extra) + "\n")
    gv = inv / "group_vars" / "a3_nodes.yml"
    data = _load(gv)
    data["ansible_ssh_common_args"] = data["ansible_ssh_common_args"].replace(
        str(sim.known_hosts), str(inv / "known_hosts"))
    gv.write_text(yaml.safe_dump(data))


def _rename_node2(name: str):
    def fn(groups, _sim):
        hosts = groups["workers"]["hosts"]
        hosts[name] = hosts.pop("node2")
    return fn


def _spare_address(sim) -> str:
    return str(ipaddress.ip_network(sim.subnet).network_address + 99)


@dataclass(frozen=True)
class Case:
    refused_by: str
    playbook: str
    expect: tuple[str, ...]  # every one of these is in the failure messages
    edit: Edit | None = None
    extravars: dict = field(default_factory=dict)
    host: str = ""  # the host the failure is reported on, when not named in the message
    # Checked only where the NPU driver is installed (it creates the devices): the case
    # installs it first where missing.
    needs_driver: bool = False


CASES: dict[str, Case] = {
    # --- the inventory, checked by preflight on the controller ---
    "no head": Case("preflight (inventory)", SITE, (
        "inventory: the 'head' group must hold exactly one host (found 0: none)",
        "Fix: keep one host under 'head'"), _hosts(_no_head)),
    "a node in neither head nor workers": Case("preflight (inventory)", SITE, (
        "node2: is in 'a3_nodes' but in neither 'head' nor 'workers'. Fix: add it to 'workers'",
    ), _hosts(_outside)),
    "no cluster_ip": Case("preflight (inventory)", SITE, (
        "node2: has no 'cluster_ip'. Fix: set cluster_ip",), _hosts(_no_ip)),
    "a cluster_ip that is not IPv4": Case("preflight (inventory)", SITE, (
        "node2: cluster_ip '10.213.0.300' is not an IPv4 address. Fix:",),
        _node2("cluster_ip", "10.213.0.300")),
    "two entries for one machine (ansible_host)": Case("preflight (inventory)", SITE, (
        "node2: ansible_host", "is also used by node1", "Fix: correct ansible_host"),
        _hosts(_same_address)),
    "npus_per_node not a number": Case("preflight (inventory)", SITE, (
        "node2: npus_per_node 'sixteen' is not a positive whole number. Fix:",),
        _node2("npus_per_node", "sixteen")),
    "npus_per_node negative": Case("preflight (inventory)", SITE, (
        "node2: npus_per_node -16 is not a positive whole number. Fix:",),
        _node2("npus_per_node", -16)),
    # --- each node, checked by preflight over SSH ---
    "npus_per_node not matching the devices": Case("preflight (node)", SITE, (
        "node2: found 16 NPU devices, expected npus_per_node=8",
        "Fix: check the NPUs with `npu-smi info`", "Preflight failed on node2"),
        _node2("npus_per_node", 8), needs_driver=True),
    "a cluster_ip on no interface of the node": Case("preflight (node)", SITE, (
        "node2: cluster_ip 10.213.", "is not on any interface of the node",
        "Fix: set cluster_ip to one of these"), _hosts(_foreign_ip)),
    "an unreachable node": Case("preflight (SSH)", SITE, (
        "node2: unreachable over SSH at 10.213.", "Fix: check that the node is up",
        "Preflight failed on node2"), _hosts(_unreachable)),
    "an unsupported architecture": Case("preflight (node)", SITE, (
        "node1: architecture x86_64 is not supported here (supported: aarch64). Fix:",
        "node2: architecture x86_64"),
        _group_vars(preflight_supported_architectures=["aarch64"])),
    "too little disk": Case("preflight (node)", SITE, (
        "node1: filesystem / has", "100000 GB needed for /data (weights). Fix: free space",
        "node2: filesystem / has"),
        _group_vars(preflight_disk_requirements=[
            {"path": "/data", "min_free_gb": 100000, "what": "weights"}])),
    # recipe_env.yml checks the settings first, as preflight does (the role's own check
    # after it names the same key).
    "an env variable name that is not a shell name": Case("recipe_env settings", ENV, (
        "node1, node2: recipe_env_extra: 'MY VAR' is not a shell variable name",
        "Fix: rename it in the inventory"), _group_vars(recipe_env_extra={"MY VAR": "1"}),
        host="node1"),
    # --- the artifacts, secrets and settings the stages read on the controller ---
    "an unknown artifact kind": Case("preflight (controller)", SITE, (
        "controller: artifact verl: kind is 'svn'", "Fix: correct the entry"),
        _artifact("verl", kind="svn")),
    "a hostile artifact dest (../..)": Case("preflight (controller)", SITE, (
        "controller: artifact gsm8k: dest '../../etc/gsm8k' must be a relative path inside "
        "the store", "Fix:"), _artifact("gsm8k", dest="../../etc/gsm8k")),
    "a malformed sha256": Case("preflight (controller)", SITE, (
        "controller: artifact npu_firmware: sha256 'abc' is not 64 lowercase hex digits",
        "Fix:"), _artifact("npu_firmware", sha256="abc")),
    "a missing artifact": Case("preflight (controller)", SITE, (
        "controller: artifact gsm8k: path /nonexistent/gsm8k does not exist on the controller",
        "Fix: put the file or folder there"), _artifact("gsm8k", path="/nonexistent/gsm8k")),
    "a wrong checksum (driver package)": Case("preflight (controller)", SITE, (
        "controller: artifact npu_driver:", f"the manifest says {ZERO}",
        "Fix: replace the file"), _artifact("npu_driver", sha256=ZERO)),
    "a wrong checksum (image archive)": Case("preflight (controller)", SITE, (
        "controller: artifact cann_image:", f"the manifest says {ZERO}", "Fix:"),
        _artifact("cann_image", sha256=ZERO)),
    "an unreachable artifact URL": Case("preflight (controller)", SITE, (
        "controller: artifact deepscaler: http://127.0.0.1:9/deepscaler.json cannot be "
        "reached from the controller", "Connection refused", "Fix: check the URL"),
        _artifact("deepscaler", kind="http", url="http://127.0.0.1:9/deepscaler.json",
                  dest="raw/deepscaler.json", sha256=ZERO)),
    "a missing Vault secret (registry password)": Case("preflight (controller)", SITE, (
        "controller: cann_image_registry_username is 'robot' but cann_image_registry_password "
        "is empty or undefined", "Fix: put the password in Ansible Vault"),
        _group_vars(cann_image_source="registry",
                    cann_image_registry_ref="registry.example.com/ascend/cann:8.5.0-a3",
                    cann_image_registry_username="robot",
                    cann_image_registry_password="{{ vault_cann_registry_password }}")),
    "token auth with a Ray that lacks it": Case("preflight (controller)", SITE, (
        "controller: ray_cluster_auth is 'token' but Ray 2.48.0 has no token authentication",
        "Fix: use an image with Ray >= 2.52.0"), _group_vars(ray_cluster_auth="token")),
    # --- a training run, checked by its plan before anything is submitted ---
    "an unknown algorithm": Case("train settings", TRAIN, (
        "node1, node2: algo 'ppo' is not one of grpo, dapo (the role train_job reads it)",
        "Fix: set algo to one of them"),
        extravars={"algo": "ppo"}, host="node1"),
    "an unknown model": Case("train plan", TRAIN, (
        "unknown model 'qwen3_8b': use one of qwen3_235b, qwen3_32b", "Fix: change -e"),
        extravars={"algo": "grpo", "model": "qwen3_8b"}, host="node1"),
    "unknown weights": Case("train settings", TRAIN, (
        "node1, node2: weights 'fp8' is not one of real, random (the role model_weights reads",
        "Fix: set weights to one of them"),
        extravars={"algo": "grpo", "weights": "fp8"}, host="node1"),
    "conflicting features": Case("train plan", TRAIN, (
        "features npugraph_ex and resampler cannot be used together", "Fix: change -e"),
        extravars={"algo": "grpo", "features": "npugraph_ex,resampler",
                   "overrides": ["data.shuffle=False", "data.dataloader_num_workers=0"]},
        host="node1"),
    "too few nodes for the model": Case("train plan", TRAIN, (
        "Qwen3-235B-A22B needs at least 128 NPUs (8 nodes x 16); this plan has 32 (2 x 16)",
        "Fix: change -e"), extravars={"algo": "grpo", "model": "qwen3_235b"}, host="node1"),
    "a parallel size that does not divide": Case("train plan", TRAIN, (
        "rollout tensor parallel size 3 does not divide the 32 NPUs", "Fix: change -e"),
        extravars={"algo": "grpo", "overrides": [
            "actor_rollout_ref.rollout.tensor_model_parallel_size=3"]}, host="node1"),
    "a negative size": Case("train plan", TRAIN, (
        "train_batch_size must be a positive whole number, not -4", "Fix: change -e"),
        extravars={"algo": "grpo", "overrides": ["data.train_batch_size=-4"]}, host="node1"),
    "a non-integer size": Case("train plan", TRAIN, (
        "max_response_length must be a positive whole number, not 1.5", "Fix: change -e"),
        extravars={"algo": "grpo", "overrides": ["data.max_response_length=1.5"]},
        host="node1"),
    "SAM with random weights": Case("train plan", TRAIN, (
        "feature sam needs real weights; this run has random weights (drop it: no-sam)",),
        extravars={"algo": "grpo", "model": "qwen3_235b", "weights": "random",
                   "features": "sam"}, host="node1"),
    "a derived value set by hand": Case("train plan", TRAIN, (
        "trainer.nnodes is computed from the node count; set that instead",),
        extravars={"algo": "grpo", "overrides": ["trainer.nnodes=3"]}, host="node1"),
    "an unknown train action": Case("train settings", TRAIN, (
        "node1, node2: train_job_action 'restart' is not one of submit, stop, status",
        "Fix: set train_job_action to one of them"),
        extravars={"algo": "grpo", "train_job_action": "restart"}, host="node1"),
    "an input name of an earlier release": Case("train arguments", TRAIN, (
        "-e action= is no longer read (it was renamed). Fix: pass -e train_job_action=stop",),
        extravars={"algo": "grpo", "action": "stop"}, host="node1"),
    # --- issue 25: values that crashed with a traceback or passed silently ---
    "npus_per_node a superscript digit": Case("preflight (inventory)", SITE, (
        "node2: npus_per_node '²' is not a positive whole number. Fix:",),
        _node2("npus_per_node", "²")),
    "npus_per_node in Arabic-Indic digits": Case("preflight (inventory)", SITE, (
        "node2: npus_per_node '١٦' is not a positive whole number. Fix:",),
        _node2("npus_per_node", "١٦")),
    "a loopback cluster_ip": Case("preflight (inventory)", SITE, (
        "node2: cluster_ip 127.0.0.1 is a loopback address", "Fix: set cluster_ip"),
        _node2("cluster_ip", "127.0.0.1")),
    "the broadcast address as cluster_ip": Case("preflight (inventory)", SITE, (
        "node2: cluster_ip 255.255.255.255 is the broadcast address", "Fix:"),
        _node2("cluster_ip", "255.255.255.255")),
    "a multicast cluster_ip": Case("preflight (inventory)", SITE, (
        "node2: cluster_ip 224.0.0.1 is a multicast address", "Fix:"),
        _node2("cluster_ip", "224.0.0.1")),
    "a link-local cluster_ip": Case("preflight (inventory)", SITE, (
        "node2: cluster_ip 169.254.10.20 is a link-local address", "Fix:"),
        _node2("cluster_ip", "169.254.10.20")),
    "the unspecified address as cluster_ip": Case("preflight (inventory)", SITE, (
        "node2: cluster_ip 0.0.0.0 is the unspecified address", "Fix:"),
        _node2("cluster_ip", "0.0.0.0")),
    "a head outside a3_nodes": Case("preflight (inventory)", SITE, (
        "node1: is in 'head' but not under 'a3_nodes'", "Fix: put the 'head' group under"),
        _head_outside_top),
    "a Ray port that is not a number": Case("preflight (inventory)", SITE, (
        "node1, node2: ray_cluster_gcs_port 'abc' is not a TCP port", "Fix: set"),
        _group_vars(ray_cluster_gcs_port="abc")),
    "a Ray port 0": Case("preflight (inventory)", SITE, (
        "node1, node2: ray_cluster_node_manager_port 0 is not a TCP port", "Fix:"),
        _group_vars(ray_cluster_node_manager_port=0)),
    "a Ray port above 65535": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_ray_dashboard_port 70000 is not a TCP port", "Fix:"),
        _group_vars(a3rl_ray_dashboard_port=70000)),
    "a port in non-ASCII digits": Case("preflight (inventory)", SITE, (
        "node2: recipe_env_master_port '٢٩٥٠٠' is not a TCP port", "Fix:"),
        _node2("recipe_env_master_port", "٢٩٥٠٠")),
    "a fan-out port with letters": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_fanout_port '29470abc' is not a TCP port", "Fix:"),
        _group_vars(a3rl_fanout_port="29470abc")),
    "a fan-out minimum with a unit": Case("preflight (inventory)", SITE, (
        "node1, node2: artifact_store_fanout_min_bytes '1GB' is not a whole number",
        "Fix: write it as plain digits"), _group_vars(artifact_store_fanout_min_bytes="1GB")),
    "a bandwidth cap with a unit": Case("preflight (inventory)", SITE, (
        "node1, node2: artifact_store_bwlimit '10M' is not a whole number", "Fix:"),
        _group_vars(artifact_store_bwlimit="10M")),
    "a fan-out timeout of 0": Case("preflight (inventory)", SITE, (
        "node1, node2: artifact_store_fanout_connect_timeout 0 is not a whole number above 0",
        "Fix:"), _group_vars(artifact_store_fanout_connect_timeout=0)),
    "a disk requirement with a unit": Case("preflight (inventory)", SITE, (
        "node1, node2: preflight_disk_requirements[0].min_free_gb '100GB' is not a number",
        "Fix:"), _group_vars(preflight_disk_requirements=[
            {"path": "/data", "min_free_gb": "100GB", "what": "weights"}])),
    "a negative disk requirement": Case("preflight (inventory)", SITE, (
        "node1, node2: preflight_disk_requirements[0].min_free_gb -5 is not a number",
        "Fix:"), _group_vars(preflight_disk_requirements=[
            {"path": "/data", "min_free_gb": -5, "what": "weights"}])),
    "a firewall source that is not IPv4": Case("preflight (inventory)", SITE, (
        "node1, node2: ray_cluster_firewall_allow entry '10.0.0.300' is not an IPv4 address",
        "Fix: list IPv4"), _group_vars(ray_cluster_firewall_allow=["10.0.0.300"])),
    "a relative data root": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_data_root 'data/a3rl' is not an absolute folder", "Fix:"),
        _group_vars(a3rl_data_root="data/a3rl")),
    "the root folder as shared storage": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_shared_dir '/' is not an absolute folder below /", "Fix:"),
        _group_vars(a3rl_shared_dir="/")),
    "one machine twice, by address and by another name": Case("preflight (node)", SITE, (
        "node2: reaches the same machine as node1", "Fix: keep one entry per machine"),
        _one_machine_twice),
    "a ModelScope id with ..": Case("preflight (controller)", SITE, (
        "controller: artifact qwen3_32b_config: id 'Qwen/../../etc' is not a hub id", "Fix:"),
        _artifact("qwen3_32b_config", kind="modelscope", id="Qwen/../../etc")),
    "a git URL that is an option": Case("preflight (controller)", SITE, (
        "controller: artifact megatron: url '--upload-pack=touch /tmp/a3rl-pwned' is not a URL",
        "Fix:"), _artifact("megatron", url="--upload-pack=touch /tmp/a3rl-pwned")),
    "an http URL that is not http": Case("preflight (controller)", SITE, (
        "controller: artifact deepscaler: url 'file:///etc/passwd' is not an http(s) URL",
        "Fix:"), _artifact("deepscaler", kind="http", url="file:///etc/passwd",
                           dest="raw/deepscaler.json", sha256=ZERO)),
    "a site-provided dataset not provided": Case("preflight (controller)", SITE, (
        "controller: artifact dapo_math_17k: the site provides this file and it is not there",
        "huggingface.co/datasets/BytedTsinghua-SIA/DAPO-Math-17k",
        "Fix: put it in"), _artifact("dapo_math_17k", path="", dest="raw/dapo_missing")),
    "an override that is a number": Case("train plan", TRAIN, (
        "extra override 5 (a number) is not a 'key=value' string",),
        extravars={"algo": "grpo", "overrides": [5]}, host="node1"),
    "an override that is null": Case("train plan", TRAIN, (
        "extra override None (null) is not a 'key=value' string",),
        extravars={"algo": "grpo", "overrides": [None]}, host="node1"),
    "an override that is a mapping": Case("train plan", TRAIN, (
        "is not a 'key=value' string",),
        extravars={"algo": "grpo", "overrides": [{"a": 1}]}, host="node1"),
    # train.yml checks the inventory's settings before its plan, as preflight does.
    "npus_per_node a superscript digit (train plan)": Case("train settings", TRAIN, (
        "node2: npus_per_node '²' is not a positive whole number. Fix:",),
        _group_vars(npus_per_node="²"), extravars={"algo": "grpo"}, host="node1"),
    # --- issue 43: classes of input refused before any change ---
    "a list setting given as a string (-e)": Case("preflight (inventory)", SITE, (
        "node1, node2: ray_cluster_firewall_open_ports is '22' (a string), not a list",
        "Fix: give a list"), extravars={"ray_cluster_firewall_open_ports": "22"}),
    "two listeners on one port": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_fanout_port 29450 overlaps ray_cluster_node_manager_port "
        "29450", "Fix: move one of them"), _group_vars(a3rl_fanout_port=29450)),
    "a system folder as the data root": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_data_root '/etc' is a folder of the operating system", "Fix:"),
        _group_vars(a3rl_data_root="/etc")),
    "a container name with a space": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_training_container_name 'a3rl train' is not a container name",
        "Fix:"), _group_vars(a3rl_training_container_name="a3rl train")),
    "an artifact size with a unit": Case("preflight (controller)", SITE, (
        "controller: artifact qwen3_32b_config: size '10GB' is not a whole number of bytes",
        "Fix:"), _artifact("qwen3_32b_config", size="10GB")),
    "a host name with a quote": Case("preflight (inventory)", SITE, (
        "the host name \"node2'x\" holds a quote", "Fix: rename the host"),
        _hosts(_rename_node2("node2'x"))),
    "a model profile key with a space": Case("preflight (inventory)", SITE, (
        "a3rl_default_model 'qwen3 32b' is not a model profile key", "Fix:"),
        _group_vars(a3rl_default_model="qwen3 32b")),
    "a model name with a newline": Case("preflight (inventory)", SITE, (
        "a3rl_models.qwen3_32b.name 'Qwen3-32B\\necho pwned' is not a model name", "Fix:"),
        _group_vars(a3rl_models={"qwen3_32b": {"name": "Qwen3-32B\necho pwned"}})),
    "a data root with a space": Case("preflight (inventory)", SITE, (
        "a3rl_data_root '/data/a3rl x' holds a space", "Fix:"),
        _group_vars(a3rl_data_root="/data/a3rl x")),
    "an env folder with a quote": Case("preflight (inventory)", SITE, (
        "a3rl_env_dir \"/data/env'x\" holds a quote", "Fix:"),
        _group_vars(a3rl_env_dir="/data/env'x")),
    "a working directory with a newline": Case("preflight (inventory)", SITE, (
        "a3rl_workdir '/data/work\\ntouch /tmp/pwned' holds a newline", "Fix:"),
        _group_vars(a3rl_workdir="/data/work\ntouch /tmp/pwned")),
    "a working directory under /proc": Case("preflight (inventory)", SITE, (
        "a3rl_workdir '/proc/a3rl' is a folder of the operating system", "Fix:"),
        _group_vars(a3rl_workdir="/proc/a3rl")),
    "an HCCL env key with a command in it": Case("preflight (inventory)", SITE, (
        "recipe_env_hccl: 'HCCL_X$(id)' is not a shell variable name", "Fix:"),
        _group_vars(recipe_env_hccl={"HCCL_X$(id)": "1", "HCCL_BUFFSIZE": 300})),
    "a Ray port of 65536": Case("preflight (inventory)", SITE, (
        "node1, node2: ray_cluster_gcs_port 65536 is not a TCP port", "Fix:"),
        _group_vars(ray_cluster_gcs_port=65536)),
    "HCCL's port range past 65535": Case("preflight (inventory)", SITE, (
        "a3rl_hccl_base_port 65530 with a3rl_hccl_port_count",
        "is not a range of ports within 1024-65535", "Fix:"),
        _group_vars(a3rl_hccl_base_port=65530)),
    "Ray's worker port range upside down": Case("preflight (inventory)", SITE, (
        "ray_cluster_min_worker_port 19999 is above ray_cluster_max_worker_port 10002",
        "Fix:"), _group_vars(ray_cluster_min_worker_port=19999,
                             ray_cluster_max_worker_port=10002)),
    "a fan-out port inside Ray's worker ports": Case("preflight (inventory)", SITE, (
        "Ray's worker ports 10002-19999 (ray_cluster_min_worker_port..ray_cluster_max_worker_"
        "port) overlaps a3rl_fanout_port 15000", "Fix: move one of them"),
        _group_vars(a3rl_fanout_port=15000)),
    "an open firewall port that is a Ray port": Case("preflight (inventory)", SITE, (
        "ray_cluster_firewall_open_ports entry '29450' opens ray_cluster_node_manager_port "
        "29450 to every source", "Fix: take it out"),
        _group_vars(ray_cluster_firewall_open_ports=["22", "29450"])),
    "a peer firewall port that is not a port": Case("preflight (inventory)", SITE, (
        "ray_cluster_firewall_peer_ports entry 'hccl' is not a port or a range", "Fix:"),
        _group_vars(ray_cluster_firewall_peer_ports=["hccl"])),
    "a mapping setting given as a string (-e)": Case("preflight (inventory)", SITE, (
        "recipe_env_hccl is 'HCCL_IF_BASE_PORT=64021' (a string), not a mapping",
        "Fix: give a mapping"), extravars={"recipe_env_hccl": "HCCL_IF_BASE_PORT=64021"}),
    "a firewall allow-list given as a string (-e)": Case("preflight (inventory)", SITE, (
        "ray_cluster_firewall_allow is '10.0.0.0/8' (a string), not a list",
        "Fix: give a list"), extravars={"ray_cluster_firewall_allow": "10.0.0.0/8"}),
    "a bundle group that does not exist": Case("preflight (inventory)", SITE, (
        "artifact_store_groups", "'framework'", "Fix:"),
        _group_vars(artifact_store_groups=["framework", "recipe", "python"])),
    "a git ref with a space and a command": Case("preflight (controller)", SITE, (
        "controller: artifact verl:", "'v0.6.0; touch /tmp/pwned'", "Fix:"),
        _artifact("verl", ref="v0.6.0; touch /tmp/pwned")),
    "a git ref that is an option": Case("preflight (controller)", SITE, (
        "controller: artifact megatron:", "'--upload-pack=touch /tmp/pwned'", "Fix:"),
        _artifact("megatron", ref="--upload-pack=touch /tmp/pwned")),
    "an artifact dest in the store's git folder": Case("preflight (controller)", SITE, (
        "controller: artifact gsm8k: dest 'git/verl'", "Fix:"),
        _artifact("gsm8k", dest="git/verl")),
    "an artifact dest in the store's python folder": Case("preflight (controller)", SITE, (
        "controller: artifact gsm8k: dest 'python/gsm8k'", "Fix:"),
        _artifact("gsm8k", dest="python/gsm8k")),
    "two artifacts with one dest": Case("preflight (controller)", SITE, (
        "controller: artifact", "dest 'raw/aime_2024'", "the dest 'raw/aime_2024' of artifact",
        "Fix:"), _artifact("gsm8k", dest="raw/aime_2024")),
    "allow_patterns given as a string": Case("preflight (controller)", SITE, (
        "controller: artifact qwen3_32b_config: `allow_patterns` is 'config.json'; expected "
        "a list of strings", "Fix:"), _artifact("qwen3_32b_config", allow_patterns="config.json")),
    "a requirements entry without a path": Case("preflight (controller)", SITE, (
        "controller: artifact recipe_wheels: requirements", "lacks path", "Fix:"),
        # The override merges recursively into the manifest's {artifact, path}: an empty
        # path is how an inventory loses it.
        _artifact("recipe_wheels", requirements={"artifact": "recipe", "path": ""})),
    "a hub revision that is a branch": Case("preflight (controller)", SITE, (
        "controller: artifact qwen3_32b_config (modelscope", "`revision` is 'master', not a "
        "commit id", "Fix:"),
        # The simulator's inventory makes this entry a file; a site's is a hub entry.
        _artifact("qwen3_32b_config", kind="modelscope", id="Qwen/Qwen3-32B",
                  revision="master")),
    "a git artifact without a ref": Case("preflight (controller)", SITE, (
        "controller: artifact vllm (git): `ref` is not set", "Fix:"),
        _artifact("vllm", ref="")),
    "an override key given twice": Case("train plan", TRAIN, (
        "trainer.total_epochs is given twice", "Fix:"),
        extravars={"algo": "grpo", "overrides": ["trainer.total_epochs=2",
                                                 "trainer.total_epochs=3"]}, host="node1"),
    "+key on a key the plan sets": Case("train plan", TRAIN, (
        "'+data.train_batch_size=8': data.train_batch_size is already in the run's overrides",
        "Fix: drop the '+'"),
        extravars={"algo": "grpo", "overrides": ["+data.train_batch_size=8"]}, host="node1"),
    "negative epochs": Case("train plan", TRAIN, (
        "trainer.total_epochs must be at least 1, not -1",),
        extravars={"algo": "grpo", "overrides": ["trainer.total_epochs=-1"]}, host="node1"),
    "a length of 1e20 in digits": Case("train plan", TRAIN, (
        "data.max_prompt_length must be at most 2147483647, not 100000000000000000000",),
        extravars={"algo": "grpo", "overrides": [
            "data.max_prompt_length=100000000000000000000"]}, host="node1"),
    "a top_p above 1": Case("train plan", TRAIN, (
        "actor_rollout_ref.rollout.top_p must be above 0 and at most 1, not 1.5",),
        extravars={"algo": "grpo", "overrides": ["actor_rollout_ref.rollout.top_p=1.5"]},
        host="node1"),
    "a negative learning rate": Case("train plan", TRAIN, (
        "actor_rollout_ref.actor.optim.lr must be 0 or more, not -1e-06",),
        extravars={"algo": "grpo", "overrides": ["actor_rollout_ref.actor.optim.lr=-1e-6"]},
        host="node1"),
    # --- day 2 ---
    # ray.yml checks the inventory's settings first, as preflight does (it runs none).
    "an unknown Ray action": Case("ray settings", RAY, (
        "node1, node2: ray_action 'reload' is not one of start, stop, restart, status",
        "Fix: set ray_action to one of them"), extravars={"ray_action": "reload"}),
    "a dashboard bind that is not a choice": Case("ray settings", RAY, (
        "node1, node2: a3rl_ray_dashboard_bind 'public' is not one of loopback, cluster, "
        "any", "Fix:"), extravars={"a3rl_ray_dashboard_bind": "public"}),
    "a cache-clean input name of an earlier release": Case("cache_clean arguments", CLEAN, (
        "-e force= is no longer read (it was renamed). Fix: pass -e cache_clean_force=true",),
        extravars={"force": "true"}, host="node1"),
    "a cache-clean batch of 0 nodes": Case("cache_clean arguments", CLEAN, (
        "cache_clean_batch=0 is not a number of nodes (or a percentage) above 0",
        "Fix: -e cache_clean_batch=1"), extravars={"cache_clean_batch": 0}, host="node1"),
    # --- issue 53: values checked by every play that uses them ---
    "a firewall port list given as a string to the Ray play": Case("ray settings", RAY, (
        "node1, node2: ray_cluster_firewall_open_ports is '22' (a string), not a list",
        "Fix: give a list"), extravars={"ray_cluster_firewall_open_ports": "22"}),
    "a dashboard bind that is an address": Case("preflight (inventory)", SITE, (
        "node1, node2: a3rl_ray_dashboard_bind '0.0.0.0' is not one of loopback, cluster, any",
        "Fix:"), _group_vars(a3rl_ray_dashboard_bind="0.0.0.0")),
    "a system folder as the checkpoint folder": Case("preflight (inventory)", SITE, (
        "a3rl_checkpoint_dir '/etc' is a folder of the operating system", "Fix:"),
        _group_vars(a3rl_checkpoint_dir="/etc")),
    "a checkpoint folder with a command in it": Case("preflight (inventory)", SITE, (
        "node2: a3rl_checkpoint_dir '/data/$(id)' holds '$'", "Fix:"),
        _node2("a3rl_checkpoint_dir", "/data/$(id)")),
    "a checkpoint folder that steps out with ..": Case("preflight (inventory)", SITE, (
        "train_job_checkpoint_dir '/data/../etc' is not an absolute folder below /", "Fix:"),
        _group_vars(train_job_checkpoint_dir="/data/../etc")),
    "the supervisors' folder in /tmp": Case("preflight (inventory)", SITE, (
        "a3rl_supervise_dir '/tmp/a3rl' is inside /tmp, which every user may write to",
        "Fix:"), _group_vars(a3rl_supervise_dir="/tmp/a3rl")),
    # Refused by train.yml's settings check, before its plan and its own folder checks.
    "a checkpoint folder in the OS's own files (train play)": Case("train settings", TRAIN, (
        "node1, node2: a3rl_checkpoint_dir '/usr/lib/a3rl' is inside /usr",
        "Fix: set a3rl_checkpoint_dir"), _group_vars(a3rl_checkpoint_dir="/usr/lib/a3rl"),
        extravars={"algo": "grpo"}, host="node1"),
    "the supervisors' folder in /tmp (train play)": Case("train settings", TRAIN, (
        "node1, node2: a3rl_supervise_dir '/var/tmp/a3rl' is inside /var/tmp", "Fix:"),
        _group_vars(a3rl_supervise_dir="/var/tmp/a3rl"), extravars={"algo": "grpo"},
        host="node1"),
    "a dashboard bind that is an address (train play)": Case("train settings", TRAIN, (
        "node1, node2: a3rl_ray_dashboard_bind '0.0.0.0' is not one of loopback, cluster, "
        "any", "Fix: set a3rl_ray_dashboard_bind"),
        _group_vars(a3rl_ray_dashboard_bind="0.0.0.0"), extravars={"algo": "grpo"},
        host="node1"),
    "a run of no training steps": Case("train plan", TRAIN, (
        "trainer.total_training_steps must be at least 1 (or null: the epochs' steps), not 0",),
        extravars={"algo": "grpo", "overrides": ["trainer.total_training_steps=0"]},
        host="node1"),
    "an override that reads the job's environment": Case("train plan", TRAIN, (
        "'+trainer.a3rl_note=${oc.env:RAY_AUTH_TOKEN}': a value read from the job's "
        "environment",), extravars={"algo": "grpo", "overrides": [
            "+trainer.a3rl_note=${oc.env:RAY_AUTH_TOKEN}"]}, host="node1"),
    "a feature asked for and turned off": Case("train plan", TRAIN, (
        "features sam and no-sam are both asked for",),
        extravars={"algo": "grpo", "features": "sam,no-sam"}, host="node1"),
}


# Preflight's inventory check names every problem of the inventory at once (one task, a
# line per problem), so its cases run GROUP_SIZE at a time: one site.yml on an inventory
# that carries every edit of the group, instead of a play each (about 5 s of a loaded
# machine per play). A grouped case passes only as it would alone: the play fails,
# changed=0, the nodes unchanged, and a line of the message holds every one of its
# needles and not every needle of another case of the group (claimed_lines). A case
# without such a line (its edit undone by another's, or a line that fits two cases) runs
# alone.
# The plan names every problem of its overrides at once too: the "train plan" cases that
# differ only in their overrides run GROUP_SIZE at a time, one train.yml with all their
# overrides. The settings check that a stage playbook runs first (playbooks/tasks/
# settings.yml) is preflight's one task: its cases with the same playbook and extra vars
# run GROUP_SIZE at a time too.
GROUP_SIZE = 10
GROUPED = "preflight (inventory)"
PLAN = "train plan"
SETTINGS = " settings"


def _plan_groupable(c: Case) -> bool:
    return (c.refused_by == PLAN and c.playbook == TRAIN and not c.edit
            and set(c.extravars) == {"algo", "overrides"} and c.extravars["algo"] == "grpo")


def _group_key(c: Case) -> tuple | None:
    """The cases one play can hold together: same key (None: the case runs alone)."""
    if c.needs_driver or not (c.edit or _plan_groupable(c)):
        return None
    if c.refused_by == GROUPED and c.playbook == SITE and not c.extravars:
        return (GROUPED,)
    if _plan_groupable(c):
        return (PLAN,)
    if c.refused_by.endswith(SETTINGS):
        return (SETTINGS, c.playbook, json.dumps(c.extravars, sort_keys=True))
    return None


def _groups() -> dict[str, tuple[str, ...]]:
    out = {}
    by_key: dict[tuple, list[str]] = {}
    for n, c in CASES.items():
        if (key := _group_key(c)) is not None:
            by_key.setdefault(key, []).append(n)
    for names in by_key.values():
        chunks = [tuple(names[i:i + GROUP_SIZE]) for i in range(0, len(names), GROUP_SIZE)]
        out.update({n: chunk for chunk in chunks if len(chunk) > 1 for n in chunk})
    return out


def _extravars(names: tuple[str, ...]) -> dict:
    """The extra vars of one play for ``names``: a group of plan cases gets every one of
    their overrides."""
    first = CASES[names[0]].extravars
    if len(names) == 1 or not _plan_groupable(CASES[names[0]]):
        return first
    return {**first, "overrides": [o for n in names for o in CASES[n].extravars["overrides"]]}


GROUP_OF = _groups()


def claimed_lines(needles: dict[str, tuple[str, ...]], lines: list[str]) -> dict[str, str]:
    """Each case's own line: one that holds every needle of the case and not every needle
    of any other case of the group. A case with no such line is absent from the answer
    (it runs alone): with its rule gone, the only line that holds its needles would be
    another case's, which then fits both and is nobody's."""
    def fits(ns: tuple[str, ...], line: str) -> bool:
        return all(x in line for x in ns)

    out = {}
    for name, ns in needles.items():
        own = [line for line in lines if fits(ns, line)
               and not any(fits(other, line) for o, other in needles.items() if o != name)]
        if own:
            out[name] = own[0]
    return out


@pytest.fixture(scope="module")
def unchanged(sim):
    """The module's "before" state, taken once after the change marker is set: the changes
    since the mark (none, or what was already settling then), which each case compares."""
    return {"state": _mark(sim), "groups": {}}


def _mark(sim) -> dict:
    mark(sim)
    return changes(sim)


def _diff(before: dict, after: dict) -> str:
    lines = []
    for host in sorted(set(before) | set(after)):
        b, a = before.get(host), after.get(host)
        if b != a:
            lines.append(f"{host}: changed {sorted(set(a[0]) - set(b[0]))[:20]}, in busy "
                         f"folders {sorted(set(a[1]) ^ set(b[1]))[:20]}, devices "
                         f"{sorted(set(a[2]) ^ set(b[2]))}, started {b[3]} -> {a[3]}")
    return "\n".join(lines)


def _excerpt(text: str, needle: str, limit: int = 400) -> str:
    """The message from the line that holds ``needle`` on (Ansible's own preamble, such
    as a filter's "Task failed: Finalization of task args ...", left out)."""
    at = text.find(needle)
    if at < 0:
        return text[:limit]
    return text[text.rfind("\n", 0, at) + 1:][:limit]


def _run(sim, unchanged, tmp_path: Path, names: tuple[str, ...]) -> dict:
    """One play with the edits and extra vars of ``names``: its result, its failure text
    and whether the nodes are as they were."""
    first = CASES[names[0]]
    inventory = sim.inventory_dir
    applied = []
    if any(CASES[n].edit for n in names):
        inventory = tmp_path / ("inventory" if len(names) == 1 else "group-inventory")
        shutil.copytree(sim.inventory_dir, inventory)
        for n in names:
            if len(names) == 1:
                CASES[n].edit(inventory, sim)
            else:
                try:  # an edit that an earlier one made impossible (node2 moved): alone
                    CASES[n].edit(inventory, sim)
                except (KeyError, TypeError, AttributeError):
                    continue
            applied.append(n)
    if len(names) > 1 and not any(CASES[n].edit for n in names):  # plan cases: overrides
        applied = list(names)
    result = play(first.playbook, inventory, extravars=_extravars(names))
    after = changes(sim)
    before = unchanged["state"]
    if after != before:
        unchanged["state"] = _mark(sim)  # the next case starts clean
    return {"result": result, "text": failure_text(result), "same": after == before,
            "diff": "" if after == before else _diff(before, after), "applied": applied}


def _grouped(sim, unchanged, tmp_path: Path, name: str) -> tuple[dict, str] | None:
    """The run of ``name``'s group and the line of its message that is the case's own, or
    None when the case must run alone."""
    group = GROUP_OF.get(name)
    if not group:
        return None
    if group not in unchanged["groups"]:
        ran = _run(sim, unchanged, tmp_path, group)
        mine = claimed_lines({n: CASES[n].expect for n in ran["applied"]},
                             ran["text"].splitlines())
        unchanged["groups"][group] = (ran, mine)
    ran, mine = unchanged["groups"][group]
    return (ran, mine[name]) if name in mine else None


@pytest.mark.parametrize("name", list(CASES))
def test_refused_before_any_node_changes(sim, unchanged, tmp_path, record_property, name):
    case = CASES[name]
    row(record_property, "bad_input", name, "refused, nodes unchanged",
        refused_by=case.refused_by)
    if case.needs_driver and any(
            podman.exec_(n.container, "test", "-f", "/usr/local/Ascend/driver/version.info",
                         check=False).returncode != 0 for n in sim.members()):
        driver = play("playbooks/npu_driver.yml", sim.inventory_dir)
        assert driver.ok, failure_text(driver)
        unchanged["state"] = _mark(sim)
    grouped = _grouped(sim, unchanged, tmp_path, name)
    ran, text = grouped if grouped else (_run(sim, unchanged, tmp_path, (name,)), None)
    result = ran["result"]
    text = ran["text"] if text is None else text
    row(record_property, "bad_input", name, "refused, nodes unchanged",
        observed=(_excerpt(ran["text"], case.expect[0]) if grouped is None else
                  f"(one play for {len(GROUP_OF[name])} cases) {text}"),
        refused_by=case.refused_by)
    assert not result.ok, f"{name}: accepted (rc 0)"
    for needle in case.expect:
        assert needle in text, f"{needle!r} not in:\n{text}"
    if case.host:
        assert case.host in {h for h, _, _ in result.failures}, ran["text"]
    assert result.changed == 0, result.stats.get("changed")
    assert ran["same"], f"{name} changed the nodes:\n{ran['diff']}"


def _started_tasks(result) -> list[str]:
    events = (json.loads(p.read_text())
              for p in (result.record / "artifacts").rglob("job_events/*.json"))
    return [e["event_data"].get("task", "") for e in events
            if e.get("event") == "playbook_on_task_start"]


def test_a_bad_plan_is_refused_before_the_npu_network_check(sim, record_property):
    """train.yml plans on the head first: a bad plan is named, and no node's NPU network
    is checked (on a fresh node that check would configure device IPs)."""
    name = "a bad plan, refused before any node is touched (the NPU network check)"
    row(record_property, "bad_input", name, "the plan's message, and no task ran on a node",
        refused_by="train plan")
    result = play(TRAIN, sim.inventory_dir, extravars={"algo": "grpo", "model": "qwen3_8b"})
    ran = [t for t in _started_tasks(result) if t.startswith("NPU network |")]
    row(record_property, "bad_input", name, "the plan's message, and no task ran on a node",
        observed=f"{len(ran)} NPU network task(s) ran first: {', '.join(ran[:3])}",
        refused_by="train plan")
    assert not result.ok and "unknown model 'qwen3_8b'" in failure_text(result)
    assert ran == []


def test_a_case_claims_only_a_line_no_other_case_fits():
    needles = {"a": ("x: 'bad'", "Fix:"), "b": ("y: 'bad'",), "c": ("x: 'bad'",)}
    lines = ["n | t | x: 'bad'. Fix: z", "y: 'bad'. Fix: w"]
    # c's needles are also on a's line: that line is nobody's, and c has no line of its own
    assert claimed_lines(needles, lines) == {"b": "y: 'bad'. Fix: w"}
    assert claimed_lines({"a": needles["a"], "b": needles["b"]}, lines) == {
        "a": lines[0], "b": lines[1]}
    assert claimed_lines({"a": needles["a"], "b": needles["b"]}, lines[1:]) == {"b": lines[1]}
