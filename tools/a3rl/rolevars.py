"""Role variables from one source: each role's ``meta/argument_specs.yml``.

The spec is what Ansible checks before a role's first task, so it is the place where a
variable's type, choices and meaning are kept. ``defaults/main.yml`` holds the values;
the rule checked here (and by ``tests/unit/test_role_variables.py``) is that the two
agree: every default has a spec entry whose ``default`` is the same value, and every
spec option has a default or is ``required`` (a few inventory and Vault inputs are
named exceptions). ``docs/role-variables.md`` is rendered from the specs.

    python -m a3rl.rolevars check      # list disagreements, exit 1 if any
    python -m a3rl.rolevars sync       # copy each default into its spec entry
    python -m a3rl.rolevars render     # write docs/role-variables.md
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from a3rl.paths import project_root

# Spec options that have neither a default nor `required`, and why: they are read only
# when the inventory or Vault sets them, and "not set" has a meaning of its own.
NO_DEFAULT = {
    ("preflight", "cluster_nic"): "host variable; derived from cluster_ip when absent",
    ("ray_cluster", "ray_cluster_auth_token"): "Vault secret; when absent the token is generated",
}

DOC = "docs/role-variables.md"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def role_dirs(roles: Path) -> list[Path]:
    return sorted(p for p in roles.iterdir() if (p / "meta" / "argument_specs.yml").is_file())


def spec_options(role: Path) -> dict[str, dict[str, Any]]:
    """Every option of every entry point, first entry point first (``main``)."""
    specs = (_load(role / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}
    options: dict[str, dict[str, Any]] = {}
    for name in sorted(specs, key=lambda n: (n != "main", n)):
        for key, opt in (specs[name].get("options") or {}).items():
            options.setdefault(key, opt or {})
    return options


def defaults(role: Path) -> dict[str, Any]:
    return _load(role / "defaults" / "main.yml") or {}


def problems(roles: Path) -> list[str]:
    """Each disagreement between a role's defaults and its spec, as a sentence."""
    out: list[str] = []
    for role in role_dirs(roles):
        values, options = defaults(role), spec_options(role)
        for key, value in values.items():
            opt = options.get(key)
            if opt is None:
                out.append(f"{role.name}: {key} has a default but no entry in "
                           "meta/argument_specs.yml")
            elif opt.get("required"):
                out.append(f"{role.name}: {key} is required in the spec but has a default")
            elif "default" not in opt:
                out.append(f"{role.name}: {key}'s spec entry has no default (defaults/main.yml "
                           f"has {_short(value)})")
            elif opt["default"] != value:
                out.append(f"{role.name}: {key}'s spec default {_short(opt['default'])} is not "
                           f"defaults/main.yml's {_short(value)}")
        for key, opt in options.items():
            if key in values or opt.get("required") or (role.name, key) in NO_DEFAULT:
                continue
            out.append(f"{role.name}: {key} is in the spec with neither a default in "
                       "defaults/main.yml nor required: true")
    return out


def sync(roles: Path) -> list[str]:
    """Copy every default into its spec entry; return the options changed. The file is
    edited line by line, so its comments, wrapping and order stay as they are; options
    missing from the spec are left for a person to describe."""
    changed: list[str] = []
    for role in role_dirs(roles):
        path = role / "meta" / "argument_specs.yml"
        values = defaults(role)
        lines = path.read_text().splitlines()
        for key, value in values.items():
            for at in _option_lines(lines, key):
                if _set_default(lines, at, value):
                    changed.append(f"{role.name}.{key}")
        text = "\n".join(lines) + "\n"
        if text != path.read_text():
            path.write_text(text)
    return changed


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


_ANCHOR = r"(?: &[\w-]+)?"


def _option_lines(lines: list[str], key: str) -> list[int]:
    """Where ``key:`` opens an option under an ``options:`` mapping (anchors allowed;
    an alias such as ``key: *x`` is the same option, written once)."""
    found = []
    for i, line in enumerate(lines):
        if not re.fullmatch(re.escape(key) + ":" + _ANCHOR, line.strip()):
            continue
        j = i - 1
        while j >= 0 and (not lines[j].strip() or _indent(lines[j]) >= _indent(line)):
            j -= 1
        if j >= 0 and re.fullmatch("options:" + _ANCHOR, lines[j].strip()):
            found.append(i)
    return found


def _fields(lines: list[str], at: int) -> tuple[int, dict[str, tuple[int, int]]]:
    """The option's field indentation and each field's lines, ``(first, after)``."""
    head = _indent(lines[at])
    end = at + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > head):
        end += 1
    field = _indent(lines[at + 1]) if at + 1 < end else head + 2
    fields: dict[str, tuple[int, int]] = {}
    i = at + 1
    while i < end:
        name = lines[i].strip().split(":", 1)[0]
        j = i + 1
        while j < end and (not lines[j].strip() or _indent(lines[j]) > field
                           or lines[j].lstrip().startswith("- ")):
            j += 1
        fields[name] = (i, j)
        i = j
    return field, fields


class _Dumper(yaml.SafeDumper):
    """Block lists indented under their key, as the project's YAML is."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):  # noqa: ARG002
        return super().increase_indent(flow, False)


def _value_at(lines: list[str], a: int, b: int, field: int) -> Any:
    return yaml.safe_load("\n".join(line[field:] for line in lines[a:b]))["default"]


def _set_default(lines: list[str], at: int, value: Any) -> bool:
    """Make the option opened at line ``at`` say ``default: value`` and not
    ``required``; True when a line changed."""
    before = list(lines)
    field, fields = _fields(lines, at)
    if "required" in fields:
        a, b = fields["required"]
        del lines[a:b]
        field, fields = _fields(lines, at)
    if "default" in fields and _value_at(lines, *fields["default"], field) == value:
        return lines != before
    if isinstance(value, str) and "\n" in value:  # a template over lines, as in defaults
        new = [" " * field + "default: |-"] + [
            (" " * (field + 2) + line).rstrip() for line in value.split("\n")]
    else:
        body = yaml.dump({"default": value}, Dumper=_Dumper, width=72, sort_keys=False,
                         allow_unicode=True)
        new = [" " * field + line for line in body.rstrip("\n").splitlines()]
    if _value_at(new, 0, len(new), field) != value:
        raise ValueError(f"cannot write {value!r} so that it loads back the same")
    if "default" in fields:
        a, b = fields["default"]
        lines[a:b] = new
    else:
        after = max((fields[k][1] for k in ("type", "elements", "choices") if k in fields),
                    default=at + 1)
        lines[after:after] = new
    return True


def _short(value: Any, limit: int = 70) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("\n", " ").replace("|", "\\|")
    return f"`{text}`" if len(text) <= limit else f"`{text[:limit]}`..."


def render(roles: Path) -> str:
    """The variable reference, role by role, from the specs alone."""
    lines = ["# Role variables (generated)", "",
             "Generated from each role's `meta/argument_specs.yml` by "
             "`python -m a3rl.rolevars render`; do not edit by hand. Long defaults are cut "
             "(`...`): the whole value is in the role's `defaults/main.yml`. A default that "
             "is a template is resolved from `group_vars/all/` or the inventory.", ""]
    for role in role_dirs(roles):
        specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]
        lines += [f"## {role.name}", ""]
        for name in sorted(specs, key=lambda n: (n != "main", n)):
            entry = specs[name]
            title = entry.get("short_description", "")
            lines += [f"Entry point `{name}`: {title}".rstrip(": "), "",
                      "| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
            for key, opt in (entry.get("options") or {}).items():
                opt = opt or {}
                kind = opt.get("type", "str")
                if opt.get("elements"):
                    kind += f" of {opt['elements']}"
                if opt.get("choices"):
                    kind += " (" + ", ".join(str(c) for c in opt["choices"]) + ")"
                if opt.get("required"):
                    default = "required"
                elif "default" in opt:
                    default = _short(opt["default"])
                else:
                    default = "unset: " + NO_DEFAULT.get((role.name, key), "")
                desc = str(opt.get("description", "")).replace("\n", " ").replace("|", "\\|")
                lines.append(f"| `{key}` | {kind} | {default} | {desc} |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = project_root()
    roles = root / "roles"
    what = argv[0] if argv else "check"
    if what == "check":
        found = problems(roles)
        for line in found:
            print(line)
        return 1 if found else 0
    if what == "sync":
        for name in sync(roles):
            print("synced", name)
        return 0
    if what == "render":
        (root / DOC).write_text(render(roles))
        print("wrote", DOC)
        return 0
    print("usage: python -m a3rl.rolevars check|sync|render", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
