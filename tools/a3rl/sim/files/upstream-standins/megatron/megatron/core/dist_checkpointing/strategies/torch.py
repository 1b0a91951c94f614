# STAND-IN made by a3rl's simulator for Megatron-LM core_v0.12.1: torch.distributed.checkpoint strategy
"""Strategies using PyTorch distributed.checkpoint as an underlying format."""


def _unwrap_pyt_sharded_tensor(sh_ten):
    """Unwrap tensors from a PyT ShardedTensor instance."""
    return [local_shard.tensor for local_shard in sh_ten.local_shards()]


def mcore_to_pyt_state_dict(state_dict, is_loading=False):
    """Convert a state dict with ShardedTensors to a PyTorch-compatible one."""
    for key, sh_ten in list(state_dict.items()):
        state_dict[key] = _unwrap_pyt_sharded_tensor(sh_ten)
    return state_dict
