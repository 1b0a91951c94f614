"""The frameworks probe's read of what is installed where jobs run
(``frameworks_dists_script`` in roles/frameworks/vars/main.yml): it lists what
``pip freeze --all`` lists, and a changed version or install URL changes its output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from a3rl.paths import project_root

VARS = project_root() / "roles" / "frameworks" / "vars" / "main.yml"


def _script() -> str:
    return yaml.safe_load(VARS.read_text())["frameworks_dists_script"]


def _run(*extra_path: Path) -> str:
    env = {"PYTHONPATH": ":".join(str(p) for p in extra_path)} if extra_path else None
    out = subprocess.run([sys.executable, "-c", _script()], capture_output=True, text=True,
                         check=True, env=env)
    return out.stdout


def _dist(site: Path, name: str, version: str, direct_url: str | None = None) -> Path:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if direct_url:
        (info / "direct_url.json").write_text(direct_url)
    return info


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_it_lists_every_distribution_pip_freeze_lists():
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all",
                             "--disable-pip-version-check"], capture_output=True, text=True,
                            check=True).stdout
    pins = re.findall(r"^([^#\s=@-][^=\s]*)==(\S+)$", freeze, re.M)
    pinned = {_norm(n) + "==" + v for n, v in pins}
    listed = {_norm(line.split("==", 1)[0]) + "==" + line.split("==", 1)[1].split(" ", 1)[0]
              for line in _run().splitlines()}
    assert len(pinned) > 10
    assert pinned <= listed, sorted(pinned - listed)


def test_a_changed_version_or_install_url_changes_the_output(tmp_path: Path):
    site = tmp_path / "site"
    info = _dist(site, "a3rlfake", "1.0")
    first = _run(site)
    assert "a3rlfake==1.0 " in first.splitlines()
    info.rename(site / "a3rlfake-1.1.dist-info")
    (site / "a3rlfake-1.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: a3rlfake\nVersion: 1.1\n")
    second = _run(site)
    assert "a3rlfake==1.1" in second and second != first
    (site / "a3rlfake-1.1.dist-info" / "direct_url.json").write_text(
        '{"url": "file:///tmp/a3rlfake"}')
    third = _run(site)
    assert 'a3rlfake==1.1 {"url": "file:///tmp/a3rlfake"}' in third and third != second
    # Nothing else moved: the same listing twice.
    assert _run(site) == third


def _rendered_read(tmp_path: Path, pip: list[str]) -> list[str]:
    """``frameworks_dists_read`` as Ansible renders it for ``frameworks_pip: pip``."""
    out = tmp_path / "read.json"
    play = tmp_path / "render.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Render the frameworks role's read of the installed distributions",
        "hosts": "localhost", "gather_facts": False, "vars_files": [str(VARS)],
        "tasks": [{"name": "Write it", "ansible.builtin.copy": {
            "dest": str(out), "content": "{{ frameworks_dists_read | to_json }}",
            "mode": "0644"}}],
    }]))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         "-c", "local", str(play), "-e", json.dumps({"frameworks_pip": pip}),
         "-e", json.dumps({"ansible_python_interpreter": sys.executable})],
        cwd=project_root(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads(out.read_text())


def _pins(listing: str) -> set[str]:
    return {_norm(n) + "==" + v for n, v in re.findall(r"^([^#\s=@ ][^=\s]*)==(\S+)", listing,
                                                        re.M)}


def test_the_role_reads_through_python_when_it_runs_pip_as_a_module_else_pip_freeze(tmp_path):
    """Both forms of frameworks_pip, rendered by Ansible and run: `... python -m pip` gets
    the script (no pip loaded), any other pip command `pip freeze --all`; each lists the
    same distributions."""
    as_module = _rendered_read(tmp_path, [sys.executable, "-m", "pip"])
    assert as_module == [sys.executable, "-c", _script()]
    pip = str(Path(sys.executable).with_name("pip"))
    as_command = _rendered_read(tmp_path, [pip])
    assert as_command == [pip, "freeze", "--all", "--disable-pip-version-check"]
    lists = [subprocess.run(argv, capture_output=True, text=True, check=True).stdout
             for argv in (as_module, as_command)]
    assert len(_pins(lists[1])) > 10
    assert _pins(lists[1]) <= _pins(lists[0]), sorted(_pins(lists[1]) - _pins(lists[0]))
