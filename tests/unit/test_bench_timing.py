"""bench/timing.py: task wall times read back from a run's events, a serial play's batches
timed separately (the time between them belongs to other tasks)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import timing  # noqa: E402


def _write(record: Path, events: list[dict]) -> None:
    folder = record / "artifacts" / "x" / "job_events"
    folder.mkdir(parents=True)
    for i, e in enumerate(events, 1):
        (folder / f"{i}-e.json").write_text(json.dumps({"counter": i, **e}))


def _start(uuid: str, task: str) -> dict:
    return {"event": "playbook_on_task_start", "event_data": {"task_uuid": uuid, "task": task}}


def _ok(uuid: str, task: str, host: str, start: str, end: str) -> dict:
    return {"event": "runner_on_ok", "event_data": {
        "task_uuid": uuid, "task": task, "host": host, "play": "p",
        "start": f"2026-12-01T10:00:{start}", "end": f"2026-12-01T10:00:{end}"}}


def test_a_serial_plays_batches_are_summed_not_spanned(tmp_path):
    # Batch 1 (node1, node2) runs A then B; batch 2 (node3, node4) runs A then B again.
    _write(tmp_path, [
        _start("a", "A"), _ok("a", "A", "node1", "00", "02"), _ok("a", "A", "node2", "00", "03"),
        _start("b", "B"), _ok("b", "B", "node1", "03", "13"), _ok("b", "B", "node2", "03", "13"),
        _start("a", "A"), _ok("a", "A", "node3", "13", "14"), _ok("a", "A", "node4", "13", "15"),
        _start("b", "B"), _ok("b", "B", "node3", "15", "25"), _ok("b", "B", "node4", "15", "25"),
    ])
    rows = {r["task"]: r for r in timing.task_walls(tmp_path)}
    assert rows["A"]["seconds"] == 5.0  # 3 + 2, not 15 (00 to 15)
    assert rows["B"]["seconds"] == 20.0
    assert rows["A"]["hosts"] == 4 and rows["A"]["batches"] == 2
    assert [r["task"] for r in timing.task_walls(tmp_path)] == ["B", "A"]


def test_span_from_one_task_to_another(tmp_path):
    _write(tmp_path, [_start("a", "A"), _ok("a", "A", "node1", "00", "02"),
                      _start("b", "B"), _ok("b", "B", "node1", "05", "09")])
    assert timing.span(tmp_path, "A", "B") == 9.0
    assert timing.span(tmp_path, "A", "C") is None
