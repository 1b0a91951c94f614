"""The simulator's CPU profile of a run (a3rl.sim.cpu_profile): what it keeps from the
real plan, what it replaces, and that it says so; and that the job train_job submits on
the simulator is the one it submitted when the role called the simulator's function
(issue 44): the profile is now data in the simulator's inventory, applied by the
product's generic job profile (a3rl.planning.job_profile, the filter a3rl_job_profile)."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from a3rl.paths import project_root
from a3rl.planning import checkpointing
from a3rl.planning.plan import (
    PlanError,
    load_profiles,
    make_plan,
    node_paths,
    parse_value,
    plan_from_files,
    render_value,
    split_override,
)
from a3rl.sim import cpu_profile, inventory
from a3rl.sim.cpu_profile import (
    CONFIG_NAMES,
    DROPPED_PREFIXES,
    LABEL,
    LAYER_DIR,
    MEGATRON,
    MICRO_BATCH,
    MODULES,
    PROMPT_LENGTH,
    PROMPTS_PER_NODE,
    RESPONSE_LENGTH,
    TINY_PARAMS,
    VLLM,
)

from .conftest import project_filters


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


# ---- the job as train_job submitted it before issue 44 ----------------------------------
#
# a3rl.sim.cpu_profile.cpu_job as it was when the role called it through the filter
# a3rl_sim_cpu_job, kept verbatim (its constants are the module's) as the reference the
# data path must match. When the CPU profile changes on purpose, change the profile's data
# and retire this reference (and the test below) in the same change.


@dataclass(frozen=True)
class RefChange:
    key: str
    was: str | None
    now: str | None
    why: str

    def line(self) -> str:
        if self.now is None:
            return f"{self.key}={self.was}: dropped ({self.why})"
        if self.was is None:
            return f"{self.key}={self.now}: added ({self.why})"
        return f"{self.key}: {self.was} -> {self.now} ({self.why})"


def reference_supported(job: Mapping[str, Any]) -> bool:
    return job.get("module") in MODULES and job.get("config_name") in CONFIG_NAMES


def reference_cpu_job(job: Mapping[str, Any], nodes: int,
                      layer_dir: str = LAYER_DIR) -> dict[str, Any]:
    """The simulator's job for the real plan's ``job`` on ``nodes`` nodes: the same keys
    as ``Plan.job()`` (the entrypoint rebuilt), plus ``replaced`` (one line per change,
    for the report), ``kept`` (the plan's overrides it keeps) and ``label``."""
    if not reference_supported(job):
        raise ValueError(f"no CPU profile for {job.get('module')} --config-name="
                         f"{job.get('config_name')}: only {', '.join(MODULES)} with "
                         f"{', '.join(CONFIG_NAMES)}")
    if nodes < 1:
        raise ValueError(f"nodes={nodes}: the CPU job needs at least one node")
    values: dict[str, tuple[str, Any]] = {}
    for override in job["overrides"]:
        prefix, key, text = split_override(override)
        values[key] = (prefix, parse_value(text))
    changes: list[RefChange] = []
    kept: list[str] = []
    out: dict[str, tuple[str, Any]] = {}
    for key, (prefix, value) in values.items():
        why = next((w for p, w in DROPPED_PREFIXES if key.startswith(p)), None)
        if why is not None:
            changes.append(RefChange(prefix + key, render_value(value), None, why))
        else:
            out[key] = (prefix, value)

    def put(key: str, value: Any, why: str, prefix: str = "") -> None:
        old = out.get(key, values.get(key))
        was = render_value(old[1]) if old is not None else None
        if was == render_value(value):
            return
        out.pop(key, None)
        out[key] = (old[0] if old is not None else prefix, value)
        changes.append(RefChange(prefix + key if old is None else key, was, render_value(value),
                              why))

    batch = int(_ref_get(values, "data.train_batch_size", 32))
    mini = int(_ref_get(values, "actor_rollout_ref.actor.ppo_mini_batch_size", batch))
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
    logger = _ref_get(values, "trainer.logger", None)
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
    changes.insert(0, RefChange("--config-name", job["config_name"], config_name, MEGATRON))
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
        changes.append(RefChange("trainer.default_local_dir", None, policy["dir"],
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


def _ref_get(values: Mapping[str, tuple[str, Any]], key: str, default: Any) -> Any:
    return values[key][1] if key in values else default


# ---- the data path equals the reference --------------------------------------------------

ROOT = project_root()
WORKDIR = "/data/a3rl/llm_rl/qwen3"


def _filters() -> dict:
    return project_filters()


def _inventory_profile(tmp_path, real_verl: bool = True, **extra_vars) -> Any:
    """train_job_profile as a play on the simulator sees it: the group_vars `sim up`
    writes, loaded as Ansible loads an inventory's files and rendered by Ansible's
    templar (with the play's extra vars above them)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    fake = SimpleNamespace(key="k", known_hosts="h", standin_dir="s")
    path = tmp_path / "a3_nodes.yml"
    path.write_text(inventory.HEADER + "---\n" + yaml.safe_dump(
        inventory.group_vars(fake, real_verl=real_verl), sort_keys=False, width=1000))
    loader = DataLoader()
    variables = {**loader.load_from_file(str(path), trusted_as_template=True), **extra_vars}
    return Templar(loader=loader, variables=variables).template(variables["train_job_profile"])


def _combinations():
    """Every job the simulator's inventory can be asked to run: each algorithm, model and
    weights, on 1 to 8 nodes of 16 stand-in NPUs, with no feature or each one, with
    checkpoints by the weights, on and off, with and without extra overrides."""
    data = load_profiles(ROOT)
    profiles = {k: data.get(k) for k in ("a3rl_models", "a3rl_algorithms", "a3rl_runs",
                                         "a3rl_features", "a3rl_run_defaults",
                                         "a3rl_model_overrides", "a3rl_patched_keys")}
    profiles["paths"] = node_paths("/data/a3rl", WORKDIR, data.get("a3rl_datasets") or {},
                                   data.get("a3rl_artifacts") or {})
    feature_sets = [[]] + [[name] for name in sorted(data["a3rl_features"])]
    extras = [None, ["trainer.total_training_steps=2", "actor_rollout_ref.rollout.n=4"],
              ["data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
               "trainer.logger=['console','tensorboard']"]]
    for algo in sorted(data["a3rl_algorithms"]):
        for model in sorted(data["a3rl_models"]):
            for weights in ("real", "random"):
                for nodes in (1, 2, 3, 4, 8):
                    for features in feature_sets:
                        for enabled in ("", True, False):
                            for extra in extras:
                                policy = {"enabled": enabled, "root": "/shared/checkpoints",
                                          "shared": True, "max_lost_minutes": 60, "keep": 2}
                                try:
                                    job = make_plan(algo, model, weights, features, nodes, 16,
                                                    profiles, extra_overrides=extra,
                                                    checkpointing=policy).job()
                                except PlanError:
                                    continue
                                yield (algo, model, weights, nodes, features, enabled,
                                       extra), job


def test_the_job_submitted_on_the_simulator_is_the_one_submitted_before(tmp_path):
    profile = _inventory_profile(tmp_path)
    assert profile == json.loads(json.dumps(cpu_profile.profile()))
    filters = _filters()
    applies, apply = filters["a3rl_job_profile_applies"], filters["a3rl_job_profile"]
    seen: dict[tuple, int] = {}
    for case, job in _combinations():
        run = case[:3]
        assert applies(job, profile) == reference_supported(job), case
        if not reference_supported(job):
            seen.setdefault(run, 0)
            continue
        seen[run] = seen.get(run, 0) + 1
        now, before = apply(job, profile, case[3]), reference_cpu_job(job, case[3])
        # The whole job: entrypoint, overrides, env (the runtime env), submission id,
        # checkpoint policy, and the replaced/kept lists the report shows.
        assert now == before, case
    # Every run of a3rl_runs was planned; each GRPO run (the only ones with a CPU profile)
    # was compared in many variants.
    runs = {tuple(k.split("-")) for k in load_profiles(ROOT)["a3rl_runs"]}
    assert set(seen) == runs, seen
    compared = {r: n for r, n in seen.items() if n}
    assert set(compared) == {r for r in runs if r[0] == "grpo"}, seen
    assert min(compared.values()) >= 40, compared


def test_the_simulators_switch_turns_the_profile_off_and_a_standin_cluster_has_none(tmp_path):
    assert _inventory_profile(tmp_path, a3rl_sim_real_verl=False) == {}
    assert _inventory_profile(tmp_path, real_verl=False) == {}
    job = real()
    assert not _filters()["a3rl_job_profile_applies"](job, {})


def test_a_malformed_profile_is_refused_with_what_is_wrong() -> None:
    from a3rl.planning import job_profile

    bad = {"name": "x", "set": [{"key": "a", "value": 1, "per_node": 2}], "dorp": []}
    with pytest.raises(ValueError, match="unknown key 'dorp'.*set\\[0\\] needs a key and "
                                         "exactly one of value, per_node, ratio_to"):
        job_profile.apply(real(), bad, 2)
