"""The Ray cluster's start arguments, firewall rules, auth decision and membership.

Pure functions the ``ray_cluster`` role calls through the filter plugin; each is
unit-tested without a cluster. Ports are fixed (no random ports), so the firewall can
name every one of them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from a3rl.node.fanout import whole_number
from a3rl.node.npu import version_key
from a3rl.planning import rolevars

# Ray 2.52 added token authentication (RAY_AUTH_MODE=token).
TOKEN_AUTH_SINCE = "2.52.0"
# iptables' multiport match takes at most 15 ports, a range counting as two.
MULTIPORT_MAX = 15


class RayConfigError(ValueError):
    """Settings the cluster cannot start with; the message says the fix."""


def supports_token_auth(version: str) -> bool:
    return version_key(str(version)) >= version_key(TOKEN_AUTH_SINCE)


def auth_mode(setting: str, version: str) -> str:
    """``token`` or ``none`` for the cluster, from ``ray_cluster_auth`` (auto|token|none)."""
    setting = str(setting)
    if setting == "none":
        return "none"
    if supports_token_auth(version):
        return "token"
    if setting == "token":
        raise RayConfigError(
            f"ray_cluster_auth is 'token' but Ray {version} has no token authentication "
            f"(it came in Ray {TOKEN_AUTH_SINCE}). Fix: use an image with Ray >= "
            f"{TOKEN_AUTH_SINCE} and set a3rl_ray_version, or set ray_cluster_auth: auto."
        )
    if setting != "auto":
        raise RayConfigError(f"ray_cluster_auth must be auto, token or none (got {setting!r})")
    return "none"


# Ray's own listeners that no ray start flag moves: the dashboard's Prometheus port
# (ray/dashboard/consts.py: DASHBOARD_METRIC_PORT, default 44227, which we leave unset)
# and the Ray client proxy's "specific server" per client session
# (ray/util/client/server/proxier.py: range(23000, 24000), reached by the proxy over
# 127.0.0.1). Both as in Ray 2.48.
DASHBOARD_METRICS_PORT = 44227
# The autoscaler monitor's Prometheus port on the head (ray_constants.AUTOSCALER_METRIC_PORT,
# default 44217; seen listening on 0.0.0.0 on the simulator's head).
AUTOSCALER_METRICS_PORT = 44217
CLIENT_SPECIFIC_PORTS = (23000, 23999)
# iptables' chain names are at most 28 characters; the OUTPUT chain adds "-OUT".
OUT_SUFFIX = "-OUT"
_BUILTIN = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING", "ACCEPT", "DROP",
            "REJECT", "RETURN", "QUEUE", "LOG"}


def ports(p: Mapping[str, Any]) -> list[int | tuple[int, int]]:
    """Every port a Ray node listens on, from the role's port settings."""
    single = [p["gcs"], p["dashboard"], p["client_server"], p["node_manager"],
              p["object_manager"], p["runtime_env_agent"], p["dashboard_agent_grpc"],
              p["dashboard_agent_http"], p["metrics_export"],
              p.get("dashboard_metrics", DASHBOARD_METRICS_PORT),
              p.get("autoscaler_metrics", AUTOSCALER_METRICS_PORT)]
    out: list[int | tuple[int, int]] = [int(x) for x in single]
    dup = {x for x in out if out.count(x) > 1}
    if dup:
        raise RayConfigError(f"Ray ports used twice: {sorted(dup)}. Fix: give each its own port.")
    lo, hi = int(p["min_worker"]), int(p["max_worker"])
    if lo > hi:
        raise RayConfigError(f"worker port range {lo}-{hi} is empty. Fix: min <= max.")
    for a, b, what in ((lo, hi, "the worker port range"),
                       (*CLIENT_SPECIFIC_PORTS, "Ray client's specific-server ports")):
        inside = [x for x in out if isinstance(x, int) and a <= x <= b]
        if inside:
            raise RayConfigError(f"ports {inside} fall inside {what} {a}-{b}. "
                                 "Fix: move them out of the range.")
    if not (hi < CLIENT_SPECIFIC_PORTS[0] or lo > CLIENT_SPECIFIC_PORTS[1]):
        raise RayConfigError(f"the worker port range {lo}-{hi} overlaps Ray client's "
                             f"specific-server ports {CLIENT_SPECIFIC_PORTS[0]}-"
                             f"{CLIENT_SPECIFIC_PORTS[1]}. Fix: move the worker range.")
    out.append((lo, hi))
    out.append(CLIENT_SPECIFIC_PORTS)
    return out


def multiport_spec(port_list: Sequence[int | tuple[int, int]]) -> str:
    """Ports for ``-m multiport --dports``: sorted, neighbours merged into ``a:b``."""
    spans: list[list[int]] = []
    for item in sorted((x, x) if isinstance(x, int) else tuple(x) for x in port_list):
        a, b = int(item[0]), int(item[1])
        if spans and a <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    slots = sum(1 if a == b else 2 for a, b in spans)
    if slots > MULTIPORT_MAX:
        raise RayConfigError(f"{slots} port slots exceed iptables multiport's {MULTIPORT_MAX}. "
                             "Fix: put Ray's single ports next to each other.")
    return ",".join(str(a) if a == b else f"{a}:{b}" for a, b in spans)


def chain_name_problem(chain: str) -> str | None:
    """Why ``chain`` cannot name the firewall's chains (None when it can).

    The name goes into the ``iptables-restore`` input line by line: a newline or a space
    in it would add rules of its own. Letters, digits, ``_`` and ``-``, starting with a
    letter, at most 24 characters (iptables allows 28; the OUTPUT chain adds ``-OUT``).
    """
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,23}", str(chain)):
        return (f"ray_cluster_firewall_chain is {str(chain)!r}: an iptables chain name here is "
                "1-24 letters, digits, '_' or '-', starting with a letter. Fix: set it to "
                "such a name (default A3RL-RAY).")
    if str(chain).upper() in _BUILTIN:
        return (f"ray_cluster_firewall_chain is {chain!r}, a built-in chain or target of "
                "iptables. Fix: choose a name of its own (default A3RL-RAY).")
    return None


def out_chain(chain: str) -> str:
    """The OUTPUT chain's name for ``chain``, which is checked first."""
    problem = chain_name_problem(chain)
    if problem:
        raise RayConfigError(problem)
    return str(chain) + OUT_SUFFIX


def port_span(entry: Any) -> tuple[int, int] | None:
    """``22``, ``"9100"``, ``"64021:64052"`` or ``"64021-64052"`` as (first, last), or
    None when it is not a port or a range of ports 1-65535."""
    if isinstance(entry, bool) or not isinstance(entry, int | str):
        return None
    text = str(entry).strip().replace("-", ":")
    a, sep, b = text.partition(":")
    lo, hi = whole_number(a), whole_number(b if sep else a)
    if lo is None or hi is None or not 0 < lo <= hi <= 65535:
        return None
    return lo, hi


# The variables the firewall's lists come from, by firewall_rules' argument.
LIST_SETTINGS = {"open_ports": "ray_cluster_firewall_open_ports",
                 "peer_ports": "ray_cluster_firewall_peer_ports",
                 "allowed": "ray_cluster_firewall_allow",
                 "ephemeral": "the node's ephemeral port range",
                 "node_ips": "the nodes' cluster_ip"}


def _listed(arg: str, value: Any) -> list[Any]:
    """A list argument of the firewall, refused (naming its variable) when it is not a
    list: a string would be read one character at a time (``"22"`` opens port 2)."""
    if isinstance(value, list | tuple):
        return list(value)
    raise RayConfigError(rolevars.not_a_list(LIST_SETTINGS[arg], value, "ray_cluster"))


def _port_spans(arg: str, specs: Any) -> list[int | tuple[int, int]]:
    """The entries of a port list as ports for multiport, each checked."""
    out: list[int | tuple[int, int]] = []
    name = LIST_SETTINGS[arg]
    for spec in _listed(arg, specs):
        span = port_span(spec)
        if span is None:
            raise RayConfigError(f"{name} entry {spec!r} is not a port or a range a:b of "
                                 f"ports 1-65535. Fix: correct {name}, e.g. [\"22\"].")
        out.append(span[0] if span[0] == span[1] else span)
    return out


def ray_peer_ports(p: Mapping[str, Any], *, to_head: bool, from_head: bool) -> list[Any]:
    """The Ray ports a node accepts from one other node of the cluster.

    Every node: its raylet (``node_manager``), object manager and worker processes, which
    the other nodes' raylets, object managers and workers call. The head also: the GCS,
    which every other node's processes call. A node other than the head, from the head:
    its dashboard agent (gRPC and the HTTP port job submission goes through), which only
    the head's dashboard calls. Nothing else: the dashboard, the job API, the client
    server, the runtime-env agent and the metrics ports are for the node itself.
    """
    out: list[Any] = [int(p["node_manager"]), int(p["object_manager"]),
                      (int(p["min_worker"]), int(p["max_worker"]))]
    if to_head:
        out.append(int(p["gcs"]))
    if from_head and not to_head:
        out += [int(p["dashboard_agent_grpc"]), int(p["dashboard_agent_http"])]
    return out


def firewall_rules(chain: str, node_ip: str, head_ip: str, node_ips: Iterable[str],
                   p: Mapping[str, Any], *, open_ports: Iterable[Any] = (22,),
                   peer_ports: Iterable[Any] = (), ephemeral: Iterable[Any] = (),
                   allowed: Iterable[str] = (), owner_uid: int = 0) -> dict[str, list[str]]:
    """The two chains' rules exactly as ``iptables -S`` prints them, for one node.

    ``input`` (chain ``chain``, jumped to first from INPUT) is default-deny for new
    inbound connections: loopback (guarded by ``output``), replies, ICMP and
    ``open_ports`` (SSH) pass; each other node of the cluster reaches the Ray ports it
    needs here (``ray_peer_ports``); ``allowed`` sources reach the head's dashboard and
    client server; then Ray's other ports are dropped for everyone, the other nodes
    reach ``peer_ports`` (HCCL's host ports from a3rl_hccl_base_port, the artifact chain's
    relay port) and ``ephemeral`` (the
    kernel's ephemeral range, which torch.distributed's store, gloo and HCCL with
    HCCL_HOST_SOCKET_PORT_RANGE=auto listen on), and anything else new is dropped.

    ``output`` (chain ``chain-OUT``, jumped to first from OUTPUT): only ``owner_uid``,
    the user Ray runs as, opens connections to Ray's ports and ``peer_ports`` on this node
    (through loopback, whatever address), or to the ports the other nodes accept from
    this one. The ephemeral range on loopback stays open to local users: their own
    programs listen there.
    """
    problem = chain_name_problem(chain)
    if problem:
        raise RayConfigError(problem)
    every = ports(p)
    peers: list[str] = []
    node_ips = _listed("node_ips", node_ips)
    for src in [node_ip, head_ip, *node_ips]:
        net = ipaddress.ip_network(str(src), strict=False)
        if net.version != 4:
            raise RayConfigError(f"{src}: only IPv4 sources are supported")
    for ip in node_ips:
        if str(ip) != str(node_ip) and str(ip) not in peers:
            peers.append(str(ip))
    guarded: list[Any] = _port_spans("peer_ports", peer_ports)
    extra: list[Any] = guarded + _port_spans("ephemeral", ephemeral)
    opened: list[Any] = _port_spans("open_ports", open_ports)
    allowed = _listed("allowed", allowed)
    is_head = str(node_ip) == str(head_ip)
    inp = [f"-A {chain} -i lo -j RETURN",
           f"-A {chain} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
           f"-A {chain} -p icmp -j RETURN"]
    if opened:
        inp.append(f"-A {chain} -p tcp -m multiport --dports {multiport_spec(opened)} -j RETURN")
    for peer in peers:
        want = ray_peer_ports(p, to_head=is_head, from_head=peer == str(head_ip))
        inp.append(f"-A {chain} -s {peer}/32 -p tcp -m multiport --dports "
                   f"{multiport_spec(want)} -j RETURN")
    if is_head:
        seen: set[str] = set()
        entry = multiport_spec([int(p["dashboard"]), int(p["client_server"])])
        for src in allowed:
            net = ipaddress.ip_network(str(src), strict=False)
            if net.version != 4:
                raise RayConfigError(f"{src}: only IPv4 sources are supported")
            if str(net) not in seen:
                seen.add(str(net))
                inp.append(f"-A {chain} -s {net} -p tcp -m multiport --dports {entry} -j RETURN")
    else:
        for src in allowed:
            if ipaddress.ip_network(str(src), strict=False).version != 4:
                raise RayConfigError(f"{src}: only IPv4 sources are supported")
    inp.append(f"-A {chain} -p tcp -m multiport --dports {multiport_spec(every)} -j DROP")
    if extra:
        for peer in peers:
            inp.append(f"-A {chain} -s {peer}/32 -p tcp -m multiport --dports "
                       f"{multiport_spec(extra)} -j RETURN")
    inp.append(f"-A {chain} -j DROP")

    out_chain = chain + OUT_SUFFIX
    reject = "-j REJECT --reject-with icmp-port-unreachable"
    # IPv6 (ip6tables): Ray listens on [::] too and every node has a link-local address.
    # The cluster talks IPv4, so no other node gets anything: loopback, replies, ICMPv6
    # and the open ports (SSH) only.
    inp6 = [r.replace("-p icmp ", "-p ipv6-icmp ") for r in inp[:4 if opened else 3]]
    inp6.append(f"-A {chain} -j DROP")
    out6 = [*out_head(out_chain, owner_uid),
            f"-A {out_chain} -o lo -p tcp -m multiport --dports "
            f"{multiport_spec(every + guarded)} -j REJECT --reject-with icmp6-port-unreachable"]
    out = [*out_head(out_chain, owner_uid),
           f"-A {out_chain} -o lo -p tcp -m multiport --dports "
           f"{multiport_spec(every + guarded)} {reject}"]
    for peer in peers:
        out.append(f"-A {out_chain} -d {peer}/32 -p tcp -m multiport --dports "
                   f"{multiport_spec(every + extra)} {reject}")
    return {"input": inp, "output": out, "input6": inp6, "output6": out6}


def out_head(out_chain: str, owner_uid: int) -> list[str]:
    """The OUTPUT chain's first rules: replies, and everything of the Ray user, pass."""
    return [f"-A {out_chain} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
            f"-A {out_chain} -m owner --uid-owner {int(owner_uid)} -j RETURN"]


# Targets that cannot let a packet past the chain: they stop it or only look at it.
_NOT_ACCEPTING = {"DROP", "REJECT", "LOG", "NFLOG"}
_PORT_OPTS = ("--dport", "--dports", "--destination-port", "--destination-ports")


def _spans(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        a, _, b = part.partition(":")
        out.append((int(a), int(b or a)))
    return out


def _matches(tokens: list[str]) -> dict[str, str]:
    """A rule's plain (not negated) matches: ``-i``, ``-o``, ``-p``, ``-s``, ``-d``, the
    conntrack state, the destination ports and the owner, by one key each."""
    found: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        if (i and tokens[i - 1] == "!") or i + 1 >= len(tokens) or tokens[i + 1] == "!":
            continue
        key = {"--state": "--ctstate", "--uid-owner": "--uid-owner",
               **{o: "--dports" for o in _PORT_OPTS}}.get(tok, tok)
        if key in ("-i", "-o", "-p", "-s", "-d", "--ctstate", "--dports", "--uid-owner"):
            found[key] = tokens[i + 1]
    return found


def _covers(ret: dict[str, str], rule: dict[str, str]) -> bool:
    """Every packet ``rule`` matches is matched by the RETURN rule ``ret`` too."""
    for key, want in ret.items():
        have = rule.get(key)
        if have is None:
            return False
        if key == "--ctstate":
            if not set(have.split(",")) <= set(want.split(",")):
                return False
        elif key == "--dports":
            if not all(any(a <= c and d <= b for a, b in _spans(want)) for c, d in _spans(have)):
                return False
        elif key in ("-s", "-d"):
            mine, theirs = (ipaddress.ip_network(x.split(",")[0], strict=False)
                            for x in (have, want))
            if "," in have or mine.version != theirs.version or not mine.subnet_of(theirs):
                return False
        elif have != want:
            return False
    return True


def jump_problems(live_rules: str, chain: str, chain_rules: Sequence[str],
                  builtin: str = "INPUT") -> list[str]:
    """Why the jump from ``builtin`` (INPUT or OUTPUT) to ``chain`` does not guard the
    node ([] when it does).

    ``live_rules`` is ``iptables -S BUILTIN``; ``chain_rules`` the chain's own rules
    (``firewall_rules``). ``iptables -C`` only says the jump exists. It guards the node
    when no rule above it lets past what the chain would stop: a rule above is harmless
    when its target stops or only logs packets (DROP, REJECT, LOG, NFLOG, none), or when
    everything it matches is returned by one of the chain's own unconditional RETURN
    rules anyway (loopback, replies, ICMP, SSH, the Ray user): matched by
    its plain matches, negated ones aside (they only narrow a rule). Any other rule
    (an ACCEPT of a peer or of UDP, a jump to another chain, RETURN to an ACCEPT policy)
    counts against.
    """
    import shlex

    returns = [_matches(shlex.split(r)) for r in chain_rules
               if r.endswith("-j RETURN") and " -s " not in r and " -d " not in r]

    def harmless(t: list[str]) -> bool:
        target = t[t.index("-j") + 1] if "-j" in t else t[t.index("-g") + 1] if "-g" in t else ""
        if target == "" or target in _NOT_ACCEPTING:
            return True
        rule = _matches(t)
        return any(_covers(r, rule) for r in returns)

    rules = [ln for ln in live_rules.splitlines() if ln.startswith(f"-A {builtin} ")]
    problems = []
    for n, rule in enumerate(rules, 1):
        t = shlex.split(rule)
        if t[2:] == ["-j", chain]:
            return problems
        if not harmless(t):
            problems.append(f"{builtin} rule {n} ({rule}) comes before the jump to {chain} and "
                            "can let past what the chain stops. Fix: ray-firewall apply puts "
                            "the jump first.")
    return [f"{builtin} has no jump to {chain}. Fix: ray-firewall apply."]


DASHBOARD_BINDS = ("loopback", "cluster", "any")


def dashboard_host(bind: str, cluster_ip: str) -> str:
    """The address the dashboard (and the job API on it) listens on. Every play that
    reaches the job API reads it (``a3rl_ray_dashboard_url``), not only the Ray role, whose
    argument spec checks the setting."""
    if str(bind) not in DASHBOARD_BINDS:
        raise RayConfigError(
            f"a3rl_ray_dashboard_bind {bind!r} is not one of "
            f"{', '.join(DASHBOARD_BINDS)}: an address is not a choice. Fix: set "
            "a3rl_ray_dashboard_bind to loopback (the head itself), cluster (the head's "
            "cluster_ip) or any.")
    return {"loopback": "127.0.0.1", "cluster": str(cluster_ip), "any": "0.0.0.0"}[str(bind)]


def dashboard_url(bind: str, head_ip: str, port: int) -> str:
    """The dashboard's URL as the head itself reaches it (0.0.0.0 includes loopback)."""
    host = dashboard_host(bind, head_ip)
    return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{int(port)}"


def installed_version(output: str) -> str | None:
    """The version in ``ray --version`` output (``ray, version 2.48.0``), or None."""
    m = re.search(r"\bversion\s+(\d+\.\d+\.\d+\S*)", str(output or ""))
    return m.group(1) if m else None


def start_args(is_head: bool, node_ip: str, head_ip: str, p: Mapping[str, Any],
               npus: int, dashboard_bind: str = "loopback", num_cpus: Any = None,
               object_store_bytes: Any = None, num_gpus: Any = None,
               extra_resources: Mapping[str, Any] | None = None) -> list[str]:
    """``ray start`` arguments for one node (the recipe's, with every port fixed).

    ``num_gpus`` and ``extra_resources`` (custom resources besides ``NPU``) are for the
    simulator, whose real verl on CPU counts logical GPUs and asks each worker for a
    custom resource named ``cpu`` (shared/reference/verl-cpu.md, "Config that ran")."""
    resources = {"NPU": int(npus)}
    if extra_resources and not isinstance(extra_resources, Mapping):
        raise RayConfigError(rolevars.not_a_mapping("ray_cluster_extra_resources",
                                                    extra_resources, "ray_cluster"))
    for name, amount in (extra_resources or {}).items():
        if name == "NPU":
            raise ValueError("extra_resources cannot set NPU: it is npus_per_node")
        resources[str(name)] = int(amount)
    args = ["--node-ip-address", str(node_ip),
            "--resources", json.dumps(resources, separators=(",", ":")),
            "--node-manager-port", str(p["node_manager"]),
            "--object-manager-port", str(p["object_manager"]),
            "--runtime-env-agent-port", str(p["runtime_env_agent"]),
            "--dashboard-agent-grpc-port", str(p["dashboard_agent_grpc"]),
            "--dashboard-agent-listen-port", str(p["dashboard_agent_http"]),
            "--metrics-export-port", str(p["metrics_export"]),
            "--min-worker-port", str(p["min_worker"]),
            "--max-worker-port", str(p["max_worker"])]
    if num_cpus not in (None, ""):
        args += ["--num-cpus", str(int(num_cpus))]
    if object_store_bytes not in (None, ""):
        args += ["--object-store-memory", str(int(object_store_bytes))]
    if num_gpus not in (None, ""):
        args += ["--num-gpus", str(int(num_gpus))]
    if is_head:
        return ["--head", "--port", str(p["gcs"]),
                "--dashboard-host", dashboard_host(dashboard_bind, node_ip),
                "--dashboard-port", str(p["dashboard"]),
                "--ray-client-server-port", str(p["client_server"]), *args]
    return ["--address", f"{head_ip}:{p['gcs']}", *args]


def membership(nodes: Sequence[Mapping[str, Any]], expected: Mapping[str, str],
               npus_per_node: int,
               raylets: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Who has joined, from the head's node list (state API ``/api/v0/nodes``).

    ``expected`` maps inventory host -> cluster IP. A node that died and came back shows
    twice for a while (the old entry ALIVE until its health checks fail), so ``ready``
    also asks that the NPU total be exactly what the inventory gives.

    ``raylets`` (optional) maps a host to the node IDs of the raylets running on it now
    (``raylet_node_ids``). A raylet killed outright stays ALIVE in the list until the
    head's health checks fail: by IP and NPU count alone, its entry stands in for the new
    raylet that is still starting. With ``raylets``, ``ready`` also asks that each named
    host run a raylet and that every one of them be ALIVE in the list; the hosts that fail
    this are in ``not_live``.
    """
    alive = [n for n in nodes if n.get("state") == "ALIVE"]
    by_ip: dict[str, list[Mapping[str, Any]]] = {}
    for n in alive:
        by_ip.setdefault(str(n.get("node_ip")), []).append(n)
    joined = sorted(h for h, ip in expected.items() if str(ip) in by_ip)
    missing = sorted(h for h, ip in expected.items() if str(ip) not in by_ip)
    strangers = sorted(ip for ip in by_ip if ip not in {str(v) for v in expected.values()})
    total = sum(float((n.get("resources_total") or {}).get("NPU", 0)) for n in alive)
    want = int(npus_per_node) * len(expected)
    alive_ids = {str(n.get("node_id")) for n in alive if n.get("node_id")}
    not_live = sorted(h for h, ids in (raylets or {}).items()
                      if not ids or any(str(i) not in alive_ids for i in ids))
    per_host = {}
    for h, ip in expected.items():
        entries = by_ip.get(str(ip), [])
        newest = max(entries, key=lambda n: n.get("start_time_ms") or 0) if entries else None
        per_host[h] = {
            "joined": newest is not None,
            "npus": int(float((newest or {}).get("resources_total", {}).get("NPU", 0))),
            "start_time_ms": (newest or {}).get("start_time_ms"),
            "is_head": bool((newest or {}).get("is_head_node")),
        }
    return {
        "joined": joined,
        "missing": missing,
        "strangers": strangers,
        "not_live": not_live,
        "npu_total": int(total),
        "npu_expected": want,
        "ready": not missing and int(total) == want and not not_live,
        "nodes": per_host,
    }


def raylet_node_ids(pgrep_output: str) -> list[str]:
    """The node IDs on the command lines ``pgrep -a`` printed for a node's raylets.

    The raylet is started with ``--node_id=<hex>`` (Ray 2.48 and 2.60:
    ``ray/_private/services.py``, ``start_raylet``), the ID the state API lists it under.
    """
    return sorted(set(re.findall(r"--node_id=([0-9a-fA-F]+)(?:\s|$)", pgrep_output or "")))
