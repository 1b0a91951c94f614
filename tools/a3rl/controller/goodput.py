"""A run's goodput across its attempts: how much of the wall time trained the model.

A run is its first submission and every attempt resumed from a checkpoint after it
(``<run id>-r<k>``, a3rl.planning.checkpointing). Per attempt, Ray's job record gives the start
and end (ms since the epoch) and the attempt's own log its steps (``timing_s/step``, verl's
timer around one whole step, checkpoint save included).

* wall: from the first attempt's start to the last one's end (or ``now`` while it runs);
* productive: the time of the steps the final model went through, each step once (a step
  redone after a resume counts in its last run only);
* redone: steps an attempt ran that a later attempt ran again: the work since the last
  checkpoint, lost;
* restart: the rest of the time between attempts' steps: detecting the failure,
  cleaning up, waiting for the cluster, loading the model and checkpoint again (and each
  attempt's own start-up and validation, which a run without failures pays once);
* goodput = productive / wall;
* save: the time verl's saves took (``timing_s/save_checkpoint`` of every step that
  saved, in every attempt); checkpoint overhead = save / wall.

The stand-in trainer's steps (``simulated``) carry the recipe's step times, not measured
ones: such a run has wall time and restarts but no productive time, and no goodput
(``simulated`` says why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def _step_time(step: Mapping[str, Any], key: str = "timing_s/step") -> float:
    value = step.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return max(float(value), 0.0)
    return 0.0


def goodput(attempts: Sequence[Mapping[str, Any]],
            steps_by_attempt: Sequence[Sequence[Mapping[str, Any]]],
            now_ms: float | None = None) -> dict[str, Any]:
    """The run's figures: ``wall_s``, ``productive_s``, ``redone_s``, ``restart_s``,
    ``lost_s`` (redone + restart), ``restarts``, ``goodput`` (None without wall time),
    ``steps`` (distinct steps run), ``save_s`` and ``checkpoint_overhead`` (save / wall).
    ``attempts`` are Ray's job records in attempt order;
    ``steps_by_attempt`` each attempt's parsed steps, in the same order."""
    if len(attempts) != len(steps_by_attempt):
        raise ValueError(f"{len(attempts)} attempts but {len(steps_by_attempt)} step lists")
    starts = [a["start_time"] for a in attempts if a.get("start_time") is not None]
    ends = [a["end_time"] if a.get("end_time") is not None else now_ms for a in attempts]
    ends = [e for e in ends if e is not None]
    wall = max(0.0, (max(ends) - min(starts)) / 1000) if starts and ends else 0.0
    simulated = any(step.get("simulated") for steps in steps_by_attempt for step in steps)
    last_run: dict[int, tuple[int, float]] = {}
    ran = saved = 0.0
    for index, steps in enumerate(steps_by_attempt):
        for step in steps:
            seconds = _step_time(step)
            ran += seconds
            saved += _step_time(step, "timing_s/save_checkpoint")
            last_run[int(step["step"])] = (index, seconds)
    productive = sum(seconds for _, seconds in last_run.values())
    redone = ran - productive
    restart = max(0.0, wall - ran) if wall else 0.0
    if simulated:
        return {"wall_s": round(wall, 3), "productive_s": None, "redone_s": None,
                "restart_s": None, "lost_s": None, "restarts": max(0, len(attempts) - 1),
                "steps": len(last_run), "goodput": None, "simulated": True}
    return {
        "wall_s": round(wall, 3),
        "productive_s": round(productive, 3),
        "redone_s": round(redone, 3),
        "restart_s": round(restart, 3),
        "lost_s": round(max(0.0, wall - productive), 3) if wall else round(redone, 3),
        "restarts": max(0, len(attempts) - 1),
        "steps": len(last_run),
        "goodput": round(productive / wall, 4) if wall else None,
        "save_s": round(saved, 3),
        "checkpoint_overhead": round(saved / wall, 4) if wall else None,
    }
