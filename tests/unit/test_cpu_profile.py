"""The simulator's CPU profile of a run (a3rl.sim.cpu_profile): what it keeps from the
real plan, what it replaces, and that it says so."""

from __future__ import annotations

import shlex

import pytest

from a3rl.paths import project_root
from a3rl.plan import plan_from_files
from a3rl.sim import cpu_profile


def real(algo: str = "grpo", nodes: int = 2, extra=None) -> dict:
    return plan_from_files(project_root(), algo, "qwen3_32b", "real", None, nodes, 16,
                           "/data/a3rl", "/data/a3rl/llm_rl/qwen3",
                           extra_overrides=extra).job()


def as_map(overrides) -> dict:
    return {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides}


def test_the_algorithm_data_reward_rollout_n_and_kl_settings_are_kept() -> None:
    plan = real(extra=["trainer.total_training_steps=2"])
    job = cpu_profile.cpu_job(plan, nodes=2)
    before, after = as_map(plan["overrides"]), as_map(job["overrides"])
    for key in ("algorithm.adv_estimator", "data.train_files", "data.val_files",
                "custom_reward_function.path", "custom_reward_function.name",
                "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.use_kl_loss",
                "actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.kl_loss_type",
                "algorithm.kl_ctrl.kl_coef", "actor_rollout_ref.model.path",
                "trainer.total_training_steps", "actor_rollout_ref.actor.optim.lr",
                "actor_rollout_ref.rollout.temperature", "data.shuffle", "trainer.nnodes"):
        assert after[key] == before[key], key
        assert f"{key}={before[key]}" in job["kept"]
    assert job["env"]["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == plan["env"][
        "VLLM_SPECULATIVE_BATCH_SIZE_THRE"]
    assert job["module"] == "verl.trainer.main_ppo"


def test_what_cpu_cannot_honour_is_replaced_and_each_change_is_listed_with_its_reason() -> None:
    plan = real()
    job = cpu_profile.cpu_job(plan, nodes=2, layer_dir="/opt/layer")
    after = as_map(job["overrides"])
    assert job["config_name"] == "ppo_trainer"
    assert not [k for k in after if "megatron" in k or "engine_kwargs" in k]
    assert (after["trainer.device"], after["trainer.n_gpus_per_node"]) == ("cpu", "1")
    assert (after["actor_rollout_ref.rollout.name"],
            after["actor_rollout_ref.rollout.mode"]) == ("hf", "sync")
    assert after["actor_rollout_ref.actor.strategy"] == "fsdp"
    assert after["+actor_rollout_ref.model.override_config._attn_implementation"] == "eager"
    assert after["actor_rollout_ref.model.use_remove_padding"] == "False"
    assert (after["data.max_prompt_length"], after["data.max_response_length"]) == ("256", "32")
    # Batch structure scaled down: 2 prompts per node; the plan's mini batch equals its
    # batch (32/32), so does the CPU job's.
    assert after["data.train_batch_size"] == "4"
    assert after["actor_rollout_ref.actor.ppo_mini_batch_size"] == "4"
    assert after["trainer.logger"] == "[console]"
    lines = job["replaced"]
    assert "--config-name: ppo_megatron_trainer -> ppo_trainer" in lines[0]
    assert any(line.startswith("trainer.device: npu -> cpu (") for line in lines)
    assert any(line.startswith("actor_rollout_ref.rollout.name: vllm -> hf (vLLM") for line in
               lines)
    assert any(line.startswith("data.train_batch_size: 32 -> 4 (") for line in lines)
    assert any("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8: dropped (Megatron"
               in line for line in lines)
    assert any(line.startswith("+actor_rollout_ref.model.override_config._attn_implementation"
                               "=eager: added (") for line in lines)
    # every override the plan had is either kept unchanged or named in a replaced line
    named = set(cpu_profile.replaced_keys(job))
    for override in plan["overrides"]:
        key = override.split("=", 1)[0]
        assert override in job["kept"] or key in named or key.lstrip("+") in named, override
    assert job["label"] == ("real verl on CPU, tiny model: not comparable with the recipe's "
                            "figures")


def test_the_layer_reaches_every_process_through_the_jobs_env_and_the_entrypoint_matches() -> None:
    job = cpu_profile.cpu_job({**real(), "env": {"PYTHONPATH": "/x"}}, nodes=2,
                              layer_dir="/opt/layer")
    assert job["env"]["PYTHONPATH"] == "/opt/layer:/data/a3rl/llm_rl/qwen3:/x"
    words = shlex.split(job["entrypoint"])
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert words[3] == "--config-path=/data/a3rl/llm_rl/qwen3/verl/trainer/config"
    assert words[4] == "--config-name=ppo_trainer" and words[5:] == job["overrides"]
    assert job["hydra_overrides"] == [o for o in job["overrides"] if not o.startswith("+")]
    # its own submission id: the real plan given to the stand-in trainer is another job
    plan = real()
    assert job["submission_id"].startswith("a3rl-grpo-qwen3_32b-real-cpu-")
    assert cpu_profile.cpu_job(plan, 2)["submission_id"] not in (plan["submission_id"],
                                                                job["submission_id"])


def test_the_world_grows_with_the_nodes() -> None:
    after = as_map(cpu_profile.cpu_job(real(nodes=4), nodes=4)["overrides"])
    assert (after["trainer.nnodes"], after["data.train_batch_size"]) == ("4", "8")


def test_runs_without_a_cpu_profile_are_refused_by_name() -> None:
    assert not cpu_profile.supported(real("dapo"))
    with pytest.raises(ValueError, match="no CPU profile for verl.trainer.main_dapo"):
        cpu_profile.cpu_job(real("dapo"), nodes=2)
