"""What the dataset converters' output bytes depend on besides their input: the converters'
own version and pyarrow's (the parquet bytes carry it).

A module of its own, standard library only, so that the datasets role's converged-role
probe can key on it without importing pyarrow: that key is rendered in Ansible's forked
workers (the ``a3rl_dataset_digests`` filter), and importing pyarrow there took about 170 ms
in each, 4.6 % of the controller's CPU in a no-op ``site.yml`` (py-spy, 2026-12-04).
``a3rl.planning.datasets`` re-exports both names.
"""

from __future__ import annotations

from importlib import metadata

# Changes whenever the output of any converter would (a3rl.planning.datasets).
CONVERTER_VERSION = "2"


def output_fingerprint() -> str:
    """What the output bytes depend on besides the input: key caches on this. pyarrow's
    version is read from its installed metadata, which is what ``pyarrow.__version__``
    reports (tests/unit/test_datasets.py)."""
    return f"{CONVERTER_VERSION}+pyarrow-{metadata.version('pyarrow')}"
