"""bench/tuning.py's copies of ansible.cfg (for a setting with no environment variable):
Ansible reads every setting of a copy as it reads the project's file, but the one changed."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import tuning  # noqa: E402


def _settings(config: Path) -> dict[str, object]:
    out = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-config"), "dump", "--only-changed",
         "--format", "json"],
        env={**os.environ, "ANSIBLE_CONFIG": str(config)}, cwd=ROOT,
        capture_output=True, text=True, check=True).stdout
    found = {d["name"]: d["value"] for d in json.loads(out) if "name" in d}
    # A fresh temporary folder per process under the configured one.
    found["DEFAULT_LOCAL_TMP"] = re.sub(r"/ansible-local-[^/]+$", "",
                                        str(found.get("DEFAULT_LOCAL_TMP")))
    return found


def test_a_copy_changes_only_its_setting():
    copy = tuning.config_with(*tuning.CONFIG_VARIANTS["poll-0.001"])
    project, changed = _settings(ROOT / "ansible.cfg"), _settings(copy)
    assert changed.pop("CONFIG_FILE") == str(copy)
    assert project.pop("CONFIG_FILE") == str(ROOT / "ansible.cfg")
    assert changed.pop("DEFAULT_INTERNAL_POLL_INTERVAL") == 0.001
    assert project.pop("DEFAULT_INTERNAL_POLL_INTERVAL") == 0.01
    # The roles, plugins and folders are the project's, found from .cache/bench-tuning/.
    assert changed == project
    assert project["DEFAULT_ROLES_PATH"] == [str(ROOT / "roles")]


def test_every_variant_is_known_once():
    assert not set(tuning.VARIANTS) & set(tuning.CONFIG_VARIANTS)


def test_each_speed_callback_variant_leaves_out_only_its_callback():
    enabled = tuning.enabled_callbacks()
    for cb in tuning.SPEED_CALLBACKS:
        assert cb in enabled
        name = "no-" + cb.removeprefix("a3rl_").replace("_", "-")
        left = tuning.VARIANTS[name]["ANSIBLE_CALLBACKS_ENABLED"].split(", ")
        assert left == [c for c in enabled if c != cb]
    assert {"no-gc-freeze", "no-preload", "no-template-cache"} <= set(tuning.VARIANTS)
