"""Training metrics from a verl job log: one record per step, kept as JSON lines.

verl 0.6.0's ``console`` tracking backend (``verl/utils/tracking.py`` -> ``LocalLogger`` in
``verl/utils/logger/aggregate_logger.py``) prints one line per logged step::

    step:3 - actor/pg_loss:-0.0123 - perf/throughput:118.5 - timing_s/step:5012.3

``concat_dict_to_str`` joins ``step:{step}`` and ``{key}:{pprint.pformat(value)}`` for every
``numbers.Number`` value with ``" - "``, so numbers are Python reprs: ints (``512``), floats
in shortest form (``0.1``, ``1.2e-05``, ``nan``, ``inf``, ``-inf``), ``True``/``False``, and
with numpy 2 scalars such as ``np.float64(0.5)``. The trainer runs in Ray's ``TaskRunner``
actor, so in the job log the line carries Ray's prefix, usually in ANSI colour:
``\\x1b[36m(TaskRunner pid=123)\\x1b[0m step:3 - ...`` or ``(TaskRunner pid=123,
ip=10.0.0.2)`` for another node.

The simulator's stand-in trainer prints the same lines with one extra metric,
``a3rl/simulated:1`` (:data:`SIMULATED_KEY`), so a report can never pass simulated figures
off as measured ones. The parser turns it into ``"simulated": True`` on the record.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# The metric the stand-in trainer adds to every line it prints (value 1).
SIMULATED_KEY = "a3rl/simulated"

# Metrics the report and the summary put first: throughput and time per step as verl
# computes them (perf/*), the phases of a step (timing_s/*; ``gen`` is the trainer's own
# timer around rollout, ``generate_sequences`` the rollout worker's), and how the policy
# learns (lengths, score, losses). ``train/num_gen_batches`` is DAPO's.
KEY_METRICS = (
    "perf/throughput",
    "perf/time_per_step",
    "timing_s/step",
    "timing_s/gen",
    "timing_s/generate_sequences",
    "timing_s/update_actor",
    "response_length/mean",
    "critic/score/mean",
    "actor/pg_loss",
    "actor/entropy",
    "train/num_gen_batches",
)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Ray's prefix: "(TaskRunner pid=123)", "(pid=123)", "(WorkerDict pid=9, ip=10.0.0.2)".
_RAY_PREFIX = re.compile(r"^\s*\((?:[\w.\-:]+ )?pid=[^)\s,]+(?:, ip=[^)\s]+)?\)\s*")
_STEP = re.compile(r"^step:(\d+)(?: - (.*))?$")
# Ray's log de-duplication appends this (and sometimes a hint) to a repeated line.
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")
_INT = re.compile(r"^[+-]?\d+$")
# verl's RayPPOTrainer prints this once it has sized the dataloader (and so does the
# simulator's stand-in trainer).
_TOTAL_STEPS = re.compile(r"Total training steps:\s*(\d+)")


def _number(text: str) -> int | float | None:
    """A value as verl printed it, or None when it is not a number."""
    text = text.strip()
    wrapped = _NUMPY_SCALAR.match(text)
    if wrapped:
        text = wrapped.group(1).strip()
    if text in ("True", "False"):
        return int(text == "True")
    if _INT.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return None


def _validation_only(metrics: dict[str, Any]) -> bool:
    """verl logs validation alone before training (step 0, or the resumed step)."""
    return all(k.startswith(("val-", "val/")) for k in metrics)


def parse_line(line: str) -> dict[str, Any] | None:
    """One verl console line as a record (``step`` first), or None for any other line."""
    text = _ANSI.sub("", line).strip()
    while True:
        stripped = _RAY_PREFIX.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = _REPEATED.sub("", text)
    match = _STEP.match(text)
    if not match or not match.group(2):
        return None
    metrics: dict[str, Any] = {}
    for field in match.group(2).split(" - "):
        key, sep, raw = field.rpartition(":")
        value = _number(raw) if sep else None
        if key and value is not None:
            metrics[key.strip()] = value
    if not metrics or _validation_only(metrics):
        return None
    record: dict[str, Any] = {"step": int(match.group(1))}
    if metrics.pop(SIMULATED_KEY, 0):
        record["simulated"] = True
    record.update(metrics)
    return record


def parse_log(text: str) -> list[dict[str, Any]]:
    """Every training step in a Ray job log, in step order; a repeated step keeps its last line.

    Other output may sit between the lines, and tqdm's carriage returns inside them.
    A step appears twice when a job resumes from a checkpoint and redoes it: the later
    line is the one that ran on the final weights. Validation-only lines are skipped.
    """
    steps: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        for segment in line.split("\r"):
            record = parse_line(segment)
            if record is not None:
                steps[record["step"]] = record
    return [steps[s] for s in sorted(steps)]


# A poll reads the whole log (Ray's REST API has no offset), but only its end is parsed
# line by line: a long run's log is tens of MB, its latest step line is near the end.
PROGRESS_TAIL = 256 * 1024


def progress(text: str, tail: int = PROGRESS_TAIL) -> dict[str, Any]:
    """Where a running job is, from its log so far: the latest step and its metrics.

    ``step`` is None before the first step line (in the last ``tail`` characters);
    ``total_steps`` is None until verl has printed it. Metrics that are nan or infinite
    are left out (the record must be JSON).
    """
    steps = parse_log(text[-tail:])
    totals = _TOTAL_STEPS.findall(text)
    latest = steps[-1] if steps else {}
    return {
        "step": latest.get("step"),
        "total_steps": int(totals[-1]) if totals else None,
        "simulated": bool(latest.get("simulated")),
        "metrics": {k: v for k, v in latest.items()
                    if k not in ("step", "simulated") and _finite(v)},
    }


def progress_line(progress: dict[str, Any], keys: Sequence[str] = KEY_METRICS) -> str:
    """One short line for a console: ``step 3/20: perf/throughput=118.5 ...``."""
    step = progress.get("step")
    if step is None:
        return "no step logged yet"
    total = progress.get("total_steps")
    metrics = progress.get("metrics") or {}
    shown = [f"{k}={metrics[k]:.4g}" for k in keys if _finite(metrics.get(k))][:4]
    head = f"step {step}/{total}" if total else f"step {step}"
    tail = " (simulated)" if progress.get("simulated") else ""
    return f"{head}: {' '.join(shown)}{tail}" if shown else head + tail


def _encode(value: Any) -> Any:
    # Strict JSON has no NaN/Infinity; keep them as strings so `jq` and others can read it.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _decode(value: Any) -> Any:
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return value


def write_jsonl(path: Path, steps: Iterable[dict[str, Any]]) -> Path:
    """Write ``metrics.jsonl`` (one step per line), replacing it whole so readers never see half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for step in steps:
            f.write(json.dumps({k: _encode(v) for k, v in step.items()}, allow_nan=False))
            f.write("\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The steps :func:`write_jsonl` wrote."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append({k: _decode(v) for k, v in json.loads(line).items()})
    return out


def _finite(value: Any) -> bool:
    # (int, float), not int | float: this file also runs on the nodes (module_utils),
    # whose Python may be older than the controller's.
    return isinstance(value, (int, float)) and math.isfinite(value)


def summary(steps: Sequence[dict[str, Any]], keys: Sequence[str] = KEY_METRICS) -> dict[str, Any]:
    """The first step's key metrics, their mean over the steps, and how many steps there were.

    Means skip steps where a metric is missing, nan or infinite; a metric no step has is
    left out. ``first`` is the lowest step logged (step 1 unless the log starts mid-run).
    """
    ordered = sorted(steps, key=lambda s: s["step"])
    out: dict[str, Any] = {
        "count": len(ordered),
        "simulated": any(s.get("simulated") for s in ordered),
        "first_step": ordered[0]["step"] if ordered else None,
        "last_step": ordered[-1]["step"] if ordered else None,
        "first": {},
        "mean": {},
    }
    if not ordered:
        return out
    for key in keys:
        if key in ordered[0]:
            out["first"][key] = ordered[0][key]
        values = [s[key] for s in ordered if _finite(s.get(key))]
        if values:
            out["mean"][key] = sum(values) / len(values)
    return out
