"""Which folders a setting may name: one rule, used by preflight and by every play that
writes under the folder itself (the training play's checkpoint and supervisor folders).

A folder setting is absolute, written plainly (no ``..``, ``.`` or empty component such as
``//``), not a folder of the operating system nor below the kernel's own filesystems,
and holds only characters no script reads as syntax (it goes into env scripts, ``bash -c``
lines and the Ray unit's start script unquoted). A folder the project fills with data of
its own (``data=True``: checkpoints, the supervisors' state) is not inside the operating
system's own trees either (``/etc/...``, ``/usr/...``); a folder root writes state into
(``scratch=False``) is not in a world-writable scratch folder (``/tmp``, ``/var/tmp``),
where another user could have placed a link first.
"""

from __future__ import annotations

import re
from typing import Any

# Folders of the operating system: a data root there would have the stages write into it
# and teardown remove from it. Below the kernel's own filesystems nothing is data at all.
SYSTEM_FOLDERS = frozenset((
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt",
    "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin",
    "/usr/lib", "/usr/lib64", "/usr/local", "/usr/sbin", "/usr/share", "/var", "/var/cache",
    "/var/lib", "/var/log", "/var/tmp",
))
KERNEL_FOLDERS = ("/dev", "/proc", "/run", "/sys")
# The operating system's own trees: its configuration, programs and libraries.
OS_TREES = ("/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/sbin", "/usr")
# World-writable scratch folders.
SCRATCH_FOLDERS = ("/tmp", "/var/tmp")
# What a folder may hold where it is written into a script unquoted: a newline ends the
# command, a quote or a space splits it, $ ` ; | & ( ) run something.
SAFE_PATH = re.compile(r"/[A-Za-z0-9_.+@=/-]*")
ACCEPTED = ("an absolute folder of its own, such as {example}, written with letters, digits "
            "and . _ - + @ = between single slashes (no '..' or '.')")


def unsafe_char(value: str, pattern: re.Pattern[str]) -> str:
    """The first character of ``value`` that ``pattern`` does not allow, named."""
    for i in range(len(value), 0, -1):
        if pattern.fullmatch(value[:i]):
            bad = value[i:i + 1]
            break
    else:
        bad = value[:1]
    return {"\n": "a newline", " ": "a space", "'": "a quote", '"': "a quote",
            "\t": "a tab"}.get(bad, f"{bad!r}" if bad else "nothing")


def _below(path: str, tops: tuple[str, ...]) -> str | None:
    return next((t for t in tops if path == t or path.startswith(t + "/")), None)


def problems(name: str, value: Any, *, data: bool = False, scratch: bool = True,
             example: str = "/data/a3rl", fix_name: str = "",
             use: str = "the stages write under it and teardown removes from it") -> list[str]:
    """Why ``value`` cannot be the folder setting ``name`` (empty when it can). ``use``
    says what is written there; ``fix_name`` the setting the fix names (``name``)."""
    fix = f"Fix: set {fix_name or name} to {ACCEPTED.format(example=example)}."
    parts = value.rstrip("/").split("/")[1:] if isinstance(value, str) else []
    if not isinstance(value, str) or not value.startswith("/") or not value.strip("/") \
            or any(p in ("", ".", "..") for p in parts):
        return [f"{name} {value!r} is not an absolute folder below / (without '..', '.' or "
                "'//'); " + use + ". " + fix]
    if not SAFE_PATH.fullmatch(value):
        return [f"{name} {value!r} holds {unsafe_char(value, SAFE_PATH)}, which the scripts "
                "and command lines it is written into (the env scripts, the Ray unit's start "
                "script, the job's) would read as shell syntax. " + fix]
    norm = value.rstrip("/")
    if norm in SYSTEM_FOLDERS or _below(norm, KERNEL_FOLDERS):
        return [f"{name} {value!r} is a folder of the operating system, and {use}. " + fix]
    tree = _below(norm, OS_TREES) if data else None
    if tree:
        return [f"{name} {value!r} is inside {tree}, the operating system's own files, "
                "where no data of the project goes. " + fix]
    scratch_at = None if scratch else _below(norm, SCRATCH_FOLDERS)
    if scratch_at:
        return [f"{name} {value!r} is inside {scratch_at}, which every user may write to: "
                "another user could place a link there first, and root would write "
                "through it. " + fix]
    return []


# The folders the project fills with data of its own, by setting: the checkpoints (verl
# writes them as root in the training container, which mounts only the data and shared
# folders), the run supervisors' state (root's, on the head) and the stages' node-side
# folders (root's). Preflight checks them, and so does the training play, which runs no
# preflight. None is in a world-writable scratch folder.
_CHECKPOINTS = {"example": "/data/a3rl/checkpoints",
                "use": "verl writes the runs' checkpoints under it"}
_STAGE = {"example": "/var/cache/a3rl/stage", "use": "root stages files under it"}
_NODE_DATA = {"example": "/data/a3rl/src",
              "use": "the stages write under it and teardown removes from it"}
DATA_FOLDERS: dict[str, dict[str, Any]] = {
    "a3rl_checkpoint_dir": _CHECKPOINTS,
    "train_job_checkpoint_dir": {
        **_CHECKPOINTS, "fix_name": "a3rl_checkpoint_dir (or train_job_checkpoint_dir)"},
    "a3rl_supervise_dir": {"example": "/var/lib/a3rl/supervise",
                           "use": "the run supervisor (root) writes its state under it"},
    **{name: _STAGE for name in (
        "artifact_store_node_dir", "artifact_store_stager_dir", "artifact_store_stamp_dir",
        "cann_image_node_stage_dir", "npu_driver_stage_dir")},
    **{name: _NODE_DATA for name in (
        "frameworks_src_dir", "frameworks_wheel_dir", "frameworks_node_patch_dir",
        "datasets_node_dir", "model_weights_node_dir")},
}


def data_problems(name: str, value: Any) -> list[str]:
    """:func:`problems` for one of :data:`DATA_FOLDERS`."""
    return problems(name, value, data=True, scratch=False, **DATA_FOLDERS[name])
