"""Derived values of the model env script and the HCCL port reservation."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from a3rl.planning import recipe_env
from a3rl.planning.recipe_env import RecipeEnvError

MODELS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "group_vars/all/models.yml").read_text()
)["a3rl_models"]


def test_235b_on_64_cards_matches_the_recipes_env_script():
    env = recipe_env.model_env(MODELS["qwen3_235b"], 8, 16)
    # The recipe's qwen3_235b_env.sh at the pin: threshold 64 (= 256 / 4), and no
    # VLLM_DP_SIZE (the pin removed it; real-upstreams.md).
    assert "VLLM_DP_SIZE" not in env
    assert env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] == "64"
    assert env["USE_ALLTOALL_OVERLAP"] == "1"
    assert env["VLLM_ENABLE_EXPERT_PARALLEL"] == "1"
    assert "VLLM_ROLLOUT_EARLY_STOP_ENABLE" not in env


def test_32b_on_16_cards():
    env = recipe_env.model_env(MODELS["qwen3_32b"], 2, 16)
    assert "VLLM_DP_SIZE" not in env
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


ROOT = Path(__file__).resolve().parents[2]
RECIPE_RUNTIME = {  # real-upstreams.md, "Environment the recipe sets" (pin e1ab833)
    "VLLM_ASCEND_ENABLE_NZ": "0", "VLLM_ASCEND_MODEL_EXECUTE_TIME_OBSERVE": "0",
    "ASCEND_LAUNCH_BLOCKING": "0", "ASCEND_GLOBAL_EVENT_ENABLE": "0",
    "ASCEND_HOST_LOG_FILE_NUM": "1000"}


def render_cluster_env(tmp_path: Path, **overrides) -> Path:
    """cluster_env.sh.j2 rendered with the role's defaults and a one-node inventory."""
    import resource

    from .role_templates import render

    defaults = yaml.safe_load((ROOT / "roles/recipe_env/defaults/main.yml").read_text())
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    values = {**defaults, "ansible_managed": "managed", "inventory_hostname": "node1",
              "groups": {"a3_nodes": ["node1"], "head": ["node1"]},
              "hostvars": {"node1": {"cluster_ip": "10.0.0.1"}}, "cluster_ip": "10.0.0.1",
              "npus_per_node": 16, "recipe_env_nic": "eth0", "recipe_env_master_port": 29444,
              "a3rl_hccl_base_port": 64021, "recipe_env_cann_set_env": [],
              "recipe_env_open_files": soft,
              "recipe_env_custom_opp_dir": str(tmp_path / "wd/vllm_ascend/_cann_ops_custom"
                                               "/vendors/vllm-ascend"), **overrides}
    out = tmp_path / "cluster_env.sh"
    out.write_text(render("recipe_env", "etc/a3rl/env/cluster_env.sh.j2", **values))
    return out


def sourced(script: Path, names: list[str], times: int = 1) -> dict[str, str]:
    """The variables after sourcing ``script`` ``times`` times in ``bash -c``, as a job's
    ``docker exec ... bash -c`` does (no ~/.bashrc); read with builtins only."""
    body = "; ".join([f". {script}"] * times + [
        f'printf "%s=%s\\n" {name} "${{{name}-<unset>}}"' for name in names])
    proc = subprocess.run(["bash", "-c", "set -e; " + body], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


def test_cluster_env_sets_what_the_recipes_scripts_set(tmp_path):
    got = sourced(render_cluster_env(tmp_path), [*RECIPE_RUNTIME, "PYTHONUNBUFFERED",
                                                "VLLM_DP_SIZE"])
    assert {k: got[k] for k in RECIPE_RUNTIME} == RECIPE_RUNTIME
    assert got["PYTHONUNBUFFERED"] not in ("", "<unset>")
    assert got["VLLM_DP_SIZE"] == "<unset>"


def test_custom_ops_come_from_the_working_directory_once(tmp_path):
    vendor = tmp_path / "wd/vllm_ascend/_cann_ops_custom/vendors/vllm-ascend"
    script = render_cluster_env(tmp_path)
    absent = sourced(script, ["ASCEND_CUSTOM_OPP_PATH"])
    assert absent["ASCEND_CUSTOM_OPP_PATH"] == "<unset>"
    vendor.mkdir(parents=True)
    got = sourced(script, ["ASCEND_CUSTOM_OPP_PATH", "LD_LIBRARY_PATH"], times=2)
    assert got["ASCEND_CUSTOM_OPP_PATH"] == str(vendor)
    assert got["LD_LIBRARY_PATH"] == f"{vendor}/op_api/lib"


def test_jemalloc_is_preloaded_without_bashrc(tmp_path):
    defaults = yaml.safe_load((ROOT / "roles/recipe_env/defaults/main.yml").read_text())
    assert defaults["recipe_env_preload"] == ["/usr/lib64/libjemalloc.so.2"]
    lib = tmp_path / "libjemalloc.so.2"  # a stand-in path: only its presence matters
    script = render_cluster_env(tmp_path, recipe_env_preload=[str(lib)])
    assert sourced(script, ["LD_PRELOAD"])["LD_PRELOAD"] == "<unset>"
    lib.write_text("")
    assert sourced(script, ["LD_PRELOAD"], times=2)["LD_PRELOAD"] == str(lib)


def test_inventory_values_are_quoted_so_sourcing_runs_nothing(tmp_path):
    # A NIC name the kernel accepts (no / or space) that would run code unquoted.
    nic = "e$(touch${IFS}" + str(tmp_path / "pwned") + ")"
    script = render_cluster_env(tmp_path, recipe_env_nic=nic)
    got = sourced(script, ["SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "MASTER_ADDR", "CURRENT_IP"])
    assert not (tmp_path / "pwned").exists()
    assert got["SOCKET_IFNAME"] == got["HCCL_SOCKET_IFNAME"] == nic
    assert got["MASTER_ADDR"] == got["CURRENT_IP"] == "10.0.0.1"
    # plain values render as before: no quotes where none are needed
    assert "export MASTER_ADDR=10.0.0.1\n" in render_cluster_env(tmp_path).read_text()
