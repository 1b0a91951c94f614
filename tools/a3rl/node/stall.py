"""A hang in minutes: progress finer than a step, and how long none was seen.

The run supervisor's step-based bound (``supervisor._Progress``) waits for the next step
line: for a step of hours that is hours. This module judges successive observations
that move within a step and says when the run was last seen making progress; the
supervisor counts a hang when none was seen for longer than ``stall_bound_s``.

What an observation holds, and what counts as progress between two of them:

* the job's driver log (every node's trainer output, forwarded by Ray): it grew. The
  recipe's verl patch 0002 turns the rollout's tqdm bar on, which writes every few
  seconds while it generates; verl's step and timing lines come at a step's end.
* per node, from ``cluster_ops.py progress``: each trainer process (Ray's ``TaskRunner``
  and ``WorkerDict`` actors) with its CPU time (utime + stime from ``/proc/<pid>/stat``)
  and, where py-spy is installed, a digest of its main thread's Python stack (the actor's
  method runs there) with its title (``ray::WorkerDict.<method>``):
  - a new trainer process, or one gone: progress (start-up; an exit ends the job anyway);
  - with a digest in both observations: the digest changed. A process that waits the
    same way twice (stopped, blocked in a collective, spinning in one) is not moving,
    whatever CPU it burns;
  - without one: its CPU time grew by at least ``cpu_share`` of a core over the interval
    (Ray's own threads in a waiting actor burn a little: heartbeats, gRPC);
* per node, ``npu-smi info``'s AICore(%) of every chip: above 0 on any chip (the NPU
  runs kernels).

A stopped process (SIGSTOP, a debugger) burns no CPU, keeps its stack and writes
nothing: every signal sees it, once its peers wait for it too. A process waiting in a
collective (an HCCL or gloo hang) burns no CPU or spins in it: its stack stays the same,
so py-spy sees both; without py-spy a spinning wait looks busy to the CPU signal. What
none of them sees: a run that loops doing nothing useful with changing stacks or
growing logs (the step bound remains for that), and a node that cannot be read (a stall
is declared only when the latest observation read every node). Model load and the
first rollout move every signal but the step line: CPU time and stacks change all along.

The bound runs from the first observation that saw a trainer process (before that the
job is starting and only the step-based bound applies).

Standard library only (shipped beside the supervisor on the head).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The least CPU a trainer process must have used, in cores over the interval, for its
# CPU time alone to count as progress (where no stack digest is read).
CPU_SHARE = 0.2


def aicore(text: str) -> list[float]:
    """Every chip's AICore(%) in an ``npu-smi info`` table (the chip rows: the first cell
    ``<chip> <phy id>``, the second a bus id, the third starting with AICore(%))."""
    out = []
    for line in text.splitlines():
        if "Process id" in line:
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or ":" not in cells[1] or "." not in cells[1]:
            continue
        first = cells[2].split()
        try:
            out.append(float(first[0]))
        except (IndexError, ValueError):
            continue
    return out


class Tracker:
    """The attempt's progress, finer than a step: :meth:`log` and :meth:`nodes` take
    observations, :meth:`quiet` says for how long none showed progress."""

    def __init__(self, bound_s: float, cpu_share: float = CPU_SHARE):
        self.bound_s = float(bound_s)
        self.cpu_share = float(cpu_share)
        self.last: float | None = None  # last progress; None until armed
        self.what = ""  # the signal that showed it
        self.node_last: dict[str, float] = {}  # per node: its own last progress
        self.read_all = False  # whether the latest node observation read every node
        self._log: tuple[int, str] | None = None
        self._procs: dict[str, dict[int, dict[str, Any]]] = {}
        self._seen: dict[str, float] = {}  # per node: time of its previous observation

    def _moved(self, now: float, what: str) -> None:
        if self.last is not None:
            self.last, self.what = now, what

    def step(self, now: float) -> None:
        """A new step line: progress."""
        self._moved(now, "a new step")

    def log(self, text: str, now: float) -> None:
        """The job's driver log as a poll read it."""
        lines = text.rstrip("\n").rsplit("\n", 1)
        got = (len(text), lines[-1] if lines else "")
        if self._log is not None and got != self._log:
            self._moved(now, "the job's log grew")
        self._log = got

    def nodes(self, got: Mapping[str, Mapping[str, Any]], now: float) -> None:
        """One ``cluster_ops.py progress`` answer: ``{ip: {"trainers": [{"pid", "cpu",
        "stack"}], "npu_smi": text or None}}`` or ``{ip: {"error": ...}}``."""
        self.read_all = bool(got) and all(not r.get("error") for r in got.values()) \
            and set(self._procs) <= set(got)
        if self.last is None and any(r.get("trainers") for r in got.values()
                                     if not r.get("error")):
            self.last, self.what = now, "the first trainer process seen"
            self.node_last = dict.fromkeys(got, now)
        for ip, result in got.items():
            if result.get("error"):
                continue
            procs = {int(p["pid"]): p for p in result.get("trainers") or []}
            why = self._node_moved(ip, procs, result.get("npu_smi"), now)
            if why and self.last is not None:
                self._moved(now, f"{ip}: {why}")
                self.node_last[ip] = now
            self.node_last.setdefault(ip, now)
            self._procs[ip], self._seen[ip] = procs, now

    def _node_moved(self, ip: str, procs: Mapping[int, Mapping[str, Any]],
                    smi: str | None, now: float) -> str:
        """Why node ``ip`` moved since its previous observation, or ""."""
        if smi and any(u > 0 for u in aicore(smi)):
            return "NPU AICore above 0"
        if ip not in self._procs:
            return ""
        before = self._procs[ip]
        if set(procs) != set(before):
            return "its trainer processes changed"
        interval = max(now - self._seen[ip], 1e-9)
        for pid, p in procs.items():
            old = before[pid]
            if p.get("stack") and old.get("stack"):
                if p["stack"] != old["stack"]:
                    return f"pid {pid}'s stack changed"
            elif float(p.get("cpu") or 0) - float(old.get("cpu") or 0) \
                    >= self.cpu_share * interval:
                return f"pid {pid} used CPU"
        return ""

    def quiet(self, now: float) -> float | None:
        """Seconds since the last progress, None before the first trainer was seen."""
        return None if self.last is None else now - self.last

    def stalled(self, now: float) -> bool:
        """No progress for longer than the bound, judged on a read of every node."""
        quiet = self.quiet(now)
        return quiet is not None and self.read_all and quiet > self.bound_s

    def why(self, now: float) -> str:
        quiet = self.quiet(now) or 0.0
        nodes = "; ".join(f"{ip} {now - t:.0f} s" for ip, t in sorted(self.node_last.items()))
        return (f"no progress for {quiet:.0f} s, more than the stall bound of "
                f"{self.bound_s:.0f} s (stall_bound_s: job log, trainer CPU time and "
                f"stacks, NPU AICore); last progress: {self.what or 'none'}"
                + (f"; each node quiet for: {nodes}" if nodes else ""))

    def every(self, poll_s: float) -> float:
        """Seconds between node observations: a sixth of the bound, at least a poll."""
        return max(float(poll_s), self.bound_s / 6)
