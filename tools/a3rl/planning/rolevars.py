"""Role variables, each fact stated once: the value in the role's ``defaults/main.yml``
(with its comment, the role's manual), the type, choices and meaning in
``meta/argument_specs.yml``, which carries no ``default:``.

Why the spec has no defaults: Ansible never sets a variable from a spec's ``default``.
The ``validate_argument_spec`` task it prepends to a role validates the role's variables
(``defaults/main.yml`` included, the lowest precedence) in a copy
(``ArgumentSpecValidator.validate``), fills that copy's unset options from ``default``
and returns only errors; so a variable missing from ``defaults/main.yml`` stays undefined
whatever the spec says, and a spec default that differs from ``defaults/main.yml`` is
never even checked. A second copy of every value could only drift.

    python -m a3rl.planning.rolevars check      # list what breaks that rule, exit 1 if any
    python -m a3rl.planning.rolevars render     # write docs/role-variables.md
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
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


# libyaml's safe loader where PyYAML has it (the same values, about 7x faster): every
# play's settings check reads every role's spec and defaults (playbooks/tasks/settings.yml).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_SAFE_LOADER) if path.is_file() else None


def role_dirs(roles: Path) -> list[Path]:
    return sorted(p for p in roles.iterdir() if (p / "meta" / "argument_specs.yml").is_file())


def _entry_points(role: Path) -> list[tuple[str, dict[str, Any]]]:
    """The spec's entry points, ``main`` first."""
    specs = (_load(role / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}
    return [(name, specs[name] or {}) for name in sorted(specs, key=lambda n: (n != "main", n))]


def spec_options(role: Path) -> dict[str, dict[str, Any]]:
    """Every option of every entry point, first entry point first (``main``)."""
    options: dict[str, dict[str, Any]] = {}
    for _, entry in _entry_points(role):
        for key, opt in (entry.get("options") or {}).items():
            options.setdefault(key, opt or {})
    return options


def defaults(role: Path) -> dict[str, Any]:
    return _load(role / "defaults" / "main.yml") or {}


def cluster_vars(root: Path | None = None) -> dict[str, Any]:
    """``group_vars/all/cluster.yml``: the cluster-wide values the roles, the CLI, plan and
    preflight share (npus_per_node, the ports several roles open)."""
    return _load((root or project_root()) / "group_vars" / "all" / "cluster.yml") or {}


def npus_per_node(root: Path | None = None) -> int:
    """NPUs per node where neither the inventory nor the caller gives it."""
    return int(cluster_vars(root)["npus_per_node"])


def problems(roles: Path) -> list[str]:
    """Each break of the rule, as a sentence."""
    out: list[str] = []
    for role in role_dirs(roles):
        values, options = defaults(role), spec_options(role)
        for key, opt in options.items():
            if "default" in opt:
                out.append(f"{role.name}: {key}'s spec entry has a default: remove it, "
                           "defaults/main.yml states the value")
            if opt.get("required") and key in values:
                out.append(f"{role.name}: {key} is required in the spec but has a default")
            if key not in values and not opt.get("required") and (role.name, key) not in NO_DEFAULT:
                out.append(f"{role.name}: {key} is in the spec with neither a default in "
                           "defaults/main.yml nor required: true")
        out += [f"{role.name}: {key} has a default but no entry in meta/argument_specs.yml"
                for key in values if key not in options]
    return out


def kind_of(value: Any) -> str:
    """What a value is, in words."""
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    return "null" if value is None else f"a {type(value).__name__}"


def not_a_list(name: str, value: Any, role: str) -> str:
    """The refusal of a list-typed variable set to something else, with the list it meant:
    Ansible's argument validation lets a string through to the role unchanged (it splits
    "22" into ["22"] only in its own copy), and a loop then reads it one character at a
    time."""
    items = ([v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str)
             else ["..."])
    return (f"{name} is {value!r} ({kind_of(value)}), not a list: the role {role} would read "
            "it one character (or key) at a time. Fix: give a list, in the inventory as a "
            "YAML list, on the command line as JSON: -e '" + json.dumps({name: items})
            + "' (-e name=value always gives a string).")


def not_a_mapping(name: str, value: Any, role: str) -> str:
    """The refusal of a dict-typed variable set to something else."""
    return (f"{name} is {value!r} ({kind_of(value)}), not a mapping: the role {role} reads it "
            "by key. Fix: give a mapping, in the inventory as YAML, on the command line as "
            "JSON: -e '{\"" + name + "\": {...}}' (-e name=value always gives a string).")


def _short(value: Any, limit: int = 70) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("\n", " ").replace("|", "\\|")
    return f"`{text}`" if len(text) <= limit else f"`{text[:limit]}`..."


HEADER = """\
# Role variables (generated)

Generated by `python -m a3rl.planning.rolevars render`; do not edit by hand. Each value is stated
once: the default comes from the role's `defaults/main.yml` (documented in place, one
comment per variable), the type, choices and meaning from its `meta/argument_specs.yml`,
which has no `default:`. Ansible never sets a variable from a spec's `default`: the
`validate_argument_spec` task it runs before the role's first task fills unset options
only in the copy it validates, and `defaults/main.yml` is what defines them (at the
lowest precedence, so the inventory and `-e` win). Long defaults are cut (`...`): the
whole value is in `defaults/main.yml`. A default that is a template is resolved from
`group_vars/all/` (cluster-wide values such as `npus_per_node` and the shared ports live
in `group_vars/all/cluster.yml`) or the inventory.
"""


def render(roles: Path) -> str:
    """The variable reference, role by role."""
    lines = [HEADER]
    for role in role_dirs(roles):
        values = defaults(role)
        lines += [f"## {role.name}", ""]
        for name, entry in _entry_points(role):
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
                elif key in values:
                    default = _short(values[key])
                else:
                    default = "unset: " + NO_DEFAULT.get((role.name, key), "")
                desc = str(opt.get("description", "")).replace("\n", " ").replace("|", "\\|")
                lines.append(f"| `{key}` | {kind} | {default} | {desc} |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = project_root()
    what = argv[0] if argv else "check"
    if what == "check":
        found = problems(root / "roles")
        for line in found:
            print(line)
        return 1 if found else 0
    if what == "render":
        (root / DOC).write_text(render(root / "roles"))
        print("wrote", DOC)
        return 0
    print("usage: python -m a3rl.planning.rolevars check|render", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
