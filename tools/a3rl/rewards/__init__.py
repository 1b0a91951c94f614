"""Reward functions that verl imports inside the training container.

Each module here is self-contained (standard library only, no ``a3rl`` imports): the data
stage copies the file into the recipe's working directory, and verl loads it from there
by path (``custom_reward_function.path``), where ``a3rl`` is not installed.
"""
