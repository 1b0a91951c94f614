"""Run the benchmarks: `make bench` (all) or `bench/run.py NAME [NAME ...] [-- ARGS]`.

Each benchmark is a script in this folder that prints its own table of ratios measured
side by side in one run. This runner runs the chosen ones one after the other (never in
parallel: they would measure each other) and stops at the first that fails.

    .venv/bin/python bench/run.py              # every benchmark, default sizes
    .venv/bin/python bench/run.py fanout -- --sizes 2 4
    .venv/bin/python bench/run.py --list
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, what it measures). The order is the order `make bench` runs them in.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "sim_up": ("sim_up.py", "simulated cluster to SSH-ready, and its memory"),
    "fanout": ("fanout.py", "artifact distribution: star vs fan-out, time / (S/B)"),
    "provision": ("provision.py", "site.yml on 2/4/8 fresh nodes, no-op re-run, Ray ready, "
                                  "slowest tasks"),
    "tuning": ("tuning.py", "no-op site.yml under each Ansible setting, ratio to ansible.cfg"),
    "noop": ("noop.py", "no-op site.yml of this tree against an earlier tree, on 8 nodes"),
    "resume": ("resume.py", "one injected failure: goodput under the run supervisor vs the "
                            "recipe's way (the run lost, resubmitted)"),
    "hang": ("hang.py", "one hang (SIGSTOP): time to detection and goodput under the "
                        "step-based bound vs the stall bound"),
}


def main(argv: list[str]) -> int:
    if "--list" in argv:
        for name, (script, what) in BENCHMARKS.items():
            state = "" if (HERE / script).exists() else "  (not written yet)"
            print(f"{name:10} {what}{state}")
        return 0
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    names = argv or [n for n, (s, _) in BENCHMARKS.items() if (HERE / s).exists()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    for name in names:
        script = HERE / BENCHMARKS[name][0]
        print(f"== bench {name}: {BENCHMARKS[name][1]}", flush=True)
        rc = subprocess.call([sys.executable, str(script), *extra])
        if rc != 0:
            print(f"== bench {name} failed (exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
