"""docs/reliability.md, written from the integration suite's own results.

Tests of the fault, bad-input and check-mode suites describe their row with :func:`row`
(pytest's ``record_property``, which pytest-xdist carries from the workers to the
controller in each test report). Rows proved by tests in other modules are listed in
:data:`POINTERS` by node id. The controller process collects every report
(:func:`pytest_runtest_logreport`) and, at the end of the session, renders the matrices
(:func:`pytest_sessionfinish`) - never a worker, whose state holds only its own tests.

The doc is rewritten only when the whole integration suite ran (no ``-k``, ``-m``,
``--deselect``, ``--lf`` or single-file selection): a partial run would publish a partial
matrix. ``A3RL_RELIABILITY_REPORT=<path>`` writes the matrices of any run to that path.

Hooked in by ``tests/integration/conftest.py`` importing the two hooks.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROPERTY = "a3rl_reliability"
KINDS = ("fault", "bad_input", "check_mode")
DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
INTEGRATION_DIR = Path(__file__).resolve().parent


def row(record_property, kind: str, case: str, expected: str, observed: str = "",
        refused_by: str = "") -> None:
    """Describe the calling test's row of the ``kind`` matrix. ``observed`` is what the
    test saw (the refusal message, the time a recovery took), filled in as it runs; call
    again to update it."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    record_property(PROPERTY, json.dumps({"kind": kind, "case": case, "expected": expected,
                                          "observed": observed, "refused_by": refused_by}))


@dataclass(frozen=True)
class Pointer:
    """A row proved by a test of another module (not re-run here)."""

    kind: str
    case: str
    expected: str
    nodeid: str
    refused_by: str = ""


_I = "tests/integration/"
POINTERS: tuple[Pointer, ...] = (
    Pointer("bad_input", "two heads", "refused by preflight, nodes unchanged",
            _I + "test_site.py::test_preflight_refuses_bad_inventory_without_changes[two heads]",
            "preflight (inventory)"),
    Pointer("bad_input", "duplicate cluster IPs", "refused by preflight, nodes unchanged",
            _I + "test_site.py::test_preflight_refuses_bad_inventory_without_changes"
            "[duplicate IP]", "preflight (inventory)"),
    Pointer("bad_input", "a NIC that does not hold the IP", "refused by preflight, nodes unchanged",
            _I + "test_site.py::test_preflight_refuses_bad_inventory_without_changes[wrong NIC]",
            "preflight (node)"),
    Pointer("bad_input", "an NPU device missing on one node",
            "refused by preflight naming the device, nodes unchanged",
            _I + "test_site.py::test_preflight_refuses_missing_device_without_changes",
            "preflight (node)"),
    Pointer("bad_input", "a node's host key not the recorded one",
            "refused by preflight (ssh's verdict), nodes unchanged",
            _I + "test_site.py::test_preflight_refuses_unknown_host_key", "preflight (SSH)"),
    Pointer("bad_input", "an unknown feature", "refused by the plan, nothing submitted",
            _I + "test_train.py::test_invalid_plans_are_refused_before_anything_is_submitted"
            "[extravars3-unknown feature]", "train plan"),
    Pointer("bad_input", "the resampler with data.shuffle=True",
            "refused by the plan, nothing submitted",
            _I + "test_train.py::test_invalid_plans_are_refused_before_anything_is_submitted"
            "[extravars1-shuffle]", "train plan"),
    Pointer("bad_input", "a misspelled Hydra key", "refused by the Hydra check, nothing submitted",
            _I + "test_train.py::test_a_key_hydra_refuses_is_named_before_submit[typo]",
            "train Hydra check"),
    Pointer("bad_input", "a '+' on a key verl's config has (not one the plan sets)",
            "refused by the Hydra check, nothing submitted",
            _I + "test_train.py::test_a_key_hydra_refuses_is_named_before_submit"
            "[plus on a key the config has]", "train Hydra check"),
    Pointer("bad_input", "hostile cache paths (empty, relative, /, .., glob, ~)",
            "refused with the rule broken, nothing removed",
            _I + "test_day2.py::test_hostile_cache_paths_are_refused_and_nothing_removed",
            "cache_clean"),
    Pointer("bad_input", "a cache path that is a symlink", "refused, nothing removed",
            _I + "test_day2.py::test_a_cache_path_that_is_a_symlink_is_refused", "cache_clean"),
    Pointer("bad_input", "an unknown purge word", "refused before anything stops",
            _I + "test_day2.py::test_purge_word_unknown_is_refused", "teardown"),
    Pointer("bad_input", "a malformed dataset row", "refused naming row and column, nothing placed",
            _I + "test_data_weights.py::test_malformed_dataset_is_refused_naming_row_and_column",
            "datasets"),
    Pointer("bad_input", "an altered driver package", "refused, nothing installed",
            _I + "test_npu_driver.py::test_altered_package_is_refused_and_nothing_installed",
            "npu_driver"),
    Pointer("bad_input", "an altered image archive", "refused before anything is loaded",
            _I + "test_cann_image.py::test_altered_archive_is_refused", "cann_image"),
    Pointer("fault", "a Ray worker's raylet killed", "a ray.yml re-run rejoins it",
            _I + "test_ray.py::test_killed_worker_raylet_is_rejoined_by_a_rerun"),
    Pointer("fault", "the Ray head stopped", "ray.yml restores it and the workers rejoin",
            _I + "test_ray.py::test_stopped_head_is_restored_and_the_workers_rejoin"),
    Pointer("fault", "the head's training container restarted",
            "Ray heals by itself (systemd), no Ansible",
            _I + "test_ray.py::test_head_container_restart_heals_without_ansible"),
    Pointer("fault", "a patch that does not apply",
            "the previous tree stays (patched), the patch is named",
            _I + "test_frameworks.py::test_conflict_leaves_the_previous_tree_and_names_the_patch"),
    Pointer("fault", "SSH dropping during a large transfer (the controller's rsync and ssh "
            "killed halfway)",
            "the partial file has no stamp (never marked complete); the re-run appends the "
            "rest and verifies it",
            _I + "test_frameworks.py::test_interrupted_transfer_resumes"),
    Pointer("fault", "a damaged copy on one node", "detected by sha256 and sent again",
            _I + "test_frameworks.py::"
            "test_damaged_copy_on_one_node_is_sent_again"),
    Pointer("fault", "a wheelhouse unpack cut short on one node",
            "no completion marker: the folder is unpacked again (scratch folder, renamed)",
            _I + "test_frameworks.py::"
            "test_damaged_copy_on_one_node_is_sent_again"),
    Pointer("fault", "a weights download killed mid-transfer",
            "the re-run resumes; a complete store asks the hub nothing",
            _I + "test_data_weights.py::"
            "test_weights_download_resumes_and_a_rerun_asks_the_hub_nothing"),
    Pointer("fault", "a node's disk too small for the transfer",
            "refused before anything starts, naming host, folder and sizes",
            _I + "test_data_weights.py::test_disk_space_is_checked_before_anything_starts"),
    Pointer("fault", "the training image missing on one node",
            "a re-run loads it on that node only",
            _I + "test_cann_image.py::test_only_the_node_without_the_image_gets_it"),
    Pointer("check_mode", "site.yml on a provisioned cluster", "runs, reports no changes",
            _I + "test_site.py::test_site_in_check_mode"),
)


@dataclass
class Result:
    outcome: str = "not run"
    seconds: float = 0.0
    props: dict[str, Any] = field(default_factory=dict)


def _merge(results: dict[str, Result], report) -> None:
    res = results.setdefault(report.nodeid, Result())
    res.seconds += float(getattr(report, "duration", 0.0) or 0.0)
    for name, value in getattr(report, "user_properties", None) or []:
        if name == PROPERTY:
            res.props = json.loads(value)
    if report.when == "call" or report.outcome != "passed":
        if report.outcome == "failed" and report.when != "call":
            outcome = "error"
        elif getattr(report, "wasxfail", None) is not None and report.outcome == "skipped":
            outcome = "xfailed"  # a known defect, marked in the test with its reason
        else:
            outcome = report.outcome
        # A failed teardown does not hide a failed call, and vice versa.
        if res.outcome in ("not run", "passed") or outcome in ("failed", "error"):
            res.outcome = outcome


def rows_from(results: dict[str, Result]) -> list[dict[str, Any]]:
    """One row per described test and per pointer, in suite order."""
    rows = []
    for nodeid, res in results.items():
        if res.props:
            rows.append({**res.props, "nodeid": nodeid, "outcome": res.outcome,
                         "seconds": res.seconds})
    for p in POINTERS:
        # A pointer without a parameter id stands for every parametrization of its test.
        mine = [r for n, r in results.items() if n == p.nodeid or n.startswith(p.nodeid + "[")]
        outcomes = {r.outcome for r in mine}
        outcome = ("not run" if not mine else next(
            (o for o in ("error", "failed", "xfailed", "not run", "skipped") if o in outcomes),
            "passed"))
        observed = f"{len(mine)} cases" if len(mine) > 1 else ""
        rows.append({"kind": p.kind, "case": p.case, "expected": p.expected,
                     "observed": observed, "refused_by": p.refused_by, "nodeid": p.nodeid,
                     "outcome": outcome, "seconds": sum(r.seconds for r in mine)})
    return rows


def _cell(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _result(r: dict[str, Any]) -> str:
    return {"passed": "pass", "failed": "**FAIL**", "error": "**ERROR**",
            "xfailed": "**known defect** (xfail)", "skipped": "skipped",
            "not run": "not run"}.get(r["outcome"], r["outcome"])


def _test(r: dict[str, Any]) -> str:
    return f"`{r['nodeid'].removeprefix(_I)}`"


def render(rows: list[dict[str, Any]], when: str, full: bool) -> str:
    by = {k: [r for r in rows if r["kind"] == k] for k in KINDS}
    passed = sum(r["outcome"] == "passed" for r in rows)
    out = [
        "# Reliability: faults, bad input and check mode",
        "",
        "Generated by the integration suite (`tests/integration/reliability_plugin.py`) "
        f"on {when}, from {'a full run' if full else 'a partial run'}: "
        f"{passed} of {len(rows)} rows passed. Do not edit by hand; run the suite.",
        "",
        "Everything here ran on the simulator: podman containers as nodes with real SSH, "
        "systemd, Docker, Ray and git. The NPUs, the driver and firmware packages, `npu-smi`, "
        "the model hub and the trainer are stand-ins (`tools/a3rl/sim/`), so what involves "
        "them (device counts, NPU health, training steps) is verified only against the "
        "stand-ins. \"Nodes unchanged\" means: every file, folder and link on every "
        "filesystem the project writes on a node (the root, /var/lib/docker, "
        "/var/lib/containers, /shared, the stand-ins' knobs, /tmp) has the same type, mode, "
        "owner, size, mtime and ctime (and the small files under /etc the same sha256) as "
        "before the run, logs and Ansible's and Ray's own temporary folders aside; the same "
        "device nodes; the same container start times (tests/integration/conftest.py, "
        "snapshot(); the bad-input cases read only what changed since one mark, changes(): "
        "every entry whose mtime or ctime is newer than the mark, which a write, a chmod, "
        "a chown, a rename or a removal in its folder sets and no program sets back).",
        "",
        "Rows whose test is in another module point at it; that test proves the row and is "
        "not repeated. A **known defect** is a row whose test is marked as an expected "
        "failure (strict: it fails the suite once the defect is fixed, until the mark goes); "
        "its reason names the owner.",
        "",
        "## Faults",
        "",
        "| fault | expected | result | observed | test |",
        "| --- | --- | --- | --- | --- |",
    ]
    out += [f"| {_cell(r['case'])} | {_cell(r['expected'])} | {_result(r)} | "
            f"{_cell(r['observed'])} | {_test(r)} |" for r in by["fault"]]
    out += [
        "",
        "## Bad input",
        "",
        "Each case is refused before any node changes: the play fails, reports `changed=0`, "
        "and every node is as before. Preflight's inventory check names every problem at "
        "once, so its cases run up to ten to a play; each such row quotes the line of that "
        "play's message that is its own (`test_bad_input.claimed_lines`).",
        "",
        "| input | refused by | result | message (excerpt) | test |",
        "| --- | --- | --- | --- | --- |",
    ]
    out += [f"| {_cell(r['case'])} | {_cell(r['refused_by'])} | {_result(r)} | "
            f"{_cell(r['observed'] or r['expected'])} | {_test(r)} |" for r in by["bad_input"]]
    out += [
        "",
        "## Check mode",
        "",
        "| play | expected | result | observed | test |",
        "| --- | --- | --- | --- | --- |",
    ]
    out += [f"| {_cell(r['case'])} | {_cell(r['expected'])} | {_result(r)} | "
            f"{_cell(r['observed'])} | {_test(r)} |" for r in by["check_mode"]]
    return "\n".join(out) + "\n"


def full_suite(config) -> bool:
    """The whole integration suite was selected: no narrowing option, and an argument
    that is the integration folder or one above it (``tests``, the project)."""
    opt = config.option
    if (getattr(opt, "keyword", "") or getattr(opt, "markexpr", "")
            or getattr(opt, "deselect", None) or getattr(opt, "lf", False)
            or getattr(opt, "last_failed", False)):
        return False
    base = Path(config.invocation_params.dir)
    args = [a for a in config.args if not a.startswith("-")] or [str(base)]
    for arg in args:
        if "::" in arg:
            continue
        path = (base / arg).resolve()
        if path == INTEGRATION_DIR or path in INTEGRATION_DIR.parents:
            return True
    return False


_RESULTS: dict[str, Result] = {}


def pytest_runtest_logreport(report) -> None:
    _merge(_RESULTS, report)


def pytest_sessionfinish(session, exitstatus) -> None:
    config = session.config
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller writes
        return
    rows = rows_from(_RESULTS)
    if not any(r["outcome"] != "not run" for r in rows):
        return
    target = os.environ.get("A3RL_RELIABILITY_REPORT")
    full = full_suite(config)
    if not target and not full:
        return
    path = Path(target) if target else DOC
    path.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path.write_text(render(rows, when, full))
