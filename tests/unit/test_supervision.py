"""The run supervisor's settings and the checkpoint policy's input, typed in the training
play's check phase before it submits (a3rl.planning.supervision, the a3rl_supervisor_settings
and a3rl_checkpoint_input filters): a value that is not its type is refused naming its
variable and the host, never cast to 0 or false after the job is submitted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from a3rl.node import supervisor
from a3rl.planning import supervision
from tests.unit.test_one_source import _strings

ROOT = Path(__file__).parents[2]
DEFAULTS = yaml.safe_load((ROOT / "roles/run_supervisor/defaults/main.yml").read_text())
CHECKPOINT = {"train_job_checkpoint": "", "train_job_checkpoint_dir": "/shared/ckpt",
              "train_job_checkpoint_shared": True,
              "train_job_checkpoint_max_lost_minutes": 60, "train_job_checkpoint_keep": 2}


def _filters():
    import importlib.util

    spec = importlib.util.spec_from_file_location("a3rl_filters",
                                                  ROOT / "plugins/filter/a3rl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def test_the_roles_defaults_give_every_setting_as_its_type():
    got = supervision.supervisor_settings({}, DEFAULTS, 0, 120.0, "head")
    assert set(got) == set(supervisor.SETTINGS)
    assert got["poll_s"] == 30.0 and got["max_tries"] == 3 and got["net_check"] is True
    assert type(got["max_tries"]) is int and type(got["log_lines"]) is int
    # 0 = from the plan: max(1800, 3 x 120) + 1800.
    assert got["hang_first_step_s"] == 3600.0
    assert supervisor.config_problems({"run_id": "r", "submission_id": "r", "state_dir": "/s",
                                       "url": "u", "nodes": {"a": 1}, "job": {"x": 1},
                                       **got}) == []


def test_values_given_with_e_as_strings_are_read_as_their_types():
    values = {"run_supervisor_poll": "5", "run_supervisor_max_tries": "0",
              "run_supervisor_net_check": "false", "run_supervisor_hang_first_step": "900"}
    got = supervision.supervisor_settings(values, DEFAULTS, "7200", None, "head")
    assert (got["poll_s"], got["max_tries"], got["net_check"], got["hang_first_step_s"]) == (
        5.0, 0, False, 900.0)
    got = supervision.supervisor_settings({}, DEFAULTS, "7200", None, "head")
    assert got["hang_first_step_s"] == 7200.0


@pytest.mark.parametrize(("values", "first_step", "needles"), [
    ({"run_supervisor_poll": "30s"}, 0, ["head: run_supervisor_poll '30s' is not a number"]),
    ({"run_supervisor_hang_floor": "nan"}, 0, ["run_supervisor_hang_floor 'nan'"]),
    ({"run_supervisor_max_tries": "-1", "run_supervisor_whole_timeout": "2h"}, 0,
     ["run_supervisor_max_tries '-1' is not a whole number at least 0",
      "run_supervisor_whole_timeout '2h'"]),
    ({"run_supervisor_net_check": "maybe"}, 0, ["run_supervisor_net_check 'maybe'"]),
    ({}, "2h", ["train_job_supervisor_hang_first_step '2h'"]),
    ({"run_supervisor_backoff": 600, "run_supervisor_backoff_max": 60}, 0,
     ["run_supervisor_backoff_max 60 is below run_supervisor_backoff 600"]),
])
def test_a_setting_that_is_not_its_type_is_refused_before_the_submit(values, first_step,
                                                                      needles):
    with pytest.raises(AnsibleFilterError) as got:
        _filters()["a3rl_supervisor_settings"](values, DEFAULTS, first_step, 60.0, "head")
    text = str(got.value)
    assert all(n in text for n in needles), text
    assert "Fix:" in text and text.endswith("Nothing was submitted.")


def test_a_checkpoint_folder_sharing_that_is_not_true_or_false_is_refused():
    check = _filters()["a3rl_checkpoint_input"]
    assert check({**CHECKPOINT, "train_job_checkpoint_shared": "yes"}, "head") == {
        "enabled": "", "root": "/shared/ckpt", "shared": True, "max_lost_minutes": 60,
        "keep": 2}
    with pytest.raises(AnsibleFilterError, match="head: train_job_checkpoint_shared 'maybe' "
                       "is not true or false. Fix: -e train_job_checkpoint_shared=true"):
        check({**CHECKPOINT, "train_job_checkpoint_shared": "maybe"}, "head")
    with pytest.raises(AnsibleFilterError, match="train_job_checkpoint_dir 5 is not"):
        check({**CHECKPOINT, "train_job_checkpoint_dir": 5}, "head")


def test_the_play_types_them_in_its_check_phase_and_the_start_casts_nothing():
    check = (ROOT / "roles/train_job/tasks/check.yml").read_text()
    assert "a3rl_supervisor_settings(" in check and "a3rl_checkpoint_input(" in check
    assert "train_job_checkpoint_shared | bool" not in check
    start = (ROOT / "roles/run_supervisor/tasks/start.yml").read_text()
    assert "combine(run_supervisor_settings)" in start
    for cast in ("| int", "| float", "| bool"):
        assert not [line for line in start.splitlines()
                    if "run_supervisor_" in line and cast in line], cast


def test_no_file_of_the_run_is_written_to_a_name_in_tmp_anyone_could_guess():
    # /tmp/a3rl-<id>.tail, .log and -supervisor.tgz were root's, under ids `a3rl plan`
    # prints: a local user's symlink there made root overwrite any file.
    for role in ("train_job", "run_supervisor"):
        for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml")):
            planted = [s for s in _strings(yaml.safe_load(path.read_text())) if "/tmp/" in s]
            assert planted == [], (path.name, planted)
    follow = yaml.safe_load((ROOT / "roles/train_job/tasks/follow_private.yml").read_text())
    made = follow[0]["ansible.builtin.tempfile"]
    assert made["state"] == "directory" and follow[0]["register"] == "train_job_scratch"
    removed = follow[1]["always"][0]["ansible.builtin.file"]
    assert removed == {"path": "{{ train_job_scratch.path }}", "state": "absent"}
    assert follow[1]["block"][0]["ansible.builtin.include_tasks"] == "follow.yml"
    body = (ROOT / "roles/train_job/tasks/follow.yml").read_text()
    assert body.count("{{ train_job_scratch.path }}/") == 5


PLAN = {"run_id": "run-1", "submission_id": "run-1", "config_name": "ppo_trainer",
        "entrypoint": "python3 -m verl.trainer.main_ppo --config-path=/c "
                      "--config-name=ppo_trainer trainer.save_freq=5 "
                      "trainer.default_local_dir=/ck/run-1",
        "overrides": ["trainer.save_freq=5", "trainer.default_local_dir=/ck/run-1"],
        "checkpoint": {"enabled": True, "dir": "/ck/run-1"}}


def _run_task(tmp_path: Path, tasks: str, name: str, variables: dict) -> dict:
    """One task of a train_job task file run by ansible-playbook on the controller; the
    train_job_plan it leaves."""
    import json
    import subprocess
    import sys

    task = next(t for t in yaml.safe_load((ROOT / "roles/train_job/tasks" / tasks).read_text())
                if t["name"] == name)
    play = [{"hosts": "localhost", "gather_facts": False, "vars": variables,
             "tasks": [task, {"ansible.builtin.copy": {
                 "content": "{{ train_job_plan | to_json }}", "dest": str(tmp_path / "out")}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    done = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           str(tmp_path / "play.yml")], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-2000:]
    return json.loads((tmp_path / "out").read_text())


def test_a_rerun_starts_from_step_0_in_a_folder_of_its_own(tmp_path):
    # verl's default resume_mode=auto continued the old run from its folder, and the
    # supervisor of a rerun that failed before its first save resumed the old run.
    jobs = [{"submission_id": "run-1", "status": "FAILED", "end_time": 1700000000123},
            {"submission_id": "run-1-r2", "status": "FAILED", "end_time": 1700000000999}]
    got = _run_task(tmp_path, "submit.yml",
                    "Train | Give a rerun of an ended run a checkpoint folder of its own",
                    {"train_job_plan": PLAN, "train_job_jobs": {"jobs": jobs},
                     "train_job_rerun": True, "train_job_resume": False})
    folder = "/ck/run-1.rerun-1700000000123"
    assert got["checkpoint"]["dir"] == folder
    assert got["overrides"] == ["trainer.save_freq=5", f"trainer.default_local_dir={folder}",
                                "trainer.resume_mode=disable"]
    assert got["entrypoint"].endswith(f"trainer.default_local_dir={folder} "
                                      "trainer.resume_mode=disable")
    assert "/ck/run-1 " not in got["entrypoint"] + " "


def test_a_resume_after_a_rerun_resumes_in_the_reruns_folder(tmp_path):
    folder = "/ck/run-1.rerun-1700000000123"
    jobs = [{"submission_id": "run-1", "status": "FAILED",
             "metadata": {"checkpoint_dir": folder}}]
    got = _run_task(tmp_path, "resume.yml",
                    "Train | Resume in the checkpoint folder of the run's newest attempt",
                    {"train_job_plan": PLAN, "train_job_jobs": {"jobs": jobs}})
    assert got["checkpoint"]["dir"] == folder
    assert f"trainer.default_local_dir={folder}" in got["overrides"]
    assert "trainer.resume_mode=disable" not in got["overrides"]
