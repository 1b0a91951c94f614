"""The ``a3rl`` command against the simulated cluster, as a person or CI runs it: the real
executable, its plain output when stdout is not a terminal and its live view under a
pseudo-terminal, the run records it leaves, a run that fails on purpose and its failure
summary, ``a3rl runs`` and ``a3rl report``. Works on a bare or a provisioned cluster."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from a3rl.paths import project_root

A3RL = str(Path(sys.executable).parent / "a3rl")
ANSI = re.compile(r"\x1b\[")
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def a3rl(*argv: str, tty: bool = False, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the command; with ``tty``, under ``script`` so that stdout is a terminal."""
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"COLUMNS": "160"}
    cmd = [A3RL, *argv]
    if tty:
        env |= {"TERM": "xterm-256color"}
        cmd = ["script", "-qec", shlex.join(cmd), "/dev/null"]
    return subprocess.run(cmd, cwd=project_root(), env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def record_of(out: str) -> Path:
    (line,) = [ln for ln in out.splitlines() if ln.startswith("record: ")]
    return Path(line.removeprefix("record: ").strip())


def test_preflight_in_plain_output_and_its_record(sim):
    p = a3rl("preflight", "-i", str(sim.inventory_dir))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert not ANSI.search(out) and "\r" not in out  # no colour, no redraws
    assert re.search(r"^\[ *0:\d\d\] PLAY Preflight \| Check the inventory and every node",
                     out, re.M)
    assert re.search(r"^\[ *\d+:\d\d\]   node2 ok", out, re.M)
    # The preflight's own message, per node, from its debug task.
    assert re.search(rf"node2: .*cluster NIC eth0 \({re.escape(sim.members()[1].ip)}\)", out)
    assert re.search(r"^\| node1 \|\s+\d+ \|\s+0 \|\s+0 \|", out, re.M)
    record = record_of(out)
    s = json.loads((record / "summary.json").read_text())
    assert (s["status"], s["rc"], s["counts"]["failed"]) == ("successful", 0, 0)
    assert s["command"] == f"ansible-playbook playbooks/preflight.yml -i {sim.inventory_dir}"
    assert f"same as: {s['command']}" in out
    assert set(s["hosts"]) == {"node1", "node2"}
    assert all(h["busy_seconds"] > 0 and h["tasks"] > 5 for h in s["hosts"].values())
    assert (record / s["log"]).read_text().count("TASK [") >= 10


def test_preflight_that_fails_on_purpose_prints_the_failure_summary(inventory_copy):
    _, edit = inventory_copy

    def wrong_ip(groups):
        groups["workers"]["hosts"]["node2"]["cluster_ip"] = "10.213.255.254"

    inv = edit(wrong_ip)
    p = a3rl("preflight", "-i", str(inv))
    assert p.returncode == 2, p.stdout + p.stderr  # ansible-playbook's code for failed hosts
    out = p.stdout
    assert "FAILED: 2 failure(s) on 2 host(s) (node1, node2):" in out
    summary = out[out.index("FAILED: 2 failure(s)"):]
    assert "  node2 | Preflight | Fail with every problem found on this node\n" in summary
    assert ("    node2: cluster_ip 10.213.255.254 is not on any interface of the node"
            in summary)
    assert "  node1 | Preflight | Stop unless every node passed\n" in summary
    (line,) = [ln for ln in summary.splitlines() if ln.startswith("full log: ")]
    log = Path(line.removeprefix("full log: "))
    assert "cluster_ip 10.213.255.254 is not on any interface" in log.read_text()
    # The log line the summary names is where that failure is in the full log.
    n = int(re.search(r"\(log line (\d+)\)", summary).group(1))
    assert "10.213.255.254" in "\n".join(log.read_text().splitlines()[n - 1:n + 3])
    s = json.loads((record_of(out) / "summary.json").read_text())
    assert [(f["host"], f["task"]) for f in s["failures"]] == [
        ("node2", "Preflight | Fail with every problem found on this node"),
        ("node1", "Preflight | Stop unless every node passed")]

    # The record is listed and reported.
    record = record_of(out)
    p = a3rl("runs", "--play", "preflight", "-n", "50")
    assert p.returncode == 0 and not ANSI.search(p.stdout)
    (row,) = [ln for ln in p.stdout.splitlines() if f"| {record.name} " in ln]
    assert re.search(r"\| playbooks/preflight.yml \| failed\s+\|", row)
    p = a3rl("report", record.name)
    assert p.returncode == 0, p.stdout
    text = (record / "report.md").read_text()
    assert "| status | failed (rc 2) |" in text and "## Failures" in text
    assert "cluster_ip 10.213.255.254 is not on any interface" in text
    assert (record / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_status_below_a_disk_threshold_fails_naming_each_node(sim):
    # No node has an exabyte free: status must fail whatever else the cluster's state is.
    p = a3rl("status", "-i", str(sim.inventory_dir), "-e", f"status_min_free_bytes={10**18}")
    assert p.returncode != 0, p.stdout
    out = p.stdout
    assert re.search(r"localhost: node\s+driver\s+firmware", out)  # the status table
    summary = out[out.index("FAILED: 1 failure(s) on 1 host(s) (localhost):"):]
    assert "  localhost | Status | Fail when something is unhealthy\n" in summary
    for node in ("node1", "node2"):
        assert re.search(rf"{node}: [\d.]+ [kMGT]?B free under the data root, below", summary)


def test_the_live_view_on_a_terminal(sim):
    p = a3rl("preflight", "-i", str(sim.inventory_dir), tty=True)
    assert p.returncode == 0, p.stdout[-3000:]
    out = p.stdout
    assert ANSI.search(out)  # a terminal gets colour and redraws
    assert "Preflight | Reach every node over SSH" in out  # a host's current task, live
    assert re.search(r"playbooks/preflight\.yml: successful in \d+s, 0 changed", out)
    assert (record_of(ESCAPES.sub("", out).replace("\r", "")) / "summary.json").exists()
