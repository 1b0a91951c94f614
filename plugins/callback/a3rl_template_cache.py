"""Ansible callback: keep the Python code Jinja compiles from each template string, in
the process and on disk, so that Ansible's forked workers and later runs reuse it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: a3rl_template_cache
type: aggregate
short_description: reuse compiled Jinja templates across Ansible's workers and runs
description:
  - ansible-core 2.19 compiles every template string it renders from source, every time
    (C(AnsibleEnvironment.from_string)), in the worker Ansible forks for each task and
    host. The same strings (the roles' task arguments, conditions, variable defaults)
    are compiled again in every worker and every run.
  - When the playbook starts, this callback wraps C(compile) of Ansible's Jinja
    environment class in the main process, so the workers forked later inherit the
    wrapper. A template string compiled once is kept in memory and as a file (Python's
    C(marshal) of the code object, written to a temporary name and renamed) under
    C(A3RL_TEMPLATE_CACHE), by default C(~/.cache/a3rl/templates), in a folder per
    ansible-core, Jinja and Python version.
  - The key is the string itself and everything else compilation depends on (the
    environment's class, delimiters and whitespace settings, code generator,
    extensions, finalize function, the backslash-escaping context Ansible compiles
    under, the embedded-templates setting, the template name and file name), hashed
    with SHA-256. Rendering is unchanged, each time; only the compiled code is reused.
  - Never cached, compiled as before every time. Jinja's node trees
    (C(compile_expression)), raw source requests, Ansible's template debugging mode.
  - The cache folder and its toolchain folder must belong to the user and be writable by
    nobody else (a file there is run as code, like Python's own C(__pycache__));
    otherwise, or with C(A3RL_TEMPLATE_CACHE=off), only the in-process cache is used.
  - Ansible compiles only trusted template strings (the playbooks', the roles' and the
    inventory's), so the folder holds about one small file per such string and version
    of it. Deleting the folder is always safe.
  - Measured in bench/README.md.
requirements:
  - enabled in ansible.cfg (C(callbacks_enabled))
"""

import hashlib
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
from pathlib import Path

import jinja2
from ansible import __version__ as ANSIBLE_VERSION
from ansible._internal._templating import _jinja_bits
from ansible.plugins.callback import CallbackBase

ENV_VAR = "A3RL_TEMPLATE_CACHE"
DEFAULT_DIR = "~/.cache/a3rl/templates"
# One folder per toolchain: code objects are only valid for the Python that made them.
TOOLCHAIN = hashlib.sha256(
    repr((ANSIBLE_VERSION, jinja2.__version__, importlib.util.MAGIC_NUMBER, sys.version)).encode()
).hexdigest()[:16]


def _name(obj) -> str | None:
    if obj is None:
        return None
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


def environment_signature(env) -> tuple:
    """What compiling a string in ``env`` depends on besides the string and its names."""
    ctx = _jinja_bits._TemplateCompileContext.current(optional=True)
    return (
        _name(type(env)),
        tuple(getattr(env, field) for field in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES),
        env.optimized,
        repr(env.autoescape),
        env.is_async,
        tuple(sorted(env.extensions)),
        _name(env.finalize),
        _name(env.code_generator_class),
        tuple(sorted(getattr(env, "intercepted_binops", ()))),
        tuple(sorted(getattr(env, "intercepted_unops", ()))),
        None if ctx is None else ctx.escape_backslashes,
        _jinja_bits._TemplateConfig.allow_embedded_templates,
    )


def cache_key(env, source: str, name, filename, defer_init) -> str:
    head = repr((environment_signature(env), name, filename, defer_init)).encode()
    return hashlib.sha256(head + b"\0" + source.encode("utf-8", "surrogatepass")).hexdigest()


def usable_dir(path: Path) -> Path | None:
    """``path``, made if missing, when it is this user's and nobody else can write to it."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError:
        return None
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return path


class TemplateCache:
    """``compile`` for Ansible's Jinja environment, reusing code by key."""

    def __init__(self, original, directory: Path | None):
        self.original = original
        self.directory = directory
        self.memory: dict[str, object] = {}
        self.hits = self.reads = self.compiles = 0

    def _read(self, key: str):
        if self.directory is None:
            return None
        try:
            data = (self.directory / key).read_bytes()
            code = marshal.loads(data)
        except (OSError, EOFError, ValueError, TypeError):
            return None
        return code if hasattr(code, "co_code") else None

    def _write(self, key: str, code) -> None:
        if self.directory is None:
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(marshal.dumps(code))
                os.replace(tmp, self.directory / key)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass

    def compile(self, env, source, name=None, filename=None, raw=False, defer_init=False):
        if raw or not isinstance(source, str) or env._debuggable_template_source:
            return self.original(env, source, name, filename, raw, defer_init)
        key = cache_key(env, source, name, filename, defer_init)
        code = self.memory.get(key)
        if code is not None:
            self.hits += 1
            return code
        code = self._read(key)
        if code is not None:
            self.reads += 1
        else:
            code = self.original(env, source, name, filename, raw, defer_init)
            self.compiles += 1
            self._write(key, code)
        self.memory[key] = code
        return code


def install(directory: Path | None) -> TemplateCache:
    """Wrap ``compile`` of Ansible's environment class (once per process)."""
    cls = _jinja_bits.AnsibleEnvironment
    current = cls.__dict__.get("compile")
    if current is not None and isinstance(getattr(current, "cache", None), TemplateCache):
        return current.cache
    cache = TemplateCache(cls.compile, directory)

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        return cache.compile(self, source, name, filename, raw, defer_init)

    compile.cache = cache
    cls.compile = compile
    return cache


def configured_dir() -> Path | None:
    value = os.environ.get(ENV_VAR, DEFAULT_DIR)
    if value.strip().lower() in ("", "off"):
        return None
    base = usable_dir(Path(value).expanduser())
    return None if base is None else usable_dir(base / TOOLCHAIN)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "a3rl_template_cache"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        install(configured_dir())
