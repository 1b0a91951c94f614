"""Run records: what one ``a3rl`` run of a play leaves under ``runs/<timestamp>-<play>/``.

ansible-runner writes the events (``artifacts/<id>/job_events/``) and the full log
(``artifacts/<id>/stdout``); ``command.txt`` holds the equivalent ``ansible-playbook``
command. This module adds ``summary.json`` (per-task and per-host timings, counts,
failures, transfers and the followed training jobs, all derived from the events), lists
the records (``a3rl runs``) and renders a record's ``report.md`` and ``timeline.png``
(``a3rl report RUN``). A training run's own report (``runs/<submission-id>/report.md``,
written by the training play with :mod:`a3rl.controller.report`) is linked, not re-rendered.

Records made before ``summary.json`` existed are summarised from their events on demand.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a3rl.controller.fold import (
    ITEM_EVENTS,
    RESULT_EVENTS,
    TASK_START_EVENTS,
    event_time,
    human_bytes,
    human_seconds,
    iso_time,
    replay,
)
from a3rl.controller.report import markdown_table
from a3rl.planning import checkpointing

SUMMARY_NAME = "summary.json"
REPORT_NAME = "report.md"
TIMELINE_NAME = "timeline.png"
SUMMARY_VERSION = 1
# runs/<YYYYmmdd-HHMMSS>-<play>[-N]: a play's record (runs/<submission-id>/ are training runs).
RECORD_RE = re.compile(r"^(\d{8}-\d{6})-(.+?)(?:-(\d+))?$")


class RunError(ValueError):
    """A run that cannot be found or read; the message says which and what to do."""


# ---- the record folder ---------------------------------------------------------------


def artifact_dir(record: Path) -> Path | None:
    dirs = sorted(p for p in (record / "artifacts").glob("*") if p.is_dir())
    return dirs[-1] if dirs else None


def log_path(record: Path) -> Path | None:
    """The run's full log: ansible-playbook's own output, as ansible-runner kept it."""
    a = artifact_dir(record)
    return a / "stdout" if a and (a / "stdout").exists() else None


def load_events(record: Path) -> list[dict]:
    """The run's events in the order they happened (partial files left aside)."""
    events = []
    for path in (record / "artifacts").glob("*/job_events/*.json"):
        if path.name.endswith("-partial.json"):
            continue
        try:
            events.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return sorted(events, key=lambda e: e.get("counter", 0))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


# ---- the summary ---------------------------------------------------------------------


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC).isoformat(timespec="seconds")


def _rel(ts: float | None, t0: float | None) -> float | None:
    if ts is None or t0 is None:
        return None
    return round(ts - t0, 3)


def task_timings(events: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """Per task (each time it ran) and per host: status, start, end, seconds; and the plays.

    Times are absolute (seconds since the epoch). A task's host time runs from its
    ``runner_on_start`` to its result; an until-loop's result spans all its retries.
    """
    tasks: list[dict] = []
    plays: list[dict] = []
    current: dict[str, dict] = {}
    for e in events:
        name = e.get("event", "")
        data = e.get("event_data") or {}
        when = event_time(e)
        if name == "playbook_on_play_start":
            if plays and plays[-1]["end"] is None:
                plays[-1]["end"] = when
            plays.append({"play": str(data.get("play") or data.get("name") or ""),
                          "pattern": str(data.get("play_pattern") or ""),
                          "start": when, "end": None})
            continue
        if name == "playbook_on_stats":
            if plays and plays[-1]["end"] is None:
                plays[-1]["end"] = when
            continue
        uuid = str(data.get("task_uuid") or "")
        if name in TASK_START_EVENTS:
            inst = {"task": str(data.get("task") or data.get("name") or ""),
                    "role": str(data.get("role") or ""),
                    "path": str(data.get("task_path") or ""),
                    "action": str(data.get("resolved_action") or data.get("task_action") or ""),
                    "play": plays[-1]["play"] if plays else "",
                    "handler": name == "playbook_on_handler_task_start",
                    "start": when, "end": when, "hosts": {}}
            tasks.append(inst)
            current[uuid] = inst
            continue
        host = data.get("host")
        if not host or not uuid:
            continue
        inst = current.get(uuid)
        if inst is None:  # an event without its task start (should not happen)
            inst = current[uuid] = {"task": str(data.get("task") or ""), "role": "",
                                    "path": "", "action": "", "play": "", "handler": False,
                                    "start": when, "end": when, "hosts": {}}
            tasks.append(inst)
        h = inst["hosts"].setdefault(host, {"status": "running", "start": when, "end": None,
                                            "items": 0, "retries": 0})
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        if name == "runner_on_start":
            h["start"] = when
        elif name == "runner_retry":
            h["retries"] += 1
        elif name in ITEM_EVENTS:
            h["items"] += 1
        elif name in RESULT_EVENTS:
            status = RESULT_EVENTS[name]
            if status == "ok" and res.get("changed"):
                status = "changed"
            if status == "failed" and data.get("ignore_errors"):
                status = "ignored"
            h["status"] = status
            h["start"] = iso_time(data.get("start")) or h["start"]
            h["end"] = iso_time(data.get("end")) or when
        if when is not None:
            inst["end"] = max(inst["end"] or when, when)
    for inst in tasks:
        for h in inst["hosts"].values():
            if h["status"] == "running":  # a meta task, or a run cut short
                h["status"] = "no result"
            if h["end"] is None:
                h["end"] = inst["end"]
    return tasks, plays


def summarize(events: Sequence[dict], *, run: str, playbook: str | None = None,
              command: str | None = None, rc: int | None = None, status: str | None = None,
              inventory: str | None = None, check: bool | None = None,
              extravars: dict | None = None, log: str | None = None) -> dict[str, Any]:
    """Everything ``a3rl runs`` and ``a3rl report`` show, from the run's events."""
    tracker = replay(events, playbook or "")
    tasks, plays = task_timings(events)
    times = [t for t in (event_time(e) for e in events) if t is not None]
    t0 = min(times) if times else None
    t1 = max(times) if times else None
    if not playbook:
        playbook = next((str((e.get("event_data") or {}).get("playbook"))
                         for e in events if e.get("event") == "playbook_on_start"), "")
    stats = tracker.stats
    hosts: dict[str, dict[str, Any]] = {}
    all_hosts = sorted({h for inst in tasks for h in inst["hosts"]}
                       | {h for v in stats.values() for h in v})
    for host in all_hosts:
        mine = [inst["hosts"][host] for inst in tasks if host in inst["hosts"]]
        busy = sum((h["end"] or 0) - (h["start"] or 0) for h in mine
                   if h["start"] is not None and h["end"] is not None)
        starts = [h["start"] for h in mine if h["start"] is not None]
        ends = [h["end"] for h in mine if h["end"] is not None]
        hosts[host] = {
            "ok": stats.get("ok", {}).get(host, 0),
            "changed": stats.get("changed", {}).get(host, 0),
            "failed": stats.get("failures", {}).get(host, 0),
            "unreachable": stats.get("dark", {}).get(host, 0),
            "skipped": stats.get("skipped", {}).get(host, 0),
            "rescued": stats.get("rescued", {}).get(host, 0),
            "ignored": stats.get("ignored", {}).get(host, 0),
            "tasks": len(mine),
            "busy_seconds": round(busy, 3),
            "first": _rel(min(starts) if starts else None, t0),
            "last": _rel(max(ends) if ends else None, t0),
        }
    counts = {k: sum(h[k] for h in hosts.values())
              for k in ("ok", "changed", "failed", "unreachable", "skipped", "rescued",
                        "ignored")}
    if rc is None:
        rc = 0 if (stats and not counts["failed"] and not counts["unreachable"]) else 1
    out_tasks = []
    for inst in tasks:
        hs = {h: {"status": v["status"], "start": _rel(v["start"], t0),
                  "end": _rel(v["end"], t0),
                  "seconds": round((v["end"] or 0) - (v["start"] or 0), 3)
                  if v["start"] is not None and v["end"] is not None else None,
                  **({"items": v["items"]} if v["items"] else {}),
                  **({"retries": v["retries"]} if v["retries"] else {})}
              for h, v in sorted(inst["hosts"].items())}
        starts = [v["start"] for v in hs.values() if v["start"] is not None]
        ends = [v["end"] for v in hs.values() if v["end"] is not None]
        out_tasks.append({
            "task": inst["task"], "role": inst["role"], "play": inst["play"],
            "path": inst["path"], "action": inst["action"],
            **({"handler": True} if inst["handler"] else {}),
            "start": min(starts) if starts else _rel(inst["start"], t0),
            "end": max(ends) if ends else _rel(inst["end"], t0),
            "seconds": round(max(ends) - min(starts), 3) if starts and ends else 0.0,
            "hosts": hs,
        })
    training = []
    for tr in tracker.training.values():
        d = tr.as_dict()
        report = next((r["report"] for r in tracker.reports
                       if tr.submission_id in str(r["report"])), None)
        d["report"] = report
        training.append(d)
    return {
        "version": SUMMARY_VERSION,
        "run": run,
        "playbook": playbook,
        "status": status or ("successful" if rc == 0 else "failed"),
        "rc": rc,
        "ok": rc == 0,
        "started": _iso(t0),
        "ended": _iso(t1),
        "seconds": round(t1 - t0, 3) if t0 is not None and t1 is not None else None,
        "command": command,
        "inventory": inventory,
        "check": check,
        "extravars": extravars,
        "log": log,
        "counts": counts,
        "hosts": hosts,
        "plays": [{"play": p["play"], "pattern": p["pattern"], "start": _rel(p["start"], t0),
                   "end": _rel(p["end"] if p["end"] is not None else t1, t0)} for p in plays],
        "tasks": out_tasks,
        "failures": [vars(f) for f in tracker.failures],
        "transfers": [t.as_dict() for t in tracker.transfers.values()],
        "training": training,
    }


def summary_of(record: Path, write: bool = True) -> dict[str, Any]:
    """The record's ``summary.json``; built from its events (and written) when missing."""
    path = record / SUMMARY_NAME
    if path.exists():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise RunError(f"{path} is not JSON ({e}); remove it and run "
                           f"`a3rl report {record.name}` to build it again") from e
    events = load_events(record)
    if not events:
        raise RunError(f"{record} holds no events (artifacts/*/job_events/): not a run record")
    a = artifact_dir(record)
    rc_text = _read(a / "rc") if a else None
    extravars = None
    ev = _read(record / "env" / "extravars")
    if ev:
        try:
            extravars = json.loads(ev)
        except ValueError:
            extravars = None
    log = log_path(record)
    summary = summarize(
        events, run=record.name,
        command=_read(record / "command.txt"),
        rc=int(rc_text) if rc_text and rc_text.lstrip("-").isdigit() else None,
        status=_read(a / "status") if a else None,
        extravars=extravars,
        log=str(log.relative_to(record)) if log else None,
    )
    if write:
        write_summary(record, summary)
    return summary


def write_summary(record: Path, summary: dict[str, Any]) -> Path:
    path = record / SUMMARY_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# ---- listing -------------------------------------------------------------------------


def is_record(path: Path) -> bool:
    return path.is_dir() and bool(RECORD_RE.match(path.name)) and (path / "artifacts").is_dir()


def records(runs_dir: Path) -> list[Path]:
    """Play records, oldest first (their names start with the time)."""
    if not runs_dir.is_dir():
        return []
    return sorted((p for p in runs_dir.iterdir() if is_record(p)), key=_record_key)


def _record_key(p: Path) -> tuple[str, int]:
    m = RECORD_RE.match(p.name)
    assert m
    return m.group(1), int(m.group(3) or 1)


def row(record: Path) -> dict[str, Any]:
    """One line of ``a3rl runs``. Without a summary the record's own files say what they
    can (the status, the rc, the command) and ``summary`` is False."""
    m = RECORD_RE.match(record.name)
    started = ""
    if m:
        started = datetime.datetime.strptime(m.group(1), "%Y%m%d-%H%M%S").strftime(
            "%Y-%m-%d %H:%M:%S")
    base: dict[str, Any] = {"run": record.name, "started": started, "summary": False}
    path = record / SUMMARY_NAME
    if path.exists():
        try:
            s = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            s = None
        if s:
            return base | {
                "summary": True, "playbook": s.get("playbook") or "", "status": s.get("status"),
                "seconds": s.get("seconds"), "hosts": len(s.get("hosts") or {}),
                "changed": (s.get("counts") or {}).get("changed"),
                "failed": ((s.get("counts") or {}).get("failed") or 0)
                + ((s.get("counts") or {}).get("unreachable") or 0),
                "check": bool(s.get("check")),
                "training": ", ".join(_training_cell(t) for t in s.get("training") or []),
            }
    a = artifact_dir(record)
    command = _read(record / "command.txt") or ""
    words = command.split()
    return base | {
        "playbook": words[1] if len(words) > 1 else (m.group(2) + ".yml" if m else ""),
        # ansible-runner writes the status when the run ends: none yet means it is
        # still running, or was cut short before it could.
        "status": (_read(a / "status") if a else None) or "no result yet",
        "seconds": None, "hosts": None, "changed": None, "failed": None,
        "check": "--check" in words, "training": "",
    }


def resolve(runs_dir: Path, name: str) -> Path:
    """A record from what a person types: its folder name, a path, ``last``, or a unique
    part of its name (``054317``, ``site``: the newest record of that play)."""
    p = Path(name)
    if p.is_dir() and (p / "artifacts").is_dir():
        return p.resolve()
    if (runs_dir / name).is_dir():
        return runs_dir / name
    recs = records(runs_dir)
    if not recs:
        raise RunError(f"no run records under {runs_dir}: run a play with `a3rl` first")
    if name in ("last", "latest"):
        return recs[-1]
    by_play = [r for r in recs if RECORD_RE.match(r.name).group(2) == name.removesuffix(".yml")]
    if by_play:
        return by_play[-1]
    matches = [r for r in recs if name in r.name]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunError(f"no run record matches {name!r} under {runs_dir}; `a3rl runs` "
                       "lists them")
    shown = ", ".join(r.name for r in matches[-5:]) + (", ..." if len(matches) > 5 else "")
    raise RunError(f"{name!r} matches {len(matches)} runs ({shown}); give more of the name")


# ---- the report ----------------------------------------------------------------------


def _secs(s: Any) -> str:
    return human_seconds(s) if isinstance(s, int | float) else "-"


def markdown(record: Path, s: dict[str, Any], slowest: int = 15) -> str:
    """The record's report. The same summary always gives the same text."""
    counts = s.get("counts") or {}
    out = [f"# Run {s.get('run') or record.name}", ""]
    state = f"{s.get('status')} (rc {s.get('rc')})"
    out += markdown_table(["", ""], [
        ["play", f"`{s.get('playbook')}`" + (" (check mode)" if s.get("check") else "")],
        ["status", state],
        ["started", (s.get("started") or "-").replace("T", " ").replace("+00:00", " UTC")],
        ["duration", _secs(s.get("seconds"))],
        ["hosts", ", ".join(sorted(s.get("hosts") or {})) or "-"],
        ["changed / failed / unreachable",
         f"{counts.get('changed', 0)} / {counts.get('failed', 0)} / "
         f"{counts.get('unreachable', 0)}"],
        ["same as", f"`{s.get('command')}`" if s.get("command") else "-"],
        ["full log", f"[{s['log']}]({s['log']})" if s.get("log") else "-"],
    ])
    out += ["", "## Hosts", ""]
    out += markdown_table(["host", "ok", "changed", "failed", "unreachable", "skipped", "tasks",
                   "busy", "first start", "last end"],
                  ([h, v["ok"], v["changed"], v["failed"], v["unreachable"], v["skipped"],
                    v["tasks"], _secs(v["busy_seconds"]), _secs(v["first"]), _secs(v["last"])]
                   for h, v in sorted((s.get("hosts") or {}).items())))
    failures = s.get("failures") or []
    if failures:
        out += ["", "## Failures", ""]
        out += markdown_table(["host", "task", "error", "log line"],
                      ([f["host"], f["task"] + (f" [{f['item']}]" if f.get("item") else ""),
                        f["msg"][:600], f.get("line") or "-"] for f in failures))
    out += ["", "## Timeline", "", f"![timeline per host]({TIMELINE_NAME})", ""]
    plays = s.get("plays") or []
    if plays:
        out += markdown_table(["play", "hosts", "start", "duration"],
                      ([p["play"], p["pattern"], _secs(p["start"]),
                        _secs((p["end"] or 0) - (p["start"] or 0))] for p in plays))
        out.append("")
    tasks = sorted((t for t in s.get("tasks") or [] if t.get("hosts")),
                   key=lambda t: (-(t.get("seconds") or 0), t.get("start") or 0))[:slowest]
    if tasks:
        hosts = sorted(s.get("hosts") or {})
        out += [f"Slowest tasks (wall time across hosts, then each host's; {len(tasks)} of "
                f"{len(s.get('tasks') or [])}):", ""]
        out += markdown_table(["task", "role", "wall", *hosts],
                      ([t["task"], t["role"] or "-", _secs(t["seconds"]),
                        *(f"{_secs(t['hosts'][h]['seconds'])} {t['hosts'][h]['status']}"
                          if h in t["hosts"] else "-" for h in hosts)] for t in tasks))
    transfers = s.get("transfers") or []
    if transfers:
        out += ["", "## Transfers", "",
                "Bytes as the plays report them: the artifact store's files counted as each "
                "one completes, and large single-file copies.", ""]
        out += markdown_table(["host", "task", "kind", "files", "bytes", "seconds", "rate"],
                      ([t["host"], t["task"], t["kind"],
                        f"{t['files']}/{t['files_total']}" if t.get("files_total")
                        else t["files"],
                        human_bytes(t["bytes"]), _secs(t["seconds"]),
                        f"{human_bytes(t['bytes_per_second'])}/s"
                        if t.get("bytes_per_second") else "-"] for t in transfers))
    training = s.get("training") or []
    if training:
        out += ["", "## Training", ""]
        for t in training:
            where = "no step logged" if t.get("step") is None else (
                f"step {t['step']}/{t['total_steps']}" if t.get("total_steps")
                else f"step {t['step']}")
            sim = " (simulated)" if t.get("simulated") else ""
            out += [f"### {t['submission_id']}: {t['status']}, {where}{sim}", ""]
            if t.get("message"):
                out += [f"Ray says: {t['message']}", ""]
            report = training_report(record, t)
            if report is None:
                out += ["The play wrote no training report for this job (see the log).", ""]
                continue
            rel = os.path.relpath(report, record)
            out += [f"Training report: [{rel}]({rel}) (metrics per step beside the "
                    "recipe's published figures).", ""]
            plot = report.parent / "metrics.png"
            if plot.exists():
                prel = os.path.relpath(plot, record)
                out += [f"![metrics over steps]({prel})", ""]
    return "\n".join(out).rstrip() + "\n"


def _training_cell(t: dict[str, Any]) -> str:
    """A job in the ``runs`` table: its id and state, and the run's restarts so far (a
    resumed attempt is <run id>-r<k>: k - 1 restarts)."""
    restarts = checkpointing.attempt_of(t["submission_id"]) - 1
    return f"{t['submission_id']} {t['status']}" + (
        f" ({restarts} restart{'s' if restarts > 1 else ''})" if restarts else "")


def training_report(record: Path, t: dict[str, Any]) -> Path | None:
    # The training play writes runs/<run id>/ into the runs/ folder the record is in; a
    # resumed attempt (<run id>-r<k>) writes into its run's folder.
    report = record.parent / checkpointing.run_id_of(t["submission_id"]) / REPORT_NAME
    return report if report.exists() else None


_COLOURS = {"ok": "tab:green", "changed": "tab:orange", "failed": "tab:red",
            "unreachable": "tab:red", "skipped": "0.85", "ignored": "tab:purple",
            "no result": "tab:blue"}


def timeline(path: Path, s: dict[str, Any], labelled: int = 4) -> None:
    """One lane per host with its tasks as bars (colour = result), the plays above them,
    the longest tasks of each host labelled."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    hosts = sorted(s.get("hosts") or {})
    tasks = s.get("tasks") or []
    total = s.get("seconds") or max((t.get("end") or 0 for t in tasks), default=1.0) or 1.0
    fig = Figure(figsize=(13, 1.6 + 0.7 * (len(hosts) + 1)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    lanes = {h: i for i, h in enumerate(reversed(hosts))}
    play_lane = len(hosts)
    for i, p in enumerate(s.get("plays") or []):
        start, end = p.get("start") or 0, p.get("end") or total
        ax.broken_barh([(start, max(end - start, total / 2000))], (play_lane - 0.35, 0.7),
                       facecolors="0.55" if i % 2 else "0.75")
        if end - start > total / 25:
            ax.text(start + (end - start) / 2, play_lane,
                    _short(p["play"], end - start, total, head=True),
                    ha="center", va="center", fontsize=7, clip_on=True)
    for h in hosts:
        y = lanes[h]
        spans: dict[str, list[tuple[float, float]]] = {}
        mine = []
        for t in tasks:
            v = t.get("hosts", {}).get(h)
            if not v or v.get("start") is None or v.get("end") is None:
                continue
            width = max(v["end"] - v["start"], total / 2000)
            spans.setdefault(v["status"], []).append((v["start"], width))
            mine.append((v["end"] - v["start"], v["start"], t["task"]))
        for status, bars in spans.items():
            ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=_COLOURS.get(status, "tab:gray"),
                           edgecolors="white", linewidth=0.3)
        for secs, start, name in sorted(mine, reverse=True)[:labelled]:
            if secs >= total / 50:
                ax.text(start + secs / 2, y + 0.42, _short(name, secs, total), ha="center",
                        va="bottom", fontsize=6, clip_on=True)
    ax.set_yticks([*lanes.values(), play_lane], [*lanes.keys(), "plays"])
    ax.set_ylim(-0.6, play_lane + 0.6)
    ax.set_xlim(0, total * 1.01)
    ax.set_xlabel("seconds since the run started")
    ax.grid(True, axis="x", alpha=0.3)
    used = sorted({v["status"] for t in tasks for v in t.get("hosts", {}).values()})
    ax.legend(handles=[Patch(color=_COLOURS.get(u, "tab:gray"), label=u) for u in used],
              loc="upper right", fontsize="small", ncols=max(1, len(used)),
              bbox_to_anchor=(1, -0.12 - 0.02 * len(hosts)))
    state = s.get("status")
    fig.suptitle(f"{s.get('playbook')}: {state} in {_secs(s.get('seconds'))}",
                 color="tab:red" if not s.get("ok") else "black")
    fig.savefig(path, format="png")


def _short(text: str, span: float, total: float, head: bool = False) -> str:
    """A label that fits its bar: the component (``head``: plays) or the sentence (tasks)
    of ``Component | Sentence`` when the whole does not fit."""
    # Roughly the characters that fit in the bar's share of a 13-inch axis.
    room = max(6, int(160 * span / total))
    if " | " in text and len(text) > room:
        component, sentence = text.split(" | ", 1)
        text = component if head else sentence
    return text if len(text) <= room else text[: room - 1] + "…"


def render(record: Path) -> tuple[Path, Path]:
    """Write the record's ``report.md`` and ``timeline.png``; return their paths."""
    s = summary_of(record)
    md = record / REPORT_NAME
    png = record / TIMELINE_NAME
    md.write_text(markdown(record, s), encoding="utf-8")
    timeline(png, s)
    return md, png


def fmt_row(r: dict[str, Any]) -> list[str]:
    """A ``runs`` row as table cells."""
    changed = "-" if r.get("changed") is None else str(r["changed"])
    failed = "-" if r.get("failed") is None else str(r["failed"])
    return [r["run"], str(r.get("playbook") or ""),
            str(r.get("status") or "") + (" (check)" if r.get("check") else ""),
            r.get("started") or "", _secs(r.get("seconds")),
            "-" if r.get("hosts") is None else str(r["hosts"]), changed, failed,
            r.get("training") or ("" if r.get("summary") else "(no summary yet)")]


RUNS_HEADER = ("run", "play", "status", "started", "took", "hosts", "changed", "failed",
               "training")
