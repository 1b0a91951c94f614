# STAND-IN made by a3rl's simulator for Megatron-LM core_v0.12.1: dist_checkpointing package
