"""Run a play through ansible-runner and keep a record of it.

Plain ``ansible-playbook`` stays the reference way to run every play; this is the same
run with its events kept under ``runs/<timestamp>-<play>/``, shown live while it runs
(:mod:`a3rl.controller.progress`, from the fold of its events in
:mod:`a3rl.controller.fold`) and summarised
in ``summary.json`` at the end (:mod:`a3rl.controller.runs`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a3rl.controller import strategy
from a3rl.masking import MASK, is_secret_name, secret_override
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
    # The full log (ansible-playbook's output) and the summary.json written for the run.
    log: Path | None = None
    summary: dict = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(self.stats.get("changed", {}).values())

    @property
    def ok(self) -> bool:
        return self.rc == 0


# Values shorter than this are not scrubbed from a record's files (too likely to be a
# common word or number elsewhere in the log).
_MIN_SCRUB = 6


def masked(extravars: Any) -> Any:
    """Extra vars with secret-looking values hidden, for anything written to disk: a value
    whose name looks secret, and the value of a secret-looking ``key=value`` override in
    any list (``overrides``), at any depth."""
    if isinstance(extravars, dict):
        return {k: (MASK if is_secret_name(str(k)) else masked(v)) for k, v in extravars.items()}
    if isinstance(extravars, list):
        return [f"{v[:m.start('value')]}{MASK}" if (m := secret_override(v)) else masked(v)
                for v in extravars]
    return extravars


def hide_secrets(extravars: dict) -> tuple[dict, dict[str, str], list[str]]:
    """Extra vars for ansible-runner with every secret string replaced by a lookup of an
    environment variable, so that ansible-runner's own files (``env/extravars``, the
    command) never hold it, even while the run goes on or when it is killed. Returns the
    vars, the environment to add, and the secret values (to scrub from the record)."""
    env: dict[str, str] = {}

    def ref(value: str) -> str:
        name = f"A3RL_SECRET_XV_{len(env)}"
        env[name] = value
        return "{{ lookup('ansible.builtin.env', '" + name + "') }}"

    def walk(value: Any, secret: bool) -> Any:
        if secret and isinstance(value, str):
            return ref(value)
        if isinstance(value, dict):
            return {k: walk(v, secret or is_secret_name(str(k))) for k, v in value.items()}
        if isinstance(value, list):
            out = []
            for item in value:
                m = secret_override(item)
                out.append(f"{item[:m.start('value')]}{ref(m.group('value'))}" if m
                           else walk(item, secret))
            return out
        return value

    hidden = walk(extravars, False)
    return hidden, env, [v for v in env.values() if len(v) >= _MIN_SCRUB]


def _scrub_values(record: Path, values: list[str]) -> None:
    """Replace each secret value wherever a play printed it (events, stdout, the log)."""
    if not values:
        return
    for path in record.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        new = text
        for value in values:
            new = new.replace(value, MASK)
            # the same value inside a JSON string (an event) is written escaped
            esc = json.dumps(value)[1:-1]
            if esc != value:
                new = new.replace(esc, MASK)
        if new != text:
            path.write_text(new)


def equivalent_command(playbook: str, inventory: Path, extravars: dict, check: bool,
                       env: dict[str, str] | None = None) -> str:
    """The ``ansible-playbook`` command that runs the same play (secrets masked), after
    the ``env`` assignments it needs (the strategy's). A value that is not a string (a
    list of overrides) goes as JSON, which ``-e`` reads as such."""
    cmd = [f"{k}={v}" for k, v in sorted((env or {}).items())]
    cmd += ["ansible-playbook", playbook, "-i", str(inventory)]
    for k, v in masked(extravars).items():
        cmd += ["-e", f"{k}={v}" if isinstance(v, str) else json.dumps({k: v})]
    if check:
        cmd.append("--check")
    return shlex.join(cmd)


def _new_record(runs: Path, play: str) -> Path:
    """runs/<timestamp>-<play>, created here and only here: two runs of one play in the
    same second (test workers side by side) get -2, -3, ... rather than one folder."""
    runs.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Records hold events and variables of the run: readable by the owner only.
    runs.chmod(0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        record = runs / (f"{stamp}-{play}" if n == 1 else f"{stamp}-{play}-{n}")
        try:
            record.mkdir(mode=0o700)
            return record
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run record name for {stamp}-{play} under {runs}")


def run_play(
    playbook: str,
    inventory: Path,
    extravars: dict | None = None,
    check: bool = False,
    quiet: bool = False,
    extra_env: dict[str, str] | None = None,
    display: Any = None,
) -> PlayResult:
    """Run ``playbook`` and record it. ``display`` (from :mod:`a3rl.controller.progress`)
    is fed every event as it happens; without one, ansible-playbook's own output is
    printed unless ``quiet``. Whenever ansible-runner returns (a failed or cancelled play
    included), the record is complete with its ``summary.json``."""
    import ansible_runner  # imported late: `a3rl sim` does not need it

    from a3rl.controller import runs
    from a3rl.controller.fold import Tracker
    from a3rl.controller.progress import NullDisplay

    root = project_root()
    extravars = extravars or {}
    record = _new_record(root / "runs", Path(playbook).stem)
    cmdline = "--check" if check else ""
    # ansible-runner starts `ansible-playbook` from PATH: make it this venv's.
    bindir = str(Path(sys.executable).parent)
    env = {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        # ansible-runner turns host-key checking off unless told otherwise; we never do.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # ansible-runner sets ANSIBLE_CALLBACK_PLUGINS to its own folder, which hides
        # ansible.cfg's callback_plugins: name ours here (it appends its own after).
        "ANSIBLE_CALLBACK_PLUGINS": str(root / "plugins" / "callback"),
    }
    # Ansible caches facts by inventory host name, and inventories reuse names (every
    # simulated cluster has a node1): one fact cache per inventory.
    if "ANSIBLE_CACHE_PLUGIN_CONNECTION" not in os.environ:
        inv_key = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:12]
        env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(root / ".cache" / "facts" / inv_key)
    # Secret-looking variables reach ansible-playbook through this process's environment:
    # ansible-runner writes the ones it is handed into the record (env/envvars).
    secret_env = {k: v for k, v in (extra_env or {}).items() if is_secret_name(k)}
    runner_vars, secret_vars_env, secret_values = hide_secrets(extravars)
    secret_env.update(secret_vars_env)
    # A secret the play reads from the environment (MODELSCOPE_API_TOKEN: given here or
    # exported in the shell) is scrubbed from the record like one from the extra vars:
    # a task's output that carries it (a hub client's error, a careless debug) is kept
    # in the events.
    secret_values += sorted({v for k, v in {**os.environ, **secret_env}.items()
                             if is_secret_name(k) and len(v) >= _MIN_SCRUB}
                            - set(secret_values))
    # The opted-in strategy (A3RL_STRATEGY), unless the caller chose one itself.
    chosen = {} if "ANSIBLE_STRATEGY" in (extra_env or {}) else strategy.env()
    env.update(chosen)
    env.update({k: v for k, v in (extra_env or {}).items() if not is_secret_name(k)})
    # Ansible would show every task's templated arguments in its banner and in the events'
    # task_args, a module's no_log ones too (a hub token: only the module knows it is
    # one). The record never holds them, whatever the shell or ansible.cfg says.
    env["ANSIBLE_DISPLAY_ARGS_TO_STDOUT"] = "False"
    # The log file is read, not watched, when a3rl draws the progress itself.
    if display is not None or not os.isatty(1):
        env["ANSIBLE_NOCOLOR"] = "1"
    command = equivalent_command(playbook, inventory, extravars, check,
                                 {k: env[k] for k in strategy.VARIABLES if k in env})
    (record / "command.txt").write_text(command + "\n")
    if display is None:
        display = NullDisplay(Tracker(playbook))
    else:
        quiet = True
    broken: list[str] = []

    def on_event(event: dict) -> bool:
        # The display must never stop the run or lose an event from the record.
        try:
            display.event(event)
        except Exception as exc:  # noqa: BLE001 - reported once, after the run
            if not broken:
                broken.append(f"{type(exc).__name__}: {exc}")
        return True

    t0 = time.monotonic()
    saved = {k: os.environ.get(k) for k in secret_env}
    os.environ.update(secret_env)
    reader = _read_inventory_secrets(inventory, env)
    try:
        with display:
            r = ansible_runner.run(
                private_data_dir=str(record),
                project_dir=str(root),
                playbook=playbook,
                inventory=str(inventory.resolve()),
                extravars=runner_vars,
                cmdline=cmdline or None,
                envvars=env,
                quiet=quiet,
                event_handler=on_event,
                rotate_artifacts=0,
            )
    finally:
        secret_values += sorted(set(_collect(reader)) - set(secret_values))
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
        _scrub_values(record, secret_values)
    if broken:
        print(f"a3rl: the progress display failed ({broken[0]}); the run and its record "
              "are complete", file=sys.stderr)
    log = runs.log_path(record)
    summary = runs.summarize(
        runs.load_events(record), run=record.name, playbook=playbook, command=command,
        rc=r.rc, status=r.status, inventory=str(inventory), check=check,
        extravars=masked(extravars), log=str(log.relative_to(record)) if log else None)
    runs.write_summary(record, summary)
    return PlayResult(
        play=playbook,
        rc=r.rc,
        status=r.status,
        record=record,
        command=command,
        stats=r.stats or {},
        failures=[(f["host"], f["task"], f["msg"]) for f in summary["failures"]],
        seconds=time.monotonic() - t0,
        log=log,
        summary=summary,
    )


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
        if isinstance(env, dict) and any(is_secret_name(k) for k in env):
            env.update(masked({k: v for k, v in env.items() if is_secret_name(k)}))
            path.write_text(json.dumps(data))


def _read_inventory_secrets(inventory: Path, env: dict[str, str]) -> subprocess.Popen | None:
    """:func:`inventory_secrets`, read beside the play in a process of its own: with the
    run's environment (its Vault password file), and Ansible's process-wide Vault state
    stays out of this one."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "a3rl.controller.runner", str(inventory.resolve())],
            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
    except OSError:
        return None


def _collect(reader: subprocess.Popen | None) -> list[str]:
    if reader is None:
        return []
    try:
        out, _ = reader.communicate(timeout=120)
        values = json.loads(out)
    except (subprocess.TimeoutExpired, ValueError):
        reader.kill()
        reader.wait()
        return []
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def inventory_secrets(inventory: Path) -> list[str]:
    """The values of the inventory's secret-looking variables (a Vault-encrypted
    ``modelscope_token`` in a group_vars file beside it, a host variable), for every host,
    decrypted with the Vault password file the run used (``ANSIBLE_VAULT_PASSWORD_FILE``
    or ansible.cfg's) and templated, so that a task's output that carries one is scrubbed
    from the record too. A name is secret here only when it ends so (``_token``,
    ``_password``, ``_api_key``...): the inventory's plain settings hold the words too
    (``a3rl_patched_keys``, ``*_token_len``, ``*_key_file``). An inventory Ansible cannot
    read here gives none: the play then failed to read it too."""
    try:
        from ansible.cli import CLI
        from ansible.config.manager import ConfigManager
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar
        from ansible.vars.manager import VariableManager

        config = ConfigManager(str(project_root() / "ansible.cfg"))
        password_file = config.get_config_value("DEFAULT_VAULT_PASSWORD_FILE")
        loader = DataLoader()
        CLI.setup_vault_secrets(
            loader, vault_ids=config.get_config_value("DEFAULT_VAULT_IDENTITY_LIST") or [],
            vault_password_files=[str(password_file)] if password_file else [],
            ask_vault_pass=False, auto_prompt=False)
        inv = InventoryManager(loader=loader, sources=[str(inventory)])
        variables = VariableManager(loader=loader, inventory=inv)
        found: set[str] = set()
        for host in inv.get_hosts():
            host_vars = variables.get_vars(host=host, include_hostvars=False)
            templar = Templar(loader=loader, variables=host_vars)
            for name, value in host_vars.items():
                if _INVENTORY_SECRET.search(name):
                    try:
                        found.update(_strings(templar.template(value)))
                    except Exception:  # noqa: BLE001 - a value that cannot render is skipped
                        continue
        return sorted(v for v in found if len(v) >= _MIN_SCRUB)
    except Exception:  # noqa: BLE001 - the run's record is complete without these
        return []


_INVENTORY_SECRET = re.compile(
    r"(^|[_.])(token|password|passwd|secret|passphrase|credentials?|(api|access|private|secret)_?key)$",
    re.IGNORECASE)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return [str(value)] if isinstance(value, str) else []


if __name__ == "__main__":
    # The values go to the runner on this pipe only.
    print(json.dumps(inventory_secrets(Path(sys.argv[1]))))
