"""The a3rl_gc_freeze callback, through Ansible with the project's ansible.cfg (the
shared ``run_module``): the worker Ansible forks for a task finds the main process's
objects frozen (gc.get_freeze_count), and without the callback it does not."""

from pathlib import Path

import pytest

from .conftest import run_module

# An action plugin: it runs in the forked worker and reports what it inherited.
ACTION = '''
import gc
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        return {"changed": False, "frozen": gc.get_freeze_count()}
'''
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def probe(tmp_path, monkeypatch):
    (tmp_path / "gc_frozen_probe.py").write_text(ACTION)
    monkeypatch.setenv("ANSIBLE_ACTION_PLUGINS", f"{tmp_path}:{ROOT / 'plugins' / 'action'}")
    return lambda: run_module("gc_frozen_probe", {"report": "frozen"})["frozen"]


def test_workers_inherit_a_frozen_heap(probe):
    # The play's start froze the main process's objects: tens of thousands of them.
    assert probe() > 10_000


def test_without_the_callback_nothing_is_frozen(probe, monkeypatch):
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "a3rl_progress")
    assert probe() == 0
