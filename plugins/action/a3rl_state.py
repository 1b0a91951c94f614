"""Action for a3rl_state: the key of a role's inputs, then the module on the node.

A role's inputs are everything that decides what its tasks would do on a node:

- the project's code: every file under ``roles/``, ``plugins/``, ``playbooks/``,
  ``tools/a3rl/node/`` and ``group_vars/``, and ``site.yml`` and ``ansible.cfg``;
- the rendered value, for this host, of every variable the role's files name: every
  Jinja expression in its tasks, handlers, defaults, vars and templates (and those of the
  roles it includes), bare conditions (``when``, ``that``, ...) included. Names the role
  sets itself (``register``, ``set_fact``, loop and task variables) are its outputs, not
  inputs; facts (``ansible_*``), ``hostvars`` and paths of the checkout are left out;
- ``inputs``: anything else the caller names (another host's value, a file's content).

Nothing is listed by hand, so a variable added to a role is an input the moment a task
names it. Each input is digested on its own; the stamp keeps the digests (never values), so
a probe can say which input changed. Secret-looking names (token, password, secret) are
digested with HMAC under a key kept on the controller (``.cache/a3rl-state.key``, 0600),
so the stamps on the nodes hold nothing a guess could be checked against.

``a3rl_skip_converged=false`` makes every probe report "not converged": every role's tasks
run in full, as before this existed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from jinja2 import Environment, meta
from jinja2.exceptions import TemplateSyntaxError

ROOT = Path(__file__).resolve().parents[2]
CODE = ("roles", "plugins", "playbooks", "tools/a3rl/node", "group_vars", "site.yml",
        "ansible.cfg")
BARE = {"when", "that", "failed_when", "changed_when", "until"}
SET_FACT = {"set_fact", "ansible.builtin.set_fact"}
INCLUDE_ROLE = {"include_role", "import_role", "ansible.builtin.include_role",
                "ansible.builtin.import_role"}
# Not inputs: Ansible's magic and connection variables, Jinja's globals, checkout paths.
LEFT_OUT = {"hostvars", "omit", "role_path", "role_name", "playbook_dir", "inventory_dir",
            "inventory_file", "play_hosts", "vars", "environment", "item", "lookup",
            "query", "q", "range", "dict", "lipsum", "cycler", "joiner", "namespace", "now",
            "undef", "zip", "true", "false", "none", "True", "False", "None", "loop",
            "ansible_loop", "role_names", "ansible_role_names"}
SECRET = re.compile(r"token|password|passwd|secret|passphrase", re.I)
# Timing and call details of registered results: never inputs.
VOLATILE = {"start", "end", "delta", "invocation", "attempts", "_ansible_no_log"}


class _Loader(yaml.SafeLoader):
    """YAML with Ansible's tags (!vault, !unsafe) read as plain scalars."""


_Loader.add_multi_constructor("!", lambda loader, _suffix, node:
                              loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def _files(top: Path):
    if top.is_file():
        yield top
        return
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if not f.endswith((".pyc", ".retry")):
                yield Path(dirpath) / f


def code_digest(root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for part in CODE:
        for path in _files(root / part):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(path.read_bytes() if not path.is_symlink() else
                     b"->" + os.readlink(path).encode())
            h.update(b"\0")
    return h.hexdigest()


class _AnyName(dict):
    """Every filter and test name is known: the code generator that lists a template's
    names refuses unknown ones, and Ansible's own are not loaded here."""

    def __contains__(self, _name) -> bool:
        return True

    def __missing__(self, _name):
        return lambda *a, **k: None

    def get(self, name, default=None):
        return dict.get(self, name) or self.__missing__(name)


def _environment() -> Environment:
    env = Environment()
    env.filters = _AnyName(env.filters)
    env.tests = _AnyName(env.tests)
    return env


def _expr_names(env: Environment, text: str, bare: bool) -> set[str]:
    source = "{{ " + text + " }}" if bare and "{{" not in text and "{%" not in text else text
    if not bare and "{{" not in text and "{%" not in text:
        return set()
    try:
        return set(meta.find_undeclared_variables(env.parse(source)))
    except TemplateSyntaxError:
        # Not Jinja after all (a bare word, a shell snippet): every identifier in it.
        return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def _walk(env: Environment, node: Any, names: set[str], local: set[str], roles: set[str],
          bare: bool = False) -> None:
    if isinstance(node, str):
        names |= _expr_names(env, node, bare)
    elif isinstance(node, list):
        for x in node:
            _walk(env, x, names, local, roles, bare)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k == "register" and isinstance(v, str):
                local.add(v)
            elif k in SET_FACT and isinstance(v, dict):
                local |= {n for n in v if n != "cacheable"}
                _walk(env, v, names, local, roles)
            elif k == "loop_var" and isinstance(v, str):
                local.add(v)
            elif k == "vars" and isinstance(v, dict):
                local |= set(v)
                _walk(env, v, names, local, roles)
            elif k in INCLUDE_ROLE and isinstance(v, dict) and isinstance(v.get("name"), str):
                roles.add(v["name"])
                _walk(env, v, names, local, roles)
            else:
                _walk(env, v, names, local, roles, bare=bare or k in BARE)


def role_names(role: str, root: Path = ROOT) -> list[str]:
    """Every variable the role's files (and those of the roles it includes) name, less
    what the role sets itself and what is never an input."""
    env = _environment()
    names: set[str] = set()
    local: set[str] = set()
    todo, done = [role], set()
    while todo:
        r = todo.pop()
        if r in done:
            continue
        done.add(r)
        rdir = root / "roles" / r
        if not rdir.is_dir():
            raise AnsibleActionFail(f"a3rl_state: no role {r!r} under {root / 'roles'}")
        roles: set[str] = set()
        for sub in ("tasks", "handlers", "defaults", "vars", "meta"):
            for path in sorted((rdir / sub).glob("*.yml")):
                data = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - SafeLoader
                if sub in ("defaults", "vars") and isinstance(data, dict):
                    names |= set(data)
                _walk(env, data, names, local, roles)
        for path in sorted((rdir / "templates").rglob("*")):
            if path.is_file():
                names |= _expr_names(env, path.read_text(errors="replace"), bare=False)
        todo.extend(roles - done)
    return sorted(n for n in names - local
                  if n not in LEFT_OUT and not n.startswith("ansible_"))


def _cached_names(role: str, code: str) -> list[str]:
    cache = ROOT / ".cache" / "a3rl-state" / f"{code}-{role}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    found = role_names(role)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(found))
    tmp.replace(cache)
    return found


def _secret_key() -> bytes:
    path = ROOT / ".cache" / "a3rl-state.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        try:
            os.link(tmp, path)  # the first writer wins; every run then uses its key
        except FileExistsError:
            pass
        tmp.unlink()
        return path.read_bytes()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def digest(value: Any, secret_key: bytes | None = None) -> str:
    data = json.dumps(_plain(value), sort_keys=True).encode()
    if secret_key is not None:
        return "hmac:" + hmac.new(secret_key, data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _render(self, name: str, task_vars: dict) -> Any:
        if name not in task_vars:
            return "<undefined>"
        try:
            return self._templar.template(task_vars[name])
        except Exception as e:  # noqa: BLE001 - an input that cannot render is still an input
            return ["<cannot render>", type(e).__name__, str(task_vars[name])]

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        role = args.get("role")
        mode = args.get("mode", "probe")
        if not isinstance(role, str) or not role:
            raise AnsibleActionFail("a3rl_state: role is required (the role's name)")
        skip = boolean(self._templar.template(task_vars.get("a3rl_skip_converged", True)),
                       strict=False)
        if mode == "probe" and not skip:
            result.update(changed=False, converged=False,
                          reasons=["a3rl_skip_converged=false: every task runs"])
            return result
        code = code_digest()
        digests: dict[str, str] = {"<code>": code,
                                   "<inputs>": digest(args.pop("inputs", None))}
        key_for_secrets = None
        for name in _cached_names(role, code):
            if SECRET.search(name):
                key_for_secrets = key_for_secrets or _secret_key()
                digests[name] = digest(self._render(name, task_vars), key_for_secrets)
            else:
                digests[name] = digest(self._render(name, task_vars))
        key = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
        module_args = {"role": role, "mode": mode, "key": key, "inputs": digests,
                       "watch": args.get("watch") or {}}
        if args.get("dir"):
            module_args["dir"] = args["dir"]
        if args.get("tools"):
            module_args["tools"] = args["tools"]
        result.update(self._execute_module(module_name="a3rl_state", module_args=module_args,
                                           task_vars=task_vars))
        result.pop("invocation", None)  # the digests say nothing to a reader
        return result
