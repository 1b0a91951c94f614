"""The simulator's CPU profile of a run: the real plan, made runnable by real verl on CPU.

The recipe's runs use Megatron for training and vLLM-Ascend for rollout on 16 NPUs per
node; neither runs here. ``cpu_job`` takes the real plan's job (``a3rl.planning.plan.Plan.job``,
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

The product never imports this module. ``profile`` states the CPU profile as data, a
job profile (``a3rl.planning.job_profile``, the product's generic mechanism for a site's changes
to its jobs), which the simulator's inventory hands to ``train_job`` as
``train_job_profile`` (``a3rl.sim.inventory``); ``cpu_job`` applies it the same way,
for the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from a3rl.planning import checkpointing, job_profile

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
MICRO = "fixed micro batches on CPU"
# What the CPU job sets, in this order (a3rl.planning.job_profile's `set`).
SETTINGS: tuple[dict[str, Any], ...] = (
    {"key": "trainer.device", "value": "cpu",
     "why": "no NPU on the simulator; verl 0.6.0's CPU device"},
    {"key": "trainer.n_gpus_per_node", "value": 1,
     "why": "one worker per simulated node, each on a logical GPU Ray advertises (world "
            "size = nodes, over gloo)"},
    {"key": "trainer.nnodes", "per_node": 1, "why": "the simulated cluster's nodes"},
    {"key": "actor_rollout_ref.actor.strategy", "value": "fsdp", "why": MEGATRON},
    {"key": "actor_rollout_ref.ref.strategy", "value": "fsdp", "why": MEGATRON},
    {"key": "actor_rollout_ref.rollout.name", "value": "hf", "why": VLLM},
    {"key": "actor_rollout_ref.rollout.mode", "value": "sync",
     "why": "the CPU stand-in layer's HF rollout is registered for sync mode"},
    {"key": "actor_rollout_ref.rollout.tensor_model_parallel_size", "value": 1,
     "why": "one worker per node: no tensor parallelism"},
    {"key": "data.train_batch_size", "per_node": PROMPTS_PER_NODE,
     "why": f"scaled down to {PROMPTS_PER_NODE} prompts per node"},
    {"key": "actor_rollout_ref.actor.ppo_mini_batch_size", "ratio_to": "data.train_batch_size",
     "min_per_node": 1,
     "why": "scaled with the batch (the plan's mini/batch ratio {key}/{ratio_to})"},
    {"key": "data.max_prompt_length", "value": PROMPT_LENGTH, "why": "tiny model, tiny lengths"},
    {"key": "data.max_response_length", "value": RESPONSE_LENGTH,
     "why": "tiny model, tiny lengths"},
    {"key": "actor_rollout_ref.actor.use_dynamic_bsz", "value": False, "why": MICRO},
    {"key": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "value": MICRO_BATCH,
     "why": MICRO},
    {"key": "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
     "value": MICRO_BATCH, "why": MICRO + " (verl requires it without dynamic batching)"},
    {"key": "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "value": MICRO_BATCH,
     "why": MICRO},
    {"key": "actor_rollout_ref.model.use_remove_padding", "value": False,
     "why": "remove-padding needs flash-attention's kernels"},
    {"key": "actor_rollout_ref.model.override_config._attn_implementation", "value": "eager",
     "prefix": "+",
     "why": "verl 0.6.0's FSDP worker asks for flash_attention_2, which CPU lacks"},
    {"key": "trainer.logger", "value": ["console"], "only_if_set": True,
     "why": "the report reads verl's console lines; no tensorboard in the simulator's image"},
)


def profile(layer_dir: str = LAYER_DIR) -> dict[str, Any]:
    """The CPU profile as a job profile (``a3rl.planning.job_profile``): plain data, which the
    simulator's inventory writes for ``train_job`` (``train_job_profile``)."""
    bytes_per_checkpoint = TINY_PARAMS * checkpointing.BYTES_PER_PARAM
    return {
        "name": "cpu",
        "label": LABEL,
        "applies_to": {"module": list(MODULES), "config_name": list(CONFIG_NAMES)},
        "config": {"map": dict(CONFIG_NAMES), "why": MEGATRON},
        "drop": [{"prefix": p, "why": w} for p, w in DROPPED_PREFIXES],
        "set": [dict(s) for s in SETTINGS],
        # The layer, then the working directory: every process of the job (the Ray
        # workers start elsewhere) imports the staged, patched verl tree, not an
        # installed one.
        "env_prepend": {"PYTHONPATH": [layer_dir, "{working_dir}"]},
        # The size estimate is the tiny model's.
        "checkpoint": {
            "bytes_per_checkpoint": bytes_per_checkpoint,
            "why": f"CPU profile: the tiny model's about {TINY_PARAMS // 1000}k parameters, "
                   f"so about {bytes_per_checkpoint // 1000} kB a checkpoint",
            "dir_why": "the CPU job's own folder, named by its id",
        },
    }


def supported(job: Mapping[str, Any]) -> bool:
    return job_profile.applies(job, profile())


def cpu_job(job: Mapping[str, Any], nodes: int, layer_dir: str = LAYER_DIR) -> dict[str, Any]:
    """The simulator's job for the real plan's ``job`` on ``nodes`` nodes: the CPU
    profile applied by the product's own mechanism, as ``train_job`` applies it."""
    if not supported(job):
        raise ValueError(f"no CPU profile for {job.get('module')} --config-name="
                         f"{job.get('config_name')}: only {', '.join(MODULES)} with "
                         f"{', '.join(CONFIG_NAMES)}")
    return job_profile.apply(job, profile(layer_dir), nodes)


def replaced_keys(job: Mapping[str, Any]) -> Sequence[str]:
    """The keys a CPU job changed (for tests and the report)."""
    return [line.split(":", 1)[0].split("=", 1)[0] for line in job.get("replaced", [])]
