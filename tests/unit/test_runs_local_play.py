"""run_play end to end on the controller itself (a real ansible-runner run of a tiny
play on localhost, no simulator): the record, summary.json, the display and failures."""

from __future__ import annotations

import io
import json
import sys

import pytest

from a3rl.controller import runner
from a3rl.controller.fold import Tracker
from a3rl.controller.progress import PlainDisplay

PLAY = """\
- name: Local | A tiny play
  hosts: local
  gather_facts: false
  tasks:
    - name: Local | Say hello
      ansible.builtin.debug:
        msg: "hello from {{ inventory_hostname }}"
    - name: Local | Change something
      ansible.builtin.command: "true"
      changed_when: true
    - name: Local | Fail when asked
      ansible.builtin.fail:
        msg: "asked to fail: {{ reason | default('') }}"
      when: fail | default(false) | bool
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("A3RL_PROJECT_DIR", str(tmp_path))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nstdout_callback = default\n")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "local.yml").write_text(PLAY)
    inv = tmp_path / "inventory"
    inv.write_text(f"[local]\nctl ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    return inv


def test_a_run_is_recorded_with_its_summary_and_shown_as_it_goes(project):
    out = io.StringIO()
    result = runner.run_play("playbooks/local.yml", project, {"reason": "none"},
                             display=PlainDisplay(out, Tracker("playbooks/local.yml")))
    assert result.ok and result.changed == 1
    text = out.getvalue()
    assert "TASK Local | Say hello" in text and "  ctl: hello from ctl" in text
    assert "  ctl changed" in text
    s = json.loads((result.record / "summary.json").read_text())
    assert s == result.summary
    assert (s["status"], s["rc"], s["counts"]["changed"], s["counts"]["skipped"]) == (
        "successful", 0, 1, 1)
    assert [t["task"] for t in s["tasks"]] == ["Local | Say hello", "Local | Change something",
                                               "Local | Fail when asked"]
    assert s["command"] == (f"ansible-playbook playbooks/local.yml -i {project} "
                            "-e reason=none")
    assert (result.record / "command.txt").read_text() == s["command"] + "\n"
    assert result.log and "TASK [Local | Say hello]" in result.log.read_text()
    assert oct(result.record.stat().st_mode & 0o777) == "0o700"


def test_a_failed_run_names_host_task_and_error(project):
    result = runner.run_play("playbooks/local.yml", project, {"fail": "true", "reason": "test"},
                             quiet=True)
    assert not result.ok and result.rc == 2
    assert result.failures == [("ctl", "Local | Fail when asked", "asked to fail: test")]
    (f,) = result.summary["failures"]
    assert f["line"] and "asked to fail: test" in "\n".join(
        result.log.read_text().splitlines()[f["line"] - 1:f["line"] + 3])


def test_a_display_that_breaks_does_not_break_the_run(project, capsys):
    class Broken:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def event(self, event):
            raise ValueError("cannot draw")

    result = runner.run_play("playbooks/local.yml", project, display=Broken())
    assert result.ok and (result.record / "summary.json").exists()
    assert len(list(result.record.glob("artifacts/*/job_events/*.json"))) > 5
    assert "the progress display failed (ValueError: cannot draw)" in capsys.readouterr().err


SECRET_PLAY = """\
- name: Local | Use secrets
  hosts: local
  gather_facts: false
  tasks:
    - name: Local | Print the overrides (as a careless play would)
      ansible.builtin.debug:
        msg: "{{ overrides }}"
    - name: Local | The play sees the real values
      ansible.builtin.assert:
        that:
          - registry_password == 'pw-1234567'
          - overrides[0] == '+trainer.wandb_api_key=wandb-7654321'
          - overrides[1] == 'trainer.total_training_steps=2'
"""


def test_no_file_of_the_record_holds_a_secret_yet_the_play_gets_it(project):
    play = project.parent / "playbooks" / "secret.yml"
    play.write_text(SECRET_PLAY)
    result = runner.run_play("playbooks/secret.yml", project, {
        "registry_password": "pw-1234567",
        "overrides": ["+trainer.wandb_api_key=wandb-7654321", "trainer.total_training_steps=2"],
    }, quiet=True)
    assert result.ok, result.failures
    files = [p for p in result.record.rglob("*") if p.is_file()]
    assert any("job_events" in str(p) for p in files)
    for path in files:
        text = path.read_text(errors="replace")
        assert "pw-1234567" not in text and "wandb-7654321" not in text, path
    assert f"+trainer.wandb_api_key={runner.MASK}" in (result.record / "command.txt").read_text()


ENV_SECRET_PLAY = """\
- name: Local | A task whose output carries a token from the environment
  hosts: local
  gather_facts: false
  tasks:
    - name: Local | Print what a hub client's error would
      ansible.builtin.debug:
        msg: "401 for token {{ lookup('ansible.builtin.env', 'MODELSCOPE_API_TOKEN') }}"
    - name: Local | Fail with it
      ansible.builtin.fail:
        msg: "refused: {{ lookup('ansible.builtin.env', 'A3RL_TEST_HUB_TOKEN') }}"
"""


def test_a_token_from_the_environment_is_scrubbed_from_the_events(project, monkeypatch):
    """issue 53: a ModelScope token given in the environment (handed to run_play, or
    exported in the shell) that a task's output carries never stays in job_events."""
    play = project.parent / "playbooks" / "envsecret.yml"
    play.write_text(ENV_SECRET_PLAY)
    monkeypatch.setenv("A3RL_TEST_HUB_TOKEN", "shell-tok-24680")
    result = runner.run_play("playbooks/envsecret.yml", project, quiet=True,
                             extra_env={"MODELSCOPE_API_TOKEN": "ms-tok-13579"})
    assert not result.ok and result.failures[0][2] == f"refused: {runner.MASK}"
    events = list(result.record.glob("artifacts/*/job_events/*.json"))
    assert any(f"401 for token {runner.MASK}" in p.read_text() for p in events)
    for path in (p for p in result.record.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        assert "ms-tok-13579" not in text and "shell-tok-24680" not in text, path


# A module like a3rl_artifact: its token is a no_log argument, masked in its result.
HUB_MODULE = """\
#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
m = AnsibleModule(argument_spec={"name": {"type": "str"}, "token": {"type": "str", "no_log": True}})
m.exit_json(changed=False, msg="fetched " + m.params["name"])
"""

ARGS_PLAY = """\
- name: Local | Fetch with a hub token, as the artifact store does
  hosts: local
  gather_facts: false
  tasks:
    - name: Local | Fetch each artifact
      hub_fetch:
        name: "{{ item }}"
        token: "{{ modelscope_token }}"
      loop: [weights]
"""


def test_a_no_log_argument_never_reaches_the_events_even_with_args_displayed(
        project, monkeypatch):
    """issue 53: Ansible shows a task's templated arguments (a no_log module argument
    too: only the module knows it is one) in the task banner and in ansible-runner's
    event ``task_args`` when display_args_to_stdout is on; a Vault token in the inventory,
    which the runner's scrub does not know, then stayed in job_events. The runner turns
    that display off for its runs."""
    (project.parent / "playbooks" / "library").mkdir()
    (project.parent / "playbooks" / "library" / "hub_fetch.py").write_text(HUB_MODULE)
    (project.parent / "playbooks" / "args.yml").write_text(ARGS_PLAY)
    project.write_text(project.read_text().rstrip("\n") + " modelscope_token=inv-tok-97531\n")
    monkeypatch.setenv("ANSIBLE_DISPLAY_ARGS_TO_STDOUT", "True")
    # the scrub of the inventory's secrets left out: the display alone must keep it out
    monkeypatch.setattr(runner, "_read_inventory_secrets", lambda *a: None, raising=False)
    result = runner.run_play("playbooks/args.yml", project, quiet=True)
    assert result.ok, result.failures
    events = list(result.record.glob("artifacts/*/job_events/*.json"))
    assert any("fetched weights" in p.read_text() for p in events)
    for path in (p for p in result.record.rglob("*") if p.is_file()):
        assert "inv-tok-97531" not in path.read_text(errors="replace"), path


INVENTORY_SECRET_PLAY = """\
- name: Local | A task whose output carries the inventory's token
  hosts: local
  gather_facts: false
  tasks:
    - name: Local | Print what a hub client's error would
      ansible.builtin.debug:
        msg: >-
          401 for token {{ modelscope_token }} and {{ registry_password }};
          {{ a3rl_patched_keys }}
"""


def test_a_token_from_the_inventory_or_vault_is_scrubbed_from_the_events(project, tmp_path):
    """issue 53: a ModelScope token set in the inventory (a Vault-encrypted group_vars
    file beside it, or a host variable) that a task's output carries never stays in the
    record."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    (tmp_path / "vault-pass").write_text("vault-pw-1\n")
    vault = VaultLib([("default", VaultSecret(b"vault-pw-1"))])
    (tmp_path / "group_vars" / "local").mkdir(parents=True)
    (tmp_path / "group_vars" / "local" / "vault.yml").write_bytes(
        vault.encrypt("modelscope_token: vault-tok-86420\n"))
    # a plain setting whose name holds a secret word stays readable
    project.write_text(project.read_text().rstrip("\n") + " registry_password=inv-pw-97531"
                       " a3rl_patched_keys=actor.recompute_old_log_prob\n")
    (project.parent / "playbooks" / "invsecret.yml").write_text(INVENTORY_SECRET_PLAY)
    result = runner.run_play("playbooks/invsecret.yml", project, quiet=True, extra_env={
        "ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / "vault-pass")})
    assert result.ok, result.failures
    events = list(result.record.glob("artifacts/*/job_events/*.json"))
    assert any(f"401 for token {runner.MASK} and {runner.MASK}; actor.recompute_old_log_prob"
               in p.read_text() for p in events)
    for path in (p for p in result.record.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        assert "vault-tok-86420" not in text and "inv-pw-97531" not in text, path
