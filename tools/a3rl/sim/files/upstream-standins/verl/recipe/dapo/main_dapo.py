# STAND-IN made by a3rl's simulator for verl v0.6.0's recipe/dapo/main_dapo.py
# (the PyPI sdist has no recipe/). The recipe copies it to verl/trainer/.
"""Entry point of the DAPO trainer (stand-in: composes the config, trains nothing)."""

import hydra


@hydra.main(config_path="config", config_name="dapo_megatron_trainer", version_base=None)
def main(config):
    from verl.trainer.dapo_ray_trainer import RayDAPOTrainer

    RayDAPOTrainer(config).fit()


if __name__ == "__main__":
    main()
