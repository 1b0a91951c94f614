"""The recipe's cache set, removed exactly and nothing else (rolling cache clean).

After a CANN change the recipe removes compiled-operator and graph caches: ``kernel_meta``,
``.torchair_cache`` and ``.cache`` in the working directory, ``/root/.cache`` and
``/root/atc_data``. Removing the wrong folder on 64 nodes is not recoverable, so every
value is checked before anything is removed, on the host and in the training container
alike:

- a path must be one of that set (``allowed``), whatever the variables say;
- empty, relative, ``/``, ``..``-bearing and glob or shell-expansion values are refused
  with a message saying which rule they break (before the set is consulted);
- the path itself must not be a symlink (it could point anywhere); a symlink *inside* a
  cache folder is removed as a link, never followed.

Runs on the nodes as Ansible module_utils, and as a script in the training container
(``python3 - --json ...`` on stdin): standard library only.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
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
                            "it could point outside the cache set")
        elif os.path.lexists(full) and os.path.realpath(full) != expected:
            problems.append(f"{value!r}: a folder above it is a symlink (its real path is "
                            f"{os.path.realpath(full)!r}); refused, it could point outside "
                            "the cache set. Fix: set the working directory to its real path")
        elif os.path.lexists(full):
            targets.append(value)
    return targets, problems


def clean(values: list[Any], workdir: str, check: bool = False, root: str = "/"
          ) -> dict[str, Any]:
    """Remove the cache paths; every value is checked first, nothing is removed on a problem."""
    targets, problems = plan(values, workdir, root)
    if problems:
        raise CacheError("; ".join(problems))
    removed = {}
    for value in targets:
        full = os.path.join(root, value.lstrip("/"))
        removed[value] = _size(full)
        if not check:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
    return {"removed": removed, "freed": sum(removed.values()), "changed": bool(removed)}


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
