"""The images built beside the tests (tests/prebuild.py): what the last line of the run
says when the build is done, failed, could not start or is still running, and that its
log is written to the cache folder."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from a3rl.sim import cluster, podman
from tests import prebuild


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(prebuild, "_outcome", {})
    monkeypatch.setattr(prebuild, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(podman, "available", lambda: None)
    return tmp_path


def test_ready_names_how_many_and_the_log(fresh, monkeypatch):
    built = [SimpleNamespace(ref=f"localhost/a3rl/x:{i}") for i in range(3)]
    monkeypatch.setattr(cluster, "build_images", lambda log: (log("building"), built)[1])
    prebuild._run()
    line = prebuild.summary_line()
    assert line.startswith("images built beside the tests: 3 ready after ")
    log = (fresh / "prebuild.log").read_text()
    assert "building" in log and "done: localhost/a3rl/x:0" in log


def test_a_failure_is_reported_with_its_error(fresh, monkeypatch):
    def fail(log):
        raise RuntimeError("pip wheel for the real-verl layer failed: no network")

    monkeypatch.setattr(cluster, "build_images", fail)
    prebuild._run()
    line = prebuild.summary_line()
    assert "FAILED" in line and "no network" in line
    assert "the modules built what they needed" in line


def test_no_podman_is_said_and_nothing_is_built(fresh, monkeypatch):
    monkeypatch.setattr(podman, "available", lambda: "podman is not installed")
    monkeypatch.setattr(cluster, "build_images",
                        lambda log: pytest.fail("built without podman"))
    prebuild._run()
    assert prebuild.summary_line() == ("images built beside the tests: not built "
                                       "(podman is not installed)")


def test_nothing_started_says_nothing(fresh):
    assert prebuild.summary_line() is None


def test_a_build_still_running_at_the_end_is_said(fresh, monkeypatch):
    import threading

    release = threading.Event()
    monkeypatch.setattr(cluster, "build_images", lambda log: (release.wait(10), [])[1])
    prebuild.start()
    try:
        assert prebuild.summary_line() == ("images built beside the tests: still building "
                                           "at the end")
    finally:
        release.set()
        for t in threading.enumerate():
            if t.name == "a3rl-prebuild":
                t.join(10)
    assert prebuild.summary_line().startswith("images built beside the tests: 0 ready")
