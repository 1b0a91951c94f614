# STAND-IN made by a3rl's simulator for verl v0.6.0's recipe/dapo/dapo_ray_trainer.py
# (the PyPI sdist has no recipe/). The recipe copies it to verl/trainer/.
"""DAPO trainer (stand-in: the real one filters groups and regenerates batches)."""


class RayDAPOTrainer:
    def __init__(self, config):
        self.config = config

    def fit(self):
        raise NotImplementedError("stand-in: no training in the simulator's verl tree")
