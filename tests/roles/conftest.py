"""The role loop: one role converged and checked on ONE simulated node, in minutes.

Not part of ``make test`` or ``make unit`` (they name tests/integration and tests/unit).
``make role ROLE=<role>`` runs it; so does ``A3RL_ROLE=<role> .venv/bin/pytest tests/roles``.
Without ``A3RL_ROLE`` (a bare ``pytest``) every test here is skipped and no node is made.

The node is a 1-node cluster of the simulator (``a3rl.sim.cluster.up(nodes=1)``: the
head, no workers), named ``A3RL_ROLE_CLUSTER`` (default ``role``). It is kept at the end
(``A3RL_ROLE_KEEP=0`` removes it), so the next run finds the prerequisites converged and
their probes skip them; ``A3RL_ROLE_FRESH=1`` removes it first (docs/testing.md, "The
role loop").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from a3rl.controller import strategy
from a3rl.controller.runner import PlayResult, run_play
from a3rl.sim import cluster, podman

from .roles import ROLES, selected

NAME = os.environ.get("A3RL_ROLE_CLUSTER", "role")
KEEP = os.environ.get("A3RL_ROLE_KEEP", "1") != "0"
FRESH = os.environ.get("A3RL_ROLE_FRESH", "0") == "1"
# The prerequisites prepare; they run under Mitogen, as the integration suite's
# provisioning does (about half the time). The role's own plays run under Ansible's
# default unless A3RL_ROLE_STRATEGY=mitogen.
NEEDS_STRATEGY = os.environ.get("A3RL_ROLE_NEEDS_STRATEGY", strategy.MITOGEN)
ROLE_STRATEGY = os.environ.get("A3RL_ROLE_STRATEGY", strategy.DEFAULT)
# The shell's opt-in never reaches these plays: each run says its own strategy.
os.environ.pop(strategy.VARIABLE, None)

_TIMES: list[tuple[str, float]] = []


def pytest_generate_tests(metafunc):
    if "role" not in metafunc.fixturenames:
        return
    value = os.environ.get("A3RL_ROLE", "")
    if not value.strip():
        skip = pytest.mark.skip(reason="the role loop runs only when asked: make role "
                                "ROLE=<role>, or A3RL_ROLE=<role>|all pytest tests/roles")
        metafunc.parametrize("role", [pytest.param(None, marks=skip, id="no-role")],
                             scope="module")
        return
    metafunc.parametrize("role", selected(value), scope="module")


def timed(step: str, t0: float) -> None:
    _TIMES.append((step, time.monotonic() - t0))


def pytest_terminal_summary(terminalreporter):
    if not _TIMES:
        return
    terminalreporter.section("role loop: seconds per step")
    for step, seconds in _TIMES:
        terminalreporter.write_line(f"{seconds:7.1f}  {step}")
    terminalreporter.write_line(f"{sum(s for _, s in _TIMES):7.1f}  total")
    if KEEP and any(step.startswith("node") for step, _ in _TIMES):
        terminalreporter.write_line(
            f"node kept for the next run: cluster {NAME!r} (remove it with "
            f".venv/bin/a3rl sim down --name {NAME})")


@pytest.fixture(scope="session")
def node() -> Iterator[cluster.Cluster]:
    """The one-node cluster, reused when it is already up with the same image."""
    problem = podman.available()
    if problem:
        pytest.fail(f"the simulator cannot run here: {problem}")
    t0 = time.monotonic()
    if FRESH:
        cluster.down(NAME, log=print)
    c = cluster.up(NAME, nodes=1, log=print, trainer="standin")
    timed(f"node up ({NAME}, fresh)" if FRESH else f"node up ({NAME})", t0)
    yield c
    if not KEEP:
        cluster.down(NAME, log=print)


def play(c: cluster.Cluster, playbook: str, name: str, strategy_name: str,
         **kw) -> PlayResult:
    t0 = time.monotonic()
    result = run_play(playbook, c.inventory_dir, quiet=True,
                      extra_env=strategy.env(strategy_name), **kw)
    timed(name, t0)
    return result


def failure_text(result: PlayResult) -> str:
    return "\n".join(f"{h} | {t} | {m}" for h, t, m in result.failures) or (
        f"rc {result.rc}, see {result.log}")


@pytest.fixture(scope="module")
def converged(node: cluster.Cluster, role: str) -> Iterator[tuple[cluster.Cluster, PlayResult]]:
    """The role's prerequisites, then the role's own play, once per role: both must pass.
    A failure of a prerequisite names it: the role's play did not run."""
    loop = ROLES[role]
    for need in loop.needs:
        result = play(node, need, f"{role}: need {need}", NEEDS_STRATEGY)
        assert result.ok, f"prerequisite {need} failed:\n{failure_text(result)}"
    result = play(node, loop.play, f"{role}: converge {loop.play}", ROLE_STRATEGY)
    yield node, result
