"""The node-side layer, tools/a3rl/node/: the files plugins/module_utils links to are
carried to the nodes inside AnsiballZ payloads and run with the node's own Python, so they
may import only the standard library (and nothing of the a3rl package either: a module
cannot import what is not shipped with it). The whole subpackage is held to that, linked
or not, and every link points into it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from a3rl.paths import project_root

MODULE_UTILS = project_root() / "plugins" / "module_utils"
NODE_DIR = project_root() / "tools" / "a3rl" / "node"
LINKS = sorted(p for p in MODULE_UTILS.iterdir() if p.suffix == ".py")
NODE_SIDE = sorted(NODE_DIR.glob("*.py"))
ALLOWED = set(sys.stdlib_module_names) | {"__future__"}
# Optional clients a node-side function needs on the host that runs it, imported late
# inside `try: ... except ImportError` that names the fix; nothing else may use them.
OPTIONAL = {
    ("artifacts.py", "modelscope"): "the ModelScope client, on the fetch host only",
    ("cluster_ops.py", "ray"): "Ray, where cluster_ops runs as a Ray driver (the head)",
}
# Programs installed on a node whole, with the node-side modules they use copied beside
# them (the run supervisor, roles/run_supervisor), not module payloads: they import those
# neighbours by name, after trying the tree's a3rl.node names (inside try/except
# ImportError). Nothing else.
PROGRAMS = {
    "supervisor.py": {"a3rl", "checkpoints", "first_failure", "metrics", "npu",
                      "npu_network", "rayjobs"},
}


def imports(path: Path, guarded: bool = True) -> set[str]:
    """Top-level names of every import in the file, at any depth (inside functions and
    try blocks too: a late import still runs on the node). ``guarded=False`` leaves out
    the imports inside a ``try`` that catches ImportError."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    if not guarded:
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError",
                                                                   "ModuleNotFoundError")
                    for h in node.handlers):
                skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: a sibling that is not shipped with the module
                found.add("." * node.level + (node.module or ""))
            elif node.module:
                found.add(node.module.split(".")[0])
    return found


def test_every_module_utils_link_points_into_the_node_side_package():
    assert LINKS, "plugins/module_utils has no node-side code"
    for path in LINKS:
        assert path.is_symlink(), f"{path.name} is not a link into tools/a3rl/node/"
        assert path.resolve().parent == NODE_DIR, \
            f"{path.name} links to {path.resolve()}, outside tools/a3rl/node/"
        assert path.name == f"a3rl_{path.resolve().name}", path.name


def test_every_node_side_module_is_linked_for_the_nodes():
    linked = {p.resolve() for p in LINKS}
    unlinked = [p.name for p in NODE_SIDE if p.name != "__init__.py" and p.resolve() not in linked]
    assert not unlinked, (f"tools/a3rl/node/{unlinked} is not linked from plugins/module_utils:"
                          " link it (a3rl_<name>.py) or move it to the controller side")


@pytest.mark.parametrize("path", NODE_SIDE, ids=lambda p: p.name)
def test_node_side_code_imports_only_the_standard_library(path):
    optional = {mod for (name, mod) in OPTIONAL if name == path.name}
    extra = imports(path) - ALLOWED - optional - PROGRAMS.get(path.name, set())
    # a program tries the tree's names only where their absence is caught
    extra |= imports(path, guarded=False) & PROGRAMS.get(path.name, set()) & {"a3rl"}
    # an optional client is allowed only where its absence is caught
    extra |= (imports(path, guarded=False) - ALLOWED) & optional
    assert not extra, (f"tools/a3rl/node/{path.name} runs on the nodes (through "
                       f"plugins/module_utils) but imports {sorted(extra)}: keep it to the "
                       "standard library, or move that code to the controller side")


def test_the_import_check_sees_late_and_relative_imports(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\ndef f():\n    import yaml\nfrom . import sib\nfrom a3rl import plan\n")
    assert imports(f) - ALLOWED == {"yaml", ".", "a3rl"}
    f.write_text("try:\n    import yaml\nexcept ImportError:\n    yaml = None\n")
    assert imports(f) == {"yaml"} and imports(f, guarded=False) == set()
