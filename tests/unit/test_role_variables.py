"""Role variables are stated once: values in defaults/main.yml, type and meaning in the
argument spec (no `default:` there), and docs/role-variables.md rendered from both
(a3rl.planning.rolevars)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from a3rl.paths import project_root
from a3rl.planning import rolevars

ROOT = project_root()


def test_every_role_states_each_default_once():
    assert rolevars.problems(ROOT / "roles") == []


def test_the_variable_reference_is_rendered_from_defaults_and_specs():
    assert (ROOT / rolevars.DOC).read_text() == rolevars.render(ROOT / "roles"), (
        "docs/role-variables.md is stale: run `python -m a3rl.planning.rolevars render`")


def _role(tmp_path: Path, defaults: str, spec: str) -> Path:
    role = tmp_path / "roles" / "demo"
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text(textwrap.dedent(defaults))
    (role / "meta" / "argument_specs.yml").write_text(textwrap.dedent(spec))
    return tmp_path / "roles"


SPEC = """\
    argument_specs:
      main:
        short_description: A demo
        options: &opts
          demo_port: {type: int, default: 2, description: A port.}
          demo_paths: {type: list, elements: str, required: true, description: Paths.}
          demo_mode: {type: str, choices: [a, b], description: A mode.}
          demo_spec_only: {type: str, description: Nobody sets it.}
      other:
        short_description: The same options
        options: *opts
    """
DEFAULTS = """\
    demo_port: 2
    demo_paths: [/a]
    demo_mode: a
    demo_stray: 1
    """


def test_each_break_of_the_rule_is_named(tmp_path):
    assert rolevars.problems(_role(tmp_path, DEFAULTS, SPEC)) == [
        "demo: demo_port's spec entry has a default: remove it, defaults/main.yml states "
        "the value",
        "demo: demo_paths is required in the spec but has a default",
        "demo: demo_spec_only is in the spec with neither a default in defaults/main.yml "
        "nor required: true",
        "demo: demo_stray has a default but no entry in meta/argument_specs.yml",
    ]


def test_the_reference_takes_values_from_defaults_and_the_rest_from_the_spec(tmp_path):
    doc = rolevars.render(_role(tmp_path, DEFAULTS.replace("demo_port: 2", "demo_port: 7"),
                                SPEC))
    assert "| `demo_port` | int | `7` | A port. |" in doc
    assert "| `demo_mode` | str (a, b) | `a` | A mode. |" in doc
    assert "| `demo_paths` | list of str | required | Paths. |" in doc
    assert "| `demo_spec_only` | str | unset: " in doc
    assert "Entry point `other`: The same options" in doc
