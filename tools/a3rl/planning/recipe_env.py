"""Values of the recipe's per-node env scripts that are derived, never typed by hand.

The recipe's model env scripts carry numbers a person works out for each run (the
speculative-decoding batch threshold) and the HCCL port range
must be reserved on every node. These functions compute them from the inventory and
the model profile (``group_vars/all/models.yml``); the ``recipe_env`` role renders them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class RecipeEnvError(ValueError):
    """A combination of inputs the recipe cannot run with; the message says the fix."""


def model_env(model: Mapping[str, Any], nodes: int, npus_per_node: int,
              random_weights: bool = False,
              features: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The model env script's variables for ``nodes`` x ``npus_per_node`` NPUs.

    ``model`` is a profile: ``name``, ``infer_tp``, ``max_num_seqs`` and its feature
    switches (``features``, env name -> value). ``features`` here overrides switches; an
    unknown name is refused, so a typo does not silently do nothing.
    """
    name = model.get("name", "model")
    for what, value in (("nodes", nodes), ("npus_per_node", npus_per_node)):
        if isinstance(value, bool) or not (isinstance(value, int) or (
                isinstance(value, str) and value.strip().isascii() and value.strip().isdigit())) \
                or int(value) <= 0:
            raise RecipeEnvError(
                f"{name}: the model env needs a positive whole number of {what}, not {value!r} "
                f"(an empty 'a3_nodes' group, or npus_per_node unset). Fix: list the nodes "
                "under a3_nodes and set npus_per_node (16 on Atlas A3) in the inventory."
            )
    nodes, npus_per_node = int(nodes), int(npus_per_node)
    infer_tp = int(model["infer_tp"])
    max_num_seqs = int(model["max_num_seqs"])
    npus = nodes * npus_per_node
    if infer_tp <= 0 or npus % infer_tp:
        raise RecipeEnvError(
            f"{name}: {npus} NPUs ({nodes} nodes x {npus_per_node}) do not divide into "
            f"rollout instances of tensor-parallel size {infer_tp}. Fix: use a node count "
            f"whose NPU total is a multiple of {infer_tp}, or change the model's infer_tp."
        )
    switches = {str(k): _env_value(v) for k, v in dict(model.get("features") or {}).items()}
    optional = {str(k): _env_value(v)
                for k, v in dict(model.get("optional_features") or {}).items()}
    for key, value in dict(features or {}).items():
        if key not in switches and key not in optional:
            known = ", ".join(sorted([*switches, *optional]))
            raise RecipeEnvError(
                f"{name}: unknown feature switch {key!r}. Fix: use one of {known}."
            )
        switches[str(key)] = _env_value(value)
    env = dict(switches)
    # No VLLM_DP_SIZE: the recipe's pin removed it from qwen3_235b_env.sh, and a value
    # above 1 sends verl's patched rollout down the r1_ascend parallel-state path the
    # recipe no longer uses (real-upstreams.md, "Environment the recipe sets").
    # Speculative decoding engages below this batch size; the recipe turns it off (-1)
    # for random weights, whose drafts would never be accepted.
    env["VLLM_SPECULATIVE_BATCH_SIZE_THRE"] = "-1" if random_weights else str(max_num_seqs // 4)
    return env


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _ranges(spec: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for part in str(spec or "").replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if not (0 < a <= b <= 65535):
            raise RecipeEnvError(f"port range {part!r} is not within 1-65535")
        out.append((a, b))
    return out


def reserved_ports(current: str, wanted: str) -> str:
    """``net.ipv4.ip_local_reserved_ports`` holding both what is reserved now and
    ``wanted``, in the kernel's own canonical form (sorted, merged, ``a-b`` ranges).

    A site may reserve ports for its own services; ours are added, never theirs dropped.
    """
    merged: list[list[int]] = []
    for a, b in sorted(_ranges(current) + _ranges(wanted)):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in merged)


def port_range(base: int, count: int) -> str:
    """The ``base-end`` range of ``count`` ports starting at ``base``."""
    base, count = int(base), int(count)
    if count < 1 or base < 1024 or base + count - 1 > 65535:
        raise RecipeEnvError(f"HCCL ports {base}+{count} are outside 1024-65535")
    return f"{base}-{base + count - 1}"
