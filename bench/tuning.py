"""Benchmark: what each Ansible setting in ansible.cfg buys, on a no-op ``site.yml``.

One simulated cluster (default 4 nodes) is provisioned once; then ``site.yml`` runs
again (every run a no-op: changed=0 is checked) under each variant, variants interleaved
over the repeats, medians reported with the ratio to the project's settings. A variant
is the project's ansible.cfg with one setting changed through its environment variable,
so each row isolates one choice:

* ``no-pipelining``: ANSIBLE_PIPELINING=False (modules copied over SFTP, then run)
* ``no-controlpersist``: a new SSH connection per task (no ControlMaster/ControlPersist)
* ``forks-1``: one host at a time (ansible.cfg sizes forks to the largest inventory)
* ``strategy-free``: hosts do not wait for each other between tasks
* ``gathering-smart``: facts gathered once per host and then read from the fact cache

    .venv/bin/python bench/tuning.py [--nodes 4] [--runs 2] [--variants ...]
"""

from __future__ import annotations

import argparse
import statistics

from a3rl.runner import run_play
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
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    a = ap.parse_args()
    variants = ["project"] + [v for v in a.variants if v != "project"]
    c = cluster.up(NAME, nodes=a.nodes, log=lambda _m: None)
    try:
        first = run_play("site.yml", c.inventory_dir, quiet=True)
        if not first.ok:
            raise SystemExit(f"site.yml failed on the fresh cluster: {first.record}")
        times: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(a.runs):
            for v in variants:
                r = run_play("site.yml", c.inventory_dir, quiet=True, extra_env=VARIANTS[v])
                if not r.ok or r.changed:
                    raise SystemExit(f"{v}: site.yml was not a passing no-op "
                                     f"(rc={r.rc}, changed={r.changed}): {r.record}")
                times[v].append(r.seconds)
                print(f"  {v:18} {r.seconds:6.1f} s", flush=True)
    finally:
        if not a.keep:
            cluster.down(NAME, log=lambda _m: None)
    base = statistics.median(times["project"])
    print(f"\nno-op site.yml on {a.nodes} nodes, median of {a.runs} (variants interleaved); "
          f"first run {first.seconds:.0f} s")
    print(f"{'variant':18} {'seconds':>8} {'vs project':>10}")
    for v in variants:
        m = statistics.median(times[v])
        print(f"{v:18} {m:>8.1f} {m / base:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
