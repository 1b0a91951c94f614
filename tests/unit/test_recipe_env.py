"""Derived values of the model env script and the HCCL port reservation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from a3rl import recipe_env
from a3rl.recipe_env import RecipeEnvError

MODELS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "group_vars/all/models.yml").read_text()
)["a3rl_models"]


def test_235b_on_64_cards_matches_the_recipes_env_script():
    env = recipe_env.model_env(MODELS["qwen3_235b"], 8, 16)
    # The recipe's qwen3_235b_env.sh: VLLM_DP_SIZE=32, threshold 64 (= 256 / 4).
    assert env["VLLM_DP_SIZE"] == "32"
    assert env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == "64"
    assert env["USE_ALLTOALL_OVERLAP"] == "1"
    assert env["VLLM_ENABLE_EXPERT_PARALLEL"] == "1"
    assert "VLLM_ROLLOUT_EARLY_STOP_ENABLE" not in env


def test_32b_on_16_cards():
    env = recipe_env.model_env(MODELS["qwen3_32b"], 2, 16)
    assert env["VLLM_DP_SIZE"] == "4"
    assert env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == "32"
    assert "VLLM_ENABLE_EXPERT_PARALLEL" not in env


def test_random_weights_turn_speculation_off():
    env = recipe_env.model_env(MODELS["qwen3_235b"], 8, 16, random_weights=True)
    assert env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == "-1"


def test_feature_overrides_and_optional_switches():
    env = recipe_env.model_env(MODELS["qwen3_235b"], 8, 16, features={
        "VLLM_ENABLE_EPLB": True, "VLLM_ROLLOUT_EARLY_STOP_ENABLE": 1})
    assert env["VLLM_ENABLE_EPLB"] == "1"
    assert env["VLLM_ROLLOUT_EARLY_STOP_ENABLE"] == "1"


def test_unknown_feature_is_refused_with_the_known_names():
    expected = "unknown feature switch 'VLLM_ENABLE_EPBL'.*VLLM_ENABLE_EPLB"
    with pytest.raises(RecipeEnvError, match=expected):
        recipe_env.model_env(MODELS["qwen3_235b"], 8, 16, features={"VLLM_ENABLE_EPBL": 1})


def test_npus_that_do_not_divide_into_rollout_instances():
    with pytest.raises(RecipeEnvError, match="do not divide .* tensor-parallel size 8"):
        recipe_env.model_env(MODELS["qwen3_32b"], 1, 4)


@pytest.mark.parametrize(("current", "wanted", "merged"), [
    ("", "64021-64052", "64021-64052"),
    ("64021-64052", "64021-64052", "64021-64052"),
    ("8080,64000-64030", "64021-64052", "8080,64000-64052"),
    ("64053", "64021-64052", "64021-64053"),
    ("30000-30010, 70", "64021-64052", "70,30000-30010,64021-64052"),
])
def test_reserved_ports_keep_the_sites_own(current, wanted, merged):
    assert recipe_env.reserved_ports(current, wanted) == merged


def test_port_range():
    assert recipe_env.port_range(64021, 32) == "64021-64052"
    with pytest.raises(RecipeEnvError):
        recipe_env.port_range(65530, 32)
