"""The recipe's cache set, removed exactly and nothing else (rolling cache clean).

After a CANN change the recipe removes compiled-operator and graph caches: ``kernel_meta``,
``.torchair_cache`` and ``.cache`` in the working directory, ``/root/.cache`` and
``/root/atc_data``. Removing the wrong folder on 64 nodes is not recoverable, so every
value is checked before anything is removed, on the host and in the training container
alike:

- a path must be one of that set (``allowed``), whatever the variables say;
- empty, relative, ``/``, ``..``-bearing and glob or shell-expansion values are refused
  with a message saying which rule they break (before the set is consulted);
- the path itself must not be a symlink (it could point anywhere), nor any folder above
  it (its real path must be the path); a symlink *inside* a cache folder is removed as a
  link, never followed;
- the removal itself opens every folder on the way without following a link, so a folder
  above a path that became a link after the check removes nothing there: that path is
  kept and named (``kept``), and the module stops with it.

Runs on the nodes as Ansible module_utils, and as a script in the training container
(``python3 - --json ...`` on stdin): standard library only.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import stat
import sys
from typing import Any

WORKDIR_CACHES = ("kernel_meta", ".torchair_cache", ".cache")
HOME_CACHES = ("/root/.cache", "/root/atc_data")
_GLOB = set("*?[]{}~$`\\")


class CacheError(Exception):
    """A value is refused; the message names it and the rule."""


def _workdir_problem(workdir: str) -> str | None:
    if not isinstance(workdir, str) or not workdir.strip():
        return "the working directory is empty"
    if not workdir.startswith("/"):
        return f"the working directory {workdir!r} is relative"
    if _GLOB & set(workdir) or ".." in workdir.split("/"):
        return f"the working directory {workdir!r} has a glob, an expansion or '..'"
    norm = posixpath.normpath(workdir)
    if len([p for p in norm.split("/") if p]) < 2:
        return f"the working directory {workdir!r} is too close to / (at least two levels)"
    return None


def allowed(workdir: str) -> list[str]:
    """The recipe's cache set for this working directory."""
    problem = _workdir_problem(workdir)
    if problem:
        raise CacheError(problem)
    norm = posixpath.normpath(workdir)
    return [f"{norm}/{name}" for name in WORKDIR_CACHES] + list(HOME_CACHES)


def check_value(value: Any, workdir: str) -> str | None:
    """Why ``value`` may not be removed, or None."""
    if not isinstance(value, str) or not value.strip():
        return f"{value!r}: an empty path is refused"
    if not value.startswith("/"):
        return f"{value!r}: a relative path is refused"
    if ".." in value.split("/"):
        return f"{value!r}: a path with '..' is refused"
    if _GLOB & set(value):
        return f"{value!r}: a glob or shell expansion is refused"
    norm = posixpath.normpath(value)
    if norm == "/":
        return f"{value!r}: the root folder is refused"
    if norm not in allowed(workdir):
        return (f"{value!r}: not in the recipe's cache set ({', '.join(allowed(workdir))}); "
                "nothing else is ever removed")
    return None


def _size(path: str) -> int:
    """Bytes under ``path``, links counted as links, never followed."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            try:
                lst = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(lst.st_mode):
                total += lst.st_size
    return total


def plan(values: list[Any], workdir: str, root: str = "/") -> tuple[list[str], list[str]]:
    """(paths that exist and will be removed, problems). ``root`` prefixes every path (a
    container's filesystem seen from outside; "/" normally)."""
    problems = [p for p in (check_value(v, workdir) for v in values) if p]
    if problems:
        return [], problems
    targets = []
    for value in dict.fromkeys(posixpath.normpath(v) for v in values):
        full = os.path.join(root, value.lstrip("/"))
        # A symlinked parent (the working directory, or any folder above it) would make
        # the clean remove wherever it points: the real path must be the path itself.
        expected = os.path.join(os.path.realpath(root), value.lstrip("/"))
        if os.path.islink(full):
            problems.append(f"{value!r}: is a symlink (to {os.readlink(full)!r}); refused, "
                            "it could point outside the cache set. Fix: remove the link, or "
                            "leave that path out of cache_clean_paths")
        elif os.path.lexists(full) and os.path.realpath(full) != expected:
            problems.append(f"{value!r}: a folder above it is a symlink (its real path is "
                            f"{os.path.realpath(full)!r}); refused, it could point outside "
                            "the cache set. Fix: set the working directory to its real path")
        elif os.path.lexists(full):
            targets.append(value)
    return targets, problems


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _remove_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` in the folder ``dir_fd`` and all under it, following no link."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, _DIR, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e in entries]
        for child in names:
            _remove_at(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _remove(root: str, value: str) -> None:
    """Remove ``value`` under ``root``: every folder from ``root`` down is opened without
    following a link (OSError, ELOOP or ENOTDIR, when one is a link)."""
    *folders, name = [p for p in value.split("/") if p]
    fd = os.open(os.path.realpath(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for folder in folders:
            next_fd = os.open(folder, _DIR, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        _remove_at(fd, name)
    finally:
        os.close(fd)


def clean(values: list[Any], workdir: str, check: bool = False, root: str = "/"
          ) -> dict[str, Any]:
    """Remove the cache paths; every value is checked first, nothing is removed on a problem.
    A path a folder above which became a link since the check is kept, with why."""
    targets, problems = plan(values, workdir, root)
    if problems:
        raise CacheError("; ".join(problems))
    removed, kept = {}, {}
    for value in targets:
        full = os.path.join(root, value.lstrip("/"))
        size = _size(full)
        if not check:
            try:
                _remove(root, value)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                kept[value] = ("a folder above it is a symlink now (it was not when checked); "
                               "nothing was removed there")
                continue
        removed[value] = size
    return {"removed": removed, "kept": kept, "freed": sum(removed.values()),
            "changed": bool(removed)}


def main(argv: list[str]) -> int:
    """``python3 - --json '{"paths": [...], "workdir": ..., "check": bool}'``: the same
    clean, in a container; prints the result as JSON."""
    args = json.loads(argv[argv.index("--json") + 1])
    try:
        result = clean(args["paths"], args["workdir"], bool(args.get("check")))
    except CacheError as e:
        result = {"error": str(e)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
