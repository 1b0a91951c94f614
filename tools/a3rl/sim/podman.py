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


def exec_(name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["exec", name, *cmd], check=check)
