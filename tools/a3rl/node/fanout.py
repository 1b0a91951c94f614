"""Artifact fan-out: a pipelined chain that sends each file once, whatever the node count.

The star (every node copies from the controller) costs about N x size / link. In the
chain the controller streams the files once to the first node; every node writes what it
needs and at the same time forwards the stream to the next node, so the whole run costs
about size / link plus one hop's latency per node.

- ``plan``: from what each node holds (the ``a3rl_artifact_files`` check), the chain
  (the nodes that need something, in play order), the stream (per file the smallest
  offset among the nodes that need it, and the last chain position that needs it), and
  whether the chain is worth its set-up at all.
- ``send``: the controller's end. It streams the planned files out of the store into the
  first hop (over SSH: :func:`ssh_first_hop`).
- ``relay``: a node's end. It accepts the stream from its predecessor only, writes and
  hashes the files it needs, stamps each verified one exactly as ``a3rl.node.stage`` does, and
  forwards the stream to its successor.

One stream carries every file of the run::

    stream := MAGIC hello file* end
    frame  := length (4 bytes, big-endian) + JSON object
    hello  := {"v", "position", "nonce", "proof"}   proof = HMAC-SHA256(token, run|position|nonce)
    file   := {"path", "sha256", "size", "offset", "last"} + (size - offset) raw bytes
    end    := {"end": true}

The run's token never crosses the network: each hop proves it knows it with a fresh
nonce, bound to the receiving position, so a recorded hello opens no other hop. Content
is not encrypted between nodes (it is the cluster network); its integrity does not rest
on the network either: every node hashes every file it writes against the sha256 the
controller gave it (not the stream), and only a match is stamped. A file that does not
match is removed; a file cut short is kept, unstamped, for the next transfer to resume.
Whatever a node still lacks after the chain goes the direct way (the star).

Runs on the controller (``plan``, ``send``) and, as Ansible module_utils, on the nodes
(``relay``): standard library only, Python 3.7+ syntax.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import shlex
import socket
import struct
import subprocess
import tempfile
import time
from typing import Any

MAGIC = b"A3RLFAN1"
CHUNK = 1 << 20
MAX_HEADER = 1 << 16
STAMP_SUFFIX = ".sha256"
# The mark of a copy a3rl began on shared storage (a3rl.node.stage.check_files): gone once
# the copy is stamped.
SENDING_SUFFIX = ".sending"
# How long an unproven connection may take to say hello before it is dropped.
HELLO_TIMEOUT = 10.0
# How long after the stream arrives a relay keeps trying to reach its successor.
NEXT_GRACE = 15.0
MODES = ("star", "chain")
# What a file's header carries (the sender's and the plan's must agree on each).
HEADER_KEYS = ("path", "sha256", "size", "offset", "last")
SOCKET_DIR = "/run/a3rl-fanout"

# The first hop's remote end, run by ``python3 -c`` over SSH on the first node: it copies
# its stdin (the stream) into the first relay's unix socket. Python 3.7+, no imports
# beyond the standard library. argv: socket path, seconds to wait for the relay.
CONNECTOR = """\
import os, socket, sys, time
path, wait = sys.argv[1], float(sys.argv[2])
deadline = time.time() + wait
while True:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        break
    except OSError as e:
        s.close()
        if time.time() > deadline:
            sys.exit("a3rl fan-out: no relay listens on %s (%s)" % (path, e))
        time.sleep(0.2)
while True:
    b = os.read(0, 1 << 20)
    if not b:
        break
    s.sendall(b)
s.shutdown(socket.SHUT_WR)
s.recv(1)  # returns when the relay closes: when every node after it is done too
s.close()
"""


class FanoutError(Exception):
    """The fan-out cannot go on; the message names the host or the file and the fix."""


# ------------------------------------------------------------------------------ planning


def whole_number(value: Any) -> int | None:
    """``value`` as a whole number: an int, or a string of ASCII digits with an optional
    minus (what ``-e`` and the inventory give); None otherwise (bools, "1GB", "²").
    ``str.isdigit`` alone accepts "²" (int() then fails) and "١٦" (int() reads 16, but
    the text would go into the env scripts as is). Preflight uses it too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        body = text[1:] if text.startswith("-") else text
        if body.isascii() and body.isdigit():
            return int(text)
    return None


def _needs(node: dict[str, Any]) -> list[str]:
    return [str(p) for p in node.get("needed") or []]


def plan(
    nodes: list[dict[str, Any]],
    files: list[dict[str, Any]],
    *,
    port: int,
    mode: str = "chain",
    min_bytes: int = 0,
    run: str = "",
    socket_dir: str = SOCKET_DIR,
    connect_timeout: float = 60.0,
    io_timeout: float = 60.0,
    min_rate: float = 10e6,
) -> dict[str, Any]:
    """How this run distributes ``files`` to ``nodes``.

    ``nodes``: in play order, each ``{host, ip, needed: [path], partial: {path: bytes}}``
    (``ip``: the node's cluster address, where its relay listens). ``files``: the run's
    ``{path, sha256, size}``. The result's ``mode`` is ``none`` (nothing to send),
    ``star`` (with the ``reason``) or ``chain``, with ``order`` (the chain's hosts),
    ``hops`` (per host: its position, what it listens on, its predecessor's address, its
    successor's and its own), ``files`` (the stream: per file the offset it starts at and the
    last position that needs it), the bytes of the stream and of the star, and
    ``deadline``: the seconds after which every relay gives up, whatever happens.

    The chain is used when more than one node needs something and it saves at least
    ``min_bytes`` over the star (a small run does not pay the chain's set-up).
    """
    if mode not in MODES:
        raise FanoutError(
            f"artifact_store_fanout is {mode!r}; it must be one of {', '.join(MODES)}")
    port_n = whole_number(port)
    if port_n is None or not 0 < port_n < 65536:
        raise FanoutError(f"a3rl_fanout_port {port!r} is not a TCP port (1-65535). "
                          "Fix: set it to a free port, as plain digits.")
    port = port_n
    if whole_number(min_bytes) is None or whole_number(min_bytes) < 0:
        raise FanoutError(f"artifact_store_fanout_min_bytes {min_bytes!r} is not a whole number "
                          "of bytes (no unit suffix). Fix: e.g. 1000000000 for 1 GB.")
    min_bytes = whole_number(min_bytes)
    hosts = [str(n.get("host")) for n in nodes]
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        raise FanoutError(f"the transfer plan names {', '.join(twice)} more than once; a chain "
                          "through one node twice would deadlock. Fix: list each node once.")
    for f in files:
        if whole_number(f.get("size")) is None or whole_number(f.get("size")) < 0:
            raise FanoutError(f"{f.get('path')}: size {f.get('size')!r} is not a whole number of "
                              "bytes, 0 or more. Fix: correct the store's record (fetch again).")
    by_path = {str(f["path"]): f for f in files}
    chain = [n for n in nodes if _needs(n)]
    star_bytes = 0
    for n in chain:
        partial = n.get("partial") or {}
        for p in _needs(n):
            if p not in by_path:
                raise FanoutError(f"{n['host']}: needs {p}, which is not among the run's files")
            star_bytes += int(by_path[p]["size"]) - min(int(partial.get(p) or 0),
                                                        int(by_path[p]["size"]))
    stream = []
    for f in files:
        path = str(f["path"])
        needers = [i for i, n in enumerate(chain) if path in _needs(n)]
        if not needers:
            continue
        size = int(f["size"])
        offsets = [min(int((chain[i].get("partial") or {}).get(path) or 0), size) for i in needers]
        stream.append({"path": path, "sha256": str(f["sha256"]), "size": size,
                       "offset": min(offsets), "last": max(needers)})
    stream_bytes = sum(f["size"] - f["offset"] for f in stream)
    result: dict[str, Any] = {
        "mode": "none", "reason": "every node holds every file", "order": [], "hops": {},
        "files": stream, "stream_bytes": stream_bytes, "star_bytes": star_bytes,
        "deadline": 0, "first": None,
    }
    if not chain:
        return result
    saved = star_bytes - stream_bytes
    if mode == "star":
        result.update(mode="star", reason="artifact_store_fanout is star")
        return result
    if len(chain) < 2:
        result.update(mode="star", reason=f"only {chain[0]['host']} needs files")
        return result
    if saved < int(min_bytes):
        result.update(mode="star", reason=(
            f"the chain would send {_human(saved)} less than the star, below "
            f"artifact_store_fanout_min_bytes ({_human(int(min_bytes))})"))
        return result
    seen: dict[str, str] = {}
    for n in chain:
        try:
            ip = str(ipaddress.IPv4Address(str(n.get("ip") or "")))
        except ValueError:
            raise FanoutError(
                f"{n['host']}: cluster_ip {n.get('ip')!r} is not an IPv4 address; the chain's "
                "relays listen on it. Fix: set cluster_ip in the inventory, or "
                "artifact_store_fanout: star") from None
        if ip in seen:
            raise FanoutError(f"{n['host']} and {seen[ip]} have the same cluster_ip {ip}. "
                              "Fix: give each node its own cluster_ip in the inventory.")
        seen[ip] = n["host"]
    ips = {host: ip for ip, host in seen.items()}
    run = run or secrets.token_hex(8)
    hops = {}
    for i, n in enumerate(chain):
        nxt = chain[i + 1] if i + 1 < len(chain) else None
        hops[n["host"]] = {
            "position": i,
            "listen": (f"unix:{socket_dir.rstrip('/')}/fanout-{run}.sock" if i == 0
                       else f"tcp:{ips[n['host']]}:{port}"),
            "peer": ips[chain[i - 1]["host"]] if i > 0 else None,
            "next": f"{ips[nxt['host']]}:{port}" if nxt else None,
            "source": ips[n["host"]],
        }
    first = chain[0]
    result.update(
        mode="chain",
        reason=f"{len(chain)} nodes need files; the chain sends {_human(saved)} less",
        order=[n["host"] for n in chain],
        hops=hops,
        run=run,
        first={"host": first["host"], "socket": hops[first["host"]]["listen"][len("unix:"):],
               "ssh": first.get("ssh", ""), "remote": first.get("remote", ""),
               "python": first.get("python") or "python3"},
        deadline=int(2 * connect_timeout + io_timeout + stream_bytes / max(float(min_rate), 1.0)),
    )
    return result


def _human(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


# ------------------------------------------------------------------------------- framing


def proof(token: str, run: str, position: int, nonce: str) -> str:
    """What a hop sends to show it knows the run's token, for this position and nonce."""
    msg = f"{run}|{int(position)}|{nonce}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
    return struct.pack(">I", len(body)) + body


def hello(token: str, run: str, position: int) -> bytes:
    nonce = secrets.token_hex(16)
    return MAGIC + frame({"v": 1, "position": int(position), "nonce": nonce,
                          "proof": proof(token, run, position, nonce)})


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError(f"the stream ended {n - got} bytes short of a header")
        got += k
    return bytes(buf)


def read_frame(sock: socket.socket) -> dict[str, Any]:
    (length,) = struct.unpack(">I", _recv_exact(sock, 4))
    if length > MAX_HEADER:
        raise FanoutError(f"a header of {length} bytes (at most {MAX_HEADER}): not an a3rl stream")
    obj = json.loads(_recv_exact(sock, length).decode())
    if not isinstance(obj, dict):
        raise FanoutError("a header that is not a JSON object: not an a3rl stream")
    return obj


def check_hello(sock: socket.socket, token: str, run: str, position: int) -> None:
    """Read the hello from a new connection; raise unless it proves the token."""
    if _recv_exact(sock, len(MAGIC)) != MAGIC:
        raise FanoutError("not an a3rl fan-out stream")
    h = read_frame(sock)
    want = proof(token, run, position, str(h.get("nonce", "")))
    if h.get("position") != position or not hmac.compare_digest(want, str(h.get("proof", ""))):
        raise FanoutError("the hello does not prove the run's token")


# -------------------------------------------------------------------------------- stamps


def write_stamp(root: str, stamp_root: str | None, rel: str, sha256: str, size: int) -> None:
    """The stamp ``a3rl.node.stage.check_files`` writes after a passed check (the same format,
    so the next run's check skips the file without reading it again)."""
    st = os.stat(os.path.join(root, rel))
    stamp = os.path.join(stamp_root or root, rel) + STAMP_SUFFIX
    os.makedirs(os.path.dirname(stamp), exist_ok=True)
    with open(stamp + ".tmp", "w") as s:
        s.write(f"{sha256}  {size}  {st.st_mtime_ns}\n")
    os.replace(stamp + ".tmp", stamp)
    sending = os.path.join(stamp_root or root, rel) + SENDING_SUFFIX
    if os.path.exists(sending):
        os.unlink(sending)


def _safe_rel(path: str) -> str:
    norm = os.path.normpath(path)
    if os.path.isabs(path) or norm.startswith("..") or norm != path or not path:
        raise FanoutError(f"{path!r} is not a plain relative path")
    return path


# ---------------------------------------------------------------------------------- hops


class Hop:
    """The outgoing side of a hop. A failure marks it dead and is remembered; the caller
    goes on (a node whose successor died still writes its own files)."""

    def __init__(self, sock: socket.socket | None, io_timeout: float, error: str = ""):
        self.sock = sock
        self.error = error
        self.sent = 0
        if sock is not None:
            sock.settimeout(io_timeout)

    @property
    def alive(self) -> bool:
        return self.sock is not None

    def send(self, data: Any) -> None:
        if self.sock is None:
            return
        try:
            self.sock.sendall(data)
            self.sent += len(data)
        except OSError as e:
            self.fail(f"sending failed after {self.sent} bytes: {e or type(e).__name__}")

    def fail(self, error: str) -> None:
        self.error = self.error or error
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def finish(self) -> None:
        """Close after the end frame: the successor reads everything, then EOF."""
        if self.sock is None:
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
            # Wait for the successor to close its end, so that an exit here cannot cut
            # off data still in flight (it sends nothing back).
            self.sock.recv(1)
        except OSError:
            pass
        self.sock.close()
        self.sock = None


def connect_next(address: str, connect_timeout: float, io_timeout: float,
                 deadline: float, source: str | None = None) -> Hop:
    """Connect to the successor relay, retrying while it starts (until the timeout).

    From ``source``, this node's own cluster address: the successor accepts only that.
    """
    host, _, port = address.rpartition(":")
    until = min(time.monotonic() + connect_timeout, deadline)
    last = ""
    while True:
        try:
            wait = max(1.0, min(5.0, until - time.monotonic()))
            sock = socket.create_connection((host, int(port)), timeout=wait,
                                            source_address=(source, 0) if source else None)
            return Hop(sock, io_timeout)
        except OSError as e:
            last = str(e) or type(e).__name__
        if time.monotonic() >= until:
            return Hop(None, io_timeout, f"could not connect to {address}: {last}")
        time.sleep(0.2)


# --------------------------------------------------------------------------------- relay


class _Sink:
    """One file this node writes: resumes its partial copy and hashes the whole file."""

    def __init__(self, root: str, rel: str, want: dict[str, Any], have: int,
                 hasher: Any):
        self.path = os.path.join(root, rel)
        self.rel = rel
        self.want = want
        self.skip = have - int(want["offset"])
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.fchmod(fd, 0o644)
        self.f = os.fdopen(fd, "wb")
        self.f.seek(have)
        self.f.truncate()
        self.hasher = hasher
        self.written = 0

    def feed(self, chunk: memoryview) -> None:
        if self.skip:
            drop = min(self.skip, len(chunk))
            chunk = chunk[drop:]
            self.skip -= drop
        if len(chunk):
            self.f.write(chunk)
            self.hasher.update(chunk)
            self.written += len(chunk)

    def close(self) -> None:
        self.f.close()


def _prefix(path: str, size: int) -> Any:
    h = hashlib.sha256()
    left = size
    with open(path, "rb") as f:
        while left:
            b = f.read(min(CHUNK, left))
            if not b:
                break
            h.update(b)
            left -= len(b)
    return h


def _listener(listen: str) -> tuple[socket.socket, str]:
    kind, _, addr = listen.partition(":")
    if kind == "unix":
        folder = os.path.dirname(addr)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        if os.path.exists(addr):
            os.unlink(addr)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            srv.bind(addr)
        finally:
            os.umask(old)
    elif kind == "tcp":
        host, _, port = addr.rpartition(":")
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((host, int(port)))
    else:
        raise FanoutError(f"cannot listen on {listen!r} (unix:PATH or tcp:IP:PORT)")
    srv.listen(8)
    return srv, kind


def _resume(root: str, need: set[str],
            plan_files: dict[str, dict[str, Any]]) -> tuple[dict[str, int], dict[str, Any]]:
    """Per needed file, the bytes a partial copy already holds and a hasher fed with them
    (a copy longer than planned is removed: it cannot be a prefix)."""
    have: dict[str, int] = {}
    hashers: dict[str, Any] = {}
    for rel in need:
        if rel not in plan_files:
            continue
        path = os.path.join(root, _safe_rel(rel))
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        if size > int(plan_files[rel]["size"]):
            os.unlink(path)
            size = 0
        have[rel] = size
        hashers[rel] = _prefix(path, size) if size else hashlib.sha256()
    return have, hashers


def _accept(srv: socket.socket, kind: str, peer: str | None, token: str, run: str,
            position: int, until: float, out: dict[str, Any]) -> socket.socket | None:
    """The predecessor's connection, once one proves the run's token (from ``peer`` only,
    over TCP); None when none did by ``until``. Each refused one counts in ``rejected``."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return None
        srv.settimeout(left)
        try:
            conn, addr = srv.accept()
        except socket.timeout:  # noqa: UP041 - on Python 3.7 it is not TimeoutError
            continue
        if kind == "tcp" and addr[0] != peer:
            conn.close()
            out["rejected"] += 1
            continue
        conn.settimeout(HELLO_TIMEOUT)
        try:
            check_hello(conn, token, run, position)
        except (OSError, EOFError, ValueError, FanoutError):
            conn.close()
            out["rejected"] += 1
            continue
        return conn


def _pass_bytes(up: socket.socket, view: memoryview, rel: str, left: int, *,
                down: Hop | None, sink: _Sink | None, end_by: float, t0: float,
                out: dict[str, Any]) -> None:
    """Read one file's ``left`` bytes from the stream, forwarding them to ``down`` and
    writing them through ``sink`` (either may be None); each read counts in ``received``
    at once, so a stream that breaks mid-file is counted up to the break."""
    while left:
        if time.monotonic() > end_by:
            raise FanoutError(f"the relay's deadline ({end_by - t0:.0f} s) passed")
        k = up.recv_into(view, min(left, CHUNK))
        if k == 0:
            raise EOFError(f"the stream ended {left} bytes before the end of {rel}")
        chunk = view[:k]
        out["received"] += k
        if down is not None:
            down.send(chunk)
        if sink is not None:
            sink.feed(chunk)
        left -= k


def _settle(root: str, stamp_root: str | None, sink: _Sink, want: dict[str, Any],
            out: dict[str, Any]) -> None:
    """A file written whole: stamped when its digest and size are the planned ones,
    removed otherwise."""
    sink.close()
    out["written"] += sink.written
    digest = sink.hasher.hexdigest()
    path = os.path.join(root, sink.rel)
    if digest == want["sha256"] and os.path.getsize(path) == want["size"]:
        write_stamp(root, stamp_root, sink.rel, want["sha256"], int(want["size"]))
        out["verified"].append(sink.rel)
    else:
        os.unlink(path)
        out["damaged"].append(sink.rel)


def _remove_socket(path: str) -> None:
    """The first node's socket and its folder (kept while another run's socket is there)."""
    if os.path.exists(path):
        os.unlink(path)
    try:
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass  # another run's socket is there


def relay(
    root: str,
    files: list[dict[str, Any]],
    needed: list[str],
    position: int,
    listen: str,
    token: str,
    run: str,
    peer: str | None = None,
    forward_to: str | None = None,
    source: str | None = None,
    stamp_root: str | None = None,
    connect_timeout: float = 60.0,
    io_timeout: float = 60.0,
    deadline: float | None = None,
) -> dict[str, Any]:
    """One node's end of the chain; returns what happened (never raises for the network).

    Listens on ``listen`` (``unix:PATH`` for the first node, fed over SSH; ``tcp:IP:PORT``
    for the others, accepting ``peer`` only), waits at most ``connect_timeout`` for a
    predecessor that proves the run's token, then reads the stream. Each file in
    ``needed`` is written (a partial copy resumes: the bytes it holds are hashed first
    and not written again) and hashed; a match is stamped, a mismatch removed, a file cut
    short kept. Each file a later position needs is forwarded to ``forward_to``, from
    ``source`` (this node's cluster address, which the successor expects). The
    relay ends by itself: when the stream ends, when the predecessor sends nothing for
    ``io_timeout`` seconds, or ``deadline`` seconds after it started.
    """
    t0 = time.monotonic()
    end_by = t0 + (deadline if deadline else 2 * connect_timeout + io_timeout + 3600)
    plan_files = {str(f["path"]): f for f in files}
    need = {str(p) for p in needed}
    out: dict[str, Any] = {"verified": [], "damaged": [], "partial": {}, "gaps": [],
                           "received": 0, "written": 0, "forwarded": 0, "rejected": 0,
                           "upstream": "", "downstream": "none" if not forward_to else "",
                           "changed": False}
    try:
        srv, kind = _listener(listen)
    except OSError as e:
        out["upstream"] = f"cannot listen on {listen}: {e}"
        out["seconds"] = round(time.monotonic() - t0, 3)
        return out
    up = None
    down = Hop(None, io_timeout)
    sink = None
    try:
        # Partial copies from an interrupted run: hashed while the stream is not here yet
        # (the predecessor's connection waits in the listen backlog).
        have, hashers = _resume(root, need, plan_files)
        up = _accept(srv, kind, peer, token, run, position,
                     min(t0 + connect_timeout, end_by), out)
        if up is None:
            out["upstream"] = f"no predecessor connected within {connect_timeout:.0f} s"
            return out
        srv.close()
        srv = None
        up.settimeout(io_timeout)
        if forward_to:
            # Every relay was started before the controller began to send: a successor
            # that is not listening a little after the stream reached us is not coming
            # (its port was taken, its node is down), and waiting longer would only hold
            # up the nodes before us.
            window = min(t0 + connect_timeout, time.monotonic() + NEXT_GRACE) - time.monotonic()
            down = connect_next(forward_to, window, io_timeout, end_by, source)
            down.send(hello(token, run, position + 1))
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            if time.monotonic() > end_by:
                raise FanoutError(f"the relay's deadline ({end_by - t0:.0f} s) passed")
            h = read_frame(up)
            if h.get("end"):
                down.send(frame(h))
                out["upstream"] = "complete"
                break
            rel = _safe_rel(str(h.get("path", "")))
            want = plan_files.get(rel)
            if want is None or any(h.get(k) != want[k] for k in HEADER_KEYS):
                raise FanoutError(f"the stream announced {rel!r} not as planned")
            fwd = int(want["last"]) > position
            if fwd:
                down.send(frame(h))
            sink = None
            if rel in need:
                if int(want["offset"]) > have.get(rel, 0):
                    out["gaps"].append(rel)
                else:
                    sink = _Sink(root, rel, want, have[rel], hashers[rel])
                    out["changed"] = True
            _pass_bytes(up, view, rel, int(want["size"]) - int(want["offset"]),
                        down=down if fwd else None, sink=sink, end_by=end_by, t0=t0, out=out)
            if sink is not None:
                done, sink = sink, None
                _settle(root, stamp_root, done, want, out)
    except (OSError, EOFError, ValueError, FanoutError) as e:
        out["upstream"] = str(e) or type(e).__name__
    finally:
        if sink is not None:
            out["written"] += sink.written
            sink.close()
        out["forwarded"] = down.sent
        if forward_to:
            if out["upstream"] == "complete" and down.alive:
                down.finish()
                out["downstream"] = "complete"
            else:
                out["downstream"] = down.error or "closed early (the stream broke)"
                down.fail(out["downstream"])
        # Closed only now, after the successor closed: the close runs back up the chain
        # from its last node, so the controller's send ends when every node is done.
        if up is not None:
            up.close()
        if srv is not None:
            srv.close()
        if kind == "unix":
            _remove_socket(listen[len("unix:"):])
        for rel in need:
            path = os.path.join(root, rel)
            if rel not in out["verified"] and os.path.isfile(path):
                out["partial"][rel] = os.path.getsize(path)
        out["seconds"] = round(time.monotonic() - t0, 3)
    return out


# -------------------------------------------------------------------------------- sender


def send(
    root: str,
    files: list[dict[str, Any]],
    sock: socket.socket,
    token: str,
    run: str,
    bwlimit: int = 0,
    io_timeout: float = 60.0,
) -> dict[str, Any]:
    """Stream the planned ``files`` (``plan()['files']``) from the store folder ``root``
    into ``sock``, the first relay; ``bwlimit`` caps the rate in KiB/s (0: none).

    A store file whose size is not the planned one is left out (the nodes still need it,
    and the direct path after the chain reports it). Raises ``FanoutError`` when the
    first hop breaks.
    """
    t0 = time.monotonic()
    hop = Hop(sock, io_timeout)
    rate = bwlimit * 1024.0
    sent_data = 0
    left_out = []

    def put(data: Any) -> None:
        hop.send(data)
        if not hop.alive:
            raise FanoutError(f"the first hop broke: {hop.error}")

    put(hello(token, run, 0))
    for f in files:
        path = os.path.join(root, _safe_rel(str(f["path"])))
        try:
            src = open(path, "rb")
        except OSError:
            left_out.append(f["path"])
            continue
        with src:
            if os.fstat(src.fileno()).st_size != int(f["size"]):
                left_out.append(f["path"])
                continue
            put(frame({k: f[k] for k in HEADER_KEYS}))
            src.seek(int(f["offset"]))
            left = int(f["size"]) - int(f["offset"])
            while left:
                b = src.read(min(CHUNK, left))
                if not b:
                    raise FanoutError(f"{path} became shorter while it was sent")
                put(b)
                left -= len(b)
                sent_data += len(b)
                if rate:
                    ahead = sent_data / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
    put(frame({"end": True}))
    hop.finish()
    # Until the first relay closed (after the whole chain): every node is done.
    seconds = time.monotonic() - t0
    return {"sent": sent_data, "files": len(files) - len(left_out), "left_out": left_out,
            "seconds": round(seconds, 3),
            "rate_mb_s": round(sent_data / seconds / 1e6, 1) if seconds > 0 else 0.0}


def ssh_first_hop(
    ssh: str, remote: str, python: str, socket_path: str, connect_timeout: float
) -> tuple[socket.socket, subprocess.Popen, Any]:
    """Start ``ssh remote python -c CONNECTOR`` with a socket as its stdin; returns that
    socket (to :func:`send` into), the process and its stderr file.

    ``ssh`` is the inventory's ssh command line (host keys checked), as rsync uses it.
    """
    ours, theirs = socket.socketpair()
    err = tempfile.TemporaryFile()
    remote_cmd = " ".join(shlex.quote(a) for a in
                          [python, "-c", CONNECTOR, socket_path, str(int(connect_timeout))])
    proc = subprocess.Popen(shlex.split(ssh) + [remote, remote_cmd], stdin=theirs,
                            stdout=subprocess.DEVNULL, stderr=err)
    theirs.close()
    return ours, proc, err


def send_over_ssh(
    root: str,
    files: list[dict[str, Any]],
    first: dict[str, Any],
    token: str,
    run: str,
    bwlimit: int = 0,
    connect_timeout: float = 60.0,
    io_timeout: float = 60.0,
) -> dict[str, Any]:
    """:func:`send` through :func:`ssh_first_hop` to the plan's first node. Never raises
    for the transport: the result's ``error`` says what broke (the direct path after the
    chain sends what did not arrive)."""
    sock, proc, err = ssh_first_hop(first["ssh"], first["remote"], first["python"],
                                    first["socket"], connect_timeout)
    result: dict[str, Any] = {"error": ""}
    try:
        result.update(send(root, files, sock, token, run, bwlimit, io_timeout))
    except (OSError, FanoutError) as e:
        result["error"] = str(e)
    finally:
        sock.close()
        try:
            rc = proc.wait(timeout=connect_timeout + io_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        err.seek(0)
        text = err.read().decode(errors="replace").strip()
        err.close()
        if rc != 0:
            result["error"] = "; ".join(x for x in (
                result["error"], f"ssh to {first['host']} exited {rc}: {text[-500:]}") if x)
    return result
