"""Preflight's controller-side filters (the rules and their tests are in
``a3rl.planning.preflight``).

Kept apart from ``a3rl.py``: these read files and reach URLs on the controller, where
the other filters only compute.
"""

from __future__ import annotations

from a3rl import paths
from a3rl.planning import preflight


def input_problems(manifest, store, offline=False, fetch_on_controller=True, unused=()):
    """``a3rl.planning.preflight.artifact_input_problems``, hashing once per file version (the
    cache lives in the project's ``.cache``)."""
    try:
        cache = str(paths.cache_dir())
    except RuntimeError:
        cache = None
    return preflight.artifact_input_problems(manifest, store, offline=bool(offline),
                                             fetch_on_controller=bool(fetch_on_controller),
                                             cache_dir=cache, unused=list(unused or ()))


class FilterModule:
    def filters(self):
        return {
            "a3rl_input_problems": input_problems,
            "a3rl_registry_secret_problems": preflight.registry_secret_problems,
            "a3rl_ray_auth_problems": preflight.ray_auth_problems,
        }
