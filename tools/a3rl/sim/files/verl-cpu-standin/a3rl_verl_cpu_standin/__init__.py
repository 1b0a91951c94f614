"""STAND-IN layer of the simulator: what real verl 0.6.0 needs to run GRPO on a CPU.

The simulated cluster has no CUDA or NPU device. verl 0.6.0 runs on CPU with
``trainer.device=cpu`` except at six places, found by a feasibility run on this machine
kind (``shared/reference/verl-cpu.md``, "Blockers in stock verl 0.6.0 on CPU"); no
configuration or environment variable avoids them. This layer changes those functions in
memory, in every process of the job, right after the module that holds them is first
imported (an import hook: ``install``), and edits no installed file:

==========================================  ==========================================
where verl 0.6.0 fails on CPU               what the layer does
==========================================  ==========================================
``verl.utils.device.get_nccl_backend``      answers ``gloo``; ``init_process_group``
(no nccl/hccl on device type cpu), then     gets ``cpu:gloo`` where verl names the cpu
"Duplicate device type cpu" in the          backend twice
backend string (``fsdp_workers.py:149``)
``verl.workers.rollout.base`` registry      registers ``("hf", "sync")``:
(vllm and sglang only; HFRollout has the    :class:`a3rl_verl_cpu_standin.hf_rollout.
old constructor)                            StandinHFRollout`
FSDP1 ``sync_module_states=True`` with CPU  torch's check that refuses CPU modules
modules (torch ``fsdp/_init_utils.py``)     is skipped (the broadcast itself runs
                                            over gloo)
FSDP2 pins the reference model's memory     ``CPUOffloadPolicy`` in verl's FSDP workers
(``fsdp_workers.py:498``); FSDP1's          never pins; FSDP1's ``CPUOffload`` never
``CPUOffload`` pins it too (torch           offloads (the parameters are on the CPU
``fsdp/_flat_param.py:1260``)               already)
``verl.utils.profiler.performance``         a min/max/top-k that all-gathers a
all-gathers a 0-d tensor (gloo refuses)     1-element tensor
``torch.cpu`` lacks ``get_rng_state``,      those functions, on ``torch.cpu``: the
``empty_cache``, ``memory_reserved``, ...   CPU generator's state, no-ops, zeros
==========================================  ==========================================

With a CUDA or NPU device (``torch.cuda.is_available()``, or ``torch_npu`` installed)
``install`` still registers the hook, but the hook changes nothing: ``active()`` is False
and every module is left exactly as imported. ``A3RL_VERL_CPU_STANDIN=0`` turns it off.
Each change prints one line on stderr (``a3rl verl CPU stand-in: ...``) so a job's log
shows that the layer acted. Standard library only at import; torch when a hook fires.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

NAME = "a3rl verl CPU stand-in"
APPLIED: list[str] = []


def say(text: str) -> None:
    print(f"{NAME}: {text}", file=sys.stderr, flush=True)


def active() -> bool:
    """True only where no accelerator exists: no CUDA device, no torch_npu."""
    if os.environ.get("A3RL_VERL_CPU_STANDIN", "1") == "0":
        return False
    import torch

    if torch.cuda.is_available():
        return False
    return importlib.util.find_spec("torch_npu") is None


# ------------------------------------------------------------------ the changes


def _device(module: ModuleType) -> None:
    module.get_nccl_backend = lambda: "gloo"
    _torch_cpu()
    _init_process_group()


def _init_process_group() -> None:
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_a3rl_standin", False):
        return

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend:
            parts = list(dict.fromkeys(p.strip() for p in backend.split(",")))
            kwargs["backend"] = ",".join(parts)
        return original(*args, **kwargs)

    init_process_group._a3rl_standin = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


def _torch_cpu() -> None:
    import torch

    cpu = torch.cpu

    def zero(*_a: Any, **_k: Any) -> int:
        return 0

    def nothing(*_a: Any, **_k: Any) -> None:
        return None

    def mem_get_info(*_a: Any, **_k: Any) -> tuple[int, int]:
        info = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
        return info.get("MemAvailable", 0), info.get("MemTotal", 0)

    wanted: dict[str, Callable[..., Any]] = {
        "get_rng_state": lambda *_a, **_k: torch.get_rng_state(),
        "set_rng_state": lambda state, *_a, **_k: torch.set_rng_state(state),
        "manual_seed": lambda seed: torch.manual_seed(seed),
        "empty_cache": nothing,
        "memory_allocated": zero, "memory_reserved": zero,
        "max_memory_allocated": zero, "max_memory_reserved": zero,
        "reset_peak_memory_stats": nothing, "set_per_process_memory_fraction": nothing,
        "mem_get_info": mem_get_info,
        "get_device_name": lambda *_a, **_k: "cpu",
    }
    for name, fn in wanted.items():
        if not hasattr(cpu, name):
            setattr(cpu, name, fn)


def _rollout_base(module: ModuleType) -> None:
    module._ROLLOUT_REGISTRY[("hf", "sync")] = (
        "a3rl_verl_cpu_standin.hf_rollout.StandinHFRollout")


def _fsdp_workers(module: ModuleType) -> None:
    original = module.CPUOffloadPolicy
    if original is None:
        return

    def unpinned(pin_memory: bool = True, **kwargs: Any) -> Any:
        return original(pin_memory=False, **kwargs)

    module.CPUOffloadPolicy = unpinned


def _fsdp_init_utils(module: ModuleType) -> None:
    module._check_module_states_for_sync_module_states = lambda *_a, **_k: None


def _fsdp(module: ModuleType) -> None:
    original = module.CPUOffload

    def not_offloaded(offload_params: bool = False) -> Any:
        return original(offload_params=False)

    module.CPUOffload = not_offloaded


def _performance(module: ModuleType) -> None:
    module.topk_reduce_ratio_min_max = topk_reduce_ratio_min_max


def topk_reduce_ratio_min_max(timing: float, k: int = 10) -> tuple[float, float, float]:
    """The share of ranks slower than the (100-k)th percentile, and the min and max of
    ``timing`` over all ranks; -1s without a process group. Gathers one-element tensors
    (gloo refuses the 0-d ones verl 0.6.0 gathers)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return -1.0, -1.0, -1.0
    mine = torch.full((1,), float(timing), dtype=torch.float32)
    everyone = [torch.empty(1, dtype=torch.float32) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    values = torch.cat(everyone)
    cut = torch.quantile(values, 1 - k / 100)
    return (float((values > cut).float().mean()), float(values.min()), float(values.max()))


# Module -> (what it fixes, the change). Applied right after the module is first executed.
PATCHES: dict[str, tuple[str, Callable[[ModuleType], None]]] = {
    "verl.utils.device": ("gloo backend, torch.cpu device functions", _device),
    "verl.workers.rollout.base": ("('hf', 'sync') rollout registered", _rollout_base),
    "verl.workers.fsdp_workers": ("FSDP2 CPU offload without pinned memory", _fsdp_workers),
    "torch.distributed.fsdp._init_utils": ("FSDP1 sync_module_states on CPU modules",
                                           _fsdp_init_utils),
    "verl.utils.profiler.performance": ("all-gather of 1-element timing tensors",
                                        _performance),
    "torch.distributed.fsdp": ("FSDP1 CPU offload off (it pins memory; parameters are on "
                               "the CPU already)", _fsdp),
}


# ------------------------------------------------------------------ the import hook


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        apply(self._name, module)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._inner, item)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None


def apply(name: str, module: ModuleType) -> bool:
    """Change ``module`` (just imported) if the layer is active; True if changed."""
    what, change = PATCHES[name]
    if not active():
        return False
    change(module)
    APPLIED.append(name)
    say(f"{name}: {what} (no CUDA/NPU device)")
    return True


def install() -> None:
    """Register the import hook (once); modules imported already are changed now."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
    for name in PATCHES:
        if name in sys.modules:
            apply(name, sys.modules[name])
