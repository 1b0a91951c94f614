"""Live progress from ansible-runner's events: host states, failures, transfers and a
followed training job, from recorded runs and from events of the same shape."""

from __future__ import annotations

import io
import math
import re

from rich.console import Console

from a3rl.controller import fold, progress, runs
from a3rl.controller.fold import Tracker, error_text, replay
from a3rl.controller.progress import LiveDisplay, PlainDisplay

ANSI = re.compile(r"\x1b\[")


def _ev(counter: int, event: str, created: str = "2026-12-01T00:00:00+00:00", **data):
    return {"counter": counter, "event": event, "created": created, "event_data": data}


# ---- error text ----------------------------------------------------------------------


def test_error_text_says_the_message_then_what_the_command_printed():
    said = "node2: no NPU devices. Fix: ..."
    assert error_text({"msg": said}) == said
    text = error_text({"msg": "non-zero return code", "rc": 3, "cmd": ["rsync", "-a", "x"],
                       "stderr": "line1\nrsync: connection refused\n", "stdout": "ignored"})
    assert text.splitlines() == ["command failed with rc 3: rsync -a x", "line1",
                                 "rsync: connection refused"]


def test_error_text_of_a_crashed_module_and_of_a_loop_and_of_a_hidden_result():
    crashed = {"msg": "MODULE FAILURE\nSee stdout/stderr for the exact error",
               "module_stderr": "Traceback...\nKeyError: 'x'\n"}
    assert error_text(crashed).endswith("KeyError: 'x'")
    loop = {"results": [{"failed": False, "msg": "fine"}, {"failed": True, "msg": "item 2 broke"}]}
    assert error_text(loop) == "item 2 broke"
    hidden = {"censored": "the output has been hidden due to the fact that 'no_log: true'"}
    assert "no_log" in error_text(hidden)
    assert error_text({}) == "(the result says nothing more)"
    long = "\n".join(f"l{i}" for i in range(40))
    assert error_text({"msg": "failed", "stderr": long}, max_lines=3).splitlines() == [
        "failed", "l37", "l38", "l39"]


def test_units():
    assert fold.human_bytes(17649) == "17.6 kB"
    assert fold.human_bytes(999) == "999 B"
    assert fold.human_bytes(3.2e12) == "3.2 TB"
    assert fold.human_seconds(3.25) == "3.2s"
    assert fold.human_seconds(75) == "1m15s"
    assert fold.human_seconds(3 * 3600 + 120) == "3h02m"
    assert fold.human_seconds(None) == "-"


# ---- host states and failures --------------------------------------------------------


def test_host_lines_follow_start_result_and_retry():
    t = Tracker("site.yml")
    t.feed(_ev(1, "playbook_on_play_start", play="Ray | Start", play_pattern="a3_nodes"))
    n = t.feed(_ev(2, "playbook_on_task_start", task="Ray | Wait for the workers",
                   task_uuid="u1"))
    assert [x.text for x in n] == ["TASK Ray | Wait for the workers"]
    t.feed(_ev(3, "runner_on_start", host="node1", task="Ray | Wait for the workers",
               task_uuid="u1", created="2026-12-01T00:00:01+00:00"))
    assert (t.hosts["node1"].state, t.hosts["node1"].task) == ("running",
                                                                "Ray | Wait for the workers")
    n = t.feed(_ev(4, "runner_retry", host="node1", task="Ray | Wait for the workers",
                   task_uuid="u1", res={"retries": 31, "attempts": 1, "msg": "1 of 2 joined"}))
    assert t.hosts["node1"].state == "retrying" and t.hosts["node1"].retries_left == 30
    assert n[0].kind == "retry" and "30 left" in n[0].text and "1 of 2 joined" in n[0].text
    n = t.feed(_ev(5, "runner_on_ok", host="node1", task="Ray | Wait for the workers",
                   task_uuid="u1", res={"changed": True}, duration=12.5))
    assert t.hosts["node1"].state == "changed" and t.hosts["node1"].changed == 1
    assert n[0].text == "node1 changed (12s)"


def test_a_failed_loop_is_reported_once_with_the_item_that_failed():
    t = Tracker()
    t.feed(_ev(1, "playbook_on_task_start", task="Data | Convert", task_uuid="u"))
    t.feed(_ev(2, "runner_on_start", host="node1", task="Data | Convert", task_uuid="u"))
    t.feed(_ev(3, "runner_item_on_ok", host="node1", task="Data | Convert", task_uuid="u",
               res={"item": "gsm8k", "changed": False}))
    n = t.feed(_ev(4, "runner_item_on_failed", host="node1", task="Data | Convert",
                   task_uuid="u", res={"item": "aime_2024", "msg": "row 1, column x: empty"}))
    assert n[0].kind == "failure" and "[aime_2024]" in n[0].text
    t.feed(_ev(5, "runner_on_failed", host="node1", task="Data | Convert", task_uuid="u",
               res={"msg": "One or more items failed", "results": []}))
    assert t.failure_tuples() == [("node1", "Data | Convert", "row 1, column x: empty")]
    assert t.failures[0].item == "aime_2024"
    assert t.hosts["node1"].state == "failed"


def test_ignored_errors_are_not_failures_and_unreachable_hosts_are():
    t = Tracker()
    t.feed(_ev(1, "playbook_on_task_start", task="T", task_uuid="u"))
    t.feed(_ev(2, "runner_on_failed", host="node1", task="T", task_uuid="u",
               ignore_errors=True, res={"msg": "expected"}))
    unreachable = _ev(3, "runner_on_unreachable", host="node2", task="T", task_uuid="u",
                      res={"msg": "Failed to connect to the host via ssh: timeout"})
    unreachable["start_line"] = 7  # 0-based, in the run's stdout log
    t.feed(unreachable)
    assert t.failure_tuples() == [("node2", "T", "Failed to connect to the host via ssh: timeout")]
    assert t.failures[0].line == 8
    assert t.hosts["node1"].state == "failed (ignored)"


def test_debug_messages_are_shown_once_with_their_host():
    t = Tracker()
    n = t.feed(_ev(1, "runner_on_ok", host="localhost", task="Status | Print the table",
                   task_uuid="u", resolved_action="ansible.builtin.debug",
                   res={"msg": ["node   driver", "node1  25.3.0"]}))
    assert [x.text for x in n if x.kind == "message"] == ["localhost: node   driver\nnode1  25.3.0"]
    n = t.feed(_ev(2, "runner_on_ok", host="node1", task="Say", task_uuid="v",
                   resolved_action="ansible.builtin.debug", res={"msg": "node1: ready"}))
    assert [x.text for x in n if x.kind == "message"] == ["node1: ready"]


def test_the_recorded_failed_preflight_names_each_host_task_and_log_line(recorded):
    t = replay(runs.load_events(recorded("preflight-failed")))
    assert [(f.host, f.task, f.line) for f in t.failures] == [
        ("node2", "Preflight | Fail with every problem found on this node", 37),
        ("node1", "Preflight | Stop unless every node passed", 60)]
    assert t.failures[0].msg.startswith("node2: cluster_ip 10.213.217.99 is not on any interface")
    assert {h: s.state for h, s in t.hosts.items()} == {"node1": "failed", "node2": "failed"}
    assert t.stats["failures"] == {"node1": 1, "node2": 1}


def test_the_recorded_log_line_is_where_the_failure_is_in_the_full_log(recorded):
    record = recorded("preflight-failed")
    t = replay(runs.load_events(record))
    log = runs.log_path(record).read_text().splitlines()
    window = "\n".join(log[t.failures[0].line - 1:t.failures[0].line + 3])
    assert "cluster_ip 10.213.217.99" in window


# ---- transfers -----------------------------------------------------------------------


def test_the_recorded_transfers_count_bytes_file_by_file(recorded):
    t = replay(runs.load_events(recorded("data-transfers")))
    got = {(x.host, x.kind): (x.files_done, x.files_total, x.bytes_done, x.bytes_total,
                              x.finished) for x in t.transfers.values()}
    # node2 lost 4 parquet files (17,649 bytes); the store fetched the 4 raw datasets again.
    assert got == {("node2", "send"): (4, 4, 17649, 17649, True),
                   ("node1", "fetch"): (5, None, 13688, None, True)}
    send = next(x for x in t.transfers.values() if x.kind == "send")
    assert send.rate and math.isclose(send.rate, 17649 / send.seconds)


def test_a_send_bar_moves_with_each_file_and_takes_sizes_from_the_file_list():
    t = Tracker()
    files = [{"path": "models/a.safetensors", "sha256": "0", "size": 3000},
             {"path": "models/b.safetensors", "sha256": "1", "size": 1000}]
    t.feed(_ev(1, "runner_on_ok", host="node1", task="List", task_uuid="l",
               res={"ansible_facts": {"artifact_store_files": files}}))
    t.feed(_ev(2, "runner_on_ok", host="node2", task="Check", task_uuid="c",
               res={"needed": ["models/a.safetensors", "models/b.safetensors"],
                    "incoming_bytes": 4000}))
    t.feed(_ev(3, "runner_on_start", host="node2", task="Send", task_uuid="s",
               created="2026-12-01T00:00:00+00:00"))
    n = t.feed(_ev(4, "runner_item_on_ok", host="node2", task="Send", task_uuid="s",
                   created="2026-12-01T00:00:02+00:00",
                   res={"item": "models/a.safetensors", "changed": True}))
    x = t.transfers[("node2", "s")]
    assert (x.files_done, x.files_total, x.bytes_done, x.bytes_total) == (1, 2, 3000, 4000)
    assert n[0].text == ("node2 sent models/a.safetensors (1/2 files, 3.0 kB of 4.0 kB, "
                         "1.5 kB/s)")
    # An item that is not a needed file (the folders loop) is no transfer.
    t.feed(_ev(5, "runner_item_on_ok", host="node2", task="Folders", task_uuid="f",
               res={"item": "models", "changed": True}))
    assert ("node2", "f") not in t.transfers


def test_a_large_copy_is_a_transfer_once_it_is_done_and_a_small_one_is_not():
    # The shape of the CANN image role's archive copy, as a recorded site.yml gave it.
    t = Tracker()
    t.feed(_ev(1, "runner_on_start", host="node2", task="CANN image | Copy the archive",
               task_uuid="c", created="2026-12-01T00:00:00+00:00"))
    n = t.feed(_ev(2, "runner_on_ok", host="node2", task="CANN image | Copy the archive",
                   task_uuid="c", created="2026-12-01T00:00:33+00:00",
                   resolved_action="ansible.builtin.copy",
                   res={"changed": True, "size": 922214912, "dest": "/var/tmp/cann.tar"}))
    x = t.transfers[("node2", "c")]
    assert (x.kind, x.bytes_done, x.bytes_total, x.finished) == ("copy", 922214912, 922214912,
                                                                 True)
    assert n[0].text == ("node2 copied /var/tmp/cann.tar (1/1 files, 922.2 MB of 922.2 MB, "
                         "27.9 MB/s)")
    t.feed(_ev(3, "runner_on_ok", host="node2", task="Config", task_uuid="d",
               resolved_action="ansible.builtin.copy", res={"changed": True, "size": 512}))
    t.feed(_ev(4, "runner_on_ok", host="node1", task="Same", task_uuid="e",
               resolved_action="ansible.builtin.copy", res={"changed": False, "size": 9e9}))
    assert list(t.transfers) == [("node2", "c")]


def test_sizes_from_a_modules_arguments_a_stream_into_a_chain_and_unknown_sizes():
    t = Tracker()
    files = [{"path": "img/cann.tar", "sha256": "0", "size": 5000}]
    t.feed(_ev(1, "runner_on_ok", host="node1", task="Check", task_uuid="c",
               res={"needed": ["img/cann.tar", "img/other.tar"], "incoming_bytes": 9000,
                    "invocation": {"module_args": {"files": files}}}))
    t.feed(_ev(2, "runner_item_on_ok", host="node1", task="Send directly", task_uuid="s",
               res={"item": "img/cann.tar"}))
    x = t.transfers[("node1", "s")]
    # One size is not known: the total is what the node said would arrive.
    assert (x.bytes_done, x.bytes_total) == (5000, 9000)
    t.feed(_ev(3, "runner_item_on_ok", host="node1", task="Send directly", task_uuid="s",
               res={"item": "img/other.tar"}))
    assert (x.files_done, x.bytes_done) == (2, 9000)  # all arrived
    n = t.feed(_ev(4, "runner_on_ok", host="node1", task="Stream the files once into the chain",
                   task_uuid="f", created="2026-12-01T00:00:10+00:00",
                   res={"sent": 4_000_000, "seconds": 2.0, "error": "", "left_out": [],
                        "invocation": {"module_args": {"files": files}}}))
    chain = t.transfers[("node1", "f")]
    assert (chain.kind, chain.bytes_done, chain.files_done, chain.seconds) == ("chain",
                                                                               4_000_000, 1, 2.0)
    assert n[0].text == "node1 streamed the chain (1/1 files, 4.0 MB of 4.0 MB, 2.0 MB/s)"


def test_the_live_view_draws_brackets_as_text_and_survives_a_drawing_error():
    console = Console(file=io.StringIO(), force_terminal=True, width=120, color_system=None)
    t = Tracker()
    t.feed(_ev(1, "runner_on_start", host="node1", task="Stage [/data] files", task_uuid="u"))
    t.feed(_ev(2, "runner_item_on_ok", host="node1", task="Stage [/data] files", task_uuid="u",
               res={"item": "/data/[bold]x[/data]"}))
    live = LiveDisplay(console, t)
    console.print(live.__rich__())
    assert "Stage [/data] files [/data/[bold]x[/data]]" in console.file.getvalue()

    class Broken(LiveDisplay):
        def render(self, now):
            raise KeyError("boom")

    assert "failed to draw: KeyError" in str(Broken(console, t).__rich__())


# ---- a followed training job ---------------------------------------------------------


def test_the_recorded_train_run_shows_each_change_of_state_and_step(recorded):
    t = Tracker("playbooks/train.yml")
    lines = [n.text for e in runs.load_events(recorded("train")) for n in t.feed(e)
             if n.kind == "train"]
    sid = "a3rl-grpo-qwen3_32b-real-0da7b98c"
    assert [ln.split(",")[0:2] for ln in lines] == [
        [f"{sid}: RUNNING", " no step logged yet"],
        [f"{sid}: RUNNING", " step 1/2"],
        [f"{sid}: RUNNING", " step 2/2"],
        [f"{sid}: SUCCEEDED", " step 2/2"],
    ]
    assert "perf/throughput=117.2" in lines[1] and lines[1].endswith("(simulated)")
    tr = t.training[sid]
    assert (tr.status, tr.step, tr.total_steps, tr.simulated) == ("SUCCEEDED", 2, 2, True)
    assert tr.polls == 6  # five retries and the final result
    assert t.reports[0]["report"] == f"/work/main/runs/{sid}/report.md"


def test_progress_of_the_contract_shape_without_steps_and_with_odd_metrics():
    t = Tracker()
    res = {"job": {"submission_id": "j1", "status": "PENDING", "message": "waiting"},
           "progress": {"step": None, "total_steps": None, "metrics": {}},
           "retries": 10, "attempts": 1}
    n = t.feed(_ev(1, "runner_retry", host="node1", task="Train | Follow the job until it ends",
                   task_uuid="f", res=res))
    assert [x.text for x in n] == ["j1: PENDING, no step logged yet"]
    assert t.hosts["node1"].state == "following"
    # The same poll again says nothing new: no line.
    assert t.feed(_ev(2, "runner_retry", host="node1", task="x", task_uuid="f", res=res)) == []
    res2 = {"job": {"submission_id": "j1", "status": "RUNNING"},
            "progress": {"step": 7, "total_steps": None,
                         "metrics": {"perf/throughput": 118.52, "timing_s/gen": 12.0,
                                     "timing_s/generate_sequences": 11.5,
                                     "critic/score/mean": float("nan"), "flag": True}}}
    n = t.feed(_ev(3, "runner_retry", host="node1", task="x", task_uuid="f", res=res2))
    assert n[0].text == ("j1: RUNNING, step 7, perf/throughput=118.5 "
                         "timing_s/generate_sequences=11.5")


# ---- displays ------------------------------------------------------------------------


def test_plain_output_is_one_line_per_event_without_colour_or_redraws(recorded):
    out = io.StringIO()
    t = Tracker("playbooks/preflight.yml")
    with PlainDisplay(out, t) as d:
        for e in runs.load_events(recorded("preflight-failed")):
            d.event(e)
    text = out.getvalue()
    assert not ANSI.search(text) and "\r" not in text
    lines = text.splitlines()
    assert all(re.match(r"^\[ *\d+:\d\d\] ", ln) for ln in lines)
    assert lines[0] == "[  0:00] PLAY Preflight | Check the inventory and every node [a3_nodes]"
    assert any(ln.endswith("  node2 FAILED: node2: cluster_ip 10.213.217.99 is not on any "
                           "interface of the node (it has docker0=172.17.0.1, "
                           "eth0=10.213.217.12). Fix: set cluster_ip to one of these, or "
                           "configure the address on the cluster NIC.") for ln in lines)
    assert sum("TASK " in ln for ln in lines) == 14


def test_plain_output_of_a_followed_job_prints_changes_not_every_poll(recorded):
    out = io.StringIO()
    with PlainDisplay(out, Tracker()) as d:
        for e in runs.load_events(recorded("train")):
            d.event(e)
    text = out.getvalue()
    assert text.count("a3rl-grpo-qwen3_32b-real-0da7b98c: ") == 4
    assert "retrying" not in text


def test_the_live_view_draws_hosts_transfers_and_the_job(recorded):
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    t = Tracker("playbooks/data.yml")
    live = LiveDisplay(console, t)  # not entered: rendered frame by frame
    frames = []
    for e in runs.load_events(recorded("data-transfers")):
        live.event(e)
        if e["event"] == "runner_item_on_ok" and "Send" in e["event_data"]["task"]:
            console.print(live.render(fold.event_time(e)))
            frames.append(buf.getvalue())
    assert len(frames) == 4
    last = frames[-1]
    assert "node2 send" in last and "4/4 files  17.6 kB / 17.6 kB" in last
    assert "node1 fetch" in last and "5 files  13.7 kB" in last
    assert re.search(r"node2\s+running\s+Artifacts \| Send the missing files", last)

    t2 = Tracker("playbooks/train.yml")
    live2 = LiveDisplay(console, t2)
    for e in runs.load_events(recorded("train")):
        live2.event(e)
        if e["event"] == "runner_retry" and e["event_data"]["res"]["progress"]["step"] == 1:
            buf.truncate(0)
            buf.seek(0)
            console.print(live2.render(fold.event_time(e)))
            frame = buf.getvalue()
    assert "job a3rl-grpo-qwen3_32b-real-0da7b98c" in frame
    assert "RUNNING  step 1/2  (simulated)" in frame and "perf/throughput=117.2" in frame
    assert re.search(r"node1\s+following\s+Train \| Follow the job until it ends", frame)


def test_live_only_on_a_terminal_that_redraws():
    class Stream(io.StringIO):
        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    assert progress.wants_live(Stream(True), {"TERM": "xterm"})
    assert not progress.wants_live(Stream(False), {"TERM": "xterm"})
    assert not progress.wants_live(Stream(True), {"TERM": "dumb"})
    assert not progress.wants_live(Stream(True), {"TERM": "xterm", "CI": "true"})
