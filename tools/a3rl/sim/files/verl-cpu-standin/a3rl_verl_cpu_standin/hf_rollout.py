"""STAND-IN rollout for the simulator: verl's own HF generation loop behind verl 0.6.0's
rollout API, for CPU.

verl 0.6.0's rollout registry has vLLM and SGLang only, and its ``HFRollout`` still has
the old ``(module, config)`` constructor and lacks ``resume``, ``update_weights`` and
``release`` (``shared/reference/verl-cpu.md``). This class keeps ``HFRollout``'s
generation (``generate_sequences``, unchanged, verl's code) and supplies the rest: a plain
transformers model of the actor's architecture (``model_config.hf_config``), into which
the actor's current weights are loaded before each rollout (``update_weights``, called by
verl's ``rollout_mode``); ``resume``/``release`` have no device memory to manage.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout


class StandinHFRollout(HFRollout):
    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        BaseRollout.__init__(self, config, model_config, device_mesh)
        hf_config = model_config.hf_config
        # The actor's architecture, eager attention (no flash-attention on CPU), float32.
        with torch.device("cpu"):
            self.module = AutoModelForCausalLM.from_config(
                hf_config, torch_dtype=torch.float32, attn_implementation="eager")
        self.module.eval()
        self.loaded = 0

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Any, **kwargs: Any) -> None:
        """Load the actor's full weights (name, tensor) into the rollout model."""
        state = {}
        for name, tensor in weights:
            state[name] = tensor.detach().to("cpu", torch.float32)
        missing, unexpected = self.module.load_state_dict(state, strict=False)
        # Tied or buffer-only entries may be absent; a parameter the actor lacks is not.
        absent = [m for m in missing if not m.endswith("rotary_emb.inv_freq")]
        if absent or unexpected:
            raise RuntimeError(f"a3rl verl CPU stand-in rollout: actor weights do not fit "
                               f"the rollout model: missing {absent[:5]}, unexpected "
                               f"{unexpected[:5]}")
        self.loaded += 1
