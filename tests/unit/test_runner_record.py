"""What a run record keeps: no secret from the extra vars or the environment."""

from __future__ import annotations

import json

from a3rl import masking
from a3rl.controller import runner


def test_secret_environment_is_masked_in_the_record(tmp_path):
    (tmp_path / "env").mkdir()
    (tmp_path / "env/envvars").write_text(json.dumps({"MODELSCOPE_API_TOKEN": "t0k", "A": "1"}))
    cmd = tmp_path / "artifacts/0001/command"
    cmd.parent.mkdir(parents=True)
    cmd.write_text(json.dumps({"command": ["ansible-playbook"], "cwd": "/",
                               "env": {"REGISTRY_PASSWORD": "pw", "PATH": "/bin"}}))
    runner._scrub_environment(tmp_path)
    text = (tmp_path / "env/envvars").read_text() + cmd.read_text()
    assert "t0k" not in text and "pw" not in text
    assert json.loads(cmd.read_text())["env"]["PATH"] == "/bin"
    assert json.loads((tmp_path / "env/envvars").read_text())["A"] == "1"


def test_masked_extra_vars():
    assert runner.masked({"modelscope_token": "x", "model": "qwen3_32b"}) == {
        "modelscope_token": runner.MASK, "model": "qwen3_32b"}


def test_two_runs_of_one_play_in_one_second_get_folders_of_their_own(tmp_path, monkeypatch):
    from a3rl.controller import runner

    monkeypatch.setattr(runner.time, "strftime", lambda fmt: "20261201-101010")
    first = runner._new_record(tmp_path / "runs", "site")
    second = runner._new_record(tmp_path / "runs", "site")
    assert (first.name, second.name) == ("20261201-101010-site", "20261201-101010-site-2")
    assert oct(first.stat().st_mode & 0o777) == "0o700"


def test_secret_overrides_are_masked_but_plain_ones_kept():
    overrides = ["+trainer.wandb_api_key=w4ndb", "actor.ppo_max_token_len_per_gpu=9216",
                 "data.prompt_key=prompt", "~x.hf_token=abc", "trainer.total_training_steps=2"]
    assert runner.masked({"overrides": overrides, "nested": {"db_password": "p"}}) == {
        "overrides": [f"+trainer.wandb_api_key={runner.MASK}",
                      "actor.ppo_max_token_len_per_gpu=9216", "data.prompt_key=prompt",
                      f"~x.hf_token={runner.MASK}", "trainer.total_training_steps=2"],
        "nested": {"db_password": runner.MASK}}


def test_secrets_reach_ansible_only_through_the_environment():
    hidden, env, values = runner.hide_secrets(
        {"registry_password": "s3cret-pw", "model": "qwen3_32b",
         "overrides": ["+trainer.wandb_api_key=w4ndb-key", "a=1"]})
    assert "s3cret-pw" not in json.dumps(hidden) and "w4ndb-key" not in json.dumps(hidden)
    assert hidden["model"] == "qwen3_32b" and hidden["overrides"][1] == "a=1"
    assert sorted(env.values()) == ["s3cret-pw", "w4ndb-key"] == sorted(values)
    # the names look secret, so the record's copy of the environment masks them
    assert all(masking.is_secret_name(name) for name in env)
    name = next(k for k, v in env.items() if v == "w4ndb-key")
    assert hidden["overrides"][0] == (
        "+trainer.wandb_api_key={{ lookup('ansible.builtin.env', '" + name + "') }}")


def test_ray_job_records_are_read_with_their_secret_env_masked():
    from a3rl.node import rayjobs

    record = {"submission_id": "a", "entrypoint": "python3 -m x 'k=${oc.env:A3RL_SECRET_K}'",
              "runtime_env": {"env_vars": {"A3RL_SECRET_K": "s3cr3t", "HCCL_X": "1"}}}
    got = rayjobs.masked_job(record)
    assert got["runtime_env"]["env_vars"] == {"A3RL_SECRET_K": masking.MASK, "HCCL_X": "1"}
    assert record["runtime_env"]["env_vars"]["A3RL_SECRET_K"] == "s3cr3t"  # a copy
    assert rayjobs.masked_job({"submission_id": "b"}) == {"submission_id": "b"}
    assert masking.env_name("trainer.wandb_api_key").startswith(rayjobs.SECRET_ENV_PREFIX)


def test_a_runs_secrets_are_masked_in_the_log_texts_a3rl_keeps():
    from a3rl.node import rayjobs

    text = "trainer: {a3rl_probe_token: s3cr3t-long, other: s3cr3t}\nstep:1"
    assert rayjobs.masked_text(text, ["s3cr3t", "s3cr3t-long", ""]) == (
        f"trainer: {{a3rl_probe_token: {masking.MASK}, other: {masking.MASK}}}\nstep:1")
    assert rayjobs.masked_text(text, []) == text


def test_a_failed_jobs_message_is_read_with_its_secret_values_masked():
    """issue 53: Ray's message of a FAILED job holds the tail of its log, where verl
    prints its resolved config: every read of the job (list, status, the supervisor's)
    masks the job's own secret values there too."""
    from a3rl.node import rayjobs

    record = {"submission_id": "a", "status": "FAILED",
              "message": "Job failed ... trainer: {wandb_api_key: w4ndb-s3cr3t}\nTraceback",
              "metadata": {"note": "w4ndb-s3cr3t"},
              "runtime_env": {"env_vars": {"A3RL_SECRET_K": "w4ndb-s3cr3t", "HCCL_X": "1"}}}
    got = rayjobs.masked_job(record)
    assert "w4ndb-s3cr3t" not in json.dumps(got)
    assert got["message"] == f"Job failed ... trainer: {{wandb_api_key: {masking.MASK}}}\nTraceback"
    assert got["runtime_env"]["env_vars"]["HCCL_X"] == "1"
