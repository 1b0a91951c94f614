"""The Ansible strategy a play runs under: Ansible's own ``linear`` (the default, and what
every play is written and tested for) or, opted in, Mitogen for Ansible's
``mitogen_linear``.

Mitogen keeps one Python interpreter per node for the whole run instead of starting one
per task, and sends each module once instead of building and copying it per task. On the
simulator a no-op ``site.yml`` takes about half as long with it (``bench/tuning.py``,
variant ``mitogen``; figures in ``bench/README.md``). It is an opt-in, not the default:

* ansible-core 2.19 deprecates third-party strategy plugins, with no replacement planned,
  and prints a deprecation warning on every run that uses one;
* the plays are written for ``linear``; Mitogen's is a reimplementation of how a task
  reaches a node, and a difference there would show on a real cluster first.

``A3RL_STRATEGY=mitogen`` (environment) turns it on for every play the ``a3rl`` command
runs. With plain ``ansible-playbook``, set the two variables :func:`env` returns.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT = "linear"
MITOGEN = "mitogen"
CHOICES = (DEFAULT, MITOGEN)
VARIABLE = "A3RL_STRATEGY"
# What env() may set: the run record's equivalent command shows them.
VARIABLES = ("ANSIBLE_STRATEGY", "ANSIBLE_STRATEGY_PLUGINS")


class StrategyError(RuntimeError):
    pass


def mitogen_plugins() -> Path:
    """The folder of Mitogen's strategy plugins in this Python's ``ansible_mitogen``."""
    try:
        import ansible_mitogen
    except ImportError as exc:
        raise StrategyError(
            f"{VARIABLE}=mitogen, but Mitogen for Ansible is not installed in this Python "
            f"({exc}). Fix: `make venv` installs the pinned mitogen, or unset {VARIABLE}."
        ) from exc
    folder = Path(ansible_mitogen.__file__).resolve().parent / "plugins" / "strategy"
    if not (folder / "mitogen_linear.py").is_file():
        raise StrategyError(f"no mitogen_linear strategy in {folder}: reinstall mitogen")
    return folder


def env(name: str | None = None) -> dict[str, str]:
    """The environment that makes ansible-playbook run under strategy ``name`` (default:
    ``$A3RL_STRATEGY``, else ``linear``, which needs nothing)."""
    name = (name if name is not None else os.environ.get(VARIABLE, "")).strip() or DEFAULT
    if name not in CHOICES:
        raise StrategyError(
            f"{VARIABLE}={name!r} is not a strategy a3rl offers. Fix: one of "
            + ", ".join(CHOICES) + f", or unset {VARIABLE}."
        )
    if name == DEFAULT:
        return {}
    return {"ANSIBLE_STRATEGY_PLUGINS": str(mitogen_plugins()),
            "ANSIBLE_STRATEGY": "mitogen_linear"}
