# STAND-IN made by a3rl's simulator for vllm v0.14.1: package root
__version__ = "0.14.1"
