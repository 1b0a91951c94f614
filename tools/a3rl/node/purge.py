"""Teardown purge on a node: remove what the project's records say it placed, nothing else.

Runs on the nodes as Ansible module_utils: standard library only, Python 3.8+.

The folders the project writes to (``<a3rl_assets_dir>/models``, ``/data``, the data
root's ``src`` and ``wheels``) may be shared storage or a data root other people use too,
so a purge never removes a folder wholesale. It reads the project's own records:

- ``stamped``: a verified copy's stamp (``<stamps>/<path>.sha256``, written by
  ``a3rl.node.stage.check_files`` after the copy's sha256 matched) names a file the project
  placed at ``<root>/<path>``. The file goes, with its stamp, when its size is still the
  recorded one; a file changed since (another size) is kept and reported.
- ``tree`` with ``ref``: a source tree (each child of ``path`` with ``children``) or the
  recipe working directory, a git repository carrying the project's own ref
  (``refs/a3rl/pinned`` from ``a3rl.node.stage.checkout``, ``refs/a3rl/pristine`` from
  ``build_workdir``). The tree the project placed is the ref's (for the working
  directory, the patched tree ``.git/a3rl/series.json`` records for that pristine commit),
  with its submodules at their gitlinks. Only the files of that tree whose content is
  still the recorded one go; an edited file is kept and reported, and anything the tree
  does not hold (checkpoints, Hydra outputs, caches, users' files) is kept and listed.
  The repository itself (``.git``) goes only when nothing else is left in its folder and
  it holds no ref of its own (a branch, a stash, a commit checked out on top): it is
  what a user needs to see their edits.
- ``tree`` with ``marker``: a folder holding the project's record file
  (``a3rl-conversion.json``, a finished Megatron dist-checkpoint), removed whole.
  A folder there without it is not the project's and is kept.
- ``files``: named files or folders in a folder, named by the project's own record: the
  extra patches (the controller's ``patches/`` list), the wheel folder (named by the
  wheelhouse's sha256 in the store's record).

Nothing is removed through a symbolic link: a path whose folder below ``top`` is a link
(the records name the path the project wrote, not where a link made since points, which
may be someone's own data) is kept and reported, with its stamp.

Folders left empty by a removal are removed up to the entry's ``top`` (which stays);
everything else under ``top`` is kept and listed, so the play can say what stayed and why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

try:  # inside a module's payload on a node
    from ansible.module_utils.a3rl_common import git
except ImportError:  # the controller and the tests
    from a3rl.node.common import git

STAMP_SUFFIX = ".sha256"
SENDING_SUFFIX = ".sending"
# The patched tree a3rl.node.patch_series switched the working directory to.
SERIES_STATE = os.path.join("a3rl", "series.json")
# Refs the project writes; any other ref in a tree's repository is someone's own work.
OWN_REF_PREFIXES = ("refs/a3rl/", "refs/remotes/")
_STAMP = re.compile(r"^[0-9a-f]{64}  (\d+)  \d+\n?$")
KINDS = ("stamped", "tree", "files")


class PurgeError(Exception):
    """An entry is malformed; the message names it."""


def _stamp_size(path: str) -> int | None:
    """The recorded size in a stamp, or None when the file is not one of our stamps."""
    try:
        with open(path, encoding="ascii") as f:
            m = _STAMP.match(f.read(256))
    except (OSError, UnicodeDecodeError):
        return None
    return int(m.group(1)) if m else None


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_size if os.path.isfile(path) else -1
    except OSError:
        return -1


def _bytes(path: str) -> int:
    if os.path.islink(path) or os.path.isfile(path):
        return os.lstat(path).st_size
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _git(path: str, args: list[str], stdin: str | None = None) -> str | None:
    """git's output in ``path``, or None when it fails."""
    proc = git(["-C", path, *args], stdin=stdin)
    return proc.stdout if proc.returncode == 0 else None


def _has_ref(path: str, ref: str) -> bool:
    if not os.path.isdir(os.path.join(path, ".git")):
        return False
    return _git(path, ["rev-parse", "--verify", "--quiet", ref]) is not None


def _recorded_tree(path: str, ref: str) -> str | None:
    """The tree the project placed in ``path``: the series' patched tree when the state
    file names ``ref``'s commit as its pristine one, else ``ref``'s tree."""
    commit = (_git(path, ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"]) or "").strip()
    if not commit:
        return None
    try:
        with open(os.path.join(path, ".git", SERIES_STATE), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = None
    if isinstance(state, dict) and state.get("pristine") == commit and state.get("tree"):
        tree = _git(path, ["rev-parse", "--verify", "--quiet", f"{state['tree']}^{{tree}}"])
        if tree:
            return tree.strip()
    return (_git(path, ["rev-parse", f"{commit}^{{tree}}"]) or "").strip() or None


def _placed_files(root: str, tree: str) -> tuple[list[str], list[str], dict[str, str]]:
    """Compare the checkout in ``root`` with ``tree``: (the files still as placed, the
    files edited since, the submodule folders checked out, each with its gitlink)."""
    out = _git(root, ["ls-tree", "-r", "-z", "--full-tree", tree])
    if out is None:
        return [], [], {}
    same: list[str] = []
    edited: list[str] = []
    subs: dict[str, str] = {}
    blobs: list[tuple[str, str]] = []
    for item in out.split("\0"):
        if not item:
            continue
        meta, name = item.split("\t", 1)
        mode, kind, sha = meta.split()
        path = os.path.join(root, name)
        if kind == "commit":
            if (os.path.exists(os.path.join(path, ".git"))
                    and _git(path, ["cat-file", "-e", f"{sha}^{{commit}}"]) is not None):
                sub_tree = (_git(path, ["rev-parse", f"{sha}^{{tree}}"]) or "").strip()
                s_same, s_edited, s_subs = _placed_files(path, sub_tree)
                same += s_same
                edited += s_edited
                subs[path] = sha
                subs.update(s_subs)
            continue
        if not os.path.lexists(path):
            continue
        if mode == "120000":
            target = _git(root, ["cat-file", "blob", sha])
            is_same = os.path.islink(path) and target is not None \
                and os.readlink(path) == target
            (same if is_same else edited).append(path)
        elif os.path.islink(path) or not os.path.isfile(path):
            edited.append(path)
        else:
            blobs.append((path, sha))
    if blobs:
        # --no-filters: the bytes on disk, as the project's checkout wrote them.
        hashes = (_git(root, ["hash-object", "--no-filters", "--stdin-paths"],
                       stdin="".join(p + "\n" for p, _ in blobs)) or "").split()
        for i, (path, sha) in enumerate(blobs):
            (same if i < len(hashes) and hashes[i] == sha else edited).append(path)
    return same, edited, subs


def _own_repository(root: str, placed: str = "") -> bool:
    """True when the repository in ``root`` holds nothing but what the project wrote: its
    refs are the project's, and HEAD (when set) is a commit one of them names, or
    ``placed`` (a submodule's gitlink: its checkout has no ref of its own)."""
    refs = _git(root, ["for-each-ref", "--format=%(refname) %(objectname)"])
    if refs is None:
        return False
    ours = {placed} if placed else set()
    for line in refs.splitlines():
        name, _, sha = line.partition(" ")
        if not name.startswith(OWN_REF_PREFIXES):
            return False
        ours.add(sha)
    head = _git(root, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
    return head is None or head.strip() in ours


def _inside(path: str, top: str) -> bool:
    path, top = os.path.normpath(path), os.path.normpath(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


def _linked_folder(path: str, top: str) -> str | None:
    """The first folder of ``path`` below ``top`` that is a symbolic link, or None."""
    d, top = os.path.dirname(os.path.normpath(path)), os.path.normpath(top)
    while _inside(d, top) and d != top:
        if os.path.islink(d):
            return d
        d = os.path.dirname(d)
    return None


def _prune_empty(start: str, top: str, check: bool, gone: set[str]) -> None:
    """Remove folders left empty, from ``start`` up to ``top`` (which stays: it may be
    a mount point or made by someone else). ``gone``: paths already removed, or that a
    check-mode run would remove."""
    d = os.path.normpath(start)
    top = os.path.normpath(top)
    while _inside(d, top) and d != top and os.path.isdir(d) and not os.path.islink(d):
        left = [e for e in os.listdir(d) if os.path.join(d, e) not in gone]
        if left:
            return
        if not check:
            try:
                os.rmdir(d)
            except OSError:
                return
        gone.add(d)
        d = os.path.dirname(d)


def _remaining(top: str, gone: set[str], limit: int = 20) -> tuple[int, list[str]]:
    """Files under ``top`` the purge leaves (count, the first ``limit`` paths). A git
    repository's ``.git`` counts as one, its path ending in ``/``."""
    if not os.path.isdir(top) or top in gone:
        return 0, []
    n, first = 0, []
    for dirpath, dirs, files in os.walk(top):
        if dirpath in gone:
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if os.path.join(dirpath, d) not in gone)
        if ".git" in dirs:
            dirs.remove(".git")
            n += 1
            if len(first) < limit:
                first.append(os.path.join(dirpath, ".git") + "/")
        for f in sorted(files):
            p = os.path.join(dirpath, f)
            if p in gone:
                continue
            n += 1
            if len(first) < limit:
                first.append(p)
    return n, first


def _check_entry(e: Any) -> dict[str, Any]:
    if not isinstance(e, dict) or e.get("kind") not in KINDS:
        raise PurgeError(f"purge entry {e!r}: kind must be one of {', '.join(KINDS)}")
    if e["kind"] == "tree" and not (e.get("ref") or e.get("marker")):
        raise PurgeError(f"purge entry {e!r}: a tree needs its ref or its marker file")
    for key in ("top",) + {"stamped": ("root", "stamps"), "tree": ("path",),
                           "files": ("path",)}[e["kind"]]:
        if not e.get(key):
            raise PurgeError(f"purge entry {e!r}: {key} is missing")
    if e["kind"] == "files" and not (isinstance(e.get("names"), list) and all(
            isinstance(n, str) and n not in ("", ".", "..") and "/" not in n for n in e["names"])):
        raise PurgeError(f"purge entry {e!r}: names must be a list of plain file names")
    for key in ("top", "root", "stamps", "path"):
        if key in e and not (isinstance(e[key], str) and os.path.isabs(e[key])
                             and os.path.normpath(e[key]) != "/" and ".." not in e[key].split("/")):
            raise PurgeError(f"purge entry {e!r}: {key} must be an absolute path below /")
    if e["kind"] == "tree" and not e.get("children"):
        # A folder removed whole is one the project named: never its top, never above.
        path, top = os.path.normpath(e["path"]), os.path.normpath(e["top"])
        if not _inside(path, top) or path == top:
            raise PurgeError(f"purge entry {e!r}: path must lie inside top, below it")
    elif "path" in e and not _inside(e["path"], e["top"]):
        raise PurgeError(f"purge entry {e!r}: path must lie inside top")
    return e


def purge(entries: list[dict[str, Any]], check: bool = False) -> dict[str, Any]:
    """Remove what ``entries`` record (see the module docstring). Every entry is checked
    before anything is removed. Returns removed paths with their bytes, and per ``top``
    what was kept (count and the first paths)."""
    entries = [_check_entry(e) for e in entries]
    removed: dict[str, int] = {}
    changed_since: list[str] = []
    repositories_kept: list[str] = []
    behind_links: list[str] = []
    gone: set[str] = set()

    def linked(path: str, top: str) -> bool:
        if _linked_folder(path, top) is None:
            return False
        if path not in behind_links:
            behind_links.append(path)
        return True

    def remove(path: str, top: str) -> None:
        if path in gone or not os.path.lexists(path) or linked(path, top):
            return
        removed[path] = _bytes(path)
        gone.add(path)
        if not check:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=False)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:  # another node on shared storage was first
                    pass
        _prune_empty(os.path.dirname(path), top, check, gone)

    def left_beside_git(folder: str) -> bool:
        """A file (not an empty folder: it holds nothing to lose) left beside ``.git``."""
        for dirpath, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in gone
                       and not (dirpath == folder and d == ".git")]
            if any(os.path.join(dirpath, f) not in gone
                   and not (dirpath == folder and f == ".git") for f in files):
                return True
        return False

    def remove_placed_tree(path: str, ref: str, top: str) -> None:
        tree = _recorded_tree(path, ref)
        if not tree:
            return
        same, edited, subs = _placed_files(path, tree)
        changed_since.extend(edited)
        for f in same:
            remove(f, top)
        # Deepest first: a submodule's ".git" (a file) goes before its parent is looked at.
        for repo in sorted(subs, key=len, reverse=True) + [path]:
            if left_beside_git(repo) or not _own_repository(repo, subs.get(repo, "")):
                repositories_kept.append(repo)
            else:
                remove(os.path.join(repo, ".git"), top)

    for e in entries:
        top = e["top"]
        if e["kind"] == "stamped":
            under = os.path.join(e["stamps"], e.get("under", "")).rstrip("/")
            stamps = []
            for dirpath, _dirs, files in os.walk(under):
                stamps += [os.path.join(dirpath, f) for f in files if f.endswith(STAMP_SUFFIX)]
            for stamp in sorted(stamps):
                size = _stamp_size(stamp)
                if size is None:
                    continue  # not one of ours (a file of that name placed by hand)
                rel = os.path.relpath(stamp, e["stamps"])[: -len(STAMP_SUFFIX)]
                path = os.path.join(e["root"], rel)
                if os.path.lexists(path) and linked(path, top):
                    continue  # and its stamp stays: the record of what was placed
                if os.path.lexists(path) and _size(path) != size:
                    changed_since.append(path)
                    continue
                remove(path, top)
                remove(stamp, e.get("stamps_top") or under)
            for dirpath, _dirs, files in os.walk(under):
                # A copy a3rl began on shared storage (stage.check_files): its mark goes
                # with its stamp, or once its file is not there; a cut copy stays, listed.
                for f in sorted(f for f in files if f.endswith(SENDING_SUFFIX)):
                    mark = os.path.join(dirpath, f)
                    path = os.path.join(
                        e["root"], os.path.relpath(mark, e["stamps"])[: -len(SENDING_SUFFIX)])
                    if path in gone or not os.path.lexists(path):
                        remove(mark, e.get("stamps_top") or under)
        elif e["kind"] == "tree":
            paths = [e["path"]]
            if e.get("children"):
                paths = ([os.path.join(e["path"], c) for c in sorted(os.listdir(e["path"]))]
                         if os.path.isdir(e["path"]) else [])
            for path in paths:
                if os.path.islink(path) or not os.path.isdir(path):
                    continue
                if e.get("ref"):
                    if _has_ref(path, e["ref"]):
                        remove_placed_tree(path, e["ref"], top)
                elif os.path.isfile(os.path.join(path, e["marker"])):
                    remove(path, top)
        else:
            for name in e["names"]:
                remove(os.path.join(e["path"], name), top)
    kept: dict[str, dict[str, Any]] = {}
    for top in dict.fromkeys(e["top"] for e in entries):
        n, first = _remaining(top, gone)
        if n:
            kept[top] = {"files": n, "first": first}
    return {"removed": removed, "kept": kept, "changed_since": changed_since,
            "repositories_kept": repositories_kept, "behind_links": behind_links,
            "changed": bool(removed)}
