"""Run a play through ansible-runner and keep a record of it.

Plain ``ansible-playbook`` stays the reference way to run every play; this is the same
run with its events kept under ``runs/<timestamp>-<play>/`` and a summary at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from a3rl.paths import project_root


@dataclass
class PlayResult:
    play: str
    rc: int
    status: str
    record: Path
    command: str
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # host, task, msg
    seconds: float = 0.0

    @property
    def changed(self) -> int:
        return sum(self.stats.get("changed", {}).values())

    @property
    def ok(self) -> bool:
        return self.rc == 0


SECRET_WORDS = ("password", "passwd", "secret", "token", "key")
MASK = "********"


def _secret(name: str) -> bool:
    return any(w in name.lower() for w in SECRET_WORDS)


def masked(extravars: dict) -> dict:
    """Extra vars with secret-looking values hidden, for anything written to disk."""
    return {k: (MASK if _secret(k) else v) for k, v in extravars.items()}


def equivalent_command(playbook: str, inventory: Path, extravars: dict, check: bool) -> str:
    cmd = ["ansible-playbook", playbook, "-i", str(inventory)]
    for k, v in masked(extravars).items():
        cmd += ["-e", f"{k}={v}"]
    if check:
        cmd.append("--check")
    return shlex.join(cmd)


def run_play(
    playbook: str,
    inventory: Path,
    extravars: dict | None = None,
    check: bool = False,
    quiet: bool = False,
    extra_env: dict[str, str] | None = None,
) -> PlayResult:
    import ansible_runner  # imported late: `a3rl sim` does not need it

    root = project_root()
    extravars = extravars or {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    record = root / "runs" / f"{stamp}-{Path(playbook).stem}"
    # Records hold events and variables of the run: readable by the owner only.
    record.mkdir(parents=True, exist_ok=True, mode=0o700)
    record.parent.chmod(0o700)
    cmdline = "--check" if check else ""
    # ansible-runner starts `ansible-playbook` from PATH: make it this venv's.
    bindir = str(Path(sys.executable).parent)
    env = {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        # ansible-runner turns host-key checking off unless told otherwise; we never do.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }
    # Secret-looking variables reach ansible-playbook through this process's environment:
    # ansible-runner writes the ones it is handed into the record (env/envvars).
    secret_env = {k: v for k, v in (extra_env or {}).items() if _secret(k)}
    env.update({k: v for k, v in (extra_env or {}).items() if not _secret(k)})
    if not os.isatty(1):
        env["ANSIBLE_NOCOLOR"] = "1"
    failures: list[tuple[str, str, str]] = []

    def on_event(event: dict) -> bool:
        # A failed loop item carries the message; the task's own event only says that
        # "one or more items failed".
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable",
                                  "runner_item_on_failed"):
            data = event.get("event_data", {})
            if not data.get("ignore_errors"):
                res = data.get("res", {})
                failures.append((data.get("host", "?"), data.get("task", "?"),
                                 str(res.get("msg") or res.get("stderr") or res)[:2000]))
        return True

    t0 = time.monotonic()
    saved = {k: os.environ.get(k) for k in secret_env}
    os.environ.update(secret_env)
    try:
        r = ansible_runner.run(
            private_data_dir=str(record),
            project_dir=str(root),
            playbook=playbook,
            inventory=str(inventory.resolve()),
            extravars=extravars,
            cmdline=cmdline or None,
            envvars=env,
            quiet=quiet,
            event_handler=on_event,
            rotate_artifacts=0,
        )
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        # Even when interrupted: no secret stays in the record.
        ev = record / "env" / "extravars"
        if ev.exists():
            ev.write_text(json.dumps(masked(extravars)))
        _scrub_environment(record)
    result = PlayResult(
        play=playbook,
        rc=r.rc,
        status=r.status,
        record=record,
        command=equivalent_command(playbook, inventory, extravars, check),
        stats=r.stats or {},
        failures=failures,
        seconds=time.monotonic() - t0,
    )
    (record / "command.txt").write_text(result.command + "\n")
    return result


def _scrub_environment(record: Path) -> None:
    """Mask secret-looking variables in the environment ansible-runner keeps in the
    record (``artifacts/<id>/command`` holds the whole process environment, so a token
    exported in the shell would stay on disk)."""
    for path in [record / "env" / "envvars", *record.glob("artifacts/*/command")]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        env = data.get("env") if path.name == "command" else data
        if isinstance(env, dict) and any(_secret(k) for k in env):
            env.update(masked({k: v for k, v in env.items() if _secret(k)}))
            path.write_text(json.dumps(data))
