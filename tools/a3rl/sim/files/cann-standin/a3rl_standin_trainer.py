"""STAND-IN for verl 0.6.0's trainer entry points, in the simulator's CANN image stand-in only.

The stand-in image has no torch, vLLM, Megatron or NPUs, so verl's ``main_ppo`` and
``main_dapo`` cannot train there. On the simulator the training play submits, as the Ray
job on the head, this module instead, with verl's own arguments::

    python3 -m a3rl_standin_trainer --module verl.trainer.main_ppo \\
        --config-path /data/a3rl/llm_rl/qwen3/verl/trainer/config \\
        --config-name ppo_megatron_trainer data.train_files=... trainer.nnodes=2 ...

from the recipe working directory, and it does everything verl does before and around
the NPU math, so that submission, follow, stop, log collection and the report run for real:

1. Composes the config with Hydra's compose API against the working directory's own verl
   configs (``--config-path`` and ``--config-name`` as Hydra reads them: a relative path
   is relative to the module's file; missing, verl's defaults), then resolves it as verl
   does. A key the config does not have fails with Hydra's own message.
2. Reads what verl reads: the parquet files of ``data.train_files`` and
   ``data.val_files`` (the columns verl uses, row counts), the model folder
   ``actor_rollout_ref.model.path`` (config.json, tokenizer, and the weights that
   ``load_weight`` and ``megatron.use_dist_checkpointing`` say verl would load: HF shards
   or the ``dist_checkpointing_path`` folder), and the reward: the custom reward function
   (``custom_reward_function.path``/``.name``, imported as verl does and run on one row),
   or, without one, that verl's default scorer has a rule for every ``data_source``.
3. Reserves the job's NPUs on the Ray cluster as verl's workers would: one placement
   group of ``trainer.nnodes`` bundles of ``{"NPU": trainer.n_gpus_per_node}``,
   STRICT_SPREAD (one per node), and runs one task per bundle that reports the node's
   address, the NPU ids Ray gave it, the ``/dev/davinci*`` devices it sees and the
   environment it got. It fails when the cluster lacks the NPUs (within
   ``A3RL_STANDIN_RAY_TIMEOUT`` seconds, default 120), a node sees no device for an id
   Ray assigned, or a variable of the job's env did not reach a node.
4. Checks what vLLM-Ascend's first rollout needs of its build: ``vllm_ascend`` as the
   job imports it (the working directory first) holds the compiled extension
   (``vllm_ascend_C*.so``) and ``_cann_ops_custom``, as the image's built tree does. A
   copy of vLLM-Ascend's git sources has neither; the real run then has its custom ops
   off and fails in sleep mode at the first rollout. The stand-in fails there, clearly.
5. Prints ``trainer.total_training_steps`` steps (2 when unset, at most 20) as verl's
   console logger prints them (``step:N - key:value - ...``, the keys verl 0.6.0 logs,
   DAPO's ``train/num_gen_batches`` for ``main_dapo``), every line with
   ``a3rl/simulated:1``. The values are SYNTHETIC: plausible for the run's shape and the
   same for the same config, never measured. ``A3RL_STANDIN_STEP_SECONDS`` (default 2)
   is slept per step so following and stopping can be seen; SIGTERM (``ray job stop``)
   ends it at once (exit 143).

Exit codes: 0 done, 1 a check failed (message on stderr), 2 bad command line, 143 SIGTERM.
Standard library plus hydra-core, omegaconf and pyarrow; Ray only for step 3.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import pprint
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import DictConfig, ListConfig, OmegaConf

NAME = "STAND-IN trainer"
# The metric a3rl.metrics.SIMULATED_KEY names: marks every line as not measured.
SIMULATED_KEY = "a3rl/simulated"
# The entry points the stand-in replaces (last part of --module) and their Hydra
# defaults as verl 0.6.0 declares them (@hydra.main(config_path="config", ...)).
ENTRYPOINTS = {"main_ppo": "ppo_trainer", "main_dapo": "dapo_trainer"}
DEFAULT_STEPS = 2
MAX_STEPS = 20
DEFAULT_STEP_SECONDS = 2.0
DEFAULT_RAY_TIMEOUT = 120.0
# Shown for every node besides the job's own env (recipe.md, "Per-node environment").
ENV_SHOWN = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NPUS_PER_NODE", "CURRENT_IP",
             "SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "HCCL_IF_BASE_PORT", "VLLM_ASCEND_ENABLE_NZ",
             "USE_ALLTOALL_OVERLAP", "ASCEND_RT_VISIBLE_DEVICES", "SOC_VERSION")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
# vLLM-Ascend's build products in its package folder (shared/reference/real-upstreams.md).
VLLM_ASCEND_EXTENSION = "vllm_ascend_C*.so"
VLLM_ASCEND_CUSTOM_OPS = "_cann_ops_custom"
# The record the simulator's stand-in converter writes into a dist-checkpoint.
STANDIN_CKPT_RECORD = "release/a3rl-standin.json"


class CheckError(Exception):
    """Something verl would fail on, said in one message."""


class Stopped(BaseException):
    """SIGTERM arrived (``ray job stop``); a BaseException so no ``except Exception``
    on the way (a reward function's, say) swallows it."""


def say(text: str = "") -> None:
    print(text, flush=True)


# ------------------------------------------------------------------ command line


@dataclass(frozen=True)
class Args:
    module: str
    config_path: str | None
    config_name: str | None
    overrides: tuple[str, ...]


def parse_args(argv: Sequence[str]) -> Args:
    """verl's command line (Hydra's ``--config-path``/``--config-name`` and overrides)
    plus ``--module``, the entry point stood in for."""
    p = argparse.ArgumentParser(
        prog="python3 -m a3rl_standin_trainer", allow_abbrev=False,
        description=f"{NAME} for verl's main_ppo/main_dapo (simulator only: no NPU math, "
                    "synthetic metrics marked a3rl/simulated:1)")
    p.add_argument("--module", required=True,
                   help="the module verl would run, e.g. verl.trainer.main_ppo")
    p.add_argument("--config-path", "-cp", help="Hydra config folder (absolute, or "
                   "relative to the module's file, as Hydra reads it)")
    p.add_argument("--config-name", "-cn", help="Hydra config name")
    p.add_argument("overrides", nargs="*", help="Hydra overrides (key=value, +key=value)")
    ns = p.parse_intermixed_args(list(argv))
    return Args(ns.module, ns.config_path, ns.config_name, tuple(ns.overrides))


def entrypoint(module: str) -> str:
    """``main_ppo`` or ``main_dapo``: which trainer ``module`` is."""
    last = module.rsplit(".", 1)[-1]
    if last not in ENTRYPOINTS:
        raise CheckError(f"--module {module}: the stand-in stands in for "
                         f"{' and '.join(ENTRYPOINTS)} only")
    return last


def module_file(module: str, search: Sequence[str | Path] | None = None) -> Path:
    """The file ``python3 -m module`` would run, found without importing its package
    (verl's ``__init__`` needs torch). ``search``: sys.path, the working directory first."""
    rel = Path(*module.split(".")).with_suffix(".py")
    roots = [Path.cwd(), *(p for p in sys.path if p)] if search is None else search
    for root in roots:
        candidate = Path(root) / rel
        if candidate.is_file():
            return candidate.resolve()
    raise CheckError(f"{module}: no {rel} under {Path.cwd()} (or sys.path): run the job "
                     "from the recipe working directory, where build_project.sh put verl")


def package_root(module: str, path: Path) -> Path:
    """The folder ``module``'s top package sits in (the working directory)."""
    return path.parents[len(module.split(".")) - 1]


def config_dir(config_path: str | None, module_path: Path) -> Path:
    """Where Hydra would look: absolute as given, relative to the module's file."""
    path = Path(config_path if config_path is not None else "config")
    return path if path.is_absolute() else (module_path.parent / path).resolve()


# ------------------------------------------------------------------ configuration


def compose(directory: Path, name: str, overrides: Sequence[str]) -> DictConfig:
    """The config verl would run with: Hydra's compose, then resolved as verl's
    TaskRunner resolves it. Raises Hydra's and OmegaConf's own exceptions."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(directory), version_base=None,
                               job_name="a3rl_standin_trainer"):
        cfg = hydra_compose(config_name=name, overrides=list(overrides))
    OmegaConf.resolve(cfg)
    return cfg


def hydra_error(exc: BaseException) -> str:
    """The error as Hydra prints it: the message and its causes, or the whole traceback
    with HYDRA_FULL_ERROR=1 (the recipe sets it)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return "".join(traceback.format_exception(exc)).rstrip()
    lines = []
    cause: BaseException | None = exc
    while cause is not None:
        lines.append(str(cause))
        cause = cause.__cause__
    lines += ["", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    return "\n".join(lines)


def get(cfg: DictConfig, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(cfg, key, default=default)
    return OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value


def as_files(value: Any) -> list[str]:
    """``data.train_files``: one path or a list of them, as verl takes it."""
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


# ------------------------------------------------------------------ data


@dataclass
class DataReport:
    files: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # split -> (path, rows)
    first_row: dict[str, Any] = field(default_factory=dict)               # first train row
    data_sources: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def rows(self, split: str) -> int:
        return sum(n for _, n in self.files.get(split, []))


def _field(t: pa.DataType, name: str) -> pa.DataType | None:
    if not pa.types.is_struct(t):
        return None
    i = t.get_field_index(name)
    return t.field(i).type if i >= 0 else None


def check_parquet(path: str, prompt_key: str, source_key: str) -> tuple[int, list[str]]:
    """Rows of one parquet file and notes; CheckError when verl could not read it."""
    try:
        pf = pq.ParquetFile(os.path.expanduser(path))
    except (OSError, pa.ArrowException) as e:
        raise CheckError(f"data: cannot read {path}: {e}") from None
    schema = pf.schema_arrow
    names = set(schema.names)

    def need(column: str, why: str) -> pa.DataType:
        if column not in names:
            raise CheckError(f"data: {path} has no column {column!r} ({why}); it has "
                             f"{', '.join(schema.names)}")
        return schema.field(column).type

    prompt = need(prompt_key, "data.prompt_key: the chat verl renders")
    if not (pa.types.is_list(prompt) or pa.types.is_large_list(prompt)):
        raise CheckError(f"data: {path}: column {prompt_key!r} is {prompt}, verl wants a "
                         "list of {role, content} messages")
    need(source_key, "data.reward_fn_key: picks the scorer")
    if _field(need("reward_model", "the scorer's ground truth"), "ground_truth") is None:
        raise CheckError(f"data: {path}: column 'reward_model' has no field 'ground_truth'")
    notes = []
    if _field(schema.field("extra_info").type if "extra_info" in names else pa.null(),
              "index") is None:
        notes.append(f"{path}: no extra_info.index (verl then uses 0 for every row)")
    rows = pf.metadata.num_rows
    if rows == 0:
        raise CheckError(f"data: {path} has no rows")
    return rows, notes


def check_data(cfg: DictConfig) -> DataReport:
    """The training and validation files verl's RLHFDataset would read."""
    prompt_key = get(cfg, "data.prompt_key", "prompt")
    source_key = get(cfg, "data.reward_fn_key", "data_source")
    report = DataReport()
    for split, key in (("train", "data.train_files"), ("val", "data.val_files")):
        files = as_files(get(cfg, key))
        if not files:
            raise CheckError(f"data: {key} is empty")
        for path in files:
            rows, notes = check_parquet(path, prompt_key, source_key)
            report.files.setdefault(split, []).append((path, rows))
            report.notes += notes
            table = pq.read_table(os.path.expanduser(path), columns=[source_key])
            report.data_sources.update(str(s) for s in table.column(source_key).unique()
                                       .to_pylist())
    first = pq.ParquetFile(os.path.expanduser(report.files["train"][0][0]))
    report.first_row = first.read_row_group(0).slice(0, 1).to_pylist()[0]
    batch = get(cfg, "data.gen_batch_size") or get(cfg, "data.train_batch_size")
    if batch and report.rows("train") < int(batch):
        report.notes.append(
            f"{report.rows('train')} training rows make no full batch of {batch} prompts: "
            "verl would stop with 'Train dataloader is empty!' (it drops the last partial "
            "batch); the stand-in goes on, the simulator's datasets are tiny")
    return report


# ------------------------------------------------------------------ model


@dataclass
class ModelReport:
    path: str
    config: dict[str, Any]
    loads: list[str]  # per role: what it would load


def _roles(cfg: DictConfig) -> list[str]:
    """actor, and ref when verl makes a reference policy (KL loss or KL in reward)."""
    ref = get(cfg, "algorithm.use_kl_in_reward", False) or \
        get(cfg, "actor_rollout_ref.actor.use_kl_loss", False)
    return ["actor", "ref"] if ref else ["actor"]


def _hf_weights(path: Path) -> str:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise CheckError(f"model: {path}: {len(missing)} of {len(shards)} shards named in "
                             f"{index.name} are missing ({', '.join(missing[:3])} ...)")
        return f"HF weights, {len(shards)} shards"
    shards = sorted(p.name for p in path.iterdir() if p.suffix in (".safetensors", ".bin"))
    if not shards:
        raise CheckError(f"model: load_weight=True without dist-checkpointing loads the HF "
                         f"weights from {path}, which has no *.safetensors (a config-only "
                         "folder? random init needs load_weight=False)")
    return f"HF weights, {len(shards)} files"


def _dist_checkpoint(cfg: DictConfig, role: str) -> str:
    key = f"actor_rollout_ref.{role}.megatron.dist_checkpointing_path"
    value = get(cfg, key)
    if not value:
        raise CheckError(f"model: {role} has megatron.use_dist_checkpointing=True but {key} "
                         "is not set")
    path = Path(os.path.expanduser(str(value)))
    if not path.is_dir() or not any(path.iterdir()):
        raise CheckError(f"model: {key}={value}: no dist-checkpoint there "
                         f"({'empty folder' if path.is_dir() else 'no such folder'})")
    record = path / STANDIN_CKPT_RECORD
    if record.is_file():
        recorded = json.loads(record.read_text()).get("USE_ALLTOALL_OVERLAP")
        current = os.environ.get("USE_ALLTOALL_OVERLAP")
        if recorded is not None and current is not None and str(recorded) != str(current):
            raise CheckError(f"model: {path} was converted with USE_ALLTOALL_OVERLAP="
                             f"{recorded}, the job has {current}: they must match")
        return f"dist-checkpoint {path} (converted with USE_ALLTOALL_OVERLAP={recorded})"
    return f"dist-checkpoint {path}"


def check_model(cfg: DictConfig) -> ModelReport:
    """The model folder and the weights each role would load."""
    value = get(cfg, "actor_rollout_ref.model.path")
    if not value:
        raise CheckError("model: actor_rollout_ref.model.path is not set")
    path = Path(os.path.expanduser(str(value)))
    config_json = path / "config.json"
    if not config_json.is_file():
        raise CheckError(f"model: {config_json} not found (actor_rollout_ref.model.path)")
    try:
        config = json.loads(config_json.read_text())
    except ValueError as e:
        raise CheckError(f"model: {config_json} is not JSON: {e}") from None
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise CheckError(f"model: {path} has no tokenizer ({', '.join(TOKENIZER_FILES)})")
    roles = _roles(cfg)
    actor, ref = (get(cfg, f"actor_rollout_ref.{r}.load_weight", True) for r in ("actor", "ref"))
    if "ref" in roles and ref and not actor:
        raise CheckError("model: actor_rollout_ref.actor.load_weight=False with ref.load_weight"
                         "=True: verl's reference worker asserts they are equal (set both)")
    loads = []
    for role in roles:
        if not get(cfg, f"actor_rollout_ref.{role}.load_weight", True):
            loads.append(f"{role}: random init (load_weight=False)")
        elif get(cfg, f"actor_rollout_ref.{role}.megatron.use_dist_checkpointing", False):
            loads.append(f"{role}: {_dist_checkpoint(cfg, role)}")
        else:
            loads.append(f"{role}: {_hf_weights(path)}")
    return ModelReport(str(value), config, loads)


# ------------------------------------------------------------------ reward


def default_scorer_rules(root: Path) -> tuple[set[str], tuple[str, ...]] | None:
    """The data_source values verl's ``default_compute_score`` has a rule for, read from
    the working directory's verl; None when its shape is not recognised."""
    path = root / "verl" / "utils" / "reward_score" / "__init__.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
               and n.name == "default_compute_score"), None)
    if fn is None:
        return None
    exact: set[str] = set()
    prefixes: list[str] = []

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return [e.value for e in node.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return []

    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) \
                and node.left.id == "data_source":
            for op, comp in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.Eq | ast.In):
                    exact.update(strings(comp))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "startswith" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "data_source":
            for arg in node.args:
                prefixes += strings(arg)
    return (exact, tuple(prefixes)) if exact or prefixes else None


def load_reward(path: str, name: str) -> Callable[..., Any]:
    """The custom reward function, imported as verl 0.6.0's get_custom_reward_fn does."""
    if not os.path.exists(path):
        raise CheckError(f"reward: custom_reward_function.path {path} not found")
    spec = importlib.util.spec_from_file_location("custom_module", path)
    if spec is None or spec.loader is None:
        raise CheckError(f"reward: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # verl wraps any import error the same way
        raise CheckError(f"reward: error loading {path}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise CheckError(f"reward: {path} has no function {name!r} "
                         "(custom_reward_function.name)")
    return fn


def check_reward(cfg: DictConfig, data: DataReport, root: Path) -> str:
    """Score one training row with the custom reward, or check the default scorer."""
    source_key = get(cfg, "data.reward_fn_key", "data_source")
    path = get(cfg, "custom_reward_function.path")
    if not path:
        if get(cfg, "reward_model.enable", False):
            return "reward: a reward model (reward_model.enable=True), not checked"
        rules = default_scorer_rules(root)
        if rules is None:
            return "reward: verl's default scorer (its rules could not be read: not checked)"
        exact, prefixes = rules
        unknown = sorted(s for s in data.data_sources
                         if s not in exact and not s.startswith(prefixes))
        if unknown:
            raise CheckError(
                f"reward: verl's default scorer has no rule for data_source "
                f"{', '.join(map(repr, unknown))} (verl/utils/reward_score/__init__.py "
                "would raise NotImplementedError at the first step): set "
                "custom_reward_function.path and .name")
        return (f"reward: verl's default scorer, which has rules for data_source "
                f"{', '.join(sorted(data.data_sources))}")
    name = get(cfg, "custom_reward_function.name") or "compute_score"
    kwargs = get(cfg, "custom_reward_function.reward_kwargs") or {}
    fn = load_reward(str(path), str(name))
    row = data.first_row
    truth = (row.get("reward_model") or {}).get("ground_truth")
    answer = f"STAND-IN response, not a model's. The answer is \\boxed{{{truth}}}."
    try:
        score = fn(data_source=row.get(source_key), solution_str=answer, ground_truth=truth,
                   extra_info=row.get("extra_info"), **dict(kwargs))
    except Exception as e:
        raise CheckError(f"reward: {name} from {path} raised on training row 0: "
                         f"{type(e).__name__}: {e}") from None
    if isinstance(score, dict):
        score = score.get("score")
    if not isinstance(score, int | float):  # bool too, as verl's default scorer allows
        raise CheckError(f"reward: {name} from {path} returned {score!r}, verl wants a number "
                         "or a dict with 'score'")
    return (f"reward: {name} from {path} scored {score} on training row 0 (data_source "
            f"{row.get(source_key)!r}, a STAND-IN answer \\boxed{{{truth}}})")


# ------------------------------------------------------------------ cluster


@dataclass
class ClusterReport:
    reports: list[dict[str, Any]]
    job_env: dict[str, str]


def probe(bundle: int, keys: Sequence[str]) -> dict[str, Any]:
    """Runs in a Ray task on one node: what that node gives a worker. Self-contained (it
    is shipped to the node by value)."""
    import os
    import re
    import socket

    import ray

    ctx = ray.get_runtime_context()
    try:
        ids = [str(i) for i in ctx.get_accelerator_ids().get("NPU", [])]
    except Exception:  # older Ray: no accelerator ids for NPU
        ids = []
    devices = sorted(int(m.group(1)) for name in os.listdir("/dev")
                     if (m := re.fullmatch(r"davinci(\d+)", name)))
    return {
        "bundle": bundle,
        "ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
        "node_id": ctx.get_node_id(),
        "npu_ids": ids,
        "devices": devices,
        "management": [d for d in ("davinci_manager", "devmm_svm", "hisi_hdc")
                       if os.path.exists(f"/dev/{d}")],
        "env": {k: os.environ.get(k) for k in keys},
    }


def _wait(ray: Any, ref: Any, deadline: float) -> bool:
    """Wait in short slices so a SIGTERM is acted on between them."""
    while True:
        _check_sigterm()
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _ = ray.wait([ref], timeout=min(1.0, left))
        if ready:
            return True


def cluster_check(nnodes: int, npus_per_node: int, timeout: float,
                  keys: Sequence[str]) -> ClusterReport:
    """Reserve the job's NPUs (one bundle per node) and probe every node (needs Ray)."""
    try:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    except ImportError as e:
        raise CheckError(f"cluster: Ray is not importable here ({e}); the stand-in runs "
                         "as a Ray job in the a3rl-train container") from None
    ray.init(address="auto")
    _catch_sigterm()  # ray.init put its own handler (sys.exit) in place of ours
    runtime_env = ray.get_runtime_context().runtime_env or {}
    job_env = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
    deadline = time.monotonic() + timeout
    pg = placement_group([{"NPU": float(npus_per_node)}] * nnodes, strategy="STRICT_SPREAD",
                         name="a3rl-standin-trainer")
    if not _wait(ray, pg.ready(), deadline):
        remove_placement_group(pg)
        alive = [n for n in ray.nodes() if n.get("Alive")]
        per_node = ", ".join(f"{n.get('NodeManagerAddress')}: "
                             f"{int(n.get('Resources', {}).get('NPU', 0))}"
                             for n in alive)
        raise CheckError(
            f"cluster: no {nnodes} nodes with {npus_per_node} free NPUs each within "
            f"{timeout:.0f} s (trainer.nnodes x trainer.n_gpus_per_node); the cluster has "
            f"{len(alive)} node(s) alive, NPUs per node: {per_node or 'none'}")
    remote = ray.remote(probe)
    wanted = sorted(set(keys) | set(job_env))
    refs = [remote.options(num_cpus=0, resources={"NPU": float(npus_per_node)},
                           scheduling_strategy=PlacementGroupSchedulingStrategy(
                               pg, placement_group_bundle_index=i)).remote(i, wanted)
            for i in range(nnodes)]
    for ref in refs:
        if not _wait(ray, ref, deadline):
            raise CheckError(f"cluster: the node probes did not finish within {timeout:.0f} s")
    return ClusterReport(ray.get(refs), job_env)


def _ranges(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    for n in sorted(numbers):
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == n - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        elif out and "-" not in out[-1] and int(out[-1]) == n - 1:
            out[-1] = f"{out[-1]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out) or "none"


def compared(key: str, value: str) -> bool:
    """Whether a worker must see the job's value as is: not for what Ray sets per worker
    (its own RAY_*, PYTHONPATH, the *_VISIBLE_DEVICES of the accelerators it assigns) nor
    for values with ${VAR} references, which Ray expands."""
    return not (key.startswith("RAY_") or key == "PYTHONPATH"
                or key.endswith("_VISIBLE_DEVICES") or "${" in value)


def verify_cluster(report: ClusterReport, nnodes: int,
                   npus_per_node: int) -> tuple[list[str], list[str]]:
    """(one line per node, problems) from the probes' reports."""
    lines, problems = [], []
    job_env = {k: v for k, v in report.job_env.items() if compared(k, v)}
    nodes = {r["node_id"] for r in report.reports}
    if len(report.reports) != nnodes or len(nodes) != nnodes:
        problems.append(f"{nnodes} nodes wanted, the probes ran on {len(nodes)}")
    for r in sorted(report.reports, key=lambda r: r["bundle"]):
        where = f"{r['hostname']} ({r['ip']})"
        ids = [int(i) for i in r["npu_ids"]]
        if not r["devices"]:
            problems.append(f"{where} sees no /dev/davinci* device")
        if ids and len(ids) != npus_per_node:
            problems.append(f"{where}: Ray gave {len(ids)} NPU ids, {npus_per_node} wanted")
        missing = [i for i in ids if i not in r["devices"]]
        if missing:
            problems.append(f"{where}: Ray gave NPU id(s) {_ranges(missing)} but "
                            f"/dev/davinci{missing[0]} ... is missing")
        wrong = sorted(k for k, v in job_env.items() if r["env"].get(k) != v)
        for k in wrong:
            problems.append(f"{where}: the job's {k}={job_env[k]!r} did not reach it "
                            f"(it has {r['env'].get(k)!r})")
        shown = " ".join(f"{k}={r['env'][k]}" for k in ENV_SHOWN if r["env"].get(k) is not None)
        seen = f"/dev/davinci{_ranges(r['devices'])}" if r["devices"] else "no /dev/davinci*"
        lines.append(
            f"node {r['bundle'] + 1}/{nnodes}: {where} NPU ids {_ranges(ids)} -> "
            f"{seen} ({len(r['devices'])} devices, management: "
            f"{', '.join(r['management']) or 'none'}); job env "
            f"{len(job_env) - len(wrong)}/{len(job_env)} as submitted; {shown}")
    return lines, problems


# ------------------------------------------------------------------ rollout


def check_rollout_build(search: Sequence[str | Path] | None = None) -> str:
    """vllm_ascend as ``python3 -m`` from the working directory imports it (``search``:
    sys.path, the working directory first), with its build products; CheckError when
    the first rollout would fail for the lack of them."""
    roots = [Path.cwd(), *(p for p in sys.path if p)] if search is None else search
    package = next((Path(r) / "vllm_ascend" for r in roots
                    if (Path(r) / "vllm_ascend" / "__init__.py").is_file()), None)
    if package is None:
        raise CheckError(f"rollout: no vllm_ascend under {Path.cwd()} (or sys.path): run the "
                         "job from the recipe working directory, where build_project.sh put it")
    extension = sorted(package.glob(VLLM_ASCEND_EXTENSION))
    lacks = ([] if extension else [f"compiled extension ({VLLM_ASCEND_EXTENSION})"]) + (
        [] if (package / VLLM_ASCEND_CUSTOM_OPS).is_dir() else [VLLM_ASCEND_CUSTOM_OPS])
    if lacks:
        raise CheckError(
            f"rollout: {package} has no {' and no '.join(lacks)}: it is not the training "
            "image's built vLLM-Ascend (a copy of its git sources?), and the job imports it "
            "before the image's. vLLM-Ascend's custom ops are off and sleep mode fails at "
            "the first rollout. Fix: stage the working directory from the training image's "
            "/workspace (frameworks role, frameworks_trees: image), as build_project.sh does")
    return (f"rollout: vllm_ascend from {package}: {extension[0].name}, "
            f"{VLLM_ASCEND_CUSTOM_OPS}/ present (the image's built tree)")


# ------------------------------------------------------------------ metrics


def total_steps(cfg: DictConfig) -> int:
    """trainer.total_training_steps (DEFAULT_STEPS when unset), at most MAX_STEPS; verl
    runs one step even when it is below 1."""
    value = get(cfg, "trainer.total_training_steps")
    if value is None:
        return DEFAULT_STEPS
    return max(1, min(int(value), MAX_STEPS))


def seed_of(cfg: DictConfig, module: str) -> str:
    """The same config gives the same numbers."""
    text = module + "\n" + OmegaConf.to_yaml(cfg, resolve=True, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def step_metrics(cfg: DictConfig, algo: str, step: int, steps: int,
                 seed: str) -> dict[str, int | float]:
    """One step's SYNTHETIC metrics under verl 0.6.0's keys, in the order its trainer
    fills them (old log-prob entropy, actor update, data, timing, throughput)."""
    rng = random.Random(f"{seed}:{step}")
    n = int(get(cfg, "actor_rollout_ref.rollout.n", 1) or 1)
    batch = int(get(cfg, "data.train_batch_size", 1) or 1)
    gen_batch = int(get(cfg, "data.gen_batch_size") or batch)
    prompt_max = int(get(cfg, "data.max_prompt_length", 512) or 512)
    response_max = int(get(cfg, "data.max_response_length", 512) or 512)
    gpus = int(get(cfg, "trainer.nnodes", 1)) * int(get(cfg, "trainer.n_gpus_per_node", 1))
    progress = step / max(steps, 1)
    gen_batches = 1
    if algo == "main_dapo" and get(cfg, "algorithm.filter_groups.enable", False):
        cap = int(get(cfg, "algorithm.filter_groups.max_num_gen_batches", 0) or 0)
        gen_batches = 2 if step == 1 else rng.choice((1, 2))
        gen_batches = min(gen_batches, cap) if cap > 0 else gen_batches

    response_mean = response_max * (0.40 + 0.10 * progress + rng.uniform(-0.03, 0.03))
    prompt_mean = min(prompt_max, 180 + rng.uniform(-20.0, 20.0))
    sequences = batch * n
    response_tokens = sequences * response_mean
    tokens = int(sequences * (prompt_mean + response_mean))
    # About the recipe's published 120 tokens/s per card for its 235B GRPO run.
    base = tokens / (120.0 * rng.uniform(0.92, 1.08) * gpus)
    gen = base * 0.6 * gen_batches * gen_batch / batch
    timing = {"gen": gen, "generate_sequences": gen * 0.97, "reward": base * 0.002,
              "old_log_prob": base * 0.08}
    if "ref" in _roles(cfg):
        timing["ref"] = base * 0.07
    timing |= {"adv": base * 0.001, "update_actor": base * 0.22}
    timing["step"] = sum(timing.values()) - timing["generate_sequences"] + base * 0.01
    score = min(1.0, max(0.0, 0.28 + 0.25 * progress + rng.uniform(-0.03, 0.03)))
    adv = rng.uniform(2.5, 3.8)

    m: dict[str, int | float] = {"actor/entropy": round(0.45 - 0.1 * progress
                                                        + rng.uniform(-0.02, 0.02), 4)}
    m |= {"actor/pg_loss": round(rng.uniform(-0.02, 0.02), 5),
          "actor/pg_clipfrac": round(rng.uniform(0.001, 0.004), 5),
          "actor/ppo_kl": round(rng.uniform(-1e-4, 1e-4), 7),
          "actor/pg_clipfrac_lower": round(rng.uniform(0.0, 1e-4), 7)}
    if get(cfg, "actor_rollout_ref.actor.use_kl_loss", False):
        m |= {"actor/kl_loss": round(0.0004 * step + rng.uniform(0, 1e-4), 6),
              "actor/kl_coef": get(cfg, "actor_rollout_ref.actor.kl_loss_coef", 0.001)}
    m |= {"actor/grad_norm": round(rng.uniform(0.1, 0.3), 4),
          "actor/lr": get(cfg, "actor_rollout_ref.actor.optim.lr", 1e-6),
          "training/global_step": step, "training/epoch": 0}
    for name in ("score", "rewards"):
        m |= {f"critic/{name}/mean": round(score, 4), f"critic/{name}/max": 1.0,
              f"critic/{name}/min": 0.0}
    for name in ("advantages", "returns"):
        m |= {f"critic/{name}/mean": round(rng.uniform(-1e-3, 1e-3), 6),
              f"critic/{name}/max": round(adv, 4), f"critic/{name}/min": round(-adv, 4)}
    clip, shortest = round(rng.uniform(0.01, 0.05), 4), rng.randint(40, 400)
    for name in ("response_length", "response_length_non_aborted"):  # nothing aborts here
        m |= {f"{name}/mean": round(response_mean, 2), f"{name}/max": response_max,
              f"{name}/min": shortest, f"{name}/clip_ratio": clip}
    m["response/aborted_ratio"] = 0.0
    m |= {"prompt_length/mean": round(prompt_mean, 2),
          "prompt_length/max": min(prompt_max, rng.randint(400, 900)),
          "prompt_length/min": rng.randint(30, 60), "prompt_length/clip_ratio": 0.0}
    m |= {f"timing_s/{k}": round(v, 3) for k, v in timing.items()}
    m |= {"timing_per_token_ms/gen": round(gen * 1000 / response_tokens, 5),
          "timing_per_token_ms/update_actor": round(timing["update_actor"] * 1000 / tokens, 5)}
    m |= {"perf/total_num_tokens": tokens, "perf/time_per_step": round(timing["step"], 3),
          "perf/throughput": round(tokens / (timing["step"] * gpus), 3),
          "perf/max_memory_allocated_gb": round(rng.uniform(40, 50), 3),
          "perf/max_memory_reserved_gb": round(rng.uniform(55, 60), 3),
          "perf/cpu_memory_used_gb": round(rng.uniform(300, 400), 3)}
    if algo == "main_dapo":
        m["train/num_gen_batches"] = gen_batches
    m[SIMULATED_KEY] = 1
    return m


def console_line(step: int, metrics: dict[str, Any]) -> str:
    """verl 0.6.0's console line (aggregate_logger.concat_dict_to_str)."""
    return " - ".join([f"step:{step}"] + [f"{k}:{pprint.pformat(v)}" for k, v in metrics.items()])


# ------------------------------------------------------------------ main


def _summary(cfg: DictConfig, name: str, overrides: int) -> str:
    actor = "actor_rollout_ref.actor.megatron"
    parallel = "/".join(str(get(cfg, f"{actor}.{k}", "-")) for k in (
        "tensor_model_parallel_size", "pipeline_model_parallel_size",
        "context_parallel_size", "expert_model_parallel_size"))
    return (f"config: {name} with {overrides} override(s): {get(cfg, 'trainer.nnodes')} nodes x "
            f"{get(cfg, 'trainer.n_gpus_per_node')} NPUs, adv_estimator "
            f"{get(cfg, 'algorithm.adv_estimator')}, batch {get(cfg, 'data.train_batch_size')} "
            f"prompts x n {get(cfg, 'actor_rollout_ref.rollout.n')}, prompt "
            f"{get(cfg, 'data.max_prompt_length')} + response "
            f"{get(cfg, 'data.max_response_length')} tokens, actor TP/PP/CP/EP {parallel}, "
            f"rollout TP {get(cfg, 'actor_rollout_ref.rollout.tensor_model_parallel_size')}")


class _Sigterm:
    """SIGTERM raises Stopped at once, except inside Ray's calls: Ray runs Python's signal
    handlers from its C++ wait loops and turns any exception but its own into SystemError,
    so there it is only noted, and acted on at the next check (within a second)."""

    seen = False
    deferred = False


def _on_sigterm(signum: int, frame: Any) -> None:
    _Sigterm.seen = True
    if not _Sigterm.deferred:
        raise Stopped()


def _check_sigterm() -> None:
    if _Sigterm.seen:
        raise Stopped()


def _catch_sigterm() -> Any:
    """Route SIGTERM to Stopped; return the handler it replaces."""
    return signal.signal(signal.SIGTERM, _on_sigterm)


def run(argv: Sequence[str], cluster: Callable[..., ClusterReport] = cluster_check) -> int:
    """The whole stand-in; ``cluster`` is the Ray part (tests pass a fake)."""
    args = parse_args(argv)
    _Sigterm.seen = _Sigterm.deferred = False
    previous = _catch_sigterm()
    done = 0
    try:
        say(f"{NAME} (a3rl simulator) for {args.module}: verl's checks and logging, no NPU "
            f"math; every metric it prints is SYNTHETIC and marked {SIMULATED_KEY}:1")
        algo = entrypoint(args.module)
        path = module_file(args.module)
        directory = config_dir(args.config_path, path)
        name = args.config_name or ENTRYPOINTS[algo]
        try:
            cfg = compose(directory, name, args.overrides)
        except Exception as e:
            from hydra.errors import HydraException
            from omegaconf.errors import OmegaConfBaseException

            if not isinstance(e, HydraException | OmegaConfBaseException):
                raise
            print(hydra_error(e), file=sys.stderr, flush=True)
            print(f"{NAME}: FAILED: Hydra could not compose {name} from {directory}",
                  file=sys.stderr, flush=True)
            return 1
        say(_summary(cfg, name, len(args.overrides)))
        data = check_data(cfg)
        for split, files in data.files.items():
            for file, rows in files:
                say(f"data: {split} {file}: {rows} rows")
        for note in data.notes:
            say(f"data: note: {note}")
        model = check_model(cfg)
        say(f"model: {model.path}: {model.config.get('model_type')} "
            f"{','.join(model.config.get('architectures') or [])}, "
            f"num_hidden_layers {model.config.get('num_hidden_layers')}; "
            + "; ".join(model.loads))
        say(check_reward(cfg, data, package_root(args.module, path)))
        nnodes = int(get(cfg, "trainer.nnodes", 1))
        per_node = int(get(cfg, "trainer.n_gpus_per_node", 1))
        if nnodes < 1 or per_node < 1:
            raise CheckError(f"cluster: trainer.nnodes={nnodes} x trainer.n_gpus_per_node="
                             f"{per_node}: nothing to run on")
        timeout = float(os.environ.get("A3RL_STANDIN_RAY_TIMEOUT", DEFAULT_RAY_TIMEOUT))
        say(f"cluster: reserving {nnodes} x {per_node} NPUs (one bundle per node, "
            f"STRICT_SPREAD), waiting up to {timeout:.0f} s")
        _Sigterm.deferred = True
        try:
            report = cluster(nnodes, per_node, timeout, ENV_SHOWN)
        finally:
            _Sigterm.deferred = False
        _check_sigterm()
        lines, problems = verify_cluster(report, nnodes, per_node)
        for line in lines:
            say(f"cluster: {line}")
        if problems:
            raise CheckError("cluster: " + "; ".join(problems))
        say(check_rollout_build())
        steps = total_steps(cfg)
        pause = float(os.environ.get("A3RL_STANDIN_STEP_SECONDS", DEFAULT_STEP_SECONDS))
        seed = seed_of(cfg, args.module)
        say(f"Total training steps: {steps}")
        for step in range(1, steps + 1):
            time.sleep(pause)
            line = console_line(step, step_metrics(cfg, algo, step, steps, seed))
            done = step
            say(line)
        say(f"{NAME}: done, {steps} SYNTHETIC step(s); nothing was trained")
        return 0
    except CheckError as e:
        print(f"{NAME}: FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    except Stopped:
        print(f"{NAME}: SIGTERM (ray job stop) after {done} step(s): stopping",
              file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
