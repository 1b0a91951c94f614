"""The simulator's CPU profile of a run: the real plan, made runnable by real verl on CPU.

The recipe's runs use Megatron for training and vLLM-Ascend for rollout on 16 NPUs per
node; neither runs here. ``cpu_job`` takes the real plan's job (``a3rl.plan.Plan.job``,
checked by the plan's rules and, on the head, by Hydra against the staged configs, as on
a real cluster) and derives the job the simulator submits to real verl 0.6.0:

* KEPT, as the plan has them: the algorithm (``algorithm.*``, the entry point), the data
  files and their handling (``data.train_files``, ``val_files``, ``shuffle``,
  ``filter_overlong_prompts``, ``truncation``), the reward function
  (``custom_reward_function.*``), rollout ``n`` and sampling (temperature, top-k/p), the
  KL settings (``use_kl_loss``, ``kl_loss_coef``, ``kl_loss_type``,
  ``algorithm.kl_ctrl``), the optimiser, the trainer's schedule (epochs, steps, save and
  test frequency), the model path, ``trainer.nnodes`` (the cluster's shape as Ray sees
  it) and the plan's env.
* REPLACED (each listed with its reason in ``replaced``, which the run's report shows):
  the config (``ppo_megatron_trainer`` -> verl's FSDP ``ppo_trainer``), every Megatron
  key, every vLLM engine key, the rollout (``hf``/``sync``), the device (``cpu``), one
  worker per node (``n_gpus_per_node=1``), the batch sizes scaled down with the plan's
  ratio of mini batch to batch, tiny prompt/response lengths, fixed micro batches, eager
  attention without remove-padding, and the console logger.
* ADDED to the env: ``PYTHONPATH`` with the simulator's CPU stand-in layer
  (``files/verl-cpu-standin``, in the simulator's image) and the recipe working
  directory (whose staged, patched verl tree is the verl that runs: the image installs
  none), which Ray's runtime environment carries to the driver, the TaskRunner and every
  worker.

Only runs of verl's ``main_ppo`` with ``ppo_megatron_trainer`` (the GRPO runs) have a
CPU profile; ``supported`` says so, and the simulator keeps its stand-in trainer for the
others (DAPO's recipe config has no FSDP counterpart in verl's sdist).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from a3rl import checkpointing
from a3rl.plan import parse_value, render_value, split_override

# Where the simulator's image holds the CPU stand-in layer (files/verl-cpu-standin).
LAYER_DIR = "/opt/a3rl/verl-cpu-standin"
CONFIG_NAMES = {"ppo_megatron_trainer": "ppo_trainer"}
MODULES = ("verl.trainer.main_ppo",)
# Prompts per step and per node; the mini batch keeps the plan's ratio to the batch.
PROMPTS_PER_NODE = 2
PROMPT_LENGTH = 256  # the stand-in datasets' prompts fit (filter_overlong_prompts keeps them)
RESPONSE_LENGTH = 32
MICRO_BATCH = 2
LABEL = "real verl on CPU, tiny model: not comparable with the recipe's figures"
# The tiny random Qwen3's parameters (a3rl.sim.tiny_qwen3: "about 123k parameters").
TINY_PARAMS = 123_000


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


MEGATRON = "Megatron (MindSpeed) needs NPUs; verl's FSDP workers train on CPU"
VLLM = "vLLM-Ascend needs NPUs; the CPU rollout is transformers' generate"
# Keys the plan may set that the CPU job drops, by prefix (after any +), and why.
DROPPED_PREFIXES = (
    ("actor_rollout_ref.actor.megatron.", MEGATRON),
    ("actor_rollout_ref.ref.megatron.", MEGATRON),
    ("actor_rollout_ref.actor.load_weight", MEGATRON + " (a Megatron-only key)"),
    ("actor_rollout_ref.ref.load_weight", MEGATRON + " (a Megatron-only key)"),
    ("actor_rollout_ref.rollout.engine_kwargs.", VLLM),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", VLLM),
    ("actor_rollout_ref.rollout.max_num_batched_tokens", VLLM),
    ("actor_rollout_ref.rollout.max_num_seqs", VLLM),
    ("actor_rollout_ref.rollout.cudagraph_capture_sizes", VLLM),
    ("actor_rollout_ref.rollout.enforce_eager", VLLM),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
     "token budgets of dynamic batching: fixed micro batches on CPU"),
)


def supported(job: Mapping[str, Any]) -> bool:
    return job.get("module") in MODULES and job.get("config_name") in CONFIG_NAMES


def cpu_job(job: Mapping[str, Any], nodes: int, layer_dir: str = LAYER_DIR) -> dict[str, Any]:
    """The simulator's job for the real plan's ``job`` on ``nodes`` nodes: the same keys
    as ``Plan.job()`` (the entrypoint rebuilt), plus ``replaced`` (one line per change,
    for the report), ``kept`` (the plan's overrides it keeps) and ``label``."""
    if not supported(job):
        raise ValueError(f"no CPU profile for {job.get('module')} --config-name="
                         f"{job.get('config_name')}: only {', '.join(MODULES)} with "
                         f"{', '.join(CONFIG_NAMES)}")
    if nodes < 1:
        raise ValueError(f"nodes={nodes}: the CPU job needs at least one node")
    values: dict[str, tuple[str, Any]] = {}
    for override in job["overrides"]:
        prefix, key, text = split_override(override)
        values[key] = (prefix, parse_value(text))
    changes: list[Change] = []
    kept: list[str] = []
    out: dict[str, tuple[str, Any]] = {}
    for key, (prefix, value) in values.items():
        why = next((w for p, w in DROPPED_PREFIXES if key.startswith(p)), None)
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

    batch = int(_get(values, "data.train_batch_size", 32))
    mini = int(_get(values, "actor_rollout_ref.actor.ppo_mini_batch_size", batch))
    prompts = PROMPTS_PER_NODE * nodes
    small_mini = max(nodes, prompts * mini // max(batch, 1))
    put("trainer.device", "cpu", "no NPU on the simulator; verl 0.6.0's CPU device")
    put("trainer.n_gpus_per_node", 1, "one worker per simulated node, each on a logical GPU "
        "Ray advertises (world size = nodes, over gloo)")
    put("trainer.nnodes", nodes, "the simulated cluster's nodes")
    put("actor_rollout_ref.actor.strategy", "fsdp", MEGATRON)
    put("actor_rollout_ref.ref.strategy", "fsdp", MEGATRON)
    put("actor_rollout_ref.rollout.name", "hf", VLLM)
    put("actor_rollout_ref.rollout.mode", "sync", "the CPU stand-in layer's HF rollout is "
        "registered for sync mode")
    put("actor_rollout_ref.rollout.tensor_model_parallel_size", 1,
        "one worker per node: no tensor parallelism")
    put("data.train_batch_size", prompts, f"scaled down to {PROMPTS_PER_NODE} prompts per node")
    put("actor_rollout_ref.actor.ppo_mini_batch_size", small_mini,
        f"scaled with the batch (the plan's mini/batch ratio {mini}/{batch})")
    put("data.max_prompt_length", PROMPT_LENGTH, "tiny model, tiny lengths")
    put("data.max_response_length", RESPONSE_LENGTH, "tiny model, tiny lengths")
    put("actor_rollout_ref.actor.use_dynamic_bsz", False, "fixed micro batches on CPU")
    put("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", MICRO_BATCH,
        "fixed micro batches on CPU")
    put("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", MICRO_BATCH,
        "fixed micro batches on CPU (verl requires it without dynamic batching)")
    put("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", MICRO_BATCH,
        "fixed micro batches on CPU")
    put("actor_rollout_ref.model.use_remove_padding", False,
        "remove-padding needs flash-attention's kernels")
    put("actor_rollout_ref.model.override_config._attn_implementation", "eager",
        "verl 0.6.0's FSDP worker asks for flash_attention_2, which CPU lacks", prefix="+")
    logger = _get(values, "trainer.logger", None)
    if isinstance(logger, list) and logger != ["console"]:
        put("trainer.logger", ["console"], "the report reads verl's console lines; no "
            "tensorboard in the simulator's image")
    overrides = [f"{prefix}{k}={render_value(v)}" for k, (prefix, v) in out.items()]
    kept = [o for o in job["overrides"] if o in overrides]
    env = dict(job.get("env") or {})
    # The layer, then the working directory: every process of the job (the Ray workers
    # start elsewhere) imports the staged, patched verl tree, not an installed one.
    env["PYTHONPATH"] = ":".join(p for p in (layer_dir, str(job.get("working_dir") or ""),
                                             env.get("PYTHONPATH", "")) if p)
    config_name = CONFIG_NAMES[job["config_name"]]
    config_path = job["config_path"]
    changes.insert(0, Change("--config-name", job["config_name"], config_name, MEGATRON))
    # Its own submission id (the same real plan submitted to the stand-in trainer is
    # another job): the run name, "cpu", a digest of what this job runs (but where its
    # checkpoints go, which follows from the id, as in the real plan's id).
    identity = [o for o in overrides
                if split_override(o)[1] not in checkpointing.ATTEMPT_KEYS]
    digest = hashlib.sha256(json.dumps({"module": job["module"], "config": config_name,
                                        "config_path": config_path, "overrides": identity,
                                        "env": env},
                                       sort_keys=True).encode()).hexdigest()[:8]
    ident = f"{job.get('run_name') or 'a3rl'}-cpu-{digest}"
    policy = dict(job.get("checkpoint") or {})
    if policy.get("enabled"):
        # The run's folder is named by the id of the job that runs; the size estimate is
        # the tiny model's.
        policy["dir"] = checkpointing.run_dir(policy["root"], ident)
        policy["bytes_per_checkpoint"] = TINY_PARAMS * checkpointing.BYTES_PER_PARAM
        policy["why"] = [*policy.get("why", []), f"CPU profile: the tiny model's about "
                         f"{TINY_PARAMS // 1000}k parameters, so about "
                         f"{policy['bytes_per_checkpoint'] // 1000} kB a checkpoint"]
        overrides = [o for o in overrides
                     if split_override(o)[1] != "trainer.default_local_dir"]
        overrides.append(f"trainer.default_local_dir={render_value(policy['dir'])}")
        changes.append(Change("trainer.default_local_dir", None, policy["dir"],
                              "the CPU job's own folder, named by its id"))
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
        "label": LABEL,
        "submission_id": ident,
        "run_id": ident,
        "checkpoint": policy,
        "real_overrides": list(job["overrides"]),
    }


def _get(values: Mapping[str, tuple[str, Any]], key: str, default: Any) -> Any:
    return values[key][1] if key in values else default


def replaced_keys(job: Mapping[str, Any]) -> Sequence[str]:
    """The keys a CPU job changed (for tests and the report)."""
    return [line.split(":", 1)[0].split("=", 1)[0] for line in job.get("replaced", [])]
