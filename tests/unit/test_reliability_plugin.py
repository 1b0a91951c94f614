"""The reliability report's generator: rows from test reports (as pytest-xdist hands them
to the controller), pointers to other modules' tests, full-suite detection, rendering."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.integration import reliability_plugin as rp

ROOT = Path(__file__).resolve().parents[2]


def _report(nodeid, when="call", outcome="passed", props=None, duration=1.0):
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, duration=duration,
                           user_properties=props or [])


def _prop(**row):
    return [(rp.PROPERTY, json.dumps({"observed": "", "refused_by": "", **row}))]


def _rows(reports):
    results: dict[str, rp.Result] = {}
    for r in reports:
        rp._merge(results, r)
    return rp.rows_from(results)


def test_row_records_a_json_property_and_checks_the_kind():
    got = []
    rp.row(lambda k, v: got.append((k, v)), "fault", "head killed", "fails cleanly", "12 s")
    assert got[0][0] == rp.PROPERTY
    assert json.loads(got[0][1])["observed"] == "12 s"
    with pytest.raises(ValueError):
        rp.row(lambda k, v: None, "faults", "x", "y")


def test_rows_from_described_tests_and_pointers():
    described = _prop(kind="bad_input", case="no head", expected="refused")
    pointer = rp.POINTERS[0]
    rows = _rows([
        _report("m.py::t[a]", "setup", props=described),
        _report("m.py::t[a]", "call", props=described),
        _report("m.py::t[a]", "teardown", props=described),
        _report(pointer.nodeid, "call"),
    ])
    mine = [r for r in rows if r["nodeid"] == "m.py::t[a]"]
    assert len(mine) == 1 and mine[0]["outcome"] == "passed" and mine[0]["case"] == "no head"
    assert mine[0]["seconds"] == 3.0
    assert next(r for r in rows if r["nodeid"] == pointer.nodeid)["outcome"] == "passed"
    # Pointers whose tests did not run say so.
    assert next(r for r in rows if r["nodeid"] == rp.POINTERS[1].nodeid)["outcome"] == "not run"


def test_a_failure_in_setup_or_call_wins_over_a_passing_phase():
    props = _prop(kind="fault", case="c", expected="e")
    rows = _rows([_report("m::t", "setup", "failed", props)])
    assert rows[0]["outcome"] == "error"
    rows = _rows([_report("m::t", "call", "failed", props),
                  _report("m::t", "teardown", "passed", props)])
    assert rows[0]["outcome"] == "failed"


def test_a_pointer_without_a_parameter_stands_for_all_parametrizations():
    p = next(p for p in rp.POINTERS if "hostile cache" in p.case)
    rows = _rows([_report(p.nodeid + "[a]"), _report(p.nodeid + "[b]", outcome="failed")])
    row = next(r for r in rows if r["nodeid"] == p.nodeid)
    assert row["outcome"] == "failed" and row["observed"] == "2 cases"


def test_every_pointer_names_a_test_that_exists():
    """A renamed test would leave its row 'not run' forever: catch it here."""
    for p in rp.POINTERS:
        path, _, rest = p.nodeid.partition("::")
        name = rest.split("[")[0]
        tree = ast.parse((ROOT / path).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in names, p.nodeid


def test_render_has_the_three_matrices_and_escapes_cells():
    rows = _rows([
        _report("a::f", props=_prop(kind="fault", case="head | killed", expected="e",
                                    observed="x" * 500)),
        _report("a::b", outcome="failed", props=_prop(kind="bad_input", case="no head",
                                                      expected="refused")),
        _report("a::c", props=_prop(kind="check_mode", case="status.yml", expected="0")),
    ])
    text = rp.render(rows, "2026-12-01", full=True)
    assert "## Faults" in text and "## Bad input" in text and "## Check mode" in text
    assert "head \\| killed" in text and "x" * 300 not in text
    assert "| no head |" in text and "**FAIL**" in text
    assert "from a full run" in text


def _config(args, invocation_dir=ROOT, **opts):
    option = SimpleNamespace(**{"keyword": "", "markexpr": "", "deselect": None, "lf": False,
                                **opts})
    return SimpleNamespace(option=option, args=args,
                           invocation_params=SimpleNamespace(dir=invocation_dir))


@pytest.mark.parametrize(("args", "opts", "full"), [
    (["tests/unit", "tests/integration"], {}, True),
    (["tests"], {}, True),
    ([], {}, True),  # testpaths
    (["tests/integration"], {"keyword": "bad"}, False),
    (["tests/integration"], {"markexpr": "not slow"}, False),
    (["tests/integration"], {"deselect": ["x"]}, False),
    (["tests/integration"], {"lf": True}, False),
    (["tests/integration/test_faults.py"], {}, False),
    (["tests/integration::x"], {}, False),
    (["tests/unit"], {}, False),
])
def test_full_suite_only_when_nothing_narrows_the_selection(args, opts, full):
    assert rp.full_suite(_config(args, **opts)) is full


def test_sessionfinish_writes_only_on_the_controller_and_for_a_full_run(tmp_path, monkeypatch):
    monkeypatch.setattr(rp, "DOC", tmp_path / "docs" / "reliability.md")
    monkeypatch.delenv("A3RL_RELIABILITY_REPORT", raising=False)
    monkeypatch.setattr(rp, "_RESULTS", {})
    rp.pytest_runtest_logreport(_report("a::f", props=_prop(kind="fault", case="c",
                                                              expected="e")))
    worker = SimpleNamespace(config=SimpleNamespace(workerinput={}))
    rp.pytest_sessionfinish(worker, 0)
    assert not rp.DOC.exists()
    partial = SimpleNamespace(config=_config(["tests/integration/test_faults.py"]))
    rp.pytest_sessionfinish(partial, 0)
    assert not rp.DOC.exists()
    monkeypatch.setenv("A3RL_RELIABILITY_REPORT", str(tmp_path / "partial.md"))
    rp.pytest_sessionfinish(partial, 0)
    assert "from a partial run" in (tmp_path / "partial.md").read_text()
    monkeypatch.delenv("A3RL_RELIABILITY_REPORT")
    rp.pytest_sessionfinish(SimpleNamespace(config=_config(["tests"])), 0)
    assert "| c | e | pass |" in rp.DOC.read_text()


def test_an_expected_failure_is_a_known_defect():
    props = _prop(kind="fault", case="c", expected="e")
    report = _report("m::t", "call", "skipped", props)
    report.wasxfail = "reason"
    rows = _rows([report])
    assert rows[0]["outcome"] == "xfailed"
    assert "known defect" in rp.render(rows, "now", full=False)
