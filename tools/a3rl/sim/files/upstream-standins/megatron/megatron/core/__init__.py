# STAND-IN made by a3rl's simulator for Megatron-LM core_v0.12.1: package root
from megatron.core.package_info import __version__  # noqa: F401
