"""`make test` starts a3rl.sim.base_images with the machine's own Python, before the venv
exists: the module and every a3rl module it loads may use only the standard library, at
import and inside their functions alike."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from a3rl.paths import project_root

TOOLS = project_root() / "tools"
ALLOWED = set(sys.stdlib_module_names) | {"__future__", "a3rl"}

# -S: no site-packages, as in a Python without the venv; the a3rl modules then loaded are
# the ones the build runs.
_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import a3rl.sim.base_images
print(json.dumps(sorted({name: m.__file__ for name, m in sys.modules.items()
                         if name.split('.')[0] == 'a3rl'}.values())))
"""


def _loaded() -> list[Path]:
    proc = subprocess.run([sys.executable, "-S", "-E", "-c", _PROBE, str(TOOLS)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [Path(p) for p in json.loads(proc.stdout)]


def _top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_base_images_imports_without_the_venv():
    loaded = _loaded()
    assert TOOLS / "a3rl" / "sim" / "base_images.py" in loaded
    assert TOOLS / "a3rl" / "sim" / "image.py" in loaded
    assert TOOLS / "a3rl" / "sim" / "cann.py" in loaded


def test_no_module_it_loads_imports_beyond_the_standard_library():
    outside = {str(p.relative_to(TOOLS)): sorted(_top_level_imports(p) - ALLOWED)
               for p in _loaded()}
    assert {k: v for k, v in outside.items() if v} == {}


def test_the_check_sees_a_late_import(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("import os\n\ndef f():\n    import yaml\n    return yaml\n")
    assert _top_level_imports(sample) - ALLOWED == {"yaml"}
