# STAND-IN made by a3rl's simulator for MindSpeed: op builders
from mindspeed.op_builder.builder import MindSpeedOpBuilder  # noqa: F401
