"""The Megatron dist-checkpoint made from HF weights, and the record of how it was made.

The recipe's 235B real-weight runs load a dist-checkpoint converted from the HF weights
(``converter_hf_to_mcore.py``, an hour or more on 16 processes). The conversion bakes in
``USE_ALLTOALL_OVERLAP``: a checkpoint converted with one value and trained with the other
fails late, after the weights have loaded. So every conversion leaves a record
(``a3rl-conversion.json`` in the output folder) with the settings it was made with, and:

- a re-run whose wanted settings equal the record skips the conversion;
- a different setting (or other HF weights, or a changed converter) converts again;
- the training play compares the record with the run's own setting before it submits.

The conversion writes into ``<out>.partial``; ``commit`` moves it into place with its
record, so an interrupted conversion never looks finished. A folder at ``<out>`` (or
``<out>.old``) without the record was not made here (by hand, or another team's on shared
storage): ``status`` names it and ``commit`` refuses to move or remove it. Runs on the
nodes as Ansible module_utils: standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

RECORD = "a3rl-conversion.json"
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


def status(out: str, want: dict[str, Any]) -> dict[str, Any]:
    recorded = read(out)
    diffs = differences(recorded, want)
    if foreign(out):
        diffs = [_not_ours(out)]
    return {
        "matches": not diffs,
        "foreign": foreign(out),
        "reasons": diffs,
        "recorded": recorded or {},
        "free_bytes": _free_bytes(out),
    }


def commit(out: str, partial: str, want: dict[str, Any]) -> None:
    """Put a finished conversion in place of any older one, with its record. Only a
    folder with the record (an earlier conversion's) is replaced."""
    if not os.path.isdir(partial) or not os.listdir(partial):
        raise FileNotFoundError(f"the conversion left nothing in {partial}")
    old = out + ".old"
    for path in (out, old):
        if foreign(path):
            raise FileExistsError(_not_ours(path))
    tmp = os.path.join(partial, RECORD + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(want, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(partial, RECORD))
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(out):
        os.rename(out, old)
    os.rename(partial, out)
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
