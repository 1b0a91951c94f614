"""Benchmark: what each Ansible setting in ansible.cfg buys, on a no-op ``site.yml``.

One simulated cluster (default 4 nodes) is provisioned once; then ``site.yml`` runs
again (every run a no-op: changed=0 is checked) under each variant, variants interleaved
over the repeats, medians reported with the ratio to the project's settings. A variant
is the project's ansible.cfg with one setting changed through its environment variable,
so each row isolates one choice:

* ``no-pipelining``: ANSIBLE_PIPELINING=False (modules copied over SFTP, then run)
* ``no-controlpersist``: a new SSH connection per task (no ControlMaster/ControlPersist)
* ``forks-1``: one host at a time (ansible.cfg sizes forks to the largest inventory)
* ``strategy-free``: hosts do not wait for each other between tasks (a variant the plays
  cannot run under is reported with its first failure, and not repeated)
* ``gathering-smart``: facts gathered once per host and then read from the fact cache
* ``mitogen``: Mitogen for Ansible's ``mitogen_linear`` strategy (the opt-in
  ``A3RL_STRATEGY=mitogen``, :mod:`a3rl.controller.strategy`): one interpreter per node for the run
* ``no-gc-freeze``: without the ``a3rl_gc_freeze`` callback (the main process's heap is
  not frozen at the play's start, so every forked worker copies the pages its garbage
  collector touches)
* ``no-preload``: without the ``a3rl_preload`` callback (every forked worker that uses one
  of the project's filters, or its action plugin, imports it and the a3rl modules behind it)
* ``no-template-cache``: without the ``a3rl_template_cache`` callback (every worker compiles
  each template string it renders from source; with it, the folder the earlier runs
  filled is reused, as in any run after the first)
* ``poll-0.001``: Ansible's default ``internal_poll_interval`` (0.001 s; the project sets
  0.01). Ansible reads it only from a config file, so this variant runs with a copy of
  the project's ansible.cfg (``.cache/bench-tuning/``, its relative paths made absolute).
  The main process checks for finished tasks this often while it waits: the setting
  shows in the controller's CPU seconds more than in the wall time

    .venv/bin/python bench/tuning.py [--nodes 4] [--runs 2] [--variants ...]
"""

from __future__ import annotations

import argparse
import configparser
import resource
import statistics
from pathlib import Path

from a3rl.controller import strategy
from a3rl.controller.runner import run_play
from a3rl.paths import cache_dir, project_root
from a3rl.sim import cluster

NAME = "bench-tune"
SSH_NO_PERSIST = "-o ControlMaster=no -o ServerAliveInterval=15 -o StrictHostKeyChecking=yes"
VARIANTS: dict[str, dict[str, str]] = {
    "project": {},
    "no-pipelining": {"ANSIBLE_PIPELINING": "False"},
    "no-controlpersist": {"ANSIBLE_SSH_ARGS": SSH_NO_PERSIST},
    "forks-1": {"ANSIBLE_FORKS": "1"},
    "strategy-free": {"ANSIBLE_STRATEGY": "free"},
    "gathering-smart": {"ANSIBLE_GATHERING": "smart"},
    "mitogen": strategy.env(strategy.MITOGEN),
}
# Each of the project's own speed callbacks left out in turn (the others stay enabled).
SPEED_CALLBACKS = ("a3rl_gc_freeze", "a3rl_preload", "a3rl_template_cache")

# Variants of a setting that has no environment variable: (section, key, value) in a copy
# of ansible.cfg.
CONFIG_VARIANTS: dict[str, tuple[str, str, str]] = {
    "poll-0.001": ("defaults", "internal_poll_interval", "0.001"),
}
# The settings of ansible.cfg that name files or folders Ansible finds relative to the
# file's folder (fact_caching_connection is relative to the current directory, as in the
# original). tests/unit/test_bench_tuning.py checks that a copy resolves to the same.
PATH_KEYS = {"roles_path", "filter_plugins", "callback_plugins", "library", "action_plugins",
             "module_utils", "local_tmp", "control_path_dir"}


def config_with(section: str, key: str, value: str, root: Path | None = None) -> Path:
    """A copy of the project's ansible.cfg with one setting changed, for a setting that
    has no environment variable. It is written under .cache/, so its relative paths are
    made absolute (the copy must find the same roles and plugins)."""
    root = root or project_root()
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.optionxform = str
    cfg.read(root / "ansible.cfg")
    for sec in cfg.sections():
        for k in PATH_KEYS & set(cfg[sec]):
            cfg[sec][k] = ":".join(str(root / p) if not p.startswith("/") else p
                                   for p in cfg[sec][k].split(":"))
    cfg[section][key] = value
    out = cache_dir() / "bench-tuning" / f"{section}.{key}={value}.cfg"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        cfg.write(f)
    return out


def enabled_callbacks(root: Path | None = None) -> list[str]:
    """ansible.cfg's callbacks_enabled, in its order."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read((root or project_root()) / "ansible.cfg")
    return [c.strip() for c in cfg["defaults"]["callbacks_enabled"].split(",") if c.strip()]


for _cb in SPEED_CALLBACKS:
    VARIANTS["no-" + _cb.removeprefix("a3rl_").replace("_", "-")] = {
        "ANSIBLE_CALLBACKS_ENABLED": ", ".join(c for c in enabled_callbacks() if c != _cb)}


def variant_env(name: str) -> dict[str, str]:
    if name in CONFIG_VARIANTS:
        return {"ANSIBLE_CONFIG": str(config_with(*CONFIG_VARIANTS[name]))}
    return dict(VARIANTS[name])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS) + list(CONFIG_VARIANTS),
                    choices=list(VARIANTS) + list(CONFIG_VARIANTS))
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    a = ap.parse_args()
    variants = ["project"] + [v for v in a.variants if v != "project"]
    c = cluster.up(NAME, nodes=a.nodes, log=lambda _m: None)
    try:
        first = run_play("site.yml", c.inventory_dir, quiet=True)
        if not first.ok:
            raise SystemExit(f"site.yml failed on the fresh cluster: {first.record}")
        times: dict[str, list[float]] = {v: [] for v in variants}
        # CPU seconds of the controller's processes (ansible-playbook and its forks, all
        # waited for): set beside the wall time, it shows how much of a run is the
        # controller's own work on these 2 cores (the nodes' work is the rest).
        cpu: dict[str, list[float]] = {v: [] for v in variants}
        failed: dict[str, str] = {}
        for _ in range(a.runs):
            for v in [v for v in variants if v not in failed]:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                r = run_play("site.yml", c.inventory_dir, quiet=True, extra_env=variant_env(v))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if r.changed:
                    raise SystemExit(f"{v}: site.yml was not a no-op "
                                     f"(changed={r.changed}): {r.record}")
                if not r.ok:
                    # A setting the plays cannot run under is a finding, not a crash.
                    host, task, msg = (r.failures or [("?", "?", f"rc {r.rc}")])[0]
                    failed[v] = f"fails: {host} | {task} | {msg[:160]}"
                    print(f"  {v:18} {failed[v]}", flush=True)
                    continue
                times[v].append(r.seconds)
                cpu[v].append(after.ru_utime + after.ru_stime
                              - before.ru_utime - before.ru_stime)
                print(f"  {v:18} {r.seconds:6.1f} s, controller CPU {cpu[v][-1]:6.1f} s",
                      flush=True)
    finally:
        if not a.keep:
            cluster.down(NAME, log=lambda _m: None)
    base = statistics.median(times["project"])
    print(f"\nno-op site.yml on {a.nodes} nodes, median of {a.runs} (variants interleaved); "
          f"first run {first.seconds:.0f} s")
    print(f"{'variant':18} {'seconds':>8} {'vs project':>10} {'controller CPU s':>16}")
    for v in variants:
        if v in failed:
            print(f"{v:18} {failed[v]}")
            continue
        m = statistics.median(times[v])
        print(f"{v:18} {m:>8.1f} {m / base:>10.2f} {statistics.median(cpu[v]):>16.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
