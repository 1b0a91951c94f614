"""The run supervisor's settings and the checkpoint policy's input, typed from the play's
variables before anything is submitted (the training play's check phase).

``-e`` gives every value as a string, and Jinja's ``| int``, ``| float`` and ``| bool``
turn one that is not its type into 0 or false without a word (``30s`` seconds became 0,
``maybe`` became false). Here each value is read as its type or refused, naming the
variable and the fix; the supervisor checks its config again as it starts
(``a3rl.node.supervisor.config_problems``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from a3rl.node import supervisor
from a3rl.planning import checkpointing

# The checkpoint policy's input: plan_job's ``checkpointing`` key -> the play's variable.
CHECKPOINT_VARS = {"enabled": "train_job_checkpoint", "root": "train_job_checkpoint_dir",
                   "shared": "train_job_checkpoint_shared",
                   "max_lost_minutes": "train_job_checkpoint_max_lost_minutes",
                   "keep": "train_job_checkpoint_keep"}
_BOOL = {"true": True, "yes": True, "on": True, "1": True,
         "false": False, "no": False, "off": False, "0": False}


class SettingsError(ValueError):
    """One or more of the play's values are not their type; the message names each."""


def checkpoint_input(values: Mapping[str, Any], host: str = "") -> dict[str, Any]:
    """plan_job's ``checkpointing`` from the train_job variables in ``values`` (by their
    names, CHECKPOINT_VARS). The policy checks the numbers and the switch itself (one
    message each, with the plan's other problems); refused here is what it would take as
    it is: a ``train_job_checkpoint_shared`` that is not true or false, a folder that is
    not a string."""
    problems: list[str] = []
    missing = [v for v in CHECKPOINT_VARS.values() if v not in values]
    if missing:
        raise SettingsError(f"{host}: {', '.join(missing)} not set (train_job's defaults "
                            "set them). Fix: run the role train_job, or set them")
    shared = values["train_job_checkpoint_shared"]
    if not isinstance(shared, bool):
        shared = _BOOL.get(str(shared).strip().lower()) if shared is not None else None
        if shared is None:
            problems.append(f"train_job_checkpoint_shared {values['train_job_checkpoint_shared']!r}"
                            " is not true or false. Fix: -e train_job_checkpoint_shared=true "
                            "when every node mounts train_job_checkpoint_dir, else false")
    root = values["train_job_checkpoint_dir"]
    if not isinstance(root, str):
        problems.append(f"train_job_checkpoint_dir {root!r} is not a folder's path. Fix: set "
                        "it to an absolute folder every node mounts")
    _raise(problems, host)
    return {"enabled": values["train_job_checkpoint"], "root": root, "shared": shared,
            "max_lost_minutes": values["train_job_checkpoint_max_lost_minutes"],
            "keep": values["train_job_checkpoint_keep"]}


def supervisor_settings(values: Mapping[str, Any], defaults: Mapping[str, Any],
                        first_step: Any = 0, step_seconds: Any = None,
                        host: str = "") -> dict[str, Any]:
    """The supervisor's settings for a run's config.json (config key -> typed value,
    ``a3rl.node.supervisor.SETTINGS``), each from its variable in ``values`` (the host's
    variables: inventory, ``-e``) or else ``defaults`` (run_supervisor's). The bound
    before an attempt's second step comes from ``first_step``
    (train_job_supervisor_hang_first_step; 0: from the plan's ``step_seconds``) unless
    run_supervisor_hang_first_step is above 0.
    Every value that is not its type is refused at once, naming its variable."""
    problems: list[str] = []
    out: dict[str, Any] = {}
    for key, (var, _kind, _least, _ok) in supervisor.SETTINGS.items():
        if var not in values and var not in defaults:
            problems.append(f"{var} is not set (run_supervisor's defaults set it). Fix: set it")
            continue
        out[key] = supervisor.typed_setting(key, values[var] if var in values
                                            else defaults[var], problems)
    override = supervisor.typed_setting(
        "hang_first_step_s", first_step, problems, name="train_job_supervisor_hang_first_step")
    if not problems:
        if not out["hang_first_step_s"]:
            out["hang_first_step_s"] = checkpointing.hang_first_step_seconds(override,
                                                                             step_seconds)
        if out["backoff_max_s"] < out["backoff_s"]:
            problems.append(f"run_supervisor_backoff_max {out['backoff_max_s']:g} is below "
                            f"run_supervisor_backoff {out['backoff_s']:g}. Fix: raise it, or "
                            "lower run_supervisor_backoff")
    _raise(problems, host)
    return out


def _raise(problems: list[str], host: str) -> None:
    if problems:
        where = f"{host}: " if host else ""
        raise SettingsError(" ".join(f"{where}{p}." for p in problems)
                            + " Nothing was submitted.")
