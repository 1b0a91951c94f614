"""Live progress of a play, shown from the fold of its events (:mod:`a3rl.controller.fold`).

Two displays read the fold: ``LiveDisplay`` redraws one line per host, a bar per
transfer and the job's progress with rich (a terminal); ``PlainDisplay`` prints one line
per event, without colour or redraws (CI logs, pipes); ``NullDisplay`` shows nothing
(``-q``) and still feeds the fold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any

from a3rl.controller.fold import (
    TERMINAL_JOB_STATES,
    Tracker,
    event_time,
    human_bytes,
    human_seconds,
)


class PlainDisplay:
    """One line per event, no colour and no redraws: for CI logs and pipes.

    Each line starts with the time since the run started. Host results are indented
    under their task; a followed job prints a line when its state or step changes.
    """

    KINDS = ("play", "task", "result", "item", "retry", "transfer", "train", "message",
             "failure")

    def __init__(self, stream: IO[str], tracker: Tracker,
                 clock: Callable[[], float] = time.time) -> None:
        self.stream, self.tracker, self.clock = stream, tracker, clock
        self.t0: float | None = None

    def __enter__(self) -> PlainDisplay:
        self.t0 = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.flush()

    def event(self, event: dict) -> None:
        for n in self.tracker.feed(event):
            if n.kind not in self.KINDS:
                continue
            stamp = self._stamp(event)
            indent = "" if n.kind in ("play", "task") else "  "
            for i, line in enumerate(n.text.splitlines() or [""]):
                self.stream.write(f"{stamp} {indent}{'' if i == 0 else '  '}{line}\n")
        self.stream.flush()

    def _stamp(self, event: dict) -> str:
        when = event_time(event)
        start = self.tracker.started if self.tracker.started is not None else self.t0
        s = (when - start) if (when is not None and start is not None) else 0.0
        m, sec = divmod(int(max(0.0, s)), 60)
        return f"[{m:3d}:{sec:02d}]"


class LiveDisplay:
    """A rich Live view: one line per host, a bar per transfer, the followed job.

    Host results are not printed one by one; debug messages, failures and the job's
    state changes are printed above the live area, so they stay in the scrollback.
    """

    SHOWN_FINISHED_TRANSFERS = 3

    def __init__(self, console: Any, tracker: Tracker,
                 clock: Callable[[], float] = time.time) -> None:
        self.console, self.tracker, self.clock = console, tracker, clock
        self.live: Any = None
        self.t0 = clock()

    def __enter__(self) -> LiveDisplay:
        from rich.live import Live

        self.t0 = self.clock()
        self.live = Live(self, console=self.console, refresh_per_second=4, transient=True,
                         redirect_stdout=False, redirect_stderr=False)
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def event(self, event: dict) -> None:
        for n in self.tracker.feed(event):
            if n.kind == "play":
                self.console.print(f"[bold]{_escape(n.text)}[/bold]")
            elif n.kind == "message":
                self.console.print(f"[cyan]{_escape(n.text)}[/cyan]")
            elif n.kind == "failure":
                self.console.print(f"[red]{_escape(n.text)}[/red]")
            elif n.kind == "train":
                self.console.print(f"[magenta]job[/magenta] {_escape(n.text)}")

    def __rich__(self) -> Any:
        # Drawn by rich's refresh thread: an error here would end that thread and freeze
        # the view for the rest of the run, so it is shown instead.
        try:
            with self.tracker.lock:
                return self.render(self.clock())
        except Exception as exc:  # noqa: BLE001
            from rich.text import Text

            return Text(f"(the progress view failed to draw: {type(exc).__name__}: {exc})")

    def render(self, now: float) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.spinner import Spinner
        from rich.table import Table
        from rich.text import Text

        t = self.tracker
        head = Text.assemble(
            (t.playbook or "play", "bold"), "  ", (t.play or "", "dim"),
            f"  {t.tasks_started} task(s), {len(t.failures)} failure(s), "
            f"{human_seconds(now - self.t0)}")
        hosts = Table(box=None, show_header=False, pad_edge=False, expand=False)
        hosts.add_column(width=2)
        hosts.add_column(style="bold", no_wrap=True)
        hosts.add_column(no_wrap=True)
        hosts.add_column(overflow="ellipsis", no_wrap=True, max_width=90)
        hosts.add_column(justify="right", no_wrap=True)
        for h in t.hosts.values():
            mark: Any = _STATE_MARKS.get(h.state, " ")
            if h.state in ("running", "retrying", "following"):
                mark = Spinner("dots", style="cyan")
            task = h.task + (f" [{h.item}]" if h.item else "")
            since = human_seconds(now - h.since) if h.since else ""
            state = h.state if h.retries_left is None else f"{h.state} ({h.retries_left} left)"
            # Text, not str: a task or an item may hold brackets ("[/data/...]") that rich
            # would read as markup.
            hosts.add_row(mark, Text(h.name), Text(state, style=_STATE_STYLES.get(h.state, "")),
                          Text(task), Text(since))
        parts: list[Any] = [head, hosts]
        active = [x for x in t.transfers.values() if not x.finished]
        done = [x for x in t.transfers.values() if x.finished][-self.SHOWN_FINISHED_TRANSFERS:]
        if active or done:
            bars = Table(box=None, show_header=False, pad_edge=False)
            for _ in range(4):
                bars.add_column(no_wrap=True)
            for x in done + active:
                # A finished fetch (its total was never announced) shows as a full bar.
                total = x.bytes_total or (x.bytes_done if x.finished else None) or None
                files = f"{x.files_done}/{x.files_total} files" if x.files_total \
                    else f"{x.files_done} files"
                size = human_bytes(x.bytes_done) + (f" / {human_bytes(total)}" if total else "")
                rate = f"{human_bytes(x.rate)}/s" if x.rate else ""
                bars.add_row(Text(f"{x.host} {x.kind}"),
                             ProgressBar(total=total, completed=x.bytes_done, width=30,
                                         pulse=total is None and not x.finished),
                             Text(f"{files}  {size}"), Text(rate))
            parts += [Text("transfers", style="dim"), bars]
        for tr in t.training.values():
            bar = ProgressBar(total=tr.total_steps or None, completed=tr.step or 0, width=30,
                              pulse=not tr.total_steps and tr.status not in TERMINAL_JOB_STATES)
            grid = Table(box=None, show_header=False, pad_edge=False)
            grid.add_column(no_wrap=True)
            grid.add_column(no_wrap=True)
            grid.add_column(overflow="fold")
            where = "no step logged yet" if tr.step is None else (
                f"step {tr.step}/{tr.total_steps}" if tr.total_steps else f"step {tr.step}")
            grid.add_row(Text(f"job {tr.submission_id}"), bar,
                         Text(f"{tr.status}  {where}" + ("  (simulated)" if tr.simulated else "")))
            metrics = "  ".join(f"{k}={v:.4g}" for k, v in tr.shown_metrics(6))
            if metrics:
                grid.add_row("", "", Text(metrics))
            parts.append(grid)
        return Group(*parts)


_STATE_MARKS = {"ok": "✓", "changed": "✓", "skipped": "-", "failed": "✗",
                "unreachable": "✗", "waiting": " ", "failed (ignored)": "!"}
_STATE_STYLES = {"ok": "green", "changed": "yellow", "skipped": "dim", "failed": "red",
                 "unreachable": "red", "running": "cyan", "retrying": "cyan",
                 "following": "magenta"}


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class NullDisplay:
    """No progress at all (``-q``): the events still feed the tracker."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def __enter__(self) -> NullDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def event(self, event: dict) -> None:
        self.tracker.feed(event)


def wants_live(stream: Any, env: dict[str, str]) -> bool:
    """A live view only on a terminal that can redraw (not TERM=dumb, not CI)."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return False
    return env.get("TERM", "") != "dumb" and not env.get("CI")
