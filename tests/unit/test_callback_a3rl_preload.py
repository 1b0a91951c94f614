"""The a3rl_preload callback, through Ansible with the project's ansible.cfg (the shared
``run_module``): the worker Ansible forks for a task inherits the project's filter plugin
and the a3rl modules behind it, and the a3rl_state action plugin; without the callback
it does not."""

from pathlib import Path

import pytest

from .conftest import run_module

# An action plugin: it runs in the forked worker, before any filter is used there, and
# reports which of the project's plugin modules the worker already holds.
ACTION = '''
import sys
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        names = sorted(sys.modules)
        return {
            "changed": False,
            "filter_modules": [n for n in names if n.startswith("ansible.plugins.filter.a3rl")],
            "action_modules": [n for n in names
                               if n.startswith("ansible.plugins.action.a3rl_state")],
            "plan_module": "a3rl.planning.plan" in sys.modules,
        }
'''
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def probe(tmp_path, monkeypatch):
    (tmp_path / "preload_probe.py").write_text(ACTION)
    monkeypatch.setenv("ANSIBLE_ACTION_PLUGINS", f"{tmp_path}:{ROOT / 'plugins' / 'action'}")
    return lambda: run_module("preload_probe", {"report": "modules"})


def test_workers_inherit_the_projects_plugins(probe):
    got = probe()
    # Every filter file of plugins/filter, the a3rl modules they import, the action plugin.
    assert len(got["filter_modules"]) == len(list((ROOT / "plugins" / "filter").glob("a3rl*.py")))
    assert got["plan_module"] is True
    assert len(got["action_modules"]) == 1


def test_without_the_callback_the_worker_has_none(probe, monkeypatch):
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "a3rl_progress, a3rl_gc_freeze")
    got = probe()
    assert got["filter_modules"] == [] and got["action_modules"] == []
    assert got["plan_module"] is False
