"""The ``a3rl`` command without a cluster: runs, report, bench, the failure summary, the
options of the play commands and plain output when stdout is not a terminal."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from a3rl.controller import cli, runs
from a3rl.controller.progress import LiveDisplay, PlainDisplay
from a3rl.controller.runner import PlayResult, equivalent_command

ANSI = re.compile(r"\x1b\[")
SID = "a3rl-grpo-qwen3_32b-real-0da7b98c"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("A3RL_PROJECT_DIR", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    return tmp_path


def _result(record: Path) -> PlayResult:
    s = runs.summary_of(record)
    return PlayResult(play=s["playbook"], rc=s["rc"], status=s["status"], record=record,
                      command=s["command"], stats={}, seconds=s["seconds"],
                      failures=[(f["host"], f["task"], f["msg"]) for f in s["failures"]],
                      log=record / s["log"], summary=s)


def test_the_failure_summary_names_host_task_error_and_the_log(recorded):
    record = recorded("preflight-failed")
    lines = cli.failure_lines(_result(record))
    assert lines[0] == "FAILED: 2 failure(s) on 2 host(s) (node1, node2):"
    assert lines[1] == "  node2 | Preflight | Fail with every problem found on this node"
    assert lines[2].startswith("    node2: cluster_ip 10.213.217.99 is not on any interface")
    assert lines[3] == "    (log line 37)"
    assert lines[4] == "  node1 | Preflight | Stop unless every node passed"
    assert lines[-1] == f"full log: {runs.log_path(record)}"
    assert runs.log_path(record).exists()


def test_a_long_error_is_cut_and_many_failures_are_counted(recorded):
    result = _result(recorded("preflight-failed"))
    result.summary["failures"] = [{"host": f"node{i}", "task": "T", "msg": "\n".join(
        f"line {j}" for j in range(20))} for i in range(12)]
    lines = cli.failure_lines(result, limit=10, max_lines=6)
    assert "    ... (14 more lines in the log)" in lines
    assert lines[-2] == "  ... and 2 more in summary.json"


def test_a_long_one_line_error_is_shown_whole_up_to_a_limit(recorded):
    result = _result(recorded("preflight-failed"))
    problems = " | ".join(f"node{i}: problem {i}. Fix: do {i}." for i in range(40))
    result.summary["failures"] = [{"host": "localhost", "task": "T", "msg": problems}]
    (shown,) = [ln for ln in cli.failure_lines(result) if ln.startswith("    node0")]
    assert "node30: problem 30" in shown  # not cut at a terminal's width
    cut = cli.failure_lines(result, max_chars=100)[2]
    assert len(cut) < 200 and cut.endswith("(cut here; the rest is in the log)")


def test_a_failed_run_without_a_failed_task_still_says_where_to_look(recorded):
    result = _result(recorded("preflight-failed"))
    result.summary["failures"], result.failures = [], []
    lines = cli.failure_lines(result)
    assert lines[0].startswith("FAILED: playbooks/preflight.yml ended with rc 2 (failed)")
    assert lines[-1].startswith("full log: ")


def test_print_result_in_plain_mode_has_no_colour(recorded, capsys):
    cli._use_console(plain=True)
    cli.print_result(_result(recorded("preflight-failed")))
    out = capsys.readouterr().out
    assert not ANSI.search(out)
    assert "playbooks/preflight.yml: failed in 13s, 0 changed" in out
    assert re.search(r"\| node2 \|\s+6 \|\s+0 \|\s+1 \|", out)
    assert "same as: ansible-playbook playbooks/preflight.yml -i /tmp/cli-badinv" in out
    assert "  node2 | Preflight | Fail with every problem found on this node" in out


def test_runs_lists_the_records_as_a_plain_table(project, recorded, capsys):
    for name in ("train", "preflight-failed", "data-transfers"):
        recorded(name)
    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out
    assert not ANSI.search(out)
    assert "3 of 3 run(s)" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("| 2026")]
    assert [ln.split("|")[1].strip() for ln in lines] == [
        "20261201-065835-train", "20261201-065912-preflight", "20261201-065940-data"]
    assert cli.main(["runs", "--play", "preflight", "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert "20261201-065912-preflight" in out and "065835" not in out


def test_report_renders_a_record_and_names_the_training_report(project, recorded, capsys):
    recorded("train")
    assert cli.main(["report", "train"]) == 0
    out = capsys.readouterr().out
    record = project / "runs" / "20261201-065835-train"
    assert f"report: {record / 'report.md'}" in out
    assert f"training report: {project / 'runs' / SID / 'report.md'}" in out
    assert (record / "timeline.png").exists() and (record / "summary.json").exists()
    # A training run's folder is not a play record: its report is the play's own.
    assert cli.main(["report", SID]) == 0
    assert "is a training run; the training play wrote its report" in capsys.readouterr().out
    assert cli.main(["report", "nothing-like-this"]) == 2
    assert "no run record matches" in capsys.readouterr().out


def test_bench_runs_bench_run_py_with_the_arguments_and_passes_its_exit_code(project, capfd):
    (project / "bench").mkdir()
    (project / "bench" / "run.py").write_text(
        "import json, sys\nprint(json.dumps([sys.executable, sys.argv[1:]]))\nsys.exit(3)\n")
    assert cli.main(["bench", "fanout", "--", "--sizes", "2", "4"]) == 3
    exe, argv = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert exe == sys.executable and argv == ["fanout", "--", "--sizes", "2", "4"]
    assert cli.main(["bench", "--list"]) == 3
    assert json.loads(capfd.readouterr().out.strip())[1] == ["--list"]


def test_bench_without_a_runner_says_so(project, capsys):
    assert cli.main(["bench"]) == 2
    assert "bench/run.py does not exist" in capsys.readouterr().out


def test_sim_and_demo_run_the_simulators_own_program_with_the_arguments(monkeypatch):
    """`a3rl sim ARGS` and `a3rl demo ARGS` are `python -m a3rl.sim ...` (a separate
    program: the controller imports nothing from the simulator), with its exit code."""
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda argv, **kw: calls.append(argv) or 5)
    assert cli.main(["sim", "up", "--nodes", "4", "--help"]) == 5
    assert cli.main(["demo", "--name", "d1"]) == 5
    assert calls == [[sys.executable, "-m", "a3rl.sim", "up", "--nodes", "4", "--help"],
                     [sys.executable, "-m", "a3rl.sim", "demo", "--name", "d1"]]


def test_the_simulators_program_answers_and_the_demo_drives_the_controller(monkeypatch, capsys):
    import subprocess

    out = subprocess.run([sys.executable, "-m", "a3rl.sim", "npu-health", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--health HEALTH" in out and out.startswith("usage: a3rl sim npu-health")
    from a3rl.sim import cli as sim_cli

    ran = []
    inv = Path("/x/inventory")
    monkeypatch.setattr(sim_cli.cluster, "up", lambda name, nodes, log: type(
        "C", (), {"inventory_dir": inv})())
    monkeypatch.setattr(sim_cli.controller, "main", lambda argv: ran.append(argv) or 0)
    assert sim_cli.main(["demo", "--nodes", "3", "--progress", "plain"]) == 0
    opts = ["-i", str(inv), "--progress", "plain"]
    # site.yml, then the training play with the demo's own extra vars, as before issue 44
    assert ran == [["up", *opts], ["play", str(sim_cli.project_root() / "playbooks" /
                                               "train.yml"), *opts,
                                   "-e", "algo=grpo", "-e", "train_job_poll=2"]]
    assert "demo done" in capsys.readouterr().out


def test_bad_input_is_refused_before_any_play_runs(project, capsys, tmp_path):
    assert cli.main(["up", "-i", str(tmp_path / "no-inventory")]) == 2
    assert "does not exist (for the simulator: `a3rl sim up`)" in capsys.readouterr().out
    (tmp_path / "inv").mkdir()
    assert cli.main(["status", "-i", str(tmp_path / "inv"), "-e", "novalue"]) == 2
    assert "-e takes KEY=VALUE; got novalue" in capsys.readouterr().out
    assert list((tmp_path).glob("runs/*")) == []  # nothing was recorded: nothing ran


@pytest.mark.parametrize(("argv", "playbook", "extra"), [
    (["train", "--algo", "dapo", "--model", "qwen3_32b", "--feature", "sam", "--feature",
      "npugraph_ex", "--override", "trainer.total_training_steps=2", "--poll", "1",
      "--no-follow"], "playbooks/train.yml",
     {"algo": "dapo", "train_job_action": "submit", "model": "qwen3_32b",
      "features": "sam,npugraph_ex", "train_job_follow": "false",
      "overrides": ["trainer.total_training_steps=2"],
      "train_job_poll": "1"}),
    (["train", "--algo", "grpo", "--action", "stop"], "playbooks/train.yml",
     {"algo": "grpo", "train_job_action": "stop"}),
    (["train", "--algo", "grpo", "--rerun"], "playbooks/train.yml",
     {"algo": "grpo", "train_job_action": "submit", "train_job_rerun": "true"}),
    (["clean-cache", "--batch", "2", "--force"], "playbooks/cache_clean.yml",
     {"cache_clean_batch": "2", "cache_clean_force": "true"}),
    (["down", "--purge", "image,data"], "playbooks/teardown.yml", {"teardown_purge": "image,data"}),
    (["down"], "playbooks/teardown.yml", {}),
    (["status", "-e", "status_min_free_bytes=1"], "playbooks/status.yml",
     {"status_min_free_bytes": "1"}),
    (["up", "--check"], "site.yml", {}),
    (["play", "playbooks/data.yml", "-e", "artifact_store_refresh=true"],
     "playbooks/data.yml", {"artifact_store_refresh": "true"}),
    (["preflight"], "playbooks/preflight.yml", {}),
])
def test_each_command_runs_its_play_with_its_options(project, monkeypatch, recorded, argv,
                                                     playbook, extra):
    # The play itself is not run here (the integration tests run the plays); what the
    # command hands to run_play is checked, and a recorded result stands for what it returns.
    (project / "inventory" / "sim").mkdir(parents=True)
    (project / "playbooks").mkdir()
    (project / "playbooks" / "data.yml").write_text("---\n")
    done = _result(recorded("train"))
    calls = []

    def fake_run_play(pb, inv, extravars, check=False, quiet=False, display=None):
        calls.append((pb, inv, extravars, check, quiet, display))
        return done

    monkeypatch.setattr("a3rl.controller.runner.run_play", fake_run_play)
    assert cli.main(argv) == 0
    ((pb, inv, got, check, quiet, display),) = calls
    assert (pb, got, check) == (playbook, extra, "--check" in argv)
    assert inv == project / "inventory" / "sim"
    assert isinstance(display, PlainDisplay) and quiet  # stdout is not a terminal here


def test_the_equivalent_command_passes_a_list_as_json():
    cmd = equivalent_command("playbooks/train.yml", Path("inv"),
                             {"algo": "grpo", "overrides": ["a=1", "b=[2,3]"],
                              "hub_token": "s3cret"}, check=True)
    assert cmd == ("ansible-playbook playbooks/train.yml -i inv -e algo=grpo "
                   "-e '{\"overrides\": [\"a=1\", \"b=[2,3]\"]}' -e 'hub_token=********' --check")


def test_the_progress_option_picks_the_display():
    def display(*argv):
        args = cli.parser().parse_args(["status", *argv])
        return cli._display(args, "playbooks/status.yml")

    cli._use_console(plain=True)
    d, quiet = display()
    assert isinstance(d, PlainDisplay) and quiet
    cli._use_console(plain=False)
    d, quiet = display()
    assert isinstance(d, LiveDisplay) and quiet
    assert display("-q") == (None, True)
    assert display("--progress", "ansible") == (None, False)
    assert isinstance(display("--progress", "plain")[0], PlainDisplay)
    cli._use_console(plain=True)
    assert isinstance(display("--progress", "live")[0], LiveDisplay)


def test_play_takes_only_the_projects_plays(project, capsys):
    (project / "inventory" / "sim").mkdir(parents=True)
    (project / "playbooks").mkdir()
    (project / "playbooks" / "status.yml").write_text("---\n")
    (project / "site.yml").write_text("---\n")
    for bad in ("/etc/passwd", "playbooks/nope.yml", "roles/x/tasks/main.yml"):
        assert cli.main(["play", bad]) == 2
        out = capsys.readouterr().out
        assert out.startswith(f"{bad} is not one of the project's plays. Fix: name one of "
                              "site.yml, playbooks/status.yml")
