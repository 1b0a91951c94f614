# STAND-IN made by a3rl's simulator for vllm v0.14.1: v1 engine
