"""What the forensic bundle and the checkpoint reader read, and what they trust: only
regular files of the node's own log folders, within stated bounds; log times in each
node's own time zone; only lines in Ray's and Python's log formats; only ASCII step
folders and markers (issue 53)."""

from __future__ import annotations

import calendar
import os
import threading
import time

import pytest

from a3rl.node import checkpoints, cluster_ops, first_failure

SESSION = "session_2026-12-07_12-00-00_000000_1"


@pytest.fixture
def ray_tmp(tmp_path, monkeypatch):
    """A node's /tmp/ray with one session's log folder, and the report pointed at it."""
    logs = tmp_path / "ray" / SESSION / "logs"
    logs.mkdir(parents=True)
    monkeypatch.setattr(cluster_ops, "LOG_GLOBS", tuple(
        f"{tmp_path}/ray/session_*/logs/*.{ext}" for ext in ("out", "err", "log")))
    monkeypatch.setattr(cluster_ops, "PLOG_GLOBS", (f"{tmp_path}/ascend/log/*/plog/*.log",))
    return logs


def _report() -> dict:
    return cluster_ops.report(since=0, lines=300, npus=0, net=False)


def test_a_symlink_among_the_logs_is_not_followed(ray_tmp, tmp_path):
    secret = tmp_path / "id_ed25519"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA-the-tail\n")
    (ray_tmp / "raylet.out").write_text("raylet line\n")
    (ray_tmp / "worker-1.out").symlink_to(secret)
    got = _report()
    assert list(got["logs"]) == [str(ray_tmp / "raylet.out")]
    assert "the-tail" not in repr(got)
    assert any(s["path"] == str(ray_tmp / "worker-1.out") and "symlink" in s["why"]
               for s in got["skipped"])


def test_a_log_folder_reached_through_a_symlink_is_not_read(ray_tmp, tmp_path):
    # A session folder that is a symlink out of /tmp/ray (Ray's own session_latest is one
    # into it: its files are read once, under their real name).
    outside = tmp_path / "root" / "logs"
    outside.mkdir(parents=True)
    (outside / "keys.log").write_text("secret\n")
    (tmp_path / "ray" / "session_x").symlink_to(tmp_path / "root")
    (ray_tmp / "raylet.out").write_text("raylet line\n")
    (tmp_path / "ray" / "session_latest").symlink_to(tmp_path / "ray" / SESSION)
    got = _report()
    assert list(got["logs"]) == [str(ray_tmp / "raylet.out")]
    assert "secret" not in repr(got["logs"])


def test_a_fifo_among_the_logs_does_not_block_the_report(ray_tmp):
    os.mkfifo(ray_tmp / "worker-2.err")
    (ray_tmp / "raylet.out").write_text("raylet line\n")
    out: dict = {}
    reader = threading.Thread(target=lambda: out.update(_report()), daemon=True)
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():  # release the blocked open so the thread can end
        os.close(os.open(ray_tmp / "worker-2.err", os.O_WRONLY | os.O_NONBLOCK))
    assert not reader.is_alive() and list(out["logs"]) == [str(ray_tmp / "raylet.out")]
    assert any("not a regular file" in s["why"] for s in out["skipped"])


def test_a_hard_link_or_a_file_another_user_placed_is_not_read(ray_tmp, tmp_path,
                                                                monkeypatch):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$hash\n")
    os.link(secret, ray_tmp / "gcs_server.out")
    got = _report()
    assert got["logs"] == {} and "hash" not in repr(got)
    assert any("hard link" in s["why"] for s in got["skipped"])
    (ray_tmp / "gcs_server.out").unlink()
    (ray_tmp / "raylet.out").write_text("planted by someone else\n")
    monkeypatch.setattr(cluster_ops.os, "geteuid", lambda: os.getuid() + 4242)
    got = _report()
    assert got["logs"] == {}
    assert any("owned by uid" in s["why"] for s in got["skipped"])


def test_a_name_swapped_for_a_symlink_after_the_check_is_refused_at_the_open(
        ray_tmp, tmp_path, monkeypatch):
    # The race: each name passes the symlink check (realpath made to see none), then is
    # a symlink (the file) or under one (its folder) when it is opened.
    secret = tmp_path / "outside" / "logs"
    secret.mkdir(parents=True)
    (secret / "keys.log").write_text("secret\n")
    (ray_tmp / "worker-1.out").symlink_to(secret / "keys.log")
    (tmp_path / "ray" / "session_y").symlink_to(tmp_path / "outside")
    monkeypatch.setattr(cluster_ops.os.path, "realpath", os.path.abspath)
    got = _report()
    assert got["logs"] == {}
    whys = {s["path"]: s["why"] for s in got["skipped"]}
    assert "cannot be opened" in whys[str(ray_tmp / "worker-1.out")]
    assert whys[str(tmp_path / "ray" / "session_y" / "logs" / "keys.log")] == (
        f"moved while it was opened (to {secret / 'keys.log'})")


def test_the_logs_read_are_bounded_in_count_and_bytes(ray_tmp, monkeypatch):
    monkeypatch.setattr(cluster_ops, "MAX_LOG_FILES", 5, raising=False)
    monkeypatch.setattr(cluster_ops, "MAX_FILE_BYTES", 1000, raising=False)
    monkeypatch.setattr(cluster_ops, "MAX_TOTAL_BYTES", 3500, raising=False)
    for i in range(12):
        path = ray_tmp / f"worker-{i:02d}.out"
        path.write_text(f"file {i}: " + "x" * 5000 + "\n")
        os.utime(path, (1000 + i, 1000 + i))
    got = _report()
    # The newest files first, each tail cut to its bound, until the node's total is used.
    assert sorted(got["logs"]) == [str(ray_tmp / f"worker-{i:02d}.out") for i in (9, 10, 11)]
    assert all(len(t.encode()) <= 1000 for t in got["logs"].values())
    whys = {os.path.basename(s["path"]): s["why"] for s in got["skipped"]}
    assert "over the node's bound of 3500 bytes" in whys["worker-08.out"]
    assert "over the node's bound of 5 files" in whys["worker-00.out"]
    assert got["bounds"] == {"files": 5, "plog_files": cluster_ops.MAX_PLOG_FILES,
                             "file_bytes": 1000, "total_bytes": 3500}
    # Bytes that are not UTF-8 grow when decoded: the text is cut to the bound again.
    for path in ray_tmp.iterdir():
        path.unlink()
    (ray_tmp / "raw.err").write_bytes(b"\xff" * 900)
    text = _report()["logs"][str(ray_tmp / "raw.err")]
    assert 900 <= len(text.encode()) <= 1000


def test_the_report_names_the_nodes_own_time_zone(ray_tmp, monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        # 2026-11-01 06:00 UTC is 02:00 EDT: New York's clocks go back an hour.
        since = calendar.timegm((2026, 10, 31, 12, 0, 0))
        zone = cluster_ops.utc_offsets(since, since + 3 * 86400)
        got = cluster_ops.report(since=time.time() - 60, lines=10, npus=0, net=False)
        now = time.localtime().tm_gmtoff
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert zone == [[since, -4 * 3600], [calendar.timegm((2026, 11, 1, 6, 0, 0)), -5 * 3600]]
    assert [o for _t, o in got["utc_offsets"]] == [now]


@pytest.fixture
def head_in_utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _utc(*parts) -> float:
    return float(calendar.timegm((2026, 12, 7, *parts)))


def test_each_nodes_log_times_are_read_in_its_own_zone(head_in_utc):
    # node1 runs in UTC-5: its 07:00:05 is 12:00:05 UTC, after node2's 12:00:01 UTC.
    reports = {
        "node1": {"clock": 0.0, "head_clock": 0.0, "utc_offsets": [[0, -5 * 3600]],
                  "logs": {"a.out": "[2026-12-07 07:00:05,000 E 1 1] a.cc:1: late"}},
        "node2": {"clock": 0.0, "head_clock": 0.0, "utc_offsets": [[0, 0]],
                  "logs": {"b.out": "[2026-12-07 12:00:01,000 E 1 1] b.cc:1: early"}},
    }
    s = first_failure.summarize(reports, dead=[], expected=["node1", "node2"],
                                since=_utc(11, 59, 0))
    assert s["first"]["host"] == "node2"
    # node1's line is not dropped as older than the attempt.
    assert [(e["host"], e["time"]) for e in s["events"]] == [
        ("node2", _utc(12, 0, 1)), ("node1", _utc(12, 0, 5))]
    assert s["warnings"] == []


def test_a_zone_change_during_the_attempt_reads_each_line_at_its_own_offset(head_in_utc):
    change = _utc(12, 0, 0)
    reports = {"n": {"clock": 0.0, "head_clock": 0.0,
                     "utc_offsets": [[0, 3600], [change, 7200]],
                     "logs": {"a.out": "[2026-12-07 12:30:00,000 E 1 1] a.cc:1: before\n"
                                       "[2026-12-07 14:30:00,000 E 1 1] a.cc:1: after"}}}
    s = first_failure.summarize(reports, dead=[], expected=["n"], since=0)
    assert [e["time"] for e in s["events"]] == [_utc(11, 30, 0), _utc(12, 30, 0)]


def test_a_node_that_does_not_name_its_zone_is_warned_about(head_in_utc):
    reports = {"n": {"clock": 0.0, "head_clock": 0.0, "utc_offsets": "+0800",
                     "logs": {"a.out": "[2026-12-07 12:00:00,000 E 1 1] a.cc:1: x"}}}
    s = first_failure.summarize(reports, dead=[], expected=["n"], since=0)
    assert s["events"][0]["time"] == _utc(12, 0, 0)
    assert any("n did not report its time zone" in w and "head's" in w
               for w in s["warnings"])


@pytest.mark.parametrize("line", [
    "[2026-12-07 12:00:00,123 E 123 456] node_manager.cc:12: raylet error",
    "[2026-12-07 12:00:00,123 C 123 456] raylet.cc:1: Check failed: fatal",
    '{"asctime":"2026-12-07 12:00:00,123","levelname":"E","message":"json","filename":"a"}',
    "2026-12-07 12:00:00,123\tERROR worker.py:12 -- python error",
    "2026-12-07 12:00:00,123\tCRITICAL worker.py:12 -- python critical",
])
def test_ray_and_python_error_lines_are_errors(line, head_in_utc):
    # Ray's fatal lines are "C" (spdlog's critical) and its JSON lines start with asctime.
    got = first_failure.error_lines("x.log", line)
    assert [e["time"] for e in got] == [_utc(12, 0, 0) + 0.123]


@pytest.mark.parametrize("line", [
    "2026-12-07 12:00:00,123\tINFO worker.py:1 -- retrying after ERROR from a peer",
    "(WorkerDict pid=7, ip=10.0.0.2) 2026-12-07 12:00:00,123\tERROR w.py:1 -- forwarded",
    "  checkpoint: /data/2026-12-07 12:00:00 ERROR",
    "step 3 2026-12-07 12:00:00 reward ERROR=0.1",
    "[2026-12-07 12:00:00,123 W 123 456] a.cc:1: ERROR in a warning",
])
def test_a_line_that_only_holds_a_date_and_error_is_not_an_error(line):
    assert first_failure.error_lines("x.log", line) == []


def test_a_line_in_the_format_without_a_real_date_is_skipped_not_a_crash():
    text = ("[2026-02-30 12:00:00,000 E 1 1] a.cc:1: no such day\n"
            "2026-12-07 25:00:00,000\tERROR a.py:1 -- no such hour\n"
            "[2026-12-07 12:00:00,000 E 1 1] a.cc:1: real")
    got = first_failure.error_lines("x.log", text)
    assert [e["line"][-4:] for e in got] == ["real"]


def test_a_marker_that_is_not_an_ascii_number_is_no_marker(tmp_path):
    for text in ("²", "٣", "3\u2003", "9" * 5000):
        (tmp_path / checkpoints.MARKER).write_text(text)
        assert checkpoints.marker_step(str(tmp_path)) is None, text
    (tmp_path / checkpoints.MARKER).write_text("12\n")
    assert checkpoints.marker_step(str(tmp_path)) == 12


def test_a_marker_that_is_a_fifo_or_a_symlink_is_not_read(tmp_path):
    os.mkfifo(tmp_path / checkpoints.MARKER)
    out: dict = {}
    reader = threading.Thread(target=lambda: out.update(
        step=checkpoints.marker_step(str(tmp_path))), daemon=True)
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():
        os.close(os.open(tmp_path / checkpoints.MARKER, os.O_WRONLY | os.O_NONBLOCK))
    assert not reader.is_alive() and out == {"step": None}
    (tmp_path / checkpoints.MARKER).unlink()
    (tmp_path / "elsewhere").write_text("7")
    (tmp_path / checkpoints.MARKER).symlink_to(tmp_path / "elsewhere")
    assert checkpoints.marker_step(str(tmp_path)) is None


def _complete(folder):
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model.pt").write_bytes(b"x")
    (folder / "data.pt").write_bytes(b"x")


def test_only_ascii_step_folders_that_are_real_folders_are_checkpoints(tmp_path):
    (tmp_path / checkpoints.MARKER).write_text("99")
    _complete(tmp_path / "global_step_2")
    for name in ("global_step_99\n", "global_step_٣", "global_step_5 "):
        _complete(tmp_path / name)
    _complete(tmp_path / "other" / "global_step_9")
    (tmp_path / "global_step_9").symlink_to(tmp_path / "other" / "global_step_9")
    found = checkpoints.scan(str(tmp_path))["checkpoints"]
    assert [(e["step"], e["complete"]) for e in found] == [(9, False), (2, True)]
    assert "is a symlink" in found[0]["why"]
    newest, skipped = checkpoints.newest_complete(str(tmp_path))
    assert newest["path"] == str(tmp_path / "global_step_2") and len(skipped) == 1


def test_a_step_folder_whose_parts_are_symlinks_is_not_complete(tmp_path):
    (tmp_path / checkpoints.MARKER).write_text("3")
    _complete(tmp_path / "global_step_1")
    _complete(tmp_path / "elsewhere")
    for step, part in ((3, "actor"), (2, "data.pt")):
        (tmp_path / f"global_step_{step}").mkdir()
        (tmp_path / f"global_step_{step}" / part).symlink_to(tmp_path / "elsewhere" / part)
    (tmp_path / "global_step_3" / "data.pt").write_bytes(b"x")
    (tmp_path / "global_step_2" / "actor").mkdir()
    (tmp_path / "global_step_2" / "actor" / "model.pt").write_bytes(b"x")
    newest, skipped = checkpoints.newest_complete(str(tmp_path))
    assert newest["step"] == 1
    assert skipped == ["global_step_3 is not as verl wrote it: actor is a symlink",
                       "global_step_2 is not as verl wrote it: data.pt is a symlink"]


def test_an_attempt_suffix_is_ascii_digits_at_the_very_end():
    assert checkpoints.attempt_of("run-r3") == 3
    assert checkpoints.attempt_of("run-r3\n") == 1
    assert checkpoints.attempt_of("run-r٣") == 1
    assert checkpoints.run_id_of("run-r٣") == "run-r٣"


def test_the_bundles_driver_log_is_its_tail_masked_before_the_cut(tmp_path, monkeypatch):
    from .test_supervisor import _sup

    monkeypatch.setattr(first_failure, "DRIVER_LOG_CHARS", 1000, raising=False)
    secret = "s3cr3t-value"
    # Cut unmasked, the last 1000 characters would start with the secret's second half.
    log = "x" * 5000 + secret + "y" * (1000 - len(secret) // 2 - 1) + "\n"
    sup, api, _ops = _sup(tmp_path, {"run": [("FAILED", log)]})
    sup.cfg["job"]["env"] = {"A3RL_SECRET_TOKEN": secret}
    sup._bundle("run", {"start_time": 1000})
    text = (tmp_path / "bundles" / "run" / "driver.log").read_text()
    assert len(text) < 1100 and text.endswith("y\n")
    assert text.startswith("(the first ") and "characters are left out)" in text
    assert "value" not in text


def test_a_node_address_that_is_not_a_plain_name_stays_in_the_bundles_folder(tmp_path):
    from .test_supervisor import _sup

    sup, _api, ops = _sup(tmp_path, {"run": [("FAILED", "")]})
    real = ops.__call__

    def report(action, args):
        got = real(action, args)
        if action == "report":
            got["nodes"]["../../escaped"] = {"clock": 5.0, "head_clock": 5.0, "logs": {}}
        return got

    sup.ops = report
    sup._bundle("run", {"start_time": 1000})
    assert not list(tmp_path.rglob("escaped.json"))
    names = sorted(p.name for p in (tmp_path / "bundles" / "run").glob("*.json"))
    assert names == ["_.._.._escaped.json", "node1.json", "node2.json", "summary.json"]


def test_a_node_that_did_not_answer_is_named_before_its_peers_errors(head_in_utc):
    # The killed worker's container is gone: Ray has not marked it DEAD yet (its health
    # checks take their period) and the report cannot run there; the head's peers log
    # the errors that follow from it. Seen in the suite's killed-worker run.
    reports = {
        "node1": {"clock": 0.0, "head_clock": 0.0, "utc_offsets": [[0, 0]],
                  "logs": {"gcs_server.out":
                           "[2026-12-07 12:00:05,000 E 1 1] gcs.cc:1: Failed to cancel"}},
        "node2": {"error": "TaskUnschedulableError: The node specified via "
                           "NodeAffinitySchedulingStrategy doesn't exist any more"},
        "spare": {"error": "TimeoutError"},  # not one of the run's nodes
    }
    s = first_failure.summarize(reports, dead=[], expected=["node1", "node2"], since=0)
    assert s["first"]["host"] == "node2" and s["first"]["time"] is None
    assert s["line"].startswith("first failure: node2 (did not answer the report: "), s
    assert [e["host"] for e in s["silent"]] == ["node2"]
    # A node missing from the reports altogether (not live in Ray) counts the same.
    del reports["node2"]
    s = first_failure.summarize(reports, dead=[], expected=["node1", "node2"], since=0)
    assert s["first"]["host"] == "node2"
    # A death Ray did record still comes first.
    s = first_failure.summarize(reports, dead=[{"host": "node1", "time": 5.0}],
                                expected=["node1", "node2"], since=0)
    assert s["first"]["host"] == "node1" and s["line"].startswith("first failure: node1 at ")
    # Everyone answered: the earliest error line.
    reports["node2"] = {"clock": 0.0, "head_clock": 0.0, "utc_offsets": [[0, 0]], "logs": {}}
    s = first_failure.summarize(reports, dead=[], expected=["node1", "node2"], since=0)
    assert s["first"]["host"] == "node1" and "Failed to cancel" in s["first"]["line"]


def test_rays_own_event_forwarding_errors_are_not_the_runs():
    # ray-project/ray#60811: the dashboard agent fails to forward every job event.
    agent = ('2026-12-07 15:10:53,970\tERROR event_agent.py:97 -- Report event failed: '
             '[\'{"source_type": "JOBS", "message": "Started a ray job x."}\']')
    real = "2026-12-07 15:10:54,000\tERROR worker.py:12 -- the run's own error"
    got = first_failure.error_lines("dashboard_agent.log", f"{agent}\n{real}")
    assert [e["line"] for e in got] == [real]
