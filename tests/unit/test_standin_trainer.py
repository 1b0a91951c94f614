"""The simulator's STAND-IN trainer (``cann-standin/a3rl_standin_trainer.py``).

On the simulator the training play submits it in place of verl's ``main_ppo``/``main_dapo``.
These tests run everything but its Ray part in the project's venv, against the recipe
working directory the stand-in upstreams build (the real verl 0.6.0 configs, the recipe's
patch series applied, DAPO's configs copied in), the stand-in datasets converted by
``a3rl.planning.datasets`` and the stand-in models of ``a3rl.sim.hub``: composition and a
Hydra typo,
the data, model and reward checks and what they refuse, the per-node verdict on the probes'
reports, and metric lines that ``a3rl.node.metrics`` parses back as simulated steps, the same
for the same config, in the very format of verl's console logger.
"""

from __future__ import annotations

import ast
import numbers
import os
import pprint
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from a3rl.node import metrics
from a3rl.planning import datasets
from a3rl.sim import cann, datasets_fixture, hub, image_workspace, upstreams

CONTEXT = cann.CONTEXT
TRAINER = CONTEXT / "a3rl_standin_trainer.py"
REWARD = Path(datasets.__file__).resolve().parents[1] / "rewards" / "deepscaler.py"
PPO = "verl.trainer.main_ppo"
DAPO = "verl.trainer.main_dapo"


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "A3RL_STANDIN"))}
    # Nothing may write __pycache__ into the image's build context (cann.py copies files).
    return {**clean, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "PYTHONDONTWRITEBYTECODE": "1", **extra}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "advice.detachedHead=false", *args], cwd=cwd, env=_env(),
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def st() -> types.ModuleType:
    """The trainer module, loaded without writing bytecode next to it."""
    module = types.ModuleType("a3rl_standin_trainer")
    module.__file__ = str(TRAINER)
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(TRAINER.read_text(), str(TRAINER), "exec"), module.__dict__)
    yield module
    sys.modules.pop(module.__name__, None)


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    """The recipe working directory as the frameworks stage makes it, plus the reward."""
    up = upstreams.build(log=lambda _msg: None)
    manifest = upstreams.manifest_overrides(up)
    # The stand-in image's /workspace (vLLM-Ascend built), which build_project.sh copies.
    ws = tmp_path_factory.mktemp("workspace") / "workspace"
    image_workspace.build(ws, up)
    recipe = tmp_path_factory.mktemp("recipe") / "recipe"
    _git(recipe.parent, "clone", "-q", manifest["recipe"]["url"], recipe.name)
    _git(recipe, "checkout", "-q", manifest["recipe"]["ref"])
    wd = recipe / up.recipe_subdir
    for script in ("build_project.sh", "apply_all_patches.sh"):
        subprocess.run(["bash", script], cwd=wd, check=True, capture_output=True,
                       env=_env(FRAMEWORKS_DIR=str(ws)))
    (wd / "a3rl_rewards").mkdir()
    shutil.copy(REWARD, wd / "a3rl_rewards" / "deepscaler.py")
    return wd


@pytest.fixture(scope="module")
def assets(tmp_path_factory, layout) -> Path:
    """/data/a3rl as the data and weights stages leave it, with the stand-in files."""
    root = tmp_path_factory.mktemp("assets")
    raw = datasets_fixture.write_raw_datasets(root / "raw")
    datasets.prepare("deepscaler", raw["deepscaler"], root / "data/deepscaler")
    datasets.prepare("dapo_math_17k", raw["dapo_math_17k"], root / "data/dapo_math")
    datasets.prepare("aime_2024", raw["aime_2024"], root / "data/dapo_math")
    models = hub.write_models(root / "hub")
    for repo_id, folder in models.items():
        shutil.copytree(folder, root / "models" / repo_id.split("/")[1])
    config_only = root / "models/Qwen3-235B-A22B-config"
    config_only.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
                 "generation_config.json"):
        shutil.copy(root / "models/Qwen3-235B-A22B" / name, config_only / name)
    # The dist-checkpoint as the weights stage makes it: the stand-in converter's output.
    subprocess.run(
        [sys.executable, str(CONTEXT / "standin-torchrun"), "--nproc_per_node", "2",
         "converter_hf_to_mcore.py", "--hf_model_path", str(root / "models/Qwen3-235B-A22B"),
         "--output_path", str(root / "models/Qwen3-235B-A22B-mcore")],
        cwd=layout, check=True, capture_output=True,
        env=_env(USE_ALLTOALL_OVERLAP="1", A3RL_STANDIN_CONVERT_SECONDS="0"))
    return root


def grpo(assets: Path, layout: Path, *extra: str) -> list[str]:
    """Overrides shaped like the GRPO 32B run's (recipe.md), on the stand-in files."""
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={assets}/data/deepscaler/train.parquet",
        f"data.val_files={assets}/data/deepscaler/valid.parquet",
        "data.train_batch_size=32", "data.max_prompt_length=2048",
        "data.max_response_length=34816", "data.shuffle=False",
        f"actor_rollout_ref.model.path={assets}/models/Qwen3-32B",
        "actor_rollout_ref.rollout.n=16", "actor_rollout_ref.rollout.temperature=0.9",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=8",
        "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.recompute_old_log_prob=False",  # a key the verl patch adds
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.context_parallel_size=2",
        "+actor_rollout_ref.actor.megatron.override_transformer_config.use_flash_attn=True",
        f"custom_reward_function.path={layout}/a3rl_rewards/deepscaler.py",
        "custom_reward_function.name=compute_score",
        "trainer.nnodes=2", "trainer.n_gpus_per_node=16", "trainer.device=npu",
        "trainer.logger=[console,tensorboard]", "trainer.val_before_train=False",
        *extra,
    ]


def dapo(assets: Path, *extra: str) -> list[str]:
    """Overrides shaped like the DAPO 235B run's, loading the dist-checkpoint."""
    mcore = f"{assets}/models/Qwen3-235B-A22B-mcore"
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={assets}/data/dapo_math/dapo-math-17k.parquet",
        f"data.val_files={assets}/data/dapo_math/aime-2024.parquet",
        "data.train_batch_size=128", "data.gen_batch_size=128",
        "data.max_prompt_length=2048", "data.max_response_length=34816",
        f"actor_rollout_ref.model.path={assets}/models/Qwen3-235B-A22B",
        "actor_rollout_ref.rollout.n=16",
        "actor_rollout_ref.actor.use_kl_loss=False", "algorithm.use_kl_in_reward=False",
        "actor_rollout_ref.actor.megatron.use_dist_checkpointing=True",
        f"actor_rollout_ref.actor.megatron.dist_checkpointing_path={mcore}",
        "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_num_gen_batches=10",
        "reward_model.reward_manager=dapo",
        "trainer.nnodes=8", "trainer.n_gpus_per_node=16",
        *extra,
    ]


def config_dir(layout: Path) -> Path:
    return layout / "verl/trainer/config"


def argv(module: str, layout: Path, name: str, overrides: list[str]) -> list[str]:
    return ["--module", module, "--config-path", str(config_dir(layout)),
            "--config-name", name, *overrides]


def fake_cluster(st, **changes):
    """A cluster whose probes answer as the simulated nodes' do (or with ``changes``)."""
    def cluster(nnodes, npus_per_node, timeout, keys):
        job_env = {"VLLM_ASCEND_ENABLE_NZ": "0", "NNODES": str(nnodes)}
        reports = []
        for i in range(nnodes):
            env = {k: None for k in keys} | job_env | {"MASTER_ADDR": "10.88.0.2"}
            reports.append({
                "bundle": i, "ip": f"10.88.0.{i + 2}", "hostname": f"node{i + 1}",
                "node_id": f"id{i}", "npu_ids": [str(n) for n in range(npus_per_node)],
                "devices": list(range(16)), "management": ["davinci_manager"], "env": env,
                **changes})
        return st.ClusterReport(reports, job_env)
    return cluster


def run(st, capsys, args, monkeypatch, cluster=None) -> tuple[int, str, str]:
    monkeypatch.setenv("A3RL_STANDIN_STEP_SECONDS", "0")
    rc = st.run(args, cluster=cluster or fake_cluster(st))
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------ composition


def test_the_grpo_run_composes_against_the_working_directorys_verl(st, layout, assets,
                                                                   monkeypatch):
    monkeypatch.chdir(layout)
    cfg = st.compose(config_dir(layout), "ppo_megatron_trainer", grpo(assets, layout))
    assert cfg.actor_rollout_ref.actor.recompute_old_log_prob is False
    assert cfg.actor_rollout_ref.actor.megatron.context_parallel_size == 2
    # Resolved as verl's TaskRunner resolves it: interpolations are values now.
    assert cfg.actor_rollout_ref.rollout.response_length == 34816
    assert st.get(cfg, "trainer.logger") == ["console", "tensorboard"]
    assert st.total_steps(cfg) == st.DEFAULT_STEPS  # verl's default is null


def test_the_dapo_run_composes_with_its_relative_search_path(st, layout, assets, monkeypatch):
    monkeypatch.chdir(layout)  # dapo_megatron_trainer.yaml searches file://verl/trainer/config
    cfg = st.compose(config_dir(layout), "dapo_megatron_trainer", dapo(assets))
    assert cfg.reward_model.reward_manager == "dapo"
    assert cfg.data.gen_batch_size == 128
    assert cfg.algorithm.filter_groups.max_num_gen_batches == 10


def test_a_misspelled_key_fails_with_hydras_own_message(layout, assets):
    proc = subprocess.run(
        [sys.executable, "-m", "a3rl_standin_trainer",
         *argv(PPO, layout, "ppo_megatron_trainer", grpo(assets, layout, "trainer.nnodez=2"))],
        cwd=layout, capture_output=True, text=True, timeout=120,
        env=_env(PYTHONPATH=str(CONTEXT), HYDRA_FULL_ERROR="0"))
    assert proc.returncode == 1
    assert "Could not override 'trainer.nnodez'." in proc.stderr
    assert "Key 'nnodez' is not in struct" in proc.stderr
    assert "STAND-IN trainer: FAILED: Hydra could not compose ppo_megatron_trainer" \
        in proc.stderr
    assert "step:" not in proc.stdout and "STAND-IN trainer" in proc.stdout


def test_with_hydra_full_error_the_traceback_names_the_key(st, layout, assets, capsys,
                                                          monkeypatch):
    monkeypatch.chdir(layout)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    overrides = grpo(assets, layout, "actor_rollout_ref.actor.recompute_old_log_probs=True")
    rc, out, err = run(st, capsys, argv(PPO, layout, "ppo_megatron_trainer", overrides),
                       monkeypatch)
    assert rc == 1
    assert "Traceback" in err
    assert "ConfigCompositionException: Could not override " \
        "'actor_rollout_ref.actor.recompute_old_log_probs'" in err


def test_config_path_and_name_are_found_as_hydra_finds_them(st, layout, monkeypatch):
    monkeypatch.chdir(layout)
    ppo = st.module_file(PPO)
    assert ppo == (layout / "verl/trainer/main_ppo.py").resolve()
    assert st.module_file(DAPO) == (layout / "verl/trainer/main_dapo.py").resolve()
    assert st.package_root(PPO, ppo) == layout.resolve()
    # Relative to the module's file, as @hydra.main(config_path="config") is; absolute as is.
    assert st.config_dir(None, ppo) == config_dir(layout).resolve()
    assert st.config_dir("config", ppo) == config_dir(layout).resolve()
    assert st.config_dir("/elsewhere/config", ppo) == Path("/elsewhere/config")
    assert st.entrypoint(DAPO) == "main_dapo"
    with pytest.raises(st.CheckError, match="main_ppo and main_dapo only"):
        st.entrypoint("verl.trainer.main_generation")
    monkeypatch.chdir(layout.parent)
    with pytest.raises(st.CheckError, match="recipe working directory"):
        st.module_file(PPO)


# ------------------------------------------------------------------ data, model, reward


def test_the_grpo_runs_data_model_and_reward_are_read(st, layout, assets, monkeypatch):
    monkeypatch.chdir(layout)
    cfg = st.compose(config_dir(layout), "ppo_megatron_trainer", grpo(assets, layout))
    data = st.check_data(cfg)
    train = pq.read_metadata(assets / "data/deepscaler/train.parquet").num_rows
    valid = pq.read_metadata(assets / "data/deepscaler/valid.parquet").num_rows
    assert (data.rows("train"), data.rows("val")) == (train, valid)
    assert data.data_sources == {"deepscaler"}
    assert any("make no full batch of 32 prompts" in n for n in data.notes)
    model = st.check_model(cfg)
    assert model.config["num_hidden_layers"] == 2  # the tiny random Qwen3 (a3rl.sim.tiny_qwen3)
    # use_kl_loss: verl makes a reference policy, which loads the HF weights too.
    assert model.loads == ["actor: HF weights, 2 shards", "ref: HF weights, 2 shards"]
    line = st.check_reward(cfg, data, layout)
    assert "compute_score from" in line and "scored 1.0 on training row 0" in line


def test_the_dapo_runs_dist_checkpoint_and_default_scorer_are_checked(st, layout, assets,
                                                                      monkeypatch):
    monkeypatch.chdir(layout)
    monkeypatch.setenv("USE_ALLTOALL_OVERLAP", "1")
    cfg = st.compose(config_dir(layout), "dapo_megatron_trainer", dapo(assets))
    data = st.check_data(cfg)
    assert data.rows("train") == 2 * len(datasets_fixture.DAPO_PROBLEMS)
    model = st.check_model(cfg)
    assert model.config["num_hidden_layers"] == 94
    assert model.loads == [f"actor: dist-checkpoint {assets}/models/Qwen3-235B-A22B-mcore "
                           "(converted with USE_ALLTOALL_OVERLAP=1)"]
    assert "rules for data_source math_dapo" in st.check_reward(cfg, data, layout)
    monkeypatch.setenv("USE_ALLTOALL_OVERLAP", "0")
    with pytest.raises(st.CheckError, match="converted with USE_ALLTOALL_OVERLAP=1, the job "
                                            "has 0: they must match"):
        st.check_model(cfg)


def test_verls_default_scorer_rules_are_read_from_its_source(st, layout):
    exact, prefixes = st.default_scorer_rules(layout)
    assert {"openai/gsm8k", "math_dapo", "lighteval/MATH"} <= exact
    assert "deepscaler" not in exact and prefixes == ("aime",)


@pytest.mark.parametrize("change, message", [
    ("data.train_files=/nowhere/train.parquet", "cannot read /nowhere/train.parquet"),
    ("data.val_files=[]", "data.val_files is empty"),
    ("data.prompt_key=question", "has no column 'question' (data.prompt_key"),
    ("actor_rollout_ref.model.path=/nowhere", "/nowhere/config.json not found"),
    ("custom_reward_function.name=score_it", "has no function 'score_it'"),
    ("custom_reward_function.path=null", "no rule for data_source 'deepscaler'"),
])
def test_what_verl_would_fail_on_is_refused(st, layout, assets, monkeypatch, change, message):
    monkeypatch.chdir(layout)
    cfg = st.compose(config_dir(layout), "ppo_megatron_trainer",
                     grpo(assets, layout, change))
    with pytest.raises(st.CheckError, match=message.replace("(", r"\(").replace("[", r"\[")):
        data = st.check_data(cfg)
        st.check_model(cfg)
        st.check_reward(cfg, data, layout)


def test_a_file_without_the_ground_truth_is_named(st, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "1+1?"}]],
                             "data_source": ["x"], "reward_model": [{"style": "rule"}]}), bad)
    with pytest.raises(st.CheckError, match="'reward_model' has no field 'ground_truth'"):
        st.check_parquet(str(bad), "prompt", "data_source")


def test_file_lists_are_read_and_counted(st, layout, assets, monkeypatch):
    monkeypatch.chdir(layout)
    train = f"{assets}/data/deepscaler/train.parquet"
    cfg = st.compose(config_dir(layout), "ppo_megatron_trainer",
                     grpo(assets, layout, f"data.train_files=[{train},{train}]"))
    rows = pq.read_metadata(train).num_rows
    assert st.check_data(cfg).rows("train") == 2 * rows


def test_weights_are_checked_as_each_role_would_load_them(st, layout, assets, monkeypatch):
    monkeypatch.chdir(layout)
    config_only = f"actor_rollout_ref.model.path={assets}/models/Qwen3-235B-A22B-config"

    def model(*extra):
        return st.check_model(st.compose(config_dir(layout), "ppo_megatron_trainer",
                                         grpo(assets, layout, config_only, *extra)))

    with pytest.raises(st.CheckError, match="has no \\*.safetensors .a config-only folder"):
        model()
    random_init = model("actor_rollout_ref.actor.load_weight=False",
                        "actor_rollout_ref.ref.load_weight=False")
    assert random_init.loads == ["actor: random init (load_weight=False)",
                                 "ref: random init (load_weight=False)"]
    with pytest.raises(st.CheckError, match="asserts they are equal"):
        model("actor_rollout_ref.actor.load_weight=False")
    with pytest.raises(st.CheckError, match="dist_checkpointing_path is not set"):
        model("actor_rollout_ref.actor.megatron.use_dist_checkpointing=True")
    with pytest.raises(st.CheckError, match="no dist-checkpoint there .no such folder"):
        model("actor_rollout_ref.actor.megatron.use_dist_checkpointing=True",
              f"actor_rollout_ref.actor.megatron.dist_checkpointing_path={assets}/nowhere")


def test_a_shard_missing_from_the_index_is_named(st, assets, tmp_path):
    folder = tmp_path / "Qwen3-32B"
    shutil.copytree(assets / "models/Qwen3-32B", folder)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(st.CheckError, match="1 of 2 shards named in model.safetensors"):
        st._hf_weights(folder)


# ------------------------------------------------------------------ cluster


def test_the_probes_verdict_per_node(st):
    cluster = fake_cluster(st)(2, 16, 1.0, st.ENV_SHOWN)
    lines, problems = st.verify_cluster(cluster, 2, 16)
    assert problems == []
    assert lines[0].startswith("node 1/2: node1 (10.88.0.2) NPU ids 0-15 -> /dev/davinci0-15 "
                               "(16 devices, management: davinci_manager); job env 2/2 as "
                               "submitted; MASTER_ADDR=10.88.0.2 NNODES=2 "
                               "VLLM_ASCEND_ENABLE_NZ=0")
    assert st._ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize("changes, message", [
    ({"devices": []}, "node1 (10.88.0.2) sees no /dev/davinci* device"),
    ({"devices": list(range(8))}, "Ray gave NPU id(s) 8-15 but /dev/davinci8 ... is missing"),
    ({"npu_ids": ["0"]}, "Ray gave 1 NPU ids, 16 wanted"),
    ({"node_id": "same"}, "2 nodes wanted, the probes ran on 1"),
    ({"env": {"VLLM_ASCEND_ENABLE_NZ": None, "NNODES": "2"}},
     "the job's VLLM_ASCEND_ENABLE_NZ='0' did not reach it (it has None)"),
])
def test_a_node_without_its_devices_or_env_fails_the_job(st, changes, message):
    lines, problems = st.verify_cluster(fake_cluster(st, **changes)(2, 16, 1.0, ()), 2, 16)
    assert any(message in p for p in problems), problems


def test_what_ray_sets_per_worker_is_not_held_against_a_node(st):
    report = fake_cluster(st)(1, 16, 1.0, ())
    report.job_env |= {"ASCEND_RT_VISIBLE_DEVICES": "0,1", "PYTHONPATH": "/x",
                       "RAY_DEDUP_LOGS": "0", "LD_LIBRARY_PATH": "${LD_LIBRARY_PATH}:/y"}
    report.reports[0]["env"] |= {"ASCEND_RT_VISIBLE_DEVICES": "0-15", "PYTHONPATH": "/x:/ray",
                                 "LD_LIBRARY_PATH": "/usr/lib:/y"}
    lines, problems = st.verify_cluster(report, 1, 16)
    assert problems == [] and "job env 2/2 as submitted" in lines[0]


def test_cluster_problems_fail_the_run_before_any_step(st, layout, assets, capsys, monkeypatch):
    monkeypatch.chdir(layout)
    rc, out, err = run(st, capsys, argv(PPO, layout, "ppo_megatron_trainer",
                                        grpo(assets, layout)),
                       monkeypatch, cluster=fake_cluster(st, devices=[]))
    assert rc == 1
    assert "FAILED: cluster: node1 (10.88.0.2) sees no /dev/davinci* device" in err
    assert "step:" not in out and metrics.parse_log(out) == []


def test_without_ray_the_checks_run_first_then_it_fails_clearly(layout, assets):
    proc = subprocess.run(
        [sys.executable, "-m", "a3rl_standin_trainer",
         *argv(PPO, layout, "ppo_megatron_trainer", grpo(assets, layout))],
        cwd=layout, capture_output=True, text=True, timeout=120,
        env=_env(PYTHONPATH=str(CONTEXT)))
    assert proc.returncode == 1
    assert "cluster: Ray is not importable here" in proc.stderr
    overrides = len(grpo(assets, layout))
    for seen in (f"config: ppo_megatron_trainer with {overrides} override(s): 2 nodes x 16 NPUs",
                 "data: train ", "model: ", "scored 1.0", "cluster: reserving 2 x 16 NPUs"):
        assert seen in proc.stdout


def test_a_vllm_ascend_from_git_sources_fails_at_the_first_rollout(st, layout, assets, capsys,
                                                                   monkeypatch, tmp_path):
    """Issue 19 item 3: the working directory's vllm_ascend must be the image's built
    tree; a copy of the git sources (no extension, no custom ops) fails the run where
    the real one fails, after the cluster checks and before any step."""
    assert "vllm_ascend_C.cpython-311-aarch64-linux-gnu.so" in st.check_rollout_build([layout])
    copy = tmp_path / "wd"
    shutil.copytree(layout, copy, symlinks=True)
    for built in copy.glob("vllm_ascend/vllm_ascend_C*.so"):
        built.unlink()
    shutil.rmtree(copy / "vllm_ascend/_cann_ops_custom")
    monkeypatch.chdir(copy)
    rc, out, err = run(st, capsys, argv(PPO, copy, "ppo_megatron_trainer",
                                        grpo(assets, copy)), monkeypatch)
    assert rc == 1
    assert (f"FAILED: rollout: {copy / 'vllm_ascend'} has no compiled extension "
            "(vllm_ascend_C*.so) and no _cann_ops_custom") in err
    assert "sleep mode fails at the first rollout" in err and "frameworks_trees" in err
    assert "cluster: node" in out and "step:" not in out


# ------------------------------------------------------------------ metric lines


def test_grpo_lines_parse_back_as_simulated_steps(st, layout, assets, capsys, monkeypatch):
    monkeypatch.chdir(layout)
    rc, out, err = run(st, capsys, argv(PPO, layout, "ppo_megatron_trainer",
                                        grpo(assets, layout)), monkeypatch)
    assert rc == 0, err
    steps = metrics.parse_log(out)
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["simulated"] is True for s in steps)
    keys = set(metrics.KEY_METRICS) - {"train/num_gen_batches"}
    for s in steps:
        assert keys <= set(s), keys - set(s)
        assert "train/num_gen_batches" not in s
        assert s["perf/time_per_step"] == s["timing_s/step"]
        assert s["timing_s/generate_sequences"] < s["timing_s/gen"] < s["timing_s/step"]
        assert 0 < s["response_length/mean"] <= s["response_length/max"] == 34816
        assert 0 <= s["critic/score/mean"] <= 1
        assert s["actor/kl_coef"] == 0.001 and s["actor/lr"] == 1e-06
        # perf/throughput is tokens per second per card, as verl computes it.
        assert s["perf/throughput"] == pytest.approx(
            s["perf/total_num_tokens"] / (s["perf/time_per_step"] * 32), rel=1e-3)
    summary = metrics.summary(steps)
    assert summary["simulated"] and summary["count"] == 2
    assert "STAND-IN trainer" in out and "SYNTHETIC" in out
    assert "Total training steps: 2" in out


def test_dapo_lines_carry_the_generation_batches(st, layout, assets, capsys, monkeypatch):
    monkeypatch.chdir(layout)
    monkeypatch.setenv("USE_ALLTOALL_OVERLAP", "1")
    rc, out, err = run(st, capsys, argv(DAPO, layout, "dapo_megatron_trainer",
                                        dapo(assets, "trainer.total_training_steps=6")),
                       monkeypatch)
    assert rc == 0, err
    steps = metrics.parse_log(out)
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    assert set(metrics.KEY_METRICS) <= set(steps[0])
    assert steps[0]["train/num_gen_batches"] == 2  # the recipe's first step: 2 batches
    assert {s["train/num_gen_batches"] for s in steps} <= {1, 2}
    assert "actor/kl_loss" not in steps[0]  # no KL loss in DAPO


def test_the_same_config_gives_the_same_lines(st, layout, assets, capsys, monkeypatch):
    monkeypatch.chdir(layout)
    args = argv(PPO, layout, "ppo_megatron_trainer", grpo(assets, layout))
    first = [line for line in run(st, capsys, args, monkeypatch)[1].splitlines()
             if line.startswith("step:")]
    again = [line for line in run(st, capsys, args, monkeypatch)[1].splitlines()
             if line.startswith("step:")]
    assert len(first) == 2 and first == again
    other = argv(PPO, layout, "ppo_megatron_trainer",
                 grpo(assets, layout, "data.train_batch_size=64"))
    changed = [line for line in run(st, capsys, other, monkeypatch)[1].splitlines()
               if line.startswith("step:")]
    assert changed != first


@pytest.mark.parametrize("value, steps", [("null", 2), ("5", 5), ("100", 20), ("0", 1)])
def test_steps_follow_total_training_steps_within_limits(st, layout, assets, monkeypatch,
                                                         value, steps):
    monkeypatch.chdir(layout)
    cfg = st.compose(config_dir(layout), "ppo_megatron_trainer",
                     grpo(assets, layout, f"trainer.total_training_steps={value}"))
    assert st.total_steps(cfg) == steps


def test_the_line_is_verls_own_console_format(st, layout):
    """verl's concat_dict_to_str, taken from the working directory's verl source."""
    source = (layout / "verl/utils/logger/aggregate_logger.py").read_text()
    fn = next(n for n in ast.parse(source).body
              if isinstance(n, ast.FunctionDef) and n.name == "concat_dict_to_str")
    namespace = {"numbers": numbers, "pprint": pprint}
    exec(compile(ast.Module([fn], []), "aggregate_logger.py", "exec"), namespace)
    data = {"actor/pg_loss": -0.0123, "perf/total_num_tokens": 512, "perf/throughput": 1.2e-05,
            "critic/score/max": 1.0, st.SIMULATED_KEY: 1}
    assert st.console_line(3, data) == namespace["concat_dict_to_str"](data, step=3)


# ------------------------------------------------------------------ stop, image


def test_sigterm_stops_it_promptly(layout, assets, tmp_path):
    """``ray job stop`` sends SIGTERM to the driver: it exits at once, 143."""
    wrapper = tmp_path / "stop.py"
    wrapper.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(CONTEXT)!r})
        import a3rl_standin_trainer as st

        def cluster(nnodes, npus_per_node, timeout, keys):
            return st.ClusterReport([
                {{"bundle": i, "ip": "10.0.0.%d" % i, "hostname": "n%d" % i,
                  "node_id": str(i), "npu_ids": [str(n) for n in range(npus_per_node)],
                  "devices": list(range(16)), "management": [], "env": {{}}}}
                for i in range(nnodes)], {{}})

        sys.exit(st.run(sys.argv[1:], cluster=cluster))
        """))
    proc = subprocess.Popen(
        [sys.executable, str(wrapper),
         *argv(PPO, layout, "ppo_megatron_trainer", grpo(assets, layout))],
        cwd=layout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(A3RL_STANDIN_STEP_SECONDS="60"))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("Total training steps"):
                break
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
        assert time.monotonic() - sent < 5
        assert "SIGTERM (ray job stop) after 0 step(s): stopping" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_inside_the_ray_part_is_acted_on_when_ray_returns(st, layout, assets,
                                                                   capsys, monkeypatch):
    """Ray turns an exception raised by a signal handler inside its wait loops into
    SystemError: there the SIGTERM is noted, and the run stops as soon as Ray returns."""
    monkeypatch.chdir(layout)
    inner = fake_cluster(st)
    # Not always SIG_DFL: ansible-runner, run in-process by earlier tests of the session,
    # installs its own SIGTERM handler and leaves it.
    before = signal.getsignal(signal.SIGTERM)

    def cluster(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives "inside Ray": must not raise here
        return inner(*args)

    rc, out, err = run(st, capsys, argv(PPO, layout, "ppo_megatron_trainer",
                                        grpo(assets, layout)), monkeypatch, cluster=cluster)
    assert rc == 143
    assert "SIGTERM (ray job stop) after 0 step(s)" in err
    assert "step:" not in out
    assert signal.getsignal(signal.SIGTERM) is before  # put back as it was


def test_the_image_context_stays_flat_and_pins_pyarrow_like_the_project():
    # cann.py copies the context's files one by one and hashes them: no folders allowed.
    assert [p.name for p in CONTEXT.iterdir() if not p.is_file()] == []
    project = (Path(cann.__file__).resolve().parents[3] / "requirements.txt").read_text()
    pins = (CONTEXT / "requirements.txt").read_text()
    pin = next(line for line in project.splitlines() if line.startswith("pyarrow=="))
    assert pin in pins.splitlines()
    containerfile = (CONTEXT / "Containerfile").read_text()
    assert "COPY a3rl_standin_trainer.py /opt/a3rl/standin/a3rl_standin_trainer.py" \
        in containerfile

