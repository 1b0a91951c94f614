"""The training report: the recipe's published figures as data, markdown and PNG."""

from __future__ import annotations

import pytest

from a3rl.controller import report
from a3rl.node import metrics

TR = "\x1b[36m(TaskRunner pid=7001)\x1b[0m "


def _row(md: str, start: str) -> list[str]:
    """The cells of the markdown table row that starts with ``start``."""
    line = next(x for x in md.splitlines() if x.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


def _log(*steps: str) -> str:
    return "\n".join(["Job started", *(TR + s for s in steps), "Job finished"]) + "\n"


# A GRPO 32B run with SAM on 2 nodes: rollout time of the first step 2000 s.
GRPO_32B_LOG = _log(
    "step:1 - actor/pg_loss:0.012 - critic/score/mean:0.25 - response_length/mean:15000.5 - "
    "timing_s/gen:2050.0 - timing_s/generate_sequences:2000.0 - timing_s/step:3900.0 - "
    "perf/time_per_step:3900.0 - perf/throughput:150.0",
    "step:2 - actor/pg_loss:-0.004 - critic/score/mean:0.3125 - response_length/mean:14800.0 - "
    "timing_s/gen:1950.0 - timing_s/generate_sequences:1900.0 - timing_s/step:3700.0 - "
    "perf/time_per_step:3700.0 - perf/throughput:160.0",
)
GRPO_32B_PLAN = {
    "run": "grpo-qwen3_32b-real", "algo": "grpo", "model": "qwen3_32b", "weights": "real",
    "features": ["sam"], "nodes": 2,
    "entrypoint": "python3 -m verl.trainer.main_ppo", "config_name": "ppo_megatron_trainer",
    "overrides": ["trainer.nnodes=2", "trainer.n_gpus_per_node=16", "data.train_batch_size=32",
                  "+actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config.method=sam"],
}
STATUS = {"submission_id": "a3rl-grpo-qwen3_32b-real", "status": "SUCCEEDED",
          "message": "Job finished successfully.", "start_time": 1796112000000,
          "end_time": 1796119600000}


def test_published_32b_figures_follow_the_features():
    def gen(features):
        return [p["value"] for p in report.published("grpo", "qwen3_32b", features)]

    assert gen([]) == [2444.0]
    assert gen(["sam"]) == [2106.0]
    assert gen(["npugraph_ex", "SAM"]) == [1621.0]
    assert gen(["npugraph_ex"]) == []  # the recipe publishes nothing for it without SAM
    dapo = report.published("dapo", "Qwen3-32B", ["sam", "npugraph-ex"])
    assert [(p["metric"], p["value"], p["cards"], p["step"]) for p in dapo] == [
        ("timing_s/generate_sequences", 3261.0, 16, 1)]


def test_published_235b_figures_whatever_the_features():
    (grpo,) = report.published("grpo", "qwen3_235b", ["sam"])
    assert (grpo["metric"], grpo["value"], grpo["unit"], grpo["cards"], grpo["step"]) == (
        "perf/throughput", 120.0, "tokens/s per card", 64, None)
    (dapo,) = report.published("DAPO", "Qwen3-235B-A22B")
    assert (dapo["metric"], dapo["value"], dapo["step"]) == ("perf/time_per_step", 6620.0, 1)
    assert "2 generation batches" in dapo["note"]
    assert report.published("ppo", "qwen3_32b") == []
    dapo["value"] = 0  # callers get copies
    assert report.published("dapo", "qwen3_235b")[0]["value"] == 6620.0


def test_report_of_a_measured_run(tmp_path):
    steps = metrics.parse_log(GRPO_32B_LOG)
    md_path, png_path = report.render(tmp_path, GRPO_32B_PLAN, steps, STATUS)
    assert (md_path, png_path) == (tmp_path / "report.md", tmp_path / "metrics.png")
    md = md_path.read_text()
    assert md.startswith("# Training run grpo-qwen3_32b-real\n")
    assert "| submission id | `a3rl-grpo-qwen3_32b-real` |" in md
    assert "| job state | SUCCEEDED (Job finished successfully.) |" in md
    assert "| steps logged | 2 (steps 1 to 2) |" in md
    assert "| cluster | 2 nodes, 16 cards (32 NPU devices) |" in md
    assert "| features | sam |" in md
    assert "Simulated" not in md and "simulated" not in md.split("## Plan")[1]
    # the per-step table
    assert ("| step | perf/throughput | perf/time_per_step | timing_s/step | timing_s/gen | "
            "timing_s/generate_sequences | response_length/mean | critic/score/mean | "
            "actor/pg_loss |") in md
    assert "| 1 | 150.0 | 3900.0 | 3900.0 | 2050.0 | 2000.0 | 15000.5 | 0.25 | 0.012 |" in md
    assert "| 2 | 160.0 | 3700.0 | 3700.0 | 1950.0 | 1900.0 | 14800.0 | 0.3125 | -0.004 |" in md
    # the comparison: first-step rollout time against the SAM figure, 2000 / 2106
    cells = _row(md, "| timing_s/generate_sequences | SAM |")
    assert cells[2:7] == ["first step", "16 cards", "2000.0", "2106.0 s", f"{2000 / 2106:.2f}"]
    assert "cluster differs" not in cells[7]
    # the recipe's 32B figures were measured at GBS 128, its 32B run table says 32
    assert "batch differs: ours GBS 32" in cells[7]
    assert "2444" not in md and "1621" not in md  # only the run's own conditions


def test_ratio_of_a_whole_run_figure_is_against_the_mean(tmp_path):
    log = _log("step:1 - perf/throughput:100.0", "step:2 - perf/throughput:110.0",
               "step:3 - perf/throughput:nan")
    plan = {"algo": "grpo", "model": "qwen3_235b", "nodes": 8, "features": []}
    md = report.render(tmp_path, plan, metrics.parse_log(log), STATUS)[0].read_text()
    cells = _row(md, "| perf/throughput | not stated |")
    assert cells[2:7] == ["mean over the run", "64 cards", "105.0", "120.0 tokens/s per card",
                          "0.88"]
    assert "cluster differs" not in cells[7]
    assert "verl divides perf/throughput by the devices it counts" in cells[7]


def test_a_missing_metric_falls_back_and_says_so(tmp_path):
    log = _log("step:1 - timing_s/gen:2500.0")
    plan = {"algo": "dapo", "model": "qwen3_32b", "features": [], "nodes": 1}
    md = report.render(tmp_path, plan, metrics.parse_log(log), {})[0].read_text()
    assert "ours is timing_s/gen (the log has no timing_s/generate_sequences)" in md
    assert "cluster differs: ours 8 cards" in md
    assert f"| {2500 / 4562:.2f} |" in md


def test_the_png_is_a_real_plot_and_the_markdown_is_stable(tmp_path):
    steps = metrics.parse_log(GRPO_32B_LOG)
    md_path, png_path = report.render(tmp_path, GRPO_32B_PLAN, steps, STATUS)
    data = png_path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 1000 and height >= 600
    first = md_path.read_text()
    report.render(tmp_path, GRPO_32B_PLAN, steps, STATUS)
    assert md_path.read_text() == first
    assert "![metrics over steps](metrics.png)" in first


def test_a_simulated_run_says_its_figures_are_not_comparable(tmp_path):
    log = GRPO_32B_LOG.replace("step:1 - ", f"step:1 - {metrics.SIMULATED_KEY}:1 - ").replace(
        "step:2 - ", f"step:2 - {metrics.SIMULATED_KEY}:1 - ")
    steps = metrics.parse_log(log)
    assert all(s["simulated"] for s in steps)
    md = report.render(tmp_path, GRPO_32B_PLAN, steps, STATUS)[0].read_text()
    assert "> **Simulated run.**" in md
    assert "| figures | simulated (stand-in trainer) |" in md
    assert "**Not comparable: this run was simulated.**" in md
    cells = _row(md, "| timing_s/generate_sequences | SAM |")
    assert cells[4:7] == ["2000.0", "2106.0 s", "not comparable (simulated)"]
    assert _row(md, "| 1 |")[:2] == ["1", "150.0"]  # the marker is no metric column


def test_a_real_verl_cpu_run_is_labelled_and_lists_what_its_profile_replaced(tmp_path):
    from a3rl.sim import cpu_profile

    plan = {**GRPO_32B_PLAN, "config_name": "ppo_trainer", "label": cpu_profile.LABEL,
            "replaced": ["trainer.device: npu -> cpu (no NPU on the simulator)",
                         "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8: "
                         "dropped (Megatron needs NPUs)"]}
    md = report.render(tmp_path, plan, metrics.parse_log(GRPO_32B_LOG), STATUS)[0].read_text()
    label = "real verl on CPU, tiny model: not comparable with the recipe's figures"
    assert f"> **{label}.**" in md and f"| figures | measured: {label} |" in md
    assert "### Replaced by the site's job profile" in md
    assert "- `trainer.device: npu -> cpu` (no NPU on the simulator)" in md
    cells = _row(md, "| timing_s/generate_sequences | SAM |")
    assert cells[6] == "not comparable (real verl on CPU, tiny model)"


def test_a_run_with_no_steps_says_so(tmp_path):
    md_path, png_path = report.render(tmp_path / "runs" / "a3rl-x", None, [],
                                      {"submission_id": "a3rl-x", "status": "FAILED"})
    md = md_path.read_text()
    assert "| job state | FAILED |" in md and "| steps logged | none |" in md
    assert "**No training step was logged**" in md
    assert "No plan was given with this run." in md
    assert "cannot be matched with a published figure" in md
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plan_without_a_published_figure(tmp_path):
    plan = {"algo": "grpo", "model": "qwen3_32b", "features": ["npugraph_ex"]}
    md = report.render(tmp_path, plan, metrics.parse_log(GRPO_32B_LOG), STATUS)[0].read_text()
    assert "The recipe publishes no figure for grpo on qwen3_32b" in md


@pytest.mark.parametrize(("plan", "facts"), [
    ({"entrypoint": "python3 -m verl.trainer.main_dapo",
      "overrides": ["trainer.nnodes=8", "trainer.n_gpus_per_node=16"]},
     {"algo": "dapo", "nodes": 8, "cards": 64, "devices": 128}),
    ({"entrypoint": "python3 -m verl.trainer.main_ppo",
      "overrides": ["algorithm.adv_estimator=grpo", "trainer.nnodes=2"]},
     {"algo": "grpo", "nodes": 2, "cards": 16, "devices": 32}),
])
def test_plan_facts_from_the_rendered_job(plan, facts):
    got = report._plan_facts(plan)
    assert {k: got[k] for k in facts} == facts


def test_the_goodput_table_shows_the_checkpoint_overhead_and_every_time_to_detection(tmp_path):
    steps = metrics.parse_log(GRPO_32B_LOG)
    figures = {"goodput": 0.5, "wall_s": 1000.0, "productive_s": 500.0, "redone_s": 0.0,
               "restart_s": 500.0, "restarts": 2, "save_s": 25.0,
               "checkpoint_overhead": 0.025}
    events = [{"time": 1, "event": "hang", "bound": "stall", "detection_s": 71.4,
               "why": "no progress"},
              {"time": 2, "event": "failed", "detection_s": 3.0, "why": "the job failed"},
              {"time": 3, "event": "succeeded"}]
    md, _ = report.render(tmp_path, GRPO_32B_PLAN, steps, STATUS, goodput=figures,
                          supervisor={"result": "succeeded", "events": events})
    text = md.read_text()
    assert _row(text, "| checkpoint overhead (save / wall)")[1] == "2.5% (25.0 s)"
    assert _row(text, "| time to detection")[1] == "hang (stall bound) 71 s; failed 3 s"
