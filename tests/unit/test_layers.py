"""The node-side layer, tools/a3rl/node/: the files plugins/module_utils links to are
carried to the nodes inside AnsiballZ payloads and run with the node's own Python, so they
may import only the standard library (and nothing of the a3rl package either: a module
cannot import what is not shipped with it). The one exception is a sibling imported in
two steps, ``ansible.module_utils.a3rl_<x>`` (packed into the payload with the module)
and, when that fails, ``a3rl.node.<x>`` (the controller and the tests): node/common.py
is shared that way. The whole subpackage is held to that, linked or not, and every link
points into it."""

from __future__ import annotations

import ast
import importlib.util
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
                      "npu_network", "rayjobs", "stall"},
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


def sibling_imports(path: Path) -> tuple[set[str], list[str]]:
    """The node-side siblings ``path`` imports in two steps (``try: from
    ansible.module_utils.a3rl_<x> import names`` / ``except ImportError: from a3rl.node.<x>
    import`` the same names), and a sentence for each import of ``ansible`` or ``a3rl``
    that is not part of such a pair."""
    tree = ast.parse(path.read_text(), str(path))
    pairs: set[str] = set()
    paired: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        tried = [n for n in node.body if isinstance(n, ast.ImportFrom)
                 and (n.module or "").startswith("ansible.module_utils.a3rl_")]
        handlers = [h for h in node.handlers if isinstance(h.type, ast.Name)
                    and h.type.id in ("ImportError", "ModuleNotFoundError")]
        if not tried or not handlers:
            continue
        fallback = [n for h in handlers for n in h.body if isinstance(n, ast.ImportFrom)]
        for t in tried:
            name = t.module.removeprefix("ansible.module_utils.a3rl_")
            names = sorted((a.name, a.asname) for a in t.names)
            for f in fallback:
                if (f.module == f"a3rl.node.{name}"
                        and sorted((a.name, a.asname) for a in f.names) == names
                        and (NODE_DIR / f"{name}.py").is_file()):
                    pairs.add(name)
                    paired |= {id(t), id(f)}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and id(node) not in paired and (
                (node.module or "").split(".")[0] in ("ansible", "a3rl")):
            problems.append(f"line {node.lineno}: from {node.module} import ... is not half of"
                            " a try ansible.module_utils.a3rl_<x> / except ImportError"
                            " a3rl.node.<x> pair importing the same names from a sibling")
        if isinstance(node, ast.Import) and any(
                a.name.split(".")[0] in ("ansible", "a3rl") for a in node.names):
            problems.append(f"line {node.lineno}: import {node.names[0].name}")
    return pairs, problems


@pytest.mark.parametrize("path", NODE_SIDE, ids=lambda p: p.name)
def test_node_side_code_imports_only_the_standard_library(path):
    optional = {mod for (name, mod) in OPTIONAL if name == path.name}
    program = PROGRAMS.get(path.name, set())
    pairs, problems = sibling_imports(path)
    if not program:
        assert not problems, f"tools/a3rl/node/{path.name}: " + "; ".join(problems)
    siblings = {"ansible", "a3rl"} if pairs else set()
    extra = imports(path) - ALLOWED - optional - program - siblings
    # a program tries the tree's names only where their absence is caught
    extra |= imports(path, guarded=False) & PROGRAMS.get(path.name, set()) & {"a3rl"}
    # an optional client is allowed only where its absence is caught
    extra |= (imports(path, guarded=False) - ALLOWED) & optional
    assert not extra, (f"tools/a3rl/node/{path.name} runs on the nodes (through "
                       f"plugins/module_utils) but imports {sorted(extra)}: keep it to the "
                       "standard library, or move that code to the controller side")


def test_the_sibling_check_accepts_only_the_two_step_pair(tmp_path):
    f = tmp_path / "x.py"
    pair = ("try:\n    from ansible.module_utils.a3rl_common import git\n"
            "except ImportError:\n    from a3rl.node.common import git\n")
    f.write_text(pair)
    assert sibling_imports(f) == ({"common"}, [])
    f.write_text(pair.replace("a3rl.node.common import git", "a3rl.node.common import sha256_file"))
    assert sibling_imports(f)[0] == set() and len(sibling_imports(f)[1]) == 2
    f.write_text(pair.replace("a3rl_common", "a3rl_nothing").replace("node.common", "node.nothing"))
    assert sibling_imports(f)[0] == set()
    f.write_text("from ansible.module_utils.a3rl_common import git\n")
    assert sibling_imports(f)[1]
    f.write_text("from a3rl.planning import plan\n")
    assert sibling_imports(f)[1]


def test_the_import_check_sees_late_and_relative_imports(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\ndef f():\n    import yaml\nfrom . import sib\nfrom a3rl import plan\n")
    assert imports(f) - ALLOWED == {"yaml", ".", "a3rl"}
    f.write_text("try:\n    import yaml\nexcept ImportError:\n    yaml = None\n")
    assert imports(f) == {"yaml"} and imports(f, guarded=False) == set()


# ---- the product does not import the simulator ------------------------------------------
#
# Production code (the plugins, the roles' modules, the a3rl package but its sim/
# subpackage) imports nothing from the simulator: the simulator supplies what it changes
# through the inventory it writes (its CPU profile is data the product's generic job
# profile applies, a3rl.planning.job_profile), and `a3rl sim`/`a3rl demo` run the
# simulator as a program of its own (`python -m a3rl.sim`), a process boundary as for
# bench/run.py, not an import. bench/ and tests/ may import a3rl.sim: they measure and
# test the simulator.

ROOT = project_root()
SIM_DIR = ROOT / "tools" / "a3rl" / "sim"
PRODUCT_PY = sorted(
    {p for p in (ROOT / "plugins").rglob("*.py")}
    | {p for p in (ROOT / "tools" / "a3rl").rglob("*.py") if SIM_DIR not in p.parents}
)
# Calls that import a module named by a string (importlib.import_module, __import__,
# importlib.util.find_spec, runpy.run_module).
IMPORTING_CALLS = {"import_module", "__import__", "find_spec", "run_module"}


def _package_of(path: Path) -> list[str]:
    """The dotted package a file under tools/ belongs to (for relative imports); [] elsewhere."""
    try:
        rel = path.relative_to(ROOT / "tools")
    except ValueError:
        return []
    return list(rel.parts[:-1])


def sim_imports(path: Path) -> list[str]:
    """Every import of a3rl.sim in the file (:func:`package_imports`)."""
    return package_imports(path, "a3rl.sim")


def package_imports(path: Path, wanted: str) -> list[str]:
    """Every import of ``wanted`` (a dotted package) in the file, at any depth:
    ``import``/``from`` statements (relative ones resolved against the file's package),
    ``from a3rl import sim`` for ``a3rl.sim``, and modules imported by a constant string
    (``importlib.import_module("a3rl.sim.x")``, ``__import__``, ``find_spec``,
    ``run_module``, with a constant package argument)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package_of(path)
    found: list[str] = []

    def is_sim(name: str) -> bool:
        return name == wanted or name.startswith(wanted + ".")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if is_sim(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] if package else []
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [module] + [f"{module}.{a.name}" for a in node.names]
            if any(is_sim(n) for n in names):
                found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} "
                             f"import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name not in IMPORTING_CALLS or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            target = first.value
            anchor = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "package"), None)
            if target.startswith(".") and isinstance(anchor, ast.Constant):
                target = str(anchor.value) + target
            if is_sim(target):
                found.append(f"line {node.lineno}: {name}({first.value!r})")
    return found


def test_the_product_imports_nothing_from_the_simulator():
    """Issue 44: no file of plugins/ or tools/a3rl outside sim/ imports
    a3rl.sim, in any form sim_imports sees. bench/ and tests/ are not scanned: they may
    import the simulator, which they measure and test. `python -m a3rl.sim` in the
    controller (a3rl sim, a3rl demo) runs the simulator as a separate program, not an
    import, and is allowed."""
    assert len(PRODUCT_PY) > 50 and not [p for p in PRODUCT_PY if SIM_DIR in p.parents]
    bad = {str(p.relative_to(ROOT)): hits for p in PRODUCT_PY if (hits := sim_imports(p))}
    assert not bad, (f"production code imports the simulator: {bad}. The simulator hands the "
                     "product data through the inventory it writes "
                     "(a3rl.planning.job_profile) or runs "
                     "as its own program (python -m a3rl.sim); the product never imports it")


def test_the_simulator_import_scan_sees_every_form(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\nimport a3rl.sim.cluster\nfrom a3rl.sim import podman\n"
                 "from a3rl import sim, plan\ndef f():\n    from a3rl.sim.hub import serve\n"
                 "    import importlib\n    importlib.import_module('a3rl.sim.cpu_profile')\n"
                 "    importlib.import_module('.sim', 'a3rl')\n    __import__('a3rl.sim')\n"
                 "from a3rl import simulated, plan\nimportlib.import_module('a3rl.simx')\n"
                 "import a3rl.similar\n")
    assert [h.split(":")[0] for h in sim_imports(f)] == [
        "line 2", "line 3", "line 4", "line 6", "line 8", "line 9", "line 10"]
    # relative imports resolve against the file's package: tools/a3rl/x.py's `.sim` is a3rl.sim
    g = ROOT / "tools" / "a3rl" / "x.py"
    assert _package_of(g) == ["a3rl"]


def test_no_role_or_play_calls_a_filter_of_the_simulator():
    """The Jinja side: every a3rl filter a role, play or template calls is one of the
    product's filter plugins (plugins/filter, which import no simulator code: the test
    above), none is named as the simulator's (a3rl_sim_*), and no role or play names the
    simulator's modules or files (a3rl.sim, tools/a3rl/sim/)."""
    import re

    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()
    provided: set[str] = set()
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_a3rl_filter_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        provided |= set(module.FilterModule().filters())
    used: dict[str, set[str]] = {}
    files = [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("roles/**/*.j2"),
             *ROOT.glob("playbooks/*.yml"), ROOT / "site.yml", *ROOT.glob("templates/**/*.j2")]
    for path in files:
        for name in re.findall(r"\|\s*(a3rl_\w+)", path.read_text()):
            used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert used, "no a3rl filter found in the roles: the scan is broken"
    named = sorted(str(p.relative_to(ROOT)) for p in files
                   if re.search(r"a3rl[./]sim\b", p.read_text()))
    assert not named, f"roles or plays name the simulator's code or files: {named}"
    sim = {n: sorted(w) for n, w in used.items() if n.startswith("a3rl_sim")}
    assert not sim, f"roles call the simulator's filters: {sim}"
    unknown = {n: sorted(w) for n, w in used.items() if n not in provided}
    assert not unknown, f"roles call a3rl filters no product plugin provides: {unknown}"


# The a3rl package's layers are its folders: controller/ (the a3rl command, run records,
# reports), planning/ (plans, preflight, the manifest: pure logic the filter plugins and
# the controller call), node/ (what modules carry to the nodes), sim/ (the simulator),
# rewards/ (the reward functions staged into the job's working directory), and at the top
# only the helpers every layer shares.
TOOLS_A3RL = ROOT / "tools" / "a3rl"
LAYERS = {"controller", "planning", "node", "sim", "rewards"}
SHARED = {"__init__.py", "paths.py", "files.py", "masking.py"}


def test_the_package_is_its_layers_as_folders():
    top = {p.name for p in TOOLS_A3RL.glob("*.py")}
    assert top == SHARED, (f"tools/a3rl/ holds {sorted(top - SHARED)} beside the shared "
                           "helpers: move each into the folder of its layer")
    folders = {p.name for p in TOOLS_A3RL.iterdir()
               if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == LAYERS, f"packages under tools/a3rl: {sorted(folders)}"


@pytest.mark.parametrize("lower, upper", [
    ("planning", "a3rl.controller"), ("node", "a3rl.controller"), ("node", "a3rl.planning"),
    ("rewards", "a3rl.controller"), ("rewards", "a3rl.planning"),
])
def test_a_lower_layer_imports_nothing_of_an_upper_one(lower, upper):
    files = sorted((TOOLS_A3RL / lower).rglob("*.py"))
    files += [TOOLS_A3RL / name for name in SHARED] if lower == "planning" else []
    assert files
    bad = {str(p.relative_to(ROOT)): hits for p in files if (hits := package_imports(p, upper))}
    assert not bad, f"{lower} imports {upper}: {bad}"


def test_the_layer_scan_sees_an_upward_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from a3rl import controller\nfrom a3rl.controller.runs import x\n"
                 "import a3rl.controllers\n")
    assert [h.split(":")[0] for h in package_imports(f, "a3rl.controller")] == [
        "line 1", "line 2"]


def test_modules_have_one_home():
    """Every module is in plugins/modules (ansible.cfg's library), none in a role's
    library/: one place to look for a module, and a module two roles need is not moved
    when the second one needs it."""
    assert not sorted(ROOT.glob("roles/*/library")), "move the modules to plugins/modules"
    assert len(list((ROOT / "plugins" / "modules").glob("a3rl_*.py"))) >= 18


def test_every_project_file_a_role_names_by_path_exists():
    """Roles read some of the package's files by path (the Hydra check is sent into the
    training container, the supervisor and reward functions are copied): a file moved
    to another layer's folder must be found there, not at a play's run time."""
    import re

    named = {(str(p.relative_to(ROOT)), m) for p in ROOT.glob("roles/*/*/*.yml")
             for m in re.findall(r"tools/a3rl/[\w/]+\.py", p.read_text())}
    assert any("hydra_check" in m for _, m in named)
    missing = sorted((f, m) for f, m in named if not (ROOT / m).is_file())
    assert not missing, f"roles name files that do not exist: {missing}"
