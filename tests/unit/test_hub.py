"""The STAND-IN ModelScope hub (``a3rl.sim.hub``) against the real ModelScope client.

The roles download weights and datasets with modelscope's ``snapshot_download``; these
tests run that client (modelscope 1.40.2 / modelscope-hub 0.5.1, unmodified) against the
stand-in and check what the roles rely on: whole repositories and pattern subsets arrive
byte for byte, datasets too, an unknown repository and a missing token fail clearly, and a
transfer cut by the hub dying resumes with a ``Range`` request instead of starting over.

The client runs in a subprocess with HOME and MODELSCOPE_CACHE under tmp_path: it reads
its settings from the environment at import time and keeps a process-wide config, so a
fresh process per call is the only way to give each call its own state.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from a3rl.node import artifacts
from a3rl.sim import hub

MOE, DENSE = "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-32B"
TOKENIZER_ETC = ["config.json", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "vocab.json"]
DATASET = "a3rl/gsm8k-mini"
DATASET_FILES = {
    "README.md": b"# gsm8k-mini\n\nSTAND-IN dataset made by a3rl's tests.\n",
    "dataset_infos.json": b'{"default": {"splits": {"train": {"num_examples": 2}}}}\n',
    "data/train-00000-of-00001.parquet": b"PAR1" + bytes(range(256)) * 8 + b"PAR1",
    "data/test-00000-of-00001.parquet": b"PAR1" + bytes(range(255, -1, -1)) * 4 + b"PAR1",
    "data/.keep": b"",
}
BIG = 8 << 20        # the shard a resume test interrupts
RATE = 2 << 20       # bytes per second while it is being interrupted

CLIENT = """
import json, sys
from modelscope import dataset_snapshot_download, snapshot_download
call = json.loads(sys.argv[1])
fn = dataset_snapshot_download if call.pop("dataset", False) else snapshot_download
try:
    print(json.dumps({"path": fn(**call)}))
except Exception as exc:
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    print(json.dumps({"error": kind, "message": str(exc)}))
    sys.exit(3)
"""


# --------------------------------------------------------------------------- helpers


def client_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The caller's environment minus ModelScope settings and proxies, home in tmp."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MODELSCOPE") and not k.lower().endswith("_proxy")}
    env.update(HOME=str(tmp / "home"), MODELSCOPE_CACHE=str(tmp / "cache"),
               NO_PROXY="127.0.0.1,localhost", **extra)
    return env


def start_fetch(tmp: Path, env: dict[str, str] | None = None, **call) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLIENT, json.dumps(call)],
                            env=client_env(tmp, **(env or {})), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 60) -> dict:
    out, err = proc.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    assert lines, f"client printed nothing (rc={proc.returncode}): {err[-2000:]}"
    return json.loads(lines[-1])


def fetch(tmp: Path, env: dict[str, str] | None = None, **call) -> dict:
    """Run the real client once: {"path": ...} or {"error": type, "message": ...}."""
    return finish(start_fetch(tmp, env, **call))


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def downloads(root: Path) -> list[dict]:
    """The file requests in the hub's log."""
    return [r for r in hub.read_requests(root) if r["path"].endswith("/repo")]


@contextmanager
def hub_process(root: Path, port: int = 0, rate: int | None = None,
                ) -> Iterator[tuple[subprocess.Popen, str]]:
    """``python -m a3rl.sim.hub`` as its own process, so a test can SIGKILL it."""
    cmd = [sys.executable, "-m", "a3rl.sim.hub", "--root", str(root), "--port", str(port)]
    if rate:
        cmd += ["--rate", str(rate)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:"), f"hub did not start: {endpoint!r}"
        yield proc, endpoint
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def wait_for_size(path: Path, size: int, client: subprocess.Popen,
                  timeout: float = 20) -> int:
    """Wait until the client's partial file holds ``size`` bytes; return what it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        have = path.stat().st_size if path.exists() else 0
        if have >= size:
            return have
        assert client.poll() is None, f"client ended early: {finish(client)}"
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {size} bytes")


def read_safetensors(path: Path) -> tuple[dict, int]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), len(raw) - 8 - n


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "hub"
    hub.write_models(root)
    for rel, data in DATASET_FILES.items():
        path = root / "datasets" / DATASET / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


@pytest.fixture
def served(root: Path) -> Iterator[hub.Hub]:
    with hub.serve(root) as h:
        yield h


# --------------------------------------------------------------------------- models


def test_stand_in_models_carry_the_qwen3_shapes_and_valid_shards(tmp_path: Path) -> None:
    repos = hub.write_models(tmp_path / "a")
    assert sorted(repos) == [MOE, DENSE]
    # The MoE keeps the published shape; the dense one is the tiny random Qwen3 the
    # simulator's real verl trains (a3rl.sim.tiny_qwen3).
    for repo_id, layers, arch, kind, heads, vocab in [
            (MOE, 94, "Qwen3MoeForCausalLM", "qwen3_moe", 64, 151936),
            (DENSE, 2, "Qwen3ForCausalLM", "qwen3", 4, 384)]:
        folder = repos[repo_id]
        config = json.loads((folder / "config.json").read_text())
        assert (config["architectures"], config["model_type"]) == ([arch], kind)
        assert config["num_hidden_layers"] == layers and config["_a3rl_standin"] is True
        assert (config["num_attention_heads"], config["vocab_size"]) == (heads, vocab)
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        n = hub.SHARDS[repo_id]
        assert shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
        total, names = 0, set()
        for shard in shards:
            header, data_len = read_safetensors(folder / shard)
            assert "a3rl_standin" in header.pop("__metadata__")
            spans = sorted(t["data_offsets"] for t in header.values())
            assert spans[0][0] == 0 and spans[-1][1] == data_len
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
            total += data_len
            names |= {k for k, v in index["weight_map"].items() if v == shard}
            assert set(header) == {k for k, v in index["weight_map"].items() if v == shard}
        assert index["metadata"]["total_size"] == total
        assert {f"model.layers.{i}.self_attn.q_proj.weight" for i in range(layers)} <= names
    moe = json.loads((repos[MOE] / "config.json").read_text())
    assert (moe["num_experts"], moe["num_experts_per_tok"], moe["num_key_value_heads"]) \
        == (128, 8, 4)
    assert sum(p.stat().st_size for p in (tmp_path / "a").rglob("*")) < 1 << 20


def test_write_models_is_deterministic_and_leaves_identical_files_alone(tmp_path: Path) -> None:
    hub.write_models(tmp_path / "a")
    hub.write_models(tmp_path / "b")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    for path in (tmp_path / "a").rglob("*"):
        if path.is_file():
            os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    hub.write_models(tmp_path / "a")
    assert {p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("*") if p.is_file()} \
        == {1_000_000_000_000_000_000}
    big = hub.write_models(tmp_path / "a", shard_bytes=1 << 20)[DENSE]
    header, _ = read_safetensors(big / "model-00001-of-00002.safetensors")
    assert (big / "model-00001-of-00002.safetensors").stat().st_size >= 1 << 20
    assert "a3rl_standin.padding" in header


# --------------------------------------------------------------------------- the client


def test_snapshot_download_fetches_every_file_byte_for_byte(
        tmp_path: Path, root: Path, served: hub.Hub) -> None:
    out = tmp_path / "out"
    result = fetch(tmp_path, model_id=MOE, local_dir=str(out), endpoint=served.endpoint)
    assert result == {"path": str(out)}
    assert tree(out) == tree(root / "models" / MOE)
    listing = [r for r in hub.read_requests(root) if r["path"].endswith("/repo/files")]
    assert listing[0]["path"] == f"/api/v1/models/{MOE}/repo/files"
    assert listing[0]["query"] == {"Revision": "master", "Recursive": "True"}
    assert sorted(r["query"]["FilePath"] for r in downloads(root)) == sorted(tree(out))
    assert all(r["range"] is None for r in downloads(root))


def test_allow_patterns_fetch_only_those_files(
        tmp_path: Path, root: Path, served: hub.Hub) -> None:
    out = tmp_path / "out"
    result = fetch(tmp_path, model_id=DENSE, local_dir=str(out), endpoint=served.endpoint,
                   allow_patterns=TOKENIZER_ETC)
    assert result == {"path": str(out)}
    assert sorted(tree(out)) == sorted(TOKENIZER_ETC)
    assert sorted(r["query"]["FilePath"] for r in downloads(root)) == sorted(TOKENIZER_ETC)


def test_dataset_repos_download_with_the_endpoint_from_the_environment(
        tmp_path: Path, root: Path, served: hub.Hub) -> None:
    whole, part = tmp_path / "whole", tmp_path / "part"
    result = fetch(tmp_path, env={"MODELSCOPE_ENDPOINT": served.endpoint}, dataset=True,
                   dataset_id=DATASET, local_dir=str(whole))
    assert result == {"path": str(whole)}
    assert tree(whole) == DATASET_FILES
    result = fetch(tmp_path, model_id=DATASET, repo_type="dataset", local_dir=str(part),
                   allow_patterns=["data/*"], endpoint=served.endpoint)
    assert result == {"path": str(part)}
    assert sorted(tree(part)) == sorted(k for k in DATASET_FILES if k.startswith("data/"))
    listings = [r for r in hub.read_requests(root) if r["path"].endswith("/repo/tree")]
    assert [r["path"] for r in listings] == [f"/api/v1/datasets/{DATASET}/repo/tree"] * 2
    assert listings[0]["query"]["PageNumber"] == "1" and "Root" not in listings[0]["query"]
    assert listings[1]["query"]["Root"] == "data"


def test_a_revision_is_the_branch_or_the_commit_and_nothing_else(
        tmp_path: Path, root: Path, served: hub.Hub) -> None:
    commit = hub.commit_of(root, "models", DENSE)
    pinned = fetch(tmp_path, model_id=DENSE, local_dir=str(tmp_path / "a"),
                   endpoint=served.endpoint, allow_patterns=TOKENIZER_ETC, revision=commit)
    assert pinned == {"path": str(tmp_path / "a")}
    other = fetch(tmp_path, model_id=DENSE, local_dir=str(tmp_path / "b"),
                  endpoint=served.endpoint, allow_patterns=TOKENIZER_ETC, revision="0" * 40)
    assert "404" in other["message"], other
    asked = [r["query"].get("Revision") for r in hub.read_requests(root)
             if r["path"].endswith("/repo/files")]
    assert asked == [commit, "0" * 40]


def test_a_hub_entry_is_fetched_at_its_pinned_commit_and_only_that(
        tmp_path: Path, root: Path, served: hub.Hub, monkeypatch) -> None:
    """No revision, or a branch, is refused before the hub is asked; the pinned commit is
    what the client asks for and the store records; a store holding another revision is
    not fetched over."""
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "cache"))
    store = str(tmp_path / "store")
    spec = {"kind": "modelscope", "id": DENSE, "dest": "models/d", "endpoint": served.endpoint,
            "allow_patterns": TOKENIZER_ETC}
    with pytest.raises(artifacts.ArtifactError, match=r"artifact d \(modelscope Qwen/Qwen3-32B\): "
                       r"`revision` is not set.*modelscope.cn/models/Qwen/Qwen3-32B.*"
                       r"a3rl_artifact_overrides: \{d: \{revision: <commit>\}\}"):
        artifacts.ensure(store, "d", spec)
    with pytest.raises(artifacts.ArtifactError, match="`revision` is 'master', not a commit id"):
        artifacts.ensure(store, "d", {**spec, "revision": "master"})
    assert hub.read_requests(root) == []
    commit = hub.commit_of(root, "models", DENSE)
    got = artifacts.ensure(store, "d", {**spec, "revision": commit})
    assert got["action"] == "fetched" and got["entry"]["revision"] == commit
    assert {r["query"].get("Revision") for r in hub.read_requests(root)
            if r["path"].startswith("/api/v1/models/")} == {commit}
    asked = len(hub.read_requests(root))
    with pytest.raises(artifacts.ArtifactError, match=f"holds {DENSE} at revision {commit}, the "
                       f"manifest asks for {'1' * 40}; nothing was fetched. Fix: remove "):
        artifacts.ensure(store, "d", {**spec, "revision": "1" * 40})
    # A snapshot fetched before revisions were pinned is refused the same way.
    manifest = artifacts.read_manifest(store)
    del manifest["artifacts"]["d"]["revision"]
    manifest["artifacts"]["d"]["spec_digest"] = "unpinned"
    artifacts.write_manifest(store, manifest)
    with pytest.raises(artifacts.ArtifactError, match="at revision unknown"):
        artifacts.ensure(store, "d", {**spec, "revision": commit})
    assert len(hub.read_requests(root)) == asked


def test_an_unknown_repository_is_a_clear_not_found(
        tmp_path: Path, root: Path, served: hub.Hub) -> None:
    result = fetch(tmp_path, model_id="Qwen/Qwen3-Nope", local_dir=str(tmp_path / "out"),
                   endpoint=served.endpoint)
    # modelscope's compat layer turns the hub's NotExistError into requests' HTTPError.
    assert result["error"] == "requests.exceptions.HTTPError"
    assert result["message"].startswith("[E3020] [404] Model does not exist.")
    assert "/api/v1/models/Qwen/Qwen3-Nope/repo/files" in result["message"]
    result = fetch(tmp_path, dataset=True, dataset_id="a3rl/nope",
                   local_dir=str(tmp_path / "out"), endpoint=served.endpoint)
    assert result["message"].startswith("[E3020] [404] Dataset does not exist.")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_token_is_required_when_set_and_the_clients_token_reaches_the_hub(
        tmp_path: Path, root: Path) -> None:
    with hub.serve(root, token="s3cret") as served:
        out = tmp_path / "out"
        call = dict(model_id=DENSE, local_dir=str(out), endpoint=served.endpoint,
                    allow_patterns=["config.json"])
        for token in (None, "wrong"):
            result = fetch(tmp_path, **call, token=token)
            assert result["error"] == "requests.exceptions.HTTPError"
            assert result["message"].startswith("[E3001] [401] Unauthorized")
        assert not (out / "config.json").exists()
        assert fetch(tmp_path, **call, token="s3cret") == {"path": str(out)}
    assert (out / "config.json").read_bytes() == (root / "models" / DENSE / "config.json") \
        .read_bytes()
    log = hub.read_requests(root)
    # No token: nothing presented. With one: a Bearer header and the m_session_id cookie.
    assert (log[0]["auth"], log[0]["status"]) == ([], 401)
    assert (log[-1]["auth"], log[-1]["status"]) == (["bearer", "cookie"], 200)


def test_file_requests_honour_single_byte_ranges(root: Path, served: hub.Hub) -> None:
    rel = "model-00001-of-00002.safetensors"
    data = (root / "models" / DENSE / rel).read_bytes()
    url = f"{served.endpoint}/api/v1/models/{DENSE}/repo?Revision=master&FilePath={rel}"

    def get(range_: str | None = None, method: str = "GET"):
        req = urllib.request.Request(url, method=method,
                                     headers={"Range": range_} if range_ else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    status, headers, body = get()
    assert (status, body, headers["Accept-Ranges"]) == (200, data, "bytes")
    assert "Content-Range" not in headers
    status, headers, body = get("bytes=1000-")
    assert (status, body) == (206, data[1000:])
    assert headers["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"
    assert headers["Content-Length"] == str(len(data) - 1000)
    assert get("bytes=10-19")[::2] == (206, data[10:20])
    assert get("bytes=-5")[::2] == (206, data[-5:])
    status, headers, body = get(f"bytes={len(data)}-")
    assert (status, headers["Content-Range"], body) == (416, f"bytes */{len(data)}", b"")
    status, headers, body = get(method="HEAD")
    assert (status, headers["Content-Length"], body) == (200, str(len(data)), b"")
    assert [(r["method"], r["range"], r["status"]) for r in downloads(root)] == [
        ("GET", None, 200), ("GET", "bytes=1000-", 206), ("GET", "bytes=10-19", 206),
        ("GET", "bytes=-5", 206), ("GET", f"bytes={len(data)}-", 416), ("HEAD", None, 200)]
    missing = url.replace(rel, "nope.bin")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(missing, timeout=10)
    assert err.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url.replace("Revision=master", "Revision=v9"), timeout=10)
    assert err.value.code == 404


# --------------------------------------------------------------------------- resume

# Where the client keeps a partial file: modelscope_hub/_download.py, _incomplete_path():
# "<target>.incomplete" next to the target in local_dir. _download_with_resume() asks for
# "Range: bytes=<size of that file>-" and appends the 206 body to it.


def test_a_transfer_cut_by_the_hub_dying_resumes_when_it_comes_back(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    source = hub.write_models(root, shard_bytes=BIG)[DENSE] / "model-00001-of-00002.safetensors"
    out = tmp_path / "out"
    partial = out / (source.name + ".incomplete")
    client = None
    try:
        with hub_process(root, rate=RATE) as (first, endpoint):
            client = start_fetch(tmp_path, model_id=DENSE, local_dir=str(out),
                                 allow_patterns=[source.name], endpoint=endpoint)
            seen = wait_for_size(partial, 1 << 20, client)
            first.kill()
        # Same port and root, full speed: the client's own retry (after 0 s, then 2 s)
        # finds the hub again and resumes from its partial file.
        with hub_process(root, port=urlsplit(endpoint).port) as (_, again):
            assert again == endpoint
            result = finish(client)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
    assert result == {"path": str(out)}
    assert (out / source.name).read_bytes() == source.read_bytes()
    assert not partial.exists()
    asked = [(r["range"], r["status"]) for r in downloads(root)]
    assert len(asked) == 2 and asked[0] == (None, 200) and asked[1][1] == 206
    start = int(asked[1][0].removeprefix("bytes=").removesuffix("-"))
    assert seen <= start < BIG


def test_downloading_again_after_a_failure_resumes_the_partial_file(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    source = hub.write_models(root, shard_bytes=BIG)[DENSE] / "model-00001-of-00002.safetensors"
    out = tmp_path / "out"
    partial = out / (source.name + ".incomplete")
    call = dict(model_id=DENSE, local_dir=str(out), allow_patterns=[source.name])
    client = None
    try:
        with hub_process(root, rate=RATE) as (first, endpoint):
            # No retries, so the client gives up at once, as a failed play would.
            client = start_fetch(tmp_path, env={"MODELSCOPE_DOWNLOAD_MAX_RETRIES": "0"},
                                 **call, endpoint=endpoint)
            wait_for_size(partial, 1 << 20, client)
            first.kill()
            failed = finish(client)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
    assert failed["error"] == "modelscope_hub.errors.FileDownloadError"
    assert source.name in failed["message"]
    kept = partial.stat().st_size
    assert 0 < kept < BIG and not (out / source.name).exists()
    with hub_process(root, port=urlsplit(endpoint).port) as (_, again):
        assert fetch(tmp_path, **call, endpoint=again) == {"path": str(out)}
    assert (out / source.name).read_bytes() == source.read_bytes()
    assert not partial.exists()
    assert [(r["range"], r["status"]) for r in downloads(root)] \
        == [(None, 200), (f"bytes={kept}-", 206)]
