"""The ``a3rl`` command: the simulator, and the plays through ansible-runner."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from a3rl.paths import project_root

console = Console(highlight=False)


def _log(msg: str) -> None:
    console.print(f"[dim]a3rl[/dim] {msg}")


def _default_inventory() -> Path:
    return project_root() / "inventory" / "sim"


def cmd_sim(args: argparse.Namespace) -> int:
    from a3rl.sim import cluster

    if args.sim_cmd == "up":
        c = cluster.up(args.name, args.nodes, args.subnet, args.npus, log=_log)
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
        table = Table(title=f"simulated cluster {args.name!r}")
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


def _summary(result) -> None:
    table = Table(title=f"{result.play}: {result.status} in {result.seconds:.0f}s")
    for col in ("host", "ok", "changed", "failed", "unreachable"):
        table.add_column(col)
    hosts = sorted({h for counts in result.stats.values() if isinstance(counts, dict)
                    for h in counts})
    for h in hosts:
        table.add_row(h, *(str(result.stats.get(k, {}).get(h, 0))
                           for k in ("ok", "changed", "failures", "dark")))
    console.print(table)
    for host, task, msg in result.failures:
        console.print(f"[red]FAILED[/red] {host} | {task}\n  {msg}")
    console.print(f"record: {result.record}\nsame as: {result.command}")


def cmd_play(args: argparse.Namespace, playbook: str) -> int:
    from a3rl.runner import run_play

    inv = Path(args.inventory) if args.inventory else _default_inventory()
    if not inv.exists():
        console.print(f"inventory {inv} does not exist (for the simulator: `a3rl sim up`)")
        return 2
    bad = [kv for kv in args.extra_vars if "=" not in kv]
    if bad:
        console.print(f"-e takes KEY=VALUE; got {', '.join(bad)}")
        return 2
    # Values stay strings, as with ansible-playbook -e; the roles cast what they need.
    extra = dict(kv.split("=", 1) for kv in args.extra_vars)
    result = run_play(playbook, inv, extra, check=args.check, quiet=args.quiet)
    _summary(result)
    return 0 if result.ok else 1


def cmd_plan(args: argparse.Namespace) -> int:
    """Print a run's job (entrypoint, config, overrides, env) without touching any host."""
    import json

    from a3rl.paths import project_root
    from a3rl.plan import PlanError, plan_from_files

    try:
        made = plan_from_files(project_root(), args.algo, args.model, args.weights,
                               args.feature, args.nodes, args.npus_per_node,
                               args.assets_dir, args.workdir,
                               extra_overrides=args.override or None)
    except PlanError as e:
        console.print(f"[red]{e}[/red]")
        return 1
    job = made.job()
    if args.format == "json":
        print(json.dumps({k: job[k] for k in ("entrypoint", "config_name", "overrides", "env")}
                         | {"submission_id": job["submission_id"]}, indent=1))
    else:
        print(job["entrypoint"])
        for k, v in sorted(job["env"].items()):
            print(f"{k}={v}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    extra = [f"algo={args.algo}", f"action={args.action}"]
    for key in ("model", "weights"):
        if getattr(args, key):
            extra.append(f"{key}={getattr(args, key)}")
    if args.feature:
        extra.append("features=" + ",".join(args.feature))
    args.extra_vars = extra + list(args.extra_vars)
    return cmd_play(args, "playbooks/train.yml")


def cmd_demo(args: argparse.Namespace) -> int:
    from a3rl.runner import run_play
    from a3rl.sim import cluster

    c = cluster.up(nodes=args.nodes, log=_log)
    result = run_play("site.yml", c.inventory_dir, quiet=args.quiet)
    _summary(result)
    if not result.ok:
        return 1
    train = run_play("playbooks/train.yml", c.inventory_dir, {"algo": "grpo"}, quiet=args.quiet)
    _summary(train)
    if train.ok:
        from a3rl.paths import project_root

        reports = sorted((project_root() / "runs").glob("a3rl-grpo-*/report.md"),
                         key=lambda p: p.stat().st_mtime)
        console.print(
            f"[green]demo done[/green]: {args.nodes} simulated A3 node(s), site.yml passed "
            f"({result.changed} change(s)), a simulated GRPO run finished. Report: "
            f"{reports[-1] if reports else '(none)'}. Status: `a3rl sim status`; "
            "remove: `a3rl sim down`."
        )
    return 0 if train.ok else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="a3rl", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    sim = sub.add_parser("sim", help="the simulated A3 cluster")
    simsub = sim.add_subparsers(dest="sim_cmd", required=True)
    up = simsub.add_parser("up", help="start (or reuse) a simulated cluster")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--subnet", default=None, help="IPv4 /24 for the node network")
    up.add_argument("--npus", type=int, default=16, help="stand-in NPU devices per node")
    for name in ("up", "down", "status", "npu-health"):
        sp = up if name == "up" else simsub.add_parser(name)
        sp.add_argument("--name", default="sim", help="cluster name (default: sim)")
    health = simsub.choices["npu-health"]
    health.add_argument("--node", required=True)
    health.add_argument("--npu", type=int, required=True,
                        help="davinci device number (A3: NPU npu//2, chip npu%%2)")
    health.add_argument("--health", default="Critical",
                        help="what the stand-in npu-smi reports (OK restores it)")

    for name, helptext in (("up", "run site.yml"), ("preflight", "run playbooks/preflight.yml")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("-i", "--inventory", default=None, help="default: inventory/sim")
        sp.add_argument("-e", "--extra-vars", action="append", default=[], metavar="K=V")
        sp.add_argument("--check", action="store_true")
        sp.add_argument("-q", "--quiet", action="store_true")

    plan = sub.add_parser("plan", help="print a run's job without touching any host")
    plan.add_argument("--algo", required=True, choices=["grpo", "dapo"])
    plan.add_argument("--model", required=True)
    plan.add_argument("--weights", default="real", choices=["real", "random"])
    plan.add_argument("--feature", action="append", default=[],
                      help="a feature name (repeat; no-<name> turns a default off)")
    plan.add_argument("--nodes", type=int, default=None, help="default: the recipe's")
    plan.add_argument("--npus-per-node", type=int, default=16)
    plan.add_argument("--override", action="append", default=[], help="a Hydra override")
    plan.add_argument("--assets-dir", default="/data/a3rl")
    plan.add_argument("--workdir", default="/data/a3rl/llm_rl/qwen3")
    plan.add_argument("--format", default="json", choices=["json", "text"])

    train = sub.add_parser("train", help="run playbooks/train.yml")
    train.add_argument("--algo", required=True, choices=["grpo", "dapo"])
    train.add_argument("--model", default=None)
    train.add_argument("--weights", default=None, choices=["real", "random"])
    train.add_argument("--feature", action="append", default=[])
    train.add_argument("--action", default="submit", choices=["submit", "stop", "status"])
    train.add_argument("-i", "--inventory", default=None, help="default: inventory/sim")
    train.add_argument("-e", "--extra-vars", action="append", default=[], metavar="K=V")
    train.add_argument("--check", action="store_true")
    train.add_argument("-q", "--quiet", action="store_true")

    demo = sub.add_parser("demo", help="simulated cluster + site.yml + a GRPO run")
    demo.add_argument("--nodes", type=int, default=2)
    demo.add_argument("-q", "--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.cmd == "sim":
            return cmd_sim(args)
        if args.cmd == "up":
            return cmd_play(args, "site.yml")
        if args.cmd == "preflight":
            return cmd_play(args, "playbooks/preflight.yml")
        if args.cmd == "demo":
            return cmd_demo(args)
        if args.cmd == "plan":
            return cmd_plan(args)
        if args.cmd == "train":
            return cmd_train(args)
    except (RuntimeError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    raise AssertionError(args.cmd)


if __name__ == "__main__":
    sys.exit(main())
