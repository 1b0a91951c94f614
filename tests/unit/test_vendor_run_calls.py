"""Every call of a vendor ``.run`` package in the roles passes ``--nox11``.

makeself archives (the Ascend HDK packages are makeself archives) try to open an xterm
when ``DISPLAY`` is set and there is no tty, which is how Ansible runs a command over
``ssh -X``; ascend-deployer passes ``--nox11`` on every call. The stand-in packages stop
with exit 1 in that case (tests/unit/test_standins.py); this test finds the calls.
"""
from __future__ import annotations

from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key, []))


def _run_calls() -> list[tuple[str, str, str]]:
    calls = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            cmd = task.get("ansible.builtin.command") or task.get("ansible.builtin.shell")
            if cmd is None:
                continue
            text = str(cmd.get("argv", cmd.get("cmd", "")) if isinstance(cmd, dict) else cmd)
            # A vendor package: a staged .run, named by its source's basename.
            if ".run" in text or "npu_driver_pkg.src" in text:
                calls.append((f"{path.relative_to(ROLES)}", task.get("name", "?"), text))
    return calls


def test_the_driver_role_calls_vendor_packages() -> None:
    names = [name for _, name, _ in _run_calls()]
    assert any("--check" in n for n in names), names
    assert any("vendor installer" in n for n in names), names


def test_every_vendor_run_call_passes_nox11() -> None:
    missing = [(f, n) for f, n, text in _run_calls() if "--nox11" not in text]
    assert not missing, f"vendor .run calls without --nox11: {missing}"
