"""The fold of a play's events into its state: what a run did, host by host.

``Tracker`` turns ansible-runner's event stream into state: per host its current task
and result, the failures, the byte transfers the artifact store reports, and a followed
training job's step and metrics. It is pure (no terminal, no clock of its own), so the
same fold serves the live displays while a play runs (:mod:`a3rl.controller.progress`) and the
summary of a recorded run afterwards (``replay``, :mod:`a3rl.controller.runs`).

Where the numbers come from (nothing here is invented):
- transfers: the artifact store's ``a3rl_artifact_files`` result says, per node, which
  files it still needs (``needed``) and how many bytes will arrive (``incoming_bytes``);
  the ``set_fact`` of ``artifact_store_files`` gives each file's size. Each loop item of
  the send task that names a needed file is one file arrived. ``a3rl_artifact``'s fetch
  results (``action: fetched``) carry the fetched files' sizes. Modules report when a
  file is complete, so a bar moves file by file, not within a file.
- training: the follow task's until-loop result carries ``job`` (Ray's job record) and
  ``progress`` (``step``, ``total_steps``, ``metrics`` of the latest step).
"""

from __future__ import annotations

import datetime
import math
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Event names ansible-runner gives host results.
RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
}
ITEM_EVENTS = {
    "runner_item_on_ok": "ok",
    "runner_item_on_failed": "failed",
    "runner_item_on_skipped": "skipped",
}
TASK_START_EVENTS = ("playbook_on_task_start", "playbook_on_handler_task_start")
# What a failed loop's own result says once its items have said why.
_ITEMS_FAILED = "One or more items failed"
# Metrics shown first for a followed job (verl's console names), when the job logs them.
SHOWN_METRICS = (
    "perf/throughput",
    "timing_s/step",
    "timing_s/generate_sequences",
    "timing_s/gen",
    "critic/score/mean",
    "response_length/mean",
    "perf/time_per_step",
)
TERMINAL_JOB_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
# A copy (ansible.builtin.copy) this large counts as a transfer in the summary.
LARGE_COPY = 1_000_000


def event_time(event: dict) -> float | None:
    """Seconds since the epoch when ansible-runner made the event (its ``created``)."""
    created = event.get("created")
    if not created:
        return None
    try:
        return datetime.datetime.fromisoformat(created).timestamp()
    except ValueError:
        return None


def iso_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def human_bytes(n: float | None) -> str:
    """Bytes in decimal units, as rsync and ModelScope print them (``834.5 kB``)."""
    if n is None:
        return "?"
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def human_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f}s" if s < 10 else f"{s:.0f}s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _tail(text: Any, lines: int) -> str:
    parts = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return "\n".join(parts[-lines:])


def error_text(res: Any, max_lines: int = 8) -> str:
    """What a failed result says: its ``msg``, then the last lines of its stderr (or of the
    module's own output when the module crashed, or of stdout when there is nothing else)."""
    if not isinstance(res, dict):
        return str(res)
    parts: list[str] = []
    msg = res.get("msg")
    if isinstance(msg, list):
        msg = "\n".join(str(m) for m in msg)
    if msg and not (msg == "non-zero return code" and (res.get("stderr") or res.get("stdout"))):
        parts.append(str(msg).strip())
    if msg == "non-zero return code":
        cmd = res.get("cmd")
        parts.append(f"command failed with rc {res.get('rc')}: "
                     f"{' '.join(cmd) if isinstance(cmd, list) else cmd}")
    for key in ("stderr", "module_stderr", "module_stdout"):
        text = res.get(key)
        if text and str(text).strip() and str(text).strip() not in "\n".join(parts):
            parts.append(_tail(text, max_lines))
            break
    else:
        if not parts and res.get("stdout"):
            parts.append(_tail(res["stdout"], max_lines))
    if not parts and isinstance(res.get("results"), list):
        for item in res["results"]:
            if isinstance(item, dict) and item.get("failed"):
                parts.append(error_text(item, max_lines))
    if not parts and res.get("censored"):
        parts.append(str(res["censored"]))
    return "\n".join(p for p in parts if p) or "(the result says nothing more)"


def item_label(data: dict) -> str:
    res = data.get("res") if isinstance(data.get("res"), dict) else {}
    label = res.get("_ansible_item_label", res.get("item", data.get("item")))
    if isinstance(label, dict | list):
        import json

        label = json.dumps(label, sort_keys=True)
    return "" if label is None else str(label)


@dataclass
class Failure:
    host: str
    task: str
    msg: str
    item: str = ""
    role: str = ""
    task_path: str = ""
    line: int | None = None  # first line of this result in the run's stdout log

    def as_tuple(self) -> tuple[str, str, str]:
        return self.host, self.task, self.msg


@dataclass
class HostState:
    name: str
    task: str = ""
    state: str = "waiting"  # running, retrying, ok, changed, failed, skipped, unreachable
    item: str = ""
    since: float | None = None
    retries_left: int | None = None
    done: int = 0  # results
    changed: int = 0
    failed: int = 0


@dataclass
class Transfer:
    """Bytes moving for one host in one task: ``send`` to a node or ``fetch`` into a store."""

    host: str
    task: str
    kind: str
    started: float | None
    files_total: int | None = None
    bytes_total: int | None = None
    files_done: int = 0
    bytes_done: int = 0
    updated: float | None = None
    last_file: str = ""
    finished: bool = False

    @property
    def seconds(self) -> float | None:
        if self.started is None or self.updated is None:
            return None
        return max(0.0, self.updated - self.started)

    @property
    def rate(self) -> float | None:
        s = self.seconds
        return self.bytes_done / s if s else None

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "task": self.task, "kind": self.kind,
                "files": self.files_done, "files_total": self.files_total,
                "bytes": self.bytes_done, "bytes_total": self.bytes_total,
                "seconds": None if self.seconds is None else round(self.seconds, 3),
                "bytes_per_second": None if self.rate is None else round(self.rate, 1)}


@dataclass
class Training:
    """A followed Ray job, as the follow task's last poll saw it."""

    host: str
    submission_id: str
    status: str = ""
    message: str = ""
    step: int | None = None
    total_steps: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    simulated: bool = False
    polls: int = 0
    updated: float | None = None

    def shown_metrics(self, limit: int = 4) -> list[tuple[str, float]]:
        finite = {k: v for k, v in self.metrics.items()
                  if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
        keys = [k for k in SHOWN_METRICS if k in finite]
        if "timing_s/generate_sequences" in finite and "timing_s/gen" in keys:
            keys.remove("timing_s/gen")  # the same phase, as older verl names it
        return [(k, finite[k]) for k in keys[:limit]]

    def line(self) -> str:
        """``a3rl-grpo-...: RUNNING, step 3/20, perf/throughput=118.5 ...``"""
        head = f"{self.submission_id}: {self.status or '?'}"
        if self.step is None:
            where = "no step logged yet"
        else:
            where = f"step {self.step}/{self.total_steps}" if self.total_steps else \
                f"step {self.step}"
        shown = " ".join(f"{k}={v:.4g}" for k, v in self.shown_metrics())
        tail = " (simulated)" if self.simulated else ""
        return f"{head}, {where}" + (f", {shown}" if shown else "") + tail

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "submission_id": self.submission_id, "status": self.status,
                "message": self.message, "step": self.step, "total_steps": self.total_steps,
                "metrics": dict(self.metrics), "simulated": self.simulated,
                "polls": self.polls}


@dataclass
class Notice:
    """Something worth a line of its own: ``kind`` is play, task, result, item, retry,
    transfer, train, message or failure."""

    kind: str
    text: str
    host: str = ""


class Tracker:
    """The state of a play, from its events in order (one call of ``feed`` per event)."""

    def __init__(self, playbook: str = "") -> None:
        self.playbook = playbook
        self.play = ""
        self.task = ""
        self.hosts: dict[str, HostState] = {}
        self.failures: list[Failure] = []
        self.transfers: dict[tuple[str, str], Transfer] = {}
        self.training: dict[str, Training] = {}
        self.reports: list[dict[str, Any]] = []  # training reports the play wrote
        self.started: float | None = None
        self.ended: float | None = None
        self.last_time: float | None = None
        self.stats: dict[str, dict[str, int]] = {}
        self.tasks_started = 0
        self._sizes: dict[str, int] = {}
        self._needed: dict[str, tuple[set[str], int]] = {}
        self._item_failures: set[tuple[str, str]] = set()
        self._task_start: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()

    # ---- feeding ---------------------------------------------------------------------

    def feed(self, event: dict) -> list[Notice]:
        with self.lock:
            return self._feed(event)

    def _feed(self, event: dict) -> list[Notice]:
        name = event.get("event", "")
        data = event.get("event_data") or {}
        when = event_time(event)
        if when is not None:
            self.last_time = when
            if self.started is None:
                self.started = when
        host = data.get("host")
        if not host:
            return self._on_play_event(name, data, when)
        task = str(data.get("task") or "")
        key = (host, str(data.get("task_uuid") or task))
        hs = self.hosts.setdefault(host, HostState(host))
        if name == "runner_on_start":
            hs.task, hs.state, hs.item, hs.since, hs.retries_left = task, "running", "", when, None
            self._task_start[key] = when or 0.0
            return []
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        notices = self._learn(host, task, key, name, data, res, when)
        if name == "runner_retry":
            return notices + self._on_retry(hs, task, res)
        if name in ITEM_EVENTS:
            return notices + self._on_item(hs, task, key, name, data, res, event, notices)
        if name in RESULT_EVENTS:
            return notices + self._on_result(hs, task, key, name, data, res, event, when)
        return notices

    def _on_play_event(self, name: str, data: dict, when: float | None) -> list[Notice]:
        """The events of the play itself (no host): its start, its plays, tasks, stats."""
        if name == "playbook_on_start":
            self.playbook = self.playbook or str(data.get("playbook", ""))
        elif name == "playbook_on_play_start":
            self.play = str(data.get("play") or data.get("name") or "")
            return [Notice("play", f"PLAY {self.play} [{data.get('play_pattern', '')}]")]
        elif name in TASK_START_EVENTS:
            self.task = str(data.get("task") or data.get("name") or "")
            self.tasks_started += 1
            prefix = "HANDLER" if name == "playbook_on_handler_task_start" else "TASK"
            return [Notice("task", f"{prefix} {self.task}")]
        elif name == "playbook_on_stats":
            self.ended = when
            self.stats = {k: dict(v) for k, v in data.items()
                          if k in ("ok", "changed", "failures", "dark", "skipped", "processed",
                                   "rescued", "ignored") and isinstance(v, dict)}
        return []

    def _on_retry(self, hs: HostState, task: str, res: dict) -> list[Notice]:
        """An until-loop's retry: a followed job (quiet) or a task trying again."""
        tries, attempts = res.get("retries"), res.get("attempts")
        left = tries - attempts if isinstance(tries, int) and isinstance(attempts, int) \
            else None
        following = isinstance(res.get("progress"), dict)
        hs.state, hs.retries_left = ("following", None) if following else ("retrying", left)
        # A followed job says something only when its state or step changes.
        if following:
            return []
        note = "" if left is None else f" ({left} left)"
        why = _first_line(error_text(res)) if res.get("msg") else task
        return [Notice("retry", f"{hs.name} retrying{note}: {why}", hs.name)]

    def _on_item(self, hs: HostState, task: str, key: tuple[str, str], name: str,
                 data: dict, res: dict, event: dict, learned: list[Notice]) -> list[Notice]:
        """One loop item's result (a transfer already said by ``learned`` is not repeated)."""
        label = item_label(data)
        hs.item = label
        state = ITEM_EVENTS[name]
        if state == "ok" and res.get("changed"):
            state = "changed"
        if state == "failed" and not data.get("ignore_errors"):
            self._item_failures.add((hs.name, key[1]))
            self._fail(hs.name, task, data, res, event, label)
            return [Notice("failure", f"{hs.name} FAILED [{label}]: "
                           f"{_first_line(error_text(res))}", hs.name)]
        if any(n.kind == "transfer" for n in learned):
            return []
        return [Notice("item", f"{hs.name} {state} [{label}]", hs.name)]

    def _on_result(self, hs: HostState, task: str, key: tuple[str, str], name: str,
                   data: dict, res: dict, event: dict, when: float | None) -> list[Notice]:
        """A task's result on one host: its state, a failure, a debug message."""
        host = hs.name
        state = RESULT_EVENTS[name]
        if state == "ok" and res.get("changed"):
            state = "changed"
        if state == "failed" and data.get("ignore_errors"):
            state = "failed (ignored)"
        hs.state, hs.since, hs.retries_left = state, when, None
        hs.done += 1
        hs.changed += state == "changed"
        t = self.transfers.get(key)
        if t:
            t.finished = True
            t.updated = when or t.updated
        if state in ("failed", "unreachable"):
            hs.failed += 1
            # A failed loop's own result repeats what its items already said.
            items_said = ((host, key[1]) in self._item_failures
                          and str(res.get("msg", "")).startswith(_ITEMS_FAILED))
            if items_said:
                return []
            self._fail(host, task, data, res, event)
            word = "UNREACHABLE" if state == "unreachable" else "FAILED"
            return [Notice("failure", f"{host} {word}: {_first_line(error_text(res))}", host)]
        dur = data.get("duration")
        took = f" ({human_seconds(dur)})" if isinstance(dur, int | float) and dur >= 1 else ""
        return [Notice("result", f"{host} {state}{took}", host)] + self._messages(host, data, res)

    def _fail(self, host: str, task: str, data: dict, res: dict, event: dict,
              item: str = "") -> None:
        line = event.get("start_line")
        self.failures.append(Failure(
            host=host, task=task, msg=error_text(res)[:4000], item=item,
            role=str(data.get("role") or ""), task_path=str(data.get("task_path") or ""),
            line=(line + 1) if isinstance(line, int) else None))

    def _messages(self, host: str, data: dict, res: dict) -> list[Notice]:
        """What a ``debug`` task says, as ansible-playbook would show it."""
        action = str(data.get("resolved_action") or data.get("task_action") or "")
        if not action.endswith("debug") or "msg" not in res:
            return []
        msg = res["msg"]
        text = "\n".join(str(m) for m in msg) if isinstance(msg, list) else str(msg)
        # Most of the project's messages already start with the host's name.
        said = text if text.startswith(f"{host}:") else f"{host}: {text}"
        return [Notice("message", said, host)]

    def _learn(self, host: str, task: str, key: tuple[str, str], name: str, data: dict,
               res: dict, when: float | None) -> list[Notice]:
        """Byte counts and a followed job's progress from the results that carry them."""
        notices: list[Notice] = []
        # File sizes: from a fact that lists files ({path, size}), or from the files a
        # module was handed (a3rl_artifact_files' own arguments).
        lists = []
        facts = res.get("ansible_facts")
        if isinstance(facts, dict):
            lists += [v for v in facts.values() if isinstance(v, list)]
        args = (res.get("invocation") or {}).get("module_args")
        if isinstance(args, dict) and isinstance(args.get("files"), list):
            lists.append(args["files"])
        for value in lists:
            for f in value:
                if isinstance(f, dict) and isinstance(f.get("path"), str) \
                        and isinstance(f.get("size"), int):
                    self._sizes[f["path"]] = f["size"]
        if isinstance(res.get("needed"), list) and isinstance(res.get("incoming_bytes"), int):
            self._needed[host] = ({str(p) for p in res["needed"]}, res["incoming_bytes"])
        if isinstance(res.get("report"), str) and res.get("report", "").endswith(".md") \
                and "steps" in res:
            self.reports.append({"host": host, "report": os.path.normpath(res["report"]),
                                 "steps": res.get("steps")})
        if isinstance(res.get("progress"), dict) and isinstance(res.get("job"), dict):
            notices += self._follow(host, res, when)
        if name not in ITEM_EVENTS or name == "runner_item_on_skipped":
            return self._copied(host, task, key, name, data, res, when, notices)
        item = item_label(data)
        raw_item = res.get("item", data.get("item"))
        needed, incoming = self._needed.get(host, (set(), 0))
        started = self._task_start.get(key)
        if isinstance(raw_item, str) and raw_item in needed and name == "runner_item_on_ok":
            t = self.transfers.get(key)
            if t is None:
                known = [self._sizes.get(p) for p in needed]
                total = sum(known) if all(isinstance(k, int) for k in known) else incoming
                t = self.transfers[key] = Transfer(host, task, "send", started,
                                                   files_total=len(needed), bytes_total=total)
            t.files_done += 1
            t.bytes_done += self._sizes.get(raw_item, 0)
            if t.files_done == t.files_total and t.bytes_total:
                t.bytes_done = t.bytes_total  # all arrived, whatever sizes were not known
            t.updated, t.last_file = when, raw_item
            notices.append(Notice("transfer", self._transfer_line(t), host))
        entry = res.get("entry")
        if res.get("action") == "fetched" and isinstance(entry, dict) \
                and isinstance(entry.get("files"), list):
            t = self.transfers.get(key)
            if t is None:
                t = self.transfers[key] = Transfer(host, task, "fetch", started)
            size = sum(f.get("size", 0) for f in entry["files"]
                       if isinstance(f, dict) and isinstance(f.get("size"), int))
            t.files_done += len(entry["files"])
            t.bytes_done += size
            t.updated, t.last_file = when, item
            notices.append(Notice("transfer", self._transfer_line(t), host))
        return notices

    def _copied(self, host: str, task: str, key: tuple[str, str], name: str, data: dict,
                res: dict, when: float | None, notices: list[Notice]) -> list[Notice]:
        """Transfers known only once they are done (for their bytes and rate): one large
        file copied to a node (the training image's archive), a stream into a chain."""
        if name == "runner_on_ok" and isinstance(res.get("sent"), int) and res["sent"] > 0 \
                and isinstance(res.get("seconds"), int | float) and "error" in res:
            # A stream sent once into a chain of nodes (a3rl_fanout_send): its bytes and
            # time, once it is done.
            end = when or 0.0
            args = (res.get("invocation") or {}).get("module_args") or {}
            files = len(args["files"]) if isinstance(args.get("files"), list) else 0
            t = self.transfers[key] = Transfer(
                host, task, "chain", end - float(res["seconds"]), files_total=files or None,
                files_done=files, bytes_total=res["sent"], bytes_done=res["sent"], updated=end,
                last_file="the chain" + (f" (broke: {res['error']})" if res["error"] else ""))
            notices.append(Notice("transfer", self._transfer_line(t), host))
        if name == "runner_on_ok" and res.get("changed") \
                and str(data.get("resolved_action") or "").endswith(".copy") \
                and isinstance(res.get("size"), int) and res["size"] >= LARGE_COPY:
            t = self.transfers[key] = Transfer(
                host, task, "copy", self._task_start.get(key), files_total=1,
                bytes_total=res["size"], files_done=1, bytes_done=res["size"], updated=when,
                last_file=str(res.get("dest") or ""))
            notices.append(Notice("transfer", self._transfer_line(t), host))
        return notices

    def _follow(self, host: str, res: dict, when: float | None) -> list[Notice]:
        job, prog = res["job"], res["progress"]
        sid = str(job.get("submission_id") or job.get("job_id") or "job")
        tr = self.training.get(sid)
        if tr is None:
            tr = self.training[sid] = Training(host, sid)
        before = tr.line()
        tr.status = str(job.get("status") or "")
        tr.message = str(job.get("message") or "")
        step, total = prog.get("step"), prog.get("total_steps")
        tr.step = step if isinstance(step, int) else tr.step
        tr.total_steps = total if isinstance(total, int) else tr.total_steps
        if isinstance(prog.get("metrics"), dict) and prog["metrics"]:
            tr.metrics = dict(prog["metrics"])
        tr.simulated = bool(prog.get("simulated")) or tr.simulated
        tr.polls += 1
        tr.updated = when
        line = tr.line()
        return [Notice("train", line, host)] if line != before else []

    @staticmethod
    def _transfer_line(t: Transfer) -> str:
        verb = {"send": "sent", "fetch": "fetched", "copy": "copied", "chain": "streamed"}[
            t.kind]
        files = f"{t.files_done}/{t.files_total}" if t.files_total else str(t.files_done)
        size = human_bytes(t.bytes_done)
        if t.bytes_total:
            size += f" of {human_bytes(t.bytes_total)}"
        rate = f", {human_bytes(t.rate)}/s" if t.rate else ""
        return f"{t.host} {verb} {t.last_file} ({files} files, {size}{rate})"

    # ---- reading ---------------------------------------------------------------------

    def failure_tuples(self) -> list[tuple[str, str, str]]:
        return [f.as_tuple() for f in self.failures]


def _first_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= 300 else first[:297] + "..."


def replay(events: Iterable[dict], playbook: str = "") -> Tracker:
    """A tracker fed with recorded events (sorted by their counter)."""
    t = Tracker(playbook)
    for e in sorted(events, key=lambda e: e.get("counter", 0)):
        t.feed(e)
    return t
