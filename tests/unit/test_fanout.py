"""The artifact fan-out chain (``a3rl.node.fanout``): the plan, and real relays over real
localhost sockets writing real files - resume from offsets, a corrupted byte, a relay
killed mid-stream, strangers and wrong tokens refused, relays that end by themselves.

Relays listen on 127.0.0.11, .12, ... (one loopback address per simulated node, the same
port), so the predecessor check sees distinct addresses as on a cluster network. The
first hop's SSH is exercised by the integration tests; here one test runs its remote
half (the connector) through a local shell in place of ssh.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from a3rl.node import fanout, stage

TOKEN = "t0ken-for-the-tests"
RUN = "testrun"
PORT = 29999  # any free-looking port: these plans are not run
SRC = Path(fanout.__file__)


def ip(i: int) -> str:
    return f"127.0.0.{11 + i}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_store(root: Path, contents: dict[str, bytes]) -> list[dict]:
    files = []
    for rel, data in contents.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        files.append({"path": rel, "sha256": sha(data), "size": len(data)})
    return files


def nodes_state(dirs: list[Path], files: list[dict]) -> list[dict]:
    """What a3rl_artifact_files reports per node (verify mode), as the play feeds the plan."""
    out = []
    for i, d in enumerate(dirs):
        held = stage.check_files(str(d), files, verify=True)
        partial = {p: (d / p).stat().st_size for p in held["needed"] if (d / p).is_file()}
        out.append({"host": f"node{i + 1}", "ip": ip(i), "needed": held["needed"],
                    "partial": partial})
    return out


def run_chain(tmp_path: Path, store: Path, dirs: list[Path], files: list[dict],
              bwlimit: int = 0, after_plan=None,
              **relay_kw) -> tuple[dict, dict, list[dict | None]]:
    """Plan, start every relay (threads), send; returns the plan, the sender's result and
    each node's relay result (None for a node outside the chain). ``after_plan()`` runs
    between the plan and the relays' start (a node's copy changing in between)."""
    port = free_port()
    p = fanout.plan(nodes_state(dirs, files), files, port=port, run=RUN,
                    socket_dir=str(tmp_path / "sock"))
    assert p["mode"] == "chain", p["reason"]
    if after_plan:
        after_plan()
    results: list[dict | None] = [None] * len(dirs)
    threads = []
    for i, d in enumerate(dirs):
        hop = p["hops"].get(f"node{i + 1}")
        if hop is None:
            continue
        held = stage.check_files(str(d), files, verify=False)

        def go(i=i, d=d, hop=hop, needed=held["needed"]):
            results[i] = fanout.relay(
                str(d), p["files"], needed, hop["position"], hop["listen"], TOKEN, RUN,
                peer=hop["peer"], forward_to=hop["next"], source=hop["source"],
                connect_timeout=relay_kw.get("connect_timeout", 10),
                io_timeout=relay_kw.get("io_timeout", 10), deadline=60)

        t = threading.Thread(target=go, daemon=True)
        t.start()
        threads.append(t)
    sent = fanout.send(str(store), p["files"], connect_unix(p["first"]["socket"]), TOKEN, RUN,
                       bwlimit=bwlimit, io_timeout=10)
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a relay did not end"
    return p, sent, results


def connect_unix(path: str, wait: float = 10) -> socket.socket:
    deadline = time.monotonic() + wait
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# ---------------------------------------------------------------------------------- plan


FILES = [{"path": "a.bin", "sha256": "a" * 64, "size": 1000},
         {"path": "b.bin", "sha256": "b" * 64, "size": 500}]


def node(i, needed=(), partial=None):
    return {"host": f"node{i + 1}", "ip": f"10.0.0.{11 + i}", "needed": list(needed),
            "partial": partial or {}}


def test_plan_chains_the_nodes_that_need_files_in_play_order():
    nodes = [node(0, ["a.bin"]), node(1), node(2, ["a.bin", "b.bin"]), node(3, ["a.bin"])]
    p = fanout.plan(nodes, FILES, port=29470, run="r1")
    assert p["mode"] == "chain"
    assert p["order"] == ["node1", "node3", "node4"]
    h1, h3, h4 = (p["hops"][h] for h in p["order"])
    assert h1 == {"position": 0, "listen": "unix:/run/a3rl-fanout/fanout-r1.sock", "peer": None,
                  "next": "10.0.0.13:29470", "source": "10.0.0.11"}
    assert h3 == {"position": 1, "listen": "tcp:10.0.0.13:29470", "peer": "10.0.0.11",
                  "next": "10.0.0.14:29470", "source": "10.0.0.13"}
    assert h4["next"] is None and h4["peer"] == "10.0.0.13"
    # b.bin is needed only by node3 (position 1): nobody forwards it to node4.
    assert p["files"] == [
        {"path": "a.bin", "sha256": "a" * 64, "size": 1000, "offset": 0, "last": 2},
        {"path": "b.bin", "sha256": "b" * 64, "size": 500, "offset": 0, "last": 1},
    ]
    assert p["stream_bytes"] == 1500 and p["star_bytes"] == 3500
    assert p["first"]["host"] == "node1" and p["first"]["socket"].endswith("fanout-r1.sock")


def test_plan_streams_each_file_from_the_smallest_partial_offset():
    nodes = [node(0, ["a.bin"], {"a.bin": 600}), node(1, ["a.bin", "b.bin"], {"a.bin": 250}),
             node(2, ["b.bin"], {"b.bin": 100})]
    p = fanout.plan(nodes, FILES, port=PORT)
    assert [(f["path"], f["offset"], f["last"]) for f in p["files"]] == [
        ("a.bin", 250, 1), ("b.bin", 0, 2)]
    assert p["stream_bytes"] == 750 + 500
    assert p["star_bytes"] == 400 + 750 + 500 + 400


def test_plan_uses_the_star_when_the_chain_is_not_worth_it():
    two = [node(0, ["a.bin"]), node(1, ["a.bin"])]
    star = fanout.plan(two, FILES, mode="star", port=PORT)
    assert star["reason"] == "artifact_store_fanout is star"
    one = fanout.plan([node(0, ["a.bin"]), node(1)], FILES, port=PORT)
    assert (one["mode"], one["reason"]) == ("star", "only node1 needs files")
    small = fanout.plan(two, FILES, min_bytes=1001, port=PORT)
    assert small["mode"] == "star" and "below artifact_store_fanout_min_bytes" in small["reason"]
    assert fanout.plan(two, FILES, min_bytes=1000, port=PORT)["mode"] == "chain"
    none = fanout.plan([node(0), node(1)], FILES, port=PORT)
    assert none["mode"] == "none" and none["files"] == []


def test_plan_deadline_grows_with_the_stream():
    two = [node(0, ["a.bin"]), node(1, ["a.bin"])]
    p = fanout.plan(two, [dict(FILES[0], size=10**9)], connect_timeout=30, io_timeout=20,
                    min_rate=10e6, port=PORT)
    assert p["deadline"] == 2 * 30 + 20 + 100


@pytest.mark.parametrize("kw, nodes, message", [
    ({"mode": "tree"}, [node(0, ["a.bin"])], "must be one of star, chain"),
    ({"port": 70000}, [node(0, ["a.bin"])], "is not a TCP port"),
    ({}, [node(0, ["a.bin"]), dict(node(1, ["a.bin"]), ip="eth0")],
     "node2: cluster_ip 'eth0' is not an IPv4 address"),
    ({}, [node(0, ["a.bin"]), dict(node(1, ["a.bin"]), ip="10.0.0.11")],
     "node2 and node1 have the same cluster_ip 10.0.0.11"),
    ({}, [node(0, ["c.bin"])], "node1: needs c.bin, which is not among the run's files"),
])
def test_plan_refuses_bad_settings_naming_the_host(kw, nodes, message):
    with pytest.raises(fanout.FanoutError, match=message.replace(".", r"\.")):
        fanout.plan(nodes, FILES, **{"port": PORT, **kw})


# ------------------------------------------------------------------------------ hellos


def test_hello_proves_the_token_for_one_position_only():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(fanout.hello(TOKEN, RUN, 1))
        fanout.check_hello(b, TOKEN, RUN, 1)
        a.sendall(fanout.hello(TOKEN, RUN, 1))
        with pytest.raises(fanout.FanoutError, match="does not prove"):
            fanout.check_hello(b, TOKEN, RUN, 2)
        a.sendall(fanout.hello("other", RUN, 1))
        with pytest.raises(fanout.FanoutError, match="does not prove"):
            fanout.check_hello(b, TOKEN, RUN, 1)
        a.sendall(b"GET / HTTP/1.1\r\n\r\n")
        with pytest.raises(fanout.FanoutError, match="not an a3rl fan-out stream"):
            fanout.check_hello(b, TOKEN, RUN, 1)
    assert TOKEN.encode() not in fanout.hello(TOKEN, RUN, 0)


# ------------------------------------------------------------------------------- relays


@pytest.fixture
def cluster(tmp_path):
    store = tmp_path / "store"
    dirs = [tmp_path / f"node{i + 1}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    data = {"git/verl.bundle": os.urandom(3 * (1 << 20) + 12345),
            "images/cann.tar": os.urandom(2 * (1 << 20) + 7),
            "small.txt": b"hello\n"}
    files = make_store(store, data)
    return store, dirs, files, data


def test_chain_places_every_file_on_every_node_verified_and_stamped(tmp_path, cluster):
    store, dirs, files, data = cluster
    p, sent, results = run_chain(tmp_path, store, dirs, files)
    assert sent["sent"] == sum(len(v) for v in data.values()) and not sent["left_out"]
    for d, r in zip(dirs, results, strict=True):
        assert r["upstream"] == "complete", r
        assert sorted(r["verified"]) == sorted(data) and not r["damaged"] and not r["partial"]
        for rel, content in data.items():
            assert (d / rel).read_bytes() == content
            assert (d / rel).stat().st_mode & 0o777 == 0o644
        # The next check trusts the relay's stamps: nothing is hashed again.
        again = stage.check_files(str(d), files, verify=True)
        assert again["needed"] == [] and again["stamped"] == []
    assert [r["downstream"] for r in results] == ["complete", "complete", "none"]
    # Pipelined, not stored-and-forwarded per node: each middle node forwarded it all.
    assert results[0]["forwarded"] > sent["sent"] and results[2]["forwarded"] == 0
    assert not (tmp_path / "sock").exists(), "the first relay's socket (or its folder) stays"


def test_a_node_holding_a_file_only_forwards_it(tmp_path, cluster):
    store, dirs, files, data = cluster
    big = "git/verl.bundle"
    (dirs[0] / big).parent.mkdir(parents=True)
    (dirs[0] / big).write_bytes(data[big])
    before = (dirs[0] / big).stat().st_mtime_ns
    p, _, results = run_chain(tmp_path, store, dirs, files)
    assert p["order"] == ["node1", "node2", "node3"]
    assert big not in results[0]["verified"] and big in results[2]["verified"]
    assert (dirs[0] / big).stat().st_mtime_ns == before
    assert results[0]["written"] == sum(len(v) for k, v in data.items() if k != big)
    assert (dirs[2] / big).read_bytes() == data[big]


def test_partial_copies_resume_from_the_smallest_offset(tmp_path, cluster):
    store, dirs, files, data = cluster
    big = "git/verl.bundle"
    cut = {0: 1 << 20, 1: 2 << 20}  # node3 has none of it; node1 and node2 a prefix
    inodes = {}
    for i, n in cut.items():
        (dirs[i] / big).parent.mkdir(parents=True)
        (dirs[i] / big).write_bytes(data[big][:n])
        inodes[i] = (dirs[i] / big).stat().st_ino
    # Only the big file is needed: the others are already there, verified.
    for d in dirs:
        for rel in ("images/cann.tar", "small.txt"):
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data[rel])
    p, sent, results = run_chain(tmp_path, store, dirs, files)
    assert [f["path"] for f in p["files"]] == [big]
    assert p["files"][0]["offset"] == 0
    for i, d in enumerate(dirs):
        assert (d / big).read_bytes() == data[big]
        assert results[i]["verified"] == [big]
        assert results[i]["written"] == len(data[big]) - cut.get(i, 0)
    for i, ino in inodes.items():
        assert (dirs[i] / big).stat().st_ino == ino, "the partial copy was replaced"
    # node3 done: now node1 and node2 alone, both partial: the stream starts at 1 MiB.
    for i in (0, 1):
        with open(dirs[i] / big, "r+b") as f:
            f.truncate(cut[i])
        os.unlink(str(dirs[i] / big) + ".sha256")
    p, sent, results = run_chain(tmp_path, store, dirs, files)
    assert p["order"] == ["node1", "node2"] and p["files"][0]["offset"] == 1 << 20
    assert sent["sent"] == len(data[big]) - (1 << 20)
    assert results[1]["written"] == len(data[big]) - (2 << 20)
    assert all((d / big).read_bytes() == data[big] for d in dirs)


def test_a_corrupted_byte_is_caught_and_never_stamped(tmp_path, cluster):
    store, dirs, files, data = cluster
    big = "git/verl.bundle"
    # node2 holds a prefix with one byte flipped: only its copy fails, and is removed.
    bad = bytearray(data[big][: 1 << 20])
    bad[4242] ^= 0xFF
    (dirs[1] / big).parent.mkdir(parents=True)
    (dirs[1] / big).write_bytes(bytes(bad))
    _, _, results = run_chain(tmp_path, store, dirs, files)
    assert results[1]["damaged"] == [big] and not (dirs[1] / big).exists()
    assert not Path(str(dirs[1] / big) + ".sha256").exists()
    assert big in results[0]["verified"] and big in results[2]["verified"]
    # A store file altered after its record: every node refuses it.
    for d in dirs:
        for rel in data:
            for path in (d / rel, Path(str(d / rel) + ".sha256")):
                path.unlink(missing_ok=True)
    raw = bytearray(data["images/cann.tar"])
    raw[100] ^= 1
    (store / "images/cann.tar").write_bytes(bytes(raw))
    _, _, results = run_chain(tmp_path, store, dirs, files)
    for d, r in zip(dirs, results, strict=True):
        assert r["damaged"] == ["images/cann.tar"] and not (d / "images/cann.tar").exists()
        assert sorted(r["verified"]) == ["git/verl.bundle", "small.txt"]


def _relay_process(out: Path, root: str, files, needed, hop, **kw) -> None:
    import json

    r = fanout.relay(root, files, needed, hop["position"], hop["listen"], TOKEN, RUN,
                     peer=hop["peer"], forward_to=hop["next"], source=hop["source"], **kw)
    out.write_text(json.dumps(r))


def test_a_relay_killed_mid_stream_leaves_partials_that_resume(tmp_path, cluster):
    import json

    store, dirs, files, data = cluster
    big = "git/verl.bundle"
    files = [f for f in files if f["path"] == big]
    port = free_port()
    p = fanout.plan(nodes_state(dirs, files), files, port=port, run=RUN,
                    socket_dir=str(tmp_path / "sock"))
    ctx = multiprocessing.get_context("fork")
    procs, outs = [], []
    for i, d in enumerate(dirs):
        outs.append(tmp_path / f"result{i}.json")
        procs.append(ctx.Process(target=_relay_process, args=(
            outs[i], str(d), p["files"], [big], p["hops"][f"node{i + 1}"]),
            kwargs={"connect_timeout": 10, "io_timeout": 3, "deadline": 60}))
        procs[-1].start()
    sender: dict = {}
    sock = connect_unix(p["first"]["socket"])

    def feed():
        try:
            sender.update(fanout.send(str(store), p["files"], sock, TOKEN, RUN, bwlimit=1024,
                                      io_timeout=5))
        except fanout.FanoutError as e:
            sender["error"] = str(e)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if (dirs[1] / big).exists() and (dirs[1] / big).stat().st_size > 1 << 20:
            break
        time.sleep(0.05)
    os.kill(procs[1].pid, signal.SIGKILL)
    t.join(30)
    for proc in procs:
        proc.join(30)
        assert proc.exitcode is not None, "a relay did not end by itself"
    r1, r3 = (json.loads(outs[i].read_text()) for i in (0, 2))
    assert r1["verified"] == [big] and r1["upstream"] == "complete"
    assert r1["downstream"].startswith("sending failed"), r1["downstream"]
    assert r3["upstream"] != "complete" and r3["verified"] == []
    sizes = [(d / big).stat().st_size for d in dirs[1:]]
    assert all(0 < s < len(data[big]) for s in sizes), sizes
    for d in dirs[1:]:
        assert not Path(str(d / big) + ".sha256").exists(), "a partial file was stamped"
    # The next run resumes both partial copies, from the smaller of the two offsets.
    inodes = [(d / big).stat().st_ino for d in dirs[1:]]
    p2, sent, results = run_chain(tmp_path, store, dirs, files)
    assert p2["order"] == ["node2", "node3"] and p2["files"][0]["offset"] == min(sizes)
    assert sent["sent"] == len(data[big]) - min(sizes)
    assert [(d / big).stat().st_ino for d in dirs[1:]] == inodes
    assert all((d / big).read_bytes() == data[big] for d in dirs)


def dropped(sock: socket.socket) -> bool:
    """The other end closed (an EOF, or a reset when it closed with our bytes unread)."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_strangers_and_wrong_tokens_are_refused(tmp_path, cluster):
    store, dirs, files, data = cluster
    port = free_port()
    p = fanout.plan(nodes_state(dirs[:2], files), files, port=port, run=RUN,
                    socket_dir=str(tmp_path / "sock"))
    hop = p["hops"]["node2"]
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(fanout.relay(
        str(dirs[1]), p["files"], [f["path"] for f in files], 1, hop["listen"], TOKEN, RUN,
        peer=hop["peer"], connect_timeout=10, io_timeout=5, deadline=30)), daemon=True)
    t.start()
    time.sleep(0.3)
    # From an address that is not the predecessor's: dropped at once, whatever it says.
    stranger = socket.create_connection((ip(1), port), source_address=("127.0.0.99", 0))
    stranger.sendall(fanout.hello(TOKEN, RUN, 1))
    assert dropped(stranger)
    # From the right address with the wrong token: dropped too.
    wrong = socket.create_connection((ip(1), port), source_address=(ip(0), 0))
    wrong.sendall(fanout.hello("guess", RUN, 1))
    assert dropped(wrong)
    # The real predecessor still gets through afterwards.
    real = fanout.connect_next(f"{ip(1)}:{port}", 5, 5, time.monotonic() + 10, ip(0))
    real.send(fanout.hello(TOKEN, RUN, 1))
    # send() says hello for position 0: the stream to position 1 is fed by hand.
    for f in p["files"]:
        real.send(fanout.frame({k: f[k] for k in ("path", "sha256", "size", "offset", "last")}))
        real.send((store / f["path"]).read_bytes())
    real.send(fanout.frame({"end": True}))
    real.finish()
    t.join(20)
    assert result["rejected"] == 2 and result["upstream"] == "complete"
    assert sorted(result["verified"]) == sorted(data)


def test_a_stream_may_not_write_outside_the_folder(tmp_path, cluster):
    store, dirs, files, _ = cluster
    evil = [{"path": "../evil", "sha256": "0" * 64, "size": 3, "offset": 0, "last": 0}]
    a, b = socket.socketpair()
    port = free_port()
    listen = f"tcp:{ip(1)}:{port}"
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(fanout.relay(
        str(dirs[0]), evil, [], 1, listen, TOKEN, RUN, peer=ip(0), connect_timeout=5,
        io_timeout=5, deadline=20)), daemon=True)
    t.start()
    hop = fanout.connect_next(f"{ip(1)}:{port}", 5, 5, time.monotonic() + 10, ip(0))
    hop.send(fanout.hello(TOKEN, RUN, 1))
    hop.send(fanout.frame(evil[0]) + b"bad")
    t.join(20)
    hop.fail("done")
    a.close()
    b.close()
    assert "not a plain relative path" in result["upstream"]
    assert not (tmp_path / "evil").exists()


def test_relays_end_by_themselves(tmp_path, cluster):
    store, dirs, files, data = cluster
    # Nobody connects: the relay gives up after connect_timeout.
    t0 = time.monotonic()
    r = fanout.relay(str(dirs[0]), [], [], 1, f"tcp:{ip(0)}:{free_port()}", TOKEN, RUN,
                     peer=ip(1), connect_timeout=1.0, io_timeout=1.0, deadline=30)
    assert "no predecessor connected within 1 s" in r["upstream"]
    assert time.monotonic() - t0 < 5
    # The predecessor goes silent mid-file: the relay gives up after io_timeout, and keeps
    # what arrived unstamped.
    port = free_port()
    p = fanout.plan(nodes_state(dirs[:2], files), files, port=port, run=RUN)
    f = p["files"][0]
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(fanout.relay(
        str(dirs[1]), p["files"], [f["path"]], 1, f"tcp:{ip(1)}:{port}", TOKEN, RUN,
        peer=ip(0), connect_timeout=5, io_timeout=1.0, deadline=30)), daemon=True)
    t.start()
    hop = fanout.connect_next(f"{ip(1)}:{port}", 5, 5, time.monotonic() + 10, ip(0))
    hop.send(fanout.hello(TOKEN, RUN, 1))
    hop.send(fanout.frame({k: f[k] for k in ("path", "sha256", "size", "offset", "last")}))
    hop.send((store / f["path"]).read_bytes()[:5000])
    t0 = time.monotonic()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    hop.fail("done")
    assert "timed out" in result["upstream"]
    assert result["partial"] == {f["path"]: 5000}
    assert not Path(str(dirs[1] / f["path"]) + ".sha256").exists()


def test_a_successor_that_never_comes_holds_nobody_up(tmp_path, cluster, monkeypatch):
    """node2's relay never starts (its port was taken, its node is down): node1 gives up
    on it shortly after the stream arrives and writes its own copies all the same."""
    monkeypatch.setattr(fanout, "NEXT_GRACE", 1.0)
    store, dirs, files, data = cluster
    p = fanout.plan(nodes_state(dirs[:2], files), files, port=free_port(), run=RUN,
                    socket_dir=str(tmp_path / "sock"))
    hop = p["hops"]["node1"]
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(fanout.relay(
        str(dirs[0]), p["files"], [f["path"] for f in files], 0, hop["listen"], TOKEN, RUN,
        forward_to=hop["next"], source=hop["source"], connect_timeout=30, io_timeout=10,
        deadline=60)), daemon=True)
    t.start()
    t0 = time.monotonic()
    sent = fanout.send(str(store), p["files"], connect_unix(p["first"]["socket"]), TOKEN, RUN)
    t.join(20)
    assert time.monotonic() - t0 < 8, "the missing successor held the chain up"
    assert sent["sent"] == sum(len(v) for v in data.values())
    assert sorted(result["verified"]) == sorted(data) and result["upstream"] == "complete"
    assert result["downstream"].startswith(f"could not connect to {hop['next']}")


def test_first_hop_connector_through_a_shell(tmp_path, cluster):
    """send_over_ssh with a local shell standing in for ssh (``sh -c CMD``): the quoted
    remote command and the connector itself run for real."""
    store, dirs, files, data = cluster
    port = free_port()
    nodes = nodes_state(dirs[:2], files)
    for n in nodes:
        n.update(ssh="sh -c 'exec sh -c \"$1\"'", remote="stand-in-for-user@host",
                 python=sys.executable)
    p = fanout.plan(nodes, files, port=port, run=RUN, socket_dir=str(tmp_path / "s o c k"))
    results: list = [None, None]

    def go(i):
        hop = p["hops"][f"node{i + 1}"]
        results[i] = fanout.relay(str(dirs[i]), p["files"], [f["path"] for f in files],
                                  hop["position"], hop["listen"], TOKEN, RUN, peer=hop["peer"],
                                  forward_to=hop["next"], source=hop["source"],
                                  connect_timeout=10, io_timeout=10, deadline=60)

    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in (0, 1)]
    for t in threads:
        t.start()
    sent = fanout.send_over_ssh(str(store), p["files"], p["first"], TOKEN, RUN,
                                connect_timeout=10, io_timeout=10)
    for t in threads:
        t.join(30)
    assert sent["error"] == "" and sent["sent"] == sum(len(v) for v in data.values())
    assert all(sorted(r["verified"]) == sorted(data) for r in results)
    # An ssh that fails says so, with its exit code and stderr.
    bad = dict(p["first"], ssh="sh -c 'echo host key verification failed >&2; exit 255'")
    r = fanout.send_over_ssh(str(store), p["files"], bad, TOKEN, RUN, connect_timeout=2,
                             io_timeout=2)
    assert "exited 255" in r["error"] and "host key verification failed" in r["error"]


# ------------------------------------------------------------------ what runs on the nodes


def test_node_code_parses_as_python_3_7():
    ast.parse(SRC.read_text(), feature_version=(3, 7))
    ast.parse(fanout.CONNECTOR, feature_version=(3, 7))


def _py37() -> list[str]:
    """Pythons 3.7 on this machine that run: A3RL_PYTHON37, pyenv's, python3.7 on PATH (a
    pyenv shim there may not run, hence the check)."""
    found = [os.environ.get("A3RL_PYTHON37", "")]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.7*/bin/python3.7")))
    found.append(shutil.which("python3.7") or "")
    check = "import sys; sys.exit(sys.version_info[:2] != (3, 7))"
    return [f for f in found if f and os.access(f, os.X_OK)
            and subprocess.run([f, "-c", check], capture_output=True).returncode == 0]


PY37 = _py37()


def need_py37() -> str:
    """A Python 3.7 to run, or a skip; in CI (CI=true) a missing 3.7 fails instead. Debian
    12 packages no 3.7, so a user's fresh machine skips here: the static test
    ``test_node_code_uses_only_names_checked_on_python_3_7`` guards the property there."""
    if PY37:
        return PY37[0]
    if os.environ.get("CI"):
        pytest.fail("no Python 3.7 (A3RL_PYTHON37, python3.7 on PATH, ~/.pyenv) on CI")
    pytest.skip("no Python 3.7 on this machine (set A3RL_PYTHON37)")


# Every module, module attribute and builtin the node-side code names, each checked to
# exist on Python 3.7 (test_the_names_exist_on_python_3_7 resolves them there).
PY37_NAMES = Path(__file__).parent / "fixtures/fanout_py37_names.txt"


def node_side_names(source: str) -> set[str]:
    """Dotted names the code takes from the standard library: imported modules, their
    attributes as written (``os.path.join``, ``socket.timeout``) and builtins. Methods of
    objects (``str.removeprefix``) are not seen: the run on 3.7 covers those."""
    import builtins

    tree = ast.parse(source)
    modules: dict[str, str] = {}
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                modules[(a.asname or a.name).split(".")[0]] = a.name.split(".")[0]
                names.add(a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names.add(f"{node.module}.{a.name}")
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Store)}
    assigned |= {n.name for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assigned |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, cur = [], node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in modules:
                names.add(".".join([modules[cur.id], *reversed(chain)]))
        elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
              and node.id not in assigned and node.id not in modules
              and hasattr(builtins, node.id)):
            names.add(f"builtins.{node.id}")
    return names


def _recorded() -> set[str]:
    return {ln.strip() for ln in PY37_NAMES.read_text().splitlines()
            if ln.strip() and not ln.startswith("#")}


def test_node_code_uses_only_names_checked_on_python_3_7():
    """Runs everywhere, 3.7 or not: a name the node code starts to use (``math.isqrt``,
    ``shlex.join``, 3.8+) fails here until it is checked on 3.7 and added to the list."""
    used = node_side_names(SRC.read_text()) | node_side_names(fanout.CONNECTOR)
    assert sorted(used - _recorded()) == [], f"check these on Python 3.7, add to {PY37_NAMES}"
    assert sorted(_recorded() - used) == [], f"no longer used: drop from {PY37_NAMES}"


def test_node_side_names_sees_a_name_python_3_7_lacks():
    names = node_side_names("import math, os.path\nfrom shlex import join\n"
                            "def f(x):\n    return math.isqrt(x), os.path.join('a'), len(x)\n")
    assert names == {"math", "os.path", "shlex.join", "math.isqrt", "os.path.join",
                     "builtins.len"}


def test_the_names_exist_on_python_3_7():
    """The recorded list resolves name by name on a real 3.7."""
    script = ("import builtins, importlib, sys\nbad = []\n"
              "for name in sys.argv[1:]:\n"
              "    parts = name.split('.')\n"
              "    for i in range(len(parts), 0, -1):\n"
              "        try:\n"
              "            obj = importlib.import_module('.'.join(parts[:i]))\n"
              "            break\n"
              "        except ImportError:\n"
              "            continue\n"
              "    else:\n"
              "        bad.append(name); continue\n"
              "    try:\n"
              "        for p in parts[i:]:\n"
              "            obj = getattr(obj, p)\n"
              "    except AttributeError:\n"
              "        bad.append(name)\n"
              "print(' '.join(bad))\n")
    py = need_py37()
    proc = subprocess.run([py, "-c", script, *sorted(_recorded()), "math.isqrt"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["math.isqrt"]  # 3.8's isqrt: the check can fail


def test_relay_and_connector_run_on_python_3_7(tmp_path, cluster):
    """The oldest Python the nodes may have runs a relay and the connector for real."""
    py37 = need_py37()
    store, dirs, files, data = cluster
    port = free_port()
    p = fanout.plan(nodes_state(dirs[:2], files), files, port=port, run=RUN,
                    socket_dir=str(tmp_path / "sock"))
    import json

    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import fanout\n"
        "a = json.loads(sys.argv[2])\n"
        "print(json.dumps(fanout.relay(**a)))\n"
    )
    # Alone in a folder: nothing of the a3rl package (or of Python 3.11) comes along.
    lone = tmp_path / "py37"
    lone.mkdir()
    (lone / "fanout.py").write_text(SRC.read_text())
    procs = []
    for i in (0, 1):
        hop = p["hops"][f"node{i + 1}"]
        args = {"root": str(dirs[i]), "files": p["files"], "needed": [f["path"] for f in files],
                "position": hop["position"], "listen": hop["listen"], "token": TOKEN,
                "run": RUN, "peer": hop["peer"], "forward_to": hop["next"],
                "source": hop["source"], "connect_timeout": 10, "io_timeout": 10,
                "deadline": 60}
        procs.append(subprocess.Popen([py37, "-c", script, str(lone), json.dumps(args)],
                                      stdout=subprocess.PIPE, text=True))
    first = dict(p["first"], ssh="sh -c 'exec sh -c \"$1\"'", remote="x", python=py37)
    sent = fanout.send_over_ssh(str(store), p["files"], first, TOKEN, RUN, connect_timeout=10,
                                io_timeout=10)
    outs = [json.loads(proc.communicate(timeout=30)[0]) for proc in procs]
    assert sent["error"] == ""
    assert all(sorted(o["verified"]) == sorted(data) for o in outs)


# ----------------------------------------------------------------------- the chain's port


def _yaml(path: str) -> dict:
    import yaml

    from a3rl.paths import project_root

    return yaml.safe_load((project_root() / path).read_text())


def test_the_chain_port_is_not_blocked_or_taken_by_ray_hccl_or_ephemeral_ports():
    """The Ray firewall (roles/ray_cluster) drops new connections to Ray's ports only, from
    outside the cluster: the relays' port must not be one of them (a re-run of the Ray
    role would then cut the chain), nor HCCL's reserved range, nor Linux's ephemeral
    range (an outgoing connection could hold it)."""
    from a3rl.paths import project_root
    from a3rl.planning import ray

    cl = _yaml("group_vars/all/cluster.yml")
    # The relays and the firewall read the one cluster-wide port.
    assert "port=a3rl_fanout_port," in (
        project_root() / "roles/artifact_store/tasks/transfer.yml").read_text()
    assert "{{ a3rl_fanout_port }}" in _yaml("roles/ray_cluster/defaults/main.yml")[
        "ray_cluster_firewall_peer_ports"]
    port = cl["a3rl_fanout_port"]
    rd = _yaml("roles/ray_cluster/defaults/main.yml")
    resolved = {k: (cl[v.strip("{} ")] if isinstance(v, str) and v.startswith("{{") else v)
                for k, v in rd.items() if k.startswith("ray_cluster_") and k.endswith("_port")}
    resolved["ray_cluster_dashboard_port"] = cl["a3rl_ray_dashboard_port"]
    names = ("gcs", "dashboard", "client_server", "node_manager", "object_manager",
             "runtime_env_agent", "dashboard_agent_grpc", "dashboard_agent_http",
             "metrics_export", "min_worker", "max_worker")
    ray_ports = ray.ports({n: resolved[f"ray_cluster_{n}_port"] for n in names})
    taken = [p if isinstance(p, tuple) else (p, p) for p in ray_ports]
    base = int(cl["a3rl_hccl_base_port"])
    taken.append((base, base + int(cl["a3rl_hccl_port_count"]) - 1))
    taken.append((32768, 60999))  # net.ipv4.ip_local_port_range's default
    assert not [t for t in taken if t[0] <= port <= t[1]], (port, taken)


def test_the_port_range_edges():
    two = [node(0, ["a.bin"]), node(1, ["a.bin"])]
    assert fanout.plan(two, FILES, port=65535)["mode"] == "chain"
    for bad in (0, 65536):
        with pytest.raises(fanout.FanoutError, match=f"port {bad} is not a TCP port"):
            fanout.plan(two, FILES, port=bad)


def test_a_header_one_byte_over_the_limit_is_refused():
    import struct

    a, b = socket.socketpair()
    with a, b:
        b.settimeout(5)  # a reader that accepts the length waits for bytes that never come
        a.sendall(struct.pack(">I", fanout.MAX_HEADER + 1))
        with pytest.raises(fanout.FanoutError, match="not an a3rl stream"):
            fanout.read_frame(b)


def test_a_copy_longer_than_the_file_is_replaced_not_kept(tmp_path, cluster):
    """One byte too many (a file of another version, say): the relay starts it anew."""
    store, dirs, files, data = cluster
    small = "small.txt"
    (dirs[0] / small).write_bytes(data[small] + b"X")
    p, sent, results = run_chain(tmp_path, store, dirs, files)
    assert small in results[0]["verified"] and not results[0]["damaged"]
    assert (dirs[0] / small).read_bytes() == data[small]


def test_a_copy_shorter_than_the_streams_offset_is_a_gap_not_a_write(tmp_path, cluster):
    """Every node held the first MiB of the archive when the plan was made, so the stream
    starts there; a node whose copy lost a byte since cannot resume from it: it reports
    the gap (the direct path fills it) and writes nothing into that copy."""
    store, dirs, files, data = cluster
    big = "images/cann.tar"
    for d in dirs:
        (d / big).parent.mkdir(parents=True, exist_ok=True)
        (d / big).write_bytes(data[big][:1 << 20])

    def shrink():
        (dirs[0] / big).write_bytes(data[big][:(1 << 20) - 1])

    p, sent, results = run_chain(tmp_path, store, dirs, files, after_plan=shrink)
    assert next(f for f in p["files"] if f["path"] == big)["offset"] == 1 << 20
    assert results[0]["gaps"] == [big] and not results[0]["damaged"], results[0]
    assert (dirs[0] / big).read_bytes() == data[big][:(1 << 20) - 1]
    assert big in results[1]["verified"]


def test_a_copy_that_grew_longer_after_the_check_is_started_anew_by_the_relay(tmp_path, cluster):
    """The node check (verify mode) already removes a copy longer than the file, so the
    relay's own check matters for one that grew after it: with that check gone the relay
    would resume at the copy's length, keep the stale bytes and report the file damaged."""
    store, dirs, files, data = cluster
    big = "images/cann.tar"
    stale = os.urandom(len(data[big]) + 1)

    def grow():
        (dirs[0] / big).parent.mkdir(parents=True, exist_ok=True)
        (dirs[0] / big).write_bytes(stale)

    p, sent, results = run_chain(tmp_path, store, dirs, files, after_plan=grow)
    assert next(f for f in p["files"] if f["path"] == big)["offset"] == 0
    assert big in results[0]["verified"] and not results[0]["damaged"], results[0]
    assert (dirs[0] / big).read_bytes() == data[big]


def test_a_relays_stamp_clears_the_mark_of_a_copy_begun_on_shared_storage(tmp_path):
    """stage.check_files marks a copy it begins on shared storage; a relay that verified
    and stamped the copy removes the mark, so no later check reads it as a cut copy."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m/w.bin").write_bytes(b"w")
    stamps = tmp_path / ".a3rl/stamps"
    (stamps / "m").mkdir(parents=True)
    (stamps / "m/w.bin.sending").write_text("")
    fanout.write_stamp(str(tmp_path), str(stamps), "m/w.bin", "0" * 64, 1)
    assert sorted(os.listdir(stamps / "m")) == ["w.bin.sha256"]
