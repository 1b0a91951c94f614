"""STAND-IN for the ModelScope hub (modelscope.cn), for the simulator and the tests.

The roles fetch model weights and datasets with ModelScope's own client
(``modelscope.snapshot_download`` / ``dataset_snapshot_download``, which delegate to
``modelscope_hub``). The simulator has no route to modelscope.cn, so this module serves the
part of the hub protocol that the client in modelscope 1.40.2 / modelscope-hub 0.5.1 uses
for those downloads, from a folder, and the real client runs against it unmodified.
It is not modelscope.cn and holds no real
model: ``write_models`` writes small STAND-IN repositories whose ``config.json`` files carry
the published Qwen3 shapes and whose weights are tiny tensors.

Layout served: ``<root>/models/<owner>/<name>/<files...>`` and
``<root>/datasets/<owner>/<name>/<files...>`` (nested folders allowed), one revision
(``master`` unless told otherwise) whose commit id is the sha1 of the listing
(``Catalog.commit``). ``Revision=`` takes the branch name or that commit id, as the real
hub takes a branch, tag or commit id (modelscope_hub 0.5.1, ``_download.py``:
"revision: Branch, tag, or commit hash"); any other is 404. Implemented, under
``/api/v1`` (the legacy API that the client's download path uses; ``<repo>`` is
``models/<owner>/<name>`` or ``datasets/<owner>/<name>``):

* ``GET models/<owner>/<name>/repo/files?Revision=&Recursive=&Root=``: file listing,
  ``{"Code": 200, "Data": {"Files": [...]}, "Success": true, ...}``; each entry has the
  fields the real hub sends (``Path``, ``Name``, ``Size``, ``Sha256``, ``Type`` blob/tree,
  ``IsLFS``, ``Mode``, ``Revision``, ``CommittedDate`` ...). Size and sha256 come from the
  files, cached by (mtime, size).
* ``GET datasets/<owner>/<name>/repo/tree?Revision=&Recursive=&Root=&PageNumber=&PageSize=``:
  the same listing for datasets, paged as the client pages it.
* ``GET|HEAD <repo>/repo?Revision=&FilePath=``: the file's bytes. ``Range: bytes=N-`` (and
  ``N-M``, ``-N``) is answered 206 with ``Content-Range``; a range past the end 416 with
  ``Content-Range: bytes */size``. This is what the client resumes with.
* ``GET <repo>``: repository info; ``GET <repo>/revisions``: ``RevisionMap`` with the one
  branch. The client asks for the info when a listing scoped with ``Root`` finds nothing.
* ``GET repos/internalAccelerationInfo``: the Aliyun-region probe the client makes before
  each download; answered with no region, so no intra-cloud routing is attempted.

Errors are JSON with ``Code``/``Message``/``Success: false`` and the status the client maps
to its exceptions: 404 for an unknown repository (message ``模型不存在`` / ``数据集不存在``,
which the client itself translates to "Model does not exist."), revision or file; 401 when
``token`` is set and the request carries neither ``Authorization: Bearer <token>`` nor the
cookie ``m_session_id=<token>`` (the client sends both). Optional ``rate`` (bytes per second
per response) slows transfers so a test can kill the hub mid-file. Every request is
appended to ``<root>/.requests`` as one JSON line (method, path, query, Range header,
which auth channels were presented but never the token, and the status), written before
any body byte so a transfer cut short is on record.

Point the client at it with ``endpoint=`` or ``MODELSCOPE_ENDPOINT``; with neither, the
client probes modelscope.cn and modelscope.ai first. ``MODELSCOPE_DOMAIN`` works only with
an explicit ``http://``: the client prefixes a bare domain with ``https://``.

Not implemented: the OpenAPI surface (``/openapi/v1``, only used for that probe),
redirects to OSS/CDN storage, uploads, git access, tags or more than one revision
(an older commit id than the files' current one is 404 here, where the real hub serves it),
archives (skills), the ``ststoken``/meta endpoints of ``MsDataset``, the hub's numeric
business error codes, and anything about users, orgs or search.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.server
import json
import os
import signal
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from a3rl.files import sha256_file
from a3rl.paths import machine_cache_dir
from a3rl.sim import tiny_qwen3

KINDS = ("models", "datasets")
DEFAULT_REVISION = "master"
REQUEST_LOG = ".requests"
NOTE = "STAND-IN made by a3rl's simulator, not the published model"

# Suffixes ModelScope's default .gitattributes stores in LFS; only shown in listings.
_LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".parquet", ".arrow",
                 ".h5", ".onnx", ".msgpack", ".zip", ".tar", ".gz")
_MODE_FILE, _MODE_DIR = "33188", "16384"  # git's 100644 and 040000, as the hub sends them
_CHUNK = 64 * 1024


# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class Entry:
    """One file or folder of a repository, as a listing reports it."""

    path: str             # relative to the repository, "/"-separated
    is_dir: bool
    size: int
    sha256: str
    mtime: int


class Catalog:
    """The repositories under ``root``, with sha256 cached per (mtime, size).

    The client asks for a listing (sizes and hashes of every file) on every snapshot
    download, so a file is hashed again only when it changed, not per request.
    """

    def __init__(self, root: Path, revision: str = DEFAULT_REVISION) -> None:
        self.root = root
        self.revision = revision
        self._hashes: dict[Path, tuple[int, int, str]] = {}
        self._lock = threading.Lock()

    def repo(self, kind: str, owner: str, name: str) -> Path | None:
        """The folder of ``owner/name``, or None when there is no such repository."""
        if kind not in KINDS or not _plain(owner) or not _plain(name):
            return None
        folder = self.root / kind / owner / name
        return folder if folder.is_dir() else None

    def sha256(self, path: Path) -> str:
        st = path.stat()
        with self._lock:
            cached = self._hashes.get(path)
        if cached and cached[:2] == (st.st_mtime_ns, st.st_size):
            return cached[2]
        digest = sha256_file(path)
        with self._lock:
            self._hashes[path] = (st.st_mtime_ns, st.st_size, digest)
        return digest

    def entries(self, repo: Path, root: str = "", recursive: bool = True) -> list[Entry] | None:
        """Files and folders under ``root`` (whole repository when empty); None if absent."""
        base = self.resolve(repo, root) if root else repo
        if base is None or not base.is_dir():
            return None
        found: list[Entry] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            here = Path(dirpath)
            for d in dirnames:
                path = here / d
                found.append(Entry(path.relative_to(repo).as_posix(), True, 0, "",
                                   int(path.stat().st_mtime)))
            for f in sorted(filenames):
                path = here / f
                st = path.stat()
                found.append(Entry(path.relative_to(repo).as_posix(), False, st.st_size,
                                   self.sha256(path), int(st.st_mtime)))
            if not recursive:
                break
        return sorted(found, key=lambda e: e.path)

    def resolve(self, repo: Path, rel: str) -> Path | None:
        """``repo/rel`` if it exists, checked lexically: no ``..`` may climb out.

        Lexical, not ``Path.resolve``, so a repository may hold symlinks to big files
        kept elsewhere; they are served as the files they point to.
        """
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            return None
        path = repo.joinpath(*parts)
        return path if path.exists() else None

    def commit(self, repo: Path) -> str:
        """A stand-in commit id: sha1 of the listing, so it changes when a file does."""
        h = hashlib.sha1()
        for e in self.entries(repo) or []:
            h.update(f"{e.path}\0{e.size}\0{e.sha256}\n".encode())
        return h.hexdigest()


def _plain(segment: str) -> bool:
    return bool(segment) and segment not in (".", "..") and "/" not in segment \
        and not segment.startswith(".")


def _file_json(e: Entry, revision_sha: str) -> dict[str, Any]:
    """One entry in the shape of the real ``repo/files`` listing."""
    return {
        "CommitMessage": NOTE,
        "CommittedDate": e.mtime,
        "CommitterName": "a3rl simulator",
        "InCheck": False,
        "IsLFS": (not e.is_dir) and e.path.endswith(_LFS_SUFFIXES),
        "Mode": _MODE_DIR if e.is_dir else _MODE_FILE,
        "Name": e.path.rsplit("/", 1)[-1],
        "Path": e.path,
        "Revision": revision_sha,
        "Sha256": e.sha256,
        "Size": e.size,
        "Type": "tree" if e.is_dir else "blob",
    }


# --------------------------------------------------------------------------- http


class _Unsatisfiable(Exception):
    pass


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """Inclusive (start, end) asked for by a single-range ``Range`` header; None = whole.

    Several ranges, or a header we cannot parse, get the whole file, which RFC 9110 allows
    and the client handles (it restarts on a 200). Raises ``_Unsatisfiable`` for a start
    at or past the end.
    """
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes="):].strip().partition("-")
    try:
        if not first:  # suffix range: the last N bytes
            n = int(last)
            if n <= 0:
                raise _Unsatisfiable
            return max(0, size - n), size - 1
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        raise _Unsatisfiable
    return start, min(end, size - 1)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    hub: _HubState


@dataclass
class _HubState:
    catalog: Catalog
    token: str | None
    rate: int | None
    log_path: Path
    log_lock: threading.Lock


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    server_version = "a3rl-standin-modelscope/1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the JSON request log is the record

    def do_GET(self) -> None:
        self._dispatch(body=True)

    def do_HEAD(self) -> None:
        self._dispatch(body=False)

    # ------------------------------------------------------------------ plumbing

    def _dispatch(self, body: bool) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        channels = self._tokens()
        self._entry = {"method": self.command, "path": url.path, "query": query,
                       "range": self.headers.get("Range"), "auth": sorted(channels)}
        hub = self.server.hub
        parts = [unquote(p) for p in url.path.split("/")]
        if parts[:3] != ["", "api", "v1"]:
            return self._error(404, f"no such endpoint: {url.path}", body)
        rest = parts[3:]
        if rest == ["repos", "internalAccelerationInfo"]:
            # Asked with a 0.2 s timeout before every download; no token needed, no region.
            return self._json(200, {"InternalRegionQueryAddress": ""}, body)
        if hub.token is not None and not any(
            hmac.compare_digest(t.encode(), hub.token.encode()) for t in channels.values()
        ):
            return self._error(401, "Unauthorized: this hub needs a token "
                                    "(Authorization: Bearer or cookie m_session_id)", body)
        if len(rest) < 3 or rest[0] not in KINDS:
            return self._error(404, f"no such endpoint: {url.path}", body)
        kind, owner, name, tail = rest[0], rest[1], rest[2], rest[3:]
        repo = hub.catalog.repo(kind, owner, name)
        if repo is None:
            return self._error(404, "模型不存在" if kind == "models" else "数据集不存在", body)
        if not tail:
            return self._info(kind, owner, name, repo, body)
        if tail == ["revisions"]:
            return self._revisions(repo, body)
        # Like the hub: a branch name, or the commit id a pinned manifest entry carries.
        revision = query.get("Revision") or hub.catalog.revision
        if revision not in (hub.catalog.revision, hub.catalog.commit(repo)):
            return self._error(404, f"revision {revision} not found in {owner}/{name} "
                                    f"(this hub serves {hub.catalog.revision} and its commit "
                                    "only)", body)
        if tail == ["repo"]:
            return self._file(repo, query.get("FilePath", ""), f"{owner}/{name}", body)
        if (kind, tail) in (("models", ["repo", "files"]), ("datasets", ["repo", "tree"])):
            return self._listing(kind, repo, query, body)
        return self._error(404, f"no such endpoint: {url.path}", body)

    def _tokens(self) -> dict[str, str]:
        """Tokens presented, by channel: the client sends a Bearer header and a cookie."""
        found: dict[str, str] = {}
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            found["bearer"] = auth[len("Bearer "):].strip()
        cookie = SimpleCookie()
        try:
            cookie.load(self.headers.get("Cookie", ""))
        except CookieError:
            pass
        if "m_session_id" in cookie:
            found["cookie"] = cookie["m_session_id"].value
        return found

    def send_response(self, code: int, message: str | None = None) -> None:
        """Log the request with its status as the answer starts (before any body bytes).

        Written before the body so a transfer cut short by a kill is on record too.
        """
        entry = getattr(self, "_entry", None)
        if entry is not None:
            hub = self.server.hub
            line = json.dumps({"time": round(time.time(), 3), **entry, "status": code})
            with hub.log_lock, open(hub.log_path, "a") as f:
                f.write(line + "\n")
            self._entry = None
        super().send_response(code, message)

    def _send(self, status: int, headers: dict[str, str], payload: bytes, body: bool) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def _json(self, status: int, data: Any, body: bool, message: str = "success") -> None:
        request_id = uuid.uuid4().hex
        envelope = {"Code": status, "Data": data, "Message": message, "RequestId": request_id,
                    "Success": status < 400}
        if status >= 400:
            del envelope["Data"]
        self._send(status, {"Content-Type": "application/json;charset=UTF-8",
                            "X-Request-ID": request_id},
                   json.dumps(envelope, ensure_ascii=False).encode(), body)

    def _error(self, status: int, message: str, body: bool) -> None:
        self._json(status, None, body, message=message)

    # ------------------------------------------------------------------ endpoints

    def _info(self, kind: str, owner: str, name: str, repo: Path, body: bool) -> None:
        entries = self.server.hub.catalog.entries(repo) or []
        updated = max((e.mtime for e in entries), default=int(repo.stat().st_mtime))
        self._json(200, {
            "Id": int(hashlib.sha1(f"{kind}/{owner}/{name}".encode()).hexdigest()[:8], 16),
            "Name": name,
            "Path": owner,
            "Description": NOTE,
            "Visibility": 5,  # public
            "CreatedTime": int(repo.stat().st_mtime),
            "LastUpdatedTime": updated,
            "Revision": self.server.hub.catalog.revision,
        }, body)

    def _revisions(self, repo: Path, body: bool) -> None:
        catalog = self.server.hub.catalog
        branch = {"Revision": catalog.revision, "CreatedAt": int(repo.stat().st_mtime),
                  "CommitId": catalog.commit(repo)}
        self._json(200, {"RevisionMap": {"Branches": [branch], "Tags": []}}, body)

    def _listing(self, kind: str, repo: Path, query: dict[str, str], body: bool) -> None:
        catalog = self.server.hub.catalog
        root = query.get("Root", "").strip("/")
        recursive = query.get("Recursive", "false").lower() == "true"
        entries = catalog.entries(repo, root, recursive)
        if entries is None:
            return self._error(404, f"path {root} not found", body)
        sha = catalog.commit(repo)
        files = [_file_json(e, sha) for e in entries]
        if kind == "datasets" and "PageSize" in query:
            try:
                size = max(1, int(query["PageSize"]))
                page = max(1, int(query.get("PageNumber", "1")))
            except ValueError:
                return self._error(400, "PageNumber and PageSize must be integers", body)
            files = files[(page - 1) * size:page * size]
        self._json(200, {"Files": files}, body)

    def _file(self, repo: Path, rel: str, repo_id: str, body: bool) -> None:
        path = self.server.hub.catalog.resolve(repo, rel)
        if path is None or not path.is_file():
            return self._error(404, f"file {rel} not found in {repo_id}", body)
        size = path.stat().st_size
        try:
            span = byte_range(self.headers.get("Range"), size)
        except _Unsatisfiable:
            return self._send(416, {"Content-Range": f"bytes */{size}"}, b"", body)
        start, end = span if span else (0, size - 1)
        self.send_response(206 if span else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        if span:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if body and size:
            try:
                self._stream(path, start, end)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away; it resumes with a Range next time

    def _stream(self, path: Path, start: int, end: int) -> None:
        rate = self.server.hub.rate
        block = _CHUNK if not rate else max(1024, min(_CHUNK, rate // 20))
        began, sent, remaining = time.monotonic(), 0, end - start + 1
        with open(path, "rb") as f:
            f.seek(start)
            while remaining > 0:
                data = f.read(min(block, remaining))
                if not data:
                    break
                self.wfile.write(data)
                sent += len(data)
                remaining -= len(data)
                if rate:
                    delay = began + sent / rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)


# --------------------------------------------------------------------------- serve


@dataclass(frozen=True)
class Hub:
    """A running stand-in hub: pass ``endpoint`` to the client."""

    endpoint: str
    root: Path
    port: int


def commit_of(root: Path, kind: str, repo_id: str) -> str:
    """The commit id this stand-in serves for ``kind`` (models|datasets) ``owner/name``:
    what a manifest entry's ``revision`` pins."""
    owner, name = repo_id.split("/", 1)
    catalog = Catalog(Path(root))
    repo = catalog.repo(kind, owner, name)
    if repo is None:
        raise KeyError(f"{kind}/{repo_id} is not under {root}")
    return catalog.commit(repo)


def read_requests(root: Path) -> list[dict[str, Any]]:
    """The request log of a hub served from ``root``, oldest first."""
    log = root / REQUEST_LOG
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@contextmanager
def serve(root: Path, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
          rate: int | None = None, revision: str = DEFAULT_REVISION) -> Iterator[Hub]:
    """Serve the repositories under ``root`` until the block ends.

    ``port=0`` picks a free port. ``token`` makes every repository request need it;
    ``rate`` caps each response at that many bytes per second.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    server = _Server((host, port), _Handler)
    server.hub = _HubState(Catalog(root, revision), token, rate, root / REQUEST_LOG,
                           threading.Lock())
    bound = server.server_address[1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="a3rl-hub", daemon=True)
    thread.start()
    try:
        yield Hub(endpoint=f"http://{shown}:{bound}", root=root, port=bound)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --------------------------------------------------------------------------- models

# The published configs (huggingface.co/Qwen/<name>/config.json, same on ModelScope):
# the parallel-plan checker reads layer, head and expert counts from here.
QWEN3_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-235B-A22B": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "decoder_sparse_step": 1,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "max_position_embeddings": 40960,
        "max_window_layers": 94,
        "mlp_only_layers": [],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": 1536,
        "norm_topk_prob": True,
        "num_attention_heads": 64,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 94,
        "num_key_value_heads": 4,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    "Qwen/Qwen3-32B": {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "initializer_range": 0.02,
        "intermediate_size": 25600,
        "max_position_embeddings": 40960,
        "max_window_layers": 64,
        "model_type": "qwen3",
        "num_attention_heads": 64,
        "num_hidden_layers": 64,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
}
SHARDS = {"Qwen/Qwen3-235B-A22B": 3, "Qwen/Qwen3-32B": 2}
# Served as a real, loadable tiny random Qwen3 (a3rl.sim.tiny_qwen3) in place of the
# published one: the simulator's real verl trainer loads it. The MoE repository keeps the
# published config with placeholder tensors (only the stand-in converter reads it).
TINY_REPO = "Qwen/Qwen3-32B"
_TINY = 32  # width of the stand-in tensors
_SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
_MERGES = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "e r", "Ġt he"]
_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def write_models(root: Path, shard_bytes: int | None = None) -> dict[str, Path]:
    """Write the STAND-IN Qwen3 model repositories under ``root/models``; id -> folder.

    Real configs, a tiny byte-level BPE tokenizer and valid safetensors shards of tiny
    tensors (a few hundred KB per model). ``shard_bytes`` pads the first shard of each
    model to about that size, for tests that need a transfer long enough to interrupt.
    Deterministic: a file whose bytes would not change is left alone, mtime included.
    """
    out: dict[str, Path] = {}
    for repo_id, config in QWEN3_CONFIGS.items():
        folder = Path(root) / "models" / repo_id
        if repo_id == TINY_REPO:
            files = _tiny_files(shard_bytes)
        else:
            files = _model_files(repo_id, config, SHARDS[repo_id], shard_bytes)
        for rel, data in files.items():
            _write_if_changed(folder / rel, data)
        out[repo_id] = folder
    return out


def _tiny_files(shard_bytes: int | None) -> dict[str, bytes]:
    """The tiny random Qwen3 (a3rl.sim.tiny_qwen3), from the machine's cache unless padded."""
    if shard_bytes:
        return tiny_qwen3.files(shard_bytes)
    folder = tiny_qwen3.ensure_cached(machine_cache_dir() / "sim-tiny-qwen3")
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".complete"}


def _model_files(repo_id: str, config: dict[str, Any], shards: int,
                 shard_bytes: int | None) -> dict[str, bytes]:
    files = {
        "README.md": f"# {repo_id}\n\n{NOTE}: the config is the published one, the "
                     "tokenizer and the weights are tiny placeholders.\n".encode(),
        "configuration.json": _json({"framework": "pytorch", "task": "text-generation",
                                     "allow_remote": True, "_a3rl_standin": True}),
        "config.json": _json({**config, "_a3rl_standin": True}),
        "generation_config.json": _json({
            "bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
            "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
            "transformers_version": "4.51.0", "_a3rl_standin": True}),
        **_tokenizer_files(),
    }
    # Tensors named as in the real checkpoints (one attention weight and one norm per
    # layer stand for the rest), spread over the shards in layer order.
    layers = config["num_hidden_layers"]
    names: list[list[tuple[str, str, list[int]]]] = [[] for _ in range(shards)]
    names[0].append(("model.embed_tokens.weight", "BF16", [256, _TINY]))
    for i in range(layers):
        shard = i * shards // layers
        names[shard].append((f"model.layers.{i}.input_layernorm.weight", "BF16", [_TINY]))
        names[shard].append((f"model.layers.{i}.self_attn.q_proj.weight", "BF16",
                             [_TINY, _TINY]))
    names[-1].append(("model.norm.weight", "BF16", [_TINY]))
    names[-1].append(("lm_head.weight", "BF16", [256, _TINY]))
    weight_map: dict[str, str] = {}
    total = 0
    for n, tensors in enumerate(names, start=1):
        fname = f"model-{n:05d}-of-{shards:05d}.safetensors"
        blobs = [(name, dtype, shape, _bf16(f"{repo_id}/{name}", _count(shape)))
                 for name, dtype, shape in tensors]
        if n == 1 and shard_bytes:
            pad = max(0, shard_bytes - sum(len(b[3]) for b in blobs))
            blobs.append(("a3rl_standin.padding", "U8", [pad],
                          hashlib.shake_256(f"{repo_id}/padding".encode()).digest(pad)))
        files[fname] = _safetensors(blobs, {"format": "pt", "a3rl_standin": NOTE})
        for name, _dtype, _shape, data in blobs:
            weight_map[name] = fname
            total += len(data)
    files["model.safetensors.index.json"] = _json({
        "metadata": {"total_size": total},
        "weight_map": dict(sorted(weight_map.items())),
    })
    return files


def _count(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _bf16(seed: str, count: int) -> bytes:
    """``count`` small bfloat16 values in [-1/8, 1/8), the same for the same seed."""
    raw = hashlib.shake_256(seed.encode()).digest(count)
    out = bytearray()
    for b in raw:
        as_f32 = struct.pack("<f", (b - 128) / 1024)
        out += as_f32[2:]  # bfloat16 is the top half of a little-endian float32
    return bytes(out)


def _safetensors(tensors: list[tuple[str, str, list[int], bytes]],
                 metadata: dict[str, str]) -> bytes:
    """The safetensors format: u64 header length, JSON header, then the tensor bytes."""
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw + b"".join(t[3] for t in tensors)


def _tokenizer_files() -> dict[str, bytes]:
    return tiny_qwen3.qwen_tokenizer_files(_MERGES, _SPECIAL, _CHAT_TEMPLATE, 131072)


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Write atomically unless the bytes are already there; True if written.

    A hub may be serving the folder: readers see the old file or the new one, never half.
    """
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True


# --------------------------------------------------------------------------- cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m a3rl.sim.hub",
        description="STAND-IN ModelScope hub: serve <root>/models and <root>/datasets. "
                    "Prints the endpoint on the first line, serves until killed.")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token-file", type=Path, help="require the token in this file")
    parser.add_argument("--rate", type=int, help="bytes per second per response")
    parser.add_argument("--revision", default=DEFAULT_REVISION)
    args = parser.parse_args(argv)
    token = args.token_file.read_text().strip() if args.token_file else None
    # SIGTERM ends the with-block, so the socket is closed before exit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with serve(args.root, args.host, args.port, token, args.rate, args.revision) as hub:
        print(hub.endpoint, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
