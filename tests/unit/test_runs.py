"""Run records: summary.json from the events, the runs listing and the report."""

from __future__ import annotations

import json

import pytest

from a3rl.controller import runs

SID = "a3rl-grpo-qwen3_32b-real-0da7b98c"


def test_summary_counts_timings_and_command_of_a_recorded_run(recorded):
    record = recorded("data-transfers")
    s = runs.summary_of(record)
    assert (record / "summary.json").exists()
    assert json.loads((record / "summary.json").read_text()) == s
    assert (s["playbook"], s["status"], s["rc"], s["ok"]) == ("playbooks/data.yml",
                                                             "successful", 0, True)
    # The counts are Ansible's own (its playbook_on_stats event).
    assert s["counts"] == {"ok": 33, "changed": 3, "failed": 0, "unreachable": 0,
                           "skipped": 14, "rescued": 0, "ignored": 0}
    assert s["hosts"]["node2"]["changed"] == 2 and s["hosts"]["node1"]["tasks"] == 28
    assert s["command"] == ("ansible-playbook playbooks/data.yml -i .sim/cli/inventory "
                            "-e artifact_store_refresh=true")
    assert s["log"].startswith("artifacts/") and s["log"].endswith("/stdout")
    # From the first event to the last (ansible-runner starts ansible-playbook in between).
    assert s["started"] == "2026-12-01T06:59:43+00:00"
    assert s["seconds"] == pytest.approx(47.9, abs=0.1)
    # Every host result of every task has a start, an end and its seconds, in run time.
    for t in s["tasks"]:
        for h in t["hosts"].values():
            assert 0 <= h["start"] <= h["end"] <= s["seconds"] + 0.01
            assert h["seconds"] == pytest.approx(h["end"] - h["start"], abs=0.002)
    send = next(t for t in s["tasks"] if t["task"].startswith("Artifacts | Send the missing"))
    assert send["hosts"]["node2"]["status"] == "changed" and send["hosts"]["node2"]["items"] == 4
    assert send["hosts"]["node1"]["status"] == "skipped"
    busy = sum(t["hosts"]["node2"]["seconds"] for t in s["tasks"] if "node2" in t["hosts"])
    assert s["hosts"]["node2"]["busy_seconds"] == pytest.approx(busy, abs=0.01)
    assert [x["kind"] for x in s["transfers"]] == ["fetch", "send"]


def test_summary_of_a_failed_run_keeps_ansibles_rc_and_the_failures(recorded):
    s = runs.summary_of(recorded("preflight-failed"))
    assert (s["status"], s["rc"], s["ok"]) == ("failed", 2, False)
    assert [(f["host"], f["task"], f["line"]) for f in s["failures"]] == [
        ("node2", "Preflight | Fail with every problem found on this node", 37),
        ("node1", "Preflight | Stop unless every node passed", 60)]
    assert s["failures"][0]["task_path"].endswith("roles/preflight/tasks/main.yml:88")
    stop = next(t for t in s["tasks"] if t["task"] == "Preflight | Stop unless every node passed")
    assert stop["hosts"]["node1"]["status"] == "failed"


def test_summary_of_a_training_run_names_the_job_and_its_report(recorded):
    s = runs.summary_of(recorded("train"))
    (t,) = s["training"]
    assert (t["submission_id"], t["status"], t["step"], t["total_steps"]) == (SID, "SUCCEEDED",
                                                                               2, 2)
    assert t["simulated"] and t["metrics"]["perf/throughput"] == pytest.approx(125.1, abs=0.05)
    follow = next(x for x in s["tasks"] if x["task"] == "Train | Follow the job until it ends")
    assert follow["hosts"]["node1"]["retries"] == 5
    assert follow["hosts"]["node1"]["seconds"] > 5  # the until-loop's whole wait


def test_two_plays_in_a_record_split_the_timeline(recorded):
    record = recorded("preflight-failed")
    events = runs.load_events(record)
    tasks, plays = runs.task_timings(events)
    assert len(plays) == 1 and plays[0]["end"] is not None
    assert len(tasks) == 14


def test_listing_shows_new_and_old_records_newest_last(recorded, tmp_path):
    recorded("train")
    recorded("preflight-failed")
    data = recorded("data-transfers")
    runs.summary_of(data)  # only this one has a summary.json yet
    (tmp_path / "runs" / "a3rl-some-training-run").mkdir()  # not a play record
    names = [p.name for p in runs.records(tmp_path / "runs")]
    assert names == ["20261201-065835-train", "20261201-065912-preflight", "20261201-065940-data"]
    rows = {r["run"]: runs.fmt_row(r) for r in map(runs.row, runs.records(tmp_path / "runs"))}
    assert rows["20261201-065940-data"] == [
        "20261201-065940-data", "playbooks/data.yml", "successful", "2026-12-01 06:59:40",
        "48s", "2", "3", "0", ""]
    # Without a summary: what the record's own files say.
    assert rows["20261201-065912-preflight"][:3] == ["20261201-065912-preflight",
                                                     "playbooks/preflight.yml", "failed"]
    assert rows["20261201-065912-preflight"][-1] == "(no summary yet)"
    runs.summary_of(tmp_path / "runs" / "20261201-065835-train")
    train = runs.fmt_row(runs.row(tmp_path / "runs" / "20261201-065835-train"))
    assert train[-1] == f"{SID} SUCCEEDED"


def test_resolve_a_run_by_what_a_person_types(recorded, tmp_path):
    for name in ("train", "preflight-failed", "data-transfers"):
        recorded(name)
    d = tmp_path / "runs"
    assert runs.resolve(d, "last").name == "20261201-065940-data"
    assert runs.resolve(d, "preflight").name == "20261201-065912-preflight"
    assert runs.resolve(d, "playbooks/train.yml".split("/")[-1]).name == "20261201-065835-train"
    assert runs.resolve(d, "065912").name == "20261201-065912-preflight"
    assert runs.resolve(d, str(d / "20261201-065835-train")).name == "20261201-065835-train"
    with pytest.raises(runs.RunError, match="matches 3 runs"):
        runs.resolve(d, "20261201")
    with pytest.raises(runs.RunError, match="no run record matches 'nope'"):
        runs.resolve(d, "nope")
    with pytest.raises(runs.RunError, match="no run records under"):
        runs.resolve(tmp_path / "empty", "last")


def test_the_record_folder_of_an_old_run_without_events_is_refused(tmp_path):
    (tmp_path / "20261201-000000-site" / "artifacts").mkdir(parents=True)
    with pytest.raises(runs.RunError, match="holds no events"):
        runs.summary_of(tmp_path / "20261201-000000-site")


# ---- the report ----------------------------------------------------------------------


def test_report_of_a_failed_run(recorded):
    record = recorded("preflight-failed")
    md, png = runs.render(record)
    text = md.read_text()
    assert text.startswith("# Run 20261201-065912-preflight\n")
    assert "| status | failed (rc 2) |" in text
    assert "| same as | `ansible-playbook playbooks/preflight.yml -i /tmp/cli-badinv` |" in text
    assert "## Failures" in text
    assert ("| node2 | Preflight \\| Fail with every problem found on this node | node2: "
            "cluster_ip 10.213.217.99 is not on any interface") in text
    assert "![timeline per host](timeline.png)" in text
    assert "## Training" not in text and "## Transfers" not in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The same record renders the same markdown.
    first = text
    runs.render(record)
    assert md.read_text() == first


def test_report_of_a_training_run_links_its_training_report_and_plot(recorded):
    record = recorded("train")
    md, png = runs.render(record)
    text = md.read_text()
    assert f"### {SID}: SUCCEEDED, step 2/2 (simulated)" in text
    assert f"Training report: [../{SID}/report.md](../{SID}/report.md)" in text
    assert f"![metrics over steps](../{SID}/metrics.png)" in text
    # The link resolves to the training play's own report, which is not rewritten.
    before = (record.parent / SID / "report.md").read_text()
    assert (md.parent / f"../{SID}/report.md").resolve().read_text() == before
    assert "| Train \\| Follow the job until it ends | train_job |" in text  # slowest tasks


def test_report_of_a_run_with_transfers(recorded):
    md, _ = runs.render(recorded("data-transfers"))
    text = md.read_text()
    assert "## Transfers" in text
    assert ("| node2 | Artifacts \\| Send the missing files (a partial copy resumes) | send | "
            "4/4 | 17.6 kB |") in text


def test_a_training_report_missing_from_disk_is_said(recorded, tmp_path):
    record = recorded("train")
    import shutil

    shutil.rmtree(tmp_path / "runs" / SID)
    text = runs.render(record)[0].read_text()
    assert "The play wrote no training report for this job" in text
