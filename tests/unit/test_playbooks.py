"""Every playbook in playbooks/ that applies a role starts with the settings check
(playbooks/tasks/settings.yml: preflight's check of the inventory and its settings'
values), so that a stage run alone refuses a bad value before it changes anything
(issue 53). Read from the playbooks' YAML: no play runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
CHECK = "tasks/settings.yml"
SECTIONS = ("pre_tasks", "tasks", "post_tasks", "handlers")
ROLE_KEYS = {f"{p}{k}" for p in ("", "ansible.builtin.") for k in ("include_role", "import_role")}
IMPORT_KEYS = {"import_tasks", "ansible.builtin.import_tasks"}
ONCE = "preflight_settings_checked"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _tasks(tasks: list | None):
    for task in tasks or []:
        yield task
        for part in ("block", "rescue", "always"):
            yield from _tasks(task.get(part))


def _applies_a_role(play: dict) -> bool:
    return bool(play.get("roles")) or any(
        ROLE_KEYS & set(t) for s in SECTIONS for t in _tasks(play.get(s)))


def _first_step(play: dict) -> tuple[str, Any]:
    """What the play runs first after gathering facts: ("task", the task) or
    ("role", its name). Ansible runs pre_tasks, then roles, then tasks."""
    if play.get("pre_tasks"):
        return "task", play["pre_tasks"][0]
    if play.get("roles"):
        role = play["roles"][0]
        return "role", role["role"] if isinstance(role, dict) else role
    return "task", (play.get("tasks") or [None])[0]


def _is_check(task: Any) -> bool:
    return isinstance(task, dict) and any(task.get(k) == CHECK for k in IMPORT_KEYS)


def _starts_with_preflight_check(role: str) -> bool:
    first = (_load(ROOT / "roles" / role / "tasks" / "main.yml") or [{}])[0]
    return role == "preflight" and any(first.get(k) == "settings.yml" for k in IMPORT_KEYS)


def problems(path: Path) -> list[str]:
    plays = _load(path) or []
    if not any(_applies_a_role(p) for p in plays if "hosts" in p):
        return []
    kind, first = _first_step(plays[0])
    if kind == "task" and _is_check(first):
        return []
    if kind == "role" and _starts_with_preflight_check(first):
        return []
    return [f"{path.name}: its first play starts with {kind} {first!r}, not the settings "
            f"check. Fix: make `ansible.builtin.import_tasks: {CHECK}` the first task of "
            "its first play (pre_tasks when it has roles)."]


@pytest.mark.parametrize("path", sorted(PLAYBOOKS.glob("*.yml")), ids=lambda p: p.name)
def test_a_playbook_that_applies_a_role_starts_with_the_settings_check(path):
    assert problems(path) == []


def test_a_playbook_without_the_check_is_named(tmp_path):
    bad = tmp_path / "stage.yml"
    bad.write_text(yaml.safe_dump([{"name": "S", "hosts": "a3_nodes",
                                    "roles": [{"role": "recipe_env"}]}]))
    assert problems(bad) and "stage.yml" in problems(bad)[0]
    late = tmp_path / "late.yml"  # the check after a role: the role has run first
    late.write_text(yaml.safe_dump([{"name": "S", "hosts": "a3_nodes",
                                     "roles": ["recipe_env"],
                                     "tasks": [{"ansible.builtin.import_tasks": CHECK}]}]))
    assert problems(late)
    none = tmp_path / "report.yml"  # no role applied: nothing to check
    none.write_text(yaml.safe_dump([{"name": "S", "hosts": "localhost", "tasks": [
        {"ansible.builtin.debug": {"msg": "x"}}]}]))
    assert problems(none) == []


def test_the_check_is_skipped_only_after_it_passed_in_this_run():
    """The shared file skips the check when preflight_settings_checked is defined, which
    only the check itself sets (its registered result, run_once: on every host of the
    play); site.yml runs preflight, which checks, first."""
    shared = _load(PLAYBOOKS / CHECK)
    assert len(shared) == 1 and shared[0]["when"] == f"{ONCE} is not defined"
    role = shared[0]["ansible.builtin.import_role"]
    assert role == {"name": "preflight", "tasks_from": "settings"}
    check = _load(ROOT / "roles" / "preflight" / "tasks" / "settings.yml")
    assert [t.get("register") for t in check] == [ONCE]
    assert check[0]["run_once"] is True and check[0]["any_errors_fatal"] is True
    setters = [p for p in (ROOT / "roles").rglob("*.yml") if ONCE in p.read_text()]
    setters += [p for p in PLAYBOOKS.rglob("*.yml") if ONCE in p.read_text()]
    assert sorted(p.relative_to(ROOT).as_posix() for p in setters) == [
        "playbooks/tasks/settings.yml", "roles/preflight/tasks/settings.yml"]
    site = _load(ROOT / "site.yml")
    assert site[0]["ansible.builtin.import_playbook"] == "playbooks/preflight.yml"
