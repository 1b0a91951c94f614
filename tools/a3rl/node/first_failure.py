"""Which node broke first: the forensic bundle's summary, across the nodes' reports.

Each node's report (``cluster_ops.py report``) carries its clock at the moment it ran and
the head's clock then (``clock``, ``head_clock``, ``clock_error``): their difference is
the node's offset against the head, known to within ``clock_error``. Error lines are
put on the head's clock by subtracting it; an offset larger than the bound is warned
about, since the order it gives is then less certain.

Error lines, from the logs written since the attempt started:

* Ray's own logs (raylet, GCS, core workers): ``[2026-12-05 13:20:01,123 E 1234 5678] ...``,
  severity E (error) or F (fatal), in the node's local time;
* Python logging lines with a timestamp and ``ERROR``/``CRITICAL``;
* a worker's stderr file (``worker-*.err``) that holds a Python traceback has no
  timestamps: it counts at the file's last write, ``mtime`` in the report.

A node that Ray marked DEAD during the attempt (its raylet gone: the node, its container
or Ray on it stopped) is named first, before any error line: a dead node cannot log its
own end, and its peers' errors (connections reset, collectives failing) follow from it.
Among several dead nodes the earliest death comes first.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

RAY_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ([EF]) ")
PY_LINE = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[,.](\d{1,6}))?.{0,40}?"
                     r"\b(ERROR|CRITICAL)\b")
TRACEBACK = "Traceback (most recent call last)"


def _local(stamp: str, fraction: str | None) -> float:
    when = datetime.datetime.strptime(stamp.replace("T", " "), "%Y-%m-%d %H:%M:%S")
    return when.timestamp() + (float("0." + fraction) if fraction else 0.0)


def error_lines(path: str, text: str, mtime: float | None = None) -> list[dict[str, Any]]:
    """The error lines of one log file (time on the node's clock, the line, its source)."""
    found = []
    for line in text.splitlines():
        ray = RAY_LINE.match(line)
        if ray:
            found.append({"time": _local(ray.group(1), ray.group(2)), "line": line[:400],
                          "source": path})
            continue
        py = PY_LINE.search(line)
        if py:
            found.append({"time": _local(py.group(1), py.group(2)), "line": line[:400],
                          "source": path})
    if not found and mtime and TRACEBACK in text and path.endswith(".err"):
        last = [line for line in text.splitlines() if line.strip()][-1:]
        found.append({"time": float(mtime), "line": (last[0] if last else TRACEBACK)[:400],
                      "source": path + " (a traceback; its last write)"})
    return found


def offset(report: Mapping[str, Any]) -> float | None:
    """The node's clock minus the head's, or None when the report has no clocks."""
    if report.get("clock") is None or report.get("head_clock") is None:
        return None
    return float(report["clock"]) - float(report["head_clock"])


def summarize(reports: Mapping[str, Mapping[str, Any]], dead: Sequence[Mapping[str, Any]],
              expected: Iterable[str], since: float, bound: float = 1.0,
              keep: int = 20) -> dict[str, Any]:
    """The bundle's summary: ``first`` (host, time on the head's clock, line, source),
    the earliest ``events``, each node's clock ``offsets``, and ``warnings`` (an offset
    above ``bound`` seconds, a node that did not report)."""
    warnings: list[str] = []
    offsets: dict[str, float | None] = {}
    events: list[dict[str, Any]] = []
    for host, report in sorted(reports.items()):
        if report.get("error"):
            warnings.append(f"{host} did not report: {report['error']}")
            continue
        off = offset(report)
        offsets[host] = off
        if off is not None and abs(off) > bound:
            warnings.append(f"{host}'s clock is {off:+.1f} s off the head's (more than "
                            f"{bound:g} s, within {float(report.get('clock_error') or 0):.1f} "
                            "s): the order across nodes is less certain")
        mtimes = report.get("mtimes") or {}
        for path, text in sorted((report.get("logs") or {}).items()):
            for e in error_lines(path, text, mtimes.get(path)):
                t = e["time"] - (off or 0.0)
                if t >= since:
                    events.append({"host": host, **e, "time": t})
    for host in sorted(set(expected) - set(reports)):
        warnings.append(f"{host} did not report (not live in Ray when the bundle was made)")
    events.sort(key=lambda e: e["time"])
    deaths = sorted(({"host": d["host"], "time": float(d["time"]),
                      "line": f"Ray marked the node DEAD: {d.get('why') or ''}".strip(),
                      "source": "the head's node list"} for d in dead),
                    key=lambda e: e["time"])
    first = deaths[0] if deaths else (events[0] if events else None)
    return {"first": first, "deaths": deaths, "events": events[:keep], "offsets": offsets,
            "warnings": warnings,
            "line": (f"first failure: {first['host']} at {_clock(first['time'])} "
                     f"({first['line'][:200]})") if first else
            "no error line and no dead node found"}


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
