"""Hooks for the whole test tree. Here, not in tests/integration/conftest.py, because the
pytest-xdist controller loads only the conftests of the folders it is given and their
parents, and the reliability report must be written by the controller however the suite
is started (`pytest`, `pytest tests`, `pytest tests/unit tests/integration`)."""

from .integration.reliability_plugin import (  # noqa: F401 - registered as hooks
    pytest_runtest_logreport,
    pytest_sessionfinish,
)
