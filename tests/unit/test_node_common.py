"""tools/a3rl/node/common.py: the helpers the node-side modules share."""

from __future__ import annotations

import hashlib

from a3rl.node import common


def test_sha256_file_reads_past_the_first_chunk(tmp_path):
    data = b"a" * common.CHUNK + b"tail"
    (tmp_path / "f").write_bytes(data)
    assert common.sha256_file(str(tmp_path / "f")) == hashlib.sha256(data).hexdigest()


def test_git_env_drops_what_points_git_elsewhere_and_fixes_the_language(monkeypatch):
    monkeypatch.setenv("GIT_DIR", "/somewhere/else.git")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    env = common.git_env({"GIT_AUTHOR_NAME": "x"})
    assert "GIT_DIR" not in env and env["LC_ALL"] == "C" and env["GIT_AUTHOR_NAME"] == "x"
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_CONFIG_NOSYSTEM"] == "1"


def test_git_runs_in_its_folder_with_the_config_given(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "not-this.git"))
    assert common.git(["init", "--quiet"], cwd=str(tmp_path)).returncode == 0
    assert (tmp_path / ".git").is_dir() and not (tmp_path / "not-this.git").exists()
    got = common.git(["config", "--get", "a3rl.probe"], cwd=str(tmp_path), config=("a3rl.probe=1",))
    assert got.stdout.strip() == "1"
    assert common.git(["rev-parse", "--verify", "HEAD"], cwd=str(tmp_path)).returncode != 0
