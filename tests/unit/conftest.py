"""Recorded runs for the CLI's unit tests (tests/unit/fixtures/runs/, see its README)."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs"
# fixture -> the play record inside it
RECORDED = {
    "train": "20261201-065835-train",
    "preflight-failed": "20261201-065912-preflight",
    "data-transfers": "20261201-065940-data",
}


@pytest.fixture
def recorded(tmp_path: Path) -> Callable[[str], Path]:
    """Unpack a recorded run into ``<tmp>/runs/`` and return its record folder. The
    tmp folder is also a project root (``A3RL_PROJECT_DIR``) for the CLI's commands."""
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)

    def unpack(name: str) -> Path:
        with tarfile.open(FIXTURE_RUNS / f"{name}.tar.gz") as tar:
            tar.extractall(runs, filter="data")
        return runs / RECORDED[name]

    return unpack
