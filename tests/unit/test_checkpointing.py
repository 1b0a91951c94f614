"""The checkpoint policy in the plan, the resumed attempt's job, the node-side scan of a
run's checkpoints (verl 0.6.0's layout: global_step_<N>/ with actor/ and data.pt, then
latest_checkpointed_iteration.txt) and the run's goodput."""

from __future__ import annotations

from pathlib import Path

import pytest

from a3rl.controller import goodput
from a3rl.node import checkpoints
from a3rl.paths import project_root
from a3rl.planning import checkpointing, plan

ROOT = project_root()
SHARED = {"enabled": "", "root": "/shared/checkpoints", "shared": True,
          "max_lost_minutes": 60, "keep": 2}


def _job(algo="grpo", model="qwen3_32b", weights="real", nodes=2, ck=SHARED, extra=None):
    return plan.plan_from_files(ROOT, algo, model, weights, None, nodes, 16, "/data/a3rl",
                                "/data/a3rl/llm_rl/qwen3", extra_overrides=extra,
                                checkpointing=ck).job()


def _ov(job, key):
    hits = [o.split("=", 1)[1] for o in job["overrides"] if o.split("=", 1)[0] == key]
    assert len(hits) <= 1, hits
    return hits[0] if hits else None


def test_a_real_weight_run_saves_every_step_when_a_step_exceeds_the_bound():
    job = _job()
    assert _ov(job, "trainer.save_freq") == "1"
    assert _ov(job, "trainer.max_actor_ckpt_to_keep") == "2"
    assert _ov(job, "trainer.default_local_dir") == f"/shared/checkpoints/{job['run_id']}"
    assert job["checkpoint"]["dir"] == f"/shared/checkpoints/{job['submission_id']}"
    assert job["checkpoint"]["bytes_per_checkpoint"] == int(32.8e9 * 14)


def test_save_freq_is_the_bound_over_the_step_time():
    # A 10-minute step and a 60-minute bound: a checkpoint every 6 steps.
    pol = checkpointing.policy(enabled=True, weights="real", nodes=2, root="/s", shared=True,
                               max_lost_minutes=60, keep=3, step_seconds=600,
                               step_source="test", params=1e9, problems=(p := []))
    assert p == [] and pol.save_freq == 6 and pol.keep == 3
    pol = checkpointing.policy(enabled=True, weights="real", nodes=2, root="/s", shared=True,
                               max_lost_minutes=60, keep=3, step_seconds=601,
                               step_source="test", params=1e9, problems=(p := []))
    assert pol.save_freq == 5


def test_measured_steps_replace_the_published_estimate():
    job = _job(ck={**SHARED, "max_lost_minutes": 10, "step_seconds": 60})
    assert _ov(job, "trainer.save_freq") == "10"
    assert "measured" in " ".join(job["checkpoint"]["why"])
    assert checkpointing.measured_step_seconds(
        [{"timing_s/step": 3.0}, {"timing_s/step": 1.0}, {"timing_s/step": float("nan")},
         {"timing_s/step": 2.0}, {}]) == 2.0


def test_random_weight_runs_keep_the_recipes_no_checkpoint_unless_asked():
    job = _job(model="qwen3_235b", weights="random", nodes=8)
    assert _ov(job, "trainer.save_freq") == "-1"
    assert _ov(job, "trainer.default_local_dir") is None
    assert "random-weight run" in job["checkpoint"]["why"][0]
    on = _job(model="qwen3_235b", weights="random", nodes=8, ck={**SHARED, "enabled": "true"})
    assert _ov(on, "trainer.save_freq") == "1"


def test_turned_off_keeps_the_recipes_value_and_says_so():
    job = _job(ck={**SHARED, "enabled": "false"})
    assert _ov(job, "trainer.save_freq") == "-1" and not job["checkpoint"]["enabled"]


def test_several_nodes_without_shared_storage_are_refused_naming_the_fix():
    with pytest.raises(plan.PlanError) as e:
        _job(ck={**SHARED, "shared": False})
    assert "checkpoints on 2 nodes need a folder every node mounts" in str(e.value)
    assert "a3rl_shared_dir" in str(e.value) and "train_job_checkpoint=false" in str(e.value)


@pytest.mark.parametrize(("setting", "needle"), [
    ({"enabled": "maybe"}, "train_job_checkpoint 'maybe' is not true, false"),
    ({"keep": 0}, "train_job_checkpoint_keep must be a positive whole number"),
    ({"keep": "two"}, "train_job_checkpoint_keep must be a positive whole number"),
    ({"max_lost_minutes": -5}, "train_job_checkpoint_max_lost_minutes must be a positive"),
    ({"max_lost_minutes": "inf"}, "train_job_checkpoint_max_lost_minutes must be a positive"),
    ({"root": "checkpoints"}, "train_job_checkpoint_dir 'checkpoints' is not an absolute"),
])
def test_bad_settings_are_refused(setting, needle):
    with pytest.raises(plan.PlanError) as e:
        _job(ck={**SHARED, **setting})
    assert needle in str(e.value)


def test_the_policys_keys_are_not_overridden_by_hand():
    with pytest.raises(plan.PlanError) as e:
        _job(extra=["trainer.save_freq=5"])
    assert "trainer.save_freq is set by the checkpoint policy" in str(e.value)
    # Without a policy (a3rl plan, drift) the recipe's key is the user's to set.
    job = _job(ck=None, extra=["trainer.save_freq=5"])
    assert _ov(job, "trainer.save_freq") == "5"


def test_the_run_id_does_not_depend_on_where_checkpoints_go():
    a = _job()
    b = _job(ck={**SHARED, "root": "/elsewhere"})
    assert a["submission_id"] == b["submission_id"]
    assert _ov(b, "trainer.default_local_dir") == f"/elsewhere/{a['submission_id']}"
    assert _job(ck={**SHARED, "keep": 3})["submission_id"] != a["submission_id"]


def test_space_check_wants_room_for_one_more_than_kept():
    pol = {"enabled": True, "keep": 2, "bytes_per_checkpoint": 100}
    assert checkpointing.space_problems(pol, 300, "node1: /s") == []
    problems = checkpointing.space_problems(pol, 299, "node1: /s")
    assert problems and "node1: /s: 299 bytes free, 3 checkpoints" in problems[0]
    assert "Nothing was submitted" in problems[0]
    assert checkpointing.space_problems({**pol, "enabled": False}, 0, "x") == []


def test_a_resumed_attempt_has_its_own_id_and_resumes_from_the_folder():
    job = _job()
    again = checkpointing.resume_job(job, job["run_id"], 2,
                                     f"{job['checkpoint']['dir']}/global_step_2")
    assert again["submission_id"] == f"{job['run_id']}-r2" and again["attempt"] == 2
    assert _ov(again, "trainer.resume_mode") == "resume_path"
    assert _ov(again, "trainer.resume_from_path").endswith("/global_step_2")
    assert "trainer.resume_mode=resume_path" in again["entrypoint"]
    assert again["entrypoint"].startswith(job["entrypoint"].split(" --config-name=")[0])
    # A later resume replaces the earlier resume's keys instead of adding to them.
    third = checkpointing.resume_job(again, job["run_id"], 3, None)
    assert _ov(third, "trainer.resume_mode") == "disable"
    assert _ov(third, "trainer.resume_from_path") is None
    with pytest.raises(ValueError):
        checkpointing.resume_job(job, job["run_id"], 1, None)


def test_attempts_are_found_and_numbered_by_run():
    jobs = [{"submission_id": "run-a"}, {"submission_id": "run-a-r2"},
            {"submission_id": "run-a-r10"}, {"submission_id": "run-ab"},
            {"submission_id": "run-ab-r3"}, {"submission_id": "other-r2"}]
    assert [j["submission_id"] for j in checkpointing.attempts("run-a", jobs)] == [
        "run-a", "run-a-r2", "run-a-r10"]
    assert checkpointing.next_attempt("run-a", jobs) == 11
    assert checkpointing.next_attempt("run-ab", jobs) == 4
    assert checkpointing.next_attempt("new", jobs) == 1


def _save(run: Path, step: int, actor: bool = True, data: bool = True) -> None:
    folder = run / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    if actor:
        (folder / "actor" / "model_world_size_2_rank_0.pt").write_bytes(b"x")
    if data:
        (folder / "data.pt").write_bytes(b"x")


def test_the_newest_complete_checkpoint_skips_the_ones_the_marker_does_not_cover(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step)
    (tmp_path / checkpoints.MARKER).write_text("2")
    newest, skipped = checkpoints.newest_complete(str(tmp_path))
    assert newest["step"] == 2
    assert skipped == ["global_step_3 has no completion marker: "
                       "latest_checkpointed_iteration.txt names step 2, so its save did "
                       "not finish"]


def test_an_incomplete_checkpoint_under_the_marker_is_skipped(tmp_path):
    _save(tmp_path, 1)
    _save(tmp_path, 2, data=False)
    _save(tmp_path, 3, actor=False)
    (tmp_path / checkpoints.MARKER).write_text("3")
    newest, skipped = checkpoints.newest_complete(str(tmp_path))
    assert newest["step"] == 1
    assert "global_step_3 is incomplete: actor/ holds no shard" in skipped[0]
    assert "global_step_2 is incomplete: data.pt" in skipped[1]


def test_without_a_marker_nothing_is_complete(tmp_path):
    _save(tmp_path, 1)
    newest, skipped = checkpoints.newest_complete(str(tmp_path))
    assert newest is None and "latest_checkpointed_iteration.txt is missing" in skipped[0]
    assert checkpoints.newest_complete(str(tmp_path / "none")) == (None, [])


def test_free_space_is_read_at_the_nearest_existing_folder(tmp_path):
    free, at = checkpoints.free_bytes(str(tmp_path / "a" / "b"))
    assert at == str(tmp_path) and free > 0


def test_goodput_counts_each_step_once_and_the_rest_as_lost():
    attempts = [{"start_time": 0, "end_time": 100_000}, {"start_time": 130_000,
                                                         "end_time": 200_000}]
    first = [{"step": 1, "timing_s/step": 20.0}, {"step": 2, "timing_s/step": 20.0},
             {"step": 3, "timing_s/step": 20.0}]
    # Resumed after step 2's checkpoint: step 3 runs again, then 4.
    second = [{"step": 3, "timing_s/step": 25.0}, {"step": 4, "timing_s/step": 20.0}]
    g = goodput.goodput(attempts, [first, second])
    assert g["wall_s"] == 200.0 and g["restarts"] == 1 and g["steps"] == 4
    assert g["productive_s"] == 85.0 and g["redone_s"] == 20.0
    assert g["restart_s"] == 200.0 - 105.0 and g["lost_s"] == 115.0
    assert g["goodput"] == round(85 / 200, 4)
    running = goodput.goodput([{"start_time": 1000}], [[]], now_ms=11_000)
    assert running["wall_s"] == 10.0 and running["goodput"] == 0.0


def test_the_stand_ins_step_times_give_no_goodput():
    """The stand-in trainer prints the recipe's step times (hours) for a run of seconds:
    counted, its goodput came out at 69,945 %."""
    attempts = [{"start_time": 0, "end_time": 10_000}]
    g = goodput.goodput(attempts, [[{"step": 1, "timing_s/step": 3500.0, "simulated": True}]])
    assert g["goodput"] is None and g["productive_s"] is None and g["simulated"]
    assert g["wall_s"] == 10.0 and g["restarts"] == 0


def test_the_runs_table_shows_a_resumed_attempts_restarts_and_finds_its_report(tmp_path):
    from a3rl.controller import runs

    assert checkpointing.run_id_of("a3rl-grpo-x-1234abcd-r3") == "a3rl-grpo-x-1234abcd"
    assert checkpointing.run_id_of("a3rl-grpo-x-1234abcd") == "a3rl-grpo-x-1234abcd"
    assert runs._training_cell({"submission_id": "run-r3", "status": "SUCCEEDED"}) == \
        "run-r3 SUCCEEDED (2 restarts)"
    assert runs._training_cell({"submission_id": "run", "status": "FAILED"}) == "run FAILED"
    record = tmp_path / "20261205-120000-train"
    record.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.md").write_text("x")
    assert runs.training_report(record, {"submission_id": "run-r2"}) == \
        tmp_path / "run" / "report.md"


def test_the_first_step_bound_is_the_override_or_three_steps_and_the_load():
    assert checkpointing.hang_first_step_seconds(600, 7780) == 600.0
    assert checkpointing.hang_first_step_seconds(0, 7780) == 3 * 7780 + 1800
    assert checkpointing.hang_first_step_seconds("0", None) == 1800 + 1800
    assert checkpointing.hang_first_step_seconds(0, 100) == 1800 + 1800


def test_a_run_folder_that_is_a_link_or_open_to_others_is_never_resumed_from(tmp_path):
    # A local user who plants the run's predictable folder (or a link to theirs) must not
    # get root to load their checkpoint.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    _save(theirs, 4)
    (theirs / checkpoints.MARKER).write_text("4")
    (tmp_path / "run").symlink_to(theirs)
    newest, skipped = checkpoints.newest_complete(str(tmp_path / "run"))
    assert newest is None and "is a symbolic link" in skipped[0], skipped
    theirs.chmod(0o777)
    newest, skipped = checkpoints.newest_complete(str(theirs))
    assert newest is None and "writable by other users (mode 0777)" in skipped[0], skipped


def test_a_checkpoint_that_is_a_link_is_skipped_for_an_older_own_one(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    _save(run, 1)
    _save(elsewhere, 2)
    (run / "global_step_2").symlink_to(elsewhere / "global_step_2")
    (run / checkpoints.MARKER).write_text("2")
    newest, skipped = checkpoints.newest_complete(str(run))
    assert newest["step"] == 1
    assert skipped == [f"global_step_2 is a symlink to {elsewhere}/global_step_2, not a "
                       "folder verl wrote"]


def test_the_save_interval_is_young_daly_capped_by_the_lost_work_bound():
    # 64 cards at the Llama 3 rate (419 failures in 54 days on 16,384 GPUs): 33 days.
    assert round(checkpointing.mtbf_seconds(64) / 86400, 1) == 33.0
    assert checkpointing.mtbf_seconds(32) == 2 * checkpointing.mtbf_seconds(64)
    # sqrt(2 x 50 s x 360,000 s) = 6,000 s = 6 steps of 1,000 s; the cap of 10 is above.
    got = checkpointing.young_daly(50, 1000, 360_000, 10)
    assert got["save_freq"] == 6 and got["interval_s"] == 6000
    assert "capped" not in got["why"]
    assert checkpointing.young_daly(50, 1000, 360_000, 4)["save_freq"] == 4
    assert checkpointing.young_daly(0, 1000, 360_000, 4)["save_freq"] == 1
    with pytest.raises(ValueError, match="step_s=0"):
        checkpointing.young_daly(50, 0, 360_000, 4)


def test_the_measured_save_time_sets_the_resumed_jobs_save_freq():
    job = {"overrides": ["trainer.save_freq=10", "data.x=1"]}
    steps = [{"step": i, "timing_s/step": 1000.0, "timing_s/save_checkpoint": 50.0}
             for i in (1, 2, 3)]
    got = checkpoints.measured_save_freq(job, steps, 64, mtbf_s=360_000)
    assert got["save_freq"] == 6 and "a save takes 50.0 s (measured)" in got["why"]
    assert checkpoints.with_save_freq(job, 6)["overrides"] == ["trainer.save_freq=6", "data.x=1"]
    # No save measured, or a job that never saves: nothing to choose.
    assert checkpoints.measured_save_freq(job, [{"step": 1, "timing_s/step": 9.0}], 64) is None
    never = {"overrides": ["trainer.save_freq=-1"]}
    assert checkpoints.measured_save_freq(never, steps, 64) is None


def test_goodput_shows_the_checkpoint_overhead():
    attempts = [{"start_time": 0, "end_time": 100_000}]
    steps = [{"step": 1, "timing_s/step": 20.0, "timing_s/save_checkpoint": 4.0},
             {"step": 2, "timing_s/step": 20.0, "timing_s/save_checkpoint": 6.0}]
    g = goodput.goodput(attempts, [steps])
    assert g["save_s"] == 10.0 and g["checkpoint_overhead"] == 0.1
