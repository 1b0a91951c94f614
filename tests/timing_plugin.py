"""Where the suite's time goes: seconds per test module and per pytest-xdist worker,
printed at the end of every run (setup, call and teardown summed). Module fixtures run in
a module's first test, so a module's line includes the site.yml it provisions with; a
worker's total is its share of the wall time. This is what the order in
tests/integration/conftest.py (``_ORDER``) is tuned with."""

from __future__ import annotations

from collections import defaultdict

_SECONDS: dict[tuple[str, str], float] = defaultdict(float)


def record(report) -> None:
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", None) or "main"
    module = report.nodeid.split("::", 1)[0]
    _SECONDS[(worker, module)] += report.duration


def summary_lines(seconds: dict[tuple[str, str], float] | None = None) -> list[str]:
    seconds = _SECONDS if seconds is None else seconds
    workers: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for (worker, module), s in seconds.items():
        workers[worker].append((s, module))
    lines = []
    for worker in sorted(workers):
        rows = workers[worker]
        if sum(s for s, _ in rows) < 1:
            continue
        lines.append(f"{worker}: {sum(s for s, _ in rows):.0f} s in {len(rows)} module(s)")
        # Modules in the order they ran would need start times; slowest first is enough
        # to see what to move.
        for s, module in sorted(rows, reverse=True):
            if s >= 1:
                lines.append(f"  {s:7.0f} s  {module}")
    return lines
