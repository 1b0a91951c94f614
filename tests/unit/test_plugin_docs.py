"""Every plugin's DOCUMENTATION is YAML Ansible can read: Ansible parses a callback's
when it loads it, and a broken one stops every run with "Unexpected Exception"."""

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = sorted(p for p in (ROOT / "plugins").rglob("*.py")
                 if "DOCUMENTATION" in p.read_text())


def _documentation(path: Path) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return node.value.value
    raise AssertionError(f"{path}: no DOCUMENTATION string")


def test_the_callbacks_are_among_them():
    names = {p.name for p in PLUGINS}
    assert {"a3rl_gc_freeze.py", "a3rl_preload.py", "a3rl_template_cache.py"} <= names


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documentation_is_a_mapping_with_a_name(path):
    doc = yaml.safe_load(_documentation(path))
    assert isinstance(doc, dict) and doc.get("short_description")
    assert isinstance(doc.get("description", []), (list, str))
