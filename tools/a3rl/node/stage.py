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
  repository whose pristine commit (``refs/a3rl/pristine``) is composed by a layout list
  from the training image's framework trees (``/workspace``, copied out of the image as
  files: vLLM-Ascend's build products too) and the recipe's checkout. A new composition
  is staged (``refs/a3rl/staged``); the patch series switches the files to it. Objects of
  git sources are shared with their checkouts (git alternates). The commit has a fixed
  identity and date: the same inputs give the same commit id on every node.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import posixpath
import shutil
import subprocess
import tempfile
from typing import Any

try:  # inside a module's payload on a node
    from ansible.module_utils.a3rl_common import GIT_IDENTITY, git, sha256_file
except ImportError:  # the controller and the tests
    from a3rl.node.common import GIT_IDENTITY, git, sha256_file

PRISTINE_REF = "refs/a3rl/pristine"
# A composition the patch series has not been applied to yet (see build_workdir).
STAGED_REF = "refs/a3rl/staged"
STAMP_SUFFIX = ".sha256"
# Beside a stamp, on shared storage: a copy a3rl began to send (a partial file there is
# its own, to resume; any other file at an artifact's path may be another team's).
SENDING_SUFFIX = ".sending"


class StageError(Exception):
    """A staging step cannot be done; the message names the thing and the fix."""


def _git(
    args: list[str],
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess:
    proc = git(args, cwd=cwd, env=env, stdin=stdin,
               config=("protocol.file.allow=always", "core.autocrlf=false"))
    if check and proc.returncode != 0:
        raise StageError(
            f"git {' '.join(args)} (in {cwd}): {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


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


def _placed_here(stamp: str, path: str) -> bool:
    """The file at ``path`` is one a3rl verified (maybe of an earlier version of the
    artifact) and nothing has written to since: its stamp's size and mtime are its own."""
    try:
        with open(stamp) as s:
            _sha, length, mtime = s.read().split()[:3]
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return int(length) == st.st_size and int(mtime) == st.st_mtime_ns


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
    shared: bool = False,
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

    ``shared``: ``root`` is shared storage (a3rl_shared_dir), where a file at an
    artifact's path may be another team's copy. A file there is a3rl's when a transfer of
    a3rl's began it (a ``<path>.sending`` marker beside its stamp, written here before the
    copy is sent and removed once it is verified), or when its stamp's size and mtime are
    its own (an earlier version a3rl verified, unchanged since). Any other file with the
    file's size and another sha256, longer or shorter, is kept, not removed or resumed
    over: the check stops with an error naming each, after hashing the rest.
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
    foreign = []
    for f, path, stamp, size, want, have_stamp in rows:
        sending = stamp[: -len(STAMP_SUFFIX)] + SENDING_SUFFIX
        if size == f["size"] and (have_stamp or (verify and sha256_file(path) == f["sha256"])):
            if not have_stamp:
                os.makedirs(os.path.dirname(stamp), exist_ok=True)
                with open(stamp + ".tmp", "w") as s:
                    s.write(want)
                os.replace(stamp + ".tmp", stamp)
                stamped.append(f["path"])
            if verify and shared and os.path.exists(sending):
                os.unlink(sending)
            verified.append(f["path"])
            continue
        if verify and shared and size >= 0 and not (
                os.path.exists(sending) or _placed_here(stamp, path)):
            foreign.append(f"{f['path']} (" + (
                "longer than the file" if size > f["size"] else
                "the file's size, another sha256" if size == f["size"] else
                "shorter than the file, and no transfer of a3rl's began it") + ")")
            continue
        if verify and size >= f["size"]:
            os.unlink(path)
            removed.append(f["path"])
        if verify and os.path.exists(stamp):
            os.unlink(stamp)
        if verify and shared and not os.path.exists(sending):
            # A3rl begins this copy: a partial file here later is its own, to resume.
            os.makedirs(os.path.dirname(sending), exist_ok=True)
            open(sending, "w").close()
        needed.append(f["path"])
    if foreign:
        raise StageError(
            f"{label}{root} is shared storage (a3rl_shared_dir) and holds a file a3rl did "
            f"not place at {len(foreign)} artifact path(s): {', '.join(foreign[:5])}"
            f"{' ...' if len(foreign) > 5 else ''}. It may be another team's copy, so it is "
            "kept and nothing was sent. Fix: move it away (or remove it, if it is a damaged "
            "copy of this project's), or point a3rl_shared_dir at a folder of this "
            "project's own, then run again."
        )
    if require and needed:
        # Say what became of each: a message that says "removed" of a copy that stays
        # sends the operator looking in the wrong place.
        absent = [p for p in needed if p not in removed
                  and not os.path.isfile(os.path.join(root, p))]
        short = [p for p in needed if p not in removed and p not in absent]
        groups = (("removed (damaged, or longer than the file)", removed),
                  ("kept, shorter than the file (a transfer cut short, or a store copy "
                   "shorter than its record)", short),
                  ("not there", absent))
        raise StageError(
            f"{label}{len(needed)} file(s) do not have their sha256 after the transfer: "
            + "; ".join(f"{what}: {', '.join(paths)}" for what, paths in groups if paths)
            + ". Fix: check the store copy on the controller against its manifest.json "
            "(sha256sum -c), then run again."
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


def _place(listing: dict[str, tuple[str, str]], path: str, to: str,
           where: str) -> list[str]:
    """``--index-info`` lines placing ``path`` (file, folder or glob) of a tree at ``to``.

    ``listing``: the tree's files, path -> (mode, blob sha). Mirrors ``cp``: a folder
    lands at ``to``; a file at ``to``, or inside it when ``to`` ends with ``/``; a glob's
    matching files (not folders) land inside ``to``. ``where`` names the tree in errors.
    """
    path = path.strip("/")
    to = "" if to in (".", "./") else to
    lines = []
    if any(c in path for c in "*?["):
        parent, pattern = posixpath.split(path)
        prefix = f"{parent}/" if parent else ""
        if parent and not any(k.startswith(prefix) for k in listing):
            raise StageError(f"{where}: {parent} does not exist")
        for key in sorted(listing):
            name = key[len(prefix):]
            if key.startswith(prefix) and "/" not in name and fnmatch.fnmatchcase(name, pattern):
                mode, sha = listing[key]
                lines.append(f"{mode} {sha}\t{posixpath.join(to.rstrip('/'), name)}")
        if not lines:
            raise StageError(f"{where}: nothing matches {path}")
        return lines
    if path in ("", "."):
        inside = {k: k for k in listing}
    elif path in listing:
        mode, sha = listing[path]
        dest = posixpath.join(to, posixpath.basename(path)) if (to.endswith("/") or not to) else to
        return [f"{mode} {sha}\t{dest.strip('/')}"]
    else:
        inside = {k: k[len(path) + 1:] for k in listing if k.startswith(path + "/")}
        if not inside:
            raise StageError(f"{where}: {path} does not exist. Fix: correct the layout "
                             "entry or the pin.")
    for key, rel in sorted(inside.items()):
        mode, sha = listing[key]
        dest = posixpath.join(to.strip("/"), rel) if to.strip("/") else rel
        lines.append(f"{mode} {sha}\t{dest}")
    return lines


def _git_listing(src_dir: str, commit: str) -> dict[str, tuple[str, str]]:
    """The files (blobs; submodules are not copied) of ``commit`` in ``src_dir``."""
    out = _git(["ls-tree", "-r", "-z", commit], cwd=src_dir).stdout
    listing = {}
    for item in out.split("\0"):
        if not item:
            continue
        meta, name = item.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob":
            listing[name] = (mode, sha)
    return listing


def _docker(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise StageError(f"docker {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def image_id(image: str) -> str | None:
    """The id of ``image`` in the node's Docker, or None when it is not there."""
    proc = _docker(["image", "inspect", "--format", "{{.Id}}", image], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


# A label on the short-lived container the trees are copied out of (never started).
COPY_LABEL = "a3rl.workdir-copy"
# Caches, not content: Python rewrites them on import (which would show as a drift of
# the tracked files), and they name the image's paths.
_NOT_COPIED = ("__pycache__", ".git")


def _copy_from_image(image: str, paths: list[str], dest: str) -> None:
    """Copy ``paths`` (absolute, inside the image) out of ``image`` to ``dest + path``.

    Through a container that is created and never started (``docker cp`` reads its
    filesystem): nothing of the image runs. Leftovers of a cut earlier run (by label)
    are removed first.
    """
    old = _docker(["ps", "-a", "-q", "--filter", f"label={COPY_LABEL}"], check=False).stdout
    for cid in old.split():
        _docker(["rm", "-f", cid], check=False)
    cid = _docker(["create", "--label", COPY_LABEL, "--network", "none", "--entrypoint", "",
                   image, "true"]).stdout.strip()
    try:
        chosen: list[str] = []
        for path in sorted(set(paths)):
            if any(path == c or path.startswith(c.rstrip("/") + "/") for c in chosen):
                continue
            chosen.append(path)
            target = dest + path
            os.makedirs(os.path.dirname(target), exist_ok=True)
            proc = _docker(["cp", f"{cid}:{path}", target], check=False)
            if proc.returncode != 0:
                raise StageError(
                    f"the training image {image} has no {path} ({proc.stderr.strip()}). The "
                    "recipe's build_project.sh copies the working directory from the "
                    "image's framework trees. Fix: load the recipe's image (cann_image), "
                    "or correct frameworks_image_sources."
                )
    finally:
        _docker(["rm", "-f", cid], check=False)
    for top, dirs, files in os.walk(dest):
        for d in [d for d in dirs if d in _NOT_COPIED]:
            dirs.remove(d)
            shutil.rmtree(os.path.join(top, d))
        for f in files:
            if f.endswith(".pyc") or f == ".git":
                os.unlink(os.path.join(top, f))


def _files_listing(workdir: str, root: str, env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Hash every file under ``root`` into the workdir's objects (``env``'s object
    folder); return path -> (mode, sha), paths relative to ``root``."""
    index = os.path.join(os.path.dirname(root), "files-index")
    env = {**env, "GIT_INDEX_FILE": index, "GIT_WORK_TREE": root}
    # -f: ignore rules (.gitignore in the trees) would leave the build products out.
    _git(["add", "-A", "-f", "."], cwd=root, env={**env, "GIT_DIR": os.path.join(workdir, ".git")})
    out = _git(["ls-files", "-s", "-z"], cwd=root,
               env={**env, "GIT_DIR": os.path.join(workdir, ".git")}).stdout
    listing = {}
    for item in out.split("\0"):
        if item:
            meta, name = item.split("\t", 1)
            mode, sha, _stage = meta.split()
            listing[name] = (mode, sha)
    return listing


def _ref(workdir: str, ref: str) -> str:
    return _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=workdir,
                check=False).stdout.strip()


def build_workdir(
    workdir: str,
    sources: dict[str, str],
    layout: list[dict[str, str]],
    check: bool = False,
    image: str = "",
    image_sources: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Compose the pristine working directory and stage it as ``refs/a3rl/staged``.

    ``sources``: name -> git checkout on the node (its HEAD commit is used);
    ``image_sources``: name -> folder inside ``image`` (the recipe's image builds the
    frameworks in ``/workspace``), copied out as files, build products included.
    ``layout``: ordered ``{from, path, to}`` entries; a later entry replaces the files an
    earlier one put at the same place, as a later ``cp`` would.

    Nothing in the working tree changes here: the composition is a commit. When it is
    the pristine one, nothing happens (a leftover staged ref is dropped); otherwise it
    becomes ``refs/a3rl/staged``, and the patch series (``patch_series.apply``) is
    applied to it in scratch and switches the tracked files to the result only when
    every patch applied, promoting it to ``refs/a3rl/pristine``. A series that fails
    leaves the previous tree. Untracked files (caches, outputs, data) are left alone.

    The commit's message names the inputs (checkout commits, image and image id, and a
    digest of them with the layout): a re-run with the same inputs copies nothing out of
    the image.
    """
    image_sources = image_sources or {}
    result: dict[str, Any] = {"changed": False, "workdir": workdir}
    missing = [n for n in {e["from"] for e in layout}
               if n not in sources and n not in image_sources]
    if missing:
        raise StageError(f"layout names sources that are not staged: {', '.join(sorted(missing))}")
    commits = {}
    for name, src in sources.items():
        if name in image_sources:
            continue
        head = _head(src) if os.path.isdir(os.path.join(src, ".git")) else None
        if head is None:
            if check:
                result.update(changed=True, action="create")
                return result
            raise StageError(f"source {name}: {src} is not a checkout. Fix: stage it first.")
        commits[name] = head
    built = ""
    if image_sources:
        built = image_id(image) or ""
        result["image_id"] = built
        if not built:
            if check:
                result.update(changed=True, action="create" if not os.path.isdir(
                    os.path.join(workdir, ".git")) else "update")
                return result
            raise StageError(
                f"the training image {image} is not on this node; the working directory is "
                "copied from its framework trees. Fix: run playbooks/cann_image.yml first.")
    inputs = {"commits": commits, "image": image, "image_id": built,
              "image_sources": image_sources, "layout": layout}
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    exists = os.path.isdir(os.path.join(workdir, ".git"))
    if not exists and check:
        result.update(changed=True, action="create")
        return result
    if not exists:
        os.makedirs(workdir, exist_ok=True)
        _git(["init", "--quiet", workdir])
    pristine = _ref(workdir, PRISTINE_REF)
    staged = _ref(workdir, STAGED_REF)
    for done in (pristine, staged):
        # The same inputs as the composition in place (or staged for the series).
        if done and f"\ninputs {digest}\n" in _git(["cat-file", "commit", done],
                                                    cwd=workdir).stdout:
            if done == pristine and staged and staged != pristine and not check:
                # Back to the inputs in place: a composition left staged (its series
                # failed) is not wanted any more.
                _git(["update-ref", "-d", STAGED_REF], cwd=workdir)
            result["commit"] = done
            result["tree"] = _git(["rev-parse", f"{done}^{{tree}}"], cwd=workdir).stdout.strip()
            return result
    if image_sources and check:
        # Copying gigabytes out of the image only to tell: the inputs changed.
        result.update(changed=True, action="update" if pristine else "create",
                      reason="the training image or the sources changed")
        return result
    alternates = os.path.join(workdir, ".git", "objects", "info", "alternates")
    git_sources = {n: sources[n] for n in commits}
    want_alt = "".join(
        f"{os.path.join(os.path.abspath(git_sources[n]), '.git', 'objects')}\n"
        for n in sorted(git_sources)
    )
    have_alt = open(alternates).read() if os.path.exists(alternates) else ""
    # Scratch beside the repository: the image's trees may be large for /tmp.
    scratch = tempfile.mkdtemp(prefix="a3rl-workdir-",
                               dir=None if check else os.path.join(workdir, ".git"))
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
        listings: dict[str, dict[str, tuple[str, str]]] = {}
        if image_sources:
            paths = []
            for entry in layout:
                if entry["from"] in image_sources:
                    path = entry.get("path", ".").strip("/")
                    if any(c in path for c in "*?["):
                        path = posixpath.dirname(path)
                    paths.append(posixpath.normpath(posixpath.join(image_sources[entry["from"]],
                                                                   path)))
            files = os.path.join(scratch, "image", "root")
            os.makedirs(files)
            _copy_from_image(image, paths, files)
            everything = _files_listing(workdir, files, env)
            for name, folder in image_sources.items():
                prefix = folder.strip("/") + "/"
                listings[name] = {k[len(prefix):]: v for k, v in everything.items()
                                  if k.startswith(prefix)}
        for name in commits:
            listings[name] = _git_listing(sources[name], commits[name])
        placed: dict[str, str] = {}
        for entry in layout:
            name = entry["from"]
            where = (f"the training image {image}: {image_sources[name]}" if name in image_sources
                     else f"{sources[name]} at {commits[name][:12]}")
            for line in _place(listings[name], entry.get("path", "."), entry.get("to", "."), where):
                placed[line.split("\t", 1)[1]] = line
        stdin = "".join(placed[p] + "\n" for p in sorted(placed))
        _git(["update-index", "--index-info"], cwd=workdir, env=env, stdin=stdin)
        tree = _git(["write-tree"], cwd=workdir, env=env).stdout.strip()
        result["tree"] = tree
        message = "a3rl: recipe working directory\n\n" + "".join(
            f"{n} {commits[n]}\n" for n in sorted(commits)
        ) + (f"image {image} {built}\n" if image_sources else "") + f"inputs {digest}\n"
        commit = _git(
            ["commit-tree", tree, "-m", message], cwd=workdir, env={**env, **GIT_IDENTITY}
        ).stdout.strip()
        result["commit"] = commit
        if commit == pristine:
            if staged and not check:
                _git(["update-ref", "-d", STAGED_REF], cwd=workdir)
            return result
        if commit == staged:
            return result
        result.update(changed=True, action="update" if pristine else "create")
        if check:
            return result
        _git(["update-ref", STAGED_REF, commit], cwd=workdir)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
