"""The pre-submit Hydra composition (a3rl.planning.hydra_check) against verl 0.6.0's own configs."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import hydra  # noqa: F401  (a pinned dependency: a broken install fails, not skips)
import pytest

from a3rl.planning import hydra_check
from a3rl.sim import upstreams


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory) -> Path:
    sdist = upstreams.verl_sdist(log=lambda _m: None)
    out = tmp_path_factory.mktemp("verl")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/verl/trainer/config/" in m.name]
        tar.extractall(out, members=members, filter="data")
    return next(out.glob("*/verl/trainer/config"))


def test_good_overrides_compose(config_dir):
    got = hydra_check.compose(str(config_dir), "ppo_megatron_trainer",
                              ["data.train_batch_size=32", "trainer.nnodes=2"])
    assert got == {"ok": True}


def test_a_misspelled_key_is_named(config_dir):
    got = hydra_check.compose(str(config_dir), "ppo_megatron_trainer",
                              ["data.train_batch_size=32", "trainer.nnode=2"])
    assert not got["ok"] and got["key"] == "trainer.nnode", got


def test_the_script_form_used_in_the_container(config_dir):
    args = json.dumps({"config_dir": str(config_dir), "config_name": "ppo_megatron_trainer",
                       "overrides": ["actor_rollout_ref.rollout.temprature=0.9"]})
    src = Path(hydra_check.__file__).read_text()
    proc = subprocess.run([sys.executable, "-", "--json", args], input=src, text=True,
                          capture_output=True, check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["key"] == "actor_rollout_ref.rollout.temprature"


def test_a_plus_on_a_key_the_config_has_is_named_and_a_new_one_composes(config_dir):
    got = hydra_check.compose(str(config_dir), "ppo_megatron_trainer",
                              ["+trainer.project_name=a3rl"])
    assert not got["ok"] and got["key"] == "trainer.project_name" and got["exists"], got
    assert hydra_check.compose(str(config_dir), "ppo_megatron_trainer",
                               ["+trainer.a3rl_note=1"]) == {"ok": True}
    typo = hydra_check.compose(str(config_dir), "ppo_megatron_trainer", ["trainer.nnode=2"])
    assert not typo["exists"], typo
