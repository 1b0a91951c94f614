"""verl's console metric lines, as a Ray job log carries them, parsed into steps."""

from __future__ import annotations

import json
import math

import pytest

from a3rl.node import metrics

CYAN, RESET = "\x1b[36m", "\x1b[0m"
TR = f"{CYAN}(TaskRunner pid=45210){RESET} "

# A GRPO job log as `ray job logs` gives it: the driver's own output, Ray's prefixed worker
# lines, tqdm's progress bar with carriage returns, verl 0.6.0's console lines
# (`concat_dict_to_str`: "step:N" then "key:pformat(value)" joined by " - "), and the
# validation-only line verl logs at step 0 before training.
JOB_LOG = "\n".join([
    "2026-12-01 10:00:01,123\tINFO job_manager.py:530 -- Runtime env is setting up.",
    f"{TR}TaskRunner hostname: a3-node-0, PID: 45210",
    f"{CYAN}(WorkerDict pid=46001, ip=10.0.0.2){RESET} INFO 12-01 10:02:11 [model_runner.py:1108]"
    " Loading model weights took 61.0293 GB",
    f"{TR}step:0 - val-core/deepscaler/reward/mean@1:0.3125 - val-aux/num_turns/min:2",
    f"{TR}Training Progress:   0%|          | 0/3 [00:00<?, ?it/s]",
    f"{TR}step:1 - actor/entropy:0.45123291015625 - actor/pg_loss:-0.0021972656 - "
    "actor/kl_loss:1.2e-05 - actor/grad_norm:nan - actor/lr:1e-06 - "
    "critic/score/mean:0.28125 - response_length/mean:12034.5 - "
    "response_length/max:32768 - training/global_step:1 - training/epoch:0 - "
    "timing_s/generate_sequences:2101.37 - timing_s/gen:2150.2 - timing_s/step:4875.11 - "
    "perf/total_num_tokens:8912345 - perf/time_per_step:4875.11 - perf/throughput:114.25",
    "(raylet, ip=10.0.0.3) [2026-12-01 11:23:10] some raylet warning",
    f"{TR}Training Progress:  33%|###3      | 1/3 [1:21:15<2:42:30, 4875.11s/it]\r"
    f"{TR}step:2 - actor/pg_loss:0.0135 - critic/score/mean:0.3 - perf/throughput:inf - "
    "timing_s/step:4790 - perf/time_per_step:4790",
    f"{CYAN}(TaskRunner pid=45210){RESET} step:3 - actor/pg_loss:np.float64(-0.5) - "
    "perf/throughput:121.0 - train/num_gen_batches:np.int64(2) - "
    "response/aborted_ratio:0.0 - perf/time_per_step:4700.5",
    "",
])


def test_a_job_log_gives_one_record_per_training_step():
    steps = metrics.parse_log(JOB_LOG)
    assert [s["step"] for s in steps] == [1, 2, 3]
    first = steps[0]
    assert list(first)[0] == "step" and isinstance(first["step"], int)
    assert first["perf/throughput"] == 114.25
    assert first["timing_s/generate_sequences"] == 2101.37
    assert first["actor/kl_loss"] == 1.2e-05
    assert first["actor/lr"] == 1e-06
    assert first["actor/pg_loss"] == -0.0021972656
    assert first["response_length/max"] == 32768 and isinstance(first["response_length/max"], int)
    assert math.isnan(first["actor/grad_norm"])
    assert "simulated" not in first
    assert steps[1]["perf/throughput"] == math.inf
    assert steps[1]["timing_s/step"] == 4790
    assert steps[2]["actor/pg_loss"] == -0.5
    assert steps[2]["train/num_gen_batches"] == 2


def test_validation_only_lines_are_not_steps():
    steps = metrics.parse_log(JOB_LOG)
    assert all(not k.startswith("val-") for s in steps for k in s)


@pytest.mark.parametrize("line", [
    "step:7 - a/b:1.5",
    "(TaskRunner pid=1) step:7 - a/b:1.5",
    "(TaskRunner pid=1, ip=192.168.3.21) step:7 - a/b:1.5",
    "(pid=88) step:7 - a/b:1.5",
    "\x1b[35m(TaskRunner pid=1)\x1b[0m step:7 - a/b:1.5\x1b[0m",
    "  step:7 - a/b:1.5  ",
    "(TaskRunner pid=1) step:7 - a/b:1.5\x1b[32m [repeated 2x across cluster] (Ray deduplicates"
    " logs by default.)\x1b[0m",
])
def test_prefixes_colours_and_ray_dedup_trailers_are_stripped(line):
    assert metrics.parse_log(line) == [{"step": 7, "a/b": 1.5}]


@pytest.mark.parametrize(("raw", "value"), [
    ("0", 0), ("-3", -3), ("512", 512), ("0.1", 0.1), ("-2.5e-07", -2.5e-07),
    ("1e+20", 1e20), ("-inf", -math.inf), ("True", 1), ("False", 0),
    ("np.float32(0.25)", 0.25), ("np.int64(-4)", -4),
])
def test_numbers_as_pprint_writes_them(raw, value):
    assert metrics.parse_log(f"step:1 - m:{raw}")[0]["m"] == value


def test_unparseable_fields_are_dropped_and_other_lines_ignored():
    text = "\n".join([
        "step:1 - good:1.0 - bad:tensor(3.) - nocolon - x/y:2",
        "stepping:4 - a:1",
        "global step:5 - a:1",
        "Epoch 1 step:3 loss 0.2",
        "step:9",
        "step:2 - only:words",
        "INFO step:6 - a:1",
    ])
    assert metrics.parse_log(text) == [{"step": 1, "good": 1.0, "x/y": 2}]


def test_a_resumed_step_keeps_its_last_line():
    text = "\n".join([
        f"{TR}step:1 - perf/throughput:100.0",
        f"{TR}step:2 - perf/throughput:50.0 - actor/pg_loss:0.1",
        "job restarted from global_step_1",
        f"{TR}step:1 - val-core/deepscaler/reward/mean@1:0.4",
        f"{TR}step:2 - perf/throughput:110.0",
        f"{TR}step:3 - perf/throughput:111.0",
    ])
    steps = metrics.parse_log(text)
    assert steps == [{"step": 1, "perf/throughput": 100.0},
                     {"step": 2, "perf/throughput": 110.0},
                     {"step": 3, "perf/throughput": 111.0}]


def test_the_stand_in_marker_becomes_simulated():
    line = f"{TR}step:4 - {metrics.SIMULATED_KEY}:1 - perf/throughput:99.5"
    assert metrics.parse_log(line) == [{"step": 4, "simulated": True, "perf/throughput": 99.5}]
    assert metrics.parse_log("step:4 - a3rl/simulated:0 - x:1") == [{"step": 4, "x": 1}]


def test_jsonl_round_trip_keeps_nan_and_inf_as_strict_json(tmp_path):
    steps = metrics.parse_log(JOB_LOG)
    path = metrics.write_jsonl(tmp_path / "runs" / "grpo-1" / "metrics.jsonl", steps)
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    for line in lines:  # strict JSON: no bare NaN/Infinity
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    back = metrics.read_jsonl(path)
    assert [s["step"] for s in back] == [1, 2, 3]
    assert math.isnan(back[0]["actor/grad_norm"]) and back[1]["perf/throughput"] == math.inf
    assert {k: v for k, v in back[0].items() if k != "actor/grad_norm"} == {
        k: v for k, v in steps[0].items() if k != "actor/grad_norm"}
    assert not (path.parent / "metrics.jsonl.tmp").exists()


def test_summary_first_step_means_and_count():
    s = metrics.summary(metrics.parse_log(JOB_LOG))
    assert s["count"] == 3 and s["first_step"] == 1 and s["last_step"] == 3
    assert s["simulated"] is False
    assert s["first"]["perf/throughput"] == 114.25
    assert s["first"]["timing_s/generate_sequences"] == 2101.37
    # inf at step 2 is left out of the mean
    assert s["mean"]["perf/throughput"] == pytest.approx((114.25 + 121.0) / 2)
    assert s["mean"]["perf/time_per_step"] == pytest.approx((4875.11 + 4790 + 4700.5) / 3)
    assert "timing_s/update_actor" not in s["mean"]


def test_summary_of_nothing():
    s = metrics.summary([])
    assert s["count"] == 0 and s["first"] == {} and s["mean"] == {} and s["first_step"] is None


def test_progress_is_the_latest_step_and_the_total_so_far():
    head = f"{TR}Total training steps: 3\n"
    # Only the first two steps are in the log yet; step 2's inf throughput is left out.
    text = head + JOB_LOG.split(f"{CYAN}(TaskRunner pid=45210){RESET} step:3")[0]
    got = metrics.progress(text)
    assert (got["step"], got["total_steps"]) == (2, 3)
    assert got["metrics"] == {"actor/pg_loss": 0.0135, "critic/score/mean": 0.3,
                              "timing_s/step": 4790, "perf/time_per_step": 4790}
    json.dumps(got, allow_nan=False)  # a module returns it: strict JSON
    assert metrics.progress_line(got) == (
        "step 2/3: perf/time_per_step=4790 timing_s/step=4790 critic/score/mean=0.3 "
        "actor/pg_loss=0.0135")


def test_progress_before_any_step_and_without_a_total():
    got = metrics.progress("2026-12-01 INFO job_manager.py -- Runtime env is setting up.\n")
    assert got == {"step": None, "total_steps": None, "simulated": False, "metrics": {}}
    assert metrics.progress_line(got) == "no step logged yet"
    one = metrics.progress("step:1 - a3rl/simulated:1 - perf/throughput:5.0\n")
    assert metrics.progress_line(one) == "step 1: perf/throughput=5 (simulated)"


def test_progress_of_a_long_log_parses_its_end_and_finds_the_total_anywhere():
    filler = "(WorkerDict pid=9) INFO vllm engine: request finished\n" * 20000  # ~1 MB
    text = (f"{TR}Total training steps: 500\n" + f"{TR}step:1 - perf/throughput:1.0\n"
            + filler + f"{TR}step:2 - perf/throughput:2.0\n" + filler[:1000])
    assert len(text) > 4 * metrics.PROGRESS_TAIL
    got = metrics.progress(text)
    assert (got["step"], got["total_steps"], got["metrics"]) == (2, 500, {"perf/throughput": 2.0})
