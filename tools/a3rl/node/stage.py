"""Node side of the framework staging: verified artifact copies, pinned source trees, and
the recipe working directory.

Runs on the nodes as Ansible module_utils: standard library only, Python 3.8+.

- ``check_files``: which distributed files a node already holds, verified. A verified
  copy carries a stamp (``<file>.sha256``, written only after its sha256 matched), so a
  re-run skips it without reading it again (hundreds of GB of weights are hashed once);
  a partial file is left for the transfer to resume.
- ``checkout``: a framework's source tree at its pinned commit, cloned from its bundle,
  with its submodules from their own bundles. Nothing reaches the network.
- ``build_workdir``: the recipe's working directory ("build_project" layout) as a git
  repository whose pristine commit (``refs/a3rl/pristine``) is composed from the source
  trees by a layout list. Objects are shared with the source trees (git alternates), so
  the copy costs no disk for history. The commit has a fixed identity and date: the
  same sources give the same commit id on every node.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import posixpath
import shutil
import subprocess
import tempfile
from typing import Any

PRISTINE_REF = "refs/a3rl/pristine"
STAMP_SUFFIX = ".sha256"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "a3rl",
    "GIT_AUTHOR_EMAIL": "a3rl@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "a3rl",
    "GIT_COMMITTER_EMAIL": "a3rl@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


class StageError(Exception):
    """A staging step cannot be done; the message names the thing and the fix."""


def _git(
    args: list[str],
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update({"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"})
    full.update(env or {})
    proc = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "core.autocrlf=false", *args],
        cwd=cwd,
        env=full,
        input=stdin,
        capture_output=True,
        text=True,
    )
    if check and proc.returncode != 0:
        raise StageError(
            f"git {' '.join(args)} (in {cwd}): {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def _sha256(path: str) -> str:
    # Not a3rl.files.sha256_file: module_utils carried to a node must stand alone.
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------ file copies


def _existing(path: str) -> str:
    """``path`` or its nearest existing parent: where a new file there would be stored."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _free_bytes(path: str) -> int:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    st = os.statvfs(_existing(path))
    return st.f_bavail * st.f_frsize


def _gb(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_files(
    root: str,
    files: list[dict[str, Any]],
    verify: bool = True,
    require: bool = False,
    stamp_root: str | None = None,
    reader: bool = False,
    host: str = "",
) -> dict[str, Any]:
    """Sort ``files`` (path, sha256, size relative to ``root``) into verified and needed.

    With ``verify`` (not in check mode), a complete-size copy without a valid stamp is
    hashed: a match gets its stamp, a mismatch is deleted so that it is sent again. The
    stamp records the file's mtime too: a copy written to since it was verified is
    hashed again. Stamps live beside the files, or in a tree of their own under
    ``stamp_root`` (model and dataset folders stay as the hub made them). ``require``
    turns any file still not verified into an error (after a transfer).

    Before anything is removed, the bytes still to arrive are compared with the free
    space under ``root``: a disk too small is an error naming both, and nothing changed.

    ``reader``: a node that only reads a copy another node placed (shared storage):
    nothing is hashed, stamped or removed here, and a missing file means the shared
    folder is not what this node sees.
    """
    stamps = stamp_root or root
    verified, needed, stamped, removed = [], [], [], []
    incoming = 0
    # Bytes still to arrive per filesystem (a model folder may be a mount of its own).
    per_fs: dict[int, list] = {}
    rows = []
    for f in files:
        path = os.path.join(root, f["path"])
        stamp = os.path.join(stamps, f["path"]) + STAMP_SUFFIX
        st = os.stat(path) if os.path.isfile(path) else None
        size = st.st_size if st else -1
        want = f"{f['sha256']}  {f['size']}  {st.st_mtime_ns if st else 0}\n"
        have_stamp = os.path.isfile(stamp) and open(stamp).read() == want
        rows.append((f, path, stamp, size, want, have_stamp))
        if not (size == f["size"] and have_stamp):
            more = f["size"] - (size if 0 < size <= f["size"] else 0)
            incoming += more
            where = _existing(os.path.dirname(path))
            entry = per_fs.setdefault(os.stat(where).st_dev, [where, 0])
            entry[1] += more
    label = f"{host}: " if host else ""
    if reader:
        # The writer's stamp, sha256 and size only: another node may see other mtimes
        # (coarser timestamps, attribute caching on a network filesystem).
        def seen(f: dict, stamp: str, size: int) -> bool:
            try:
                with open(stamp) as s:
                    sha, length = s.read().split()[:2]
            except (OSError, ValueError):
                return False
            return size == f["size"] and sha == f["sha256"] and int(length) == f["size"]

        missing = [f["path"] for f, _p, stamp, size, _w, _ok in rows if not seen(f, stamp, size)]
        if require and missing:
            raise StageError(
                f"{label}{len(missing)} file(s) are not under {root} as the node that placed "
                f"them left them: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}. "
                "Fix: mount the shared storage (a3rl_shared_dir) at the same path on "
                "every node, then run again."
            )
        return {"verified": [f["path"] for f, *_ in rows if f["path"] not in missing],
                "needed": missing, "stamped": [], "removed": [], "changed": False,
                "incoming_bytes": 0, "free_bytes": _free_bytes(root)}
    free = _free_bytes(root)
    for where, more in per_fs.values():
        room = _free_bytes(where)
        if verify and more > room:
            raise StageError(
                f"{label}{where} has {_gb(room)} free; the copies still to arrive need "
                f"{_gb(more)}. Nothing was changed. Fix: free space on that disk, or place "
                "the data on a larger one (a3rl_data_root, or a3rl_shared_dir)."
            )
    for f, path, stamp, size, want, have_stamp in rows:
        if size == f["size"] and have_stamp:
            verified.append(f["path"])
            continue
        if verify and size == f["size"]:
            if _sha256(path) == f["sha256"]:
                os.makedirs(os.path.dirname(stamp), exist_ok=True)
                with open(stamp + ".tmp", "w") as s:
                    s.write(want)
                os.replace(stamp + ".tmp", stamp)
                verified.append(f["path"])
                stamped.append(f["path"])
                continue
            os.unlink(path)
            removed.append(f["path"])
        elif verify and size > f["size"]:
            os.unlink(path)
            removed.append(f["path"])
        if verify and os.path.exists(stamp):
            os.unlink(stamp)
        needed.append(f["path"])
    if require and needed:
        raise StageError(
            f"{label}{len(needed)} file(s) do not have their sha256 after the transfer: "
            f"{', '.join(needed)}. They were removed. Fix: check the store copy on the "
            "controller against its manifest.json (sha256sum -c), then run again."
        )
    return {
        "verified": verified,
        "needed": needed,
        "stamped": stamped,
        "removed": removed,
        "changed": bool(stamped or removed),
        "incoming_bytes": incoming,
        "free_bytes": free,
    }


# ---------------------------------------------------------------------- source trees


def _head(dest: str) -> str | None:
    proc = _git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=dest, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _dirty(dest: str) -> list[str]:
    out = _git(
        ["status", "--porcelain", "--untracked-files=no", "--ignore-submodules=none"], cwd=dest
    ).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def _submodule_names(dest: str) -> dict[str, str]:
    gm = os.path.join(dest, ".gitmodules")
    if not os.path.exists(gm):
        return {}
    out = _git(
        ["config", "-f", gm, "--get-regexp", r"^submodule\..*\.path$"], cwd=dest, check=False
    ).stdout
    names = {}
    for line in out.splitlines():
        key, _, path = line.partition(" ")
        names[path] = key[len("submodule.") : -len(".path")]
    return names


def checkout(
    bundle: str,
    dest: str,
    commit: str,
    submodules: list[dict[str, str]] | None = None,
    check: bool = False,
) -> dict[str, Any]:
    """Have ``dest`` checked out at ``commit`` from ``bundle`` (and its submodules).

    The tree is managed: a hand edit to a tracked file is discarded (and reported); the
    project's own changes belong in ``patches/``.
    """
    submodules = submodules or []
    result: dict[str, Any] = {"changed": False, "discarded": [], "dest": dest, "commit": commit}
    fresh = not os.path.isdir(os.path.join(dest, ".git"))
    if fresh:
        result["changed"] = True
        result["action"] = "clone"
        if check:
            return result
        if os.path.isdir(dest) and os.listdir(dest):
            raise StageError(
                f"{dest} exists, is not empty and is not a git checkout. Fix: move it "
                "away (or set another source directory)."
            )
        os.makedirs(os.path.dirname(dest) or "/", exist_ok=True)
        _git(["clone", "--quiet", "--no-checkout", bundle, dest])
    head = _head(dest)
    dirty = [] if fresh else _dirty(dest)
    if head != commit or dirty:
        result["changed"] = True
        result.setdefault("action", "checkout")
        result["discarded"] = dirty
        if not check:
            if (
                _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=dest, check=False).returncode
                != 0
            ):
                _git(["fetch", "--quiet", bundle, "+refs/a3rl/pinned:refs/a3rl/pinned"], cwd=dest)
            if (
                _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=dest, check=False).returncode
                != 0
            ):
                raise StageError(
                    f"{bundle} does not hold commit {commit}. Fix: distribute the "
                    "artifact again (its copy on this node is not the store's)."
                )
            _git(["checkout", "--quiet", "--force", "--detach", commit], cwd=dest)
    if submodules and not (check and fresh):
        names = _submodule_names(dest)
        for sub in submodules:
            path = sub["path"]
            name = names.get(path)
            if name is None:
                raise StageError(f"{dest}: no submodule at {path} in .gitmodules at {commit[:12]}")
            sub_dir = os.path.join(dest, path)
            at = _head(sub_dir) if os.path.exists(os.path.join(sub_dir, ".git")) else None
            if at == sub["commit"] and not _dirty(sub_dir):
                continue
            result["changed"] = True
            if check:
                continue
            _git(["config", f"submodule.{name}.url", sub["bundle"]], cwd=dest)
            _git(["submodule", "update", "--init", "--force", "--quiet", "--", path], cwd=dest)
    return result


# --------------------------------------------------------------------- working folder


def _layout_entries(src_dir: str, commit: str, path: str, to: str) -> list[str]:
    """``--index-info`` lines placing ``path`` (file, folder or glob) of ``commit`` at ``to``.

    Mirrors ``cp``: a folder lands at ``to``; a file at ``to``, or inside it when ``to``
    ends with ``/``; a glob's matching files (not folders) land inside ``to``.
    """
    path = path.strip("/")
    to = "" if to in (".", "./") else to
    lines = []
    if any(c in path for c in "*?["):
        parent, pattern = posixpath.split(path)
        out = _git(
            ["ls-tree", "-z", f"{commit}:{parent}" if parent else commit], cwd=src_dir, check=False
        )
        if out.returncode != 0:
            raise StageError(f"{src_dir}: {parent} does not exist at {commit[:12]}")
        for item in out.stdout.split("\0"):
            if not item:
                continue
            meta, name = item.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob" and fnmatch.fnmatchcase(name, pattern):
                lines.append(f"{mode} {sha}\t{posixpath.join(to.rstrip('/'), name)}")
        if not lines:
            raise StageError(f"{src_dir}: nothing matches {path} at {commit[:12]}")
        return lines
    if path in ("", "."):
        spec = commit
        kind = "tree"
    else:
        proc = _git(["cat-file", "-t", f"{commit}:{path}"], cwd=src_dir, check=False)
        if proc.returncode != 0:
            raise StageError(
                f"{src_dir}: {path} does not exist at {commit[:12]}. Fix: correct "
                "the layout entry or the pin."
            )
        kind = proc.stdout.strip()
        spec = f"{commit}:{path}"
    if kind == "blob":
        sha = _git(["rev-parse", spec], cwd=src_dir).stdout.strip()
        mode = _git(["ls-tree", commit, "--", path], cwd=src_dir).stdout.split()[0]
        dest = posixpath.join(to, posixpath.basename(path)) if (to.endswith("/") or not to) else to
        return [f"{mode} {sha}\t{dest.strip('/')}"]
    out = _git(["ls-tree", "-r", "-z", spec], cwd=src_dir).stdout
    for item in out.split("\0"):
        if not item:
            continue
        meta, name = item.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob":
            lines.append(
                f"{mode} {sha}\t{posixpath.join(to.strip('/'), name) if to.strip('/') else name}"
            )
    return lines


def build_workdir(
    workdir: str, sources: dict[str, str], layout: list[dict[str, str]], check: bool = False
) -> dict[str, Any]:
    """Compose the pristine working directory from ``sources`` (name -> checkout folder).

    ``layout``: ordered ``{from, path, to}`` entries; a later entry replaces the files an
    earlier one put at the same place, as a later ``cp`` would. When the composed tree
    is the recorded pristine one nothing happens; otherwise the new pristine commit is
    recorded and the working tree (tracked files only) is switched to it. Untracked
    files (caches, outputs, data) are left alone.
    """
    result: dict[str, Any] = {"changed": False, "workdir": workdir}
    missing = [n for n in {e["from"] for e in layout} if n not in sources]
    if missing:
        raise StageError(f"layout names sources that are not staged: {', '.join(sorted(missing))}")
    commits = {}
    for name, src in sources.items():
        head = _head(src) if os.path.isdir(os.path.join(src, ".git")) else None
        if head is None:
            if check:
                result.update(changed=True, action="create")
                return result
            raise StageError(f"source {name}: {src} is not a checkout. Fix: stage it first.")
        commits[name] = head
    exists = os.path.isdir(os.path.join(workdir, ".git"))
    if not exists and check:
        result.update(changed=True, action="create")
        return result
    if not exists:
        os.makedirs(workdir, exist_ok=True)
        _git(["init", "--quiet", workdir])
    alternates = os.path.join(workdir, ".git", "objects", "info", "alternates")
    want_alt = "".join(
        f"{os.path.join(os.path.abspath(sources[n]), '.git', 'objects')}\n" for n in sorted(sources)
    )
    have_alt = open(alternates).read() if os.path.exists(alternates) else ""
    scratch = tempfile.mkdtemp(prefix="a3rl-workdir-")
    try:
        env = {"GIT_INDEX_FILE": os.path.join(scratch, "index")}
        if check:
            # Objects go to a scratch folder: check mode leaves the repository untouched.
            env["GIT_OBJECT_DIRECTORY"] = os.path.join(scratch, "objects")
            os.makedirs(env["GIT_OBJECT_DIRECTORY"])
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = ":".join(
                [os.path.join(workdir, ".git", "objects")] + want_alt.split()
            )
        elif have_alt != want_alt:
            with open(alternates, "w") as f:
                f.write(want_alt)
        placed: dict[str, str] = {}
        for entry in layout:
            name = entry["from"]
            for line in _layout_entries(
                sources[name], commits[name], entry.get("path", "."), entry.get("to", ".")
            ):
                placed[line.split("\t", 1)[1]] = line
        stdin = "".join(placed[p] + "\n" for p in sorted(placed))
        _git(["update-index", "--index-info"], cwd=workdir, env=env, stdin=stdin)
        tree = _git(["write-tree"], cwd=workdir, env=env).stdout.strip()
        old = _git(
            ["rev-parse", "--verify", "--quiet", f"{PRISTINE_REF}^{{tree}}"],
            cwd=workdir,
            check=False,
        ).stdout.strip()
        result["tree"] = tree
        if old == tree:
            result["commit"] = _git(["rev-parse", PRISTINE_REF], cwd=workdir).stdout.strip()
            return result
        result.update(changed=True, action="update" if old else "create")
        message = "a3rl: recipe working directory\n\n" + "".join(
            f"{n} {commits[n]}\n" for n in sorted(commits)
        )
        commit = _git(
            ["commit-tree", tree, "-m", message], cwd=workdir, env={**env, **_IDENTITY}
        ).stdout.strip()
        result["commit"] = commit
        if check:
            return result
        _git(["update-ref", PRISTINE_REF, commit], cwd=workdir)
        _git(["read-tree", "-u", "--reset", commit], cwd=workdir)
        _git(["update-ref", "--no-deref", "HEAD", commit], cwd=workdir)
        series = os.path.join(workdir, ".git", "a3rl", "series.json")
        if os.path.exists(series):
            os.unlink(series)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
