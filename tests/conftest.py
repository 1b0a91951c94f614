"""Hooks for the whole test tree. Here, not in tests/integration/conftest.py, because the
pytest-xdist controller loads only the conftests of the folders it is given and their
parents, and the reliability report must be written by the controller however the suite
is started (`pytest`, `pytest tests`, `pytest tests/unit tests/integration`)."""

import os

from . import prebuild, timing_plugin
from .integration import reliability_plugin
from .integration.reliability_plugin import pytest_sessionfinish  # noqa: F401 - a hook


def pytest_sessionstart(session):
    # The controller (or a run without workers), when `make test` asks for it.
    if not hasattr(session.config, "workerinput") and os.environ.get(prebuild.VARIABLE):
        prebuild.start()


def pytest_runtest_logreport(report):
    reliability_plugin.pytest_runtest_logreport(report)
    timing_plugin.record(report)


def pytest_terminal_summary(terminalreporter):
    if hasattr(terminalreporter.config, "workerinput"):  # the controller prints
        return
    terminalreporter.section("seconds per worker and module")
    for line in timing_plugin.summary_lines():
        terminalreporter.write_line(line)
    line = prebuild.summary_line()
    if line:
        terminalreporter.write_line(line)
