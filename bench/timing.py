"""Timings read back from a run's record (ansible-runner's events under runs/<...>/).

Every ``runner_on_*`` event carries the task's ``start`` and ``end`` on that host; a
task's wall time is from its first host's start to its last host's end.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path


def events(record: Path) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in
                   record.glob("artifacts/*/job_events/*.json")),
                  key=lambda e: e.get("counter", 0))


def task_walls(record: Path) -> list[dict]:
    """One row per task (play, task, seconds, hosts), slowest first.

    A task's wall time is from its first host's start to its last host's end, per run of
    the task: a play with ``serial`` runs each task once per batch (one task-start event
    each), and the time between two batches belongs to the other tasks, so the task's
    seconds are the sum of its batches' spans.
    """
    spans: dict[tuple[str, int], dict] = {}
    runs: dict[str, int] = {}
    for e in events(record):
        d = e.get("event_data", {})
        key = d.get("task_uuid") or d.get("task", "")
        if e.get("event") == "playbook_on_task_start":
            runs[key] = runs.get(key, 0) + 1
            continue
        if not e.get("event", "").startswith("runner_on_") or "start" not in d or "end" not in d:
            continue
        start, end = datetime.fromisoformat(d["start"]), datetime.fromisoformat(d["end"])
        row = spans.setdefault((key, runs.get(key, 0)),
                               {"key": key, "play": d.get("play", ""), "task": d.get("task", ""),
                                "start": start, "end": end, "hosts": set()})
        row["start"], row["end"] = min(row["start"], start), max(row["end"], end)
        row["hosts"].add(d.get("host"))
    tasks: dict[str, dict] = {}
    for r in spans.values():
        t = tasks.setdefault(r["key"], {"play": r["play"], "task": r["task"], "hosts": set(),
                                        "seconds": 0.0, "batches": 0})
        t["seconds"] += (r["end"] - r["start"]).total_seconds()
        t["hosts"] |= r["hosts"]
        t["batches"] += 1
    rows = [{"play": t["play"], "task": t["task"], "hosts": len(t["hosts"]),
             "batches": t["batches"], "seconds": t["seconds"]} for t in tasks.values()]
    return sorted(rows, key=lambda r: -r["seconds"])


def span(record: Path, first_task: str, last_task: str) -> float | None:
    """Seconds from the start of ``first_task`` (its first host) to the end of
    ``last_task`` (its last host), or None when either did not run."""
    starts, ends = [], []
    for e in events(record):
        d = e.get("event_data", {})
        if not e.get("event", "").startswith("runner_on_") or "start" not in d:
            continue
        if d.get("task") == first_task:
            starts.append(datetime.fromisoformat(d["start"]))
        if d.get("task") == last_task:
            ends.append(datetime.fromisoformat(d["end"]))
    if not starts or not ends:
        return None
    return (max(ends) - min(starts)).total_seconds()
