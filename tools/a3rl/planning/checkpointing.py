"""A run's checkpoint policy, and the job of a resumed attempt.

The recipe's five runs set ``trainer.save_freq=-1``: verl never writes a checkpoint, so a
failure at step 10 of a Qwen3-235B run (hours a step on 64 cards) loses every step. A
plan made here carries a policy instead: how often verl saves, how many checkpoints it
keeps and where, derived from a bound on the work a failure may lose and the run's
expected step time, with the reason for each choice (the plan and the report show it).

Facts of verl 0.6.0 this relies on (``verl/trainer/ppo/ray_trainer.py``:
``_save_checkpoint``, ``_load_checkpoint``, ``fit``; ``verl/utils/checkpoint/
checkpoint_manager.py``: ``find_latest_ckpt_path``):

* ``trainer.save_freq=N`` (N > 0) saves after every N-th step and after the last one.
* A checkpoint is ``<trainer.default_local_dir>/global_step_<N>/``: ``actor/`` (every
  rank's shards, written by the workers on their own nodes) and ``data.pt`` (the
  dataloader's state, written by the driver). Only after both does the driver write
  ``<default_local_dir>/latest_checkpointed_iteration.txt`` holding N: the completion
  marker. A folder newer than the marker was cut short.
* ``trainer.max_actor_ckpt_to_keep=K`` keeps the newest K of the checkpoints the running
  process saved (rank 0 removes older ones); a restarted process does not count the
  earlier process's checkpoints.
* ``trainer.resume_mode``: ``auto`` (the marker's step), ``disable``, ``resume_path``
  (``trainer.resume_from_path``, a ``global_step_<N>`` folder).
* Without storage that every node mounts, the marker and ``data.pt`` exist only on the
  node where verl's driver ran and each worker's shards only on its own node (verl's
  Ascend FAQ): a resume finds an incomplete checkpoint. So checkpointing on several nodes
  needs a shared folder.

Nothing here touches a host: the space check takes the free bytes a task read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from a3rl.files import human_bytes

# A run's attempts (<run id>-r<k>) and a resumed attempt's job: node-side, for the run
# supervisor on the head as well.
from a3rl.node.checkpoints import (  # noqa: F401  (re-exported for the filters)
    attempt_of,
    attempts,
    in_folder,
    mtbf_seconds,
    next_attempt,
    resume_job,
    run_id_of,
    young_daly,
)
from a3rl.planning import folders

# Keys a policy sets; a user's override of one of them is refused (set the policy's
# variable instead), so that what the report says was chosen is what ran.
POLICY_KEYS = ("trainer.save_freq", "trainer.max_actor_ckpt_to_keep",
               "trainer.max_critic_ckpt_to_keep", "trainer.default_local_dir",
               "trainer.resume_mode", "trainer.resume_from_path")
# Keys that say where a run's checkpoints are and from which one an attempt resumes:
# functions of the run's identity and attempt, so left out of the submission id's digest.
ATTEMPT_KEYS = ("trainer.default_local_dir", "trainer.resume_mode", "trainer.resume_from_path")
# Bytes a checkpoint holds per model parameter: bf16 weights (2) and the fp32 master
# weights with Adam's two moments (4 + 4 + 4), which verl's Megatron and FSDP checkpoint
# managers save by default (checkpoint.save_contents: model, optimizer, extra). The extra
# state (RNG, scheduler) and the dataloader's are small beside them.
BYTES_PER_PARAM = 14
# The margin the space check keeps beyond K checkpoints: a save writes checkpoint K+1
# before verl removes the oldest.
SPACE_MARGIN = 1


@dataclass(frozen=True)
class Policy:
    """What a run saves: ``save_freq`` (steps; -1 never), ``keep`` (checkpoints kept),
    ``root`` (the folder under which the run's own ``<submission id>/`` goes), the
    estimate ``bytes_per_checkpoint`` and ``why`` (one line per choice)."""

    enabled: bool
    save_freq: int
    keep: int
    root: str
    shared: bool | None
    step_seconds: float | None
    step_source: str
    max_lost_minutes: float
    bytes_per_checkpoint: int
    why: tuple[str, ...]

    def overrides(self) -> dict[str, Any]:
        """The Hydra overrides of the policy, but the run's folder (see :func:`run_dir`)."""
        if not self.enabled:
            return {"trainer.save_freq": -1}
        return {"trainer.save_freq": self.save_freq,
                "trainer.max_actor_ckpt_to_keep": self.keep,
                "trainer.max_critic_ckpt_to_keep": self.keep}

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["why"] = list(self.why)
        return out


def policy(*, enabled: bool | None, weights: str, nodes: int, root: str, shared: bool | None,
           max_lost_minutes: Any, keep: Any, step_seconds: Any, step_source: str,
           params: Any, problems: list[str]) -> Policy:
    """The run's policy. ``enabled`` None: on for real weights, off for random ones (a
    random-weight run measures throughput; its weights are worth nothing). ``shared`` None:
    not known (``a3rl plan`` without an inventory): not checked. ``step_seconds``: the
    expected seconds a step takes (the recipe's published figure, or the run's own
    measured steps), ``step_source`` says which. ``params``: the model's parameters, for
    the size estimate. Appends one message per problem to ``problems``."""
    why: list[str] = []
    lost = _positive_number("train_job_checkpoint_max_lost_minutes", max_lost_minutes,
                            problems)
    kept = _positive_int("train_job_checkpoint_keep", keep, problems)
    step = _positive_number("the run's step_seconds", step_seconds, problems) \
        if step_seconds is not None else None
    count = _positive_number("the model's params", params, problems) \
        if params is not None else None
    size = int(count * BYTES_PER_PARAM) if count else 0
    if enabled is None:
        enabled = weights == "real"
        why.append("checkpoints on: a real-weight run" if enabled else
                   "checkpoints off: a random-weight run measures throughput "
                   "(-e train_job_checkpoint=true turns them on)")
    elif not enabled:
        why.append("checkpoints off (train_job_checkpoint=false): a failure loses every step")
    else:
        why.append("checkpoints on (train_job_checkpoint=true)")
    if not enabled or lost is None or kept is None:
        return Policy(False if not enabled else True, -1, kept or 0, root, shared, step,
                      step_source, lost or 0.0, size, tuple(why))
    if step:
        freq = max(1, math.floor(lost * 60 / step))
        if freq == 1 and step > lost * 60:
            why.append(f"save_freq 1: a step takes about {_duration(step)} ({step_source}), "
                       f"more than the bound of {_minutes(lost)} of lost work; a failure "
                       f"loses at most the step it was in")
        else:
            why.append(f"save_freq {freq}: {freq} step(s) of about {_duration(step)} "
                       f"({step_source}) fit the bound of {_minutes(lost)} of lost work")
    else:
        freq = 1
        why.append("save_freq 1: no step time is known for this run")
    why.append(f"keep the newest {kept} (trainer.max_actor_ckpt_to_keep)")
    if size:
        why.append(f"about {human_bytes(size)} a checkpoint ({count / 1e9:g} billion parameters x "
                   f"{BYTES_PER_PARAM} bytes: bf16 weights, fp32 master weights and Adam's "
                   f"two moments)")
    bad_root = folders.data_problems("train_job_checkpoint_dir", root)
    if bad_root:
        problems.extend(bad_root)
    elif shared is False and nodes > 1:
        problems.append(
            f"checkpoints on {nodes} nodes need a folder every node mounts: verl writes each "
            f"rank's shards on its own node and the completion marker only where its driver "
            f"runs, so a resume finds an incomplete checkpoint; {root} is not shared storage. "
            f"Fix: set a3rl_shared_dir in the inventory (or train_job_checkpoint_dir to a "
            f"shared folder with train_job_checkpoint_shared=true), or run with "
            f"-e train_job_checkpoint=false")
    return Policy(True, freq, kept, str(root).rstrip("/"), shared, step, step_source, lost,
                  size, tuple(why))


_ON = ("true", "yes", "on", "1")
_OFF = ("false", "no", "off", "0")


def switch(value: Any, problems: list[str]) -> bool | None:
    """``train_job_checkpoint`` as given (-e gives strings): None for "" (the default by
    the weights), True or False; anything else is a problem, never read as off."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text == "":
        return None
    if text in _ON or text in _OFF:
        return text in _ON
    problems.append(f"train_job_checkpoint {value!r} is not true, false or \"\" (by the "
                    "weights). Fix: -e train_job_checkpoint=true or false")
    return None


def run_dir(root: str, run_id: str) -> str:
    """Where one run's checkpoints go: a folder of its own under the policy's root."""
    return f"{root.rstrip('/')}/{run_id}"


def space_problems(pol: Mapping[str, Any], free_bytes: Any, where: str) -> list[str]:
    """Whether ``free_bytes`` at the checkpoint folder hold the policy's K checkpoints
    (plus the one a save writes before verl removes the oldest)."""
    if not pol.get("enabled") or not pol.get("bytes_per_checkpoint"):
        return []
    need = int(pol["bytes_per_checkpoint"]) * (int(pol["keep"]) + SPACE_MARGIN)
    if free_bytes is None or int(free_bytes) >= need:
        return []
    return [f"{where}: {human_bytes(int(free_bytes))} free, {int(pol['keep']) + SPACE_MARGIN} "
            f"checkpoints of about {human_bytes(int(pol['bytes_per_checkpoint']))} need "
            f"{human_bytes(need)} (train_job_checkpoint_keep={pol['keep']} kept, one more while "
            f"a save runs). Fix: free space, lower train_job_checkpoint_keep, point "
            f"train_job_checkpoint_dir elsewhere, or run with -e train_job_checkpoint=false. "
            f"Nothing was submitted."]


def hang_first_step_seconds(override: Any, step_seconds: Any) -> float:
    """The supervisor's bound before an attempt's second step: ``override`` when above 0
    (train_job_supervisor_hang_first_step), else three expected steps (at least 1,800 s)
    plus 1,800 s for loading the model. A judgement, not a measurement on A3."""
    if float(override or 0) > 0:
        return float(override)
    return max(1800.0, 3 * float(step_seconds or 0)) + 1800.0


def measured_step_seconds(steps: Iterable[Mapping[str, Any]]) -> float | None:
    """The median ``timing_s/step`` of a run's steps so far, or None without any."""
    times = sorted(float(s["timing_s/step"]) for s in steps
                   if isinstance(s.get("timing_s/step"), int | float)
                   and math.isfinite(float(s["timing_s/step"])) and s["timing_s/step"] > 0)
    if not times:
        return None
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2


def _positive_number(name: str, value: Any, problems: list[str]) -> float | None:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        problems.append(f"{name} must be a positive number, not {value!r}")
        return None
    return float(value)


def _positive_int(name: str, value: Any, problems: list[str]) -> int | None:
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problems.append(f"{name} must be a positive whole number, not {value!r}")
        return None
    return value


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _minutes(minutes: float) -> str:
    return f"{minutes:g} min"
