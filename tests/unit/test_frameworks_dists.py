"""The frameworks probe's read of what is installed where jobs run
(``frameworks_dists_script`` in roles/frameworks/vars/main.yml): it lists what
``pip freeze --all`` lists, and a changed version or install URL changes its output."""

from __future__ import annotations

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
