"""Run plans (``a3rl.planning.plan``): the recipe's five runs rendered from group_vars.

Golden values are recipe.md's table ("The five training runs the recipe ships") and its
derived values, asserted on the overrides as Hydra parses them (key -> value), not on
strings. Then what must be refused, one message per problem; the submission id; the type
check of the values Hydra does not check; and composition of every run against verl
0.6.0's real config files (the simulator's verl tree is the PyPI sdist), stock and with
the recipe's stand-in patch series applied.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from a3rl.planning import plan as planmod
from a3rl.planning.plan import PlanError, check_types, make_plan, plan_from_files

ROOT = Path(__file__).resolve().parents[2]
ASSETS = "/data/a3rl"
WORKDIR = "/data/a3rl/llm_rl/qwen3"
TC = "actor_rollout_ref.actor.megatron.override_transformer_config."
SPEC = "actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config."

# recipe.md's table, one row per run, and the derived values worked out by hand:
# INFER_DP = NODES*16/INFER_TP, TRAIN_EP = NODES*16/PP (MoE), MAX_TOKEN_LEN_PER_GPU =
# (2048 + response)/CP, max_num_batched_tokens = 2048 + response.
TABLE = {
    "grpo-qwen3_235b-random": dict(
        nodes=8, response=32768, batch=512, seqs=256, graphs=[32, 64, 128, 256], mem=0.85,
        infer_tp=4, tp=4, pp=4, cp=8, ep=32, infer_dp=32, tokens=34816, per_gpu=4352),
    "grpo-qwen3_235b-real": dict(
        nodes=8, response=32768, batch=512, seqs=256, graphs=[32, 64, 128, 256], mem=0.87,
        infer_tp=4, tp=4, pp=4, cp=4, ep=32, infer_dp=32, tokens=34816, per_gpu=8704),
    "dapo-qwen3_235b-real": dict(
        nodes=8, response=34816, batch=128, seqs=64, graphs=[8, 16, 32, 64], mem=0.85,
        infer_tp=4, tp=4, pp=4, cp=4, ep=32, infer_dp=32, tokens=36864, per_gpu=9216),
    "grpo-qwen3_32b-real": dict(
        nodes=2, response=34816, batch=32, seqs=128, graphs=[16, 32, 64, 128], mem=0.87,
        infer_tp=8, tp=8, pp=2, cp=2, ep=None, infer_dp=4, tokens=36864, per_gpu=18432),
    "dapo-qwen3_32b-real": dict(
        nodes=2, response=34816, batch=32, seqs=128, graphs=[16, 32, 64, 128], mem=0.87,
        infer_tp=8, tp=8, pp=2, cp=2, ep=None, infer_dp=4, tokens=36864, per_gpu=18432),
}


def run_of(key: str) -> tuple[str, str, str]:
    algo, model, weights = key.split("-")
    return algo, model, weights


def plan(key: str = "grpo-qwen3_235b-real", features=None, nodes=None, npus=None,
         extra=None, record=None) -> planmod.Plan:
    algo, model, weights = run_of(key)
    return plan_from_files(ROOT, algo, model, weights, features, nodes, npus, ASSETS, WORKDIR,
                           extra_overrides=extra, checkpoint_record=record)


def refused(**kwargs) -> list[str]:
    with pytest.raises(PlanError) as e:
        plan(**kwargs)
    return e.value.problems


def hydra_parse(overrides: list[str]) -> dict:
    """key -> value as Hydra's own override parser reads them."""
    from hydra.core.override_parser import overrides_parser as parser
    parsed = parser.OverridesParser.create().parse_overrides(overrides)
    return {o.key_or_group: o.value() for o in parsed}


# --- golden plans ---

@pytest.mark.parametrize("key", TABLE)
def test_the_five_runs_render_the_recipes_values(key):
    row = TABLE[key]
    p = plan(key)
    m = hydra_parse(list(p.overrides))
    algo, model, weights = run_of(key)
    assert m["trainer.nnodes"] == row["nodes"]
    assert m["trainer.n_gpus_per_node"] == 16
    assert m["trainer.device"] == "npu"
    assert m["actor_rollout_ref.rollout.n"] == 16
    assert m["actor_rollout_ref.rollout.temperature"] == 0.9
    assert m["data.max_prompt_length"] == 2048
    assert m["data.max_response_length"] == row["response"]
    assert m["data.train_batch_size"] == row["batch"]
    assert m["actor_rollout_ref.actor.ppo_mini_batch_size"] == row["batch"]
    assert m["actor_rollout_ref.rollout.max_num_seqs"] == row["seqs"]
    assert m["actor_rollout_ref.rollout.cudagraph_capture_sizes"] == row["graphs"]
    assert m["actor_rollout_ref.rollout.gpu_memory_utilization"] == row["mem"]
    assert m["actor_rollout_ref.rollout.tensor_model_parallel_size"] == row["infer_tp"]
    assert m["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == row["tp"]
    assert m["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size"] == row["pp"]
    assert m["actor_rollout_ref.actor.megatron.context_parallel_size"] == row["cp"]
    assert m["actor_rollout_ref.ref.megatron.context_parallel_size"] == row["cp"]
    assert m[TC + "context_parallel_size"] == row["cp"]
    assert m.get("actor_rollout_ref.actor.megatron.expert_model_parallel_size") == row["ep"]
    assert m["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == row["per_gpu"]
    assert m["actor_rollout_ref.rollout.max_num_batched_tokens"] == row["tokens"]
    assert "VLLM_DP_SIZE" not in p.env  # the pin removed it (real-upstreams.md)
    assert (p.values["infer_dp"], p.values["train_ep"]) == (row["infer_dp"], row["ep"])
    # The pipeline split: 94 layers as 23/24/24/23 for 235B; 32B splits evenly.
    if "235b" in key:
        assert m[TC + "pipeline_num_transformer_layers"] == [[23], [24], [24], [23]]
        assert m[TC + "num_layers_in_first_pipeline_stage"] == 23
        assert m[TC + "num_layers_in_last_pipeline_stage"] == 23
        assert m[TC + "moe_alltoall_overlap_comm"] is True
        assert p.env["USE_ALLTOALL_OVERLAP"] == "1"
    else:
        assert TC + "pipeline_num_transformer_layers" not in m
    # Weights: random init loads nothing; real weights speculate with SAM, 3 tokens.
    random = weights == "random"
    assert m["actor_rollout_ref.actor.load_weight"] is not random
    assert m["actor_rollout_ref.ref.load_weight"] is not random
    if random:
        assert SPEC + "method" not in m
        assert p.env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == "-1"
        assert m["actor_rollout_ref.model.path"] == f"{ASSETS}/models/Qwen3-235B-A22B-config"
    else:
        assert m[SPEC + "method"] == "sam"
        assert m[SPEC + "num_speculative_tokens"] == 3
        assert p.env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == str(row["seqs"] // 4)
    if key.endswith("qwen3_235b-real"):
        hf = f"{ASSETS}/models/Qwen3-235B-A22B"
        assert m["actor_rollout_ref.model.path"] == hf
        for side in ("actor", "ref"):
            assert m[f"actor_rollout_ref.{side}.megatron.use_dist_checkpointing"] is True
            assert m[f"actor_rollout_ref.{side}.megatron.dist_checkpointing_path"] == hf + "-mcore"
    if "32b" in key:
        assert m["actor_rollout_ref.model.path"] == f"{ASSETS}/models/Qwen3-32B"
        assert m["actor_rollout_ref.actor.megatron.use_dist_checkpointing"] is False
    # The algorithm: entrypoint, config, data, reward.
    job = p.job()
    if algo == "grpo":
        assert (p.entrypoint_module, job["config_name"]) == \
            ("verl.trainer.main_ppo", "ppo_megatron_trainer")
        assert m["data.train_files"] == f"{ASSETS}/data/deepscaler/train.parquet"
        assert m["data.val_files"] == f"{ASSETS}/data/deepscaler/valid.parquet"
        # The recipe's own deepscaler.py, from the working directory (real-upstreams.md).
        assert m["custom_reward_function.path"] == f"{WORKDIR}/deepscaler.py"
        assert m["custom_reward_function.name"] == "compute_score"
        assert "data.gen_batch_size" not in m and "reward_model.reward_manager" not in m
    else:
        assert (p.entrypoint_module, job["config_name"]) == \
            ("verl.trainer.main_dapo", "dapo_megatron_trainer")
        assert m["data.train_files"] == f"{ASSETS}/data/dapo_math/dapo-math-17k.parquet"
        assert m["data.val_files"] == f"{ASSETS}/data/dapo_math/aime-2024.parquet"
        assert m["data.gen_batch_size"] == row["batch"]
        assert m["algorithm.filter_groups.enable"] is True
        assert m["algorithm.filter_groups.metric"] == "acc"
        assert m["algorithm.filter_groups.max_num_gen_batches"] == 10
        assert m["actor_rollout_ref.actor.clip_ratio_low"] == 0.2
        assert m["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
        assert m["algorithm.rollout_is"] is True
        assert m["algorithm.rollout_is_threshold"] == 2.0
        assert m["algorithm.rollout_is_level"] == "token"
        assert m["algorithm.rollout_is_mode"] == "truncate"
        assert m["reward_model.reward_manager"] == "dapo"
        assert m["reward_model.reward_kwargs.max_resp_len"] == row["response"]
        assert m["reward_model.reward_kwargs.overlong_buffer_cfg.len"] == \
            (8192 if "235b" in key else 16384)
        assert "custom_reward_function.path" not in m


def test_rendered_values_read_back_the_same_through_hydra_and_ours():
    for key in TABLE:
        p = plan(key)
        assert p.overrides_map() == hydra_parse(list(p.overrides)), key
        assert len(p.overrides_map()) == len(p.overrides), f"{key}: a key is given twice"


def test_the_job_is_the_entrypoint_with_its_parts():
    p = plan("dapo-qwen3_235b-real")
    job = p.job()
    assert set(job) >= {"entrypoint", "config_name", "config_path", "overrides", "env",
                        "submission_id", "run_name"}
    words = shlex.split(job["entrypoint"])
    assert words[:5] == ["python3", "-m", "verl.trainer.main_dapo",
                         f"--config-path={WORKDIR}/verl/trainer/config",
                         "--config-name=dapo_megatron_trainer"]
    assert words[5:] == job["overrides"] == list(p.overrides)
    assert job["config_path"] == f"{WORKDIR}/verl/trainer/config"
    assert job["working_dir"] == WORKDIR
    assert job["run_name"] == "a3rl-dapo-qwen3_235b-real"
    # The model env (recipe_env.model_env) with the run's own rollout numbers.
    assert job["env"]["VLLM_ENABLE_EXPERT_PARALLEL"] == "1"
    assert job["env"]["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == "16"  # 64 / 4, not 256 / 4


def test_features_add_their_overrides_and_env():
    p = plan("grpo-qwen3_235b-real", features="resampler,early_stop,eplb,rebalance,hdp")
    m = p.overrides_map()
    assert m["data.sampler.class_path"] == "pkg://verl.experimental.dataset.length_bucket_sampler"
    assert m["data.sampler.class_name"] == "LengthAwareEpochSampler"
    assert (m["data.sampler.bucket_size"], m["data.sampler.ema_decay"],
            m["data.sampler.shuffle_batch_blocks"]) == (1024, 0.7, True)
    assert (m["data.dataloader_num_workers"], m["data.shuffle"]) == (0, False)
    assert m["actor_rollout_ref.rollout.enforce_eager"] is True
    for switch in ("VLLM_ROLLOUT_EARLY_STOP_ENABLE", "VLLM_ENABLE_EPLB",
                   "ROLLOUT_REBALANCE_ENABLE", "USE_HDP", "USE_ALLTOALL_OVERLAP"):
        assert p.env[switch] == "1", switch
    # The run's defaults and the asked-for ones, in the catalogue's order.
    assert p.features == ("sam", "resampler", "early_stop", "rebalance", "hdp", "eplb",
                          "alltoall_overlap")
    # Off: the switches the model env has are set to 0 (the resampler patch's early stop
    # defaults to on when unset).
    base = plan("grpo-qwen3_235b-real")
    assert base.env["VLLM_ROLLOUT_EARLY_STOP_ENABLE"] == "0"
    assert base.env["VLLM_ENABLE_EPLB"] == "0"


@pytest.mark.parametrize("key", ["grpo-qwen3_32b-real", "dapo-qwen3_32b-real"])
def test_the_32b_scripts_run_the_rollout_with_graphs(key):
    # real-upstreams.md: the 32B scripts at the pin set rollout.enforce_eager=False.
    assert plan(key).overrides_map()["actor_rollout_ref.rollout.enforce_eager"] is False
    m = plan(key, features=["npugraph_ex"]).overrides_map()
    assert m["actor_rollout_ref.rollout.enforce_eager"] is False
    assert m["actor_rollout_ref.rollout.cudagraph_capture_sizes"] == [16, 32, 64, 128]


def test_dapo_32b_kl_coef_is_the_scripts_last_value():
    # The DAPO 32B script passes algorithm.kl_ctrl.kl_coef=0.0, later 0.001: Hydra keeps
    # the last. The DAPO 235B script passes 0.0 only.
    overrides = list(plan("dapo-qwen3_32b-real").overrides)
    assert [o for o in overrides if o.startswith("algorithm.kl_ctrl.kl_coef=")] == [
        "algorithm.kl_ctrl.kl_coef=0.001"]
    assert plan("dapo-qwen3_235b-real").overrides_map()["algorithm.kl_ctrl.kl_coef"] == 0.0


@pytest.mark.parametrize("key, nodes, cp, per_gpu", [
    # TRAIN_CP=$((NODES * 16 / TRAIN_TP / TRAIN_PP)), MAX_TOKEN_LEN_PER_GPU =
    # (2048 + 34816) / TRAIN_CP in the 32B scripts; 235B random: NODES * 16 / PP / TP.
    ("grpo-qwen3_32b-real", 2, 2, 18432),
    ("grpo-qwen3_32b-real", 3, 3, 12288),
    ("grpo-qwen3_32b-real", 4, 4, 9216),
    ("dapo-qwen3_32b-real", 4, 4, 9216),
    ("grpo-qwen3_235b-random", 16, 16, (2048 + 32768) // 16),
    # The 235B real-weight scripts fix TRAIN_CP=4 whatever NODES is.
    ("grpo-qwen3_235b-real", 16, 4, (2048 + 32768) // 4),
])
def test_derived_values_follow_the_scripts_formulas_on_nodes(key, nodes, cp, per_gpu):
    m = plan(key, nodes=nodes).overrides_map()
    assert m["actor_rollout_ref.actor.megatron.context_parallel_size"] == cp
    assert m["actor_rollout_ref.ref.megatron.context_parallel_size"] == cp
    assert m[TC + "context_parallel_size"] == cp
    assert m["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == per_gpu
    assert m["trainer.nnodes"] == nodes


def test_a_users_cp_replaces_the_scripts_formula():
    m = plan("grpo-qwen3_32b-real", nodes=4, extra=[
        "actor_rollout_ref.actor.megatron.context_parallel_size=2"]).overrides_map()
    assert m["actor_rollout_ref.actor.megatron.context_parallel_size"] == 2
    assert m["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 18432


def test_a_formula_that_gives_no_cp_is_refused_with_the_reason():
    assert refused(key="grpo-qwen3_32b-real", extra=[
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=64"]) == [
        "grpo-qwen3_32b-real: the recipe's script derives train_cp = NODES * 16 / TRAIN_TP / "
        "TRAIN_PP = 0 on 2 nodes; a plan needs at least 1: use more nodes"]


@pytest.mark.parametrize("expr, value", [
    ("NODES * 16 / TRAIN_TP / TRAIN_PP", 3), ("(NODES + 1) * 2 - 1", 7), ("7 / 2", 3),
    ("-7 / 2", -3), ("NODES / 4", 0),
])
def test_shell_arithmetic_is_bashs(expr, value):
    names = {"NODES": 3, "TRAIN_TP": 8, "TRAIN_PP": 2}
    assert planmod.shell_arithmetic(expr, names) == value
    # The same in bash itself, with the same names.
    bash = subprocess.run(["bash", "-c", f"NODES=3 TRAIN_TP=8 TRAIN_PP=2; echo $(({expr}))"],
                          capture_output=True, text=True, check=True)
    assert int(bash.stdout) == value


@pytest.mark.parametrize("expr", ["NODES ** 2", "CARDS / 2", "NODES / 0", "__import__('os')",
                                  "NODES % 3", "1.5 * NODES"])
def test_shell_arithmetic_refuses_what_the_plans_do_not_use(expr):
    with pytest.raises(ValueError):
        planmod.shell_arithmetic(expr, {"NODES": 3})


def test_rollout_dp_comes_from_the_rollout_tp_not_the_train_tp():
    # Issue 26: every recipe run has equal TPs, so a rollout DP from the train TP went
    # unnoticed. Rollout TP 4, train TP 8 on 32 NPUs: 8 rollout instances, not 4.
    p = plan("grpo-qwen3_32b-real",
             extra=["actor_rollout_ref.rollout.tensor_model_parallel_size=4"])
    assert p.overrides_map()["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 4
    assert p.overrides_map()["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == 8
    assert p.values["infer_dp"] == 8
    assert p.values["train_dp"] == 1


def test_a_default_feature_can_be_turned_off():
    p = plan("grpo-qwen3_235b-real", features=["no-sam", "no-alltoall_overlap"])
    m = p.overrides_map()
    assert SPEC + "method" not in m and TC + "moe_alltoall_overlap_comm" not in m
    assert p.env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == "-1"
    assert p.env["USE_ALLTOALL_OVERLAP"] == "0"


def test_more_nodes_scale_the_derived_values():
    p = plan("grpo-qwen3_235b-real", nodes="16")  # Ansible's -e gives strings
    m = p.overrides_map()
    assert m["trainer.nnodes"] == 16
    assert m["actor_rollout_ref.actor.megatron.expert_model_parallel_size"] == 64
    assert p.values["infer_dp"] == 64


def test_a_user_override_of_a_table_value_is_followed_by_what_derives_from_it():
    p = plan("grpo-qwen3_32b-real", extra=["data.max_response_length=16384",
                                          "trainer.total_epochs=2"])
    m = p.overrides_map()
    assert m["data.max_response_length"] == 16384
    assert m["actor_rollout_ref.rollout.max_num_batched_tokens"] == 2048 + 16384
    assert m["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == (2048 + 16384) // 2
    assert p.overrides[-1] == "trainer.total_epochs=2"
    assert list(p.overrides).count("trainer.total_epochs=1") == 0


# --- refused plans: one clear message each ---

def test_too_few_cards():
    problems = refused(key="grpo-qwen3_235b-real", nodes=2)
    assert any("Qwen3-235B-A22B needs at least 128 NPUs (8 nodes x 16); this plan has 32 "
               "(2 x 16)" in p for p in problems), problems


def test_tp_that_does_not_divide_the_world():
    problems = refused(extra=["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=3"])
    assert any("TP x PP x CP = 3 x 4 x 4 = 48 does not divide the 128 NPUs" in p
               for p in problems), problems
    problems = refused(extra=["actor_rollout_ref.rollout.tensor_model_parallel_size=3"])
    assert problems == ["rollout tensor parallel size 3 does not divide the 128 NPUs"]


def test_pipeline_split_must_sum_to_the_layers_and_match_pp():
    problems = refused(extra=[f"+{TC}pipeline_num_transformer_layers=[[23],[24],[24],[22]]"])
    assert problems == ["the pipeline split [23, 24, 24, 22] sums to 93, Qwen3-235B-A22B has "
                        "94 layers"]
    problems = refused(extra=["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2"])
    assert "the pipeline split [23, 24, 24, 23] has 4 stages, PP is 2" in problems


def test_a_split_with_fewer_stages_than_pp_is_refused():
    # Issue 26 (mutation): only a split with more stages than PP was tested.
    problems = refused(extra=["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=8"])
    assert "the pipeline split [23, 24, 24, 23] has 4 stages, PP is 8" in problems


def test_layers_that_do_not_split_evenly_over_pp_need_a_split():
    # 3 nodes: TP x PP x CP = 8 x 3 x 2 divides the 48 NPUs, so the layers are the only
    # problem; the 32B runs give no split of their own.
    pp3 = ["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=3"]
    assert refused(key="grpo-qwen3_32b-real", nodes=3, extra=pp3) == [
        "Qwen3-32B's 64 layers do not split evenly over PP 3: give pipeline_layers"]
    pp4 = ["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=4"]
    assert plan(key="grpo-qwen3_32b-real", extra=pp4).values["train_pp"] == 4


def test_a_graph_size_above_max_num_seqs_is_refused():
    # The largest graph size is 256: one sequence less is refused, equal is the recipe's.
    assert refused(extra=["actor_rollout_ref.rollout.max_num_seqs=255"]) == [
        "graph size 256 exceeds max_num_seqs 255"]
    assert plan(extra=["actor_rollout_ref.rollout.max_num_seqs=256"]).values["max_num_seqs"] == 256


def test_a_pp_of_eight_derives_ep_and_the_stage_sizes_from_pp_and_the_split():
    # Issue 26 (mutations): the recipe's 235B runs have TP = PP = 4 and a split whose
    # first and last stages are equal, so EP from TP, or the last stage from the first,
    # went unnoticed.
    split = [10, 12, 12, 12, 12, 12, 12, 12]
    p = plan(extra=["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=8",
                    f"+{TC}pipeline_num_transformer_layers={[[n] for n in split]}"
                    .replace(" ", "")])
    m = p.overrides_map()
    assert p.values["train_ep"] == 128 // 8 == 16
    assert m["actor_rollout_ref.actor.megatron.expert_model_parallel_size"] == 16
    assert m[TC + "num_layers_in_first_pipeline_stage"] == 10
    assert m[TC + "num_layers_in_last_pipeline_stage"] == 12


def test_an_moe_run_needs_pp_to_divide_the_npus():
    problems = refused(extra=["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=3",
                              f"+{TC}pipeline_num_transformer_layers=[[31],[32],[31]]"])
    assert "expert parallel size = NPUs / PP: 128 NPUs do not divide by PP 3" in problems


def test_the_gen_batch_follows_the_algorithms_factor():
    # Issue 26 (mutation): the recipe's DAPO factor is 1, so a gen batch that ignored it
    # went unnoticed.
    data = planmod.load_profiles(ROOT)
    profiles = {k: data.get(k) for k in planmod.PROFILE_VARS}
    profiles["paths"] = planmod.node_paths(ASSETS, WORKDIR, data.get("a3rl_datasets") or {},
                                           data.get("a3rl_artifacts") or {})
    profiles["a3rl_algorithms"]["dapo"]["gen_batch_size_factor"] = 3
    p = make_plan("dapo", "qwen3_32b", "real", None, None, None, profiles)
    m = p.overrides_map()
    assert m["data.gen_batch_size"] == 3 * m["data.train_batch_size"]


def test_resampler_refuses_shuffle():
    problems = refused(features=["resampler"], extra=["data.shuffle=True"])
    assert problems == ["feature resampler needs data.shuffle=False; the plan has "
                        "data.shuffle=True"]
    problems = refused(features=["resampler"], extra=["data.dataloader_num_workers=4"])
    assert problems == ["feature resampler needs data.dataloader_num_workers=0; the plan has "
                        "data.dataloader_num_workers=4"]


def test_unknown_names():
    assert refused(features="sam,turbo") == [
        "unknown feature 'turbo': use one of sam, npugraph_ex, resampler, early_stop, "
        "rebalance, hdp, eplb, alltoall_overlap, a3rl_grader (or no-<name> to turn a default off)"]
    with pytest.raises(PlanError) as e:
        plan_from_files(ROOT, "ppo", "qwen3_8b", "fake", None, None, None, ASSETS, WORKDIR)
    assert e.value.problems == ["unknown algorithm 'ppo': use one of grpo, dapo",
                                "unknown model 'qwen3_8b': use one of qwen3_235b, qwen3_32b",
                                "unknown weights 'fake': use real or random"]
    assert refused(key="dapo-qwen3_32b-random")[0].startswith(
        "the recipe has no random-weights dapo run for qwen3_32b: plans exist for ")


def test_sam_needs_real_weights():
    assert refused(key="grpo-qwen3_235b-random", features=["sam"]) == [
        "feature sam needs real weights; this run has random weights (drop it: no-sam)"]


def test_feature_requirements_and_conflicts():
    assert refused(features=["resampler", "npugraph_ex"]) == [
        "features npugraph_ex and resampler cannot be used together"]
    assert refused(key="grpo-qwen3_32b-real", features=["eplb"]) == [
        "feature eplb needs a MoE model"]
    assert refused(features=["early_stop"]) == ["feature early_stop needs feature resampler"]
    assert refused(key="grpo-qwen3_235b-random", features=["hdp"]) == [
        "feature hdp needs actor_rollout_ref.actor.use_dynamic_bsz=True; the plan has "
        "actor_rollout_ref.actor.use_dynamic_bsz=False"]


def test_hdp_needs_a_context_parallel_size_of_at_least_two():
    dynamic = "actor_rollout_ref.actor.use_dynamic_bsz=True"
    cp = "actor_rollout_ref.actor.megatron.context_parallel_size="
    assert refused(features=["hdp"], extra=[dynamic, cp + "1"]) == [
        "feature hdp needs train CP >= 2; this run has CP 1"]
    assert plan(features=["hdp"], extra=[dynamic, cp + "2"]).values["train_cp"] == 2


def test_the_recipe_reward_by_default_and_the_project_grader_only_by_name():
    """The recipe's deepscaler.py unless a3rl_grader is asked for; DAPO has no custom one."""
    for key in ("grpo-qwen3_32b-real", "grpo-qwen3_235b-real", "grpo-qwen3_235b-random"):
        assert plan(key=key).overrides_map()["custom_reward_function.path"] == \
            f"{WORKDIR}/deepscaler.py"
        m = plan(key=key, features=["a3rl_grader"]).overrides_map()
        assert m["custom_reward_function.path"] == f"{WORKDIR}/a3rl_rewards/deepscaler.py"
        assert m["custom_reward_function.name"] == "compute_score"
    assert refused(key="dapo-qwen3_32b-real", features=["a3rl_grader"]) == [
        "feature a3rl_grader replaces the custom reward function, which the dapo runs do not "
        "use (drop the feature a3rl_grader)"]


@pytest.mark.parametrize("nodes, npus, shown", [
    (-1, 16, "nodes must be a positive whole number, not -1"),
    (0, 16, "nodes must be a positive whole number, not 0"),
    (8.5, 16, "nodes must be a positive whole number, not 8.5"),
    ("eight", 16, "nodes must be a positive whole number, not 'eight'"),
    (True, 16, "nodes must be a positive whole number, not True"),
    (8, -16, "npus_per_node must be a positive whole number, not -16"),
])
def test_sizes_must_be_positive_whole_numbers(nodes, npus, shown):
    assert shown in refused(nodes=nodes, npus=npus)


def test_table_values_from_the_user_are_checked_too():
    problems = refused(extra=["data.train_batch_size=12.5",
                              "actor_rollout_ref.rollout.max_num_seqs=-4",
                              "actor_rollout_ref.rollout.gpu_memory_utilization=1.5"])
    assert "train_batch_size must be a positive whole number, not 12.5" in problems
    assert "max_num_seqs must be a positive whole number, not -4" in problems
    assert "gpu_memory_utilization must be a number in (0, 1], not 1.5" in problems


def test_derived_values_cannot_be_typed():
    assert refused(extra=["actor_rollout_ref.actor.megatron.expert_model_parallel_size=16"]) == [
        "extra override 'actor_rollout_ref.actor.megatron.expert_model_parallel_size=16': "
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size is computed from the "
        "world size / train_pp; set that instead"]
    assert refused(extra=["data.shuffle"]) == [
        "extra override 'data.shuffle': override 'data.shuffle' is not key=value"]


def test_checkpoint_record_must_match_the_runs_alltoall_setting():
    plan(record={"use_alltoall_overlap": 1})
    plan(record={"use_alltoall_overlap": "1", "model": "qwen3_235b"})
    assert refused(record={"use_alltoall_overlap": 0}) == [
        "the dist-checkpoint was converted with USE_ALLTOALL_OVERLAP=0, this run uses 1: "
        "convert again with 1 (weights play) or drop the alltoall_overlap feature"]
    assert refused(features=["no-alltoall_overlap"], record={"use_alltoall_overlap": True}) == [
        "the dist-checkpoint was converted with USE_ALLTOALL_OVERLAP=True, this run uses 0: "
        "convert again with 0 (weights play) or add the alltoall_overlap feature"]
    # No dist-checkpoint in the run: the record is not consulted.
    plan("grpo-qwen3_32b-real", record={"use_alltoall_overlap": 0})


def test_every_problem_is_reported_at_once():
    problems = refused(key="grpo-qwen3_235b-random", nodes=2, features=["sam", "resampler"],
                       extra=["data.shuffle=True", f"+{TC}swap_optimizer=yes"])
    assert len(problems) == 4, problems
    assert any("needs at least 128 NPUs" in p for p in problems)
    # The script's own formula gives CP 2 on 2 nodes (4 x 4 x 2 = 32): no layout problem.
    assert not any("does not divide" in p for p in problems)
    assert any("feature sam needs real weights" in p for p in problems)
    assert any("feature resampler needs data.shuffle=False" in p for p in problems)
    assert any("swap_optimizer must be True or False, not yes" in p for p in problems)


# --- submission id ---

def test_submission_id_is_derived_from_the_plan():
    a, b = plan(), plan(features=[])
    assert re.fullmatch(r"a3rl-grpo-qwen3_235b-real-[0-9a-f]{8}", a.submission_id)
    assert a.submission_id == b.submission_id == a.job()["submission_id"]
    assert plan(features="eplb,rebalance").submission_id == \
        plan(features=["rebalance", "eplb"]).submission_id
    changed = {plan(nodes=16).submission_id, plan(features=["eplb"]).submission_id,
               plan(extra=["trainer.total_epochs=2"]).submission_id,
               plan("grpo-qwen3_235b-random").submission_id, a.submission_id}
    assert len(changed) == 5


# --- types of what Hydra does not check ---

def test_check_types_catches_bad_values():
    for key in TABLE:
        assert check_types(plan(key).overrides) == [], key
    problems = check_types([
        "data.train_batch_size=12.5",
        f"+{TC}swap_optimizer=yes",
        f"+{TC}pipeline_num_transformer_layers=[[23],[24]",
        f"+{TC}pipeline_num_transformer_layers=[23,24]",
        "actor_rollout_ref.rollout.gpu_memory_utilization=high",
        "actor_rollout_ref.rollout.cudagraph_capture_sizes=[8,a]",
        f"+{SPEC}num_speculative_tokens=3",
        "some.other.key=anything",
    ])
    assert problems == [
        "data.train_batch_size=12.5: data.train_batch_size must be a whole number, not 12.5",
        f"+{TC}swap_optimizer=yes: {TC}swap_optimizer must be True or False, not yes",
        f"+{TC}pipeline_num_transformer_layers=[[23],[24]: list not closed with ']' in "
        "'[[23],[24]'",
        f"+{TC}pipeline_num_transformer_layers=[23,24]: {TC}pipeline_num_transformer_layers "
        "must be a list of one-number lists like [[23],[24]], not [23,24]",
        "actor_rollout_ref.rollout.gpu_memory_utilization=high: "
        "actor_rollout_ref.rollout.gpu_memory_utilization must be a number, not high",
        "actor_rollout_ref.rollout.cudagraph_capture_sizes=[8,a]: "
        "actor_rollout_ref.rollout.cudagraph_capture_sizes must be a list of whole numbers, "
        "not [8,a]",
    ]


def test_every_plus_key_in_the_data_is_typed():
    data = yaml.safe_load((ROOT / "group_vars/all/runs.yml").read_text())
    layers = [data["a3rl_run_defaults"]["overrides"],
              *(a["overrides"] for a in data["a3rl_algorithms"].values()),
              *data["a3rl_model_overrides"].values(),
              *(r.get("overrides") or {} for r in data["a3rl_runs"].values()),
              *(f.get("overrides") or {} for f in data["a3rl_features"].values())]
    plus = {k.lstrip("+") for layer in layers for k in layer if k.startswith("+")}
    assert plus and plus <= set(planmod.TYPES), plus - set(planmod.TYPES)


@pytest.mark.parametrize("value", [True, False, None, 0, -1, 2048, 0.85, 1e-6, "token-mean",
                                   "pkg://a.b", "/data/a b", "1e-6", "True", "it's", [],
                                   [[23], [24]], ["console", "tensorboard"]])
def test_values_round_trip(value):
    text = planmod.render_value(value)
    assert planmod.parse_value(text) == value
    assert hydra_parse([f"k={text}"])["k"] == value


# --- composition against verl 0.6.0's config files ---

FRAMEWORKS = {"verl": "verl", "megatron": "Megatron-LM", "mindspeed": "MindSpeed",
              "vllm": "vllm", "vllm_ascend": "vllm-ascend"}


def _git_env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**clean, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "advice.detachedHead=false", *args], cwd=cwd,
                   env=_git_env(), check=True, capture_output=True)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> dict[str, Path]:
    """The recipe working directory built by the recipe's own scripts from the stand-in
    upstreams (verl = the real 0.6.0 sdist): ``stock`` after build_project.sh, ``patched``
    after apply_all_patches.sh too."""
    import hydra  # noqa: F401  (a pinned dependency: a broken install fails here)

    from a3rl.sim import upstreams

    up = upstreams.build(log=lambda _msg: None)
    manifest = upstreams.manifest_overrides(up)
    ws = tmp_path_factory.mktemp("workspace")
    for name, folder in FRAMEWORKS.items():
        _git(ws, "clone", "-q", manifest[name]["url"], folder)
        _git(ws / folder, "checkout", "-q", manifest[name]["ref"])
    for pick in manifest["verl"]["cherry_picks"]:
        _git(ws / "verl", "fetch", "-q", "origin", pick["fetch"])
        _git(ws / "verl", "cherry-pick", "-n", "-X", "theirs", pick["commit"])
    dest = tmp_path_factory.mktemp("recipe") / "recipe"
    _git(dest.parent, "clone", "-q", up.url("recipe"), dest.name)
    _git(dest, "checkout", "-q", up.recipe_commits["clean"])
    wd = dest / up.recipe_subdir
    subprocess.run(["bash", "build_project.sh"], cwd=wd, check=True, capture_output=True,
                   env={**_git_env(), "FRAMEWORKS_DIR": str(ws)})
    stock = tmp_path_factory.mktemp("stock") / "qwen3"
    shutil.copytree(wd, stock, symlinks=True)
    subprocess.run(["bash", "apply_all_patches.sh"], cwd=wd, check=True, capture_output=True,
                   env=_git_env())
    return {"stock": stock, "patched": wd}


def compose(layout: Path, p: planmod.Plan, overrides: list[str], monkeypatch):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    monkeypatch.chdir(layout)  # DAPO's config has a search path relative to the workdir
    with initialize_config_dir(config_dir=str(layout / planmod.CONFIG_DIR), version_base=None):
        return hydra_compose(p.config_name, overrides=overrides)


@pytest.mark.parametrize("key", TABLE)
def test_plans_compose_against_verl_060(key, layouts, monkeypatch):
    from hydra.errors import ConfigCompositionException

    p = plan(key)
    # Stock verl 0.6.0 (the recipe layout before its patches): everything Hydra checks
    # composes but the keys the recipe's patches add, and each of those is refused.
    compose(layouts["stock"], p, p.hydra_overrides(patched=False), monkeypatch)
    used = [o for o in p.hydra_overrides() if o not in p.hydra_overrides(patched=False)]
    # Only the 235B scripts set recompute_old_log_prob (the 32B ones keep the patch's default).
    assert [o.split("=")[0] for o in used] == \
        (["actor_rollout_ref.actor.recompute_old_log_prob"] if "235b" in key else [])
    for override in used:
        with pytest.raises(ConfigCompositionException, match="Could not override"):
            compose(layouts["stock"], p, [override], monkeypatch)
    # The patched tree: the whole plan, "+" keys too.
    cfg = compose(layouts["patched"], p, list(p.overrides), monkeypatch)
    rollout = cfg.actor_rollout_ref.rollout
    assert list(rollout.cudagraph_capture_sizes) == TABLE[key]["graphs"]
    assert rollout.max_num_batched_tokens == TABLE[key]["tokens"]
    assert cfg.trainer.nnodes == TABLE[key]["nodes"]
    if key.startswith("dapo"):
        assert cfg.data.gen_batch_size == TABLE[key]["batch"]
        assert cfg.algorithm.filter_groups.max_num_gen_batches == 10
        assert cfg.reward_model.reward_manager == "dapo"
    if "235b" in key:
        assert cfg.actor_rollout_ref.actor.megatron.override_transformer_config \
            .pipeline_num_transformer_layers == [[23], [24], [24], [23]]


def test_the_patched_keys_are_those_stock_verl_refuses(layouts, monkeypatch):
    from hydra.errors import ConfigCompositionException

    # Compose the whole plan against stock verl, taking out each key Hydra names, until
    # the rest composes: what was taken out is exactly what the data marks as patched.
    p = plan("grpo-qwen3_235b-real")
    assert p.patched_keys == ("actor_rollout_ref.actor.recompute_old_log_prob",)
    rest, failing = p.hydra_overrides(), []
    while True:
        try:
            compose(layouts["stock"], p, rest, monkeypatch)
            break
        except ConfigCompositionException as e:
            named = re.search(r"Could not override '([^']+)'", str(e))
            assert named, e
            failing.append(named.group(1))
            rest = [o for o in rest if o.split("=")[0] != named.group(1)]
    assert failing == list(p.patched_keys)


def test_a_misspelled_key_fails_composition_naming_it(layouts, monkeypatch):
    from hydra.errors import ConfigCompositionException

    p = plan("grpo-qwen3_32b-real", extra=["actor_rollout_ref.rollout.max_num_seq=8"])
    with pytest.raises(ConfigCompositionException,
                       match="Could not override 'actor_rollout_ref.rollout.max_num_seq'"):
        compose(layouts["patched"], p, list(p.overrides), monkeypatch)


def test_make_plan_takes_the_group_vars_as_ansible_has_them():
    data = planmod.load_profiles(ROOT)
    profiles = {k: data[k] for k in planmod.PROFILE_VARS}
    profiles["paths"] = planmod.node_paths("/srv", "/srv/wd", data["a3rl_datasets"],
                                           data["a3rl_artifacts"])
    p = make_plan("grpo", "qwen3_32b", "real", None, 2, 16, profiles)
    m = p.overrides_map()
    assert m["data.train_files"] == "/srv/data/deepscaler/train.parquet"
    assert m["actor_rollout_ref.model.path"] == "/srv/models/Qwen3-32B"
    assert m["custom_reward_function.path"] == "/srv/wd/deepscaler.py"
    assert planmod.plan_job(profiles, "grpo", "qwen3_32b", "real") == p.job()
    # A forgotten variable would silently drop its overrides: refused instead.
    del profiles["a3rl_model_overrides"]
    with pytest.raises(PlanError, match="profiles lack a3rl_model_overrides"):
        make_plan("grpo", "qwen3_32b", "real", None, 2, 16, profiles)


def test_an_unreadable_checkpoint_record_is_refused():
    assert refused(record={}) == [
        "the dist-checkpoint's record does not say how it was converted "
        "(use_alltoall_overlap): convert it again (weights play)"]


def test_a_secret_override_reaches_the_job_only_through_its_environment(monkeypatch):
    from omegaconf import OmegaConf

    from a3rl import masking

    extra = ["+trainer.wandb_api_key=s3cr3t-w4ndb", "trainer.total_training_steps=3"]
    p = plan("grpo-qwen3_32b-real", extra=extra)
    job = p.job()
    name = "A3RL_SECRET_TRAINER_WANDB_API_KEY"
    # Not in the plan, its job, its command line or its id; the value is read at submission.
    assert "s3cr3t" not in repr(job) and job["secret_env"] == [name]
    assert masking.job_secrets(extra) == {name: "s3cr3t-w4ndb"}
    assert plan("grpo-qwen3_32b-real", extra=["+trainer.wandb_api_key=other-v4lue",
                                              extra[1]]).submission_id == p.submission_id
    override = next(o for o in p.overrides if "wandb_api_key" in o)
    assert override in shlex.split(job["entrypoint"])
    # Hydra reads the reference as an interpolation, which OmegaConf resolves from the
    # environment where the config is resolved (verl's TaskRunner, in the job's env).
    value = hydra_parse([override])["trainer.wandb_api_key"]
    cfg = OmegaConf.create({"trainer": {"wandb_api_key": value}})
    monkeypatch.setenv(name, "s3cr3t-w4ndb")
    assert cfg.trainer.wandb_api_key == "s3cr3t-w4ndb"
    # A plain override is kept as it is.
    assert "trainer.total_training_steps=3" in p.overrides


def test_a_key_given_twice_in_the_overrides_is_refused():
    problems = refused(key="grpo-qwen3_32b-real", nodes=2,
                       extra=["trainer.total_epochs=2", "trainer.total_epochs=3"])
    assert any("'trainer.total_epochs=2' and 'trainer.total_epochs=3': "
               "trainer.total_epochs is given twice" in p for p in problems), problems
    # A run parameter's key too (it is read into the plan's values, not passed on).
    problems = refused(key="grpo-qwen3_32b-real", nodes=2,
                       extra=["data.train_batch_size=8", "+data.train_batch_size=16"])
    assert any("data.train_batch_size is given twice" in p for p in problems), problems


@pytest.mark.parametrize("extra", ["+trainer.total_epochs=2", "+data.train_batch_size=8",
                                   "+trainer.nnodes=2"])
def test_a_plus_on_a_key_the_plan_sets_is_refused(extra):
    problems = refused(key="grpo-qwen3_32b-real", nodes=2, extra=[extra])
    key = extra[1:].split("=")[0]
    assert any(f"{key} is already in the run's overrides" in p or f"{key} is computed" in p
               for p in problems), problems


def test_a_users_new_plus_key_goes_to_the_hydra_check_and_the_plans_own_do_not():
    p = plan("grpo-qwen3_32b-real", nodes=2, extra=["+trainer.a3rl_note=1"])
    assert "+trainer.a3rl_note=1" in p.hydra_overrides()
    own = [o for o in p.overrides if o.startswith("+") and "a3rl_note" not in o]
    assert own and not set(own) & set(p.hydra_overrides())
    # Not part of what the job runs: the same overrides give the same id.
    assert p.added_keys == ("trainer.a3rl_note",)


@pytest.mark.parametrize("extra,why", [
    ("trainer.total_epochs=-1", "trainer.total_epochs must be at least 1, not -1"),
    ("trainer.total_epochs=0", "trainer.total_epochs must be at least 1, not 0"),
    ("data.max_prompt_length=100000000000000000000",
     "data.max_prompt_length must be at most 2147483647, not 100000000000000000000"),
    ("trainer.total_epochs=2147483648",
     "trainer.total_epochs must be at most 2147483647, not 2147483648"),
    ("trainer.save_freq=-2", "trainer.save_freq must be at least -1 (-1: never), not -2"),
    ("data.dataloader_num_workers=-1", "data.dataloader_num_workers must be 0 or more"),
    ("actor_rollout_ref.rollout.top_p=1.5",
     "actor_rollout_ref.rollout.top_p must be above 0 and at most 1, not 1.5"),
    ("actor_rollout_ref.rollout.top_p=0", "must be above 0 and at most 1, not 0"),
    ("actor_rollout_ref.rollout.temperature=-0.1", "temperature must be 0 or more"),
    ("actor_rollout_ref.actor.optim.lr=-1e-6",
     "actor_rollout_ref.actor.optim.lr must be 0 or more, not -1e-06"),
])
def test_numbers_out_of_range_are_refused(extra, why):
    problems = refused(key="grpo-qwen3_32b-real", nodes=2, extra=[extra])
    assert any(why in p for p in problems), problems


@pytest.mark.parametrize("extra", ["trainer.save_freq=-1", "trainer.test_freq=-1",
                                   "actor_rollout_ref.rollout.top_k=-1",
                                   "trainer.total_epochs=2147483647",
                                   "actor_rollout_ref.rollout.top_p=1",
                                   "actor_rollout_ref.rollout.temperature=0",
                                   "data.dataloader_num_workers=0"])
def test_numbers_on_the_edges_of_their_range_are_accepted(extra):
    plan("grpo-qwen3_32b-real", nodes=2, extra=[extra])
