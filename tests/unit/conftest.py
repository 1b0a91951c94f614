"""Recorded runs for the CLI's unit tests (tests/unit/fixtures/runs/, see its README), and
one module run through Ansible on localhost."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

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


def run_module(module: str, args: dict, module_path: str | None = None) -> dict:
    """``module`` with ``args`` on localhost through the project's ``ansible`` and
    ``ansible.cfg`` (its action plugins included, as on a node): the host's result."""
    ansible = REPO / ".venv/bin/ansible"
    assert ansible.exists(), "no .venv/bin/ansible: run make venv"
    cmd = [str(ansible), "localhost", "-m", module, "-a", json.dumps(args)]
    if module_path:
        cmd += ["-M", module_path]
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                 ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                 ANSIBLE_LOCALHOST_WARNING="0"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def project_filters(name: str = "a3rl") -> dict:
    """The filters of the project's ``plugins/filter/<name>.py``, loaded as a play loads
    them (its wrappers, such as the one that turns input errors into filter errors)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"a3rl_filters_under_test_{name}",
                                                  REPO / "plugins" / "filter" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()
