"""Role variables have one source: each default agrees with its argument spec entry, and
the reference in docs/role-variables.md is rendered from the specs (a3rl.rolevars)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

from a3rl import rolevars
from a3rl.paths import project_root

ROOT = project_root()


def test_every_default_agrees_with_its_spec():
    assert rolevars.problems(ROOT / "roles") == [], (
        "fix the spec or the default; `python -m a3rl.rolevars sync` copies defaults into "
        "the specs")


def test_the_variable_reference_is_rendered_from_the_specs():
    assert (ROOT / rolevars.DOC).read_text() == rolevars.render(ROOT / "roles"), (
        "docs/role-variables.md is stale: run `python -m a3rl.rolevars render`")


def _role(tmp_path: Path, defaults: str, spec: str) -> Path:
    role = tmp_path / "roles" / "demo"
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text(textwrap.dedent(defaults))
    (role / "meta" / "argument_specs.yml").write_text(textwrap.dedent(spec))
    return tmp_path / "roles"


SPEC = """\
    ---
    argument_specs:
      main:
        short_description: A demo
        options: &opts
          demo_port:
            type: int
            default: 1
            description: A port.
          demo_paths:
            type: list
            elements: str
            required: true
            description: Some paths.
          demo_when: &when
            type: bool
            description: A switch.
          demo_spec_only:
            type: str
            description: Nobody sets it.
      other:
        short_description: The same options
        options: *opts
    """
DEFAULTS = """\
    ---
    # A comment that stays.
    demo_port: 2
    demo_paths:
      - /a
      - "{{ x }}/b"
    demo_when: >-
      {{ a == 'b'
         and c }}
    """


def test_each_kind_of_disagreement_is_named(tmp_path):
    roles = _role(tmp_path, DEFAULTS, SPEC)
    found = rolevars.problems(roles)
    assert found == [
        "demo: demo_port's spec default `1` is not defaults/main.yml's `2`",
        "demo: demo_paths is required in the spec but has a default",
        "demo: demo_when's spec entry has no default (defaults/main.yml has "
        "`{{ a == 'b'    and c }}`)",
        "demo: demo_spec_only is in the spec with neither a default in defaults/main.yml "
        "nor required: true",
    ]


def test_sync_copies_the_defaults_and_keeps_the_rest(tmp_path):
    roles = _role(tmp_path, DEFAULTS, SPEC)
    spec_path = roles / "demo" / "meta" / "argument_specs.yml"
    changed = rolevars.sync(roles)
    assert sorted(changed) == ["demo.demo_paths", "demo.demo_port", "demo.demo_when"]
    text = spec_path.read_text()
    assert "options: &opts" in text and "options: *opts" in text and "required" not in text
    opts = yaml.safe_load(text)["argument_specs"]["main"]["options"]
    values = yaml.safe_load((roles / "demo" / "defaults" / "main.yml").read_text())
    for key in ("demo_port", "demo_paths", "demo_when"):
        assert opts[key]["default"] == values[key]
        assert list(opts[key])[0] == "type"  # the default follows type/elements
    # Only the spec-only option is left, for a person to resolve; a second sync is a no-op.
    assert rolevars.problems(roles) == [
        "demo: demo_spec_only is in the spec with neither a default in defaults/main.yml "
        "nor required: true"]
    assert rolevars.sync(roles) == [] and spec_path.read_text() == text


def test_a_long_default_is_written_within_the_line_length(tmp_path):
    long = "{{ " + " | ".join(f"filter_{i}(arg)" for i in range(20)) + " }}"
    roles = _role(tmp_path, f"---\ndemo_port: \"{long}\"\n", SPEC)
    rolevars.sync(roles)
    text = (roles / "demo" / "meta" / "argument_specs.yml").read_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert yaml.safe_load(text)["argument_specs"]["main"]["options"]["demo_port"][
        "default"] == long


def test_the_reference_lists_every_option_with_its_default(tmp_path):
    roles = _role(tmp_path, DEFAULTS, SPEC)
    rolevars.sync(roles)
    doc = rolevars.render(roles)
    assert "| `demo_port` | int | `2` | A port. |" in doc
    assert "| `demo_spec_only` | str | unset: " in doc
    assert "Entry point `other`: The same options" in doc
