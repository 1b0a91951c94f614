"""Action for a3rl_cache_clean: hands the module the cache-clean engine's source.

The module runs the same engine inside the training container (``docker exec ...
python3 -``, the source on stdin). It cannot always read that source on the node: Ansible's
own AnsiballZ loader can give it, but Mitogen's module_utils loader (the opt-in
``A3RL_STRATEGY=mitogen``) compiles the file without keeping its source. So the source is
read here, on the controller, from the module_utils path the module itself is built from.
"""

from __future__ import annotations

from pathlib import Path

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

ENGINE = "a3rl_cache_clean.py"


def engine_source() -> str:
    for folder in C.DEFAULT_MODULE_UTILS_PATH:
        path = Path(folder) / ENGINE
        if path.is_file():
            return path.read_text()
    raise AnsibleActionFail(
        f"a3rl_cache_clean: {ENGINE} is in none of the module_utils paths "
        f"({', '.join(C.DEFAULT_MODULE_UTILS_PATH)}). Fix: run with the project's ansible.cfg.")


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args, engine_source=engine_source())
        result.update(self._execute_module(module_name="a3rl_cache_clean", module_args=args,
                                           task_vars=task_vars))
        return result
