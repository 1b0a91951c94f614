"""NPU network health: ``hccn_tool`` output, which devices ping which, what is wrong.

On A3 the collectives (HCCL) travel over the NPUs' own network ports, each with its own IP,
not over the host NIC. A wrong device IP, a port without link or a bad optic makes a
64-card job hang at initialisation or crawl. The npu_network role reads every port with
``hccn_tool`` (one module call per node), and this module decides what that means: which
device pairs to ping (every node pair on small clusters, a ring plus random pairs on large
ones, deterministic for a seed), which results are problems, and how each problem is told
(host, device, peer, what to check). It also reads the HCCL all-reduce test's output and
MPICH's manual-launcher lines for the bandwidth check.

Standard library only: the module ``a3rl_npu_network`` carries this file to the nodes
(``plugins/module_utils/a3rl_npu_network.py`` is a link to it).
"""

from __future__ import annotations

import ipaddress
import random
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

LINK_UP = "UP"
HEALTH_OK = "Success"
# DCMI net health code 6: the detection task is initialising. Normal for a while after
# boot and before a detect IP is set (Huawei's own environment check accepts Success or
# Init); the role waits for it to settle (bounded) instead of failing the device at once.
HEALTH_SETTLING = "Init"
# What the check asks hccn_tool for each device, keyed as the module reports it.
QUERIES = {"ip": ["-ip", "-g"], "link": ["-link", "-g"], "health": ["-net_health", "-g"]}
FIX_SKIP = "(not recommended) -e npu_network_check=false skips the check"


# --- hccn_tool output ------------------------------------------------------------------

def parse_ip(text: str) -> dict[str, str | None]:
    """``hccn_tool -i N -ip -g``: ``ipaddr:A`` and ``netmask:M`` lines (others ignored)."""
    out: dict[str, str | None] = {"address": None, "netmask": None}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key in ("ipaddr", "netmask"):
            out["address" if key == "ipaddr" else "netmask"] = value.strip() or None
    return out


def parse_link(text: str) -> str | None:
    """``hccn_tool -i N -link -g``: ``link status: UP`` -> ``UP`` (None if absent)."""
    m = re.search(r"^\s*link status:\s*(\S+)", text, re.M | re.I)
    return m.group(1).upper() if m else None


def parse_net_health(text: str) -> str | None:
    """``hccn_tool -i N -net_health -g``: ``net health status: Success`` -> ``Success``."""
    m = re.search(r"^\s*net health status:\s*(.+?)\s*$", text, re.M | re.I)
    return m.group(1) if m else None


def parse_ping(text: str) -> dict[str, Any]:
    """``hccn_tool -i N -ping -g address A``: counts, lost sequence numbers, round trips.

    ``ok`` means every packet came back; the real tool prints ``recv time out seq=S`` for
    a lost packet and ``... 0.00% packet loss`` when all arrived.
    """
    summary = re.search(r"(\d+) packets transmitted, (\d+) received, ([\d.]+)% packet loss",
                        text)
    transmitted = int(summary.group(1)) if summary else 0
    received = int(summary.group(2)) if summary else 0
    return {
        "transmitted": transmitted,
        "received": received,
        "loss_pct": float(summary.group(3)) if summary else 100.0,
        "timeouts": [int(s) for s in re.findall(r"recv time out seq[=:]\s*(\d+)", text)],
        "unreachable": "Destination Host Unreachable" in text,
        "rtt_ms": [float(t) for t in re.findall(r"recv seq=\d+,\s*time[=-]\s*([\d.]+)\s*ms",
                                                text)],
        "ok": bool(summary) and transmitted > 0 and received == transmitted,
    }


# --- net health that is still settling ----------------------------------------------------

def health_pending(result: Mapping[str, Any] | None) -> list[int]:
    """Devices whose net health still reads ``Init``, in a module result (``probe`` or
    ``health``): the ones to read again before judging. A device whose health query
    failed is not pending (that is a tool error, judged as such)."""
    out = []
    for dev, raw in ((result or {}).get("devices") or {}).items():
        raw = raw or {}
        if "health" in (raw.get("errors") or {}):
            continue
        if parse_net_health(raw.get("health", "")) == HEALTH_SETTLING:
            out.append(int(dev))
    return sorted(out)


def merge_health(probe: Mapping[str, Any], settle: Mapping[str, Any] | None) -> dict[str, Any]:
    """The probe with each device's net health as the wait last read it, and how long
    the node waited (``settle_waited_s``: the wait's last read minus the probe's read,
    None when there was no wait). ``settle``: the ``health`` module result (skipped or
    absent when no device read Init)."""
    out = dict(probe)
    read = (settle or {}).get("devices") or {}
    if not read:
        return out
    devices = {str(d): dict(v or {}) for d, v in (probe.get("devices") or {}).items()}
    for dev, raw in read.items():
        entry = devices.setdefault(str(dev), {"errors": {}})
        errors = dict(entry.get("errors") or {})
        errors.pop("health", None)
        if "health" in (raw.get("errors") or {}):
            errors["health"] = raw["errors"]["health"]
        entry["health"], entry["errors"] = raw.get("health", ""), errors
    out["devices"] = devices
    start, end = probe.get("checked_at"), (settle or {}).get("checked_at")
    out["settle_waited_s"] = (round(float(end) - float(start))
                              if start is not None and end is not None else None)
    return out


# --- the inventory's plan ------------------------------------------------------------------

def _ipv4(value: Any) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(str(value))
    except ValueError:
        return None


def netmask_ok(netmask: str) -> bool:
    try:
        ipaddress.IPv4Network(f"0.0.0.0/{netmask}")
    except ValueError:
        return False
    return True


def plan_problems(plans: Mapping[str, Sequence[str] | None], netmask: str,
                  npus: int) -> list[str]:
    """Everything wrong with the device-IP plan (``npu_device_ips`` per host), before any
    node is touched: one address per device, valid, unique in the cluster."""
    problems: list[str] = []
    if any(plans.values()) and not netmask_ok(netmask):
        problems.append(f"npu_device_netmask {netmask!r} is not an IPv4 netmask. "
                        "Fix: e.g. npu_device_netmask: 255.255.255.0")
    seen: dict[str, str] = {}
    for host, plan in plans.items():
        if not plan:
            continue
        if isinstance(plan, str) or not isinstance(plan, Sequence):
            problems.append(f"{host}: npu_device_ips must be a list of {npus} addresses, "
                            f"one per device in device order; got {plan!r}")
            continue
        if len(plan) != npus:
            problems.append(f"{host}: npu_device_ips has {len(plan)} entries, npus_per_node "
                            f"is {npus}. Fix: one address per device, devices 0..{npus - 1} "
                            "in order.")
        for dev, value in enumerate(plan):
            addr = _ipv4(value)
            if addr is None:
                problems.append(f"{host}: npu_device_ips[{dev}] = {value!r} is not an IPv4 "
                                "address. Fix: correct the inventory.")
                continue
            where = f"{host} device {dev}"
            if str(addr) in seen:
                problems.append(f"{where} and {seen[str(addr)]} are both planned as {addr}. "
                                "Fix: give every device of the cluster its own address.")
            seen.setdefault(str(addr), where)
    return problems


# --- which devices ping which ----------------------------------------------------------------

def node_pairs(hosts: Sequence[str], all_pairs_max_nodes: int = 8, random_peers: int = 2,
               seed: int | str = 0) -> list[tuple[str, str]]:
    """Node pairs to ping between, each once, in a deterministic order.

    Up to ``all_pairs_max_nodes`` nodes: every pair. Beyond: a ring (each node and the
    next, so every node is reached and reaches out) plus ``random_peers`` random partners
    per node, drawn from a generator seeded with ``seed`` and the host list, so a seed
    always gives the same pairs; another seed samples other pairs.
    """
    hosts = list(hosts)
    n = len(hosts)
    if n < 2:
        return []
    index = {h: i for i, h in enumerate(hosts)}

    def key(a: str, b: str) -> tuple[str, str]:
        return (a, b) if index[a] < index[b] else (b, a)

    if n <= all_pairs_max_nodes:
        return [(hosts[i], hosts[j]) for i in range(n) for j in range(i + 1, n)]
    pairs = {key(hosts[i], hosts[(i + 1) % n]) for i in range(n)}
    rng = random.Random(f"{seed}|{'|'.join(hosts)}")
    for host in hosts:
        candidates = [h for h in hosts if h != host and key(host, h) not in pairs]
        for peer in rng.sample(candidates, min(random_peers, len(candidates))):
            pairs.add(key(host, peer))
    return sorted(pairs, key=lambda p: (index[p[0]], index[p[1]]))


def ping_plan(hosts: Sequence[str], addresses: Mapping[str, Mapping[Any, str]],
              pairs: Sequence[Sequence[str]]) -> dict[str, list[dict[str, Any]]]:
    """Per source host, the pings it runs: for each node pair and each device present on
    both (same device index: the rail its port is cabled to), one ping from one side;
    even devices from the pair's first node, odd ones from the second, so both nodes work
    and both directions are covered. ``addresses``: host -> device -> its address (only
    devices whose own checks passed)."""
    plan: dict[str, list[dict[str, Any]]] = {h: [] for h in hosts}
    for a, b in pairs:
        devs_a = {int(d): ip for d, ip in addresses.get(a, {}).items()}
        devs_b = {int(d): ip for d, ip in addresses.get(b, {}).items()}
        for dev in sorted(set(devs_a) & set(devs_b)):
            src, dst, dst_ip = (a, b, devs_b[dev]) if dev % 2 == 0 else (b, a, devs_a[dev])
            src_ip = devs_a[dev] if src == a else devs_b[dev]
            plan.setdefault(src, []).append({"device": dev, "address": dst_ip,
                                             "source_address": src_ip,
                                             "peer": dst, "peer_device": dev})
    return plan


def ping_count(plan: Mapping[str, Sequence[Any]]) -> int:
    return sum(len(v) for v in plan.values())


# --- judging the results -------------------------------------------------------------------

def _dev_name(host: str, dev: int) -> str:
    return f"{host}: NPU device {dev}"


def _tool_error(host: str, dev: int, query: str, error: str, tool: str) -> str:
    return (f"{_dev_name(host, dev)}: `{tool} -i {dev} {' '.join(QUERIES[query])}` failed: "
            f"{error.strip() or 'no output'}. Check: the driver and the device "
            f"(npu-smi info; npu-smi info -t health -i {dev // 2}).")


def assess(hosts: Sequence[str], probes: Mapping[str, Mapping[str, Any]],
           plans: Mapping[str, Sequence[str] | None], netmask: str, npus: int,
           check_mode: bool = False, require_active: bool = False) -> dict[str, Any]:
    """Each node's own devices, from the module's probe: rows for the table, problems per
    host, the addresses of the devices fit to be pinged, deferred and skipped nodes.

    ``probes[host]``: ``tool`` (path), ``found`` (bool), ``reboot_pending`` (bool),
    ``devices`` (device -> ``ip``/``link``/``health`` raw outputs and ``errors``),
    ``would_set`` (devices --check would configure), ``settle_waited_s`` (how long the
    node waited for ``Init`` to settle: :func:`merge_health`). A device still at ``Init``
    is a problem of its own (it did not settle); any other state but Success is too.
    """
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    problems: dict[str, list[str]] = {h: [] for h in hosts}
    addresses: dict[str, dict[int, str]] = {}
    deferred: dict[str, str] = {}
    skipped: dict[str, str] = {}
    owners: dict[str, list[tuple[str, int]]] = {}
    for host in hosts:
        probe = probes.get(host) or {}
        tool = probe.get("tool", "hccn_tool")
        if not probe.get("found", False):
            if check_mode:
                skipped[host] = (f"{host}: {tool} is not installed yet (the NPU driver "
                                 "installs it); nothing to check in --check mode")
            else:
                problems[host].append(
                    f"{host}: {tool} not found. It comes with the NPU driver: run "
                    "playbooks/npu_driver.yml (or set npu_network_hccn_tool to its path).")
            continue
        plan = list(plans.get(host) or [])
        would_set = {int(d) for d in probe.get("would_set", [])}
        rows[host] = {}
        addresses[host] = {}
        tool_failed = False
        host_problems: list[str] = []
        for dev in range(npus):
            raw = (probe.get("devices") or {}).get(str(dev)) or \
                (probe.get("devices") or {}).get(dev) or {}
            errors = raw.get("errors") or {}
            ip = parse_ip(raw.get("ip", ""))
            link = parse_link(raw.get("link", ""))
            health = parse_net_health(raw.get("health", ""))
            row = {"address": ip["address"], "netmask": ip["netmask"], "link": link,
                   "health": health, "ok": True, "ping": None}
            rows[host][dev] = row
            mine: list[str] = []
            for query in ("link", "health"):
                if query in errors:
                    tool_failed = True
                    mine.append(_tool_error(host, dev, query, errors[query], tool))
            planned = plan[dev] if dev < len(plan) else None
            if "set" in errors:
                mine.append(f"{_dev_name(host, dev)}: setting its planned address failed "
                            f"(`{tool} -i {dev} -ip -s address {planned} netmask {netmask}`): "
                            f"{errors['set'].strip()}. Check: no other device holds "
                            f"{planned}, and the driver (npu-smi info).")
            if dev in would_set and check_mode:
                row["address"], row["netmask"] = planned, netmask
                row["note"] = "would be configured"
            elif ip["address"] is None:
                mine.append(
                    f"{_dev_name(host, dev)} has no IP address (`{tool} -i {dev} -ip -g`"
                    f"{': ' + errors['ip'].strip() if errors.get('ip') else ''}). Fix: "
                    + (f"run with -e npu_network_configure=true to apply the inventory's "
                       f"plan ({planned}/{netmask})" if planned else
                       f"set it (`{tool} -i {dev} -ip -s address <ip> netmask <mask>`), or "
                       "declare npu_device_ips for this host in the inventory and run with "
                       "-e npu_network_configure=true") + ".")
            elif planned and (ip["address"] != planned or ip["netmask"] != netmask):
                mine.append(
                    f"{_dev_name(host, dev)} has IP {ip['address']}/{ip['netmask']}, the "
                    f"inventory plans {planned}/{netmask}. Fix: -e npu_network_configure=true "
                    f"applies the plan (`{tool} -i {dev} -ip -s address {planned} netmask "
                    f"{netmask}`), or correct npu_device_ips if the plan is wrong.")
            if link is not None and link != LINK_UP:
                mine.append(
                    f"{_dev_name(host, dev)}: link is {link} (`{tool} -i {dev} -link -g`). "
                    "Check: the cable or optical module of this port "
                    f"(`{tool} -i {dev} -optical -g`) and its switch port "
                    f"(`{tool} -i {dev} -lldp -g`).")
            if health == HEALTH_SETTLING:
                waited = probe.get("settle_waited_s")
                mine.append(
                    f"{_dev_name(host, dev)}: net health is still Init (detection "
                    "initialising) "
                    + (f"after waiting {waited} s for it to settle" if waited is not None
                       else "and was not waited for")
                    + f" (`{tool} -i {dev} -net_health -g`): it did not settle. Check: a "
                    f"detect IP is set (`{tool} -i {dev} -netdetect -g`) and reachable from "
                    "this port, and the link; or wait longer "
                    "(-e npu_network_health_settle_timeout=<seconds>).")
            elif health is not None and health != HEALTH_OK:
                mine.append(
                    f"{_dev_name(host, dev)}: net health is {health} "
                    f"(`{tool} -i {dev} -net_health -g`). Check: the link, the detect IP "
                    f"(`{tool} -i {dev} -netdetect -g`) and gateway (`-gateway -g`) are "
                    "reachable from this port, and the switch port.")
            if mine:
                row["ok"] = False
                host_problems += mine
            elif row["address"] and "note" not in row:
                addresses[host][dev] = row["address"]
                owners.setdefault(row["address"], []).append((host, dev))
        if tool_failed and probe.get("reboot_pending") and not require_active:
            deferred[host] = (f"{host}: hccn_tool does not answer and the node waits for the "
                              "reboot that activates its new NPU driver; the network is "
                              "checked after the reboot")
            addresses.pop(host, None)
            for address in list(owners):
                owners[address] = [o for o in owners[address] if o[0] != host]
            continue
        if tool_failed and probe.get("reboot_pending"):
            host_problems.append(f"{host}: the node waits for a reboot to activate its new "
                                 "NPU driver. Fix: reboot it (or run playbooks/npu_driver.yml "
                                 "-e npu_driver_allow_reboot=true), then run again.")
        problems[host] += host_problems
    for address, owned in owners.items():
        if len(owned) > 1:
            names = " and ".join(f"{h} device {d}" for h, d in owned)
            for host, dev in owned:
                problems[host].append(
                    f"{_dev_name(host, dev)}: address {address} is also used by "
                    f"{names}. Fix: give every device its own address (npu_device_ips).")
                rows[host][dev]["ok"] = False
                addresses[host].pop(dev, None)
    return {"rows": rows, "problems": problems, "addresses": addresses,
            "deferred": deferred, "skipped": skipped}


def _same_subnet(a: str, mask_a: str | None, b: str) -> bool:
    try:
        return ipaddress.IPv4Address(b) in ipaddress.IPv4Network(f"{a}/{mask_a}", strict=False)
    except ValueError:
        return False


def report(hosts: Sequence[str], probes: Mapping[str, Mapping[str, Any]],
           plans: Mapping[str, Sequence[str] | None], netmask: str, npus: int,
           pings: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
           check_mode: bool = False, require_active: bool = False,
           max_rows: int = 128) -> dict[str, Any]:
    """The whole verdict: :func:`assess` plus the ping results (``pings[host]``: the
    module's results, each a planned ping with ``output`` and ``rc``), one table, the
    problems per host, the failed hosts and a one-line summary."""
    result = assess(hosts, probes, plans, netmask, npus, check_mode, require_active)
    rows, problems = result["rows"], result["problems"]
    for src, results in (pings or {}).items():
        for p in results:
            dev, peer = int(p["device"]), p["peer"]
            stats = parse_ping(p.get("output", ""))
            for host, d in ((src, dev), (peer, int(p["peer_device"]))):
                cell = rows.get(host, {}).get(d)
                if cell is None:
                    continue
                cell.setdefault("pings", [0, 0])
                cell["pings"][1] += 1
                if stats["ok"]:
                    cell["pings"][0] += 1
                else:
                    other = (f"{peer}:{p['peer_device']}" if host == src else f"{src}:{dev}")
                    cell.setdefault("unreached", []).append(other)
            if stats["ok"]:
                continue
            rows[src][dev]["ok"] = False
            if peer in rows and int(p["peer_device"]) in rows[peer]:
                rows[peer][int(p["peer_device"])]["ok"] = False
            src_ip = p.get("source_address") or rows[src][dev].get("address")
            src_mask = rows[src][dev].get("netmask")
            got = (f"{stats['received']} of {stats['transmitted']} replies"
                   if stats["transmitted"] else
                   f"no result (rc {p.get('rc')}: {(p.get('output') or '').strip()[:200]})")
            hint = ("" if _same_subnet(src_ip, src_mask, p["address"]) else
                    f" {p['address']} is outside {src_ip}/{src_mask}: without a gateway "
                    f"(`hccn_tool -i {dev} -gateway -g`) the two cannot reach each other.")
            problems.setdefault(src, []).append(
                f"{src}: NPU device {dev} ({src_ip}) cannot reach {peer} NPU device "
                f"{p['peer_device']} ({p['address']}): {got}.{hint} Check: both ports' link "
                "and address, that both are in one subnet (netmask) or routed, the switch "
                f"ports and VLAN, and that TLS is the same on both (`hccn_tool -i {dev} -tls "
                "-g`).")
    failed = [h for h in hosts if problems.get(h)]
    table = render_table(hosts, rows, result["deferred"], result["skipped"], max_rows)
    total = sum(len(r) for r in rows.values())
    bad = sum(not c["ok"] for r in rows.values() for c in r.values())
    npings = sum(c.get("pings", [0, 0])[1] for r in rows.values() for c in r.values()) // 2
    summary = (f"NPU network: {total - bad}/{total} devices on {len(rows)} node(s) healthy, "
               f"{npings} device pair(s) pinged"
               + (f"; deferred: {', '.join(result['deferred'])}" if result["deferred"] else "")
               + (f"; skipped: {', '.join(result['skipped'])}" if result["skipped"] else "")
               + (f"; FAILED on {', '.join(failed)}" if failed else ""))
    return {**result, "failed": failed, "table": table, "summary": summary}


def _cell(row: Mapping[str, Any]) -> list[str]:
    address = f"{row['address']}/{row['netmask']}" if row.get("address") else "-"
    pings = row.get("pings")
    ping = "-" if not pings else f"{pings[0]}/{pings[1]}"
    if row.get("unreached"):
        ping += " (no reply: " + ", ".join(row["unreached"][:3]) + \
            (", ..." if len(row["unreached"]) > 3 else "") + ")"
    return [address, row.get("link") or "?", row.get("health") or "?", ping,
            row.get("note") or ("ok" if row["ok"] else "FAIL")]


def render_table(hosts: Sequence[str], rows: Mapping[str, Mapping[int, Mapping[str, Any]]],
                 deferred: Mapping[str, str] | None = None,
                 skipped: Mapping[str, str] | None = None, max_rows: int = 128) -> str:
    """One table for the cluster: a line per device (only failing ones beyond
    ``max_rows`` devices), then the nodes not checked and why."""
    head = ["node", "dev", "address", "link", "health", "pings ok", "result"]
    lines = []
    total = sum(len(r) for r in rows.values())
    for host in hosts:
        for dev, row in sorted((rows.get(host) or {}).items()):
            if total > max_rows and row["ok"]:
                continue
            lines.append([host, str(dev), *_cell(row)])
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()]
    out += [fmt.format(*ln).rstrip() for ln in lines]
    if total > max_rows:
        out.append(f"({total - len(lines)} healthy devices not listed; more than "
                   f"{max_rows} devices)")
    for note in list((deferred or {}).values()) + list((skipped or {}).values()):
        out.append(note)
    return "\n".join(out)


# --- the bandwidth check: MPICH's manual launcher and the HCCL all-reduce test --------------

def hccl_socket_env(nic: str | None, address: str, host: str = "") -> dict[str, str]:
    """HCCL's host-socket variables for one node, as the HCCL Test guide sets them before
    the test: ``HCCL_SOCKET_IFNAME`` names the node's cluster NIC exactly (``=NIC``: the
    CANN reference's form for one NIC; a bare name is a prefix that also matches e.g.
    ``eth0.100``), ``HCCL_SOCKET_FAMILY`` its address family. Without them HCCL takes the
    first NIC by name (docker and lo last), which on a multi-NIC node may be one its peers
    cannot reach."""
    if not nic:
        raise ValueError(f"{host or 'this node'}: no NIC holds cluster_ip {address}, so "
                         "HCCL_SOCKET_IFNAME cannot be set. Fix: set cluster_nic in the "
                         "inventory, or correct cluster_ip.")
    family = "AF_INET6" if ":" in str(address) else "AF_INET"
    return {"HCCL_SOCKET_IFNAME": f"={nic}", "HCCL_SOCKET_FAMILY": family}


def mpich_hostfile(entries: Sequence[Sequence[Any]]) -> str:
    """MPICH's hostfile, ``address:processes`` per node (the HCCL Test guide's format)."""
    return "".join(f"{addr}:{int(n)}\n" for addr, n in entries)


def hydra_launch_commands(text: str) -> list[list[str]]:
    """The proxy commands MPICH's ``mpirun -launcher manual`` prints (``HYDRA_LAUNCH: ...``
    lines, then ``HYDRA_LAUNCH_END``), one per host of the hostfile, in its order."""
    commands = [shlex.split(line.split(":", 1)[1]) for line in text.splitlines()
                if line.startswith("HYDRA_LAUNCH:")]
    if "HYDRA_LAUNCH_END" not in text.splitlines():
        raise ValueError("mpirun did not print HYDRA_LAUNCH_END (its output so far: "
                         f"{text.strip()[-300:]!r})")
    return commands


def parse_allreduce(text: str) -> dict[str, Any]:
    """The HCCL Test tool's output: the ``the minbytes is ...`` line and the table rows
    (``data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:``;
    the guide spells the second column ``avg_time``)."""
    header: dict[str, int] = {}
    m = re.search(r"the minbytes is (\d+), maxbytes is (\d+), iters is (\d+), "
                  r"warmup_iters is (\d+)", text)
    if m:
        header = dict(zip(("minbytes", "maxbytes", "iters", "warmup_iters"),
                          map(int, m.groups()), strict=True))
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        try:
            rows.append({"bytes": int(cells[0]), "avg_us": float(cells[1]),
                         "alg_gbs": float(cells[2]), "check": cells[3]})
        except ValueError:
            continue
    return {"header": header, "rows": rows}


def bus_bandwidth(alg_gbs: float, nranks: int) -> float:
    """All-reduce bus bandwidth from the algorithm bandwidth hccl_test prints: each rank
    sends and receives 2(n-1)/n of the data (ring), the usual busbw convention."""
    return alg_gbs * 2 * (nranks - 1) / nranks if nranks > 1 else alg_gbs


def allreduce_verdict(text: str, rc: int, nranks: int, min_busbw_gbs: float,
                      hosts: Sequence[str]) -> dict[str, Any]:
    """Pass/fail of one all-reduce run: it exited 0, printed rows, every checked row is
    ``success``, and the peak bus bandwidth reaches ``min_busbw_gbs``."""
    parsed = parse_allreduce(text)
    rows = [{**r, "bus_gbs": round(bus_bandwidth(r["alg_gbs"], nranks), 5)}
            for r in parsed["rows"]]
    problems = []
    where = f"{nranks} ranks on {', '.join(hosts)}"
    tail = "\n".join(text.strip().splitlines()[-8:])
    if rc != 0:
        problems.append(f"the HCCL all-reduce test failed (exit {rc}) across {where}. Its "
                        f"last lines:\n{tail}\nCheck: the device pings above, the HCCL env "
                        "(HCCL_SOCKET_IFNAME, HCCL_CONNECT_TIMEOUT), no stale hccl_test "
                        "processes on the nodes.")
    elif not rows:
        problems.append(f"the HCCL all-reduce test printed no result rows across {where}. "
                        f"Its last lines:\n{tail}")
    bad = [r for r in rows if r["check"].lower() == "failed"]
    if bad:
        problems.append(f"the all-reduce result check failed at {len(bad)} size(s) "
                        f"(first: {bad[0]['bytes']} bytes) across {where}: data arrived "
                        "wrong. Check: the NPUs' health (npu-smi info) and the links.")
    peak = max(rows, key=lambda r: r["bus_gbs"]) if rows else None
    if peak and peak["bus_gbs"] < min_busbw_gbs:
        problems.append(
            f"all-reduce bus bandwidth peaks at {peak['bus_gbs']:.3f} GB/s "
            f"({peak['bytes']} bytes, algorithm bandwidth {peak['alg_gbs']:.3f} GB/s) "
            f"across {where}, below npu_network_bandwidth_min_busbw_gbs={min_busbw_gbs}. "
            "Check: the ping table for slow or lossy pairs, each port's speed "
            "(`hccn_tool -i N -speed -g`) and link errors (`hccn_tool -i N -link_stat -g`), "
            "the switch ports, and that HCCL_BUFFSIZE exceeds the largest size tested.")
    table = [f"{'bytes':>12}  {'avg us':>12}  {'alg GB/s':>10}  {'bus GB/s':>10}  check"]
    table += [f"{r['bytes']:>12}  {r['avg_us']:>12.2f}  {r['alg_gbs']:>10.5f}  "
              f"{r['bus_gbs']:>10.5f}  {r['check']}" for r in rows]
    return {"ok": not problems, "problems": problems, "rows": rows, "peak": peak,
            "header": parsed["header"], "nranks": nranks, "min_busbw_gbs": min_busbw_gbs,
            "table": table}
