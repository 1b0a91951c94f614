"""The artifact store and the node-side staging, with real git, a real HTTP server and
real files in temporary folders."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from a3rl.node import artifacts, patch_series, purge, stage
from a3rl.paths import project_root
from a3rl.planning import manifest
from a3rl.sim import upstreams

from .conftest import run_module

IDENT = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_AUTHOR_DATE": "2020-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    "GIT_COMMITTER_DATE": "2020-01-01T00:00:00+0000",
}


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, **IDENT, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict:
    """A framework repo with a tag, a cherry-pick branch and a relative-URL submodule."""
    root = tmp_path_factory.mktemp("up")
    sub = root / "sub-work"
    sub.mkdir()
    git("init", "-q", cwd=sub)
    write(sub, {"lib.c": "int x;\n"})
    git("add", ".", cwd=sub)
    git("commit", "-qm", "sub", cwd=sub)
    git("clone", "-q", "--bare", str(sub), str(root / "sub.git"))
    work = root / "fw-work"
    work.mkdir()
    git("init", "-q", cwd=work)
    write(
        work,
        {
            "pkg/__init__.py": "VERSION = 1\n",
            "pkg/core.py": "a = 1\nb = 2\n",
            "scripts/conv.py": "print('conv')\n",
            "conf/x.yaml": "k: 1\n",
            "conf/y.yaml": "k: 2\n",
            "conf/z.py": "z = 1\n",
        },
    )
    git("add", ".", cwd=work)
    git("commit", "-qm", "base", cwd=work)
    git(
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        "../sub.git",
        "third_party/sub",
        cwd=work,
    )
    # The superproject's .gitmodules must hold the relative URL, as upstreams do.
    git("commit", "-qm", "submodule", cwd=work)
    git("tag", "v1.0", cwd=work)
    git("checkout", "-qb", "pr-1", cwd=work)
    write(work, {"pkg/core.py": "a = 1\nb = 3\n"})
    git("commit", "-qam", "fix b", cwd=work)
    pick = git("rev-parse", "HEAD", cwd=work)
    git("checkout", "-q", "main", cwd=work)
    git("clone", "-q", "--bare", str(work), str(root / "fw.git"))
    # The bare clone has the branch; the submodule URL ../sub.git resolves next to it.
    return {
        "url": str(root / "fw.git"),
        "pick": pick,
        "tag_commit": git("rev-parse", "v1.0", cwd=work),
        "sub_commit": git("rev-parse", "HEAD", cwd=sub),
    }


def git_spec(up: dict, **extra) -> dict:
    return {
        "kind": "git",
        "group": "frameworks",
        "url": up["url"],
        "ref": "v1.0",
        "cherry_picks": [{"commit": up["pick"][:7], "fetch": "refs/heads/pr-1"}],
        "submodules": True,
        **extra,
    }


# ------------------------------------------------------------------------- git store


def test_git_bundle_pins_the_ref_with_its_cherry_pick_and_submodule(tmp_path, upstream):
    store = str(tmp_path / "store")
    r = artifacts.ensure(store, "fw", git_spec(upstream))
    assert r["changed"] and r["action"] == "fetched"
    entry = r["entry"]
    assert entry["upstream_commit"] == upstream["tag_commit"]
    assert entry["commit"] != upstream["tag_commit"]
    paths = [f["path"] for f in entry["files"]]
    assert paths == ["git/fw.bundle", "git/fw--third_party_sub.bundle"]
    assert entry["files"][1]["commit"] == upstream["sub_commit"]
    # The pinned commit has the cherry-pick's change on top of the tag.
    clone = tmp_path / "clone"
    git("init", "-q", str(clone))
    git("fetch", "-q", str(Path(store) / "git/fw.bundle"), "refs/a3rl/pinned", cwd=clone)
    git("checkout", "-q", entry["commit"], cwd=clone)
    assert (clone / "pkg/core.py").read_text() == "a = 1\nb = 3\n"
    assert git("rev-parse", "HEAD^", cwd=clone) == upstream["tag_commit"]
    recorded = json.loads((Path(store) / "manifest.json").read_text())["artifacts"]["fw"]
    assert recorded["files"][0]["sha256"] == artifacts.sha256_file(
        str(Path(store) / "git/fw.bundle")
    )


def test_pinned_commit_is_the_same_in_every_store(tmp_path, upstream):
    a = artifacts.ensure(str(tmp_path / "a"), "fw", git_spec(upstream))["entry"]["commit"]
    b = artifacts.ensure(str(tmp_path / "b"), "fw", git_spec(upstream))["entry"]["commit"]
    assert a == b


def test_rerun_uses_no_network_and_changes_nothing(tmp_path, upstream):
    store = str(tmp_path / "store")
    artifacts.ensure(store, "fw", git_spec(upstream))
    before = (Path(store) / "manifest.json").read_bytes()
    mtime = (Path(store) / "git/fw.bundle").stat().st_mtime_ns
    # The upstream is unreachable now: any fetch would fail.
    url = Path(upstream["url"])
    url.rename(url.with_suffix(".away"))
    try:
        r = artifacts.ensure(store, "fw", git_spec(upstream))
    finally:
        url.with_suffix(".away").rename(url)
    assert not r["changed"] and r["action"] == "present"
    assert (Path(store) / "git/fw.bundle").stat().st_mtime_ns == mtime
    assert (Path(store) / "manifest.json").read_bytes() == before


def test_offline_store_never_fetches(tmp_path, upstream):
    store = str(tmp_path / "store")
    spec = git_spec(upstream)
    artifacts.ensure(store, "fw", spec)
    assert not artifacts.ensure(store, "fw", spec, offline=True)["changed"]
    with pytest.raises(artifacts.ArtifactError, match="offline store .* make the bundle again"):
        artifacts.ensure(store, "other", {**spec, "ref": "pr-1"}, offline=True)
    (Path(store) / "git/fw.bundle").write_bytes(b"damaged")
    with pytest.raises(artifacts.ArtifactError, match="fw: git/fw.bundle has 7 bytes"):
        artifacts.ensure(store, "fw", spec, offline=True)


def test_damaged_file_is_fetched_again_online(tmp_path, upstream):
    store = tmp_path / "store"
    spec = git_spec(upstream)
    artifacts.ensure(str(store), "fw", spec)
    bundle = store / "git/fw.bundle"
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 0xFF
    bundle.write_bytes(bytes(data))  # same size, new mtime: re-hashed
    r = artifacts.ensure(str(store), "fw", spec)
    assert r["changed"] and "recorded sha256" in r["reason"]


def test_moved_tag_is_refused(tmp_path, upstream):
    with pytest.raises(artifacts.ArtifactError, match="the ref moved upstream"):
        artifacts.ensure(str(tmp_path / "s"), "fw", git_spec(upstream, commit="0" * 40))


def test_unknown_ref_names_the_fix(tmp_path, upstream):
    with pytest.raises(
        artifacts.ArtifactError, match="'v9' is not a ref or commit .* correct the ref"
    ):
        artifacts.ensure(str(tmp_path / "s"), "fw", {**git_spec(upstream), "ref": "v9"})


def test_check_mode_fetches_nothing(tmp_path, upstream):
    store = tmp_path / "s"
    r = artifacts.ensure(str(store), "fw", git_spec(upstream), check=True)
    assert r["action"] == "would_fetch" and r["changed"]
    assert not (store / "manifest.json").exists() and not (store / "git").exists()
    # A store that does not exist yet is not created (nor its lock file) by a check.
    assert not store.exists()


def test_submodule_url_resolution():
    r = artifacts.resolve_relative_url
    assert (
        r("https://github.com/vllm-project/vllm-ascend.git", "../catlass.git")
        == "https://github.com/vllm-project/catlass.git"
    )
    assert r("/srv/up/vllm_ascend.git", "../sub.git") == "/srv/up/sub.git"
    assert r("/srv/up/a.git/", "./b") == "/srv/up/a.git/b"
    assert r("x", "https://gitee.com/a/b.git") == "https://gitee.com/a/b.git"


@pytest.mark.parametrize(
    "spec, needle",
    [
        ({"kind": "svn"}, "kind is 'svn'"),
        ({"kind": "http", "url": "http://x", "dest": "a"}, "`sha256` is not set"),
        ({"kind": "file", "dest": "../etc/passwd"}, "relative path inside the store"),
        (
            {"kind": "git", "url": "u", "ref": "r", "cherry_picks": [{"fetch": "x"}]},
            "needs `commit`",
        ),
        ({"kind": "http", "url": "u", "dest": "a", "sha256": "ABC"}, "64 lowercase hex"),
    ],
)
def test_manifest_entry_problems(spec, needle):
    assert any(needle in p for p in artifacts.validate("x", spec))


@pytest.mark.parametrize(
    "subdir, strip", [("llm_rl/qwen3", 3), ("/llm_rl/qwen3/", 3), ("", 1), (None, 1)]
)
def test_recipe_patches_strip_the_recipe_folder(subdir, strip):
    assert manifest.patch_strip({"subdir": subdir}) == strip


def test_wheelhouse_needs_its_requirements_source_in_the_same_run():
    m = {
        "recipe": {"kind": "git", "group": "recipe", "url": "u", "ref": "r"},
        "wheels": {
            "kind": "wheelhouse",
            "group": "python",
            "requirements": {"artifact": "recipe", "path": "requirements.txt"},
        },
    }
    assert manifest.artifact_names(m, ["python", "recipe"]) == ["recipe", "wheels"]
    assert any(
        "which this run does not fetch" in p
        for p in manifest.artifact_problems(m, manifest.artifact_names(m, ["python"]))
    )
    assert manifest.artifact_problems(m, ["recipe", "wheels"]) == []
    assert "not in the manifest" in manifest.artifact_problems(m, ["nope"])[0]


# ------------------------------------------------------------------------ wheelhouse


@pytest.fixture()
def standin_index(tmp_path, monkeypatch):
    """The simulator's stand-in packages in a folder, and pip kept off every index."""
    folder = tmp_path / "pypi"
    upstreams._build_index(folder)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return folder


def _wheelhouse(folder: Path, **extra) -> dict:
    sdist, version = upstreams.SDIST_ONLY
    return {
        "kind": "wheelhouse",
        "requirements": [f"{sdist}=={version}", f"{upstreams.RANGED}[default]"],
        "platforms": ["manylinux2014_x86_64", "any"],
        "python_version": "3.11",
        "find_links": [str(folder)],
        **extra,
    }


def _members(store: Path) -> list[str]:
    import tarfile

    with tarfile.open(store / "python/wheels.tar") as tar:
        return sorted(tar.getnames())


def test_wheelhouse_builds_sdist_only_pins_and_keeps_to_the_image_range(tmp_path, standin_index):
    store = tmp_path / "store"
    spec = _wheelhouse(
        standin_index,
        build_from_sdist=[upstreams.SDIST_ONLY[0]],
        constraints=["ray>=2.47.1,<=2.48.0", upstreams.RANGED_CONSTRAINT],
    )
    artifacts.ensure(str(store), "wheels", spec)
    assert _members(store) == [
        "a3rl_standin_ray-2.48.0-py3-none-any.whl",  # not the newest, 2.58.0
        "a3rl_standin_sdist_only-2.10-py3-none-any.whl",  # built from its sdist
        "constraints.txt",
        "requirements.txt",
    ]
    # An unconstrained open line takes the newest: the constraint is what keeps it.
    other = tmp_path / "other"
    artifacts.ensure(str(other), "wheels", {**spec, "constraints": []})
    assert "a3rl_standin_ray-2.58.0-py3-none-any.whl" in _members(other)


def test_sdist_only_pin_not_listed_names_the_fix(tmp_path, standin_index):
    with pytest.raises(artifacts.ArtifactError, match="build_from_sdist list"):
        artifacts.ensure(str(tmp_path / "store"), "wheels", _wheelhouse(standin_index))


def test_build_from_sdist_must_name_a_pin(tmp_path, standin_index):
    spec = _wheelhouse(standin_index, build_from_sdist=["pylatexenc"])
    with pytest.raises(artifacts.ArtifactError, match="pylatexenc, which the requirements do not"):
        artifacts.ensure(str(tmp_path / "store"), "wheels", spec)


def test_requirement_pins_and_constraint_extras():
    text = (
        "pylatexenc==2.10\nzmq == 0.0.0 # source only\nray[default]\n"
        "Py_Foo.Bar==1; python_version>'3'\n"
    )
    assert artifacts.requirement_pins(text) == {
        "pylatexenc": "2.10", "zmq": "0.0.0", "py-foo-bar": "1"}
    spec = {"kind": "wheelhouse", "requirements": ["ray[default]"],
            "constraints": ["ray[default]<=2.48.0"]}
    assert any("names extras" in p for p in artifacts.validate("w", spec))
    assert any("list of strings" in p
               for p in artifacts.validate("w", {**spec, "constraints": "ray<3"}))


# ------------------------------------------------------------------------------ http


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture()
def http_files(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    log: list[tuple[str, str | None]] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802 - http.server's naming
            rng = self.headers.get("Range")
            log.append((self.path, rng))
            path = root / self.path.lstrip("/")
            if rng and path.is_file():
                start = int(rng.split("=")[1].rstrip("-"))
                data = path.read_bytes()[start:]
                self.send_response(206)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            super().do_GET()

    srv = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{srv.server_address[1]}", log
    srv.shutdown()


def test_http_download_resumes_a_partial_file(tmp_path, http_files):
    root, base, log = http_files
    payload = os.urandom(300_000)
    (root / "big.bin").write_bytes(payload)
    store = tmp_path / "store"
    (store / "files").mkdir(parents=True)
    (store / "files/big.bin.part").write_bytes(payload[:100_000])  # an interrupted run
    spec = {
        "kind": "http",
        "url": f"{base}/big.bin",
        "dest": "files/big.bin",
        "sha256": artifacts.sha256_file(str(root / "big.bin")),
    }
    r = artifacts.ensure(str(store), "big", spec)
    assert r["changed"]
    assert (store / "files/big.bin").read_bytes() == payload
    assert log == [("/big.bin", "bytes=100000-")]
    assert not (store / "files/big.bin.part").exists()
    log.clear()
    assert not artifacts.ensure(str(store), "big", spec)["changed"]
    assert log == []


def test_http_checksum_mismatch_is_refused_and_discarded(tmp_path, http_files):
    root, base, _ = http_files
    (root / "f.bin").write_bytes(b"not the pinned file")
    store = tmp_path / "store"
    spec = {"kind": "http", "url": f"{base}/f.bin", "dest": "f.bin", "sha256": "0" * 64}
    with pytest.raises(artifacts.ArtifactError, match="discarded"):
        artifacts.ensure(str(store), "f", spec)
    assert not (store / "f.bin").exists() and not (store / "f.bin.part").exists()
    assert "f" not in artifacts.read_manifest(str(store))["artifacts"]


@pytest.fixture()
def http_strict(tmp_path):
    """A server that asks for Basic credentials (user:s3cret) and, like many a plain file
    server, ignores Range: it answers 200 with the whole file."""
    root = tmp_path / "www2"
    root.mkdir()
    seen: list[dict[str, str | None]] = []
    want = "Basic " + base64.b64encode(b"user:s3cret").decode()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802 - http.server's naming
            seen.append({"path": self.path, "range": self.headers.get("Range"),
                         "auth": self.headers.get("Authorization")})
            if self.headers.get("Authorization") != want:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="a3rl"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

    srv = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield root, srv.server_address[1], seen
    srv.shutdown()


def test_a_server_that_ignores_range_gets_the_file_written_anew_not_appended(tmp_path, http_strict):
    root, port, seen = http_strict
    payload = os.urandom(200_000)
    (root / "big.bin").write_bytes(payload)
    store = tmp_path / "store"
    store.mkdir()
    (store / "big.bin.part").write_bytes(payload[:50_000])
    spec = {"kind": "http", "url": f"http://user:s3cret@127.0.0.1:{port}/big.bin",
            "dest": "big.bin", "sha256": artifacts.sha256_file(str(root / "big.bin"))}
    assert artifacts.ensure(str(store), "big", spec)["changed"]
    assert seen[-1]["range"] == "bytes=50000-"  # asked to resume, answered with 200
    assert (store / "big.bin").read_bytes() == payload


def test_a_credential_in_an_http_url_is_sent_and_never_written_out(tmp_path, http_strict):
    root, port, seen = http_strict
    (root / "f.bin").write_bytes(b"payload")
    store = tmp_path / "store"
    url = f"http://user:s3cret@127.0.0.1:{port}/f.bin"
    spec = {"kind": "http", "url": url, "dest": "f.bin",
            "sha256": artifacts.sha256_file(str(root / "f.bin"))}
    lines: list[str] = []
    r = artifacts.ensure(str(store), "f", spec, log=lines.append)
    assert r["changed"] and (store / "f.bin").read_bytes() == b"payload"
    assert lines and f"http://***@127.0.0.1:{port}/f.bin" in " ".join(lines)
    assert "s3cret" not in json.dumps([lines, r]) + (store / "manifest.json").read_text()
    # Refusals name the URL too: a wrong sha256, a wrong password, an unreachable git host.
    for bad, why in (({**spec, "dest": "g.bin", "sha256": "0" * 64}, "discarded"),
                     ({**spec, "dest": "h.bin", "url": url.replace("s3cret", "s3cret-not")},
                      "HTTP 401"),
                     ({"kind": "git", "url": "https://user:s3cret@127.0.0.1:1/x.git",
                       "ref": "v1"}, "cannot fetch")):
        lines.clear()
        with pytest.raises(artifacts.ArtifactError, match=why) as e:
            artifacts.ensure(str(store), "bad", bad, log=lines.append)
        assert "s3cret" not in str(e.value) + " ".join(lines), (str(e.value), lines)
        assert "://***@127.0.0.1" in str(e.value)
    assert artifacts.url_credentials(spec) == ["user:s3cret"]
    assert artifacts.redact(f"fatal: unable to access '{url}/': 401") == (
        f"fatal: unable to access 'http://***@127.0.0.1:{port}/f.bin/': 401")


def test_the_artifact_module_masks_a_url_credential_in_its_result(tmp_path, http_strict):
    # The module's arguments come back in its result (invocation) and the run's events.
    root, port, _ = http_strict
    (root / "f.bin").write_bytes(b"payload")
    spec = {"kind": "http", "url": f"http://user:s3cret@127.0.0.1:{port}/f.bin",
            "dest": "f.bin", "sha256": artifacts.sha256_file(str(root / "f.bin"))}
    got = run_module("a3rl_artifact", {"store": str(tmp_path / "s"), "name": "f", "spec": spec})
    assert got["changed"] and "s3cret" not in json.dumps(got), got
    assert got["invocation"]["module_args"]["spec"]["url"].startswith("http://********@")
    refused = {**spec, "sha256": "0" * 64}
    proc = subprocess.run(
        [str(Path(".venv/bin/ansible").resolve()), "localhost", "-m", "a3rl_artifact", "-a",
         json.dumps({"store": str(tmp_path / "r"), "name": "f", "spec": refused})],
        cwd=project_root(), capture_output=True, text=True,
        env=dict(os.environ, ANSIBLE_CONFIG=str(project_root() / "ansible.cfg"),
                 ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                 ANSIBLE_LOCALHOST_WARNING="0"))
    assert proc.returncode != 0 and "discarded" in proc.stdout, proc.stdout + proc.stderr
    assert "s3cret" not in proc.stdout + proc.stderr


def test_provided_file_is_copied_and_checked(tmp_path):
    src = tmp_path / "driver.run"
    src.write_bytes(b"driver")
    store = tmp_path / "store"
    good = {
        "kind": "file",
        "dest": "d.run",
        "path": str(src),
        "sha256": artifacts.sha256_file(str(src)),
    }
    assert artifacts.ensure(str(store), "drv", good)["changed"]
    with pytest.raises(artifacts.ArtifactError, match="put the file there"):
        artifacts.ensure(str(tmp_path / "s2"), "drv", {"kind": "file", "dest": "d.run"})
    with pytest.raises(artifacts.ArtifactError, match="has sha256 .* the manifest says"):
        artifacts.ensure(str(tmp_path / "s3"), "drv", {**good, "sha256": "1" * 64})


def test_provided_folder_is_copied_with_only_the_allowed_files(tmp_path):
    src = tmp_path / "Qwen3-32B"
    (src / "sub").mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "model-1.safetensors", "sub/x.json"):
        (src / name).write_text(name)
    (src / ".msc").write_text("hub client bookkeeping")
    store = tmp_path / "store"
    full = {"kind": "file", "dest": "models/m", "path": str(src)}
    got = artifacts.ensure(str(store), "m", full)["entry"]["files"]
    assert [f["path"] for f in got] == [
        "models/m/config.json", "models/m/model-1.safetensors", "models/m/sub/x.json",
        "models/m/tokenizer.json"]
    assert not artifacts.ensure(str(store), "m", full)["changed"]
    config = {**full, "dest": "models/c", "allow_patterns": ["config.json", "tokenizer.json"]}
    got = artifacts.ensure(str(store), "c", config)["entry"]["files"]
    assert [f["path"] for f in got] == ["models/c/config.json", "models/c/tokenizer.json"]
    assert not (store / "models/c/model-1.safetensors").exists()


def test_a_prune_stays_inside_the_entrys_folder_when_its_dest_moves(tmp_path):
    # The entry moves from raw/gsm8k to raw/gsm8k-v2; its old folder is now another
    # artifact's (it took the same dest). Its earlier record names those files, but they
    # are outside the entry's folder: not its to delete.
    src = tmp_path / "gsm8k"
    (src / "main").mkdir(parents=True)
    (src / "main/train.parquet").write_text("gsm8k")
    other = tmp_path / "other"
    (other / "main").mkdir(parents=True)
    (other / "main/train.parquet").write_text("another dataset")
    store = tmp_path / "store"
    spec = {"kind": "file", "dest": "raw/gsm8k", "path": str(src)}
    artifacts.ensure(str(store), "g", spec)
    (src / "main/train.parquet").unlink()
    (src / "main/test.parquet").write_text("gsm8k test")
    artifacts.ensure(str(store), "o", {"kind": "file", "dest": "raw/gsm8k", "path": str(other)})
    lines: list[str] = []
    got = artifacts.ensure(str(store), "g", {**spec, "dest": "raw/gsm8k-v2"}, log=lines.append)
    assert [f["path"] for f in got["entry"]["files"]] == ["raw/gsm8k-v2/main/test.parquet"]
    assert (store / "raw/gsm8k/main/train.parquet").read_text() == "another dataset"
    assert not any("removing" in line for line in lines), lines


def test_a_file_gone_from_the_source_folder_leaves_the_store(tmp_path):
    src = tmp_path / "gsm8k"
    (src / "main").mkdir(parents=True)
    (src / "main/train-00000-of-00001.parquet").write_text("old")
    store = tmp_path / "store"
    spec = {"kind": "file", "dest": "raw/gsm8k", "path": str(src)}
    artifacts.ensure(str(store), "g", spec)
    (src / "main/train-00000-of-00001.parquet").unlink()
    (src / "main/train-00000-of-00002.parquet").write_text("new")
    got = artifacts.ensure(str(store), "g", spec, refresh=True)["entry"]["files"]
    assert [f["path"] for f in got] == ["raw/gsm8k/main/train-00000-of-00002.parquet"]
    assert not (store / "raw/gsm8k/main/train-00000-of-00001.parquet").exists()


def test_a_mirror_endpoint_is_not_a_new_artifact():
    spec = {"kind": "modelscope", "id": "Qwen/Qwen3-32B", "dest": "models/Qwen3-32B"}
    assert artifacts.spec_digest(spec) == artifacts.spec_digest(
        {**spec, "endpoint": "https://mirror.example"})


def test_declared_size_beyond_the_free_disk_is_refused_before_fetching(tmp_path):
    src = tmp_path / "w"
    src.mkdir()
    (src / "config.json").write_text("{}")
    store = tmp_path / "store"
    spec = {"kind": "file", "dest": "models/w", "path": str(src), "size": 10**16}
    with pytest.raises(artifacts.ArtifactError, match="needs 10000000.0 GB more.*Nothing was"):
        artifacts.ensure(str(store), "w", spec, host="stager1")
    with pytest.raises(artifacts.ArtifactError, match="on stager1"):
        artifacts.ensure(str(store), "w", spec, host="stager1", check=True)
    assert not (store / "models").exists()
    assert artifacts.ensure(str(store), "w", {**spec, "size": 2})["changed"]


# --------------------------------------------------------------------- node copies


def test_node_copies_partial_damaged_and_verified(tmp_path):
    root = tmp_path / "node"
    (root / "git").mkdir(parents=True)
    data = b"x" * 1000
    files = [
        {"path": "git/a.bundle", "sha256": hashlib.sha256(data).hexdigest(), "size": 1000},
        {"path": "git/b.bundle", "sha256": hashlib.sha256(b"b").hexdigest(), "size": 1},
    ]
    (root / "git/a.bundle").write_bytes(data[:400])  # partial: kept for the resume
    r = stage.check_files(str(root), files)
    assert r["needed"] == ["git/a.bundle", "git/b.bundle"] and (root / "git/a.bundle").exists()
    (root / "git/a.bundle").write_bytes(data)
    (root / "git/b.bundle").write_bytes(b"c")  # right size, wrong content
    r = stage.check_files(str(root), files)
    assert r["stamped"] == ["git/a.bundle"] and r["removed"] == ["git/b.bundle"]
    assert not (root / "git/b.bundle").exists()
    with pytest.raises(stage.StageError, match="git/b.bundle"):
        stage.check_files(str(root), files, require=True)
    (root / "git/b.bundle").write_bytes(b"b")
    r = stage.check_files(str(root), files)
    assert r["verified"] == ["git/a.bundle", "git/b.bundle"] and r["stamped"] == ["git/b.bundle"]
    r = stage.check_files(str(root), files)
    assert not r["changed"] and r["needed"] == []
    # Written to after it was verified (same size): hashed again, found damaged.
    (root / "git/b.bundle").write_bytes(b"d")
    r = stage.check_files(str(root), files)
    assert r["removed"] == ["git/b.bundle"] and r["needed"] == ["git/b.bundle"]


def test_node_stamps_in_their_own_tree_and_readers_change_nothing(tmp_path):
    root, stamps = tmp_path / "data", tmp_path / "data/.a3rl/stamps"
    (root / "models/m").mkdir(parents=True)
    (root / "models/m/config.json").write_bytes(b"{}")
    files = [{"path": "models/m/config.json", "sha256": hashlib.sha256(b"{}").hexdigest(),
              "size": 2}]
    # A reader (shared storage) sees no stamp yet: it neither hashes nor stamps.
    r = stage.check_files(str(root), files, stamp_root=str(stamps), reader=True)
    assert r["needed"] == ["models/m/config.json"] and not stamps.exists()
    with pytest.raises(stage.StageError, match="node2: .*mount the shared storage"):
        stage.check_files(str(root), files, stamp_root=str(stamps), reader=True,
                          require=True, host="node2")
    r = stage.check_files(str(root), files, stamp_root=str(stamps))
    assert r["stamped"] == ["models/m/config.json"]
    assert os.listdir(root / "models/m") == ["config.json"]
    assert (stamps / "models/m/config.json.sha256").is_file()
    r = stage.check_files(str(root), files, stamp_root=str(stamps), reader=True, require=True)
    assert r["verified"] == ["models/m/config.json"]


def test_node_without_room_for_the_copies_is_refused_before_any_change(tmp_path):
    root = tmp_path / "node"
    root.mkdir()
    (root / "damaged").write_bytes(b"zz")
    files = [{"path": "damaged", "sha256": hashlib.sha256(b"ok").hexdigest(), "size": 2},
             {"path": "huge", "sha256": "0" * 64, "size": 10**16}]
    with pytest.raises(stage.StageError, match="node1: .* free; the copies still to arrive"):
        stage.check_files(str(root), files, host="node1")
    assert (root / "damaged").read_bytes() == b"zz"


# ------------------------------------------------------------------ source + workdir


@pytest.fixture()
def staged(tmp_path, upstream):
    store = tmp_path / "store"
    record = {"artifacts": {"fw": artifacts.ensure(str(store), "fw", git_spec(upstream))["entry"]}}
    spec = manifest.git_checkout_spec(record, "fw", str(store))
    src = tmp_path / "src/fw"
    return spec, src


def test_checkout_from_bundles_with_submodule_then_unchanged(staged):
    spec, src = staged
    r = stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    assert r["changed"] and r["action"] == "clone"
    assert (src / "third_party/sub/lib.c").read_text() == "int x;\n"
    assert (src / "pkg/core.py").read_text() == "a = 1\nb = 3\n"
    assert not stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])[
        "changed"
    ]
    (src / "pkg/core.py").write_text("edited\n")
    r = stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    assert r["changed"] and r["discarded"] == ["pkg/core.py"]
    assert (src / "pkg/core.py").read_text() == "a = 1\nb = 3\n"


def test_a_purge_of_a_staged_checkout_takes_its_files_and_submodule_and_keeps_a_users(staged):
    # The teardown purge (a3rl.node.purge) against a checkout as stage.checkout makes it.
    spec, src = staged
    stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    (src / "third_party/sub/build.log").write_text("mine")
    (src / "pkg/core.py").write_text("edited\n")
    entry = {"kind": "tree", "path": str(src.parent), "children": True,
             "ref": "refs/a3rl/pinned", "top": str(src.parent)}
    got = purge.purge([entry])
    assert str(src / "third_party/sub/lib.c") in got["removed"]
    assert not (src / "pkg/__init__.py").exists() and not (src / "third_party/sub/lib.c").exists()
    assert (src / "third_party/sub/build.log").read_text() == "mine"
    assert (src / "pkg/core.py").read_text() == "edited\n"
    assert got["changed_since"] == [str(src / "pkg/core.py")]
    assert got["repositories_kept"] == [str(src / "third_party/sub"), str(src)]
    # The user takes their file away and undoes their edit: the rest is the project's.
    (src / "third_party/sub/build.log").unlink()
    (src / "pkg/core.py").write_text("a = 1\nb = 3\n")
    got = purge.purge([entry])
    assert got["repositories_kept"] == [] and not src.exists() and src.parent.is_dir()


def test_checkout_check_mode_creates_nothing(staged):
    spec, src = staged
    r = stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"], check=True)
    assert r["changed"] and not src.exists()


LAYOUT = [
    {"from": "fw", "path": "pkg", "to": "pkg"},
    {"from": "fw", "path": "scripts/conv.py", "to": "./"},
    {"from": "fw", "path": "conf/*.yaml", "to": "pkg/config/"},
    {"from": "fw", "path": "conf/*py", "to": "pkg/"},
]


def switch(wd: Path) -> dict:
    """What the frameworks role does after a3rl_workdir: the patch series (none here)
    switches the tracked files to the staged composition."""
    return patch_series.apply(str(wd), patch_series.Series(()))


def test_workdir_layout_like_build_project(staged, tmp_path):
    spec, src = staged
    stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    wd = tmp_path / "wd"
    r = stage.build_workdir(str(wd), {"fw": str(src)}, LAYOUT)
    assert r["changed"] and r["action"] == "create"
    assert git("rev-parse", "refs/a3rl/staged", cwd=wd) == r["commit"]
    switch(wd)
    files = sorted(
        str(p.relative_to(wd)) for p in wd.rglob("*") if p.is_file() and ".git" not in p.parts
    )
    assert files == [
        "conv.py",
        "pkg/__init__.py",
        "pkg/config/x.yaml",
        "pkg/config/y.yaml",
        "pkg/core.py",
        "pkg/z.py",
    ]
    assert git("rev-parse", "refs/a3rl/pristine", cwd=wd) == r["commit"]
    assert git("status", "--porcelain", cwd=wd) == ""
    again = stage.build_workdir(str(wd), {"fw": str(src)}, LAYOUT)
    assert not again["changed"] and again["commit"] == r["commit"]
    # Same sources, same layout: the same pristine commit in another folder (another node).
    other = stage.build_workdir(str(tmp_path / "wd2"), {"fw": str(src)}, LAYOUT)
    assert other["commit"] == r["commit"]


def test_workdir_change_keeps_untracked_runtime_files(staged, tmp_path):
    spec, src = staged
    stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    wd = tmp_path / "wd"
    stage.build_workdir(str(wd), {"fw": str(src)}, LAYOUT)
    switch(wd)
    (wd / "kernel_meta").mkdir()
    (wd / "kernel_meta/op.o").write_text("cache")
    (wd / "outputs.log").write_text("log")
    smaller = [e for e in LAYOUT if e["path"] != "scripts/conv.py"]
    check = stage.build_workdir(str(wd), {"fw": str(src)}, smaller, check=True)
    assert check["changed"] and (wd / "conv.py").exists()
    r = stage.build_workdir(str(wd), {"fw": str(src)}, smaller)
    assert r["changed"] and r["action"] == "update"
    assert (wd / "conv.py").exists()  # staged only: the series step switches
    switch(wd)
    assert not (wd / "conv.py").exists()
    assert (wd / "kernel_meta/op.o").read_text() == "cache" and (
        wd / "outputs.log"
    ).read_text() == "log"


def test_workdir_refuses_unknown_paths(staged, tmp_path):
    spec, src = staged
    stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    with pytest.raises(stage.StageError, match="nope does not exist"):
        stage.build_workdir(
            str(tmp_path / "wd"), {"fw": str(src)}, [{"from": "fw", "path": "nope", "to": "x"}]
        )
    with pytest.raises(stage.StageError, match="not staged: other"):
        stage.build_workdir(
            str(tmp_path / "wd"), {"fw": str(src)}, [{"from": "other", "path": "a", "to": "b"}]
        )


# A stand-in `docker` for the image part of build_workdir: images are folders
# ($FAKE_DOCKER/images/<ref>/id and root/), created containers are files naming the
# image; every call is logged.
FAKE_DOCKER = r"""#!/usr/bin/env python3
import os, shutil, sys, uuid
base = os.environ["FAKE_DOCKER"]
args = sys.argv[1:]
with open(os.path.join(base, "calls"), "a") as f:
    f.write(" ".join(args) + "\n")
def image_dir(ref):
    return os.path.join(base, "images", ref.replace("/", "_").replace(":", "_"))
if args[:2] == ["image", "inspect"]:
    d = image_dir(args[-1])
    if not os.path.isdir(d):
        sys.exit("Error: No such image: " + args[-1])
    print(open(os.path.join(d, "id")).read().strip())
elif args[0] == "ps":
    pass
elif args[0] == "create":
    cid = uuid.uuid4().hex
    open(os.path.join(base, "containers", cid), "w").write(args[-2])
    print(cid)
elif args[0] == "cp":
    cid, path = args[1].split(":", 1)
    src = os.path.join(image_dir(open(os.path.join(base, "containers", cid)).read()),
                       "root") + path
    if not os.path.exists(src):
        sys.exit("Error: Could not find the file " + path + " in container " + cid)
    if os.path.isdir(src):
        shutil.copytree(src, args[2], symlinks=True)
    else:
        shutil.copy2(src, args[2])
elif args[0] == "rm":
    os.unlink(os.path.join(base, "containers", args[-1]))
else:
    sys.exit("fake docker: unknown command " + " ".join(args))
"""

IMAGE_LAYOUT = [
    {"from": "fw", "path": "pkg", "to": "pkg"},
    {"from": "fw", "path": "scripts/conv.py", "to": "./"},
    {"from": "img", "path": "vllm_ascend", "to": "vllm_ascend"},
    {"from": "img", "path": "conf/*.yaml", "to": "pkg/config/"},
]


@pytest.fixture()
def docker(tmp_path, monkeypatch):
    """The fake docker on PATH, with one image whose /workspace/vllm-ascend is built."""
    base = tmp_path / "docker"
    (base / "containers").mkdir(parents=True)
    (base / "bin").mkdir()
    exe = base / "bin/docker"
    exe.write_text(FAKE_DOCKER)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{base / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER", str(base))

    def image(ref: str, image_id: str, files: dict[str, str]) -> None:
        d = base / "images" / ref.replace("/", "_").replace(":", "_")
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        (d / "id").write_text(image_id)
        write(d / "root/workspace/vllm-ascend", files)

    def calls() -> list[str]:
        log = base / "calls"
        return log.read_text().splitlines() if log.exists() else []

    built = {
        ".gitignore": "*.so\n_cann_ops_custom/\n",
        "vllm_ascend/.gitignore": "*.so\n",
        "vllm_ascend/__init__.py": "X = 1\n",
        "vllm_ascend/vllm_ascend_C.cpython-311-aarch64-linux-gnu.so": "built\n",
        "vllm_ascend/_cann_ops_custom/vendors/vllm-ascend/op_api/lib/libx.so": "ops\n",
        "vllm_ascend/__pycache__/__init__.cpython-311.pyc": "cache\n",
        "conf/a.yaml": "a: 1\n",
        "conf/sub/b.yaml": "b: 1\n",
    }
    image("a3rl/verl-cann:1", "sha256:" + "1" * 64, built)
    return image, calls, built


def test_workdir_from_the_image_trees_keeps_the_build_products(staged, tmp_path, docker):
    """Issue 19 item 3: the frameworks come from the image's /workspace as files, build
    products included (a .gitignore there does not drop them), caches left out; the
    same image copies nothing again; a new image id restages; --check copies nothing."""
    image, calls, built = docker
    spec, src = staged
    stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    wd = tmp_path / "wd"

    def build(check=False):
        return stage.build_workdir(str(wd), {"fw": str(src)}, IMAGE_LAYOUT, check=check,
                                   image="a3rl/verl-cann:1",
                                   image_sources={"img": "/workspace/vllm-ascend"})

    assert build(check=True)["changed"] and calls() == ["image inspect --format {{.Id}} "
                                                        "a3rl/verl-cann:1"]
    r = build()
    assert r["changed"] and r["action"] == "create"
    switch(wd)
    for rel in ("vllm_ascend/vllm_ascend_C.cpython-311-aarch64-linux-gnu.so",
                "vllm_ascend/_cann_ops_custom/vendors/vllm-ascend/op_api/lib/libx.so",
                "vllm_ascend/__init__.py", "pkg/core.py", "conv.py", "pkg/config/a.yaml"):
        assert (wd / rel).is_file(), rel
    assert not (wd / "vllm_ascend/__pycache__").exists()
    assert not (wd / "pkg/config/sub").exists()  # cp dir/* copies no folders
    assert git("status", "--porcelain", cwd=wd) == ""
    # The short-lived container is gone.
    assert not list((tmp_path / "docker/containers").iterdir())
    n = len(calls())
    again = build()
    assert not again["changed"] and again["commit"] == r["commit"]
    assert [c for c in calls()[n:] if not c.startswith("image inspect")] == []
    # A new build of the image (new id), its extension rebuilt: restaged.
    image("a3rl/verl-cann:1", "sha256:" + "2" * 64, {
        **built, "vllm_ascend/vllm_ascend_C.cpython-311-aarch64-linux-gnu.so": "rebuilt\n"})
    check = build(check=True)
    assert check["changed"] and not any(c.startswith("create") for c in calls()[n:])
    new = build()
    assert new["changed"] and new["action"] == "update"
    switch(wd)
    assert (wd / "vllm_ascend/vllm_ascend_C.cpython-311-aarch64-linux-gnu.so").read_text() \
        == "rebuilt\n"
    assert not build()["changed"] and not switch(wd)["changed"]
    # A composition left staged (its series failed) is dropped when the inputs go back
    # to those in place, so the series does not try it again.
    image("a3rl/verl-cann:1", "sha256:" + "3" * 64, built)
    assert build()["changed"] and git("rev-parse", "refs/a3rl/staged", cwd=wd)
    image("a3rl/verl-cann:1", "sha256:" + "2" * 64, {
        **built, "vllm_ascend/vllm_ascend_C.cpython-311-aarch64-linux-gnu.so": "rebuilt\n"})
    assert not build()["changed"]
    assert subprocess.run(["git", "rev-parse", "--verify", "--quiet", "refs/a3rl/staged"],
                          cwd=wd, capture_output=True).returncode == 1


def test_workdir_refuses_a_missing_image_or_tree(staged, tmp_path, docker):
    spec, src = staged
    stage.checkout(spec["bundle"], str(src), spec["commit"], spec["submodules"])
    with pytest.raises(stage.StageError, match="image a3rl/other:2 is not on this node.*"
                                                "cann_image.yml"):
        stage.build_workdir(str(tmp_path / "wd"), {"fw": str(src)}, IMAGE_LAYOUT,
                            image="a3rl/other:2", image_sources={"img": "/workspace/x"})
    with pytest.raises(stage.StageError, match="has no /workspace/vllm-ascend/nope"):
        stage.build_workdir(str(tmp_path / "wd"), {}, [{"from": "img", "path": "nope",
                                                       "to": "x"}],
                            image="a3rl/verl-cann:1",
                            image_sources={"img": "/workspace/vllm-ascend"})
    assert not list((tmp_path / "docker/containers").iterdir())


def test_the_disk_checks_count_the_bytes_partial_copies_already_hold(tmp_path, monkeypatch):
    """A resumed transfer needs room for what is still to come only: 1000 bytes declared,
    600 already here, 500 free is enough (a check of the full size would refuse it)."""
    root = tmp_path / "node"
    root.mkdir()
    (root / "big.bin").write_bytes(b"x" * 600)
    files = [{"path": "big.bin", "sha256": "0" * 64, "size": 1000}]
    monkeypatch.setattr(stage, "_free_bytes", lambda _p: 500)
    assert stage.check_files(str(root), files)["incoming_bytes"] == 400
    monkeypatch.setattr(stage, "_free_bytes", lambda _p: 399)
    with pytest.raises(stage.StageError, match="399 bytes free; .* need 400 bytes"):
        stage.check_files(str(root), files)
    # The store: a partial download of the artifact counts the same way.
    store = tmp_path / "store"
    (store / "models/w").mkdir(parents=True)
    (store / "models/w/part.safetensors").write_bytes(b"y" * 600)
    spec = {"kind": "file", "dest": "models/w", "path": str(tmp_path), "size": 1000}
    monkeypatch.setattr(artifacts, "free_bytes", lambda _p: 500)
    artifacts.check_space(str(store), "w", spec)
    monkeypatch.setattr(artifacts, "free_bytes", lambda _p: 399)
    with pytest.raises(artifacts.ArtifactError, match="needs 0.0 GB more"):
        artifacts.check_space(str(store), "w", spec)


def test_a_single_file_download_in_progress_counts_as_present(tmp_path, monkeypatch):
    """Issue 26 (mutation): a one-file artifact resumes from DEST.part; the store's disk
    check counts those bytes as there, as it does a partial folder."""
    store = tmp_path / "store"
    (store / "images").mkdir(parents=True)
    (store / "images/cann.tar.part").write_bytes(b"z" * 700)
    assert artifacts.present_bytes(str(store), "images/cann.tar") == 700
    spec = {"kind": "file", "dest": "images/cann.tar", "size": 1000}
    monkeypatch.setattr(artifacts, "free_bytes", lambda _p: 300)
    artifacts.check_space(str(store), "cann", spec)
    monkeypatch.setattr(artifacts, "free_bytes", lambda _p: 299)
    with pytest.raises(artifacts.ArtifactError, match="has 0.0 GB free"):
        artifacts.check_space(str(store), "cann", spec)


def test_a_submodule_url_cannot_climb_above_the_root():
    with pytest.raises(artifacts.ArtifactError, match="cannot resolve submodule URL"):
        artifacts.resolve_relative_url("/repo.git", "../sub.git")
    with pytest.raises(artifacts.ArtifactError, match="cannot resolve submodule URL"):
        artifacts.resolve_relative_url("https://host/a.git", "../../b.git")


# ------------------------------------------------------ a3rl_artifact_files through Ansible


def test_artifact_files_names_the_missing_tools(tmp_path):
    """transfer.yml asks the package manager for rsync only when this list names it: a
    command on PATH is not listed, one that is not there is (the run itself goes through
    ansible, as on a node)."""
    absent = "a3rl-test-no-such-command"
    assert shutil.which(absent) is None
    result = run_module("a3rl_artifact_files",
                        {"root": str(tmp_path), "files": [], "tools": ["sh", absent]},
                        module_path="plugins/modules")
    assert result["missing_tools"] == [absent]
    assert (result["needed"], result["verified"]) == ([], [])


def test_an_unchanged_record_is_not_rewritten(tmp_path):
    """A re-run that finds every artifact present writes the same record: the file keeps
    its mtime (the stager's pull copies nothing) and no temporary name is left."""
    data = {"version": 1, "artifacts": {"a": {"kind": "file", "sha256": "0" * 64}}}
    artifacts.write_manifest(str(tmp_path), data)
    path = tmp_path / artifacts.MANIFEST
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    artifacts.write_manifest(str(tmp_path), json.loads(path.read_text()))
    assert path.stat().st_mtime_ns == 1_000_000_000
    data["artifacts"]["a"]["sha256"] = "1" * 64
    artifacts.write_manifest(str(tmp_path), data)
    assert json.loads(path.read_text()) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [artifacts.MANIFEST]


def test_on_shared_storage_a_file_a3rl_did_not_place_is_kept_and_the_check_stops(tmp_path):
    """issue 53: on a3rl_shared_dir a file at an artifact's path may be another team's
    copy: the file's size with another sha256, or longer, is kept and named."""
    root = tmp_path / "shared"
    (root / "models/m").mkdir(parents=True)
    good, want = b"w" * 10, b"c" * 4
    files = [{"path": "models/m/w.bin", "sha256": hashlib.sha256(good).hexdigest(), "size": 10},
             {"path": "models/m/config.json", "sha256": hashlib.sha256(want).hexdigest(),
              "size": 4},
             {"path": "models/m/tok.json", "sha256": "0" * 64, "size": 2}]
    (root / "models/m/w.bin").write_bytes(b"x" * 10)  # the size, another sha256
    (root / "models/m/config.json").write_bytes(b"theirs, longer")
    (root / "models/m/tok.json").write_bytes(b"t")  # shorter, and no transfer of ours
    with pytest.raises(stage.StageError, match=(
            r"node1: .* is shared storage .*models/m/w.bin \(the file's size, another sha256\), "
            r"models/m/config.json \(longer than the file\), models/m/tok.json \(shorter "
            r"than the file, and no transfer of a3rl's began it\)\. It may be another team's")):
        stage.check_files(str(root), files, host="node1", shared=True)
    assert (root / "models/m/w.bin").read_bytes() == b"x" * 10
    assert (root / "models/m/config.json").read_bytes() == b"theirs, longer"
    assert (root / "models/m/tok.json").read_bytes() == b"t"
    # Not shared (the node's own data root): both are removed, to be sent again.
    r = stage.check_files(str(root), files)
    assert r["removed"] == ["models/m/w.bin", "models/m/config.json"]


def test_on_shared_storage_a3rls_own_copies_are_resumed_or_replaced(tmp_path):
    """What a3rl began (a partial copy) is resumed, and what it verified and nobody wrote
    to since (an earlier version of the artifact) is replaced, on shared storage too."""
    root, stamps = tmp_path / "shared", tmp_path / "shared/.a3rl/stamps"
    (root / "m").mkdir(parents=True)
    old, new = b"old version, longer", b"new"
    files = [{"path": "m/config.json", "sha256": hashlib.sha256(new).hexdigest(), "size": 3},
             {"path": "m/w.bin", "sha256": hashlib.sha256(b"w" * 8).hexdigest(), "size": 8}]
    (root / "m/config.json").write_bytes(old)
    stage.check_files(str(root), [{"path": "m/config.json", "size": len(old),
                                   "sha256": hashlib.sha256(old).hexdigest()}],
                      stamp_root=str(stamps), shared=True)  # placed by an earlier run
    r = stage.check_files(str(root), files, stamp_root=str(stamps), shared=True)
    assert r["removed"] == ["m/config.json"] and r["needed"] == ["m/config.json", "m/w.bin"]
    assert (stamps / "m/w.bin.sending").is_file()
    (root / "m/w.bin").write_bytes(b"w" * 3)  # the transfer cut short
    r = stage.check_files(str(root), files, stamp_root=str(stamps), shared=True)
    assert r["needed"] == ["m/config.json", "m/w.bin"] and (root / "m/w.bin").exists()
    (root / "m/w.bin").write_bytes(b"w" * 8)
    (root / "m/config.json").write_bytes(new)
    r = stage.check_files(str(root), files, stamp_root=str(stamps), shared=True)
    assert r["verified"] == ["m/config.json", "m/w.bin"]
    assert not list(stamps.rglob("*.sending"))
    # Written to by someone since a3rl verified it: not a3rl's any more.
    (root / "m/config.json").write_bytes(b"theirs, longer")
    with pytest.raises(stage.StageError, match=r"m/config.json \(longer than the file\)"):
        stage.check_files(str(root), files, stamp_root=str(stamps), shared=True)


def test_a_reader_trusts_a_stamp_only_with_its_sha256_and_size(tmp_path):
    """The shared-storage reader: a stamp with the right size and another sha256 (a file
    the writer verified as something else) is not a verified copy."""
    root, stamps = tmp_path / "data", tmp_path / "data/.a3rl/stamps"
    (root / "m").mkdir(parents=True)
    (root / "m/w.bin").write_bytes(b"abc")
    files = [{"path": "m/w.bin", "sha256": hashlib.sha256(b"abc").hexdigest(), "size": 3}]
    (stamps / "m").mkdir(parents=True)
    stamp = stamps / "m/w.bin.sha256"
    stamp.write_text(f"{'e' * 64}  3  0\n")
    r = stage.check_files(str(root), files, stamp_root=str(stamps), reader=True)
    assert r["needed"] == ["m/w.bin"] and r["verified"] == []
    stamp.write_text(f"{files[0]['sha256']}  4  0\n")  # the sha256, another size
    assert stage.check_files(str(root), files, stamp_root=str(stamps),
                             reader=True)["needed"] == ["m/w.bin"]
    stamp.write_text(f"{files[0]['sha256']}  3  0\n")
    assert stage.check_files(str(root), files, stamp_root=str(stamps),
                             reader=True)["verified"] == ["m/w.bin"]
