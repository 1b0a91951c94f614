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

from a3rl.npu import version_key

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


def ports(p: Mapping[str, Any]) -> list[int | tuple[int, int]]:
    """Every port a Ray node listens on, from the role's port settings."""
    single = [p["gcs"], p["dashboard"], p["client_server"], p["node_manager"],
              p["object_manager"], p["runtime_env_agent"], p["dashboard_agent_grpc"],
              p["dashboard_agent_http"], p["metrics_export"]]
    out: list[int | tuple[int, int]] = [int(x) for x in single]
    dup = {x for x in out if out.count(x) > 1}
    if dup:
        raise RayConfigError(f"Ray ports used twice: {sorted(dup)}. Fix: give each its own port.")
    lo, hi = int(p["min_worker"]), int(p["max_worker"])
    if lo > hi:
        raise RayConfigError(f"worker port range {lo}-{hi} is empty. Fix: min <= max.")
    inside = [x for x in out if isinstance(x, int) and lo <= x <= hi]
    if inside:
        raise RayConfigError(f"ports {inside} fall inside the worker port range {lo}-{hi}. "
                             "Fix: move them out of the range.")
    out.append((lo, hi))
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


def firewall_rules(chain: str, node_ips: Iterable[str], port_list: Sequence[Any],
                   allowed: Iterable[str] = ()) -> list[str]:
    """The chain's rules exactly as ``iptables -S CHAIN`` prints them.

    Loopback, replies, the cluster's own nodes and any extra allowed sources pass; new
    TCP connections to a Ray port from anywhere else are dropped. Other ports (SSH) are
    not touched.
    """
    rules = [f"-A {chain} -i lo -j RETURN",
             f"-A {chain} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"]
    seen: set[str] = set()
    for src in [*node_ips, *allowed]:
        net = ipaddress.ip_network(str(src), strict=False)
        if net.version != 4:
            raise RayConfigError(f"{src}: only IPv4 sources are supported")
        text = str(net)
        if text not in seen:
            seen.add(text)
            rules.append(f"-A {chain} -s {text} -j RETURN")
    rules.append(f"-A {chain} -p tcp -m multiport --dports {multiport_spec(port_list)} -j DROP")
    return rules


# Targets that cannot let a packet past the chain: they stop it or only look at it.
_NOT_ACCEPTING = {"DROP", "REJECT", "LOG", "NFLOG"}


def _spans(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        a, _, b = part.partition(":")
        out.append((int(a), int(b or a)))
    return out


def jump_problems(input_rules: str, chain: str, chain_rules: Sequence[str]) -> list[str]:
    """Why the jump from INPUT to ``chain`` does not guard Ray's ports ([] when it does).

    ``input_rules`` is ``iptables -S INPUT``; ``chain_rules`` are the chain's own rules
    (``firewall_rules``). ``iptables -C`` only says the jump exists. It guards the ports
    when no rule above it can let past what the chain drops: a new TCP connection to one
    of its ports from a source it does not return. A rule above the jump is harmless
    when its target stops or only logs packets (DROP, REJECT, LOG, NFLOG, none), or when
    one of its matches (not negated) excludes such a connection: ``-i lo``, a conntrack
    or state match without NEW, a protocol other than tcp, destination ports outside the
    chain's, or a source inside one the chain returns. Any other rule (ACCEPT, RETURN to
    an ACCEPT policy, a jump to another chain, a match this cannot read) counts against.
    """
    import shlex

    drop = next((r for r in chain_rules if r.endswith("-j DROP")), "")
    ray_ports = _spans(drop.split("--dports ")[1].split()[0]) if "--dports " in drop else []
    returned = []
    for r in chain_rules:
        t = r.split()
        if "-s" in t and t[-1] == "RETURN":
            returned.append(ipaddress.ip_network(t[t.index("-s") + 1], strict=False))

    def harmless(t: list[str]) -> bool:
        target = t[t.index("-j") + 1] if "-j" in t else t[t.index("-g") + 1] if "-g" in t else ""
        if target == "" or target in _NOT_ACCEPTING:
            return True
        for i, tok in enumerate(t):
            if i and t[i - 1] == "!":
                continue
            nxt = t[i + 1] if i + 1 < len(t) else ""
            if nxt == "!":
                continue
            if tok == "-i" and nxt == "lo":
                return True
            if tok in ("--ctstate", "--state") and "NEW" not in nxt.split(","):
                return True
            if tok == "-p" and nxt not in ("tcp", "6", "all"):
                return True
            if tok in ("--dport", "--dports", "--destination-port", "--destination-ports"):
                theirs = _spans(nxt)
                if ray_ports and not any(a <= d and c <= b for a, b in theirs
                                         for c, d in ray_ports):
                    return True
            if tok == "-s":
                net = ipaddress.ip_network(nxt.split(",")[0], strict=False)
                if "," not in nxt and any(net.version == r.version and net.subnet_of(r)
                                          for r in returned):
                    return True
        return False

    rules = [ln for ln in input_rules.splitlines() if ln.startswith("-A INPUT ")]
    problems = []
    for n, rule in enumerate(rules, 1):
        t = shlex.split(rule)
        if t[2:] == ["-j", chain]:
            return problems
        if not harmless(t):
            problems.append(f"INPUT rule {n} ({rule}) comes before the jump to {chain} and "
                            "can let past new connections to Ray's ports. Fix: ray-firewall "
                            "apply puts the jump first.")
    return [f"INPUT has no jump to {chain}. Fix: ray-firewall apply."]


def dashboard_host(bind: str, cluster_ip: str) -> str:
    """The address the dashboard (and the job API on it) listens on."""
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
               object_store_bytes: Any = None) -> list[str]:
    """``ray start`` arguments for one node (the recipe's, with every port fixed)."""
    args = ["--node-ip-address", str(node_ip),
            "--resources", json.dumps({"NPU": int(npus)}, separators=(",", ":")),
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
    if is_head:
        return ["--head", "--port", str(p["gcs"]),
                "--dashboard-host", dashboard_host(dashboard_bind, node_ip),
                "--dashboard-port", str(p["dashboard"]),
                "--ray-client-server-port", str(p["client_server"]), *args]
    return ["--address", f"{head_ip}:{p['gcs']}", *args]


def membership(nodes: Sequence[Mapping[str, Any]], expected: Mapping[str, str],
               npus_per_node: int) -> dict[str, Any]:
    """Who has joined, from the head's node list (state API ``/api/v0/nodes``).

    ``expected`` maps inventory host -> cluster IP. A node that died and came back shows
    twice for a while (the old entry ALIVE until its health checks fail), so ``ready``
    also asks that the NPU total be exactly what the inventory gives.
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
        "npu_total": int(total),
        "npu_expected": want,
        "ready": not missing and int(total) == want,
        "nodes": per_host,
    }
