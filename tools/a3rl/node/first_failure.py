"""Which node broke first: the forensic bundle's summary, across the nodes' reports.

Each node's report (``cluster_ops.py report``) carries its clock at the moment it ran and
the head's clock then (``clock``, ``head_clock``, ``clock_error``): their difference is
the node's offset against the head, known to within ``clock_error``. Error lines are
put on the head's clock by subtracting it; an offset larger than the bound is warned
about, since the order it gives is then less certain.

Error lines, from the logs written since the attempt started, only in the formats Ray
and Python write them (a line that merely holds a date and the word ERROR is not one):

* Ray's own logs (raylet, GCS, core workers): ``[2026-12-05 13:20:01,123 E 1234 5678] ...``
  or, with ``RAY_BACKEND_LOG_JSON=1``, ``{"asctime":"2026-12-05 13:20:01,123",
  "levelname":"E"...``; severity E (error) or C (fatal: spdlog's critical);
* Python logging lines that start with the time and the level, as Ray's own Python logs
  do: ``2026-12-05 13:20:01,123\tERROR worker.py:12 -- ...`` (or CRITICAL);
* a worker's stderr file (``worker-*.err``) that holds a Python traceback has no
  timestamps: it counts at the file's last write, ``mtime`` in the report.

A line forwarded into another log (a driver's ``(WorkerDict pid=7, ip=...) ...``) is
not counted there: it is counted in its own node's file, in that node's zone.

Log times are local times of the node that wrote them: the node's report names its
zone as ``utc_offsets``, ``[[from, seconds east of UTC], ...]`` over the attempt (more
than one when the zone changed, e.g. daylight saving time ended); each line is read at
the offset in force then. A report without a valid zone is read in the head's zone,
with a warning.

A node that Ray marked DEAD during the attempt (its raylet gone: the node, its container
or Ray on it stopped) is named first, before any error line: a dead node cannot log its
own end, and its peers' errors (connections reset, collectives failing) follow from it.
Among several dead nodes the earliest death comes first. Without a death Ray has
recorded yet, a node of the run that did not answer the report (gone from Ray, its
container stopped, unreachable) is named first, for the same reason: Ray takes its
health-check period to mark a node DEAD, and the bundle is often made before that.

Not errors of the run: Ray's dashboard agent failing to forward Ray's own job events to
the dashboard (``event_agent.py:NN -- Report event failed``), logged at ERROR on every
job start and end by the Ray releases whose agent posts to an address without an
``http://`` scheme (ray-project/ray#60811, fixed in 2026-02); it says nothing about the
run and, being the first line of every attempt, would otherwise be named first.
"""

from __future__ import annotations

import calendar
import datetime
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})"
# Ray's C++ logging (ray-project/ray src/ray/util/logging.cc): spdlog with the pattern
# kLogFormatTextPattern "[%Y-%m-%d %H:%M:%S,%e %L %P %t] %v", or kLogFormatJsonPattern
# '{"asctime":"%Y-%m-%d %H:%M:%S,%e","levelname":"%L"%v}' with RAY_BACKEND_LOG_JSON=1;
# %L is spdlog's short level name and GetMappedSeverity maps RAY_LOG(ERROR) to err (E)
# and RAY_LOG(FATAL) to critical (C). spdlog writes local time.
RAY_LINE = re.compile(r"\[" + _STAMP + r" ([EC]) \d+ \d+\] ", re.ASCII)
RAY_JSON = re.compile(r'\{"asctime":"' + _STAMP + r'","levelname":"([EC])"', re.ASCII)
# Ray's Python logging (python/ray/_private/ray_constants.py LOGGER_FORMAT and
# python/ray/_private/log.py): "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s --
# %(message)s", asctime in Python's default "%Y-%m-%d %H:%M:%S,<ms>", local time. A
# space instead of the tab (the usual "%(asctime)s %(levelname)s ...") counts too.
PY_LINE = re.compile(_STAMP + r"[\t ](ERROR|CRITICAL) ", re.ASCII)
TRACEBACK = "Traceback (most recent call last)"
# Ray's own event forwarding failing (the docstring): not the run's error.
NOT_THE_RUNS = re.compile(r"\tERROR event_agent\.py:\d+ -- Report event failed", re.ASCII)
# The job's driver log in the bundle: its last so many characters (a long run's log has
# no bound of its own).
DRIVER_LOG_CHARS = 4 * 1024 * 1024
# Wider than any real zone (UTC-12 to UTC+14).
MAX_OFFSET = 24 * 3600


def zone(offsets: Any) -> list[tuple[float, int]] | None:
    """A report's ``utc_offsets`` checked: ``[(from, offset), ...]`` in time order, or
    None when it is missing or not a list of [time, offset within a day] pairs."""
    try:
        got = sorted((float(t), int(o)) for t, o in offsets)
    except (TypeError, ValueError):
        return None
    if not got or not all(math.isfinite(t) and abs(o) < MAX_OFFSET for t, o in got):
        return None
    return got


def _local(stamp: str, fraction: str, offsets: list[tuple[float, int]] | None) -> float:
    """A node's local log time on its clock (seconds since the epoch): at the offset in
    force then, or in the head's zone without one."""
    when = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    if offsets is None:
        return when.timestamp() + float("0." + fraction)
    wall = calendar.timegm(when.timetuple()) + float("0." + fraction)
    fits = [wall - off for i, (start, off) in enumerate(offsets)
            if (i == 0 or wall - off >= start)
            and (i + 1 == len(offsets) or wall - off < offsets[i + 1][0])]
    # Two fit for a time the change repeated (clocks put back): the earlier offset. None
    # fits only for a time the change skipped (clocks put forward): the latest offset.
    return fits[0] if fits else wall - offsets[-1][1]


def error_lines(path: str, text: str, mtime: float | None = None,
                utc_offsets: Any = None) -> list[dict[str, Any]]:
    """The error lines of one log file (time on the node's clock, the line, its source);
    ``utc_offsets``: the node's zone (``zone``), or None for the head's."""
    offsets = zone(utc_offsets) if utc_offsets is not None else None
    found = []
    for line in text.splitlines():
        got = RAY_LINE.match(line) or RAY_JSON.match(line) or PY_LINE.match(line)
        try:
            when = _local(got.group(1), got.group(2), offsets) if got else None
        except ValueError:  # the format's shape, not a date (month 13, second 61)
            continue
        if when is not None and not NOT_THE_RUNS.search(line):
            found.append({"time": when, "line": line[:400], "source": path})
    if not found and mtime and TRACEBACK in text and path.endswith(".err"):
        last = [line for line in text.splitlines() if line.strip()][-1:]
        found.append({"time": float(mtime), "line": (last[0] if last else TRACEBACK)[:400],
                      "source": path + " (a traceback; its last write)"})
    return found


def tail(text: str, limit: int | None = None) -> str:
    """The last ``limit`` (DRIVER_LOG_CHARS) characters of ``text``, saying how many
    were left out."""
    limit = DRIVER_LOG_CHARS if limit is None else limit
    if len(text) <= limit:
        return text
    return f"(the first {len(text) - limit} characters are left out)\n" + text[-limit:]


# A bundle file's name: an inventory host, or a node's address as Ray lists it.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}", re.ASCII)


def file_name(host: str) -> str:
    """``host`` as a file name in the bundle's folder: as it is when it is a plain name
    or address, else with every other character (``/``, a leading dot) as ``_``."""
    if SAFE_NAME.fullmatch(host):
        return host
    return "_" + re.sub(r"[^A-Za-z0-9._:-]", "_", host[:100])


def _number(value: Any) -> float | None:
    try:
        got = float(value)
    except (TypeError, ValueError):
        return None
    return got if math.isfinite(got) else None


def offset(report: Mapping[str, Any]) -> float | None:
    """The node's clock minus the head's, or None when the report has no clocks (or
    ones that are not numbers)."""
    clock, head = _number(report.get("clock")), _number(report.get("head_clock"))
    return None if clock is None or head is None else clock - head


def summarize(reports: Mapping[str, Mapping[str, Any]], dead: Sequence[Mapping[str, Any]],
              expected: Iterable[str], since: float, bound: float = 1.0,
              keep: int = 20) -> dict[str, Any]:
    """The bundle's summary: ``first`` (host, time on the head's clock, line, source),
    the earliest ``events``, each node's clock ``offsets``, and ``warnings`` (an offset
    above ``bound`` seconds, a node that did not report)."""
    expected = set(expected)
    warnings: list[str] = []
    offsets: dict[str, float | None] = {}
    events: list[dict[str, Any]] = []
    silent: list[dict[str, Any]] = []
    for host, report in sorted(reports.items()):
        if report.get("error"):
            warnings.append(f"{host} did not report: {report['error']}")
            if host in expected:
                silent.append({"host": host, "time": None,
                               "source": "the supervisor's report",
                               "line": f"did not answer the report: {report['error']}"})
            continue
        off = offset(report)
        offsets[host] = off
        if off is not None and abs(off) > bound:
            warnings.append(f"{host}'s clock is {off:+.1f} s off the head's (more than "
                            f"{bound:g} s, within {float(report.get('clock_error') or 0):.1f} "
                            "s): the order across nodes is less certain")
        zone_of = zone(report.get("utc_offsets"))
        if zone_of is None:
            warnings.append(f"{host} did not report its time zone (utc_offsets): its log "
                            "times are read in the head's zone")
        mtimes = report.get("mtimes") if isinstance(report.get("mtimes"), dict) else {}
        logs = report.get("logs") if isinstance(report.get("logs"), dict) else {}
        for path, text in sorted(logs.items()):
            if not isinstance(text, str):
                continue
            for e in error_lines(str(path), text, _number(mtimes.get(path)), zone_of):
                t = e["time"] - (off or 0.0)
                if t >= since:
                    events.append({"host": host, **e, "time": t})
    for host in sorted(set(expected) - set(reports)):
        warnings.append(f"{host} did not report (not live in Ray when the bundle was made)")
        silent.append({"host": host, "time": None, "source": "the supervisor's report",
                       "line": "did not answer the report (not live in Ray)"})
    events.sort(key=lambda e: e["time"])
    deaths = sorted(({"host": d["host"], "time": float(d["time"]),
                      "line": f"Ray marked the node DEAD: {d.get('why') or ''}".strip(),
                      "source": "the head's node list"} for d in dead),
                    key=lambda e: e["time"])
    first = (deaths or sorted(silent, key=lambda e: e["host"]) or events or [None])[0]
    when = f" at {_clock(first['time'])}" if first and first["time"] is not None else ""
    return {"first": first, "deaths": deaths, "silent": silent, "events": events[:keep],
            "offsets": offsets, "warnings": warnings,
            "line": (f"first failure: {first['host']}{when} ({first['line'][:200]})")
            if first else "no error line and no dead node found"}


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
