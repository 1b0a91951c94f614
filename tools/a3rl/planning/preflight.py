"""Preflight checks on the inventory and on each node's facts.

Pure functions over plain data (Ansible hands them in through the filter plugin
``plugins/filter/a3rl.py``), so each rule is unit-tested without a cluster. Every
function returns a list of problems; each problem names the host and says the fix.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from a3rl.node import artifacts
from a3rl.node.fanout import whole_number
from a3rl.paths import project_root
from a3rl.planning import folders, manifest, ray, rolevars

CLUSTER_GROUPS = ("head", "workers")


def topology_problems(groups: Mapping[str, Sequence[str]], hostvars: Mapping[str, Any],
                      parent: str = "a3_nodes") -> list[str]:
    """Exactly one head; every node is the head or a worker; cluster IPs valid and unique."""
    problems: list[str] = []
    nodes = list(groups.get(parent, []))
    heads = list(groups.get("head", []))
    workers = set(groups.get("workers", []))
    if not nodes:
        return [f"inventory: the group '{parent}' is empty or missing. Fix: put the nodes under "
                f"'{parent}' with children 'head' (one host) and 'workers'."]
    if len(heads) != 1:
        found = ", ".join(heads) if heads else "none"
        problems.append(
            f"inventory: the 'head' group must hold exactly one host (found {len(heads)}: "
            f"{found}). Fix: keep one host under 'head' and move the others to 'workers'."
        )
    for h in heads:
        if h in workers:
            problems.append(f"{h}: is in both 'head' and 'workers'. Fix: remove it from 'workers'.")
        if h not in nodes:
            problems.append(f"{h}: is in 'head' but not under '{parent}', so no stage would "
                            f"set it up. Fix: put the 'head' group under '{parent}' (as its "
                            "child), or name one of its nodes as the head.")
    for h in nodes:
        if h not in workers and h not in heads:
            problems.append(f"{h}: is in '{parent}' but in neither 'head' nor 'workers'. "
                            "Fix: add it to 'workers'.")
    seen_ip: dict[str, str] = {}
    seen_addr: dict[str, str] = {}
    for h in nodes:
        if h not in hostvars:
            problems.append(f"{h}: has no host variables. Fix: define it in the inventory.")
            continue
        hv = hostvars[h]
        ip = hv.get("cluster_ip")
        if not ip:
            problems.append(f"{h}: has no 'cluster_ip'. Fix: set cluster_ip to the IPv4 address "
                            "of its cluster NIC in the inventory.")
            continue
        try:
            addr_ip = ipaddress.IPv4Address(str(ip))
        except ValueError:
            problems.append(f"{h}: cluster_ip '{ip}' is not an IPv4 address. Fix: set it to "
                            "the address of the node's cluster NIC.")
            continue
        special = _special_ip(addr_ip)
        if special:
            problems.append(f"{h}: cluster_ip {ip} is {special}; other nodes cannot reach the "
                            "node there. Fix: set cluster_ip to the node's own address on its "
                            "cluster NIC.")
            continue
        if str(ip) in seen_ip:
            problems.append(f"{h}: cluster_ip {ip} is also the cluster_ip of {seen_ip[str(ip)]}. "
                            "Fix: give each node its own address.")
        else:
            seen_ip[str(ip)] = h
        addr = str(hv.get("ansible_host") or h)
        problems.extend(npus_per_node_problems(h, hv))
        if addr in seen_addr:
            problems.append(f"{h}: ansible_host {addr} is also used by {seen_addr[addr]}: two "
                            "inventory entries would reach one machine. Fix: correct ansible_host.")
        else:
            seen_addr[addr] = h
    return problems


def _special_ip(ip: ipaddress.IPv4Address) -> str | None:
    """Why ``ip`` cannot be a node's cluster address, or None."""
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip == ipaddress.IPv4Address("255.255.255.255"):
        return "the broadcast address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_link_local:
        return "a link-local address (169.254.0.0/16, made up when DHCP fails)"
    if ip.is_reserved:
        return "a reserved address (240.0.0.0/4)"
    return None


def npus_per_node_problems(host: str, hv: Mapping[str, Any]) -> list[str]:
    """``npus_per_node``, when set, is a positive whole number (a digit string from the
    inventory or ``-e`` too). Checked with the inventory, so that a typo is named as such
    rather than as a device count that does not match."""
    if "npus_per_node" not in hv:
        return []
    value = hv["npus_per_node"]
    number = whole_number(value)
    if number is None or number <= 0:
        return [f"{host}: npus_per_node {value!r} is not a positive whole number. Fix: set "
                "it to the number of NPUs (/dev/davinciN) of the node, 16 on Atlas A3."]
    return []


def _interfaces(facts: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for name in facts.get("interfaces", []):
        data = facts.get(name.replace("-", "_")) or facts.get(name)
        if isinstance(data, Mapping):
            yield data.get("device", name), data


def interface_addresses(facts: Mapping[str, Any]) -> dict[str, list[str]]:
    """IPv4 addresses per interface, primary first, from gathered network facts."""
    out: dict[str, list[str]] = {}
    for name, data in _interfaces(facts):
        addrs = []
        primary = data.get("ipv4")
        if isinstance(primary, Mapping) and primary.get("address"):
            addrs.append(primary["address"])
        for sec in data.get("ipv4_secondaries") or []:
            if sec.get("address"):
                addrs.append(sec["address"])
        if addrs:
            out[name] = addrs
    return out


def nic_for_ip(facts: Mapping[str, Any], ip: str) -> str | None:
    """The interface that holds ``ip``, or None."""
    for name, addrs in interface_addresses(facts).items():
        if ip in addrs:
            return name
    return None


def nic_problems(host: str, facts: Mapping[str, Any], cluster_ip: str,
                 cluster_nic: str | None = None) -> list[str]:
    """The cluster IP must be on a NIC of the node, and on the named NIC when one is named."""
    holder = nic_for_ip(facts, cluster_ip)
    addrs = interface_addresses(facts)
    listing = ", ".join(f"{n}={'/'.join(a)}" for n, a in sorted(addrs.items()) if n != "lo")
    if holder is None:
        return [f"{host}: cluster_ip {cluster_ip} is not on any interface of the node "
                f"(it has {listing or 'no IPv4 addresses'}). Fix: set cluster_ip to one of "
                "these, or configure the address on the cluster NIC."]
    if cluster_nic and cluster_nic != holder:
        where = (f"{cluster_nic} has {'/'.join(addrs[cluster_nic])}"
                 if cluster_nic in addrs else f"{cluster_nic} does not exist or has no IPv4")
        return [f"{host}: cluster_nic {cluster_nic} does not hold cluster_ip {cluster_ip} "
                f"({where}; the address is on {holder}). Fix: set cluster_nic: {holder}, or "
                "remove cluster_nic and let preflight derive it."]
    return []


def npu_device_problems(host: str, paths: Iterable[str], npus_per_node: int,
                        management: Sequence[str], driver_installed: bool = True) -> list[str]:
    """``/dev/davinci0..N-1`` and the management devices must all exist, and no more NPUs.

    The Ascend driver creates these device nodes: a node without the driver has none, and
    that is a node to install, not a fault (ascend-deployer checks them only where
    ``driver/version.info`` exists). So with ``driver_installed`` false nothing is
    checked here; the npu_driver role checks them after it installed the driver.
    """
    if not driver_installed:
        return []
    names = {p.rsplit("/", 1)[-1] for p in paths}
    found = sorted(int(n[len("davinci"):]) for n in names
                   if n.startswith("davinci") and n[len("davinci"):].isdigit())
    problems = []
    missing = [i for i in range(npus_per_node) if i not in found]
    if missing or len(found) != npus_per_node:
        miss = ", ".join(f"/dev/davinci{i}" for i in missing) or "none"
        problems.append(
            f"{host}: found {len(found)} NPU devices, expected npus_per_node={npus_per_node} "
            f"(missing: {miss}). Fix: check the NPUs with `npu-smi info` and the driver "
            "installation, or correct npus_per_node for this node."
        )
    absent = [m for m in management if m not in names]
    if absent:
        problems.append(f"{host}: management device(s) missing: "
                        + ", ".join(f"/dev/{m}" for m in absent)
                        + ". Fix: (re)install the Ascend driver on this node.")
    return problems


def parse_df(output: str) -> list[dict[str, Any]]:
    """Mounts from ``df -P -B1`` output, in the shape of Ansible's mount facts.

    Read from df rather than from the mount facts because those leave out the root of a
    container (an overlay), where the simulator's nodes keep most of their files.
    """
    mounts = []
    for line in output.splitlines()[1:]:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[3].isdigit():
            mounts.append({"device": parts[0], "size_total": int(parts[1]),
                           "size_available": int(parts[3]), "mount": parts[5]})
    return mounts


def mount_for(mounts: Sequence[Mapping[str, Any]], path: str) -> Mapping[str, Any] | None:
    """The mount that holds ``path`` (the longest mount point that is a prefix of it)."""
    best = None
    for m in mounts:
        mp = m.get("mount", "")
        if path == mp or path.startswith(mp.rstrip("/") + "/") or mp == "/":
            if best is None or len(mp) > len(best.get("mount", "")):
                best = m
    return best


def disk_problems(host: str, mounts: Sequence[Mapping[str, Any]],
                  requirements: Sequence[Mapping[str, Any]]) -> list[str]:
    """Free space per filesystem against the sum of what the stages will write there."""
    need: dict[str, tuple[Mapping[str, Any], float, list[str]]] = {}
    for req in requirements:
        m = mount_for(mounts, str(req["path"]))
        if m is None:
            return [f"{host}: no filesystem found for {req['path']}. Fix: mount one there."]
        _, total, whats = need.get(m["mount"], (m, 0.0, []))
        need[m["mount"]] = (m, total + float(req["min_free_gb"]),
                            [*whats, f"{req['path']} ({req.get('what', '')})"])
    problems = []
    for mp, (m, gb, whats) in need.items():
        free_gb = m.get("size_available", 0) / 1024**3
        if free_gb < gb:
            problems.append(
                f"{host}: filesystem {mp} has {free_gb:.1f} GB free, {gb:.0f} GB needed for "
                + "; ".join(whats) + ". Fix: free space there, or mount a larger disk."
            )
    return problems


def os_problems(host: str, facts: Mapping[str, Any], distributions: Sequence[str],
                architectures: Sequence[str]) -> list[str]:
    problems = []
    dist = facts.get("distribution", "?")
    arch = facts.get("architecture", "?")
    if dist not in distributions:
        problems.append(f"{host}: OS {dist} {facts.get('distribution_version', '')} is not "
                        f"supported (supported: {', '.join(distributions)}). Fix: install one "
                        "of them on the node.")
    if arch not in architectures:
        problems.append(f"{host}: architecture {arch} is not supported here (supported: "
                        f"{', '.join(architectures)}). Fix: Atlas A3 nodes are aarch64; check "
                        "that the inventory points at the right machine.")
    return problems


# ------------------------------------------------------------------ controller inputs
# What the later stages read on the controller: the artifact manifest and the files and
# URLs it names, and the secrets a chosen source needs. Checked here, so that a missing
# file, a wrong checksum or an unreachable URL is refused before any node changes,
# rather than by the stage that needs it after earlier stages changed the nodes.

HashCache = dict[str, dict[str, Any]]
_HASH_CACHE_FILE = "preflight-sha256.json"


def cached_sha256(path: str, cache_dir: str | None) -> str:
    """sha256 of ``path``, remembered by real path, size and mtime in ``cache_dir``, so
    that a multi-GB archive is read once, not on every preflight. A stale or unreadable
    cache only costs a re-hash."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    cache: HashCache = {}
    cache_file = os.path.join(cache_dir, _HASH_CACHE_FILE) if cache_dir else None
    if cache_file:
        try:
            with open(cache_file, encoding="utf-8") as f:
                cache = json.load(f)
        except (OSError, ValueError):
            cache = {}
        hit = cache.get(real)
        if isinstance(hit, dict) and {k: hit.get(k) for k in key} == key and hit.get("sha256"):
            return str(hit["sha256"])
    digest = artifacts.sha256_file(real)
    if cache_file:
        cache[real] = {**key, "sha256": digest}
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{cache_file}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(cache, f, indent=1, sort_keys=True)
        os.replace(tmp, cache_file)
    return digest


def url_problem(url: str, timeout: float = 10.0) -> str | None:
    """None when ``url`` answers (HEAD, or a one-byte GET where HEAD is not allowed);
    else why not, in a few words."""
    for method, headers in (("HEAD", {}), ("GET", {"Range": "bytes=0-0"})):
        req = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout):  # noqa: S310 - http(s) only
                return None
        except urllib.error.HTTPError as e:
            if method == "HEAD" and e.code in (403, 405, 501):
                continue  # some servers refuse HEAD but serve the file
            return f"HTTP {e.code} {e.reason}"
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            return str(reason) or type(e).__name__
    return None


_FIX_OVERRIDE = ("Fix: correct the entry in a3rl_artifact_overrides (the inventory's "
                 "group_vars/all.yml) or in a3rl_artifacts.")


def _local_git_path(url: str) -> str | None:
    if url.startswith("file://"):
        return url[len("file://"):]
    return url if url.startswith("/") else None


def artifact_input_problems(
    manifest: Mapping[str, Mapping[str, Any]],
    store: str,
    offline: bool = False,
    fetch_on_controller: bool = True,
    cache_dir: str | None = None,
    probe: Callable[[str], str | None] = url_problem,
    unused: Iterable[str] = (),
) -> list[str]:
    """Problems with the manifest's entries and what they name on the controller.

    A file the site provides (``obtain`` set: the project cannot download it) must be in
    place, at ``path`` or at ``<store>/<dest>``, unless it is in ``unused`` (the raw
    sources of datasets this run leaves out).

    Every entry must be well formed (kind, required keys, sha256, a ``dest`` inside the
    store). An entry the store already holds as the manifest now says (its recorded spec
    digest matches) was verified when it was fetched and is not looked at again. For the
    others: a ``path`` must exist, and a single file with a declared ``sha256`` (at its
    ``path``, or put by hand at ``<store>/<dest>``) must have it; a local git URL must
    exist; an http URL must answer, unless nothing is fetched from here (``offline``, an
    air-gapped bundle) or a stager node fetches (``fetch_on_controller`` false).
    """
    problems: list[str] = []
    try:
        recorded = artifacts.read_manifest(store)["artifacts"] if store else {}
    except (OSError, ValueError):
        recorded = {}
    for name, spec in manifest.items():
        if not isinstance(spec, Mapping):
            problems.append(f"controller: artifact {name}: the entry is not a mapping. "
                            + _FIX_OVERRIDE)
            continue
        spec = dict(spec)
        bad = artifacts.validate(name, spec)
        if bad:
            problems.extend(f"controller: {p}" if "Fix:" in p
                            else f"controller: {p.rstrip('.')}. {_FIX_OVERRIDE}" for p in bad)
            continue
        entry = recorded.get(name)
        if isinstance(entry, Mapping) and entry.get("spec_digest") == artifacts.spec_digest(spec):
            continue
        kind, sha = spec["kind"], spec.get("sha256") or ""
        path = spec.get("path")
        if kind == "file":
            by_hand = not path
            local = str(path) if path else os.path.join(store, str(spec["dest"]))
            if not os.path.exists(local):
                if by_hand and spec.get("obtain") and name not in set(unused):
                    problems.append(
                        f"controller: artifact {name}: the site provides this file and it is "
                        f"not there ({local}); the project does not download it. It comes "
                        f"from {' '.join(str(spec['obtain']).split())}. Fix: put it in "
                        f"{local}/, or set a3rl_artifact_overrides.{name}.path to a folder "
                        "holding it, or point the entry at a site mirror (kind http, url, "
                        "sha256); a run without this dataset can leave it out with "
                        "datasets_names.")
                elif not by_hand:
                    problems.append(
                        f"controller: artifact {name}: path {local} does not exist on the "
                        "controller. Fix: put the file or folder there, or correct `path` in "
                        "a3rl_artifact_overrides.")
                continue
            if sha and os.path.isfile(local):
                got = cached_sha256(local, cache_dir)
                if got != sha:
                    problems.append(
                        f"controller: artifact {name}: {local} has sha256 {got}, the manifest "
                        f"says {sha}: the file is damaged or is not the pinned one. Fix: "
                        "replace the file with the published one, or correct the sha256 in "
                        "a3rl_artifact_overrides.")
        elif kind == "git" and not offline and fetch_on_controller:
            local = _local_git_path(str(spec["url"]))
            if local is not None and not os.path.exists(local):
                problems.append(
                    f"controller: artifact {name}: git url {artifacts.redact(str(spec['url']))} "
                    "does not exist on the controller. Fix: correct `url` in "
                    "a3rl_artifact_overrides.")
        elif kind == "http" and not offline and fetch_on_controller:
            why = probe(str(spec["url"]))
            if why:
                problems.append(
                    f"controller: artifact {name}: {artifacts.redact(str(spec['url']))} cannot be "
                    f"reached from the controller ({artifacts.redact(why)}). Fix: check the "
                    "URL, the controller's network and proxy settings, or set a reachable "
                    "mirror in a3rl_artifact_overrides.")
    problems.extend(f"controller: {p}" for p in artifacts.dest_overlap_problems(
        {n: dict(v) for n, v in manifest.items() if isinstance(v, Mapping)}))
    return problems


def registry_secret_problems(source: str, username: str, has_password: bool) -> list[str]:
    """A registry login needs its password; it comes from Vault or the environment, and
    is only ever passed here as "there is one"."""
    if source == "registry" and username and not has_password:
        return [
            f"controller: cann_image_registry_username is {username!r} but "
            "cann_image_registry_password is empty or undefined. Fix: put the password in "
            "Ansible Vault as cann_image_registry_password (ansible-vault encrypt_string) and "
            "give the run the vault password, or set it from the controller's environment."
        ]
    return []


def ray_auth_problems(setting: str, version: str) -> list[str]:
    """``ray_cluster_auth`` against the pinned Ray: token auth asked for with a Ray that has
    none is refused here, not by the Ray stage at the end of site.yml."""
    try:
        ray.auth_mode(setting, version)
    except ray.RayConfigError as e:
        return [f"controller: {e}"]
    return []


# ---------------------------------------------------------------- settings' values
# Ports, sizes and counts the later stages read, from the inventory or -e: a value that
# would crash a stage with a traceback (int("29470abc")), or pass silently (a port 0,
# "10M" read as 0 by Jinja's int), is refused here, naming the variable and the hosts.

# The roles whose nodes listen on ports, in the order their listeners are named; each
# port setting is an `int` option named *_port in a role's argument spec, or a *_port
# variable of group_vars/all/cluster.yml, read from there (port_settings), not listed here.
LISTENER_ROLES = ("ray_cluster", "artifact_store", "recipe_env")


@functools.lru_cache(maxsize=4)
def port_settings(root: str = "") -> tuple[str, ...]:
    """Every port setting: the cluster-wide ones, then the listener roles' (as specified)."""
    base = Path(root) if root else project_root()
    names = [k for k in rolevars.cluster_vars(base) if k.endswith("_port")]
    for role in LISTENER_ROLES:
        names += [k for k, opt in rolevars.spec_options(base / "roles" / role).items()
                  if k.endswith("_port") and opt.get("type") == "int"]
    return tuple(dict.fromkeys(names))

# Whole numbers >= 0 (0: none, or no floor) and > 0.
COUNT_SETTINGS = ("artifact_store_fanout_min_bytes", "artifact_store_bwlimit")
POSITIVE_SETTINGS = ("artifact_store_fanout_connect_timeout", "artifact_store_fanout_io_timeout",
                     "artifact_store_fanout_min_rate")


# Folders every stage writes under (and teardown purges in): absolute, below /, no "..",
# not a system folder (a3rl.planning.folders). The env folder (the scripts every job
# sources) is checked the same way; it is read by `bash -c` lines and by the Ray unit's
# start script.
PATH_SETTINGS = ("a3rl_data_root", "a3rl_shared_dir", "a3rl_workdir", "a3rl_assets_dir",
                 "a3rl_env_dir")
# What a value may hold where it is written into a shell script, a `bash -c` line or an
# env file unquoted (a host name in a script's comment, a container name, a folder): a
# newline ends the comment or the command, a quote or a space splits it.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The env dicts rendered into cluster_env.sh as `export KEY=...`.
ENV_SETTINGS = ("recipe_env_hccl", "recipe_env_torch", "recipe_env_runtime",
                "recipe_env_logging", "recipe_env_extra")
# Env variables cluster_env.sh exports from a cluster-wide setting that other roles read
# too: an env dict of the inventory that sets one would part them.
OWNED_ENV = {"HCCL_IF_BASE_PORT": "a3rl_hccl_base_port"}
# Model profile keys, and the container every `docker exec` of a role names.
MODEL_SETTINGS = ("a3rl_default_model", "recipe_env_model")
CONTAINER_SETTING = re.compile(r"a3rl_training_container_name|[a-z0-9_]+_container")


def _grouped(found: dict[tuple[str, str], list[str]]) -> list[str]:
    """One message per (setting, problem), naming every host it applies to."""
    return [f"{', '.join(hosts)}: {text}" for (_, text), hosts in found.items()]


def setting_problems(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[str]:
    """Problems with the values of the port, size, count, list, folder and name settings
    set for ``hosts`` (in the inventory or with -e; a role default is not in hostvars and
    is right)."""
    found: dict[tuple[str, str], list[str]] = {}

    def bad(host: str, name: str, text: str) -> None:
        found.setdefault((name, text), []).append(host)

    for h in hosts:
        hv = hostvars.get(h) if hasattr(hostvars, "get") else hostvars[h]
        if hv is None:
            continue
        for name, text in _host_setting_problems(h, hv):
            bad(h, name, text)
    return _grouped(found)


def _host_setting_problems(host: str, hv: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, problem) for one host's values."""
    out: list[tuple[str, str]] = []
    not_lists = set()
    for name, text in list_type_problems(hv):
        not_lists.add(name)
        out.append((name, text))
    for name in port_settings():
        if name in hv:
            n = whole_number(hv[name])
            if n is None or not 0 < n < 65536:
                out.append((name, f"{name} {hv[name]!r} is not a TCP port (a whole number from 1 "
                                  f"to 65535, ASCII digits). Fix: set {name} to a free port in "
                                  "the inventory (or drop it for the default)."))
    for name in COUNT_SETTINGS + POSITIVE_SETTINGS:
        if name in hv:
            n = whole_number(hv[name])
            floor = 1 if name in POSITIVE_SETTINGS else 0
            if n is None or n < floor:
                what = "above 0" if floor else "0 or more"
                out.append((name, f"{name} {hv[name]!r} is not a whole number {what} (bytes, "
                                  "B/s, KiB/s or seconds: no unit suffix). Fix: write it as "
                                  f"plain digits, e.g. {name}: 1000000000 for 1 GB."))
    for name in PATH_SETTINGS:
        if name in hv:
            out.extend((name, t) for t in folder_problems(name, hv[name]))
    for name in folders.DATA_FOLDERS:  # the training play checks them again itself
        if name in hv:
            out.extend((name, t) for t in folders.data_problems(name, hv[name]))
    if "preflight_disk_requirements" in hv and "preflight_disk_requirements" not in not_lists:
        out.extend(("preflight_disk_requirements", t)
                   for t in disk_requirement_problems(hv["preflight_disk_requirements"]))
    if "ray_cluster_firewall_allow" in hv and "ray_cluster_firewall_allow" not in not_lists:
        out.extend(("ray_cluster_firewall_allow", t)
                   for t in firewall_allow_problems(hv["ray_cluster_firewall_allow"]))
    out.extend(choice_problems(hv))
    out.extend(name_problems(host, hv))
    out.extend(("ports", t) for t in listener_problems(hv))
    out.extend(group_name_problems(hv))
    return out


def folder_problems(name: str, value: Any) -> list[str]:
    """A folder setting (:func:`a3rl.planning.folders.problems`); ``a3rl_shared_dir`` may
    be empty (no shared storage)."""
    if value in (None, "") and name == "a3rl_shared_dir":
        return []  # empty: no shared storage
    return folders.problems(name, value)


_unsafe = folders.unsafe_char


def name_problems(host: str, hv: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Names written into scripts and env files: the host's own name (in the env
    scripts' header), the model profile keys, the containers `docker exec` is run in, and
    the names of the env scripts' variables."""
    out = []
    if not SAFE_NAME.fullmatch(host):
        out.append(("host", f"the host name {host!r} holds {_unsafe(host, SAFE_NAME)}, and it is "
                            "written into the node's env scripts. Fix: rename the host in the "
                            "inventory (letters, digits, . _ -) and keep its address in "
                            "ansible_host."))
    for name in MODEL_SETTINGS:
        value = hv.get(name) if name in hv else None
        if value is not None and (not isinstance(value, str) or not SAFE_NAME.fullmatch(value)):
            out.append((name, f"{name} {value!r} is not a model profile key (letters, digits, "
                              ". _ -; it is written into the model env script). Fix: set "
                              f"{name} to a key of a3rl_models, such as qwen3_32b."))
    models = hv.get("a3rl_models") if "a3rl_models" in hv else None
    for key, profile in (models.items() if isinstance(models, Mapping) else []):
        label = profile.get("name") if isinstance(profile, Mapping) else None
        if label is not None and (not isinstance(label, str) or not SAFE_NAME.fullmatch(label)):
            out.append(("a3rl_models", f"a3rl_models.{key}.name {label!r} is not a model name "
                                       "(letters, digits, . _ -; it is written into the model env "
                                       f"script). Fix: correct a3rl_models.{key}.name."))
    for name in sorted(k for k in hv if CONTAINER_SETTING.fullmatch(str(k))):
        value = hv[name]
        if isinstance(value, str) and not SAFE_NAME.fullmatch(value):
            out.append((name, f"{name} {value!r} is not a container name (letters, digits, "
                              ". _ -, as Docker allows; it is written into the Ray unit's start "
                              f"script). Fix: set {name} to a name such as a3rl-train."))
    for name in ENV_SETTINGS:
        env = hv.get(name) if name in hv else None
        for key in (env if isinstance(env, Mapping) else {}):
            if not ENV_NAME.fullmatch(str(key)):
                out.append((name, f"{name}: {str(key)!r} is not a shell variable name (letters, "
                                  "digits and _, not starting with a digit); cluster_env.sh "
                                  "exports it. Fix: rename it in the inventory."))
            elif str(key) in OWNED_ENV:
                owner = OWNED_ENV[str(key)]
                out.append((name, f"{name} sets {key}, which is {owner} (the firewall and the "
                                  f"reserved ports read {owner} too). Fix: drop {key} from "
                                  f"{name} and set {owner} instead."))
    return out


# ------------------------------------------------------- list- and dict-typed settings

# A default that only hands on another variable (npu_network_device_ips is
# "{{ npu_device_ips | default([]) }}"): that variable is checked as the same type.
_REF_DEFAULT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\|\s*default\([^()]*\)\s*)?\}\}")


def _spec_settings(roles: str, pick: Callable[[Mapping[str, Any]], Any]
                   ) -> dict[str, tuple[str, Any]]:
    """Every role variable whose spec entry ``pick`` says something of (not None), with its
    role and what it said; a variable a role's default only hands on (``{{ name }}``, maybe
    with a ``default(...)``) is taken as the same."""
    folder = Path(roles) if roles else project_root() / "roles"
    out: dict[str, tuple[str, Any]] = {}
    handed_on: dict[str, tuple[str, Any]] = {}
    for role in rolevars.role_dirs(folder):
        values = rolevars.defaults(role)
        for key, opt in rolevars.spec_options(role).items():
            said = pick(opt)
            if said is not None:
                out.setdefault(key, (role.name, said))
                ref = _REF_DEFAULT.fullmatch(str(values.get(key, "")).strip())
                if ref:
                    handed_on.setdefault(ref.group(1), (role.name, said))
    return {**handed_on, **out}


@functools.lru_cache(maxsize=4)
def typed_settings(roles: str = "") -> dict[str, tuple[str, str]]:
    """Every role variable whose argument spec says ``type: list`` or ``type: dict``,
    with its role and type.

    Ansible's argument validation accepts a string for such a variable (it splits "22"
    into ["22"], or parses "a=1", to validate it) but hands the role the string
    unchanged, which a loop then reads one character at a time:
    ``-e ray_cluster_firewall_open_ports=22`` opened port 2 and closed SSH. The names come
    from the specs, so that a new list variable is checked without being listed twice."""
    return _spec_settings(roles, lambda opt: opt["type"] if opt.get("type") in ("list", "dict")
                          else None)


@functools.lru_cache(maxsize=4)
def choice_settings(roles: str = "") -> dict[str, tuple[str, tuple[Any, ...]]]:
    """Every role variable whose argument spec lists its ``choices``, with its role and the
    choices (``ray_action`` through ``ray_cluster_action``'s default).
    The role's own validation refuses another value only when the role starts: in
    site.yml, after every stage before it changed the nodes."""
    return _spec_settings(roles, lambda opt: tuple(opt["choices"]) if opt.get("choices")
                          else None)


# YAML's spellings of a boolean: an unquoted `no` in the inventory arrives as False.
_YAML_BOOL = {True: ("yes", "true", "on"), False: ("no", "false", "off")}


def choice_problems(hv: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, problem) for each variable with choices set to none of them."""
    out = []
    for name, (role, choices) in choice_settings().items():
        if name not in hv:
            continue
        value, allowed = hv[name], {str(c) for c in choices}
        spelled = _YAML_BOOL[value] if isinstance(value, bool) else (str(value),)
        if value is None or not allowed.intersection(spelled):
            out.append((name, f"{name} {value!r} is not one of {', '.join(map(str, choices))} "
                              f"(the role {role} reads it). Fix: set {name} to one of them (or "
                              "drop it for the default)."))
    return out


def list_type_problems(hv: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, problem) for each list- or dict-typed variable set to something else."""
    out = []
    for name, (role, kind) in typed_settings().items():
        if name not in hv:
            continue
        value = hv[name]
        if isinstance(value, list if kind == "list" else Mapping):
            continue
        out.append((name, rolevars.not_a_list(name, value, role) if kind == "list"
                    else rolevars.not_a_mapping(name, value, role)))
    return out


# ------------------------------------------------------------------ listeners' ports
# Every port a node listens on, by the setting that moves it (or fixed by Ray), so that
# two listeners on one port are refused here instead of one of them failing to start
# after every stage before Ray's changed the nodes.

WORKER_RANGE = ("ray_cluster_min_worker_port", "ray_cluster_max_worker_port")
# HCCL's host ports: a range from a first port, read as one listener.
HCCL_BASE, HCCL_COUNT = "a3rl_hccl_base_port", "a3rl_hccl_port_count"
FIXED_LISTENERS = (
    ("Ray's dashboard metrics port (fixed by Ray)", ray.DASHBOARD_METRICS_PORT,
     ray.DASHBOARD_METRICS_PORT),
    ("Ray's autoscaler metrics port (fixed by Ray)", ray.AUTOSCALER_METRICS_PORT,
     ray.AUTOSCALER_METRICS_PORT),
    ("Ray client's specific-server ports (fixed by Ray)", *ray.CLIENT_SPECIFIC_PORTS),
)
_VAR_REF = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
Span = tuple[str, int, int]


@functools.lru_cache(maxsize=4)
def listener_defaults(root: str = "") -> dict[str, Any]:
    """The roles' own values of the listeners' settings (hostvars hold only what the
    inventory or -e set), and the cluster-wide ones they refer to."""
    base = Path(root) if root else project_root()
    out: dict[str, Any] = {}
    for role in LISTENER_ROLES:
        out.update(rolevars.defaults(base / "roles" / role))
    out.update(rolevars.cluster_vars(base))
    return out


@functools.lru_cache(maxsize=4)
def listener_settings(root: str = "") -> tuple[str, ...]:
    """The single ports nodes listen on (the worker range and HCCL's are read as ranges),
    each listener once: the roles' settings first, where a setting whose default only
    names a cluster-wide port another one already follows (recipe_env_master_port, the
    GCS port) is the same listener; then the cluster-wide ports the roles read as they
    are (a3rl_fanout_port). A role's own setting goes first so that its value, where the
    inventory sets it, is the one checked."""
    defaults = listener_defaults(root)
    out: list[str] = []
    seen: set[str] = {*WORKER_RANGE, HCCL_BASE}
    cluster = rolevars.cluster_vars(Path(root) if root else project_root())
    names = dict.fromkeys(port_settings(root))
    for name in [n for n in names if n not in cluster] + [n for n in names if n in cluster]:
        ref = _VAR_REF.fullmatch(str(defaults.get(name, "")))
        key = ref[1] if ref else name
        if name not in seen and key not in seen:
            out.append(name)
            seen.add(key)
    return tuple(out)


def _setting(hv: Mapping[str, Any], name: str, defaults: Mapping[str, Any]) -> tuple[Any, str]:
    """A setting's value and the name it is set under: a default that only names another
    variable ("{{ a3rl_ray_gcs_port }}") is followed to it."""
    shown = name
    for _ in range(5):
        value = hv[name] if name in hv else defaults.get(name)
        ref = _VAR_REF.fullmatch(value) if isinstance(value, str) else None
        if not ref:
            return value, shown
        name = ref.group(1)
        if shown not in hv:
            shown = name
    return None, shown


def listener_spans(hv: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
                   ) -> tuple[list[Span], list[str]]:
    """Each listener's ports as (label, first, last), and the problems of the ranges
    themselves. A value that is not a port is left out: its own check names it."""
    defaults = listener_defaults() if defaults is None else defaults
    spans: list[Span] = []
    problems: list[str] = []
    for name in listener_settings():
        value, shown = _setting(hv, name, defaults)
        n = whole_number(value)
        if n is not None and 0 < n < 65536:
            spans.append((f"{shown} {n}", n, n))
    lo_v, lo_name = _setting(hv, WORKER_RANGE[0], defaults)
    hi_v, hi_name = _setting(hv, WORKER_RANGE[1], defaults)
    lo, hi = whole_number(lo_v), whole_number(hi_v)
    if lo is not None and hi is not None and 0 < lo < 65536 and 0 < hi < 65536:
        if lo > hi:
            problems.append(f"{lo_name} {lo} is above {hi_name} {hi}: Ray would have no "
                            f"worker ports. Fix: set {lo_name} below {hi_name}.")
        else:
            spans.append((f"Ray's worker ports {lo}-{hi} ({lo_name}..{hi_name})", lo, hi))
    hccl, hccl_problem = _hccl_span(hv, defaults)
    spans.extend([hccl] if hccl else [])
    problems.extend([hccl_problem] if hccl_problem else [])
    spans.extend(FIXED_LISTENERS)
    return spans, problems


def _hccl_span(hv: Mapping[str, Any], defaults: Mapping[str, Any]
               ) -> tuple[Span | None, str | None]:
    """HCCL's host ports: ``a3rl_hccl_port_count`` ports from ``a3rl_hccl_base_port`` on,
    as the recipe_env role reserves them and ray_cluster's firewall opens them."""
    base_v, _ = _setting(hv, HCCL_BASE, defaults)
    count_v, _ = _setting(hv, HCCL_COUNT, defaults)
    base, count = whole_number(base_v), whole_number(count_v)
    if base is None or count is None or count < 1 or base < 1024 or base + count - 1 > 65535:
        return None, (f"{HCCL_BASE} {base_v!r} with {HCCL_COUNT} {count_v!r} is not a range "
                      "of ports within 1024-65535 (HCCL listens on that many ports from the "
                      f"base). Fix: set both as plain numbers, e.g. {HCCL_BASE}: 64021 and "
                      f"{HCCL_COUNT}: 32.")
    last = base + count - 1
    return (f"the HCCL ports {base}-{last} ({HCCL_BASE} + {HCCL_COUNT})", base, last), None


def listener_problems(hv: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
                      ) -> list[str]:
    """Two listeners of a node on one port (the head runs them all), and ports of the
    firewall settings that are not ports or that open a listener to every source."""
    spans, problems = listener_spans(hv, defaults)
    for i, (b, b_lo, b_hi) in enumerate(spans):
        earlier = [a for a, a_lo, a_hi in spans[:i] if a_lo <= b_hi and b_lo <= a_hi]
        if earlier:
            problems.append(f"{b} overlaps {', '.join(earlier)}: two listeners cannot use one "
                            "port. Fix: move one of them in the inventory so that no two "
                            "overlap.")
    for name in ("ray_cluster_firewall_open_ports", "ray_cluster_firewall_peer_ports"):
        entries = hv.get(name) if name in hv else None
        for entry in entries if isinstance(entries, list) else []:
            span = port_span(entry)
            if span is None:
                problems.append(f"{name} entry {entry!r} is not a port or a range a:b of ports "
                                f"1-65535. Fix: correct {name}, e.g. [\"22\"].")
            elif name.endswith("open_ports"):
                problems.extend(
                    f"{name} entry {entry!r} opens {label} to every source (Ray's ports run "
                    f"code for whoever reaches them). Fix: take it out of {name}; the other "
                    "nodes reach the ports they need without it."
                    for label, lo, hi in spans if span[0] <= hi and lo <= span[1])
    return problems


port_span = ray.port_span


def group_name_problems(hv: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``artifact_store_groups`` naming a group no artifact has: the store would fetch
    nothing for it, and a later stage would miss the files."""
    groups = hv.get("artifact_store_groups") if "artifact_store_groups" in hv else None
    manifest_ = hv.get("a3rl_manifest") if "a3rl_manifest" in hv else None
    if not isinstance(groups, list) or not isinstance(manifest_, Mapping):
        return []
    return [("artifact_store_groups", p) for p in
            manifest.group_problems(manifest_, groups, "artifact_store_groups")]


def disk_requirement_problems(requirements: Any) -> list[str]:
    """``preflight_disk_requirements``: a list of {path (absolute), min_free_gb (a number
    of gigabytes, 0 or more), what}."""
    fix = ("Fix: give each entry an absolute path and min_free_gb as a plain number of "
           "gigabytes, e.g. {path: /data, min_free_gb: 600, what: weights}.")
    if not isinstance(requirements, list):
        return [f"preflight_disk_requirements is {requirements!r}, not a list. {fix}"]
    problems = []
    for i, req in enumerate(requirements):
        where = f"preflight_disk_requirements[{i}]"
        if not isinstance(req, Mapping):
            problems.append(f"{where} is {req!r}, not a mapping. {fix}")
            continue
        path = req.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"{where}.path {path!r} is not an absolute path. {fix}")
        gb = req.get("min_free_gb")
        number: float | None = None
        if isinstance(gb, int | float) and not isinstance(gb, bool):
            number = float(gb)
        elif isinstance(gb, str) and gb.strip().isascii():
            try:
                number = float(gb)
            except ValueError:
                number = None
        if number is None or number != number or number < 0 or number == float("inf"):
            problems.append(f"{where}.min_free_gb {gb!r} is not a number of gigabytes, 0 or "
                            f"more (no unit suffix). {fix}")
    return problems


def firewall_allow_problems(allow: Any) -> list[str]:
    """``ray_cluster_firewall_allow``: IPv4 addresses or CIDRs (refused otherwise here,
    before the Ray stage would fail on them after earlier stages changed the nodes)."""
    fix = "Fix: list IPv4 addresses or CIDRs, e.g. [10.0.0.0/24]."
    if not isinstance(allow, list):
        return [f"ray_cluster_firewall_allow is {allow!r}, not a list. {fix}"]
    problems = []
    for src in allow:
        try:
            if not isinstance(src, str) or not src.isascii():
                raise ValueError
            ipaddress.IPv4Network(src, strict=False)
        except ValueError:
            problems.append(f"ray_cluster_firewall_allow entry {src!r} is not an IPv4 address "
                            f"or CIDR. {fix}")
    return problems


def firewall_allow_warnings(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[str]:
    """Sources in ``ray_cluster_firewall_allow`` that open Ray's ports to everyone (a /0,
    or a prefix shorter than /8): allowed, since a site may mean it, but said."""
    found: dict[tuple[str, str], list[str]] = {}
    for h in hosts:
        hv = hostvars.get(h) if hasattr(hostvars, "get") else hostvars[h]
        allow = (hv or {}).get("ray_cluster_firewall_allow") or []
        for src in allow if isinstance(allow, list) else []:
            try:
                net = ipaddress.IPv4Network(str(src), strict=False)
            except ValueError:
                continue
            if net.prefixlen < 8:
                text = (f"ray_cluster_firewall_allow {src} lets {net.num_addresses:,} addresses "
                        "reach Ray's ports (job submission runs any code): the firewall then "
                        "guards nothing. Fix: name the hosts or subnet that submit jobs.")
                found.setdefault(("allow", text), []).append(h)
    return [f"WARNING {m}" for m in _grouped(found)]


def same_machine_problems(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[str]:
    """Two inventory entries that reached one machine (by name and by IP, say): the same
    machine id and the same IPv4 addresses in the gathered facts. Found before any stage
    runs, which would otherwise set the machine up twice as two nodes."""
    seen: dict[tuple[str, tuple[str, ...]], str] = {}
    problems = []
    for h in hosts:
        hv = hostvars.get(h) if hasattr(hostvars, "get") else hostvars[h]
        facts = (hv or {}).get("ansible_facts") or {}
        addrs = tuple(sorted(a for a in facts.get("all_ipv4_addresses") or []
                             if not str(a).startswith("127.")))
        machine = str(facts.get("machine_id") or "")
        if not addrs:
            continue
        key = (machine, addrs)
        if key in seen:
            problems.append(
                f"{h}: reaches the same machine as {seen[key]} (machine id "
                f"{machine or 'unknown'}, addresses {', '.join(addrs)}): two inventory entries "
                "for one node. Fix: keep one entry per machine (check ansible_host of both).")
        else:
            seen[key] = h
    return problems
