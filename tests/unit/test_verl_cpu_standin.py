"""The simulator's CPU stand-in layer for real verl (files/verl-cpu-standin): it changes
verl's CUDA/NPU-only functions as they are imported, and only where no accelerator exists.

Runs without torch or verl: a fake ``torch`` (its ``cuda.is_available()`` decides) and
fake verl modules with the functions the layer changes, imported through the layer's
import hook as the job's processes import the real ones."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

LAYER = Path(__file__).resolve().parents[2] / "tools/a3rl/sim/files/verl-cpu-standin"
FAKE_VERL = {
    "verl/__init__.py": "",
    "verl/utils/__init__.py": "",
    "verl/utils/device.py": "def get_nccl_backend():\n"
                            "    raise RuntimeError('No available nccl backend found')\n",
    "verl/utils/profiler/__init__.py": "",
    "verl/utils/profiler/performance.py": "def topk_reduce_ratio_min_max(t, k=10):\n"
                                          "    return 'verl'\n",
    "verl/workers/__init__.py": "",
    "verl/workers/rollout/__init__.py": "",
    "verl/workers/rollout/base.py": "_ROLLOUT_REGISTRY = {('vllm', 'sync'): 'v'}\n",
    "verl/workers/fsdp_workers.py": "from verl.utils.device import get_nccl_backend\n"
                                    "from verl.utils.profiler.performance import "
                                    "topk_reduce_ratio_min_max\n"
                                    "class CPUOffloadPolicy:\n"
                                    "    def __init__(self, pin_memory=True):\n"
                                    "        self.pin_memory = pin_memory\n",
}


def _fake_torch(cuda: bool) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda)
    torch.cpu = types.SimpleNamespace()
    torch.get_rng_state = lambda: "rng"
    dist = types.ModuleType("torch.distributed")
    dist.init_process_group = lambda **kw: kw
    torch.distributed = dist
    return torch


@pytest.fixture
def layer(tmp_path, monkeypatch):
    for rel, text in FAKE_VERL.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(LAYER))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in [m for m in sys.modules if m == "verl" or m.startswith(("verl.", "a3rl_verl"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delenv("A3RL_VERL_CPU_STANDIN", raising=False)

    def load(cuda: bool):
        monkeypatch.setitem(sys.modules, "torch", _fake_torch(cuda))
        monkeypatch.setitem(sys.modules, "torch.distributed", sys.modules["torch"].distributed)
        standin = importlib.import_module("a3rl_verl_cpu_standin")
        standin.install()
        workers = importlib.import_module("verl.workers.fsdp_workers")
        return standin, workers

    yield load
    for name in [m for m in sys.modules if m == "verl" or m.startswith(("verl.", "a3rl_verl"))]:
        del sys.modules[name]


def test_without_an_accelerator_every_blocker_is_changed_as_verl_imports_it(layer) -> None:
    standin, workers = layer(cuda=False)
    import torch
    from verl.utils import device
    from verl.workers.rollout import base

    assert device.get_nccl_backend() == "gloo" and workers.get_nccl_backend() == "gloo"
    assert torch.distributed.init_process_group(backend="cpu:gloo,cpu:gloo") == {
        "backend": "cpu:gloo"}
    assert base._ROLLOUT_REGISTRY[("hf", "sync")] == (
        "a3rl_verl_cpu_standin.hf_rollout.StandinHFRollout")
    assert workers.CPUOffloadPolicy(pin_memory=True).pin_memory is False
    assert workers.topk_reduce_ratio_min_max is standin.topk_reduce_ratio_min_max
    assert torch.cpu.get_rng_state() == "rng" and torch.cpu.memory_reserved() == 0
    assert sorted(standin.APPLIED) == ["verl.utils.device", "verl.utils.profiler.performance",
                                       "verl.workers.fsdp_workers", "verl.workers.rollout.base"]


def test_with_a_cuda_device_nothing_is_changed(layer) -> None:
    standin, workers = layer(cuda=True)
    import torch
    from verl.utils import device
    from verl.workers.rollout import base

    with pytest.raises(RuntimeError, match="No available nccl backend"):
        device.get_nccl_backend()
    assert ("hf", "sync") not in base._ROLLOUT_REGISTRY
    assert workers.CPUOffloadPolicy(pin_memory=True).pin_memory is True
    assert workers.topk_reduce_ratio_min_max(1.0) == "verl"
    assert not hasattr(torch.cpu, "get_rng_state")
    assert torch.distributed.init_process_group(backend="a,a") == {"backend": "a,a"}
    assert standin.APPLIED == []


def test_with_torch_npu_installed_nothing_is_changed(layer, tmp_path, monkeypatch) -> None:
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("")
    standin, workers = layer(cuda=False)
    from verl.utils import device

    with pytest.raises(RuntimeError):
        device.get_nccl_backend()
    assert standin.APPLIED == []


def test_it_can_be_switched_off(layer, monkeypatch) -> None:
    monkeypatch.setenv("A3RL_VERL_CPU_STANDIN", "0")
    standin, workers = layer(cuda=False)
    assert workers.CPUOffloadPolicy().pin_memory is True and standin.APPLIED == []
