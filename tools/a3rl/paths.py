"""Where the project lives on disk.

Everything the tools write (simulator state, caches, run records) stays inside the
project folder, so a clone is self-contained and nothing on the host is edited.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout this package belongs to.

    ``A3RL_PROJECT_DIR`` wins (tests and CI use clones in other folders); otherwise the
    nearest folder above the current directory that holds ``site.yml`` and
    ``ansible.cfg``; otherwise the checkout the package was installed from (editable).
    """
    env = os.environ.get("A3RL_PROJECT_DIR")
    if env:
        return Path(env).resolve()
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / "site.yml").is_file() and (folder / "ansible.cfg").is_file():
                return folder
    raise RuntimeError(
        "cannot find the a3rl project folder (no site.yml + ansible.cfg above the current "
        "directory); run from the checkout or set A3RL_PROJECT_DIR"
    )


def cache_dir() -> Path:
    """Rebuildable things: build scratch, wheel downloads, fact cache."""
    return project_root() / ".cache"


def machine_cache_dir() -> Path:
    """Content-addressed builds shared by every checkout on this machine (a CI clone
    included), where building once per checkout would cost minutes each time: the
    simulator's real-verl image layer and its wheels. ``A3RL_MACHINE_CACHE`` moves it;
    the default is ``~/.cache/a3rl``. Safe to delete: it is rebuilt."""
    env = os.environ.get("A3RL_MACHINE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "a3rl"


def sim_dir() -> Path:
    """State of simulated clusters (keys, known_hosts, per-node folders)."""
    return project_root() / ".sim"
