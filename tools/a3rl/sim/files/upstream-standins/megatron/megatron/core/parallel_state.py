# STAND-IN made by a3rl's simulator for Megatron-LM core_v0.12.1: model and data parallel groups
"""Model and data parallel groups."""

_TENSOR_MODEL_PARALLEL_WORLD_SIZE = None
_PIPELINE_MODEL_PARALLEL_WORLD_SIZE = None


def get_tensor_model_parallel_world_size():
    """Return world size for the tensor-model-parallel group."""
    return _TENSOR_MODEL_PARALLEL_WORLD_SIZE or 1


def get_pipeline_model_parallel_world_size():
    """Return world size for the pipeline-model-parallel group."""
    return _PIPELINE_MODEL_PARALLEL_WORLD_SIZE or 1
