# STAND-IN made by a3rl's simulator for MindSpeed: patches Megatron for NPUs
"""Imported for its side effect: adapts Megatron-LM to Ascend NPUs."""
