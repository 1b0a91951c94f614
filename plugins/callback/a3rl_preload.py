"""Ansible callback: load the filter plugins and the project's action plugin in the
controller's main process before the first play, so that the workers Ansible forks (one
per task and host) inherit them instead of each importing them again."""

from __future__ import annotations

DOCUMENTATION = r"""
name: a3rl_preload
type: aggregate
short_description: load filter and action plugins in ansible-playbook's main process
description:
  - Ansible loads a filter plugin, or an action plugin, the first time a process uses
    it. The main process renders few templates itself; the forked workers render the
    tasks, so each worker that uses one of the project's filters (plugins/filter) imports
    its file and the a3rl modules behind it again, and each a3rl_state probe imports its
    action plugin again.
  - When the playbook starts, this callback loads every filter plugin on the configured
    paths and the a3rl_state action plugin in the main process, once. A worker forked
    later finds them in its inherited C(sys.modules) and in the plugin loaders' caches
    (Ansible's loader returns a module already in C(sys.modules)). Nothing a play does
    changes.
  - Measured in bench/README.md.
requirements:
  - enabled in ansible.cfg (C(callbacks_enabled)), before a3rl_gc_freeze, which then
    freezes the loaded modules with the rest of the main process's heap
"""

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader

# The project's action plugins (plugins/action): their files are loaded by name.
ACTION_PLUGINS = ("a3rl_state",)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "a3rl_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        # Loading is all this does: a plugin that fails to load here fails the same way,
        # with Ansible's own message, where a task uses it.
        try:
            for _ in filter_loader.all():
                pass
            for name in ACTION_PLUGINS:
                action_loader.get(name, class_only=True)
        except Exception as e:  # noqa: BLE001 - a speed-up never stops a run
            self._display.vvv(f"a3rl_preload: not preloaded ({e})")
