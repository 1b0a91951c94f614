"""What a3rl treats as a secret, in one place: a variable whose name looks secret, and a
Hydra override whose key does (``+trainer.wandb_api_key=...``). The runner keeps such
values out of its records (:mod:`a3rl.controller.runner`); the plan keeps a secret override's value
off the job's command line (:mod:`a3rl.planning.plan`): the job reads it from an environment
variable (``${oc.env:A3RL_SECRET_...}``, resolved by OmegaConf where verl resolves its
config), which Ray's job records list masked (:mod:`a3rl.node.rayjobs`)."""

from __future__ import annotations

import re
from typing import Any

from a3rl.node.rayjobs import MASK, SECRET_ENV_PREFIX

__all__ = ["MASK", "SECRET_ENV_PREFIX", "SECRET_WORDS", "is_secret_name", "secret_override",
           "env_name", "job_secrets"]

SECRET_WORDS = ("password", "passwd", "secret", "token", "key")

# A Hydra override whose key's last part ends so carries a secret in its value. Stricter
# than SECRET_WORDS: a bare "token" or "key" inside a key is common in the recipe's plain
# overrides (``ppo_max_token_len_per_gpu``).
_SECRET_OVERRIDE = re.compile(
    r"^(?P<prefix>[+~]*)(?P<key>[\w.\-/]*?(password|passwd|secret|token|api_?key|access_?key"
    r"|private_?key|credentials?))=(?P<value>.*)$", re.IGNORECASE | re.DOTALL)


def is_secret_name(name: str) -> bool:
    return any(w in name.lower() for w in SECRET_WORDS)


def secret_override(item: Any) -> re.Match | None:
    """The match of a secret-looking ``key=value`` override (groups prefix, key, value)."""
    return _SECRET_OVERRIDE.match(item) if isinstance(item, str) else None


def env_name(key: str) -> str:
    """The environment variable that carries a secret override's value to the job."""
    return SECRET_ENV_PREFIX + re.sub(r"\W", "_", key).upper()


def job_secrets(overrides: Any) -> dict[str, str]:
    """The secret overrides' values by their environment variable (none: empty)."""
    found = {}
    for item in overrides if isinstance(overrides, list | tuple) else ():
        m = secret_override(item)
        if m and m.group("prefix") != "~":
            found[env_name(m.group("key"))] = m.group("value")
    return found
