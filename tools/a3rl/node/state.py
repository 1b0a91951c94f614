"""A role's converged state on a node: recorded after the role converged, probed before.

Runs on the nodes as Ansible module_utils: standard library only, Python 3.8+.

A role that converged on a node records a *stamp* (``<dir>/<role>.json``): the *key* of
its inputs (computed on the controller by the ``a3rl_state`` action: the project's code
and the rendered values of every variable the role's files name) and what it *observed*
of the state it manages, right after converging:

- ``files``: type, mode, owner and (regular files) the sha256 of each path, or absent;
- ``git``: a work tree's ``HEAD`` and the sha256 of ``git status --porcelain``;
- ``units``: a systemd unit's ``ActiveState`` and ``UnitFileState``;
- ``containers``: a Docker container's running state, image ID and the sha256 of its
  ``Config`` and ``HostConfig``;
- ``images``: the ID a Docker image reference names;
- ``engine``: fields of the Docker engine's ``docker info`` (its storage driver, data root);
- ``commands``: an argv's exit code and the sha256 of its output (read-only commands:
  firewall chains, the engine's driver).

The next run's probe observes the same items again. The role is converged on the node
only when a stamp exists, its key is the one of this run's inputs and every observation
equals the recorded one; anything else (no stamp, a changed input, a file edited or
removed, a unit stopped, a container replaced) says why, and the role's tasks run in
full. The probe only reads: a run refused for bad input changes nothing on the node, its
stamp included. A stamp left by an earlier run is never trusted blindly: a later run that
failed part-way either changed a watched item (so the probe sees it) or left the node as
the stamp recorded it, converged.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat as st_mod
import subprocess
from typing import Any

try:  # inside a module's payload on a node
    from ansible.module_utils.a3rl_common import sha256_file
except ImportError:  # the controller and the tests
    from a3rl.node.common import sha256_file

VERSION = 1
KINDS = ("files", "git", "units", "containers", "images", "engine", "commands")
_ENV = {"LC_ALL": "C", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


class StateError(Exception):
    """The watch list is malformed; the message names the entry."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run(argv: list[str], timeout: int = 30) -> tuple[int, bytes]:
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, env={**os.environ, **_ENV}, check=False)
    except FileNotFoundError:
        return 127, b""
    except subprocess.TimeoutExpired:
        return 124, b""
    return proc.returncode, proc.stdout


def observe_file(path: str) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"type": "absent"}
    kind = ("link" if st_mod.S_ISLNK(st.st_mode) else "dir" if st_mod.S_ISDIR(st.st_mode)
            else "file" if st_mod.S_ISREG(st.st_mode) else "other")
    seen: dict[str, Any] = {"type": kind, "mode": oct(st.st_mode & 0o7777),
                            "uid": st.st_uid, "gid": st.st_gid}
    if kind == "file":
        seen["sha256"] = sha256_file(path)
    elif kind == "link":
        seen["target"] = os.readlink(path)
    return seen


def observe_git(path: str) -> dict[str, Any]:
    if not os.path.isdir(path):
        return {"type": "absent"}
    rc, head = _run(["git", "-C", path, "rev-parse", "--verify", "--quiet", "HEAD"])
    rc2, status = _run(["git", "--no-optional-locks", "-C", path, "status", "--porcelain",
                       "--untracked-files=all"])
    return {"head": head.decode(errors="replace").strip() if rc == 0 else None,
            "status": _sha(status) if rc2 == 0 else f"rc {rc2}"}


def observe_unit(name: str) -> dict[str, Any]:
    rc, out = _run(["systemctl", "show", "--property=ActiveState,UnitFileState", "--", name])
    if rc != 0:
        return {"rc": rc}
    props = dict(line.split("=", 1) for line in out.decode(errors="replace").splitlines()
                 if "=" in line)
    return {"active": props.get("ActiveState"), "enabled": props.get("UnitFileState")}


def observe_container(name: str) -> dict[str, Any]:
    rc, out = _run(["docker", "container", "inspect", "--", name])
    if rc != 0:
        return {"type": "absent"}
    try:
        info = json.loads(out)[0]
    except (ValueError, IndexError):
        return {"type": "unreadable"}
    spec = json.dumps([info.get("Config"), info.get("HostConfig")], sort_keys=True)
    return {"running": bool((info.get("State") or {}).get("Running")),
            "image": info.get("Image"), "spec": _sha(spec.encode())}


def observe_image(ref: str) -> dict[str, Any]:
    rc, out = _run(["docker", "image", "inspect", "--format", "{{.Id}}", "--", ref])
    return {"id": out.decode(errors="replace").strip() if rc == 0 else None}


def observe_engine(field: str) -> dict[str, Any]:
    rc, out = _run(["docker", "info", "--format", "{{json ." + field + "}}"])
    return {"value": out.decode(errors="replace").strip() if rc == 0 else None, "rc": rc}


def observe_command(argv: list[str]) -> dict[str, Any]:
    rc, out = _run([str(a) for a in argv])
    return {"rc": rc, "output": _sha(out)}


def _item_name(kind: str, item: Any) -> str:
    return " ".join(str(a) for a in item) if kind == "commands" else str(item)


def check_watch(watch: dict[str, list]) -> None:
    """Refuse a malformed watch list (StateError naming the entry); observes nothing."""
    unknown = set(watch) - set(KINDS)
    if unknown:
        raise StateError(f"unknown watch kind(s) {sorted(unknown)}; known: {', '.join(KINDS)}")
    for kind in KINDS:
        items = watch.get(kind) or []
        if not isinstance(items, list):
            raise StateError(f"watch.{kind} must be a list, got {type(items).__name__}")
        if kind == "commands":
            for item in items:
                if not (isinstance(item, list) and item):
                    raise StateError(f"watch.commands: each entry is an argv list, got {item!r}")


def observe(watch: dict[str, list]) -> dict[str, dict[str, Any]]:
    """What the node holds now of every watched item, by kind and item."""
    check_watch(watch)
    fns = {"files": observe_file, "git": observe_git, "units": observe_unit,
           "containers": observe_container, "images": observe_image,
           "engine": observe_engine, "commands": observe_command}
    seen: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        for item in watch.get(kind) or []:
            seen.setdefault(kind, {})[_item_name(kind, item)] = fns[kind](item)
    return seen


def stamp_path(directory: str, role: str) -> str:
    if not role or "/" in role or role.startswith("."):
        raise StateError(f"role {role!r} is not a plain name")
    return os.path.join(directory, role + ".json")


def read_stamp(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def differences(recorded: dict[str, Any] | None, key: str, inputs: dict[str, str],
                now: dict[str, dict[str, Any]]) -> list[str]:
    """Why the node is not as the stamp recorded it (empty: converged)."""
    if recorded is None:
        return ["no record of an earlier converged run"]
    if recorded.get("key") != key:
        before = recorded.get("inputs") or {}
        changed = sorted(n for n in set(before) | set(inputs) if before.get(n) != inputs.get(n))
        return ["inputs changed: " + (", ".join(changed[:12]) or "the key")
                + (f" and {len(changed) - 12} more" if len(changed) > 12 else "")]
    then = recorded.get("observed") or {}
    found = []
    for kind in sorted(set(then) | set(now)):
        a, b = then.get(kind, {}), now.get(kind, {})
        for item in sorted(set(a) | set(b)):
            if a.get(item) != b.get(item):
                fields = sorted(k for k in set(a.get(item) or {}) | set(b.get(item) or {})
                                if (a.get(item) or {}).get(k) != (b.get(item) or {}).get(k))
                found.append(f"{kind[:-1] if kind.endswith('s') else kind} {item}: "
                             f"{', '.join(fields) or 'not watched before'} changed")
    return found


def write_stamp(path: str, key: str, inputs: dict[str, str], seen: dict[str, Any]) -> None:
    """Atomically: a temporary name in the same folder, then renamed over the stamp."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"version": VERSION, "key": key, "inputs": inputs, "observed": seen}, f,
                  sort_keys=True, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def probe(path: str, key: str, inputs: dict[str, str], watch: dict[str, list]) -> dict[str, Any]:
    """Converged or not, with the reasons. Reads only.

    Without a stamp, or with a stamp of other inputs, the role runs in full whatever the
    node holds, and the reasons name only the stamp or the inputs: the watched items are
    then not observed (their commands can cost seconds: ``docker exec``, ``pip freeze``,
    ``git status`` of large trees), though the watch list is still checked."""
    recorded = read_stamp(path)
    if recorded is None or recorded.get("key") != key:
        check_watch(watch)
        return {"converged": False, "reasons": differences(recorded, key, inputs, {})}
    reasons = differences(recorded, key, inputs, observe(watch))
    return {"converged": not reasons, "reasons": reasons}


def record(path: str, key: str, inputs: dict[str, str], watch: dict[str, list]) -> dict[str, Any]:
    seen = observe(watch)
    write_stamp(path, key, inputs, seen)
    return {"observed": sum(len(v) for v in seen.values())}
