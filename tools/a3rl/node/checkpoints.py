"""A run's verl checkpoints on a node: which are complete, the newest to resume from; a
run's attempts (``<run id>-r<k>``) and the job of a resumed one.

Standard library only: shipped to the nodes as ``ansible.module_utils.a3rl_checkpoints``.

verl 0.6.0 (``verl/trainer/ppo/ray_trainer.py`` ``_save_checkpoint``) writes a checkpoint
as ``<default_local_dir>/global_step_<N>/`` with ``actor/`` (the workers' shards) and
``data.pt`` (the dataloader's state), then, last, the completion marker
``<default_local_dir>/latest_checkpointed_iteration.txt`` holding N. So:

* a folder whose step is above the marker's was cut short (the save did not finish);
* a folder at or below the marker's step is complete when ``actor/`` holds files and
  ``data.pt`` exists (verl's rotation may have removed older ones while it ran);
* without a marker no folder is known to be complete.

What is read is checked, not trusted: the marker is read only when it is a regular file
(not a symlink, a FIFO or a device), at most ``MARKER_BYTES`` of it, and counts only
when it holds ASCII digits (surrounding ASCII whitespace allowed); a step folder counts
only when its whole name is ``global_step_`` and ASCII digits and it, its ``actor/`` and
its ``data.pt`` are not symlinks (verl makes them itself; a symlink was put there by
hand, and would resume from whatever it points to).

verl's own ``resume_mode=auto`` trusts the marker alone and starts from step 0 when the
marker's folder is missing; a3rl picks the newest complete folder itself and passes it
as ``resume_from_path``, saying why each newer one was skipped.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterable, Mapping
from typing import Any

MARKER = "latest_checkpointed_iteration.txt"
# The attempt suffix of a resumed run's submission id: <run id>-r<attempt>.
# ASCII digits only (``re.ASCII``; ``\d`` alone takes any script's digits) and up to the
# very end (``\Z``; ``$`` also matches before a trailing newline).
ATTEMPT = re.compile(r"-r([0-9]+)\Z", re.ASCII)
STEP_DIR = re.compile(r"global_step_([0-9]+)", re.ASCII)  # with fullmatch
MARKER_TEXT = re.compile(r"[ \t\r\n]*([0-9]+)[ \t\r\n]*", re.ASCII)  # with fullmatch
# verl writes the step and nothing else: a longer marker is not one.
MARKER_BYTES = 64


def marker_step(run_dir):
    """The step verl's completion marker names, or None (no marker, not a regular file,
    or not an ASCII number)."""
    try:
        fd = os.open(os.path.join(run_dir, MARKER),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, MARKER_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    match = MARKER_TEXT.fullmatch(raw.decode("ascii", errors="replace"))
    return int(match.group(1)) if match and len(raw) <= MARKER_BYTES else None


def _has_files(path):
    for _root, _dirs, files in os.walk(path):
        if files:
            return True
    return False


def untrusted(path):
    """Why ``path`` is not the run's own (a symbolic link, or owned by another user than
    the one reading it, or writable by others), or None. A resume loads what the folder
    holds as root, so a folder another local user placed at the run's predictable path,
    or a link to one, is never resumed from."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link, not the run's own folder"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by uid {os.geteuid()} that reads it"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def scan(run_dir):
    """Every ``global_step_<N>`` folder of the run, newest first, each with ``step``,
    ``path``, ``complete`` and, when not complete, ``why``; and the marker's step. A run
    folder that is not the run's own (:func:`untrusted`) has none, and ``refused`` says
    why."""
    refused = untrusted(run_dir)
    if refused:
        return {"marker": None, "checkpoints": [], "refused": refused + ": not resumed from"}
    marker = marker_step(run_dir)
    try:
        names = os.listdir(run_dir)
    except OSError:
        names = []
    found = []
    for name in names:
        match = STEP_DIR.fullmatch(name)
        path = os.path.join(run_dir, name)
        if not match or not os.path.isdir(path):
            continue
        step = int(match.group(1))
        entry = {"step": step, "path": path, "complete": False}
        if os.path.islink(path):
            entry["why"] = (f"{name} is a symlink to {os.path.realpath(path)}, not a folder "
                            "verl wrote")
        elif [p for p in ("actor", "data.pt") if os.path.islink(os.path.join(path, p))]:
            entry["why"] = (f"{name} is not as verl wrote it: " + " and ".join(
                f"{p} is a symlink" for p in ("actor", "data.pt")
                if os.path.islink(os.path.join(path, p))))
        elif planted := untrusted(path) or untrusted(os.path.join(path, "data.pt")):
            entry["why"] = f"{name} is skipped: {planted}"
        elif marker is None:
            entry["why"] = (f"{name} has no completion marker: {MARKER} is missing or "
                            "unreadable (verl writes it last, after every part)")
        elif step > marker:
            entry["why"] = (f"{name} has no completion marker: {MARKER} names step "
                            f"{marker}, so its save did not finish")
        elif not _has_files(os.path.join(path, "actor")):
            entry["why"] = f"{name} is incomplete: actor/ holds no shard"
        elif not os.path.isfile(os.path.join(path, "data.pt")):
            entry["why"] = f"{name} is incomplete: data.pt (the dataloader's state) is missing"
        else:
            entry["complete"] = True
        found.append(entry)
    found.sort(key=lambda e: e["step"], reverse=True)
    return {"marker": marker, "checkpoints": found}


def newest_complete(run_dir):
    """``(checkpoint or None, skipped)``: the newest complete checkpoint and the reasons
    the newer ones were skipped (one line each)."""
    scanned = scan(run_dir)
    found = scanned["checkpoints"]
    skipped = [scanned["refused"]] if scanned.get("refused") else []
    for entry in found:
        if entry["complete"]:
            return entry, skipped
        skipped.append(entry["why"])
    return None, skipped


def free_bytes(path):
    """Free bytes for an unprivileged writer at ``path``, or at its nearest existing
    parent when it does not exist yet (the run's folder is made by verl)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, path


def attempt_of(submission_id: str) -> int:
    """1 for a run's first submission, k for ``<run id>-r<k>``."""
    match = ATTEMPT.search(submission_id)
    return int(match.group(1)) if match else 1


def run_id_of(submission_id: str) -> str:
    """The run an attempt belongs to: ``<run id>`` of ``<run id>-r<k>``."""
    match = ATTEMPT.search(submission_id)
    return submission_id[:match.start()] if match else submission_id


def next_attempt(run_id: str, jobs: Iterable[Mapping[str, Any]]) -> int:
    """The attempt number after every one Ray lists for ``run_id``."""
    seen = [1 if j.get("submission_id") == run_id else attempt_of(j["submission_id"])
            for j in jobs if _of_run(str(j.get("submission_id") or ""), run_id)]
    return max(seen, default=0) + 1


def attempts(run_id: str, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Ray's records of the run's attempts, in attempt order."""
    mine = [dict(j) for j in jobs if _of_run(str(j.get("submission_id") or ""), run_id)]
    return sorted(mine, key=lambda j: attempt_of(j["submission_id"]))


def _of_run(submission_id: str, run_id: str) -> bool:
    return submission_id == run_id or (submission_id.startswith(run_id + "-r")
                                       and ATTEMPT.search(submission_id) is not None
                                       and submission_id[:ATTEMPT.search(submission_id)
                                                         .start()] == run_id)


def resume_job(job: Mapping[str, Any], run_id: str, attempt: int,
               from_path: str | None) -> dict[str, Any]:
    """The job of attempt ``attempt`` of the run: the same job, resuming from
    ``from_path`` (a ``global_step_<N>`` folder), or from step 0 when there is none, under
    the submission id ``<run id>-r<attempt>``."""
    if attempt < 2:
        raise ValueError(f"attempt {attempt}: a resumed attempt is the second or later")
    extra = (["trainer.resume_mode=resume_path", f"trainer.resume_from_path={from_path}"]
             if from_path else ["trainer.resume_mode=disable"])
    return {**_with_overrides(job, ("trainer.resume_mode", "trainer.resume_from_path"), extra),
            "submission_id": f"{run_id}-r{attempt}", "run_id": run_id, "attempt": attempt,
            "resume_from": from_path}


def in_folder(job: Mapping[str, Any], folder: str, fresh: bool = False) -> dict[str, Any]:
    """The same job writing its checkpoints to ``folder`` (``trainer.default_local_dir``,
    and the plan's ``checkpoint.dir``); ``fresh``: from step 0 (``trainer.resume_mode=
    disable``), which a rerun of an ended run is, whatever verl's ``auto`` would find."""
    if not folder or not str(folder).startswith("/"):
        raise ValueError(f"checkpoint folder {folder!r} is not an absolute path")
    keys = ("trainer.default_local_dir",) + (
        ("trainer.resume_mode", "trainer.resume_from_path") if fresh else ())
    extra = [f"trainer.default_local_dir={folder}"] + (
        ["trainer.resume_mode=disable"] if fresh else [])
    out = _with_overrides(job, keys, extra)
    if isinstance(job.get("checkpoint"), Mapping):
        out["checkpoint"] = {**job["checkpoint"], "dir": folder}
    return out


def _with_overrides(job: Mapping[str, Any], keys: Iterable[str],
                    extra: list[str]) -> dict[str, Any]:
    """``job`` with its overrides of ``keys`` replaced by ``extra``, its entrypoint and
    Hydra overrides made again from them."""
    keys = tuple(keys)
    keep = [o for o in job["overrides"] if o.lstrip("+~").split("=", 1)[0] not in keys]
    overrides = [*keep, *extra]
    prefix = job["entrypoint"].split(" --config-name=", 1)[0]
    entrypoint = " ".join([prefix, f"--config-name={job['config_name']}",
                           *(shlex.quote(o) for o in overrides)])
    return {**job, "overrides": overrides, "entrypoint": entrypoint,
            "hydra_overrides": [o for o in overrides if not o.startswith("+")]}


# How often a device fails, for the checkpoint interval's default: Meta's Llama 3 run
# ("The Llama 3 Herd of Models", 2024, its reliability section) had 419 unexpected
# interruptions in 54 days on 16,384 H100 GPUs, one per ~50,700 device-hours. A GPU
# figure, used for Ascend NPUs for lack of a published NPU one.
DEVICE_HOURS_PER_FAILURE = 54 * 24 * 16384 / 419
SAVE_METRIC = "timing_s/save_checkpoint"


def mtbf_seconds(cards: int) -> float:
    """The expected seconds between failures of a job on ``cards`` devices, from the
    per-device rate above (failures independent, so the rate scales with the count)."""
    if cards < 1:
        raise ValueError(f"{cards} cards: a job has at least one")
    return DEVICE_HOURS_PER_FAILURE * 3600 / cards


def young_daly(save_s: float, step_s: float, mtbf_s: float, cap: int) -> dict[str, Any]:
    """The save interval that loses the least time to saves and failures together:
    about sqrt(2 x save time x MTBF) (J. W. Young 1974, J. T. Daly 2006), in whole steps
    of ``step_s`` (at least 1), at most ``cap`` (the lost-work bound's save_freq).
    ``save_freq`` and ``interval_s`` (the formula's seconds), and ``why``."""
    if save_s < 0 or step_s <= 0 or mtbf_s <= 0 or cap < 1:
        raise ValueError(f"young_daly(save_s={save_s}, step_s={step_s}, mtbf_s={mtbf_s}, "
                         f"cap={cap}): save time >= 0, step time, MTBF and cap > 0")
    interval = (2 * save_s * mtbf_s) ** 0.5
    steps = max(1, round(interval / step_s))
    freq = min(steps, cap)
    why = (f"save_freq {freq}: a save takes {save_s:.1f} s (measured), a step {step_s:.1f} s, "
           f"the expected time between failures {mtbf_s / 3600:.0f} h; Young/Daly "
           f"sqrt(2 x save x MTBF) = {interval:.0f} s = {steps} step(s)"
           + (f", capped at {cap} by the lost-work bound" if steps > cap else ""))
    return {"save_freq": freq, "interval_s": interval, "why": why}


def measured_save_freq(job: Mapping[str, Any], steps: Iterable[Mapping[str, Any]],
                       cards: int, mtbf_s: float | None = None) -> dict[str, Any] | None:
    """The job's ``trainer.save_freq`` from an attempt's measured steps: the median save
    time (``timing_s/save_checkpoint``) and step time (``timing_s/step``), the MTBF
    (``mtbf_s``, else :func:`mtbf_seconds` of ``cards``) and the job's own save_freq as
    the cap (the plan's, from the lost-work bound). None when the job does not save or
    no save was measured."""
    current = next((o.split("=", 1)[1] for o in job.get("overrides") or []
                    if o.split("=", 1)[0] == "trainer.save_freq"), None)
    try:
        cap = int(current) if current is not None else 0
    except ValueError:
        return None
    steps = list(steps)
    saves = sorted(float(s[SAVE_METRIC]) for s in steps
                   if isinstance(s.get(SAVE_METRIC), (int, float)) and s[SAVE_METRIC] >= 0)
    times = sorted(float(s["timing_s/step"]) for s in steps
                   if isinstance(s.get("timing_s/step"), (int, float)) and s["timing_s/step"] > 0)
    if cap < 1 or not saves or not times:
        return None
    return young_daly(saves[len(saves) // 2], times[len(times) // 2],
                      mtbf_s or mtbf_seconds(cards), cap)


def with_save_freq(job: Mapping[str, Any], freq: int) -> dict[str, Any]:
    """The job with ``trainer.save_freq=freq`` in its overrides, in the place of the one
    it had (for :func:`resume_job`, which renders the entrypoint from them)."""
    new = f"trainer.save_freq={freq}"
    return {**job, "overrides": [new if o.split("=", 1)[0] == "trainer.save_freq" else o
                                 for o in job["overrides"]]}
