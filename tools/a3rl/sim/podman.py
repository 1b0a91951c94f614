"""A thin wrapper over the podman CLI, always with the project's own containers.conf.

Podman on these hosts needs runc (crun fails on cgroups v1 hybrid) and explicit
ulimits below the hard limits; a project-local ``CONTAINERS_CONF`` says so instead of
an edit to the host's ``/etc/containers``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from a3rl.paths import sim_dir

CONTAINERS_CONF = """\
# Written by a3rl's simulator; used through CONTAINERS_CONF, never installed in /etc.
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
events_logger = "file"
"""


class PodmanError(RuntimeError):
    """A podman call failed; the message carries the command and its stderr."""


def conf_path() -> Path:
    path = sim_dir() / "containers.conf"
    if not path.is_file() or path.read_text() != CONTAINERS_CONF:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all: `make test` starts an image build and the tests' podman
        # calls side by side, and a reader must never see half a file.
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(CONTAINERS_CONF)
        tmp.replace(path)
    return path


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["CONTAINERS_CONF"] = str(conf_path())
    return e


def available() -> str | None:
    """None when podman and runc are usable, else what to do about it."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: run `make host-deps` (apt-get install podman runc)"
    if os.geteuid() != 0:
        return "the simulator needs root (privileged node containers, nested engines)"
    return None


def run(
    args: Sequence[str], *, check: bool = True, input: bytes | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    cmd = ["podman", *args]
    proc = subprocess.run(
        cmd,
        env=env(),
        input=input.decode() if input is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise PodmanError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def json_out(args: Sequence[str]) -> list[dict]:
    out = run(args).stdout.strip()
    if not out:
        return []
    data = json.loads(out)
    return data if isinstance(data, list) else [data]


def image_exists(ref: str) -> bool:
    return run(["image", "exists", ref], check=False).returncode == 0


def containers(label: str) -> list[dict]:
    """All containers (any state) carrying ``label`` (``key=value``)."""
    return json_out(["ps", "-a", "--filter", f"label={label}", "--format", "json"])


def networks(label: str) -> list[dict]:
    return json_out(["network", "ls", "--filter", f"label={label}", "--format", "json"])


def all_network_subnets() -> list[str]:
    subnets: list[str] = []
    for net in json_out(["network", "ls", "--format", "json"]):
        for sub in net.get("subnets") or []:
            if sub.get("subnet"):
                subnets.append(sub["subnet"])
    return subnets


# `podman exec` costs about 85 ms of the machine's CPU per call (the podman client, conmon
# and runc; 20 calls, 2026-12-04) and takes about 125 ms; the tests make a couple of
# thousand such calls to look at their nodes. The simulator's nodes are privileged,
# root-run containers on this host, so a command can join a node's namespaces directly
# with nsenter(1), for about 0.3 ms: the same filesystem, network, processes, host name
# and environment (the container's own, as `podman exec` gives), the same exit codes. It
# stays outside the container's cgroup; nothing here depends on that. A3RL_SIM_EXEC=podman
# goes back to `podman exec`.
EXEC_VARIABLE = "A3RL_SIM_EXEC"
_targets: dict[str, tuple[int, str, str, dict[str, str]]] = {}  # name -> pid, id, start, env


def _start_ticks(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def _in_container(pid: int, container_id: str) -> bool:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            return container_id in f.read()
    except OSError:
        return False


def _target(name: str) -> tuple[int, dict[str, str]] | subprocess.CompletedProcess[str]:
    """The node's init PID and its configured environment; a cached one only while that
    very process (same start time) still runs in the container. What podman answered
    when the container is absent or not running."""
    cached = _targets.get(name)
    if cached is not None:
        pid, cid, start, env_ = cached
        if _start_ticks(pid) == start and _in_container(pid, cid):
            return pid, env_
        _targets.pop(name, None)  # the snapshots read their nodes from threads
    proc = run(["inspect", "-f", "{{.State.Pid}} {{.Id}} {{json .Config.Env}}", name],
               check=False)
    if proc.returncode != 0:
        return proc
    pid_s, cid, env_json = proc.stdout.strip().split(" ", 2)
    pid = int(pid_s)
    start = _start_ticks(pid) if pid > 0 else None
    if start is None or not _in_container(pid, cid):
        return subprocess.CompletedProcess(
            ["podman", "exec", name], 125, "",
            f"Error: can only create exec sessions on running containers: container "
            f"{name} is not running\n")
    env_ = dict(e.split("=", 1) for e in json.loads(env_json) if "=" in e)
    _targets[name] = (pid, cid, start, env_)
    return pid, env_


def exec_(name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``podman exec NAME CMD...``: stdout, stderr and the exit code, as podman gives them
    (125 when the container is absent or stopped, 127 for a command not found)."""
    if os.environ.get(EXEC_VARIABLE) == "podman" or shutil.which("nsenter") is None:
        return run(["exec", name, *cmd], check=check)
    target = _target(name)
    if isinstance(target, subprocess.CompletedProcess):
        proc = target
    else:
        pid, env_ = target
        proc = subprocess.run(
            ["nsenter", f"--target={pid}", "--mount", "--uts", "--ipc", "--net", "--pid",
             "--cgroup", "--root", "--wd", "--", *cmd],
            env=env_, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise PodmanError(f"podman exec {name} {' '.join(cmd)} failed ({proc.returncode}): "
                          f"{proc.stderr.strip()}")
    return proc
