"""A site's job profile: the changes a site declares, as data in its inventory, to the
jobs it runs, applied to a run's job after the real plan passed its checks and Hydra.

The plan (``a3rl.planning.plan``) is the recipe's job, checked as the recipe states it. A site
that cannot run that job as it is (no NPUs, say) names what it changes in
``train_job_profile``, and ``train_job`` submits the profiled job instead; each change
is listed with the site's reason, and the run's report shows the list. The product
knows only this mechanism, not who wrote the profile or why: the simulator's inventory
holds one (its CPU profile for real verl on CPU), a real cluster's holds none.

A profile (every key optional but ``name``)::

    name: cpu                  # the profiled job's own submission id: <run>-cpu-<digest>
    label: "..."               # what the run's report says of its figures
    applies_to: {module: [verl.trainer.main_ppo], config_name: [ppo_megatron_trainer]}
    config: {map: {ppo_megatron_trainer: ppo_trainer}, why: "..."}
    drop:                      # overrides dropped, by key prefix (after any +/~)
      - {prefix: actor_rollout_ref.actor.megatron., why: "..."}
    set:                       # overrides set, in this order; one of value, per_node, ratio_to
      - {key: trainer.device, value: cpu, why: "..."}
      - {key: trainer.nnodes, per_node: 1, why: "..."}            # the cluster's nodes x 1
      - {key: actor_rollout_ref.actor.ppo_mini_batch_size, ratio_to: data.train_batch_size,
         min_per_node: 1, why: "... {key}/{ratio_to}"}  # the plan's ratio to a key set above
      - {key: model.x, value: eager, prefix: "+", why: "..."}     # added with a prefix
      - {key: trainer.logger, value: [console], only_if_set: true, why: "..."}
    env_prepend: {PYTHONPATH: [/opt/layer, "{working_dir}"]}     # before the plan's value
    checkpoint: {bytes_per_checkpoint: 1722000, why: "...", dir_why: "..."}

A set value equal to the plan's changes nothing and is not listed. The profiled job has
its own submission id, so its checkpoints (when the plan has a policy) go to a folder of
their own, named by that id.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from a3rl.planning import checkpointing
from a3rl.planning.plan import parse_value, render_value, split_override

KEYS = {"name", "label", "applies_to", "config", "drop", "set", "env_prepend", "checkpoint"}
SET_KINDS = ("value", "per_node", "ratio_to")
# Where verl writes a run's checkpoints (the first of the keys an attempt changes).
CHECKPOINT_DIR_KEY = checkpointing.ATTEMPT_KEYS[0]


@dataclass(frozen=True)
class Change:
    key: str
    was: str | None  # None: the plan does not set it (added)
    now: str | None  # None: dropped
    why: str

    def line(self) -> str:
        if self.now is None:
            return f"{self.key}={self.was}: dropped ({self.why})"
        if self.was is None:
            return f"{self.key}={self.now}: added ({self.why})"
        return f"{self.key}: {self.was} -> {self.now} ({self.why})"


def problems(profile: Mapping[str, Any]) -> list[str]:
    """What is wrong with a profile's shape, one sentence each (empty: none)."""
    out = [f"unknown key {k!r} (known: {', '.join(sorted(KEYS))})"
           for k in profile if k not in KEYS]
    if not profile.get("name"):
        out.append("no name (the profiled job's submission id is <run>-<name>-<digest>)")
    for i, op in enumerate(profile.get("set") or []):
        kinds = [k for k in SET_KINDS if k in op]
        if not op.get("key") or len(kinds) != 1:
            out.append(f"set[{i}] needs a key and exactly one of {', '.join(SET_KINDS)}: {op}")
    for i, op in enumerate(profile.get("drop") or []):
        if not op.get("prefix"):
            out.append(f"drop[{i}] has no prefix: {op}")
    return out


def applies(job: Mapping[str, Any], profile: Mapping[str, Any] | None) -> bool:
    """Whether ``profile`` changes ``job`` (an empty profile changes nothing)."""
    if not profile:
        return False
    scope = profile.get("applies_to") or {}
    return all(job.get(field) in allowed for field, allowed in scope.items())


def apply(job: Mapping[str, Any], profile: Mapping[str, Any], nodes: int) -> dict[str, Any]:
    """The job ``profile`` makes of the plan's ``job`` (``Plan.job()``) on ``nodes`` nodes:
    the same keys, the entrypoint rebuilt, plus ``replaced`` (one line per change, with
    the profile's reason), ``kept`` (the plan's overrides it keeps), ``label`` and
    ``real_overrides`` (the plan's)."""
    bad = problems(profile)
    if bad:
        raise ValueError(f"job profile {profile.get('name')!r}: " + "; ".join(bad))
    name = profile["name"]
    if not applies(job, profile):
        scope = profile.get("applies_to") or {}
        raise ValueError(f"job profile {name!r} does not apply to {job.get('module')} "
                         f"--config-name={job.get('config_name')}: only "
                         + " with ".join(", ".join(v) for v in scope.values()))
    if nodes < 1:
        raise ValueError(f"nodes={nodes}: the profiled job needs at least one node")
    values: dict[str, tuple[str, Any]] = {}
    for override in job["overrides"]:
        prefix, key, text = split_override(override)
        values[key] = (prefix, parse_value(text))
    changes: list[Change] = []
    out: dict[str, tuple[str, Any]] = {}
    drops = [(d["prefix"], d.get("why", "")) for d in profile.get("drop") or []]
    for key, (prefix, value) in values.items():
        why = next((w for p, w in drops if key.startswith(p)), None)
        if why is not None:
            changes.append(Change(prefix + key, render_value(value), None, why))
        else:
            out[key] = (prefix, value)

    def put(key: str, value: Any, why: str, prefix: str = "") -> None:
        old = out.get(key, values.get(key))
        was = render_value(old[1]) if old is not None else None
        if was == render_value(value):
            return
        out.pop(key, None)
        out[key] = (old[0] if old is not None else prefix, value)
        changes.append(Change(prefix + key if old is None else key, was, render_value(value),
                              why))

    for op in profile.get("set") or []:
        key, why, prefix = op["key"], op.get("why", ""), op.get("prefix", "")
        if op.get("only_if_set") and key not in values:
            continue
        if "per_node" in op:
            value = op["per_node"] * nodes
        elif "ratio_to" in op:
            # The plan's ratio of this key to another, applied to the other's new value.
            other = op["ratio_to"]
            plan_other = int(_get(values, other, _get(values, key, 1)))
            plan_this = int(_get(values, key, plan_other))
            now_other = int(out[other][1]) if other in out else plan_other
            value = max(int(op.get("min_per_node", 0)) * nodes,
                        now_other * plan_this // max(plan_other, 1))
            why = why.format(key=plan_this, ratio_to=plan_other)
        else:
            value = op["value"]
        put(key, value, why, prefix)
    overrides = [f"{prefix}{k}={render_value(v)}" for k, (prefix, v) in out.items()]
    kept = [o for o in job["overrides"] if o in overrides]
    env = dict(job.get("env") or {})
    workdir = str(job.get("working_dir") or "")
    for var, paths in (profile.get("env_prepend") or {}).items():
        entries = [str(p).replace("{working_dir}", workdir) for p in paths]
        env[var] = ":".join(p for p in (*entries, env.get(var, "")) if p)
    config = profile.get("config") or {}
    config_name = (config.get("map") or {}).get(job["config_name"], job["config_name"])
    config_path = job["config_path"]
    if config_name != job["config_name"]:
        changes.insert(0, Change("--config-name", job["config_name"], config_name,
                                 config.get("why", "")))
    # Its own submission id (the plan's job, submitted as planned, is another job): the
    # run name, the profile's name, a digest of what this job runs (but where its
    # checkpoints go, which follows from the id, as in the plan's own id).
    identity = [o for o in overrides
                if split_override(o)[1] not in checkpointing.ATTEMPT_KEYS]
    digest = hashlib.sha256(json.dumps({"module": job["module"], "config": config_name,
                                        "config_path": config_path, "overrides": identity,
                                        "env": env},
                                       sort_keys=True).encode()).hexdigest()[:8]
    ident = f"{job.get('run_name') or 'a3rl'}-{name}-{digest}"
    policy = dict(job.get("checkpoint") or {})
    if policy.get("enabled"):
        # The run's folder is named by the id of the job that runs.
        ckpt = profile.get("checkpoint") or {}
        policy["dir"] = checkpointing.run_dir(policy["root"], ident)
        if "bytes_per_checkpoint" in ckpt:
            policy["bytes_per_checkpoint"] = int(ckpt["bytes_per_checkpoint"])
        if ckpt.get("why"):
            policy["why"] = [*policy.get("why", []), ckpt["why"]]
        overrides = [o for o in overrides if split_override(o)[1] != CHECKPOINT_DIR_KEY]
        overrides.append(f"{CHECKPOINT_DIR_KEY}={render_value(policy['dir'])}")
        changes.append(Change(CHECKPOINT_DIR_KEY, None, policy["dir"],
                              ckpt.get("dir_why", "the profiled job's own folder, named "
                                                  "by its id")))
        kept = [o for o in kept if o in overrides]
    entrypoint = " ".join(["python3", "-m", str(job["module"]),
                           f"--config-path={shlex.quote(config_path)}",
                           f"--config-name={config_name}",
                           *(shlex.quote(o) for o in overrides)])
    return {
        **job,
        "entrypoint": entrypoint,
        "config_name": config_name,
        "overrides": overrides,
        "hydra_overrides": [o for o in overrides if not o.startswith("+")],
        "env": env,
        "replaced": [c.line() for c in changes],
        "kept": kept,
        "label": profile.get("label") or f"job profile {name}",
        "submission_id": ident,
        "run_id": ident,
        "checkpoint": policy,
        "real_overrides": list(job["overrides"]),
    }


def _get(values: Mapping[str, tuple[str, Any]], key: str, default: Any) -> Any:
    return values[key][1] if key in values else default
