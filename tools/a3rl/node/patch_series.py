"""The recipe's patch series, applied to its working directory atomically and idempotently.

Runs on the nodes as Ansible module_utils: standard library only, Python 3.8+.

The recipe applies its series with ``find ./patches -type f -name "*.patch" | sort -V``
and ``git apply --ignore-whitespace`` one by one, stopping at the first failure. The
plain ``*.py`` files beside the patches stay where they are: the patched trees import
them as ``patches.verl...`` from the working directory, and a patch may edit them (the
recipe's verl 0015 edits ``patches/verl/utils/hybrid_data_parallel/hdp.py``); they are
part of the pristine tree like any other file. Done the recipe's way, a failure half-way
leaves a half-patched tree and a second run fails on the patches that already applied.
Here the working directory is a git repository whose pristine content is
``refs/a3rl/pristine`` (made by the staging step), and:

- a new composition from the staging step (``refs/a3rl/staged``: a new image, recipe or
  layout) is the base the series is built on; it becomes ``refs/a3rl/pristine`` only
  once the tracked files switched to it with the series applied, so a series that does
  not apply to it leaves the previous tree, series and pristine commit in place;

- the whole series is applied in a scratch index and object directory first; the real
  index and working tree switch to the result only when every patch applied, so a
  failing series changes nothing (and a check run writes nothing into the repository);
- the applied state is recorded in ``.git/a3rl/series.json``; a re-run with the same
  series, the same pristine commit and an untouched tree changes nothing, anything else
  resets the tracked files to pristine and applies the whole series again, in order;
- untracked files (runtime caches, outputs) are never touched.

``version_key``/``version_sorted`` reproduce GNU ``sort -V`` (gnulib ``filevercmp``),
so the series order is the recipe's order.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

try:  # inside a module's payload on a node
    from ansible.module_utils.a3rl_common import git_env
except ImportError:  # the controller and the tests
    from a3rl.node.common import git_env

__all__ = [
    "PRISTINE_REF",
    "STAGED_REF",
    "PatchSeriesError",
    "Patch",
    "Series",
    "filevercmp",
    "version_key",
    "version_sorted",
    "discover",
    "base_folder",
    "apply",
    "reset",
]

PRISTINE_REF = "refs/a3rl/pristine"
# A new composition of the working directory (stage.build_workdir) not applied yet: the
# series is built on it, and it becomes pristine when the tracked files switch to it.
STAGED_REF = "refs/a3rl/staged"
STATE_FILE = os.path.join("a3rl", "series.json")
RECIPE_LABEL = "patches"
EXTRA_LABEL = "extra"
# v2: the plain files beside the patches are no longer part of the series.
_DIGEST_FORMAT = b"a3rl-patch-series v2\n"
# Config that changes what git apply produces or prints; set on every call so a node's
# own git config cannot make one node's tree differ from another's.
_GIT_CONFIG = (
    "core.autocrlf=false",
    "apply.whitespace=nowarn",
    "core.quotepath=false",
    "core.fsmonitor=false",
)


class PatchSeriesError(Exception):
    """The series cannot be applied; the message names the patch, the place and the fix."""


# ------------------------------------------------------------------------ sort -V


def _isdigit(c: int) -> bool:
    return 48 <= c <= 57


def _isalpha(c: int) -> bool:
    return 65 <= c <= 90 or 97 <= c <= 122


def _order(s: bytes, pos: int) -> int:
    """Weight of the byte at ``pos``: end < digit run; ``~`` first, letters before others."""
    if pos == len(s):
        return -1
    c = s[pos]
    if _isdigit(c):
        return 0
    if _isalpha(c):
        return c
    if c == 0x7E:  # ~
        return -2
    return c + 256


def _prefix_len(s: bytes) -> int:
    """Length of ``s`` without its file suffix, the longest ``(\\.[A-Za-z~][A-Za-z0-9~]*)*$``.

    As in coreutils 9.1, the suffix may be the whole name (".bashrc"); gnulib later
    stopped that, which changes only names that are all suffix - never "./patches/...".
    """
    n = len(s)
    i = 0
    while True:
        prefix = i
        while i + 1 < n and s[i] == 0x2E and (_isalpha(s[i + 1]) or s[i + 1] == 0x7E):
            i += 2
            while i < n and (_isalpha(s[i]) or _isdigit(s[i]) or s[i] == 0x7E):
                i += 1
        if i == n:
            return prefix
        i += 1


def _verrevcmp(a: bytes, b: bytes) -> int:
    """dpkg's version comparison: non-digit runs by ``_order``, digit runs by value."""
    i = j = 0
    la, lb = len(a), len(b)
    while i < la or j < lb:
        while (i < la and not _isdigit(a[i])) or (j < lb and not _isdigit(b[j])):
            oa, ob = _order(a, i), _order(b, j)
            if oa != ob:
                return oa - ob
            i += 1
            j += 1
        while i < la and a[i] == 0x30:
            i += 1
        while j < lb and b[j] == 0x30:
            j += 1
        first_diff = 0
        while i < la and j < lb and _isdigit(a[i]) and _isdigit(b[j]):
            if not first_diff:
                first_diff = a[i] - b[j]
            i += 1
            j += 1
        if i < la and _isdigit(a[i]):
            return 1
        if j < lb and _isdigit(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def _bytes(s: str | bytes) -> bytes:
    return s if isinstance(s, bytes) else os.fsencode(s)


def filevercmp(a: str | bytes, b: str | bytes) -> int:
    """gnulib's ``filevercmp`` (coreutils >= 9.1): <0, 0 or >0 as ``a`` sorts before ``b``.

    Names equal under it (``a01``/``a1``) compare 0; ``sort -V`` then orders them by
    bytes, which ``version_key`` does too.
    """
    a, b = _bytes(a), _bytes(b)
    if not a:
        return -1 if b else 0
    if not b:
        return 1
    # "." first, then "..", then other dot names, then the rest.
    if a[:1] == b".":
        if b[:1] != b".":
            return -1
        for special in (b".", b".."):
            if a == special:
                return -(b != special)
            if b == special:
                return 1
    elif b[:1] == b".":
        return 1
    pa, pb = _prefix_len(a), _prefix_len(b)
    result = _verrevcmp(a[:pa], b[:pb])
    if result or (pa == len(a) and pb == len(b)):
        return result
    return _verrevcmp(a, b)


@functools.total_ordering
class _VersionKey:
    __slots__ = ("raw",)

    def __init__(self, s: str | bytes) -> None:
        self.raw = _bytes(s)

    def _cmp(self, other: _VersionKey) -> int:
        r = filevercmp(self.raw, other.raw)
        return r if r else (self.raw > other.raw) - (self.raw < other.raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _VersionKey) and self.raw == other.raw

    def __lt__(self, other: _VersionKey) -> bool:
        return self._cmp(other) < 0

    def __hash__(self) -> int:
        return hash(self.raw)


def version_key(s: str | bytes) -> _VersionKey:
    """Sort key giving GNU ``sort -V`` order in the C locale (ties broken by bytes)."""
    return _VersionKey(s)


def version_sorted(paths: Iterable[str]) -> list[str]:
    """``paths`` in the order ``printf '%s\\n' PATHS | LC_ALL=C sort -V`` prints them."""
    return sorted(paths, key=version_key)


# ------------------------------------------------------------------------ the series


class Patch(NamedTuple):
    """One patch: ``label`` names it in messages and in the state file."""

    label: str
    path: str
    sha256: str
    data: bytes
    # git apply -p: leading path components to drop (the recipe writes its patches
    # relative to the top of its repository, e.g. a/llm_rl/qwen3/verl/...: 3).
    strip: int = 1


class Series(NamedTuple):
    """The ordered patches, as ``discover`` found them."""

    patches: tuple[Patch, ...]

    @property
    def labels(self) -> list[str]:
        return [p.label for p in self.patches]

    @property
    def digest(self) -> str:
        """Changes with any rename, reorder, edit, addition or removal."""
        h = hashlib.sha256(_DIGEST_FORMAT)
        for p in self.patches:
            h.update(f"patch\0{p.label}\0{p.sha256}\0{p.strip}\n".encode())
        return h.hexdigest()


def _regular_files(root: str, suffix: str) -> list[str]:
    """Paths under ``root`` (relative, "/"-separated) as ``find -type f -name "*SUFFIX"``."""
    found = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            if name.endswith(suffix) and stat.S_ISREG(os.lstat(full).st_mode):
                found.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return found


def _read(path: str) -> tuple[bytes, str]:
    with open(path, "rb") as f:
        data = f.read()
    return data, hashlib.sha256(data).hexdigest()


def _patches(root: str, prefix: str, strip: int = 1) -> list[Patch]:
    """Patches under ``root`` labelled ``prefix/REL``, in ``sort -V`` order of ``./LABEL``.

    Sorting ``./patches/REL`` rather than ``REL`` matters: the recipe's ``find ./patches``
    lines all start with a dot, which switches off filevercmp's dot-file rule.
    """
    labels = {f"./{prefix}/{rel}": rel for rel in _regular_files(root, ".patch")}
    result = []
    for key in version_sorted(labels):
        path = os.path.join(root, labels[key])
        data, digest = _read(path)
        result.append(Patch(key[2:], path, digest, data, strip))
    return result


def _check_dir(path: str, what: str) -> str:
    if not os.path.isdir(path):
        raise PatchSeriesError(
            f"{what} {path} is not a directory. Fix: stage it on the node "
            "first, or correct the path."
        )
    return os.path.abspath(path)


def discover(
    recipe_patch_dir: str, extra_patch_dirs: Sequence[str] = (), recipe_strip: int = 1
) -> Series:
    """The recipe's series (``patches/...`` labels), then each extra folder's (``extra/...``,
    ``extra2/...``). Files other than ``*.patch`` are not part of the series.

    ``recipe_strip``: git apply's ``-p`` for the recipe's patches (1 + the depth of the
    recipe's folder in its repository); the extra patches are working-directory
    relative (``-p1``), as ``git diff`` in the working directory writes them.
    """
    root = _check_dir(recipe_patch_dir, "recipe patch folder")
    patches = _patches(root, RECIPE_LABEL, recipe_strip)
    for n, extra in enumerate(extra_patch_dirs):
        prefix = EXTRA_LABEL if n == 0 else f"{EXTRA_LABEL}{n + 1}"
        patches.extend(_patches(_check_dir(extra, "extra patch folder"), prefix))
    return Series(tuple(patches))


# ------------------------------------------------------------------------ git


class _GitFailed(Exception):
    def __init__(self, args: Sequence[str], proc: subprocess.CompletedProcess) -> None:
        self.output = (_text(proc.stderr) + _text(proc.stdout)).strip()
        super().__init__(f"git {' '.join(args)}: {self.output}")


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", "replace")


class _Git:
    """git in one working directory, with a fixed environment and optional scratch
    index/object directory (``scratch``)."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.env = git_env({"LANGUAGE": "C", "GIT_PAGER": "cat", "PAGER": "cat",
                            "GIT_OPTIONAL_LOCKS": "0"})

    def run(
        self,
        args: Sequence[str],
        scratch: _Scratch | None = None,
        data: bytes | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        cmd = ["git", "--no-pager"]
        for c in _GIT_CONFIG:
            cmd += ["-c", c]
        env = dict(self.env, **scratch.env) if scratch else self.env
        proc = subprocess.run(
            cmd + list(args), cwd=self.workdir, env=env, input=data, capture_output=True
        )
        if check and proc.returncode != 0:
            raise _GitFailed(args, proc)
        return proc

    def out(
        self, args: Sequence[str], scratch: _Scratch | None = None, data: bytes | None = None
    ) -> str:
        return _text(self.run(args, scratch, data).stdout).strip()

    def ok(
        self, args: Sequence[str], scratch: _Scratch | None = None, data: bytes | None = None
    ) -> bool:
        return self.run(args, scratch, data, check=False).returncode == 0


def _alt_path(path: str) -> str:
    """An entry of GIT_ALTERNATE_OBJECT_DIRECTORIES (quoted when it holds ':' or '"')."""
    if ":" in path or '"' in path or "\\" in path:
        return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return path


class _Scratch:
    """A throwaway index and object directory under /tmp. Objects git writes go there;
    the repository's objects stay readable as an alternate. Nothing in the repository
    changes until ``_migrate_objects`` copies the new objects in."""

    def __init__(self, repo_objects: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="a3rl-series-")
        self.index = os.path.join(self._tmp.name, "index")
        self.objects = os.path.join(self._tmp.name, "objects")
        os.makedirs(os.path.join(self.objects, "info"))
        self.env = {
            "GIT_INDEX_FILE": self.index,
            "GIT_OBJECT_DIRECTORY": self.objects,
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": _alt_path(repo_objects),
        }

    def __enter__(self) -> _Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()


def _migrate_objects(src: str, dest: str) -> None:
    """Copy the scratch objects into the repository (as git's own quarantine does)."""
    for dirpath, _dirs, names in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        if rel.startswith("info"):
            continue
        # A pack's .idx after its .pack: git only looks for packs by their index.
        for name in sorted(names, key=lambda n: n.endswith(".idx")):
            target = os.path.join(dest, rel, name)
            if os.path.exists(target):
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = target + ".a3rl-tmp"
            shutil.copyfile(os.path.join(dirpath, name), tmp)
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)


@contextlib.contextmanager
def base_folder(workdir: str, rel: str) -> Iterator[str]:
    """The working directory's folder ``rel`` (the recipe's ``patches``) as the base the
    series goes on has it: from ``refs/a3rl/staged`` while a new composition waits (its
    files are not in the working tree yet), else the working tree's own folder."""
    path = os.path.join(workdir, rel)
    git = _Git(os.path.abspath(workdir))
    if os.path.isabs(rel) or not os.path.isdir(os.path.join(workdir, ".git")) or not git.ok(
        ["rev-parse", "--verify", "--quiet", STAGED_REF + "^{commit}"]
    ):
        yield path
        return
    tmp = tempfile.mkdtemp(prefix="a3rl-series-")
    try:
        listing = git.run(["ls-tree", "-r", "-z", STAGED_REF, "--", rel.strip("/") + "/"])
        for item in listing.stdout.split(b"\0"):
            if not item:
                continue
            meta, name = item.split(b"\t", 1)
            _mode, kind, sha = meta.split()
            if kind != b"blob":
                continue
            dest = os.path.join(tmp, os.fsdecode(name))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(git.run(["cat-file", "blob", os.fsdecode(sha)]).stdout)
        yield os.path.join(tmp, rel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _Repo(NamedTuple):
    git: _Git
    gitdir: str
    objects: str
    pristine: str  # the base the series goes on: the staged composition, else pristine
    pristine_tree: str
    staged: bool  # pristine is refs/a3rl/staged, to be promoted


def _open(workdir: str) -> _Repo:
    """The workdir's repository; refuses a folder that is not its own repository's top."""
    if not os.path.isdir(workdir):
        raise PatchSeriesError(
            f"workdir {workdir} does not exist. Fix: build the recipe "
            "working directory first (a3rl_workdir)."
        )
    git = _Git(os.path.abspath(workdir))
    top = git.run(["rev-parse", "--show-toplevel"], check=False)
    if top.returncode != 0 or os.path.realpath(_text(top.stdout).strip()) != os.path.realpath(
        workdir
    ):
        raise PatchSeriesError(
            f"workdir {workdir} is not the top of a git repository. Fix: "
            "build the recipe working directory first (a3rl_workdir)."
        )
    staged = git.run(["rev-parse", "--verify", "--quiet", STAGED_REF + "^{commit}"], check=False)
    pristine = staged if staged.returncode == 0 else git.run(
        ["rev-parse", "--verify", "--quiet", PRISTINE_REF + "^{commit}"], check=False
    )
    if pristine.returncode != 0:
        raise PatchSeriesError(
            f"workdir {workdir} has no {PRISTINE_REF}. Fix: build the "
            "recipe working directory first (a3rl_workdir)."
        )
    commit = _text(pristine.stdout).strip()
    gitdir = os.path.join(git.workdir, git.out(["rev-parse", "--git-dir"]))
    objects = os.path.join(git.workdir, git.out(["rev-parse", "--git-path", "objects"]))
    return _Repo(
        git,
        os.path.abspath(gitdir),
        os.path.abspath(objects),
        commit,
        git.out(["rev-parse", commit + "^{tree}"]),
        staged.returncode == 0,
    )


def _promote(repo: _Repo) -> None:
    """The staged composition, now in the tracked files, becomes pristine (and HEAD)."""
    if repo.staged:
        repo.git.run(["update-ref", PRISTINE_REF, repo.pristine])
        repo.git.run(["update-ref", "--no-deref", "HEAD", repo.pristine])
        repo.git.run(["update-ref", "-d", STAGED_REF])


# ------------------------------------------------------------------------ state file


def _state_path(repo: _Repo) -> str:
    return os.path.join(repo.gitdir, STATE_FILE)


def _read_state(repo: _Repo) -> dict[str, Any] | None:
    """The recorded state; ``{}`` when the file is unreadable, None when there is none."""
    path = _state_path(repo)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(repo: _Repo, state: dict[str, Any]) -> None:
    path = _state_path(repo)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


# ------------------------------------------------------------------------ failures


class _Hunk(NamedTuple):
    old: str | None
    new: str | None
    oldpos: int
    header: str
    line: int


_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_name(raw: bytes, strip: int = 1) -> str | None:
    """A ``---``/``+++`` file name as git apply -pN reports it (None for /dev/null)."""
    name = _text(raw.split(b"\t")[0]).strip()
    if name == "/dev/null":
        return None
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    parts = name.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else parts[-1]


def _hunks(data: bytes, strip: int = 1) -> list[_Hunk]:
    """Every hunk of a patch with its file, old start line, header and line number.

    Hunk bodies are skipped by their line counts, so a removed line that reads
    ``-- x`` is not taken for a file header.
    """
    hunks: list[_Hunk] = []
    old = new = None
    left_old = left_new = 0
    for n, line in enumerate(data.split(b"\n"), 1):
        if left_old > 0 or left_new > 0:
            tag = line[:1]
            if tag in (b" ", b""):
                left_old, left_new = left_old - 1, left_new - 1
            elif tag == b"-":
                left_old -= 1
            elif tag == b"+":
                left_new -= 1
            continue
        if line.startswith(b"diff --git "):
            parts = line[11:].split(b" b/", 1)
            old = _strip_name(parts[0], strip)
            new = _strip_name(b"b/" + parts[1], strip) if len(parts) > 1 else old
        elif line.startswith(b"--- "):
            old = _strip_name(line[4:], strip)
        elif line.startswith(b"+++ "):
            new = _strip_name(line[4:], strip)
        else:
            m = _HUNK_RE.match(line)
            if m:
                left_old = int(m.group(2)) if m.group(2) is not None else 1
                left_new = int(m.group(4)) if m.group(4) is not None else 1
                header = _text(line[: m.end()])
                hunks.append(_Hunk(old, new, int(m.group(1)), header, n))
    return hunks


_FAILED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$")


def _failure_details(patch: Patch, output: str) -> list[str]:
    """git apply's complaints, with each failed hunk named by its header."""
    hunks = _hunks(patch.data, patch.strip)
    details = []
    for line in output.splitlines():
        m = _FAILED_RE.match(line)
        if m:
            name, pos = m.group(1), int(m.group(2))
            found = [h for h in hunks if name in (h.old, h.new) and h.oldpos == pos]
            if found:
                details += [
                    f"{name}: hunk {h.header} (line {h.line} of the patch) did not apply"
                    for h in found
                ]
            else:
                details.append(f"{name}: the hunk at line {pos} did not apply")
        elif (
            line.startswith("error: ")
            and not line.endswith(": patch does not apply")
            and "while searching for" not in line
        ):
            details.append(line[len("error: ") :])
    return details or [output or "git apply failed without a message"]


def _patch_error(workdir: str, series: Series, n: int, output: str, corrupt: bool) -> str:
    patch = series.patches[n]
    where = f"{patch.label} (patch {n + 1} of {len(series.patches)})"
    before = ", ".join(series.labels[:n]) or "none (it is the first)"
    if corrupt:
        head = (
            f"{where} is not a valid patch: git apply says: "
            f"{output.replace('error: ', '').strip() or 'nothing'}."
        )
        fix = (
            f"Fix: regenerate {patch.label} (git format-patch against the pinned "
            "framework ref) or remove it from the series."
        )
    else:
        head = f"{where} does not apply to {workdir}:\n" + "\n".join(
            "  - " + d for d in _failure_details(patch, output)
        )
        fix = (
            f"Fix: rebase {patch.label} onto the pinned framework ref, or remove it "
            "from the series."
        )
    return (
        f"{head}\nPatches applied before it (in a scratch index only): {before}.\n"
        "The working tree, the index and the recorded series state were left "
        f"unchanged.\n{fix}"
    )


# ------------------------------------------------------------------------ apply


def _build(repo: _Repo, series: Series, scratch: _Scratch) -> str:
    """The tree pristine + series would give, computed in ``scratch`` only."""
    git = repo.git
    git.run(["read-tree", repo.pristine_tree], scratch)
    for n, patch in enumerate(series.patches):
        proc = git.run(
            ["apply", f"-p{patch.strip}", "--cached", "--ignore-whitespace", "-"],
            scratch,
            data=patch.data,
            check=False,
        )
        if proc.returncode != 0:
            output = (_text(proc.stderr) + _text(proc.stdout)).strip()
            corrupt = (
                git.run(
                    ["apply", f"-p{patch.strip}", "--numstat", "-"], data=patch.data, check=False
                ).returncode
                != 0
            )
            raise PatchSeriesError(_patch_error(git.workdir, series, n, output, corrupt))
    return git.out(["write-tree"], scratch)


def _worktree_clean(repo: _Repo, scratch: _Scratch) -> bool:
    """Tracked files match the index. ``git diff`` may rewrite the index to refresh stat
    data, so it runs on a copy of it."""
    index = os.path.join(repo.gitdir, "index")
    if not os.path.exists(index):
        return False
    shutil.copyfile(index, scratch.index)
    return repo.git.ok(["diff", "--quiet", "--no-ext-diff", "--no-textconv"], scratch)


def _reverse_check(repo: _Repo, series: Series, tree: str, scratch: _Scratch) -> str:
    """Undo the series (patches last to first) from ``tree``: "ok" when
    that gives the pristine tree, "failed" when a patch does not reverse-apply, else
    "differs"."""
    git = repo.git
    if os.path.exists(scratch.index):
        os.unlink(scratch.index)
    git.run(["read-tree", tree], scratch)
    for patch in reversed(series.patches):
        if not git.ok(
            ["apply", f"-p{patch.strip}", "-R", "--cached", "--ignore-whitespace", "-"],
            scratch,
            patch.data,
        ):
            return "failed"
    if git.ok(["diff-index", "--cached", "--quiet", repo.pristine_tree, "--"], scratch):
        return "ok"
    return "differs"


def _is_pristine_plus_series(repo: _Repo, series: Series, tree: str, scratch: _Scratch) -> bool:
    """``tree`` really is pristine + this series.

    The reverse check alone is not enough: with --ignore-whitespace a patch may remove
    a line that differs from its "-" line in whitespace only, and undoing it brings back
    the patch's line, not the tree's. When every patch reverse-applied but the result
    differs, the series is applied to pristine again (in scratch) and must give ``tree``.
    """
    verdict = _reverse_check(repo, series, tree, scratch)
    if verdict != "differs":
        return verdict == "ok"
    os.unlink(scratch.index)
    try:
        return _build(repo, series, scratch) == tree
    except PatchSeriesError:
        return False


def _why_apply(repo: _Repo, series: Series, scratch: _Scratch) -> str | None:
    """Why the series must be (re)applied, or None when the recorded tree is in place and
    really is pristine + this series."""
    state = _read_state(repo)
    if state is None:
        return "first run"
    if not state:
        return "state file unreadable"
    if state.get("digest") != series.digest:
        return "series changed"
    if state.get("pristine") != repo.pristine:
        return "pristine changed"
    tree = str(state.get("tree") or "")
    if not re.fullmatch(r"[0-9a-f]{40,64}", tree) or not repo.git.ok(
        ["diff-index", "--cached", "--quiet", tree, "--"]
    ):
        return "tree drifted"
    if not _worktree_clean(repo, scratch):
        return "tree drifted"
    if not _is_pristine_plus_series(repo, series, tree, scratch):
        return "reverse check failed"
    return None


def _switch(repo: _Repo, tree: str) -> None:
    """Point the index and the tracked files at ``tree``: files only the old tree has are
    removed, new ones written, hand edits discarded. Untracked files at paths neither
    tree has (caches, outputs) stay; one at a path the series adds is overwritten, as
    ``git reset --hard`` would (``-m`` instead of ``--reset`` would refuse hand edits).
    Every check ran before this point, so nothing can fail half-way for a patch."""
    repo.git.run(["read-tree", "-u", "--reset", tree])


def apply(workdir: str, series: Series, check: bool = False) -> dict[str, Any]:
    """Apply ``series`` to ``workdir`` (pristine + series), or leave it when it is there.

    Raises PatchSeriesError, with nothing changed, when a patch does not apply. In check
    mode nothing in the repository is written; the series is still tried in scratch.
    """
    repo = _open(workdir)
    result = {
        "changed": False,
        "state": "unchanged",
        "applied": series.labels,
        "digest": series.digest,
        "reason": "",
    }
    with _Scratch(repo.objects) as scratch:
        try:
            reason = _why_apply(repo, series, scratch)
            if reason is None:
                result["tree"] = (_read_state(repo) or {})["tree"]
                if not check:
                    _promote(repo)  # a run cut after the switch
                return result
            if os.path.exists(scratch.index):
                os.unlink(scratch.index)
            tree = _build(repo, series, scratch)
            result.update(changed=True, reason=reason, tree=tree)
            if check:
                result["state"] = "would_apply"
                return result
            _migrate_objects(scratch.objects, repo.objects)
        except _GitFailed as e:
            raise PatchSeriesError(
                f"{workdir}: {e}. Fix: check the working directory's "
                "repository (git fsck), or rebuild it (a3rl_workdir)."
            ) from None
    try:
        _switch(repo, tree)
    except _GitFailed as e:
        raise PatchSeriesError(
            f"{workdir}: switching to the patched tree failed: {e}. Fix: "
            "remove the lock or file git names, then run again."
        ) from None
    _write_state(
        repo,
        {
            "version": 1,
            "digest": series.digest,
            "pristine": repo.pristine,
            "tree": tree,
            "labels": series.labels,
        },
    )
    _promote(repo)
    result["state"] = "applied" if reason == "first run" else "reapplied"
    return result


def reset(workdir: str, check: bool = False) -> dict[str, Any]:
    """Return the tracked files and the index to ``refs/a3rl/pristine`` and forget the
    series; untracked files (caches, outputs) stay."""
    repo = _open(workdir)
    state_file = _state_path(repo)
    with _Scratch(repo.objects) as scratch:
        if os.path.exists(state_file):
            reason = "series applied"
        elif not repo.git.ok(["diff-index", "--cached", "--quiet", repo.pristine_tree, "--"]):
            reason = "index differs from pristine"
        elif not _worktree_clean(repo, scratch):
            reason = "working tree differs from pristine"
        elif repo.staged:
            reason = "new composition staged"
        else:
            reason = ""
    result = {
        "changed": bool(reason),
        "state": "unchanged",
        "applied": [],
        "digest": "",
        "reason": reason,
        "tree": repo.pristine_tree,
    }
    if not reason:
        return result
    if check:
        result["state"] = "would_reset"
        return result
    try:
        _switch(repo, repo.pristine_tree)
    except _GitFailed as e:
        raise PatchSeriesError(
            f"{workdir}: resetting to pristine failed: {e}. Fix: remove "
            "the lock or file git names, then run again."
        ) from None
    if os.path.exists(state_file):
        os.unlink(state_file)
    _promote(repo)
    result["state"] = "reset"
    return result
