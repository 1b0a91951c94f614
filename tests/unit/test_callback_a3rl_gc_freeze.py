"""The a3rl_gc_freeze callback, through ansible-playbook with the project's ansible.cfg:
the workers Ansible forks find the main process's objects frozen (gc.get_freeze_count),
and without the callback they do not."""

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# An action plugin that runs in the forked worker and reports what it inherited.
ACTION = '''
import gc
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        return {"changed": False, "frozen": gc.get_freeze_count()}
'''

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Count the frozen objects the worker inherited
      gc_frozen_probe:
"""


def _frozen(tmp_path: Path, callbacks: str | None) -> int:
    (tmp_path / "action").mkdir()
    (tmp_path / "action" / "gc_frozen_probe.py").write_text(ACTION)
    (tmp_path / "play.yml").write_text(PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_ACTION_PLUGINS": f"{tmp_path / 'action'}:{ROOT / 'plugins' / 'action'}",
           "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "False",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False"}
    if callbacks is not None:
        env["ANSIBLE_CALLBACKS_ENABLED"] = callbacks
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-c", "local",
                          "-i", "localhost,", str(tmp_path / "play.yml")],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    task = json.loads(out)["plays"][0]["tasks"][0]
    return task["hosts"]["localhost"]["frozen"]


def test_workers_inherit_a_frozen_heap(tmp_path):
    # The play's start froze the main process's objects: tens of thousands of them.
    assert _frozen(tmp_path, None) > 10_000


def test_without_the_callback_nothing_is_frozen(tmp_path):
    assert _frozen(tmp_path, "a3rl_progress") == 0
