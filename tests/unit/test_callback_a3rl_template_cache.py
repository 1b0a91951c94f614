"""The a3rl_template_cache callback: compiled templates are reused only under the same
key, render exactly as freshly compiled ones, and are shared with forked workers and
later runs through the cache folder."""

import importlib.util
import os
from pathlib import Path

import pytest
from ansible._internal._templating import _jinja_bits
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from .conftest import run_module

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "a3rl_template_cache_under_test", ROOT / "plugins" / "callback" / "a3rl_template_cache.py")
tc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tc)

# Templates whose compiled code depends on more than their text's meaning: backslashes in
# expression strings (Ansible escapes them only in its own top-level compile), a header
# that changes the delimiters, an embedded template in a constant, whitespace control.
TEMPLATES = [
    "{{ name | regex_replace('^(.*)_x$', '\\1') }}",
    "#jinja2:variable_start_string:'[%', variable_end_string:'%]'\n[% name %]-{{ name }}",
    "{{ '{{ name }}' }}",
    "{% for i in items %}{{ i }}\n{% endfor %}tail",
    "{{ items | map('string') | join(',') }}-{{ name ~ '\\t' }}",
    "plain text",
]
VARS = {"name": "a_x", "items": [1, 2, 3]}


@pytest.fixture
def counting(monkeypatch):
    """The environment's compile replaced by a counting one; restored afterwards."""
    calls = []
    real = _jinja_bits.AnsibleEnvironment.compile

    def original(env, source, name=None, filename=None, raw=False, defer_init=False):
        calls.append(source)
        return real(env, source, name, filename, raw, defer_init)

    monkeypatch.setattr(_jinja_bits.AnsibleEnvironment, "compile", original)
    return calls


def render_all():
    templar = Templar(loader=DataLoader(), variables=VARS)
    return [templar.template(trust_as_template(t)) for t in TEMPLATES]


def test_cached_code_renders_as_fresh_code(tmp_path, counting):
    fresh = render_all()
    compiled = len(counting)
    assert compiled >= len(TEMPLATES) - 1  # plain text is not compiled
    cache = tc.install(tmp_path)
    assert render_all() == fresh  # first use: compiled and stored
    assert cache.compiles == compiled and len(list(tmp_path.iterdir())) == compiled
    assert render_all() == fresh  # from memory
    assert cache.hits == compiled and cache.compiles == compiled
    assert len(counting) == 2 * compiled


def test_a_new_process_reads_the_folder(tmp_path, counting):
    first = tc.TemplateCache(_jinja_bits.AnsibleEnvironment.compile, tmp_path)
    second = tc.TemplateCache(_jinja_bits.AnsibleEnvironment.compile, tmp_path)
    env = _jinja_bits.AnsibleEnvironment()
    a = first.compile(env, "{{ 1 + x }}")
    b = second.compile(env, "{{ 1 + x }}")
    assert (first.compiles, second.compiles, second.reads) == (1, 0, 1)
    assert len(counting) == 1
    # The same code, read back (code objects compare by content).
    assert b == a and b is not a


def test_the_key_follows_what_compiling_depends_on():
    env = _jinja_bits.AnsibleEnvironment()
    src = "{{ '\\n' }} [% x %]"
    base = tc.cache_key(env, src, None, None, False)
    assert tc.cache_key(env, src, None, None, False) == base
    assert tc.cache_key(env, src + " ", None, None, False) != base
    assert tc.cache_key(env, src, "t.j2", None, False) != base
    assert tc.cache_key(env, src, None, "t.j2", False) != base
    assert tc.cache_key(env, src, None, None, True) != base
    other = env.overlay(variable_start_string="[%", variable_end_string="%]")
    assert tc.cache_key(other, src, None, None, False) != base
    with _jinja_bits._TemplateCompileContext(escape_backslashes=True):
        escaped = tc.cache_key(env, src, None, None, False)
    with _jinja_bits._TemplateCompileContext(escape_backslashes=False):
        unescaped = tc.cache_key(env, src, None, None, False)
    assert len({base, escaped, unescaped}) == 3


def test_what_is_never_cached(tmp_path, counting):
    cache = tc.TemplateCache(_jinja_bits.AnsibleEnvironment.compile, tmp_path)
    env = _jinja_bits.AnsibleEnvironment()
    cache.compile(env, "{{ x }}", raw=True)
    cache.compile(env, "{{ x }}", raw=True)
    tree = env.parse("{{ x }}")
    cache.compile(env, tree)
    cache.compile(env, tree)
    assert len(counting) == 4 and cache.compiles == 0 and not list(tmp_path.iterdir())


def test_a_damaged_file_is_compiled_again(tmp_path, counting):
    env = _jinja_bits.AnsibleEnvironment()
    tc.TemplateCache(_jinja_bits.AnsibleEnvironment.compile, tmp_path).compile(env, "{{ y }}")
    (only,) = tmp_path.iterdir()
    only.write_bytes(b"\x00garbage")
    again = tc.TemplateCache(_jinja_bits.AnsibleEnvironment.compile, tmp_path)
    code = again.compile(env, "{{ y }}")
    assert again.compiles == 1 and again.reads == 0 and len(counting) == 2
    assert code == env.compile("{{ y }}")


def test_a_folder_others_can_write_is_not_used(tmp_path, monkeypatch):
    assert tc.usable_dir(tmp_path / "new") == tmp_path / "new"
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    assert tc.usable_dir(shared) is None
    monkeypatch.setenv(tc.ENV_VAR, str(tmp_path / "c"))
    assert tc.configured_dir() == tmp_path / "c" / tc.TOOLCHAIN
    monkeypatch.setenv(tc.ENV_VAR, str(shared))
    assert tc.configured_dir() is None
    monkeypatch.setenv(tc.ENV_VAR, "off")
    assert tc.configured_dir() is None


# Through Ansible: the worker forked for a task compiles through the cache, which fills
# the folder; without the callback it does not.
ACTION = '''
from ansible._internal._templating import _jinja_bits
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        wrapper = _jinja_bits.AnsibleEnvironment.__dict__.get("compile")
        return {"changed": False, "wrapped": hasattr(wrapper, "cache")}
'''


@pytest.fixture
def probe(tmp_path, monkeypatch):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "template_cache_probe.py").write_text(ACTION)
    monkeypatch.setenv("ANSIBLE_ACTION_PLUGINS", f"{plugins}:{ROOT / 'plugins' / 'action'}")
    monkeypatch.setenv(tc.ENV_VAR, str(tmp_path / "cache"))
    return lambda: run_module("template_cache_probe", {"report": "{{ 'wrapped' | upper }}"})


def test_workers_compile_through_the_cache(probe, tmp_path):
    assert probe()["wrapped"] is True
    (folder,) = (tmp_path / "cache").iterdir()
    assert folder.name == tc.TOOLCHAIN and any(folder.iterdir())


def test_without_the_callback_nothing_is_cached(probe, tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "a3rl_progress, a3rl_gc_freeze")
    assert probe()["wrapped"] is False
    assert not (tmp_path / "cache").exists()
