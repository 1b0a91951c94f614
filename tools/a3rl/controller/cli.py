"""The ``a3rl`` command: the plays through ansible-runner, with live progress and a record
of every run; the simulated cluster; run plans, benchmarks, run listings and reports.

Every play command runs the same play ``ansible-playbook`` would (the record's
``command.txt`` says which command exactly) and exits with ``ansible-playbook``'s code.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from a3rl.paths import project_root

console = Console(highlight=False)
# True when stdout is not a terminal that can redraw: no colour, no live view, no wrapping.
PLAIN = False

# command -> (playbook, help)
PLAYS = {
    "up": ("site.yml", "bring the cluster up: run site.yml"),
    "preflight": ("playbooks/preflight.yml", "check the inventory and the nodes, change nothing"),
    "train": ("playbooks/train.yml", "submit (and follow), stop or look at a training run"),
    "status": ("playbooks/status.yml", "the cluster's health in one table (fails when unhealthy)"),
    "clean-cache": ("playbooks/cache_clean.yml",
                    "remove the recipe's caches, a batch of nodes at a time"),
    "down": ("playbooks/teardown.yml",
             "stop the jobs and Ray, remove the training containers (more with --purge)"),
}


def _use_console(plain: bool) -> None:
    """Plain: a console that never colours, redraws or wraps (CI logs, pipes, files)."""
    global console, PLAIN
    PLAIN = plain
    if plain:
        console = Console(highlight=False, no_color=True, force_terminal=False,
                          width=10_000, soft_wrap=True, emoji=False)
    else:
        console = Console(highlight=False)


def _log(msg: str) -> None:
    console.print(f"[dim]a3rl[/dim] {msg}")


def _box() -> Any:
    return box.ASCII2 if PLAIN else box.SIMPLE_HEAD


def _default_inventory() -> Path:
    return project_root() / "inventory" / "sim"


def cmd_sim(argv: list[str]) -> int:
    """``a3rl sim ARGS`` and ``a3rl demo ARGS``: the simulator's own program
    (``python -m a3rl.sim``, tools/a3rl/sim/cli.py) with this venv's Python; its exit code
    is ours. A separate program, not an import: the product imports nothing from the
    simulator (tests/unit/test_layers.py)."""
    sys.stdout.flush()
    return subprocess.call([sys.executable, "-m", "a3rl.sim", *argv])


# ---- running a play ------------------------------------------------------------------


def _display(args: argparse.Namespace, playbook: str) -> tuple[Any, bool]:
    """The progress display for this run and ansible-runner's ``quiet``."""
    from a3rl.controller.fold import Tracker
    from a3rl.controller.progress import LiveDisplay, PlainDisplay

    if getattr(args, "quiet", False):
        return None, True
    mode = getattr(args, "progress", "auto")
    if mode == "ansible":  # ansible-playbook's own output, as it prints it
        return None, False
    tracker = Tracker(playbook)
    if mode == "live" or (mode == "auto" and not PLAIN):
        return LiveDisplay(console, tracker), True
    return PlainDisplay(sys.stdout, tracker), True


def failure_lines(result: Any, limit: int = 10, max_lines: int = 6,
                  max_chars: int = 1500) -> list[str]:
    """The failure summary: each failure's host, task and error, and where the log is."""
    failures = result.summary.get("failures") or [
        {"host": h, "task": t, "msg": m} for h, t, m in result.failures]
    if not failures:
        return [f"FAILED: {result.play} ended with rc {result.rc} ({result.status}) and no "
                "task failure was reported; see the log."] + _where(result)
    hosts = sorted({f["host"] for f in failures})
    lines = [f"FAILED: {len(failures)} failure(s) on {len(hosts)} host(s) "
             f"({', '.join(hosts)}):"]
    for f in failures[:limit]:
        item = f" [{f['item']}]" if f.get("item") else ""
        lines.append(f"  {f['host']} | {f['task']}{item}")
        text = str(f["msg"])
        if len(text) > max_chars:
            text = text[:max_chars] + " ... (cut here; the rest is in the log)"
        msg = [ln for ln in text.splitlines() if ln.strip()] or ["(no message)"]
        if len(msg) > max_lines:
            msg = msg[:max_lines] + [f"... ({len(msg) - max_lines} more lines in the log)"]
        lines += [f"    {ln}" for ln in msg]
        if f.get("line"):
            lines.append(f"    (log line {f['line']})")
    if len(failures) > limit:
        lines.append(f"  ... and {len(failures) - limit} more in summary.json")
    return lines + _where(result)


def _where(result: Any) -> list[str]:
    return [f"full log: {result.log or result.record}"]


def summary_lines(result: Any) -> tuple[Table, list[str]]:
    """The per-host table and the closing lines of a run."""
    s = result.summary or {}
    hosts = s.get("hosts") or {}
    title = (f"{result.play}: {result.status} in {result.seconds:.0f}s, "
             f"{result.changed} changed")
    table = Table(title=title, box=_box(), title_justify="left")
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped", "busy"):
        table.add_column(col, justify="left" if col == "host" else "right")
    from a3rl.controller.fold import human_seconds

    if hosts:
        for h, v in sorted(hosts.items()):
            table.add_row(h, *(str(v[k]) for k in ("ok", "changed", "failed", "unreachable",
                                                    "skipped")),
                          human_seconds(v.get("busy_seconds")))
    else:
        names = sorted({h for counts in result.stats.values() if isinstance(counts, dict)
                        for h in counts})
        for h in names:
            table.add_row(h, *(str(result.stats.get(k, {}).get(h, 0))
                               for k in ("ok", "changed", "failures", "dark", "skipped")), "-")
    lines = []
    for t in s.get("training") or []:
        from a3rl.controller.fold import Training

        tr = Training(t["host"], t["submission_id"], t["status"], t.get("message", ""),
                      t.get("step"), t.get("total_steps"), t.get("metrics") or {},
                      bool(t.get("simulated")))
        lines.append(f"job {tr.line()}" + (f"; report {t['report']}" if t.get("report") else ""))
    lines += [f"record: {result.record}", f"same as: {result.command}"]
    return table, lines


def print_result(result: Any) -> None:
    table, lines = summary_lines(result)
    console.print(table)
    if not result.ok:
        for i, line in enumerate(failure_lines(result)):
            # The headline and each "host | task" line stand out; the messages do not.
            heading = i == 0 or (line.startswith("  ") and not line.startswith("    "))
            console.print(line, style="red" if heading else None, markup=False)
    for line in lines:
        console.print(line, markup=False)


def _extra(args: argparse.Namespace) -> dict[str, Any] | None:
    bad = [kv for kv in args.extra_vars if "=" not in kv]
    if bad:
        console.print(f"-e takes KEY=VALUE; got {', '.join(bad)}", markup=False)
        return None
    # Values stay strings, as with ansible-playbook -e; the roles cast what they need.
    return dict(kv.split("=", 1) for kv in args.extra_vars)


def run(args: argparse.Namespace, playbook: str, extra: dict[str, Any] | None = None) -> int:
    """Run ``playbook`` with the command's options; print the summary; ansible's exit code."""
    from a3rl.controller.runner import run_play

    inv = Path(args.inventory) if args.inventory else _default_inventory()
    if not inv.exists():
        console.print(f"inventory {inv} does not exist (for the simulator: `a3rl sim up`)",
                      markup=False)
        return 2
    given = _extra(args)
    if given is None:
        return 2
    display, quiet = _display(args, playbook)
    result = run_play(playbook, inv, (extra or {}) | given, check=args.check, quiet=quiet,
                      display=display)
    print_result(result)
    return 0 if result.ok else (result.rc or 1)


def cmd_play(args: argparse.Namespace) -> int:
    """Any of the project's plays by its path: ``a3rl play playbooks/data.yml``."""
    root = project_root()
    path = Path(args.playbook)
    rel = path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path
    if not (root / rel).is_file() or not (str(rel) == "site.yml"
                                          or (rel.parent == Path("playbooks")
                                              and rel.suffix == ".yml")):
        plays = ", ".join(["site.yml", *sorted(f"playbooks/{p.name}"
                                               for p in (root / "playbooks").glob("*.yml"))])
        console.print(f"{args.playbook} is not one of the project's plays. Fix: name one of "
                      f"{plays}", markup=False)
        return 2
    return run(args, str(rel))


def cmd_train(args: argparse.Namespace) -> int:
    extra: dict[str, Any] = {"algo": args.algo, "train_job_action": args.action}
    for key in ("model", "weights"):
        if getattr(args, key):
            extra[key] = getattr(args, key)
    if args.feature:
        extra["features"] = ",".join(args.feature)
    if args.no_follow:
        extra["train_job_follow"] = "false"
    if args.rerun:
        extra["train_job_rerun"] = "true"
    if args.resume:
        extra["train_job_resume"] = "true"
    if args.checkpoint:
        extra["train_job_checkpoint"] = "true" if args.checkpoint == "on" else "false"
    if args.override:
        extra["overrides"] = list(args.override)
    if args.poll:
        extra["train_job_poll"] = str(args.poll)
    return run(args, "playbooks/train.yml", extra)


def cmd_clean_cache(args: argparse.Namespace) -> int:
    extra: dict[str, Any] = {}
    if args.batch:
        extra["cache_clean_batch"] = str(args.batch)
    if args.force:
        extra["cache_clean_force"] = "true"
    return run(args, "playbooks/cache_clean.yml", extra)


def cmd_down(args: argparse.Namespace) -> int:
    return run(args, "playbooks/teardown.yml", {"teardown_purge": args.purge} if args.purge else {})


def cmd_plan(args: argparse.Namespace) -> int:
    """Print a run's job (entrypoint, config, overrides, env) without touching any host."""
    import json

    from a3rl.planning.plan import PlanError, plan_from_files

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


def cmd_drift(args: argparse.Namespace) -> int:
    """Where a recipe tree differs from the project's plans, env and requirements."""
    import json

    from a3rl.planning import drift

    root = project_root()
    v = drift.project_vars(root, a3rl_assets_dir=args.assets_dir, a3rl_workdir=args.workdir)
    subdir = args.subdir or str((v.get("a3rl_artifacts") or {}).get("recipe", {})
                                .get("subdir") or "llm_rl/qwen3")
    try:
        if args.recipe:
            with drift.recipe_tree(args.recipe, args.ref, subdir) as tree:
                report = drift.drift_report(tree, v, label=" ".join(
                    [args.recipe, *([args.ref] if args.ref else [])]), nodes=args.nodes)
            data = report.as_dict()
            lines = report.lines(deviations=args.deviations)
        else:
            store = Path(args.store or v.get("a3rl_artifact_dir") or "")
            record = store / "manifest.json"
            if not record.is_file():
                console.print(f"no artifact store record {record}. Fix: give --recipe (a "
                              f"recipe folder, or a repository or bundle with --ref), or "
                              f"--store DIR", markup=False)
                return 2
            data = drift.store_report(v, json.loads(record.read_text()), str(store), root)
            lines = data["lines"]
    except drift.DriftError as e:
        console.print(f"error: {e}", markup=False)
        return 2
    if args.format == "json":
        print(json.dumps(data, indent=1, default=str))
    else:
        for line in lines:
            console.print(line, markup=False)
    return 0 if data["ok"] else (2 if data["errors"] and not data["drift"] else 1)


def cmd_bench(argv: list[str]) -> int:
    """``bench/run.py ARGS`` with this venv's Python; its exit code is ours."""
    script = project_root() / "bench" / "run.py"
    if not script.exists():
        console.print(f"{script} does not exist: this checkout has no benchmark runner",
                      markup=False)
        return 2
    sys.stdout.flush()
    return subprocess.call([sys.executable, str(script), *argv], cwd=project_root())


def cmd_runs(args: argparse.Namespace) -> int:
    from a3rl.controller import runs

    runs_dir = project_root() / "runs"
    recs = runs.records(runs_dir)
    if args.play:
        recs = [r for r in recs if runs.RECORD_RE.match(r.name).group(2)
                == Path(args.play).stem]
    shown = recs if args.all else recs[-args.limit:]
    if not shown:
        console.print(f"no run records under {runs_dir}", markup=False)
        return 0
    table = Table(title=f"{len(shown)} of {len(recs)} run(s) in {runs_dir}", box=_box(),
                  title_justify="left")
    for col in runs.RUNS_HEADER:
        table.add_column(col, no_wrap=col == "run")
    for rec in shown:
        cells = runs.fmt_row(runs.row(rec))
        style = None
        if not PLAIN and cells[2].startswith("failed"):
            style = "red"
        table.add_row(*cells, style=style)
    console.print(table)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from a3rl.controller import runs

    runs_dir = project_root() / "runs"
    training = runs_dir / args.run / "report.md"
    if not (runs_dir / args.run / "artifacts").exists() and training.exists():
        console.print(f"{args.run} is a training run; the training play wrote its report: "
                      f"{training}", markup=False)
        return 0
    try:
        record = runs.resolve(runs_dir, args.run)
        md, png = runs.render(record)
    except runs.RunError as e:
        console.print(f"error: {e}", markup=False)
        return 2
    s = runs.summary_of(record)
    console.print(f"{record.name}: {s['playbook']} {s['status']}", markup=False)
    console.print(f"report: {md}\ntimeline: {png}", markup=False)
    for t in s.get("training") or []:
        report = runs.training_report(record, t)
        if report:
            console.print(f"training report: {report}", markup=False)
    return 0


# ---- arguments -----------------------------------------------------------------------


def _play_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("-i", "--inventory", default=None, help="default: inventory/sim")
    sp.add_argument("-e", "--extra-vars", action="append", default=[], metavar="K=V",
                    help="as ansible-playbook's -e (repeat)")
    sp.add_argument("--check", action="store_true", help="dry run (ansible's check mode)")
    _output_options(sp)


def _output_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("-q", "--quiet", action="store_true", help="only the summary at the end")
    sp.add_argument("--progress", default="auto", choices=["auto", "live", "plain", "ansible"],
                    help="auto: live on a terminal, a line per event otherwise; ansible: "
                         "ansible-playbook's own output")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="a3rl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    # `a3rl sim ARGS` and `a3rl demo ARGS`: the simulator's own program (python -m
    # a3rl.sim) takes every argument as it is (main() hands them over before argparse).
    sub.add_parser("sim", help="the simulated A3 cluster: up, down, status, npu-health "
                               "(a3rl sim --help)", add_help=False)

    for name in ("up", "preflight", "status"):
        _play_options(sub.add_parser(name, help=PLAYS[name][1]))

    play = sub.add_parser("play", help="any play of the project by its path "
                                       "(site.yml, playbooks/NAME.yml)")
    play.add_argument("playbook", metavar="PLAYBOOK")
    _play_options(play)

    train = sub.add_parser("train", help=PLAYS["train"][1])
    train.add_argument("--algo", required=True, choices=["grpo", "dapo"])
    train.add_argument("--model", default=None)
    train.add_argument("--weights", default=None, choices=["real", "random"])
    train.add_argument("--feature", action="append", default=[],
                       help="a feature name (repeat; no-<name> turns a default off)")
    train.add_argument("--override", action="append", default=[],
                       help="a Hydra override for this run (repeat)")
    train.add_argument("--action", default="submit", choices=["submit", "stop", "status"])
    train.add_argument("--no-follow", action="store_true",
                       help="return once the job is submitted")
    train.add_argument("--rerun", action="store_true",
                       help="submit the plan's job again when it has ended (never an active one)")
    train.add_argument("--resume", action="store_true",
                       help="resume the ended run from its newest complete checkpoint "
                            "(a new attempt, <id>-r<k>)")
    train.add_argument("--checkpoint", choices=["on", "off"], default=None,
                       help="checkpoints on or off (default: on for real weights)")
    train.add_argument("--poll", type=int, default=None,
                       help="seconds between the job's state checks while following")
    _play_options(train)

    clean = sub.add_parser("clean-cache", help=PLAYS["clean-cache"][1])
    clean.add_argument("--batch", default=None, help="nodes at a time (N or N%%; default 1)")
    clean.add_argument("--force", action="store_true", help="clean even while a job runs")
    _play_options(clean)

    down = sub.add_parser("down", help=PLAYS["down"][1])
    down.add_argument("--purge", default=None, metavar="WORDS",
                      help="also remove: a comma-separated list of image, sources, data, "
                           "weights")
    _play_options(down)

    plan = sub.add_parser("plan", help="print a run's job without touching any host")
    plan.add_argument("--algo", required=True, choices=["grpo", "dapo"])
    plan.add_argument("--model", required=True)
    plan.add_argument("--weights", default="real", choices=["real", "random"])
    plan.add_argument("--feature", action="append", default=[],
                      help="a feature name (repeat; no-<name> turns a default off)")
    plan.add_argument("--nodes", type=int, default=None, help="default: the recipe's")
    plan.add_argument("--npus-per-node", type=int, default=None,
                      help="default: npus_per_node of group_vars/all/cluster.yml")
    plan.add_argument("--override", action="append", default=[], help="a Hydra override")
    plan.add_argument("--assets-dir", default="/data/a3rl")
    plan.add_argument("--workdir", default="/data/a3rl/llm_rl/qwen3")
    plan.add_argument("--format", default="json", choices=["json", "text"])

    drift = sub.add_parser("drift", help="where a recipe tree differs from the project's "
                                         "plans, env and requirements")
    drift.add_argument("--recipe", default=None,
                       help="a recipe folder (llm_rl/qwen3), or a recipe repository, URL or "
                            "git bundle (with --ref); default: the artifact store's recipe")
    drift.add_argument("--ref", default=None, help="commit, tag or branch of --recipe")
    drift.add_argument("--subdir", default=None,
                       help="the recipe folder in the repository (default: the manifest's)")
    drift.add_argument("--store", default=None, help="the artifact store (a3rl_artifact_dir)")
    drift.add_argument("--nodes", type=int, default=None,
                       help="read the train scripts at this node count (default: their own)")
    drift.add_argument("--assets-dir", default="/data/a3rl")
    drift.add_argument("--workdir", default="/data/a3rl/llm_rl/qwen3")
    drift.add_argument("--deviations", action="store_true",
                       help="also list the findings a deliberate deviation covers")
    drift.add_argument("--format", default="text", choices=["text", "json"])

    # `a3rl bench ARGS`: every argument goes to bench/run.py as it is (main() hands them
    # over before argparse, which would read `--list` as its own).
    sub.add_parser("bench", help="run the benchmarks: bench/run.py ARGS (its --list, names)",
                   add_help=False)

    runs_p = sub.add_parser("runs", help="list the recorded runs (runs/)")
    runs_p.add_argument("-n", "--limit", type=int, default=20, help="the newest N (20)")
    runs_p.add_argument("--all", action="store_true", help="every record")
    runs_p.add_argument("--play", default=None, help="only runs of this play (site, train...)")

    report = sub.add_parser("report", help="render a run's report.md and timeline.png")
    report.add_argument("run", metavar="RUN",
                        help="a folder under runs/, a unique part of its name, a play "
                             "(its newest run) or 'last'")

    sub.add_parser("demo", help="simulated cluster + site.yml + a GRPO run (a3rl demo --help)",
                   add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    from a3rl.controller.progress import wants_live

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        _use_console(not wants_live(sys.stdout, dict(os.environ)))
        return cmd_bench(argv[1:])
    if argv[:1] in (["sim"], ["demo"]):
        return cmd_sim(argv[1:] if argv[0] == "sim" else argv)
    args = parser().parse_args(argv)
    mode = getattr(args, "progress", "auto")
    _use_console(mode == "plain" or (mode != "live" and not wants_live(sys.stdout,
                                                                         dict(os.environ))))
    try:
        if args.cmd in ("up", "preflight", "status"):
            return run(args, PLAYS[args.cmd][0])
        if args.cmd == "play":
            return cmd_play(args)
        if args.cmd == "train":
            return cmd_train(args)
        if args.cmd == "clean-cache":
            return cmd_clean_cache(args)
        if args.cmd == "down":
            return cmd_down(args)
        if args.cmd == "plan":
            return cmd_plan(args)
        if args.cmd == "drift":
            return cmd_drift(args)
        if args.cmd == "runs":
            return cmd_runs(args)
        if args.cmd == "report":
            return cmd_report(args)
    except (RuntimeError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    raise AssertionError(args.cmd)


if __name__ == "__main__":
    sys.exit(main())
