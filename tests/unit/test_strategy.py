"""The opt-in Mitogen strategy: what it sets, what it refuses, and that the default sets
nothing (every play is written and tested for Ansible's own linear strategy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from a3rl.controller import strategy
from a3rl.controller.runner import equivalent_command


def test_default_sets_nothing(monkeypatch):
    monkeypatch.delenv(strategy.VARIABLE, raising=False)
    assert strategy.env() == {}
    monkeypatch.setenv(strategy.VARIABLE, "linear")
    assert strategy.env() == {}


def test_mitogen_points_ansible_at_the_pinned_plugins(monkeypatch):
    monkeypatch.setenv(strategy.VARIABLE, "mitogen")
    got = strategy.env()
    assert got["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(got["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()
    assert set(got) == set(strategy.VARIABLES)


def test_an_unknown_strategy_is_refused_naming_the_variable_and_the_fix(monkeypatch):
    monkeypatch.setenv(strategy.VARIABLE, "free")
    with pytest.raises(strategy.StrategyError) as err:
        strategy.env()
    assert "A3RL_STRATEGY='free'" in str(err.value) and "linear, mitogen" in str(err.value)


def test_a_missing_mitogen_is_named_with_the_fix(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_mitogen(name, *a, **kw):
        if name == "ansible_mitogen":
            raise ImportError("No module named 'ansible_mitogen'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_mitogen)
    with pytest.raises(strategy.StrategyError, match="make venv"):
        strategy.env("mitogen")


def test_the_equivalent_command_carries_the_strategy():
    cmd = equivalent_command("site.yml", Path("inv"), {}, False,
                             {"ANSIBLE_STRATEGY": "mitogen_linear"})
    assert cmd == "ANSIBLE_STRATEGY=mitogen_linear ansible-playbook site.yml -i inv"
