"""Run plans: one of the recipe's training runs, checked and rendered as a verl job.

The recipe's launch scripts are shell files a person edits for every run: node counts,
parallel sizes, token budgets and the numbers derived from them are typed by hand, and a
wrong one shows up an hour later, after the weights have loaded. A plan holds the same
facts as data (``group_vars/all/runs.yml``, ``models.yml``), computes the derived values,
refuses what cannot run (each problem one message, all of them at once) and renders the
job: ``python3 -m <entrypoint> --config-path ... --config-name ... <Hydra overrides>``,
the env it needs and a submission id that changes exactly when the job does.

Nothing here touches a host or imports Ansible; the CLI (``a3rl plan``) and the training
play call :func:`plan_from_files` / :func:`make_plan`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from a3rl import masking
from a3rl.planning import checkpointing as ckpt
from a3rl.planning import rolevars
from a3rl.planning.recipe_env import RecipeEnvError, model_env

WEIGHTS = ("real", "random")
CHECKPOINTS = ("none", "mcore", "hf")
# verl's config folder in the recipe working directory; DAPO's configs are copied there.
CONFIG_DIR = "verl/trainer/config"
# The key a3rl.node.conversion records USE_ALLTOALL_OVERLAP under (a3rl-conversion.json).
RECORD_ALLTOALL = "use_alltoall_overlap"
# Turns off a feature a run has by default: -e features=no-sam.
FEATURE_OFF = "no-"
# The group_vars a plan is made from (models.yml, runs.yml): make_plan's ``profiles`` holds
# each of them, plus ``paths`` (node_paths).
PROFILE_VARS = ("a3rl_models", "a3rl_algorithms", "a3rl_runs", "a3rl_features",
                "a3rl_run_defaults", "a3rl_model_overrides", "a3rl_patched_keys")

_TC = "actor_rollout_ref.actor.megatron.override_transformer_config."
_SPEC = "actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config."
_OVERLONG = "reward_model.reward_kwargs.overlong_buffer_cfg."

# Run values (runs.yml) and the Hydra key each is rendered to. A user's extra override of
# one of these keys changes the value itself, so every rule and derived value follows it.
PARAM_KEYS: dict[str, str] = {
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "train_batch_size": "data.train_batch_size",
    "max_num_seqs": "actor_rollout_ref.rollout.max_num_seqs",
    "cudagraph_capture_sizes": "actor_rollout_ref.rollout.cudagraph_capture_sizes",
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "infer_tp": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "train_tp": "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
    "train_pp": "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
    "train_cp": "actor_rollout_ref.actor.megatron.context_parallel_size",
    "pipeline_layers": _TC + "pipeline_num_transformer_layers",
}
_KEY_PARAMS = {key: name for name, key in PARAM_KEYS.items()}

# Keys computed from the values above: set the value they follow instead.
DERIVED_KEYS: dict[str, str] = {
    "actor_rollout_ref.actor.megatron.expert_model_parallel_size": "the world size / train_pp",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu":
        "(data.max_prompt_length + data.max_response_length) / train_cp",
    "actor_rollout_ref.rollout.max_num_batched_tokens":
        "data.max_prompt_length + data.max_response_length",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "data.train_batch_size",
    "actor_rollout_ref.ref.megatron.context_parallel_size": "train_cp",
    _TC + "context_parallel_size": "train_cp",
    _TC + "num_layers_in_first_pipeline_stage": "the pipeline split",
    _TC + "num_layers_in_last_pipeline_stage": "the pipeline split",
    "trainer.nnodes": "the node count",
    "trainer.n_gpus_per_node": "npus_per_node",
    "data.gen_batch_size": "data.train_batch_size",
    "reward_model.reward_kwargs.max_resp_len": "data.max_response_length",
}

# Types of the values a3rl generates. Hydra composition checks neither "+" keys nor the
# types of verl's untyped YAML keys, so check_types does: int, float (an int is a float),
# float? (or null), bool (True/False), str, int_list, stages (one-element int lists).
TYPES: dict[str, str] = {
    **{k: "int" for k in (
        "data.max_prompt_length", "data.max_response_length", "data.train_batch_size",
        "data.gen_batch_size", "data.dataloader_num_workers",
        "actor_rollout_ref.rollout.max_num_seqs", "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.rollout.max_num_batched_tokens",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.top_k",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
        "actor_rollout_ref.actor.megatron.context_parallel_size",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size",
        "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        "actor_rollout_ref.actor.optim.clip_grad",
        "actor_rollout_ref.ref.megatron.context_parallel_size",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "algorithm.filter_groups.max_num_gen_batches",
        "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.total_epochs",
        "trainer.save_freq", "trainer.test_freq", "trainer.critic_warmup",
        "trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep",
        _TC + "seq_length", _TC + "cp_window_size", _TC + "context_parallel_size",
        _TC + "num_layers_in_first_pipeline_stage", _TC + "num_layers_in_last_pipeline_stage",
        _TC + "recompute_num_layers",
        _SPEC + "num_speculative_tokens",
        "data.sampler.bucket_size",
        _OVERLONG + "len", "reward_model.reward_kwargs.max_resp_len",
    )},
    **{k: "float" for k in (
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.top_p",
        "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.kl_loss_coef",
        "actor_rollout_ref.actor.clip_ratio_low", "actor_rollout_ref.actor.clip_ratio_high",
        "actor_rollout_ref.actor.clip_ratio_c", "actor_rollout_ref.actor.entropy_coeff",
        "algorithm.kl_ctrl.kl_coef", "algorithm.rollout_is_threshold",
        "data.sampler.ema_decay", _OVERLONG + "penalty_factor",
    )},
    **{k: "float?" for k in (
        "algorithm.rollout_is_threshold_lower", "algorithm.rollout_is_veto_threshold",
    )},
    # null: verl runs the epochs' steps; 0 would start the job, load the model and train
    # nothing.
    "trainer.total_training_steps": "int?",
    **{k: "bool" for k in (
        "data.shuffle", "data.filter_overlong_prompts",
        "actor_rollout_ref.actor.load_weight", "actor_rollout_ref.ref.load_weight",
        "actor_rollout_ref.actor.megatron.use_dist_checkpointing",
        "actor_rollout_ref.ref.megatron.use_dist_checkpointing",
        "actor_rollout_ref.actor.use_dynamic_bsz", "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.recompute_old_log_prob",
        "actor_rollout_ref.actor.megatron.sequence_parallel",
        "actor_rollout_ref.actor.megatron.param_offload",
        "actor_rollout_ref.actor.megatron.grad_offload",
        "actor_rollout_ref.actor.megatron.optimizer_offload",
        "actor_rollout_ref.ref.megatron.param_offload",
        "actor_rollout_ref.rollout.enforce_eager",
        "actor_rollout_ref.rollout.enable_chunked_prefill",
        "actor_rollout_ref.rollout.ignore_eos",
        "algorithm.rollout_is", "algorithm.filter_groups.enable", "algorithm.use_kl_in_reward",
        "trainer.balance_batch", "trainer.val_before_train",
        _TC + "swap_optimizer", _TC + "use_flash_attn", _TC + "use_fused_rotary_pos_emb",
        _TC + "use_fused_swiglu", _TC + "use_cp_send_recv_overlap",
        _TC + "use_fused_ring_attention_update", _TC + "moe_alltoall_overlap_comm",
        _TC + "moe_grouped_gemm", _TC + "moe_permute_fusion",
        _TC + "gemm_gradient_accumulation_fusion",
        "data.sampler.shuffle_batch_blocks", _OVERLONG + "enable", _OVERLONG + "log",
    )},
    **{k: "str" for k in (
        _TC + "moe_token_dispatcher_type", _TC + "context_parallel_algo",
        _TC + "moe_zero_memory", _SPEC + "method", "trainer.default_local_dir",
    )},
    "actor_rollout_ref.rollout.cudagraph_capture_sizes": "int_list",
    _TC + "pipeline_num_transformer_layers": "stages",
}


class PlanError(ValueError):
    """A plan that cannot run; ``problems`` holds one message per violation."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("the run plan is refused:\n" + "\n".join(f"- {p}" for p in self.problems)
                         + "\n" + PLAN_FIX)


# The one fix every refusal shares: where a plan's inputs come from.
PLAN_FIX = ("Fix: change -e algo/model/weights/features/overrides, or the run's profile in "
            "group_vars/all/runs.yml (nodes and npus_per_node come from the inventory); "
            "`a3rl plan` checks a plan without touching the cluster.")


# --- Hydra override values: render and parse (the subset of Hydra's grammar we emit) ---

_BARE = re.compile(r"[A-Za-z0-9_./:\-]+")
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+|inf|nan)", re.IGNORECASE)


def render_value(value: Any) -> str:
    """A value as Hydra reads it back with the same type (True/False, null, [a,b], '...')."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(render_value(v) for v in value) + "]"
    text = str(value)
    if _BARE.fullmatch(text) and parse_value(text) == text:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def parse_value(text: str) -> Any:
    """A Hydra override value: null, bools (any case), ints, floats, quoted or bare
    strings, nested lists. Raises ValueError for a malformed one (unbalanced brackets,
    unterminated quotes)."""
    value, rest = _parse(text.strip(), top=True)
    if rest.strip():
        raise ValueError(f"unexpected {rest.strip()!r} after the value in {text!r}")
    return value


def _parse(text: str, top: bool) -> tuple[Any, str]:
    text = text.lstrip()
    if text.startswith("["):
        items: list[Any] = []
        rest = text[1:].lstrip()
        if rest.startswith("]"):
            return items, rest[1:]
        while True:
            item, rest = _parse(rest, top=False)
            items.append(item)
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:]
            elif rest.startswith("]"):
                return items, rest[1:]
            else:
                raise ValueError(f"list not closed with ']' in {text!r}")
    if text[:1] in ("'", '"'):
        quote, out, i = text[0], [], 1
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                return "".join(out), text[i + 1:]
            out.append(ch)
            i += 1
        raise ValueError(f"unterminated quote in {text!r}")
    if top:
        if "]" in text or "[" in text:
            raise ValueError(f"unbalanced brackets in {text!r}")
        return _scalar(text), ""
    end = len(text)
    for stop in (",", "]"):
        pos = text.find(stop)
        if pos != -1:
            end = min(end, pos)
    if "[" in text[:end]:
        raise ValueError(f"unbalanced brackets in {text!r}")
    return _scalar(text[:end]), text[end:]


def _scalar(text: str) -> Any:
    text = text.strip()
    lower = text.lower()
    if lower == "null":
        return None
    if lower in ("true", "false"):
        return lower == "true"
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def split_override(override: str) -> tuple[str, str, str]:
    """``+key=value`` -> (``+``, ``key``, ``value``); ValueError if it has no ``=``."""
    text = override.strip()
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {override!r} is not key=value")
    key = key.strip()
    prefix = key[: len(key) - len(key.lstrip("+~"))]
    return prefix, key[len(prefix):], value


# The ranges of the numbers among TYPES. A whole number is at least 1 and at most INT_MAX
# (a count, size or length of a run; none comes near 2**31: a sequence that long fits on
# no node, and a larger value is a typo that would reach the job), 0 or more where 0 has a
# meaning (none, off), or as listed in RANGES: -1 is verl's "never" for the save and test
# frequencies (its trainer config's defaults) and vLLM's "off" for top_k.
INT_MAX = 2**31 - 1
_ZERO_OR_MORE = (
    "data.dataloader_num_workers", "data.sampler.bucket_size",
    "actor_rollout_ref.actor.optim.clip_grad", "algorithm.filter_groups.max_num_gen_batches",
    "trainer.critic_warmup", "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep", _TC + "cp_window_size", _TC + "recompute_num_layers",
    _SPEC + "num_speculative_tokens", _OVERLONG + "len",
    "reward_model.reward_kwargs.max_resp_len",
)
RANGES: dict[str, tuple[float, float, str]] = {
    **{k: (1, INT_MAX, "") for k, kind in TYPES.items()
       if kind == "int" and k not in _ZERO_OR_MORE},
    **{k: (-1, INT_MAX, " (-1: never)") for k in ("trainer.save_freq", "trainer.test_freq")},
    "trainer.total_training_steps": (1, INT_MAX, " (or null: the epochs' steps)"),
    "actor_rollout_ref.rollout.top_k": (-1, INT_MAX, " (-1: off)"),
    # vLLM's sampling parameters refuse these (SamplingParams._verify_args).
    "actor_rollout_ref.rollout.top_p": (0, 1, "open below"),
    "actor_rollout_ref.rollout.temperature": (0, math.inf, ""),
    "actor_rollout_ref.actor.optim.lr": (0, math.inf, ""),
}


def range_problem(key: str, value: Any) -> str:
    """Why a number of a key a3rl knows is out of its range (:data:`RANGES`), or ''."""
    rng = RANGES.get(key) or ((0, INT_MAX, "") if TYPES.get(key) == "int" else None)
    if rng is None or isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    lo, hi, note = rng
    shown = render_value(value)
    if note == "open below":
        if not lo < value <= hi:
            return f"{key} must be above {lo} and at most {hi}, not {shown}"
        return ""
    if value < lo:
        least = "0 or more" if lo == 0 else f"at least {lo}{note}"
        return f"{key} must be {least}, not {shown}"
    if value > hi:
        return f"{key} must be at most {hi}, not {shown}"
    return ""


def check_types(overrides: Iterable[str]) -> list[str]:
    """Problems with the types and ranges of the values in ``overrides`` whose keys a3rl
    generates (:data:`TYPES`, :data:`RANGES`); other keys are left to Hydra. One message
    per bad value."""
    problems = []
    for override in overrides:
        try:
            _, key, text = split_override(override)
            value = parse_value(text)
        except ValueError as e:
            problems.append(f"{override}: {e}")
            continue
        kind = TYPES.get(key)
        if kind and not _is_kind(value, kind):
            problems.append(f"{override}: {key} must be {_KIND_TEXT[kind]}, "
                            f"not {render_value(value)}")
            continue
        why = range_problem(key, value)
        if why:
            problems.append(f"{override}: {why}")
    return problems


_KIND_TEXT = {"int": "a whole number", "int?": "a whole number or null",
              "float": "a number", "float?": "a number or null",
              "bool": "True or False", "str": "a string", "int_list": "a list of whole numbers",
              "stages": "a list of one-number lists like [[23],[24]]"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_kind(v: Any, kind: str) -> bool:
    if kind == "int":
        return _is_int(v)
    if kind == "float":
        return _is_int(v) or isinstance(v, float)
    if kind == "float?":
        return v is None or _is_int(v) or isinstance(v, float)
    if kind == "int?":
        return v is None or _is_int(v)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str)
    if kind == "int_list":
        return isinstance(v, list) and all(_is_int(x) for x in v)
    if kind == "stages":
        return isinstance(v, list) and all(
            isinstance(s, list) and len(s) == 1 and _is_int(s[0]) for s in v)
    return True


def _same(a: Any, b: Any) -> bool:
    """Equal with bools kept apart from 0/1 (data.shuffle=1 is not False)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


# --- the plan ---

@dataclass(frozen=True)
class Plan:
    """A checked run: the values (the recipe table's and the derived ones), the Hydra
    overrides in order and the env. ``job()`` is what is submitted."""

    algo: str
    model: str
    weights: str
    features: tuple[str, ...]
    values: Mapping[str, Any]
    overrides: tuple[str, ...]
    env: Mapping[str, str]
    entrypoint_module: str
    config_name: str
    workdir: str
    patched_keys: tuple[str, ...] = field(default=())
    # The checkpoint policy (a3rl.ckpt.Policy.as_dict), when the plan has one.
    checkpoint_policy: Mapping[str, Any] | None = None
    # The environment variables that carry the secret overrides' values (names only: the
    # values never enter the plan; a3rl.masking.job_secrets reads them at submission).
    secret_env: tuple[str, ...] = field(default=())
    # The keys the user's overrides add with "+": composed by the Hydra check, which
    # refuses one that verl's config already has (the plan's own "+" keys are not).
    added_keys: tuple[str, ...] = field(default=())

    @property
    def run_name(self) -> str:
        return f"a3rl-{self.algo}-{self.model}-{self.weights}"

    @property
    def config_path(self) -> str:
        # Absolute, as the recipe's CONFIG_DIR=$(pwd)/verl/trainer/config: Hydra resolves a
        # relative --config-path against the entrypoint module's package, not the cwd.
        return f"{self.workdir}/{CONFIG_DIR}"

    @property
    def submission_id(self) -> str:
        """The run name and a digest of what the job runs: the same plan gives the same id
        (Ray refuses a second submission under it), any change gives a new one. Where the
        run's checkpoints go and which one an attempt resumes from
        (ckpt.ATTEMPT_KEYS) follow from the id, so they are not part of it."""
        overrides = [o for o in self.overrides
                     if split_override(o)[1] not in ckpt.ATTEMPT_KEYS]
        digest = hashlib.sha256(json.dumps(
            {"entrypoint": self.entrypoint_module, "config_name": self.config_name,
             "config_path": self.config_path, "overrides": overrides,
             "env": dict(self.env)}, sort_keys=True).encode()).hexdigest()
        return f"{self.run_name}-{digest[:8]}"

    def overrides_map(self) -> dict[str, Any]:
        """Key (without its ``+``) -> typed value, as Hydra will read it."""
        out = {}
        for override in self.overrides:
            _, key, text = split_override(override)
            out[key] = parse_value(text)
        return out

    def hydra_overrides(self, plus: bool = False, patched: bool = True) -> list[str]:
        """The overrides to compose against verl's config: by default those Hydra checks
        (no ``+`` keys but the user's); ``patched=False`` leaves out the keys only the
        patched tree has."""
        out = []
        for override in self.overrides:
            prefix, key, _ = split_override(override)
            if prefix and not plus and key not in self.added_keys:
                continue
            if key in self.patched_keys and not patched:
                continue
            out.append(override)
        return out

    def job(self) -> dict[str, Any]:
        """The job: the entrypoint (to run with ``working_dir`` as its cwd, where the
        recipe layout's ``verl`` package and DAPO's relative Hydra search path resolve),
        its parts, the env and the submission id."""
        entrypoint = " ".join([
            "python3", "-m", self.entrypoint_module,
            f"--config-path={shlex.quote(self.config_path)}",
            f"--config-name={self.config_name}",
            *(shlex.quote(o) for o in self.overrides),
        ])
        return {
            "entrypoint": entrypoint,
            "config_name": self.config_name,
            "config_path": self.config_path,
            "working_dir": self.workdir,
            "overrides": list(self.overrides),
            "env": dict(self.env),
            "secret_env": list(self.secret_env),
            "submission_id": self.submission_id,
            "run_name": self.run_name,
            "values": dict(self.values),
            # For the pre-submit Hydra check and the simulator's module swap.
            "module": self.entrypoint_module,
            "hydra_overrides": self.hydra_overrides(),
            # The run's identity across its attempts (a resumed one is <run_id>-r<k>).
            "run_id": self.submission_id,
            "attempt": 1,
            "checkpoint": dict(self.checkpoint_policy or {"enabled": False, "why": [
                "no checkpoint policy: the recipe's trainer.save_freq"]}),
        }


def run_key(algo: str, model: str, weights: str) -> str:
    """The a3rl_runs key of a run: ``grpo-qwen3_235b-real``."""
    return f"{algo}-{model}-{weights}"


def make_plan(algo: str, model: str, weights: str, features: Iterable[str] | str | None,
              nodes: int | str | None, npus_per_node: int | str | None,
              profiles: Mapping[str, Any],
              extra_overrides: Iterable[str] | None = None,
              checkpoint_record: Mapping[str, Any] | None = None,
              checkpointing: Mapping[str, Any] | None = None) -> Plan:
    """Check and render one run.

    ``profiles``: the group_vars named in :data:`PROFILE_VARS` (``a3rl_models``,
    ``a3rl_algorithms``, ``a3rl_runs``, ``a3rl_features``, ``a3rl_run_defaults``,
    ``a3rl_model_overrides``, ``a3rl_patched_keys``; a missing one is refused rather than
    silently planning without its overrides), plus ``paths`` (:func:`node_paths`).
    ``features``: names added to the run's defaults, ``no-<name>`` to drop one; a
    comma-separated string is split.
    ``nodes``/``npus_per_node`` default to the recipe's (the run's nodes) and the
    cluster's (``npus_per_node`` of group_vars/all/cluster.yml).
    ``extra_overrides``: the user's Hydra overrides, appended and checked like the rest.
    ``checkpoint_record``: the dist-checkpoint's a3rl-conversion.json, when there is one.
    ``checkpointing``: the checkpoint policy's settings (:func:`a3rl.ckpt.policy`'s
    ``enabled``, ``root``, ``shared``, ``max_lost_minutes``, ``keep``; ``step_seconds`` to
    replace the run's published estimate); None keeps the recipe's ``trainer.save_freq``.
    Raises PlanError listing every problem found.
    """
    missing = [name for name in (*PROFILE_VARS, "paths") if profiles.get(name) is None]
    if missing:
        raise PlanError([f"the plan's profiles lack {', '.join(missing)} (group_vars/all/"
                         f"models.yml, runs.yml; paths from node_paths)"])
    problems: list[str] = []
    models = profiles.get("a3rl_models") or {}
    algos = profiles.get("a3rl_algorithms") or {}
    runs = profiles.get("a3rl_runs") or {}
    catalogue = profiles.get("a3rl_features") or {}
    paths = profiles.get("paths") or {}

    if algo not in algos:
        problems.append(f"unknown algorithm {algo!r}: use one of {', '.join(algos)}")
    if model not in models:
        problems.append(f"unknown model {model!r}: use one of {', '.join(models)}")
    if weights not in WEIGHTS:
        problems.append(f"unknown weights {weights!r}: use real or random")
    wanted, feature_problems = _features(features, catalogue)
    problems += feature_problems
    if problems:
        raise PlanError(problems)
    key = run_key(algo, model, weights)
    if key not in runs:
        raise PlanError([f"the recipe has no {weights}-weights {algo} run for {model}: "
                         f"plans exist for {', '.join(runs)}"])
    run, mprof, aprof = runs[key], models[model], algos[algo]
    enabled = _enabled(run.get("features") or [], wanted, catalogue)

    npus_per_node = rolevars.npus_per_node() if npus_per_node is None else npus_per_node
    nodes = run.get("nodes") if nodes is None else nodes
    nodes_i = _size("nodes", nodes, problems)
    npn_i = _size("npus_per_node", npus_per_node, problems)

    # The run's values, then the user's overrides of them (which every rule then sees).
    params = {name: run.get(name) for name in PARAM_KEYS}
    extras = _user_overrides(extra_overrides, params, problems,
                             policy_keys=checkpointing is not None)
    # A value the recipe's script derives from NODES is its formula in runs.yml: computed
    # here as bash would, for this plan's node count (a user's value replaces it).
    derived_ok = True
    if isinstance(params["train_cp"], str):
        cp = _script_formula(key, "train_cp", params["train_cp"], nodes_i, params,
                             problems) if nodes_i else None
        derived_ok = cp is not None
        params["train_cp"] = cp
    ok = _check_params(params if derived_ok else {**params, "train_cp": 1}, problems) \
        and derived_ok
    checkpoint = run.get("checkpoint")
    _check_checkpoint(key, checkpoint, weights, model, mprof, problems)

    # Cluster size and parallel layout.
    layers = mprof.get("layers")
    moe = bool(mprof.get("moe"))
    values: dict[str, Any] = {}
    if nodes_i and npn_i and ok:
        world = nodes_i * npn_i
        values = _layout(model, mprof, params, nodes_i, npn_i, world, layers, moe, problems)

    # Overrides, layer by layer: later wins (in place), the user's last.
    ov: dict[str, tuple[str, Any]] = {}
    for where, layer in (("a3rl_run_defaults", (profiles.get("a3rl_run_defaults") or {})
                          .get("overrides")),
                         (f"a3rl_algorithms.{algo}", aprof.get("overrides")),
                         (f"a3rl_model_overrides.{model}",
                          (profiles.get("a3rl_model_overrides") or {}).get(model)),
                         (f"a3rl_runs.{key}", run.get("overrides"))):
        _apply(ov, layer or {}, where, problems, computed_ok=False)
    if values:
        # A feature may name another reward file (a3rl_grader): it replaces the recipe's.
        rewards = [catalogue[n]["reward"] for n in enabled if (catalogue[n] or {}).get("reward")]
        if rewards and aprof.get("reward"):
            aprof = {**aprof, "reward": rewards[-1]}
        computed = _computed(algo, aprof, mprof, checkpoint, params, values, nodes_i, npn_i,
                             paths, problems)
        _apply(ov, computed, "computed", problems, computed_ok=True)
    for name in enabled:
        _apply(ov, catalogue[name].get("overrides") or {}, f"a3rl_features.{name}", problems,
               computed_ok=False)
    policy = None
    if checkpointing is not None:
        policy = _policy(checkpointing, run, mprof, weights, nodes_i or 0, problems)
        _apply(ov, policy.overrides(), "the checkpoint policy", problems, computed_ok=True)
    for prefix, okey, value in extras:
        if prefix == "+" and okey in ov and not ov[okey][0]:
            # Hydra refuses "+" on a key that exists, but only when the job composes its
            # config: after submission.
            problems.append(f"extra override '+{okey}={render_value(value)}': {okey} is "
                            "already in the run's overrides (the plan sets it), and Hydra "
                            "refuses '+' on a key that exists. Fix: drop the '+' "
                            f"({okey}=...)")
            continue
        ov.pop(okey, None)
        ov[okey] = (prefix, value)
    final = {k: v for k, (_, v) in ov.items()}

    # Features: what each needs, what it cannot run with.
    rule_problems, failed = _feature_rules(enabled, catalogue, weights, moe, params, final,
                                           algo, bool(aprof.get("reward")))
    problems += rule_problems

    # The env: the model env script's variables for this run, its features switched.
    env: dict[str, str] = {}
    if values and values["world_size"] % params["infer_tp"] == 0:
        env = _env(model, mprof, params, enabled, failed, catalogue, nodes_i, npn_i, weights,
                   problems)
        values["speculative_batch_size_thre"] = int(env.get("VLLM_SPECULATIVE_BATCH_SIZE_THRE",
                                                            -1))
    if checkpoint == "mcore" and checkpoint_record is not None and env:
        _check_record(checkpoint_record, env, problems)

    # A secret-looking user override (a3rl.masking) goes on the command line as a
    # reference to an environment variable; its value reaches the job in that variable.
    secret = {okey: masking.env_name(okey) for prefix, okey, _ in extras
              if masking.secret_override(f"{okey}=")}
    overrides = tuple(f"{prefix}{k}="
                      + render_value(f"${{oc.env:{secret[k]}}}" if k in secret else v)
                      for k, (prefix, v) in ov.items())
    problems += check_types(overrides)
    if problems:
        raise PlanError(problems)
    values.update({"checkpoint": checkpoint, "features": list(enabled)})
    made = Plan(algo=algo, model=model, weights=weights, features=tuple(enabled),
                values=values, overrides=overrides, env=env,
                entrypoint_module=str(aprof["entrypoint"]),
                config_name=str(aprof["config_name"]),
                workdir=str(paths.get("workdir", "")).rstrip("/"),
                patched_keys=tuple(profiles.get("a3rl_patched_keys") or ()),
                checkpoint_policy=policy.as_dict() if policy else None,
                secret_env=tuple(sorted(secret.values())),
                added_keys=tuple(okey for prefix, okey, _ in extras if prefix == "+"))
    if policy is None or not policy.enabled:
        return made
    # The run's own folder, named by its id (which does not depend on the folder).
    folder = ckpt.run_dir(policy.root, made.submission_id)
    return replace(made, overrides=(*overrides,
                                    f"trainer.default_local_dir={render_value(folder)}"),
                   checkpoint_policy={**policy.as_dict(), "dir": folder})


def _policy(settings: Mapping[str, Any], run: Mapping[str, Any], mprof: Mapping[str, Any],
            weights: str, nodes: int, problems: list[str]) -> ckpt.Policy:
    """The checkpoint policy of the run: the user's settings, the run's published step
    time (runs.yml ``step_seconds``) unless measured steps replace it, the model's size."""
    measured = settings.get("step_seconds")
    step = measured if measured is not None else run.get("step_seconds")
    source = settings.get("step_source") or (
        "measured" if measured is not None else run.get("step_source") or "runs.yml")
    return ckpt.policy(
        enabled=ckpt.switch(settings.get("enabled"), problems), weights=weights,
        nodes=nodes,
        root=str(settings.get("root") or ""), shared=settings.get("shared"),
        max_lost_minutes=settings.get("max_lost_minutes", 60), keep=settings.get("keep", 2),
        step_seconds=step, step_source=str(source), params=mprof.get("params"),
        problems=problems)


# The run parameters' keys the plan itself passes with "+" (keys verl's config lacks).
_PLUS_PARAMS = frozenset({PARAM_KEYS["pipeline_layers"]})


# OmegaConf's resolver of the environment, as Hydra passes it on (spaces allowed); the
# plan's own references (secret overrides: ${oc.env:A3RL_SECRET_<KEY>}) are added after
# the user's overrides are read.
_ENV_INTERPOLATION = re.compile(r"\$\{\s*(oc\.env|env)\s*:")


def _user_overrides(extra_overrides: Iterable[str] | None, params: dict[str, Any],
                    problems: list[str],
                    policy_keys: bool = False) -> list[tuple[str, str, Any]]:
    """The user's Hydra overrides: a run parameter's key sets ``params`` (so every rule sees
    it); any other key is returned as ``(prefix, key, value)``, applied last."""
    extras: list[tuple[str, str, Any]] = []
    if isinstance(extra_overrides, str | bytes | Mapping):
        problems.append(f"overrides {extra_overrides!r} is not a list of 'key=value' strings "
                        "(-e '{\"overrides\": [\"data.train_batch_size=64\"]}')")
        return extras
    given: dict[str, str] = {}
    for override in extra_overrides or []:
        if not isinstance(override, str):
            problems.append(f"extra override {override!r} ({_kind_of(override)}) is not a "
                            "'key=value' string")
            continue
        try:
            prefix, okey, text = split_override(override)
            value = parse_value(text)
        except ValueError as e:
            problems.append(f"extra override {override!r}: {e}")
            continue
        if okey in given:
            # Hydra takes the last silently; one of the two is a mistake.
            problems.append(f"extra overrides {given[okey]!r} and {override!r}: {okey} is "
                            "given twice. Fix: keep one")
            continue
        given[okey] = override
        if _ENV_INTERPOLATION.search(text):
            problems.append(f"extra override {override!r}: a value read from the job's "
                            "environment (${oc.env:...}) becomes a config value that verl "
                            "prints and its loggers send, unmasked. Fix: give the value "
                            "itself; a secret goes in an override whose key ends in "
                            "password, secret, token, api_key, ... (+trainer.wandb_api_key="
                            "...), which reaches the job through its environment, masked")
        elif "~" in prefix:
            problems.append(f"extra override {override!r}: deleting keys is not supported")
        elif policy_keys and okey in ckpt.POLICY_KEYS:
            problems.append(f"extra override {override!r}: {okey} is set by the checkpoint "
                            "policy; set train_job_checkpoint, _max_lost_minutes, _keep or "
                            "_dir instead (-e train_job_checkpoint=false keeps the recipe's)")
        elif okey in DERIVED_KEYS:
            problems.append(f"extra override {override!r}: {okey} is computed from "
                            f"{DERIVED_KEYS[okey]}; set that instead")
        elif okey in _KEY_PARAMS and prefix == "+" and okey not in _PLUS_PARAMS:
            problems.append(f"extra override {override!r}: {okey} is already in the run's "
                            "overrides (the plan sets it), and Hydra refuses '+' on a key "
                            f"that exists. Fix: drop the '+' ({okey}=...)")
        elif okey in _KEY_PARAMS:
            params[_KEY_PARAMS[okey]] = _stages_to_layers(value) \
                if _KEY_PARAMS[okey] == "pipeline_layers" else value
        else:
            extras.append((prefix, okey, value))
    return extras


def _check_checkpoint(key: str, checkpoint: Any, weights: str, model: str,
                      mprof: Mapping[str, Any], problems: list[str]) -> None:
    """The run's checkpoint kind fits its weights and the model's profile."""
    if checkpoint not in CHECKPOINTS:
        problems.append(f"runs.yml {key}: checkpoint {checkpoint!r} is not one of "
                        f"{', '.join(CHECKPOINTS)}")
    elif (checkpoint == "none") != (weights == "random"):
        problems.append(f"runs.yml {key}: checkpoint {checkpoint} does not fit {weights} "
                        f"weights (none is random initialisation)")
    elif checkpoint == "mcore" and not (mprof.get("weights") or {}).get("dist_checkpoint"):
        problems.append(f"runs.yml {key}: loads a dist-checkpoint, but models.yml makes none "
                        f"for {model} (weights.dist_checkpoint)")


def _check_record(record: Mapping[str, Any], env: Mapping[str, str],
                  problems: list[str]) -> None:
    """The dist-checkpoint was converted with this run's USE_ALLTOALL_OVERLAP."""
    want = env.get("USE_ALLTOALL_OVERLAP", "0")
    have = record.get(RECORD_ALLTOALL)
    have_s = ("1" if have else "0") if isinstance(have, bool) else str(have)
    if have is None:
        problems.append(f"the dist-checkpoint's record does not say how it was converted "
                        f"({RECORD_ALLTOALL}): convert it again (weights play)")
    elif have_s != want:
        problems.append(
            f"the dist-checkpoint was converted with USE_ALLTOALL_OVERLAP={have}, this run "
            f"uses {want}: convert again with {want} (weights play) or "
            f"{'drop' if want == '1' else 'add'} the alltoall_overlap feature")


def _features(features: Iterable[str] | str | None,
              catalogue: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    if features is None:
        return [], []
    names = features.split(",") if isinstance(features, str) else list(features)
    out, problems = [], []
    for raw in names:
        name = str(raw).strip()
        if not name:
            continue
        bare = name[len(FEATURE_OFF):] if name.startswith(FEATURE_OFF) else name
        if bare not in catalogue:
            problems.append(f"unknown feature {bare!r}: use one of {', '.join(catalogue)} "
                            f"(or {FEATURE_OFF}<name> to turn a default off)")
        else:
            out.append(name)
    for name in out:
        if FEATURE_OFF + name in out:
            problems.append(f"features {name} and {FEATURE_OFF}{name} are both asked for: "
                            f"{name} would be on or off by their order. Fix: keep one of them")
    return out, problems


def _enabled(defaults: Sequence[str], wanted: Sequence[str],
             catalogue: Mapping[str, Any]) -> list[str]:
    on = set(defaults)
    for name in wanted:
        if name.startswith(FEATURE_OFF):
            on.discard(name[len(FEATURE_OFF):])
        else:
            on.add(name)
    # Catalogue order: the same set gives the same plan whatever order it was asked in.
    return [name for name in catalogue if name in on]


def _kind_of(value: Any) -> str:
    """What a YAML value is, in words (Ansible hands in tagged subclasses of the types)."""
    for kind, word in ((type(None), "null"), (bool, "a boolean"), (int, "a number"),
                       (float, "a number"), (Mapping, "a mapping"), (list, "a list")):
        if isinstance(value, kind):
            return word
    return type(value).__name__


def _size(name: str, value: Any, problems: list[str]) -> int | None:
    """A positive whole number (a string of digits too: Ansible's -e gives strings)."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if not _is_int(value) or value <= 0:
        problems.append(f"{name} must be a positive whole number, not {value!r}")
        return None
    return value


# The names a run's formula may use: the recipe scripts' shell variables.
_FORMULA_NAMES = {"TRAIN_TP": "train_tp", "TRAIN_PP": "train_pp", "INFER_TP": "infer_tp",
                  "MAX_PROMPT_LENGTH": "max_prompt_length",
                  "MAX_RESPONSE_LENGTH": "max_response_length"}


def shell_arithmetic(expr: str, names: Mapping[str, int]) -> int:
    """``$(( expr ))`` as bash computes it for the recipe scripts' formulas: whole
    numbers, ``+ - * /`` and parentheses, ``/`` truncating toward zero. Raises
    ValueError on anything else, an unknown name or a division by zero."""
    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and _is_int(node.value):
            return int(node.value)
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"unknown name {node.id} (known: {', '.join(names)})")
            return int(names[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult,
                                                                ast.Div)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if b == 0:
                raise ValueError("division by zero")
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b > 0) else -q
        raise ValueError(f"{ast.dump(node)} is not shell arithmetic the plans use")

    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot parse {expr!r}") from e
    return ev(tree)


def _script_formula(key: str, name: str, expr: str, nodes: int, params: Mapping[str, Any],
                    problems: list[str]) -> Any:
    """A value the recipe's script derives from NODES (runs.yml holds its formula)."""
    names = {"NODES": nodes}
    for var, param in _FORMULA_NAMES.items():
        value = params.get(param)
        if _is_int(value) and value > 0:
            names[var] = value
    try:
        value = shell_arithmetic(expr, names)
    except ValueError as e:
        problems.append(f"runs.yml {key}: {name} = {expr}: {e}")
        return None
    if value <= 0:
        problems.append(f"{key}: the recipe's script derives {name} = {expr} = {value} on "
                        f"{nodes} nodes; a plan needs at least 1: use more nodes")
        return None
    return value


def _check_params(params: dict[str, Any], problems: list[str]) -> bool:
    before = len(problems)
    for name in ("max_prompt_length", "max_response_length", "train_batch_size",
                 "max_num_seqs", "infer_tp", "train_tp", "train_pp", "train_cp"):
        _size(name, params[name], problems)
    mem = params["gpu_memory_utilization"]
    if isinstance(mem, bool) or not isinstance(mem, (int, float)) or not 0 < mem <= 1:
        problems.append(f"gpu_memory_utilization must be a number in (0, 1], not {mem!r}")
    sizes = params["cudagraph_capture_sizes"]
    if sizes is not None and (not isinstance(sizes, list)
                              or not all(_is_int(s) and s > 0 for s in sizes)):
        problems.append(f"cudagraph_capture_sizes must be a list of positive whole numbers, "
                        f"not {sizes!r}")
    split = params["pipeline_layers"]
    if split is not None and (not isinstance(split, list) or not split
                              or not all(_is_int(s) and s > 0 for s in split)):
        problems.append(f"pipeline_layers must be a list of positive whole numbers, "
                        f"not {split!r}")
    return len(problems) == before


def _stages_to_layers(value: Any) -> Any:
    """[[23],[24]] (MindSpeed's form) -> [23, 24]; anything else is returned to be refused."""
    if isinstance(value, list) and all(isinstance(s, list) and len(s) == 1 for s in value):
        return [s[0] for s in value]
    return value


def _layout(model: str, mprof: Mapping[str, Any], p: Mapping[str, Any], nodes: int,
            npus: int, world: int, layers: Any, moe: bool,
            problems: list[str]) -> dict[str, Any]:
    name = mprof.get("name", model)
    # An Atlas A3 node's NPUs (group_vars/all/cluster.yml): the unit of min_nodes.
    unit = rolevars.npus_per_node()
    need = int(mprof.get("min_nodes", 1)) * unit
    if world < need:
        problems.append(
            f"{name} needs at least {need} NPUs ({mprof.get('min_nodes')} nodes x "
            f"{unit}); this plan has {world} ({nodes} x {npus})")
    tp, pp, cp, itp = p["train_tp"], p["train_pp"], p["train_cp"], p["infer_tp"]
    if world % itp:
        problems.append(f"rollout tensor parallel size {itp} does not divide the {world} NPUs")
    if world % (tp * pp * cp):
        problems.append(f"train TP x PP x CP = {tp} x {pp} x {cp} = {tp * pp * cp} does not "
                        f"divide the {world} NPUs")
    if moe and world % pp:
        problems.append(f"expert parallel size = NPUs / PP: {world} NPUs do not divide by "
                        f"PP {pp}")
    dp = world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else None
    split = p["pipeline_layers"]
    if not _is_int(layers) or layers <= 0:
        problems.append(f"models.yml {model}: layers must be a positive whole number")
    elif split is not None:
        if len(split) != pp:
            problems.append(f"the pipeline split {split} has {len(split)} stages, PP is {pp}")
        if sum(split) != layers:
            problems.append(f"the pipeline split {split} sums to {sum(split)}, {name} has "
                            f"{layers} layers")
    elif layers % pp:
        problems.append(f"{name}'s {layers} layers do not split evenly over PP {pp}: give "
                        f"pipeline_layers")
    sizes = p["cudagraph_capture_sizes"] or []
    if sizes and max(sizes) > p["max_num_seqs"]:
        problems.append(f"graph size {max(sizes)} exceeds max_num_seqs {p['max_num_seqs']}")
    tokens = p["max_prompt_length"] + p["max_response_length"]
    return {
        "nodes": nodes, "npus_per_node": npus, "world_size": world,
        **{k: p[k] for k in ("max_prompt_length", "max_response_length", "train_batch_size",
                             "max_num_seqs", "cudagraph_capture_sizes",
                             "gpu_memory_utilization", "infer_tp", "train_tp", "train_pp",
                             "train_cp", "pipeline_layers")},
        "infer_dp": world // itp,
        "train_dp": dp,
        "train_ep": world // pp if moe else None,
        "max_num_batched_tokens": tokens,
        "max_token_len_per_gpu": tokens // cp,
    }


def _computed(algo: str, aprof: Mapping[str, Any], mprof: Mapping[str, Any],
              checkpoint: str, p: Mapping[str, Any], v: Mapping[str, Any], nodes: int,
              npus: int, paths: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """The overrides that follow from the run's values, the cluster and the paths."""
    out: dict[str, Any] = {}
    datasets = paths.get("datasets") or {}
    for which, key in (("train", "data.train_files"), ("val", "data.val_files")):
        spec = (aprof.get("data") or {}).get(which) or {}
        folder = datasets.get(spec.get("dataset"))
        if folder is None:
            problems.append(f"no path on the nodes for dataset {spec.get('dataset')!r} "
                            f"({algo} {which} data)")
        else:
            out[key] = f"{folder}/{spec.get('file')}"
    out.update({
        "data.train_batch_size": p["train_batch_size"],
        "data.max_prompt_length": p["max_prompt_length"],
        "data.max_response_length": p["max_response_length"],
    })
    if "gen_batch_size_factor" in aprof:
        out["data.gen_batch_size"] = p["train_batch_size"] * int(aprof["gen_batch_size_factor"])
    reward = aprof.get("reward")
    if reward:
        out["custom_reward_function.path"] = f"{paths.get('workdir', '').rstrip('/')}/" \
                                             f"{reward['file']}"
        out["custom_reward_function.name"] = reward["function"]
    if (aprof.get("overrides") or {}).get("reward_model.reward_manager") == "dapo":
        # The dapo reward manager's overlong penalty measures against the response cap.
        out["+reward_model.reward_kwargs.max_resp_len"] = p["max_response_length"]

    weights = mprof.get("weights") or {}
    artifact = weights.get("config") if checkpoint == "none" else weights.get("hf")
    model_dir = (paths.get("models") or {}).get(artifact)
    if model_dir is None:
        problems.append(f"no path on the nodes for the model files {artifact!r}")
        model_dir = ""
    out["actor_rollout_ref.model.path"] = model_dir
    out["actor_rollout_ref.actor.ppo_mini_batch_size"] = p["train_batch_size"]
    out[PARAM_KEYS["train_tp"]] = p["train_tp"]
    out[PARAM_KEYS["train_pp"]] = p["train_pp"]
    out[PARAM_KEYS["train_cp"]] = p["train_cp"]
    if v["train_ep"] is not None:
        out["actor_rollout_ref.actor.megatron.expert_model_parallel_size"] = v["train_ep"]
    load = checkpoint != "none"
    out["actor_rollout_ref.actor.load_weight"] = load
    out["actor_rollout_ref.ref.load_weight"] = load
    if checkpoint in ("mcore", "hf"):
        # The dist-checkpoint sits beside the HF weights (roles/mcore_checkpoint).
        for side in ("actor", "ref"):
            out[f"actor_rollout_ref.{side}.megatron.use_dist_checkpointing"] = \
                checkpoint == "mcore"
            if checkpoint == "mcore":
                out[f"actor_rollout_ref.{side}.megatron.dist_checkpointing_path"] = \
                    f"{model_dir}-mcore"
    out["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] = v["max_token_len_per_gpu"]
    out[PARAM_KEYS["infer_tp"]] = p["infer_tp"]
    out[PARAM_KEYS["gpu_memory_utilization"]] = p["gpu_memory_utilization"]
    out["actor_rollout_ref.rollout.max_num_batched_tokens"] = v["max_num_batched_tokens"]
    out[PARAM_KEYS["max_num_seqs"]] = p["max_num_seqs"]
    if p["cudagraph_capture_sizes"]:
        out[PARAM_KEYS["cudagraph_capture_sizes"]] = list(p["cudagraph_capture_sizes"])
    out["actor_rollout_ref.ref.megatron.context_parallel_size"] = p["train_cp"]
    out["trainer.n_gpus_per_node"] = npus
    out["trainer.nnodes"] = nodes
    out["+" + _TC + "context_parallel_size"] = p["train_cp"]
    split = p["pipeline_layers"]
    if split:
        out["+" + PARAM_KEYS["pipeline_layers"]] = [[n] for n in split]
        out["+" + _TC + "num_layers_in_first_pipeline_stage"] = split[0]
        out["+" + _TC + "num_layers_in_last_pipeline_stage"] = split[-1]
    return out


def _apply(ov: dict[str, tuple[str, Any]], layer: Mapping[str, Any], where: str,
           problems: list[str], computed_ok: bool) -> None:
    for raw, value in layer.items():
        raw = str(raw)
        prefix = raw[: len(raw) - len(raw.lstrip("+"))]
        key = raw[len(prefix):]
        if not computed_ok and (key in DERIVED_KEYS or key in _KEY_PARAMS):
            problems.append(f"{where} sets {key}, which a3rl.planning.plan computes; set the run's "
                            f"value instead")
            continue
        ov[key] = (prefix, value)  # an existing key keeps its place in the list


def _feature_rules(enabled: Sequence[str], catalogue: Mapping[str, Any], weights: str,
                   moe: bool, p: Mapping[str, Any],
                   final: Mapping[str, Any], algo: str = "",
                   has_reward: bool = True) -> tuple[list[str], set[str]]:
    """Problems with the enabled features, and the features that have one."""
    problems: list[str] = []
    failed: set[str] = set()
    seen_conflicts: set[frozenset[str]] = set()
    for name in enabled:
        before = len(problems)
        spec = catalogue[name] or {}
        req = spec.get("requires") or {}
        if "weights" in req and req["weights"] != weights:
            problems.append(f"feature {name} needs {req['weights']} weights; this run has "
                            f"{weights} weights (drop it: {FEATURE_OFF}{name})")
        if req.get("moe") and not moe:
            problems.append(f"feature {name} needs a MoE model")
        if req.get("reward") and not has_reward:
            problems.append(f"feature {name} replaces the custom reward function, which the "
                            f"{algo} runs do not use (drop the feature {name})")
        for other in req.get("features") or []:
            if other not in enabled:
                problems.append(f"feature {name} needs feature {other}")
        min_cp = req.get("min_train_cp")
        if min_cp and _is_int(p.get("train_cp")) and p["train_cp"] < min_cp:
            problems.append(f"feature {name} needs train CP >= {min_cp}; this run has CP "
                            f"{p['train_cp']}")
        for key, want in (req.get("overrides") or {}).items():
            have = final.get(key)
            if not _same(have, want):
                problems.append(f"feature {name} needs {key}={render_value(want)}; the plan "
                                f"has {key}={render_value(have)}")
        for other in spec.get("conflicts") or []:
            pair = frozenset((name, other))
            if other in enabled and pair not in seen_conflicts:
                seen_conflicts.add(pair)
                problems.append(f"features {name} and {other} cannot be used together")
        if len(problems) > before:
            failed.add(name)
    return problems, failed


def _env(model: str, mprof: Mapping[str, Any], p: Mapping[str, Any], enabled: Sequence[str],
         failed: set[str], catalogue: Mapping[str, Any], nodes: int, npus: int, weights: str,
         problems: list[str]) -> dict[str, str]:
    """recipe_env.model_env with the run's rollout TP and batch cap (the speculative
    threshold is the run's, not the model's default) and the features' switches; the
    threshold is -1 (never engage) without SAM, as for random weights."""
    known = {**(mprof.get("features") or {}), **(mprof.get("optional_features") or {})}
    switches: dict[str, Any] = {}
    for name, spec in catalogue.items():
        spec = spec or {}
        if name in enabled:
            for key, value in (spec.get("env") or {}).items():
                if key in known:
                    switches[key] = value
                elif name not in failed:  # a failed requirement already says why
                    problems.append(f"feature {name} sets {key}, which {model}'s model env "
                                    f"(models.yml) does not have")
        else:
            switches.update({k: v for k, v in (spec.get("off_env") or {}).items() if k in known})
    profile = {**mprof, "infer_tp": p["infer_tp"], "max_num_seqs": p["max_num_seqs"]}
    try:
        return model_env(profile, nodes, npus,
                         random_weights=weights == "random" or "sam" not in enabled,
                         features=switches)
    except RecipeEnvError as e:
        problems.append(str(e))
        return {}


# --- from the group_vars files ---

def node_paths(assets_dir: str, workdir: str, datasets: Mapping[str, Any],
               artifacts: Mapping[str, Any]) -> dict[str, Any]:
    """Where a plan's files are on the nodes: each dataset's folder
    (``<assets>/<dest>``, data.yml), each model artifact's folder (``<assets>/models/...``,
    artifacts.yml) and the recipe working directory."""
    assets = str(assets_dir).rstrip("/")
    models = {}
    for name, spec in (artifacts or {}).items():
        dest = (spec or {}).get("dest") if isinstance(spec, Mapping) else None
        if isinstance(dest, str) and dest.startswith("models/") and "{{" not in dest:
            models[name] = f"{assets}/{dest.rstrip('/')}"
    return {
        "workdir": str(workdir).rstrip("/"),
        "datasets": {name: f"{assets}/{str(spec['dest']).rstrip('/')}"
                     for name, spec in (datasets or {}).items()
                     if isinstance(spec, Mapping) and spec.get("dest")},
        "models": models,
    }


def load_profiles(root: Path) -> dict[str, Any]:
    """The run-plan variables from ``group_vars/all`` (models, runs, datasets and the
    artifact manifest's dest paths; values holding Jinja are read as plain strings)."""
    gv = Path(root) / "group_vars" / "all"
    out: dict[str, Any] = {}
    for name in ("models.yml", "runs.yml", "data.yml", "artifacts.yml"):
        out.update(yaml.safe_load((gv / name).read_text()) or {})
    return out


def plan_from_files(root: Path, algo: str, model: str, weights: str,
                    features: Iterable[str] | str | None, nodes: int | str | None,
                    npus_per_node: int | str | None, assets_dir: str, workdir: str,
                    extra_overrides: Iterable[str] | None = None,
                    checkpoint_record: Mapping[str, Any] | None = None,
                    checkpointing: Mapping[str, Any] | None = None) -> Plan:
    """:func:`make_plan` with the profiles read from the project at ``root`` (for
    ``a3rl plan``: no inventory, no host)."""
    data = load_profiles(root)
    profiles = {k: data.get(k) for k in PROFILE_VARS}
    profiles["paths"] = node_paths(assets_dir, workdir, data.get("a3rl_datasets") or {},
                                   data.get("a3rl_artifacts") or {})
    return make_plan(algo, model, weights, features, nodes, npus_per_node, profiles,
                     extra_overrides=extra_overrides, checkpoint_record=checkpoint_record,
                     checkpointing=checkpointing)


def plan_job(profiles: Mapping[str, Any], algo: str, model: str, weights: str,
             features: Iterable[str] | str | None = None, nodes: int | str | None = None,
             npus_per_node: int | str | None = None,
             extra_overrides: Iterable[str] | None = None,
             checkpoint_record: Mapping[str, Any] | None = None,
             checkpointing: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`make_plan` then :meth:`Plan.job`: plain data, for an Ansible filter
    (``profiles | a3rl_plan_job(algo, model, weights, ...)``); a refused plan raises
    PlanError, a ValueError, with every problem in its message."""
    return make_plan(algo, model, weights, features, nodes, npus_per_node, profiles,
                     extra_overrides=extra_overrides, checkpoint_record=checkpoint_record,
                     checkpointing=checkpointing).job()
