"""The per-worker, per-module timing summary printed at the end of the suite."""

from collections import defaultdict
from types import SimpleNamespace

from tests import timing_plugin


def _report(nodeid: str, seconds: float, worker: str | None):
    node = SimpleNamespace(gateway=SimpleNamespace(id=worker)) if worker else None
    return SimpleNamespace(nodeid=nodeid, duration=seconds, node=node)


def test_seconds_add_up_per_worker_and_module(monkeypatch):
    monkeypatch.setattr(timing_plugin, "_SECONDS", defaultdict(float))
    for r in (_report("tests/integration/test_a.py::t1", 100.0, "gw0"),
              _report("tests/integration/test_a.py::t2", 20.5, "gw0"),
              _report("tests/integration/test_b.py::t", 300.0, "gw1"),
              _report("tests/unit/test_c.py::t", 0.2, None)):
        timing_plugin.record(r)
    seconds = dict(timing_plugin._SECONDS)
    assert seconds[("gw0", "tests/integration/test_a.py")] == 120.5
    lines = timing_plugin.summary_lines(seconds)
    # main's 0.2 s is under a second: left out.
    assert lines == ["gw0: 120 s in 1 module(s)", "      120 s  tests/integration/test_a.py",
                     "gw1: 300 s in 1 module(s)", "      300 s  tests/integration/test_b.py"]
