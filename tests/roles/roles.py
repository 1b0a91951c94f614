"""Which play converges each role, and which stages must have run before it.

The role loop (tests/roles; docs/testing.md, "The role loop") converges a role's
prerequisites, then its own play. A role is reached through its stage playbook in
``playbooks/``: those plays are thin (hosts, a few play settings such as
``gather_subset`` or ``force_handlers``, the role), and a generated playbook would have
to copy those settings to behave the same.

``needs`` lists the stage playbooks that must have converged first, in site.yml's order.
Where a shorter list was run and passed on one simulated node it is given; every other
role keeps site.yml's whole prefix (safe, slower), marked "not trimmed".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoleLoop:
    play: str  # the role's stage playbook
    needs: tuple[str, ...]  # stage playbooks run before it (site.yml's order)
    trimmed: bool = False  # True: ``needs`` was cut below site.yml's prefix and run


# site.yml's stages, in its order.
SITE = ("playbooks/preflight.yml", "playbooks/npu_driver.yml", "playbooks/npu_network.yml",
        "playbooks/container_engine.yml", "playbooks/cann_image.yml",
        "playbooks/training_container.yml", "playbooks/frameworks.yml", "playbooks/data.yml",
        "playbooks/weights.yml", "playbooks/recipe_env.yml", "playbooks/ray.yml")


def _prefix(play: str) -> tuple[str, ...]:
    return SITE[:SITE.index(play)]


def _p(name: str) -> str:
    return f"playbooks/{name}.yml"


# The driver makes the NPU devices the container is given; the engine and the image come
# before the container. recipe_env checks its scripts inside the training container; Ray
# runs there and sources recipe_env's scripts.
_CONTAINER = (_p("preflight"), _p("npu_driver"), _p("container_engine"), _p("cann_image"),
              _p("training_container"))

ROLES: dict[str, RoleLoop] = {
    "preflight": RoleLoop(_p("preflight"), (), trimmed=True),
    "npu_driver": RoleLoop(_p("npu_driver"), _prefix(_p("npu_driver"))),
    "npu_network": RoleLoop(_p("npu_network"), _prefix(_p("npu_network"))),
    "container_engine": RoleLoop(_p("container_engine"), (_p("preflight"),), trimmed=True),
    "cann_image": RoleLoop(_p("cann_image"), _prefix(_p("cann_image"))),
    "training_container": RoleLoop(_p("training_container"), _prefix(_p("training_container"))),
    "frameworks": RoleLoop(_p("frameworks"), _prefix(_p("frameworks"))),
    "datasets": RoleLoop(_p("data"), _prefix(_p("data"))),
    "model_weights": RoleLoop(_p("weights"), _prefix(_p("weights"))),
    "recipe_env": RoleLoop(_p("recipe_env"), _CONTAINER, trimmed=True),
    "ray_cluster": RoleLoop(_p("ray"), (*_CONTAINER, _p("recipe_env")), trimmed=True),
}


def selected(value: str) -> list[str]:
    """The roles ``A3RL_ROLE`` names (comma-separated, or ``all``); an unknown name is
    refused with the list of known ones."""
    names = list(ROLES) if value.strip() == "all" else [
        v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in ROLES]
    if unknown:
        raise ValueError(f"A3RL_ROLE: no role loop for {', '.join(unknown)}; known: "
                         + ", ".join(ROLES) + " (tests/roles/roles.py)")
    return names
