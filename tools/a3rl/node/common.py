"""Helpers the node-side modules share: a file's sha256 and git with a fixed environment.

Written once for every node-side file that hashes files or runs git. Such a file imports
it in two steps (``tests/unit/test_layers.py`` holds every node-side file to this form)::

    try:  # inside a module's payload on a node
        from ansible.module_utils.a3rl_common import git, sha256_file
    except ImportError:  # the controller and the tests: the tree's package
        from a3rl.node.common import git, sha256_file

Ansible packs a module_utils file's own ``ansible.module_utils`` imports into the payload
too (AnsiballZ's finder and Mitogen's both scan them recursively), so this file travels
with every module whose module_utils import it. Standard library only, Python 3.8+.
(fanout.py does not use it: its relay also runs alone, on Python 3.7.)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping, Sequence

CHUNK = 1 << 20

# Inherited variables that would point git at another repository, index or object store.
GIT_ENV_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_COMMON_DIR",
)
# Messages git prints in English (they are matched), no prompt for credentials (a node
# has no terminal), no system-wide config (the node's /etc/gitconfig is not ours).
GIT_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
# Fixed identity and date for the commits a3rl makes itself (the pin's cherry-picks, the
# staged composition and the patch series), so that each has the same id on every
# machine that makes it.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "a3rl",
    "GIT_AUTHOR_EMAIL": "a3rl@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "a3rl",
    "GIT_COMMITTER_EMAIL": "a3rl@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 of a file, read in CHUNK pieces (images and weights are hundreds of MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def git_env(extra: Mapping[str, str] | None = None) -> dict:
    """The process environment for git: GIT_ENV over the inherited one, without the
    variables in GIT_ENV_DROP, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_ENV_DROP}
    env.update(GIT_ENV)
    env.update(extra or {})
    return env


def git(
    args: Sequence[str],
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    config: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """``git -c <config>... <args>`` in ``cwd`` with git_env(env), text in and out. The
    caller decides what a non-zero exit means (each names its own error and fix)."""
    cmd = ["git"]
    for c in config:
        cmd += ["-c", c]
    return subprocess.run(cmd + list(args), cwd=cwd, env=git_env(env), input=stdin,
                          capture_output=True, text=True)
