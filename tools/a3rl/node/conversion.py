"""The Megatron dist-checkpoint made from HF weights, and the record of how it was made.

The recipe's 235B real-weight runs load a dist-checkpoint converted from the HF weights
(``converter_hf_to_mcore.py``, an hour or more on 16 processes). The conversion bakes in
``USE_ALLTOALL_OVERLAP``: a checkpoint converted with one value and trained with the other
fails late, after the weights have loaded. So every conversion leaves a record
(``a3rl-conversion.json`` in the output folder) with the settings it was made with, and:

- a re-run whose wanted settings equal the record skips the conversion;
- a different setting (or other HF weights, or a changed converter) converts again;
- the training play compares the record with the run's own setting before it submits.

The conversion writes into ``<out>.partial/output``: ``prepare`` makes ``<out>.partial``
with a mark (``a3rl-partial.json``) before the converter starts (the mark is beside the
output, not in it: the converter returns without converting into a folder that is not
empty); ``commit`` moves the output into place with its record and removes the marked
folder, so an interrupted conversion never looks finished. A folder at ``<out>`` or
``<out>.old`` without the record, or at ``<out>.partial`` without the mark, was not made
here (by hand, another team's on shared storage): ``status`` names it (``kept``), and
``prepare`` and ``commit`` refuse to move or remove it. Runs on the nodes as Ansible
module_utils: standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from typing import Any

RECORD = "a3rl-conversion.json"
# In <out>.partial, from prepare until commit: a3rl made that folder. The converter
# writes into OUTPUT beside it.
PARTIAL_MARK = "a3rl-partial.json"
OUTPUT = "output"
# Keys whose values must be equal for a checkpoint to be reused, with the fix to name.
_WHAT = {
    "use_alltoall_overlap": "USE_ALLTOALL_OVERLAP",
    "source_digest": "the HF weights (their sha256 list)",
    "converter_sha256": "the converter script (converter_hf_to_mcore.py after the patches)",
    "nproc_per_node": "the number of converter processes",
    "model": "the model",
}


def _free_bytes(path: str) -> int:
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def read(out: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(out, RECORD), encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:
        return {}


def differences(recorded: dict[str, Any] | None, want: dict[str, Any]) -> list[str]:
    """Why a checkpoint with ``recorded`` settings is not the one ``want`` asks for."""
    if recorded is None:
        return ["there is no converted checkpoint yet"]
    if not recorded:
        return [f"its {RECORD} cannot be read"]
    out = []
    for key, value in want.items():
        if str(recorded.get(key)) != str(value):
            out.append(f"{_WHAT.get(key, key)} was {recorded.get(key)!r} at conversion, "
                       f"now {value!r}")
    return out


def foreign(path: str) -> bool:
    """Something is at ``path`` and it is not a conversion's output (no record file)."""
    return os.path.lexists(path) and not os.path.isfile(os.path.join(path, RECORD))


def _not_ours(path: str) -> str:
    return (f"{path} exists without {RECORD}: a3rl did not make it (made by hand, or "
            "another team's), so it is neither replaced nor removed")


def partial_is_ours(partial: str) -> bool:
    """``partial`` is a real folder (not a link) holding prepare's mark as a regular file."""
    try:
        return (not os.path.islink(partial) and os.path.isdir(partial)
                and stat.S_ISREG(os.lstat(os.path.join(partial, PARTIAL_MARK)).st_mode))
    except OSError:
        return False


def _partial_not_ours(partial: str) -> str:
    return (f"{partial} exists without {PARTIAL_MARK}: a3rl did not make it (made by hand, "
            "another team's, or left by an a3rl older than that mark), so it is not removed")


def kept(out: str, partial: str | None = None) -> list[str]:
    """What a conversion into ``out`` would have to replace or remove and must not: a
    folder at ``out`` or ``out.old`` without the record, one at the partial without the mark."""
    partial = partial or out + ".partial"
    found = [_not_ours(p) for p in (out, out + ".old") if foreign(p)]
    if os.path.lexists(partial) and not partial_is_ours(partial):
        found.append(_partial_not_ours(partial))
    return found


def status(out: str, want: dict[str, Any]) -> dict[str, Any]:
    recorded = read(out)
    diffs = differences(recorded, want)
    if foreign(out):
        diffs = [_not_ours(out)]
    return {
        "matches": not diffs,
        "foreign": foreign(out),
        "kept": kept(out),
        "reasons": diffs,
        "recorded": recorded or {},
        "free_bytes": _free_bytes(out),
    }


def output_of(partial: str) -> str:
    """The folder the converter writes, inside the marked ``partial``."""
    return os.path.join(partial, OUTPUT)


def prepare(out: str, partial: str, check: bool = False) -> bool:
    """Make ``partial`` afresh, with the mark, for the converter to write into its
    ``output``. What an interrupted conversion left there (the mark says a3rl made it) is
    removed; a folder without the mark is kept and refused. Returns True (it changes, or
    would in ``check``)."""
    problems = kept(out, partial)
    if problems:
        raise FileExistsError("; ".join(problems))
    if check:
        return True
    if os.path.lexists(partial):
        shutil.rmtree(partial)
    os.makedirs(os.path.dirname(partial) or ".", 0o755, exist_ok=True)
    os.mkdir(partial, 0o755)
    tmp = os.path.join(partial, PARTIAL_MARK + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"made_by": "a3rl", "for": out}, f, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(partial, PARTIAL_MARK))
    return True


def commit(out: str, partial: str, want: dict[str, Any]) -> None:
    """Put a finished conversion (``partial``'s output) in place of any older one, with its
    record. Only a folder with the record (an earlier conversion's) is replaced, only from
    a partial folder prepare made."""
    if os.path.lexists(partial) and not partial_is_ours(partial):
        raise FileExistsError(_partial_not_ours(partial))
    made = output_of(partial)
    if os.path.islink(made) or not os.path.isdir(made) or not os.listdir(made):
        raise FileNotFoundError(f"the conversion left nothing in {made}")
    old = out + ".old"
    for path in (out, old):
        if foreign(path):
            raise FileExistsError(_not_ours(path))
    tmp = os.path.join(made, RECORD + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(want, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(made, RECORD))
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(out):
        os.rename(out, old)
    os.rename(made, out)
    shutil.rmtree(partial)  # marked: a3rl's, and now holding only the mark
    shutil.rmtree(old, ignore_errors=True)


def alltoall_overlap(features: Any, model: dict[str, Any],
                     env_overrides: dict[str, Any] | None = None) -> int:
    """USE_ALLTOALL_OVERLAP of a run: the model's switch, then the inventory's model-env
    override (``recipe_env_features``), then the run's feature names (``alltoall_overlap``
    on, ``no-alltoall_overlap`` off; a list or a comma-separated string), as the
    training plan reads them."""
    value = (model.get("features") or {}).get("USE_ALLTOALL_OVERLAP", 0)
    value = (env_overrides or {}).get("USE_ALLTOALL_OVERLAP", value)
    names = features.split(",") if isinstance(features, str) else list(features or [])
    for name in (str(n).strip() for n in names):
        if name == "alltoall_overlap":
            value = 1
        elif name == "no-alltoall_overlap":
            value = 0
    return int(value)
