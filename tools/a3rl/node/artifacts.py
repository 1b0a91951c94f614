"""The artifact store: every artifact of the manifest, fetched once, verified, recorded.

A store is a folder (on the controller, or on a stager node) laid out by artifact kind:

    git/<name>.bundle             a git bundle holding ``refs/a3rl/pinned``: the pinned
                                  ref with its cherry-picks committed on top
    git/<name>--<sub>.bundle      one bundle per git submodule, at its gitlink commit
    git/<name>.git/               bare fetch cache (not part of a bundle)
    python/<name>.tar             a wheelhouse (``pip download``, sdist-only pins built),
                                  with its requirements and constraints, as one tar file
    <dest>                        files (http, vendor packages, image archives)
    <dest>/                       directory artifacts (modelscope snapshots)
    manifest.json                 what is there: per artifact its spec digest, commit,
                                  and every file with sha256 and size

An artifact is recorded in ``manifest.json`` only after its checksum passed; a re-run
whose spec is unchanged and whose files still have their recorded size and mtime does
nothing and touches no network. An offline store (an air-gapped site's bundle) is
never fetched into: anything missing or damaged is an error that says so.

Runs on the controller and, as an Ansible module_utils, on a stager node: standard
library only, Python 3.8+.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

try:  # inside a module's payload on a node
    from ansible.module_utils.a3rl_common import CHUNK as _CHUNK
    from ansible.module_utils.a3rl_common import GIT_IDENTITY, git, sha256_file
except ImportError:  # the controller and the tests
    from a3rl.node.common import CHUNK as _CHUNK
    from a3rl.node.common import GIT_IDENTITY, git, sha256_file

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
KINDS = ("git", "http", "file", "modelscope", "wheelhouse")
PINNED_REF = "refs/a3rl/pinned"


class ArtifactError(Exception):
    """An artifact cannot be fetched or verified; the message names it and the fix."""


# ---------------------------------------------------------------------------- helpers


def spec_digest(spec: dict[str, Any]) -> str:
    """Digest of what defines an artifact's content (not descriptive fields)."""
    # Where a file comes from (a hub mirror's endpoint) does not change what it is.
    keep = {k: v for k, v in spec.items()
            if k not in ("group", "version", "size", "description", "endpoint")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


def validate(name: str, spec: dict[str, Any]) -> list[str]:
    """Problems with one manifest entry, as sentences naming the entry and the fix."""
    problems = []
    kind = spec.get("kind")
    if kind not in KINDS:
        return [f"artifact {name}: kind is {kind!r}; expected one of {', '.join(KINDS)}"]
    need = {
        "git": ("url", "ref"),
        "http": ("url", "dest", "sha256"),
        "file": ("dest",),
        "modelscope": ("id", "dest"),
        "wheelhouse": ("requirements",),
    }[kind]
    for key in need:
        if not spec.get(key):
            problems.append(
                f"artifact {name} ({kind}): `{key}` is not set. Fix: set it in "
                "a3rl_artifacts or a3rl_artifact_overrides."
            )
    if kind == "modelscope" and spec.get("id") and not re.fullmatch(
            r"[0-9a-f]{40}", str(spec.get("revision") or "")):
        problems.append(revision_problem(name, spec))
    sha = spec.get("sha256")
    if sha and not re.fullmatch(r"[0-9a-f]{64}", str(sha)):
        problems.append(f"artifact {name}: sha256 {sha!r} is not 64 lowercase hex digits.")
    problems.extend(dest_problems(name, spec))
    problems.extend(source_problems(name, spec))
    problems.extend(shape_problems(name, spec))
    for key in ("constraints", "build_from_sdist", "find_links", "allow_patterns", "platforms"):
        value = spec.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) and v for v in value)
        ):
            problems.append(
                f"artifact {name}: `{key}` is {value!r}; expected a list of strings (a string "
                f"would be read one character at a time). Fix: write it as a YAML list in "
                f"a3rl_artifacts or a3rl_artifact_overrides.{name}."
            )
    for line in spec.get("constraints") or []:
        if isinstance(line, str) and "[" in line.split(";")[0]:
            problems.append(
                f"artifact {name}: constraint {line!r} names extras, which pip refuses in "
                "a constraint. Fix: write the name alone (ray, not ray[default])."
            )
    for pick in spec.get("cherry_picks") if isinstance(spec.get("cherry_picks"), list) else []:
        if not isinstance(pick, dict) or not pick.get("commit"):
            problems.append(
                f"artifact {name}: each cherry_picks entry needs `commit` "
                "(and `fetch`, the ref that holds it)."
            )
    return problems


def shape_problems(name: str, spec: dict[str, Any]) -> list[str]:
    """Fields whose type the fetch relies on: ``size`` (bytes, compared with free disk),
    a wheelhouse's ``requirements`` (a list of lines, or the file ``path`` in a git
    ``artifact``) and ``cherry_picks`` (a list): refused here, not a traceback later."""
    problems = []
    fix = f"Fix: correct it in a3rl_artifacts or a3rl_artifact_overrides.{name}."
    size = spec.get("size")
    if size is not None and not (
            (isinstance(size, int) and not isinstance(size, bool) and size >= 0)
            or (isinstance(size, str) and size.isascii() and size.isdigit())):
        problems.append(f"artifact {name}: size {size!r} is not a whole number of bytes (no "
                        f"unit suffix: 10GB is 10000000000). {fix}")
    req = spec.get("requirements")
    if spec.get("kind") == "wheelhouse" and req:
        if isinstance(req, dict):
            missing = [k for k in ("artifact", "path")
                       if not isinstance(req.get(k), str) or not req.get(k)]
            if missing:
                problems.append(
                    f"artifact {name}: requirements {req!r} lacks {' and '.join(missing)}: it "
                    "names the file `path` in the git `artifact` that holds it, or lists the "
                    f"requirement lines. {fix}")
        elif not isinstance(req, list) or not all(isinstance(v, str) for v in req):
            problems.append(
                f"artifact {name}: requirements {req!r} is neither {{artifact, path}} nor a "
                f"list of requirement lines. {fix}")
    picks = spec.get("cherry_picks")
    if picks is not None and not isinstance(picks, list):
        problems.append(f"artifact {name}: cherry_picks {picks!r} is not a list of "
                        f"{{commit, fetch}}. {fix}")
    return problems


def revision_problem(name: str, spec: dict[str, Any]) -> str:
    """Why a hub entry's ``revision`` does not pin its content, with how to find one.

    A branch (``master``) or a tag can move: whatever the hub serves at the first fetch
    would go into the store. A commit id (40 hex digits) cannot.
    """
    rev = spec.get("revision")
    kind = "datasets" if spec.get("repo_type") == "dataset" else "models"
    got = f"is {rev!r}, not a commit id" if rev else "is not set"
    return (f"artifact {name} (modelscope {spec['id']}): `revision` {got}: hub content must "
            "be pinned to a commit (40 hex digits), or the hub's newest files go into the "
            f"store. Fix: take the commit id you have checked from "
            f"https://modelscope.cn/{kind}/{spec['id']} (its file history), or from "
            f"`modelscope.hub.api.HubApi().get_{'dataset' if kind == 'datasets' else 'model'}"
            "_branches_and_tags_details(...)`, and set it: a3rl_artifact_overrides: "
            f"{{{name}: {{revision: <commit>}}}}.")


# The store's own files: an entry whose dest names one would overwrite (or prune) them.
_STORE_OWN = (MANIFEST, MANIFEST + ".tmp", ".lock")


# A git ref, a commit or a dest as scripts may meet them: no space, quote or newline.
_GIT_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+@-]*")
_DEST = re.compile(r"[A-Za-z0-9._/+@=-]+")
# The store's own folders (git bundles and fetch caches, wheelhouses).
_STORE_DIRS = ("git", "python")

# A hub id: owner/name, each a plain name (ModelScope's and Hugging Face's form).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def source_problems(name: str, spec: dict[str, Any]) -> list[str]:
    """Where an entry comes from, checked as a value: a ModelScope id is ``owner/name``
    (``..`` would step out of the hub's folders, in its cache and in a stand-in hub), a
    URL is a string that no program could read as an option (git calls take it as an
    argument), an http URL is http(s)."""
    problems = []
    fix = f"Fix: correct it in a3rl_artifacts or a3rl_artifact_overrides.{name}."
    kind = spec.get("kind")
    if kind == "modelscope" and spec.get("id") not in (None, ""):
        hub_id = spec["id"]
        if (not isinstance(hub_id, str) or not _HUB_ID.fullmatch(hub_id)
                or any(part in (".", "..") for part in hub_id.split("/"))):
            problems.append(f"artifact {name}: id {hub_id!r} is not a hub id of the form "
                            f"owner/name (letters, digits, '_', '.', '-'; no '..'). {fix}")
    if kind in ("git", "http") and spec.get("url") not in (None, ""):
        url = spec["url"]
        if not isinstance(url, str) or url != url.strip() or url.startswith("-") or any(
                c in url for c in "\n\r\0"):
            problems.append(f"artifact {name}: url {url!r} is not a URL (it must be a string "
                            f"and must not begin with '-', which git reads as an option). {fix}")
        elif kind == "http" and not url.startswith(("http://", "https://")):
            problems.append(f"artifact {name}: url {url!r} is not an http(s) URL. {fix}")
    if kind == "git" and isinstance(spec.get("ref"), str) and spec["ref"].startswith("-"):
        problems.append(f"artifact {name}: ref {spec['ref']!r} begins with '-', which git "
                        f"reads as an option. {fix}")
    elif kind == "git":
        picks = spec.get("cherry_picks") if isinstance(spec.get("cherry_picks"), list) else []
        refs = [("ref", spec.get("ref")), ("commit", spec.get("commit"))] + [
            (f"cherry_picks {key}", pick.get(key)) for pick in picks if isinstance(pick, dict)
            for key in ("commit", "fetch")]
        for what, ref in refs:
            if ref not in (None, "") and not _GIT_REF.fullmatch(str(ref)):
                problems.append(f"artifact {name}: {what} {str(ref)!r} is not a git ref or "
                                "commit (letters, digits and . _ / + @ -; no space, quote or "
                                f"newline, which a script it reaches would read as syntax). {fix}")
    return problems


def _dest_key(dest: str) -> str:
    """A dest as a comparable relative path: ``a//b/./c/`` -> ``a/b/c``; ``./`` -> ``.``."""
    return os.path.normpath(dest) if dest else ""


def dest_problems(name: str, spec: dict[str, Any]) -> list[str]:
    """A ``dest`` must be a string naming a path strictly inside the store that is not
    one of the store's own files: a folder artifact at ``.`` would prune the whole store."""
    if "dest" not in spec or spec.get("dest") in (None, ""):
        return []
    dest = spec["dest"]
    fix = ("Fix: set `dest` in a3rl_artifacts or a3rl_artifact_overrides to a path such "
           "as models/<name>.")
    if not isinstance(dest, str):
        return [f"artifact {name}: dest is {dest!r} ({type(dest).__name__}), not a path "
                f"string. {fix}"]
    key = _dest_key(dest)
    if dest.startswith("/") or ".." in dest.split("/") or key.startswith(".."):
        return [f"artifact {name}: dest {dest!r} must be a relative path inside the store. {fix}"]
    if key == ".":
        return [f"artifact {name}: dest {dest!r} is the store itself; a folder copied there "
                f"would remove every other artifact and the store's manifest. {fix}"]
    if key in _STORE_OWN or key.split("/")[0] in _STORE_OWN:
        return [f"artifact {name}: dest {dest!r} is the store's own file {key.split('/')[0]} "
                f"(its record or lock). {fix}"]
    if key.split("/")[0] in _STORE_DIRS:
        return [f"artifact {name}: dest {dest!r} is in the store's own folder "
                f"{key.split('/')[0]}/ (git bundles and fetch caches, wheelhouses), which the "
                f"store writes and prunes itself. {fix}"]
    if not _DEST.fullmatch(dest):
        return [f"artifact {name}: dest {dest!r} holds a character other than letters, digits "
                "and . _ / + @ = - (a space, a quote or a newline would be read as syntax by a "
                f"script it reaches). {fix}"]
    return []


def dest_overlap_problems(manifest: dict[str, Any]) -> list[str]:
    """Entries whose dests are the same or one inside the other: a folder artifact is
    copied and pruned as a whole, so it would overwrite or delete the other's files."""
    dests = []
    for name, spec in manifest.items():
        if isinstance(spec, dict) and isinstance(spec.get("dest"), str) and spec["dest"]:
            key = _dest_key(spec["dest"])
            if key not in (".", "") and not key.startswith(".."):
                dests.append((name, spec["dest"], key))
    problems = []
    for i, (a, a_dest, a_key) in enumerate(dests):
        for b, b_dest, b_key in dests[i + 1:]:
            if a_key == b_key:
                how = "is the same path as"
            elif b_key.startswith(a_key + "/"):
                how = "contains"
            elif a_key.startswith(b_key + "/"):
                how = "lies inside"
            else:
                continue
            problems.append(
                f"artifact {a}: dest {a_dest!r} {how} the dest {b_dest!r} of artifact {b}; "
                "copying or pruning one would overwrite or delete the other's files. Fix: give "
                "each entry its own folder in a3rl_artifacts or a3rl_artifact_overrides "
                "(e.g. models/<name>), none inside another.")
    return problems


@contextlib.contextmanager
def locked(store: str, create: bool = True) -> Iterator[None]:
    """Hold the store's lock. ``create=False`` (check mode) leaves a store that has no lock
    file yet as it is - not created, not locked: there is nothing in it to protect."""
    lock_path = os.path.join(store, ".lock")
    if not create and not os.path.exists(lock_path):
        yield
        return
    os.makedirs(store, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def read_manifest(store: str) -> dict[str, Any]:
    path = os.path.join(store, MANIFEST)
    if not os.path.exists(path):
        return {"version": MANIFEST_VERSION, "artifacts": {}}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data.setdefault("artifacts", {})
    return data


def write_manifest(store: str, data: dict[str, Any]) -> None:
    """Write the record (a temporary name, then renamed), unless it already says exactly
    this: an unchanged record keeps its mtime, so a copy of the store (the stager's pull)
    sees nothing new."""
    path = os.path.join(store, MANIFEST)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def file_record(store: str, rel: str, **extra: Any) -> dict[str, Any]:
    full = os.path.join(store, rel)
    st = os.stat(full)
    rec = {"path": rel, "sha256": sha256_file(full), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    rec.update(extra)
    return rec


def intact(store: str, entry: dict[str, Any], rehash: bool = False) -> str | None:
    """None when every recorded file is there as recorded; else what is wrong.

    Size and mtime are compared; the content is re-hashed only when they changed (or
    ``rehash``), so a no-op run stays cheap on hundreds of GB.
    """
    for rec in entry.get("files", []):
        full = os.path.join(store, rec["path"])
        try:
            st = os.stat(full)
        except FileNotFoundError:
            return f"{rec['path']} is missing"
        if st.st_size != rec["size"]:
            return f"{rec['path']} has {st.st_size} bytes, recorded {rec['size']}"
        if rehash or st.st_mtime_ns != rec.get("mtime_ns"):
            if sha256_file(full) != rec["sha256"]:
                return f"{rec['path']} does not have its recorded sha256 {rec['sha256']}"
            rec["mtime_ns"] = st.st_mtime_ns
    return None


def _git(
    args: list[str], cwd: str | None = None, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    proc = git(args, cwd=cwd, env=env, config=("protocol.file.allow=always",))
    if check and proc.returncode != 0:
        raise ArtifactError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def resolve_relative_url(base: str, url: str) -> str:
    """A submodule URL as git resolves it: ``../x.git`` is relative to the superproject."""
    if not (url.startswith("../") or url.startswith("./")):
        return url
    base = base.rstrip("/")
    while url.startswith("../") or url.startswith("./"):
        if url.startswith("./"):
            url = url[2:]
            continue
        url = url[3:]
        cut = base.rfind("/")
        if cut <= 0 or base[:cut].endswith(":/"):
            raise ArtifactError(f"cannot resolve submodule URL {url!r} against {base!r}")
        base = base[:cut]
    return base + "/" + url


def submodule_bundle_name(name: str, path: str) -> str:
    return f"git/{name}--{re.sub(r'[^A-Za-z0-9_.-]', '_', path)}.bundle"


# ------------------------------------------------------------------------------- git


def _fetch_commit(repo: str, url: str, want: str, label: str) -> str:
    """Fetch ``want`` (a ref name or a commit id) from ``url`` into ``repo``; its commit.

    A ref or full id is fetched directly; servers that refuse an unadvertised id (and
    short ids, which no server takes) fall back to fetching every branch and tag.
    """
    # "--": a URL or ref is never read as an option, whatever the manifest says.
    _git(["fetch", "--quiet", "--no-tags", "--", url, f"+{want}:refs/a3rl/want"], cwd=repo,
         check=False)
    got = _git(
        ["rev-parse", "--verify", "--quiet", "refs/a3rl/want^{commit}"], cwd=repo, check=False
    )
    _git(["update-ref", "-d", "refs/a3rl/want"], cwd=repo, check=False)
    if got.returncode == 0 and (
        not re.fullmatch(r"[0-9a-f]{7,40}", want) or got.stdout.startswith(want)
    ):
        return got.stdout.strip()
    local = _git(["rev-parse", "--verify", "--quiet", f"{want}^{{commit}}"], cwd=repo, check=False)
    if local.returncode != 0:
        proc = _git(
            ["fetch", "--quiet", "--tags", "--", url, "+refs/heads/*:refs/a3rl/heads/*"],
            cwd=repo,
            check=False,
        )
        if proc.returncode != 0:
            raise ArtifactError(
                f"{label}: cannot fetch from {url}: {proc.stderr.strip()}. Fix: "
                "check the URL and that this host reaches it (or use a bundle)."
            )
        local = _git(
            ["rev-parse", "--verify", "--quiet", f"{want}^{{commit}}"], cwd=repo, check=False
        )
    if local.returncode != 0:
        raise ArtifactError(
            f"{label}: {want!r} is not a ref or commit of {url}. Fix: correct the "
            "ref in the manifest."
        )
    return local.stdout.strip()


def _cherry_pick(repo: str, base: str, picks: list[str], label: str, message: str) -> str:
    """Commit ``picks`` applied on ``base`` with ``-n -X theirs``; deterministic id."""
    work = tempfile.mkdtemp(prefix="a3rl-pick-")
    try:
        _git(["worktree", "add", "--quiet", "--detach", work, base], cwd=repo)
        for pick in picks:
            proc = _git(
                ["cherry-pick", "-n", "-X", "theirs", pick],
                cwd=work,
                env=GIT_IDENTITY,
                check=False,
            )
            if proc.returncode != 0:
                raise ArtifactError(
                    f"{label}: cherry-pick -n -X theirs {pick} onto {base[:12]} failed: "
                    f"{proc.stderr.strip()}. Fix: pin a ref the cherry-pick applies to."
                )
        _git(["commit", "--quiet", "--allow-empty", "-m", message], cwd=work, env=GIT_IDENTITY)
        return _git(["rev-parse", "HEAD"], cwd=work).stdout.strip()
    finally:
        _git(["worktree", "remove", "--force", work], cwd=repo, check=False)
        shutil.rmtree(work, ignore_errors=True)
        _git(["worktree", "prune"], cwd=repo, check=False)


def _bundle(repo: str, commit: str, store: str, rel: str) -> None:
    _git(["update-ref", PINNED_REF, commit], cwd=repo)
    out = os.path.join(store, rel)
    tmp = out + ".tmp"
    _git(["bundle", "create", "--quiet", tmp, PINNED_REF], cwd=repo)
    os.replace(tmp, out)


def _gitlinks(repo: str, commit: str, url: str) -> list[tuple[str, str, str]]:
    """(path, commit, absolute url) of each submodule recorded in ``commit``."""
    links = []
    out = _git(["ls-tree", "-r", "-z", commit], cwd=repo).stdout
    for item in out.split("\0"):
        if item.startswith("160000 commit "):
            meta, path = item.split("\t", 1)
            links.append((path, meta.split()[2]))
    if not links:
        return []
    cfg = _git(
        [
            "config",
            "--blob",
            f"{commit}:.gitmodules",
            "--get-regexp",
            r"^submodule\..*\.(path|url)$",
        ],
        cwd=repo,
        check=False,
    ).stdout
    paths, urls = {}, {}
    for line in cfg.splitlines():
        key, _, value = line.partition(" ")
        section, field = key.rsplit(".", 1)
        (paths if field == "path" else urls)[section] = value
    by_path = {p: urls.get(s) for s, p in paths.items()}
    result = []
    for path, sha in links:
        sub_url = by_path.get(path)
        if not sub_url:
            raise ArtifactError(f"submodule {path} has no URL in .gitmodules at {commit[:12]}")
        result.append((path, sha, resolve_relative_url(url, sub_url)))
    return result


def fetch_git(
    store: str, name: str, spec: dict[str, Any], log: Callable[[str], None]
) -> dict[str, Any]:
    """Fetch a framework at its pin into ``git/<name>.bundle`` (+ submodule bundles)."""
    os.makedirs(os.path.join(store, "git"), exist_ok=True)
    repo = os.path.join(store, "git", f"{name}.git")
    if not os.path.isdir(repo):
        _git(["init", "--quiet", "--bare", repo])
    url, ref = spec["url"], str(spec["ref"])
    log(f"{name}: fetching {ref} from {url}")
    upstream = _fetch_commit(repo, url, ref, name)
    expected = spec.get("commit")
    if expected and not upstream.startswith(str(expected)):
        raise ArtifactError(
            f"{name}: {ref} at {url} is commit {upstream}, the manifest pins "
            f"{expected}: the ref moved upstream. Fix: check the upstream, then "
            "update `commit` in the manifest."
        )
    pinned = upstream
    picks = []
    for pick in spec.get("cherry_picks") or []:
        if pick.get("fetch"):
            _fetch_commit(repo, url, pick["fetch"], f"{name} cherry-pick source")
        picks.append(_fetch_commit(repo, url, str(pick["commit"]), f"{name} cherry-pick"))
    if picks:
        message = f"a3rl: {ref} with cherry-pick -n -X theirs " + " ".join(p[:12] for p in picks)
        pinned = _cherry_pick(repo, upstream, picks, name, message)
    _bundle(repo, pinned, store, f"git/{name}.bundle")
    files = [file_record(store, f"git/{name}.bundle", commit=pinned)]
    if spec.get("submodules"):
        for path, sha, sub_url in _gitlinks(repo, pinned, url):
            sub_repo = os.path.join(store, "git", f"{name}--sub.git")
            if not os.path.isdir(sub_repo):
                _git(["init", "--quiet", "--bare", sub_repo])
            log(f"{name}: fetching submodule {path} at {sha[:12]} from {sub_url}")
            _fetch_commit(sub_repo, sub_url, sha, f"{name} submodule {path}")
            rel = submodule_bundle_name(name, path)
            _bundle(sub_repo, sha, store, rel)
            files.append(file_record(store, rel, commit=sha, submodule=path))
    return {"commit": pinned, "upstream_commit": upstream, "files": files}


# ------------------------------------------------------------------------------ http

# The userinfo of a URL (``https://user:password@host/``): a credential, never written out.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s'\"]+@")


def redact(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``: messages, logs
    and errors (git's included) may name a URL that carries a credential."""
    return _USERINFO.sub(r"\1***@", text)


def url_credentials(spec: dict[str, Any]) -> list[str]:
    """The userinfo in an artifact's URLs, for a caller that masks values (Ansible's
    ``no_log_values``): the module's own arguments are echoed in its result."""
    found = []
    for key in ("url", "index_url"):
        value = spec.get(key)
        if isinstance(value, str):
            found += [m.group(0)[len(m.group(1)):-1] for m in _USERINFO.finditer(value)]
    return found


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """(the URL without its userinfo, the userinfo or None). urllib cannot send a URL's
    userinfo itself; it goes as a Basic authorization header instead."""
    m = _USERINFO.match(url)
    if not m:
        return url, None
    return m.group(1) + url[m.end():], urllib.parse.unquote(m.group(0)[len(m.group(1)):-1])


def download(
    url: str,
    dest: str,
    sha256: str,
    log: Callable[[str], None],
    timeout: float = 60,
    headers: dict[str, str] | None = None,
) -> None:
    """Download ``url`` to ``dest``, resuming ``dest.part``; ``dest`` appears only verified."""
    part = dest + ".part"
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    bare, userinfo = _split_userinfo(url)
    headers = dict(headers or {})
    if userinfo is not None:
        headers.setdefault("Authorization",
                           "Basic " + base64.b64encode(userinfo.encode()).decode("ascii"))
    url = redact(url)  # every message below names it
    req = urllib.request.Request(bare, headers=headers)
    if have:
        req.add_header("Range", f"bytes={have}-")
        log(f"resuming {url} at byte {have}")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the part is already complete
            resp = None
        else:
            raise ArtifactError(f"{url}: HTTP {e.code} {e.reason}. Fix: check the URL.") from None
    except (urllib.error.URLError, OSError) as e:
        raise ArtifactError(
            f"{url}: cannot connect ({e}). Fix: check the URL and that this host "
            "reaches it, or use an offline bundle."
        ) from None
    if resp is not None:
        with resp:
            mode = "ab" if have and resp.status == 206 else "wb"
            with open(part, mode) as f:
                shutil.copyfileobj(resp, f, _CHUNK)
    got = sha256_file(part)
    if got != sha256:
        os.unlink(part)
        raise ArtifactError(
            f"{url}: downloaded file has sha256 {got}, the manifest says {sha256}. "
            "The download was discarded. Fix: check the URL and the sha256."
        )
    os.replace(part, dest)


# ------------------------------------------------------------------------- other kinds


def _copy_tree(
    src: str, dest: str, log: Callable[[str], None], patterns: list[str] | None = None
) -> list[str]:
    """Copy a folder file by file (only files ``patterns`` match, when given); a file
    already there with its size and mtime is kept. Returns the copied paths, relative to
    ``dest``, sorted: what the artifact is made of (not whatever else is in ``dest``)."""
    copied = []
    for root, dirs, names in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            if n.startswith("."):
                continue
            s = os.path.join(root, n)
            rel = os.path.relpath(s, src)
            if patterns and not any(fnmatch.fnmatch(rel, p) for p in patterns):
                continue
            d = os.path.join(dest, rel)
            copied.append(rel)
            st = os.stat(s)
            if os.path.isfile(d):
                dt = os.stat(d)
                if dt.st_size == st.st_size and dt.st_mtime_ns == st.st_mtime_ns:
                    continue
            os.makedirs(os.path.dirname(d), exist_ok=True)
            log(f"copying {s}")
            shutil.copyfile(s, d + ".part")
            os.utime(d + ".part", ns=(st.st_atime_ns, st.st_mtime_ns))
            os.replace(d + ".part", d)
    return sorted(copied)


def _prune(
    store: str, copied: list[str], dest_rel: str, previous: dict[str, Any] | None,
    log: Callable[[str], None],
) -> None:
    """Remove the files this entry recorded earlier that its source no longer has (or no
    longer selects), so a renamed shard is not placed beside its successor. Only files
    of the entry's own earlier record are removed: whatever else is in the folder (another
    artifact, a package put there by hand) is not this entry's to delete."""
    keep = {os.path.join(dest_rel, rel) for rel in copied}
    prefix = _dest_key(dest_rel) + "/"
    for rec in (previous or {}).get("files", []):
        path = str(rec.get("path", ""))
        if path in keep or not _dest_key(path).startswith(prefix):
            continue
        full = os.path.join(store, path)
        if os.path.isfile(full) and not os.path.islink(full):
            log(f"removing {full}: no longer in the source")
            os.unlink(full)


def _tree_records(store: str, dest: str, patterns: list[str] | None = None) -> list[dict]:
    """File records of a folder artifact (hidden files, a hub client's bookkeeping, left
    out; with ``patterns``, only the files they match)."""
    files = []
    top = os.path.join(store, dest)
    for root, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            # .incomplete: a partial download of ModelScope's client, which it resumes.
            if n.startswith(".") or n.endswith((".part", ".incomplete")):
                continue
            rel = os.path.relpath(os.path.join(root, n), top)
            if patterns and not any(fnmatch.fnmatch(rel, p) for p in patterns):
                continue
            files.append(file_record(store, os.path.join(dest, rel)))
    return sorted(files, key=lambda f: f["path"])


def fetch_file(
    store: str, name: str, spec: dict[str, Any], log: Callable[[str], None],
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A file or folder the site provides (vendor packages, image archives, a dataset or
    model already on the controller): copied from ``path`` into the store, or expected at
    ``dest`` already; a single file is checked against ``sha256``. ``previous`` is the
    entry's earlier record: of a copied folder, only its files are ever pruned."""
    dest = os.path.join(store, spec["dest"])
    src = spec.get("path")
    if src and os.path.abspath(src) != os.path.abspath(dest):
        if not os.path.exists(src):
            raise ArtifactError(
                f"artifact {name}: {src} does not exist. Fix: put the file there "
                "or correct `path` in the manifest."
            )
        if os.path.isdir(src):
            copied = _copy_tree(src, dest, log, spec.get("allow_patterns"))
            _prune(store, copied, spec["dest"], previous, log)
            if not copied:
                raise ArtifactError(f"artifact {name}: the folder {src} holds no files "
                                    "(allow_patterns?).")
            return {"files": [file_record(store, os.path.join(spec["dest"], rel))
                              for rel in copied]}
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            log(f"{name}: copying {src}")
            shutil.copyfile(src, dest + ".part")
            os.replace(dest + ".part", dest)
    if os.path.isdir(dest):
        files = _tree_records(store, spec["dest"], spec.get("allow_patterns"))
        if not files:
            raise ArtifactError(f"artifact {name}: the folder {dest} holds no files.")
        return {"files": files}
    if not os.path.exists(dest):
        origin = (f" It comes from {' '.join(str(spec['obtain']).split())}."
                  if spec.get("obtain") else "")
        raise ArtifactError(
            f"artifact {name}: {dest} does not exist. It cannot be downloaded by "
            f"this tool.{origin} Fix: put the file there (or set `path`/`url` in "
            f"a3rl_artifact_overrides.{name})."
        )
    rec = file_record(store, spec["dest"])
    if spec.get("sha256") and rec["sha256"] != spec["sha256"]:
        raise ArtifactError(
            f"artifact {name}: {dest} has sha256 {rec['sha256']}, the manifest "
            f"says {spec['sha256']}. Fix: replace the file or correct the sha256."
        )
    return {"files": [rec]}


def fetch_http(
    store: str, name: str, spec: dict[str, Any], log: Callable[[str], None]
) -> dict[str, Any]:
    log(f"{name}: downloading {spec['url']}")
    download(spec["url"], os.path.join(store, spec["dest"]), spec["sha256"], log)
    return {"files": [file_record(store, spec["dest"])]}


def fetch_modelscope(
    store: str,
    name: str,
    spec: dict[str, Any],
    log: Callable[[str], None],
    token: str | None = None,
) -> dict[str, Any]:
    """A model or dataset snapshot from the ModelScope hub, with ModelScope's own client.

    The client resumes partial files and checks each file's sha256 against the hub's
    listing. It re-hashes every file when called again, so it is called only when the
    store's record says the snapshot is not complete (``ensure``).
    """
    try:
        from modelscope import snapshot_download  # type: ignore
    except ImportError:
        raise ArtifactError(
            f"artifact {name}: the `modelscope` package is not installed on the "
            "fetch host. Fix: pip install modelscope there, or fetch on "
            "another host and use a bundle."
        ) from None
    dest = os.path.join(store, spec["dest"])
    where = spec.get("endpoint") or "ModelScope"
    log(f"{name}: downloading {spec['id']} from {where}")
    kwargs: dict[str, Any] = {"local_dir": dest}
    patterns = [str(p) for p in spec.get("allow_patterns") or []]
    if patterns:
        kwargs["allow_patterns"] = patterns
    for key in ("revision", "repo_type", "endpoint"):
        if spec.get(key):
            kwargs[key] = spec[key]
    if token:
        kwargs["token"] = token
    try:
        snapshot_download(spec["id"], **kwargs)
    except Exception as e:  # the client raises many types; all mean "not fetched"
        raise ArtifactError(
            f"artifact {name}: downloading {spec.get('repo_type') or 'model'} {spec['id']} "
            f"from {where} failed: {type(e).__name__}: {str(e)[:500]}. What arrived is kept "
            "and the next run resumes it. Fix: check the id, the revision, the token "
            "(modelscope_token) and that this host reaches the hub."
        ) from None
    files = _tree_records(store, spec["dest"], patterns)
    if not files:
        raise ArtifactError(f"artifact {name}: {spec['id']} gave no files (allow_patterns?).")
    return {"revision": spec["revision"], "files": files}


def _requirements_text(store: str, spec: dict[str, Any], manifest: dict[str, Any]) -> str:
    req = spec["requirements"]
    if isinstance(req, list):
        return "".join(f"{line}\n" for line in req)
    # {artifact: <git artifact>, path: <file in it>}: read from the pinned commit.
    owner = manifest["artifacts"].get(req["artifact"])
    if not owner or "commit" not in owner:
        raise ArtifactError(
            f"wheelhouse: requirements come from artifact {req['artifact']!r}, "
            "which is not in the store yet. Fix: list it before the wheelhouse."
        )
    repo = os.path.join(store, "git", f"{req['artifact']}.git")
    return _git(["show", f"{owner['commit']}:{req['path']}"], cwd=repo).stdout


# ``name==version`` (with optional extras, an environment marker or a comment): a pin.
_PIN_LINE = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;#,]+)\s*(?:[;#].*)?$"
)


def canonical_name(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): ``Py_Foo.bar`` -> ``py-foo-bar``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_pins(text: str) -> dict[str, str]:
    """The exact pins of a requirements file: canonical name -> version."""
    pins = {}
    for line in text.splitlines():
        m = _PIN_LINE.match(line)
        if m:
            pins[canonical_name(m.group(1))] = m.group(2)
    return pins


def _pip_sources(spec: dict[str, Any]) -> list[str]:
    """Where pip looks: the spec's index (or pip's own configuration) and local folders."""
    args = []
    if spec.get("index_url"):
        args += ["--index-url", spec["index_url"]]
    for link in spec.get("find_links") or []:
        args += ["--find-links", str(link)]
    return args


def _build_sdist_pins(
    name: str, spec: dict[str, Any], text: str, out: str, log: Callable[[str], None]
) -> None:
    """Build wheels of the pins that are published as source archives only.

    ``pip download --only-binary=:all:`` (needed to fetch for another platform) cannot
    take them. They are named in ``build_from_sdist``; their versions are the pins of the
    requirements file. Only pure-Python wheels (``*-none-any.whl``) are kept: a wheel
    built here for this host's platform would not install on the nodes.
    """
    names = [str(n) for n in spec.get("build_from_sdist") or []]
    if not names:
        return
    pins = requirement_pins(text)
    unpinned = [n for n in names if canonical_name(n) not in pins]
    if unpinned:
        raise ArtifactError(
            f"wheelhouse {name}: build_from_sdist names {', '.join(unpinned)}, which the "
            "requirements do not pin as name==version. Fix: drop it from build_from_sdist "
            "(a3rl_artifact_overrides), or pin it in the requirements."
        )
    wanted = [f"{n}=={pins[canonical_name(n)]}" for n in names]
    cmd = [
        spec.get("pip") or sys.executable, "-m", "pip", "wheel", "--quiet",
        "--disable-pip-version-check", "--no-deps",
        # From the source archive: only these names (their build tools may be wheels).
        "--no-binary", ",".join(names), "-w", out, *_pip_sources(spec), *wanted,
    ]
    log(f"{name}: building wheels of {', '.join(wanted)} from their source archives")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArtifactError(
            f"wheelhouse {name}: pip wheel of {', '.join(wanted)} failed: "
            f"{proc.stderr.strip()[-2000:]}"
        )
    for wheel in sorted(os.listdir(out)):
        if not wheel.endswith("-none-any.whl"):
            raise ArtifactError(
                f"wheelhouse {name}: {wheel} is not a pure-Python wheel: built here, it is "
                "for this host's Python and platform, not the nodes'. Fix: build it on a "
                "machine like the nodes and hand it over in a find_links folder, and drop "
                "it from build_from_sdist."
            )


def fetch_wheelhouse(
    store: str,
    name: str,
    spec: dict[str, Any],
    log: Callable[[str], None],
    manifest: dict[str, Any],
) -> dict[str, Any]:
    """``pip download`` the requirements for the nodes' platform into one tar file.

    The tar holds the wheels, the requirements file and ``constraints.txt`` (the spec's
    ``constraints``: the versions the training image fixes for requirements that the
    file leaves open). Pins listed in ``build_from_sdist`` are built into wheels first.
    """
    text = _requirements_text(store, spec, manifest)
    constraints = "".join(f"{line}\n" for line in spec.get("constraints") or [])
    rel = f"python/{name}.tar"
    os.makedirs(os.path.join(store, "python"), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.join(store, "python")) as tmp:
        wheels = os.path.join(tmp, "wheels")
        built = os.path.join(tmp, "built")
        os.mkdir(wheels)
        os.mkdir(built)
        with open(os.path.join(wheels, "requirements.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(wheels, "constraints.txt"), "w") as f:
            f.write(constraints)
        _build_sdist_pins(name, spec, text, built, log)
        cmd = [
            spec.get("pip") or sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "-d",
            wheels,
            "-r",
            os.path.join(wheels, "requirements.txt"),
            "-c",
            os.path.join(wheels, "constraints.txt"),
            "--find-links",
            built,
        ]
        if spec.get("platforms"):
            cmd += ["--only-binary=:all:"]
            for plat in spec["platforms"]:
                cmd += ["--platform", plat]
        if spec.get("python_version"):
            cmd += ["--python-version", str(spec["python_version"]), "--implementation", "cp"]
            if "--only-binary=:all:" not in cmd:
                cmd += ["--only-binary=:all:"]
        cmd += _pip_sources(spec)
        log(f"{name}: pip download of {len(text.splitlines())} requirement lines")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            hint = ""
            if "--only-binary=:all:" in cmd:
                hint = (
                    " Fix: a pinned package that is published as a source archive only "
                    "(no wheel) and is pure Python goes into the wheelhouse's "
                    "build_from_sdist list (a3rl_artifact_overrides)."
                )
            raise ArtifactError(
                f"wheelhouse {name}: pip download failed: {proc.stderr.strip()[-2000:]}{hint}"
            )
        tmp_tar = os.path.join(tmp, "w.tar")
        with tarfile.open(tmp_tar, "w") as tar:
            for n in sorted(os.listdir(wheels)):
                info = tar.gettarinfo(os.path.join(wheels, n), arcname=n)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with open(os.path.join(wheels, n), "rb") as f:
                    tar.addfile(info, f)
        os.replace(tmp_tar, os.path.join(store, rel))
    req_digest = hashlib.sha256(text.encode()).hexdigest()
    return {"requirements_sha256": req_digest, "files": [file_record(store, rel)]}


# ----------------------------------------------------------------------------- entry


def present_bytes(store: str, dest: str) -> int:
    """Bytes of an artifact already in the store (complete or partial files)."""
    top = os.path.join(store, dest)
    if os.path.isfile(top):
        return os.path.getsize(top)
    if os.path.isfile(top + ".part"):
        return os.path.getsize(top + ".part")
    total = 0
    for root, _dirs, names in os.walk(top):
        total += sum(os.path.getsize(os.path.join(root, n)) for n in names
                     if os.path.isfile(os.path.join(root, n)))
    return total


def free_bytes(path: str) -> int:
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def check_space(store: str, name: str, spec: dict[str, Any], host: str = "") -> None:
    """Refuse to start fetching an artifact of declared ``size`` the store has no room for."""
    size = int(spec.get("size") or 0)
    if not size:
        return
    need = size - (present_bytes(store, spec["dest"]) if spec.get("dest") else 0)
    free = free_bytes(store)
    if need > free:
        where = f" on {host}" if host else ""
        raise ArtifactError(
            f"artifact {name}: the store {store}{where} has {free / 1e9:.1f} GB free; "
            f"{spec.get('id') or spec.get('url') or name} needs {need / 1e9:.1f} GB more "
            f"(size {size / 1e9:.1f} GB). Nothing was fetched. Fix: free space there, or "
            "point a3rl_artifact_dir (or artifact_store_stager_dir) at a larger disk."
        )



def _refuse_another_revision(store: str, name: str, spec: dict[str, Any],
                             entry: dict[str, Any]) -> None:
    """A hub snapshot in the store from another revision (or from before revisions were
    pinned) is not refetched over: the client would keep the files both revisions share
    and leave those the new one dropped. The operator removes it; nothing is fetched."""
    if spec.get("kind") != "modelscope" or entry.get("revision") == spec.get("revision"):
        return
    dest = os.path.join(store, str(spec["dest"]))
    if not os.path.isdir(dest) or not any(os.scandir(dest)):
        return
    had = entry.get("revision") or "unknown (fetched before revisions were pinned)"
    raise ArtifactError(
        f"artifact {name}: the store holds {spec['id']} at revision {had}, the manifest "
        f"asks for {spec['revision']}; nothing was fetched. Fix: remove {dest} so the "
        "pinned revision is fetched into it, or set `revision` back to the one it holds.")


def ensure(
    store: str,
    name: str,
    spec: dict[str, Any],
    offline: bool = False,
    check: bool = False,
    refresh: bool = False,
    log: Callable[[str], None] = lambda _m: None,
    token: str | None = None,
    host: str = "",
) -> dict[str, Any]:
    """Make the store hold artifact ``name`` as ``spec`` says; report what was done.

    An artifact with a declared ``size`` is fetched only when the store's disk has room
    for what has not arrived yet; otherwise nothing is fetched and the error says so.
    ``token`` (a hub token) is passed to the hub client only; it is never recorded.

    Returns ``{"changed": bool, "action": present|fetched|would_fetch, "entry": {...}}``.
    Every log line and error has the userinfo of its URLs masked (``redact``).
    """
    try:
        return _ensure(store, name, spec, offline, check, refresh,
                       lambda m: log(redact(m)), token, host)
    except ArtifactError as e:
        raise ArtifactError(redact(str(e))) from None


def _ensure(
    store: str,
    name: str,
    spec: dict[str, Any],
    offline: bool,
    check: bool,
    refresh: bool,
    log: Callable[[str], None],
    token: str | None,
    host: str,
) -> dict[str, Any]:
    problems = validate(name, spec)
    if problems:
        raise ArtifactError(" ".join(problems))
    digest = spec_digest(spec)
    with locked(store, create=not check):
        manifest = read_manifest(store)
        entry = manifest["artifacts"].get(name)
        why = None
        if entry is None:
            why = "not in the store"
        elif entry.get("spec_digest") != digest:
            why = "the manifest entry changed"
            _refuse_another_revision(store, name, spec, entry)
        elif (
            spec["kind"] == "wheelhouse"
            and not isinstance(spec["requirements"], list)
            and not offline
        ):
            # Offline, the requirements file's source is the bundle's recipe commit,
            # whose own entry is checked; the bare fetch cache is not in a bundle.
            try:
                text = _requirements_text(store, spec, manifest)
            except ArtifactError as e:
                why = str(e)
            else:
                if hashlib.sha256(text.encode()).hexdigest() != entry.get("requirements_sha256"):
                    why = "the requirements changed"
        if why is None:
            why = intact(store, entry)
            if why is None and refresh:
                why = "a refresh was asked for"
        if why is None:
            if not check:
                write_manifest(store, manifest)  # refreshed mtimes after a re-hash
            return {"changed": False, "action": "present", "entry": entry}
        if offline:
            raise ArtifactError(
                f"artifact {name}: {why} in the offline store {store} (artifact_source=bundle), "
                "and nothing is fetched from the network. Fix: make the bundle again on a "
                "connected machine (playbooks/bundle.yml) with this manifest."
            )
        check_space(store, name, spec, host)
        if check:
            return {"changed": True, "action": "would_fetch", "reason": why, "entry": entry or {}}
        fetcher = {
            "git": fetch_git,
            "http": fetch_http,
            "file": fetch_file,
            "modelscope": fetch_modelscope,
        }.get(spec["kind"])
        started = time.monotonic()
        if fetcher is None:
            result = fetch_wheelhouse(store, name, spec, log, manifest)
        elif spec["kind"] == "modelscope":
            result = fetch_modelscope(store, name, spec, log, token=token)
        elif spec["kind"] == "file":
            result = fetch_file(store, name, spec, log, previous=entry)
        else:
            result = fetcher(store, name, spec, log)
        entry = {
            "kind": spec["kind"],
            "spec_digest": digest,
            "version": str(spec.get("version", "")),
            "group": spec.get("group", ""),
            **result,
        }
        manifest["artifacts"][name] = entry
        write_manifest(store, manifest)
        return {
            "changed": True,
            "action": "fetched",
            "reason": why,
            "entry": entry,
            "seconds": round(time.monotonic() - started, 1),
        }


def checksum_lines(manifest: dict[str, Any], names: list[str] | None = None) -> str:
    """``sha256sum -c`` input for the files of the named artifacts (all by default)."""
    lines = []
    for name, entry in sorted(manifest["artifacts"].items()):
        if names is None or name in names:
            lines.extend(f"{f['sha256']}  {f['path']}" for f in entry.get("files", []))
    return "".join(f"{line}\n" for line in lines)


def node_files(manifest: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """The files the nodes need for the named artifacts: path, sha256, size."""
    files = []
    for name in names:
        entry = manifest["artifacts"].get(name)
        if entry is None:
            raise ArtifactError(
                f"artifact {name} is not in the store. Fix: run the artifact "
                "store stage first (it fetches it)."
            )
        files.extend(
            {"path": f["path"], "sha256": f["sha256"], "size": f["size"]} for f in entry["files"]
        )
    return files
