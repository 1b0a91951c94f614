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
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

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

# The simulator's stand-ins of the recipe's own scripts: they state the recipe's values
# (its MASTER_PORT, its dashboard port), which the project's plans are compared with.
UPSTREAM_STANDINS = {"tools/a3rl/sim/recipe_scripts.py"}

# Restatements still to remove, each with what stands in the way. The test fails when one
# is gone too, so that this list only shrinks (it is empty: keep it so).
KNOWN: dict[tuple[str, int], str] = {}


def scanned(root: Path) -> list[Path]:
    patterns = ("roles/*/defaults/*.yml", "roles/*/vars/*.yml", "roles/*/tasks/*.yml",
                "roles/*/meta/*.yml", "group_vars/all/*.yml", "playbooks/*.yml",
                "tools/a3rl/*.py", "tools/a3rl/controller/*.py", "tools/a3rl/planning/*.py",
                "tools/a3rl/node/*.py", "tools/a3rl/sim/*.py", "bench/*.py",
                "plugins/*/*.py")
    return sorted({p for pattern in patterns for p in root.glob(pattern)
                   if p.is_file() and not p.is_symlink()  # module_utils: node/ itself
                   and p.relative_to(root).as_posix() not in UPSTREAM_STANDINS})


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


# --- one name per fact across roles (issue 54) ---
#
# A role's variables are the keys of its defaults/main.yml. Another role reads one when a
# value (never a key: passing a role's documented inputs to include_role is how it is
# called) in its tasks, defaults, vars, handlers or templates names it. A value several
# roles need is a cluster-wide a3rl_* name in group_vars/all, not one role's variable
# that the others reach into; and no role's defaults fall back to another role's variable
# with default(), which restates the other role's value where that role is not loaded.
ROLE_FOLDERS = ("tasks", "defaults", "vars", "handlers", "templates")
MOST_OTHER_READERS = 2
NAME = re.compile(r"(?<![\w.'\"])[a-z][a-z0-9_]*\b")


def role_variables(root: Path) -> dict[str, str]:
    """variable -> the role whose defaults state it."""
    owners = {}
    for defaults in sorted(root.glob("roles/*/defaults/main.yml")):
        for key in yaml.safe_load(defaults.read_text()) or {}:
            owners[str(key)] = defaults.parent.parent.name
    return owners


def _strings(data) -> Iterator[str]:
    """Every string value in a YAML document, keys left out."""
    if isinstance(data, dict):
        for value in data.values():
            yield from _strings(value)
    elif isinstance(data, list):
        for value in data:
            yield from _strings(value)
    elif isinstance(data, str):
        yield data


def _role_texts(role: Path) -> Iterator[tuple[Path, list[str]]]:
    for folder in ROLE_FOLDERS:
        for path in sorted((role / folder).rglob("*")):
            if not path.is_file():
                continue
            if path.suffix in (".yml", ".yaml"):
                yield path, list(_strings(yaml.safe_load(path.read_text())))
            elif path.suffix == ".j2":
                yield path, [path.read_text()]


def other_role_reads(root: Path) -> dict[str, dict[str, list[str]]]:
    """variable -> {reading role: [file, ...]} for reads by a role other than its owner."""
    owners = role_variables(root)
    found: dict[str, dict[str, list[str]]] = {}
    for role in sorted(p for p in (root / "roles").iterdir() if p.is_dir()):
        for path, texts in _role_texts(role):
            for text in texts:
                for name in set(NAME.findall(text)):
                    owner = owners.get(name)
                    if owner and owner != role.name:
                        files = found.setdefault(name, {}).setdefault(role.name, [])
                        rel = path.relative_to(root).as_posix()
                        if rel not in files:
                            files.append(rel)
    return found


def default_fallbacks(root: Path) -> list[str]:
    """Each value in a role's defaults that puts another role's variable in a default()
    chain."""
    owners = role_variables(root)
    found = []
    for defaults in sorted(root.glob("roles/*/defaults/main.yml")):
        role = defaults.parent.parent.name
        for key, value in (yaml.safe_load(defaults.read_text()) or {}).items():
            for text in _strings(value):
                if "default(" not in text:
                    continue
                others = sorted(n for n in set(NAME.findall(text))
                                if owners.get(n) not in (None, role))
                found += [f"roles/{role}/defaults/main.yml: {key} falls back to {n} "
                          f"(role {owners[n]})" for n in others]
    return found


def test_no_role_variable_is_read_by_three_or_more_other_roles():
    wide = {name: readers for name, readers in other_role_reads(ROOT).items()
            if len(readers) > MOST_OTHER_READERS}
    assert not wide, "\n".join(
        f"{name} (role {role_variables(ROOT)[name]}) is read by {len(readers)} other roles "
        f"({', '.join(sorted(readers))}): make it a cluster-wide a3rl_* name in "
        "group_vars/all" for name, readers in sorted(wide.items()))


def test_no_role_default_falls_back_to_another_roles_variable():
    found = default_fallbacks(ROOT)
    assert not found, "\n".join(found) + (
        "\nRead the cluster-wide a3rl_* name in group_vars/all instead, or declare the "
        "variable as an input of the role (meta/argument_specs.yml) and pass it")


def test_the_cross_role_scan_counts_values_not_keys(tmp_path):
    for role, text in {
        "owner": "owner_dir: /x\nowner_port: 1\n",
        "a": "a_dir: \"{{ owner_dir }}\"\na_port: \"{{ owner_port | default(2) }}\"\n",
        "b": "b_x: 1\n",
        "c": "c_x: 1\n",
    }.items():
        (tmp_path / "roles" / role / "defaults").mkdir(parents=True)
        (tmp_path / "roles" / role / "defaults" / "main.yml").write_text(text)
    tasks = tmp_path / "roles" / "b" / "tasks"
    tasks.mkdir()
    # A key naming owner_dir is a role input passed on; the value reads it.
    tasks.joinpath("main.yml").write_text(
        "- ansible.builtin.include_role:\n    name: owner\n  vars:\n"
        "    owner_port: 3\n    owner_dir: \"{{ b_x }}/owner_dir\"\n"
        "- ansible.builtin.debug:\n    msg: \"{{ owner_dir }}\"\n")
    templates = tmp_path / "roles" / "c" / "templates"
    templates.mkdir()
    templates.joinpath("x.j2").write_text("{{ owner_dir }}\n")
    reads = other_role_reads(tmp_path)
    assert {name: sorted(r) for name, r in reads.items()} == {
        "owner_dir": ["a", "b", "c"], "owner_port": ["a"]}
    assert default_fallbacks(tmp_path) == [
        "roles/a/defaults/main.yml: a_port falls back to owner_port (role owner)"]
