"""A value that has an owner is written there only (issue 44, "one statement per fact").

Each value below is stated once, in its owner's file; every other role, var file or
controller module reads it from there (a template naming the owner's variable, or
a3rl.planning.rolevars in Python). The scan finds the literal anywhere else in the roles' YAML,
group_vars/all, the plays and the a3rl package (node-side code included, the simulator's
stand-ins of upstream scripts not: they state the recipe's own values). Comments and
Python strings are not read: prose may cite a value, code may not restate it."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from a3rl.paths import project_root

ROOT = project_root()

# value -> (owner file, the variable that states it, context a line must match for the
# value to mean this fact: None when the number is distinctive on its own).
OWNED: dict[int, tuple[str, str, str | None]] = {
    16: ("group_vars/all/cluster.yml", "npus_per_node", r"(?i)npus?\b|npus?_|devices_per_node"),
    29444: ("group_vars/all/cluster.yml", "a3rl_ray_gcs_port", None),
    8260: ("group_vars/all/cluster.yml", "a3rl_ray_dashboard_port", None),
    29470: ("group_vars/all/cluster.yml", "a3rl_fanout_port", None),
    64021: ("group_vars/all/cluster.yml", "a3rl_hccl_base_port", None),
    32: ("group_vars/all/cluster.yml", "a3rl_hccl_port_count", r"port_count"),
    **{port: ("roles/ray_cluster/defaults/main.yml", f"ray_cluster_*_port ({port})", None)
       for port in (10001, 10002, 19999, *range(29450, 29456))},
}

# Restatements still to remove, each with what stands in the way. The test fails when one
# is gone too, so that this list only shrinks (it is empty: keep it so).
KNOWN: dict[tuple[str, int], str] = {}


def scanned(root: Path) -> list[Path]:
    patterns = ("roles/*/defaults/*.yml", "roles/*/vars/*.yml", "roles/*/tasks/*.yml",
                "roles/*/meta/*.yml", "group_vars/all/*.yml", "playbooks/*.yml",
                "tools/a3rl/*.py", "tools/a3rl/controller/*.py", "tools/a3rl/planning/*.py",
                "tools/a3rl/node/*.py", "tools/a3rl/sim/cluster.py",
                "plugins/*/*.py")
    return sorted({p for pattern in patterns for p in root.glob(pattern)
                   if p.is_file() and not p.is_symlink()})  # module_utils: node/ itself


def _yaml_lines(text: str) -> list[tuple[int, str]]:
    """Each line without its comment (a # at the start or after a space)."""
    return [(i, re.split(r"(?:^|\s)#", line, maxsplit=1)[0])
            for i, line in enumerate(text.splitlines(), 1)]


def _python_numbers(text: str) -> list[tuple[int, str, str]]:
    """(line number, number literal, the line) for every number token."""
    lines = text.splitlines()
    return [(tok.start[0], tok.string, lines[tok.start[0] - 1])
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.NUMBER]


def restatements(root: Path) -> dict[tuple[str, int], list[str]]:
    """(file, value) -> the lines outside the value's owner that write it."""
    found: dict[tuple[str, int], list[str]] = {}
    for path in scanned(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        if path.suffix == ".py":
            hits = [(n, int(s), line) for n, s, line in _python_numbers(text) if s.isdigit()]
        else:
            hits = [(n, int(m.group()), line) for n, line in _yaml_lines(text)
                    for m in re.finditer(r"(?<![\w.:-])\d+(?![\w.])", line)]
        for n, value, line in hits:
            owner = OWNED.get(value)
            if owner is None or owner[0] == rel:
                continue
            if owner[2] and not re.search(owner[2], line):
                continue
            found.setdefault((rel, value), []).append(f"{rel}:{n}: {line.strip()}")
    return found


def test_each_owned_value_is_written_by_its_owner_only():
    found = restatements(ROOT)
    new = {k: v for k, v in found.items() if k not in KNOWN}
    assert not new, "\n".join(
        f"{line}\n    restates {OWNED[value][1]}, owned by {OWNED[value][0]}: read it there"
        for (_, value), lines in new.items() for line in lines)
    gone = sorted(set(KNOWN) - set(found))
    assert not gone, f"no longer restated, remove from KNOWN: {gone}"


@pytest.mark.parametrize("value", sorted(OWNED))
def test_each_owner_states_its_value(value):
    owner, name, context = OWNED[value]
    lines = [line for _, line in _yaml_lines((ROOT / owner).read_text())]
    assert any(re.search(rf"(?<![\w.]){value}(?![\w.])", line)
               and (context is None or re.search(context, line)) for line in lines), (
        f"{owner} no longer states {name} = {value}: update OWNED")


def test_the_scan_sees_yaml_values_and_python_numbers_but_not_prose(tmp_path):
    (tmp_path / "group_vars/all").mkdir(parents=True)
    (tmp_path / "tools/a3rl").mkdir(parents=True)
    (tmp_path / "group_vars/all/x.yml").write_text(
        "# the relay's 29470\nport: 29470  # again 64021\nother: '{{ x | default(64021) }}'\n")
    (tmp_path / "tools/a3rl/x.py").write_text(
        '"""29444 in prose."""\nNPUS_PER_NODE = 16\nsize = 16\nport = 8260  # 29450\n')
    assert sorted(restatements(tmp_path)) == [
        ("group_vars/all/x.yml", 29470), ("group_vars/all/x.yml", 64021),
        ("tools/a3rl/x.py", 16), ("tools/a3rl/x.py", 8260)]
