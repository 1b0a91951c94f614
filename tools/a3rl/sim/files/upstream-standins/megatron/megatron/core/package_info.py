# STAND-IN made by a3rl's simulator for Megatron-LM core_v0.12.1: version
MAJOR = 0
MINOR = 12
PATCH = 1
__version__ = f"{MAJOR}.{MINOR}.{PATCH}"
