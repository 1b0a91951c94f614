"""``a3rl sim ...`` and ``a3rl demo``: the simulator's own commands, run as
``python -m a3rl.sim ARGS``.

The controller's ``a3rl`` hands these commands over to this program without importing
it (the product imports nothing from the simulator, tests/unit/test_layers.py), as it
hands ``a3rl bench`` to bench/run.py. The demo drives the controller through its
command line (``a3rl up``, ``a3rl play``), as a person would after ``a3rl sim up``.
"""

from __future__ import annotations

import argparse
import os
import sys

from rich import box
from rich.console import Console
from rich.table import Table

from a3rl.controller import cli as controller
from a3rl.controller.progress import wants_live
from a3rl.paths import project_root
from a3rl.sim import cluster

console = Console(highlight=False)
PLAIN = False


def _use_console(plain: bool) -> None:
    """Plain: a console that never colours, redraws or wraps (as the controller's)."""
    global console, PLAIN
    PLAIN = plain
    console = (Console(highlight=False, no_color=True, force_terminal=False, width=10_000,
                       soft_wrap=True, emoji=False) if plain else Console(highlight=False))


def _log(msg: str) -> None:
    console.print(f"[dim]a3rl[/dim] {msg}")


def cmd_sim(args: argparse.Namespace) -> int:
    if args.sim_cmd == "up":
        c = cluster.up(args.name, args.nodes, args.subnet, args.npus, log=_log,
                       trainer=args.trainer)
        _log(f"inventory written to {c.inventory_dir}")
        return 0
    if args.sim_cmd == "down":
        cluster.down(args.name, log=_log)
        return 0
    if args.sim_cmd == "status":
        rows = cluster.status(args.name)
        if not rows:
            console.print(f"cluster {args.name!r}: no nodes")
            return 1
        table = Table(title=f"simulated cluster {args.name!r}",
                      box=box.ASCII2 if PLAIN else box.SIMPLE_HEAD)
        for col in ("node", "container", "state", "ip", "ssh", "npus"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["node"], r["container"], str(r["state"]), r.get("ip", ""),
                          "yes" if r.get("ssh") else "no", str(r.get("npus", "")))
        console.print(table)
        return 0 if all(r["state"] == "running" and r.get("ssh") for r in rows) else 1
    if args.sim_cmd == "npu-health":
        cluster.set_npu_health(args.name, args.node, args.npu, args.health)
        _log(f"{args.node}: /dev/davinci{args.npu} now reports {args.health} in npu-smi")
        return 0
    raise AssertionError(args.sim_cmd)


def cmd_demo(args: argparse.Namespace) -> int:
    c = cluster.up(args.name, nodes=args.nodes, log=_log)
    opts = ["-i", str(c.inventory_dir), "--progress", args.progress,
            *(["-q"] if args.quiet else [])]
    rc = controller.main(["up", *opts])
    if rc != 0:
        return rc
    # A short poll, so that the live view shows verl's steps as they come (real verl on
    # CPU with a tiny random Qwen3: the plan's CPU profile, a3rl.sim.cpu_profile).
    rc = controller.main(["play", str(project_root() / "playbooks" / "train.yml"), *opts,
                          "-e", "algo=grpo", "-e", "train_job_poll=2"])
    if rc == 0:
        reports = sorted((project_root() / "runs").glob("a3rl-grpo-*/report.md"),
                         key=lambda p: p.stat().st_mtime)
        name = "" if args.name == cluster.DEFAULT_NAME else f" --name {args.name}"
        console.print(
            f"[green]demo done[/green]: {args.nodes} simulated A3 node(s), site.yml passed, "
            f"a GRPO run (real verl on CPU, tiny model) finished. Training report: "
            f"{reports[-1] if reports else '(none)'}. Runs: `a3rl runs`; a run's report: "
            f"`a3rl report last`. Cluster: `a3rl sim status{name}`; remove: "
            f"`a3rl sim down{name}`."
        )
    return rc


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="a3rl sim", description="The simulated A3 cluster "
                                "(docs/simulator.md) and the demo on it.")
    simsub = p.add_subparsers(dest="sim_cmd", required=True)
    up = simsub.add_parser("up", help="start (or reuse) a simulated cluster")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--subnet", default=None, help="IPv4 /24 for the node network")
    up.add_argument("--npus", type=int, default=None,
                    help="stand-in NPU devices per node (default: npus_per_node, "
                         "group_vars/all/cluster.yml)")
    up.add_argument("--trainer", choices=("verl", "standin"), default="verl",
                    help="what GRPO runs run: real verl on CPU (the default; a 2.9 GB "
                         "image layer, built once per machine) or the stand-in trainer")
    for name in ("up", "down", "status", "npu-health"):
        sp = up if name == "up" else simsub.add_parser(name)
        sp.add_argument("--name", default="sim", help="cluster name (default: sim)")
    health = simsub.choices["npu-health"]
    health.add_argument("--node", required=True)
    health.add_argument("--npu", type=int, required=True,
                        help="davinci device number (A3: NPU npu//2, chip npu%%2)")
    health.add_argument("--health", default="Critical",
                        help="what the stand-in npu-smi reports (OK restores it)")

    demo = simsub.add_parser("demo", help="simulated cluster + site.yml + a GRPO run "
                                          "(also `a3rl demo`)")
    demo.add_argument("--nodes", type=int, default=2)
    demo.add_argument("--name", default="sim", help="simulated cluster name (default: sim)")
    demo.add_argument("-q", "--quiet", action="store_true", help="only the summary at the end")
    demo.add_argument("--progress", default="auto", choices=["auto", "live", "plain", "ansible"],
                      help="auto: live on a terminal, a line per event otherwise; ansible: "
                           "ansible-playbook's own output")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    mode = getattr(args, "progress", "auto")
    _use_console(mode == "plain" or (mode != "live" and not wants_live(sys.stdout,
                                                                         dict(os.environ))))
    try:
        if args.sim_cmd == "demo":
            return cmd_demo(args)
        return cmd_sim(args)
    except (RuntimeError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
