"""a3rl: Ansible automation for Qwen3 RL on Atlas A3 clusters, and its simulated cluster."""

__version__ = "0.1.0"
