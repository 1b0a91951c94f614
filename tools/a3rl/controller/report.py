"""A training run's report: its metrics per step beside the recipe's published figures.

``render`` writes ``report.md`` and ``metrics.png`` into the run's folder
(``runs/<submission-id>/``). The same inputs always give the same markdown (nothing in it
depends on when it was rendered), so a re-rendered report diffs cleanly. A run whose log
carries the stand-in trainer's marker is reported as simulated everywhere its figures
appear: the simulator does no NPU math, so its numbers say nothing about the hardware.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from a3rl.node.metrics import KEY_METRICS, summary
from a3rl.planning import rolevars

REPORT_NAME = "report.md"
PLOT_NAME = "metrics.png"
# An A3 node holds 8 cards of 2 dies each; verl counts the dies as its devices
# (trainer.n_gpus_per_node: npus_per_node), the recipe counts cards ("64 cards = 128
# dies = 8 nodes").
CARDS_PER_NODE = 8

# Feature names (as in a plan's ``features``) that the published figures are split by.
FEATURE_SAM = "sam"
FEATURE_NPUGRAPH_EX = "npugraph_ex"
BASE, SAM, SAM_NPUGRAPH = "base", "SAM", "SAM + npugraph_ex"

_GRPO_32B = "GBS 128, n=16, 2K/34K"
_DAPO_32B_NOTE = (
    "the recipe's row gives only the seconds; read as the metric of the GRPO 32B row above it"
)

# recipe.md, "Reference results (published by the recipe)". ``step`` 1 is the first step;
# None is a figure over the whole run, compared with the run's mean. ``conditions`` None:
# the recipe does not say which features were on. ``gbs``: the global batch (prompts) the
# figure was measured with, which is not always the recipe's run table's (32B: 128 vs 32).
PUBLISHED: tuple[dict[str, Any], ...] = (
    {"algo": "grpo", "model": "qwen3_235b", "setting": "GBS 512, n=16, 2K/32K", "gbs": 512,
     "cards": 64,
     "metric": "perf/throughput", "value": 120.0, "unit": "tokens/s per card",
     "step": None, "conditions": None,
     "note": "end-to-end; verl divides perf/throughput by the devices it counts (16 per node)"},
    {"algo": "dapo", "model": "qwen3_235b", "setting": "GBS 128, n=16, 2K/34K", "gbs": 128,
     "cards": 64,
     "metric": "perf/time_per_step", "value": 6620.0, "unit": "s",
     "step": 1, "conditions": None, "note": "2 generation batches (train/num_gen_batches)"},
    {"algo": "grpo", "model": "qwen3_32b", "setting": _GRPO_32B, "gbs": 128, "cards": 16,
     "metric": "timing_s/generate_sequences", "value": 2444.0, "unit": "s",
     "step": 1, "conditions": BASE, "note": ""},
    {"algo": "grpo", "model": "qwen3_32b", "setting": _GRPO_32B, "gbs": 128, "cards": 16,
     "metric": "timing_s/generate_sequences", "value": 2106.0, "unit": "s",
     "step": 1, "conditions": SAM, "note": ""},
    {"algo": "grpo", "model": "qwen3_32b", "setting": _GRPO_32B, "gbs": 128, "cards": 16,
     "metric": "timing_s/generate_sequences", "value": 1621.0, "unit": "s",
     "step": 1, "conditions": SAM_NPUGRAPH, "note": ""},
    {"algo": "dapo", "model": "qwen3_32b", "setting": "", "gbs": None, "cards": 16,
     "metric": "timing_s/generate_sequences", "value": 4562.0, "unit": "s",
     "step": 1, "conditions": BASE, "note": _DAPO_32B_NOTE},
    {"algo": "dapo", "model": "qwen3_32b", "setting": "", "gbs": None, "cards": 16,
     "metric": "timing_s/generate_sequences", "value": 4109.0, "unit": "s",
     "step": 1, "conditions": SAM, "note": _DAPO_32B_NOTE},
    {"algo": "dapo", "model": "qwen3_32b", "setting": "", "gbs": None, "cards": 16,
     "metric": "timing_s/generate_sequences", "value": 3261.0, "unit": "s",
     "step": 1, "conditions": SAM_NPUGRAPH, "note": _DAPO_32B_NOTE},
)

# When a log lacks the published metric, the nearest one verl logs (said in the report).
_FALLBACK = {"timing_s/generate_sequences": "timing_s/gen"}
# Panels of the plot, in order; only those the run logged are drawn.
_PLOTTED = ("perf/throughput", "perf/time_per_step", "timing_s/generate_sequences",
            "timing_s/gen", "response_length/mean", "critic/score/mean")


def _model_key(model: str | None) -> str | None:
    if model is None:
        return None
    m = str(model).lower().replace("-", "_")
    if "235b" in m:
        return "qwen3_235b"
    if "32b" in m:
        return "qwen3_32b"
    return m


def _feature_set(features: Iterable[str] | None) -> set[str]:
    return {str(f).strip().lower().replace("-", "_") for f in (features or ())}


def conditions(features: Iterable[str] | None) -> str | None:
    """Which of the recipe's published conditions the features are, or None for none of them."""
    f = _feature_set(features)
    if FEATURE_NPUGRAPH_EX in f:
        return SAM_NPUGRAPH if FEATURE_SAM in f else None
    return SAM if FEATURE_SAM in f else BASE


def published(algo: str, model: str, features: Iterable[str] | None = ()) -> list[dict]:
    """The recipe's published figures for this algorithm, model and feature set (copies).

    ``features`` picks among the 32B figures (base, ``sam``, ``sam`` + ``npugraph_ex``);
    the 235B figures do not say their conditions and are returned whatever the features.
    """
    algo, key, cond = str(algo).lower(), _model_key(model), conditions(features)
    return [dict(p) for p in PUBLISHED
            if p["algo"] == algo and p["model"] == key
            and (p["conditions"] is None or p["conditions"] == cond)]


# ---- facts about the run -------------------------------------------------------------

def _overrides(plan: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for item in plan.get("overrides") or ():
        key, sep, value = str(item).partition("=")
        if sep:
            out[key.lstrip("+")] = value
    return out


def _plan_facts(plan: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's algo, model, features and size: the plan's own keys, else its overrides."""
    if not plan:
        return {}
    ov = _overrides(plan)
    algo = plan.get("algo")
    if not algo:
        if "main_dapo" in str(plan.get("entrypoint", "")):
            algo = "dapo"
        else:
            algo = ov.get("algorithm.adv_estimator")
    nodes = int(plan.get("nodes") or ov.get("trainer.nnodes") or 0) or None
    per_node = int(ov.get("trainer.n_gpus_per_node") or rolevars.npus_per_node())
    return {
        "algo": algo,
        "model": plan.get("model"),
        "weights": plan.get("weights"),
        "features": list(plan.get("features") or ()),
        "nodes": nodes,
        "cards": nodes * CARDS_PER_NODE if nodes else None,
        "devices": nodes * per_node if nodes else None,
        "gbs": int(ov["data.train_batch_size"]) if ov.get("data.train_batch_size") else None,
    }


def _when(ms: Any) -> str:
    # Ray's job API gives start_time/end_time in milliseconds since the epoch.
    if not isinstance(ms, int | float) or ms <= 0:
        return ""
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.4g}"
    return str(value)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _ours(steps: Sequence[dict], metric: str, step: int | None) -> tuple[float | None, str]:
    """Our value for a published figure and which metric gave it."""
    used = metric
    if not any(metric in s for s in steps) and any(_FALLBACK.get(metric, "") in s for s in steps):
        used = _FALLBACK[metric]
    if step is None:
        values = [s[used] for s in steps
                  if isinstance(s.get(used), int | float) and math.isfinite(s[used])]
        return (sum(values) / len(values) if values else None), used
    for s in steps:
        if s["step"] == step and used in s:
            return s[used], used
    return None, used


def comparisons(facts: Mapping[str, Any], steps: Sequence[dict]) -> list[dict[str, Any]]:
    """One row per matching published figure: ours, published, ratio and what differs."""
    if not facts.get("algo") or not facts.get("model"):
        return []
    rows = []
    for p in published(facts["algo"], facts["model"], facts.get("features")):
        value, used = _ours(steps, p["metric"], p["step"])
        ratio = value / p["value"] if isinstance(value, int | float) and p["value"] else None
        notes = [n for n in (p["setting"], p["note"]) if n]
        if used != p["metric"]:
            notes.append(f"ours is {used} (the log has no {p['metric']})")
        if facts.get("cards") and facts["cards"] != p["cards"]:
            notes.append(f"cluster differs: ours {facts['cards']} cards")
        if facts.get("gbs") and p["gbs"] and facts["gbs"] != p["gbs"]:
            notes.append(f"batch differs: ours GBS {facts['gbs']}")
        rows.append({**p, "ours": value, "ours_metric": used, "ratio": ratio, "notes": notes})
    return rows


# ---- rendering -----------------------------------------------------------------------

def _markdown(run_dir: Path, plan: Mapping[str, Any] | None, steps: Sequence[dict],
              status: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    s = summary(steps)
    simulated = s["simulated"]
    name = (plan or {}).get("run") or (plan or {}).get("name") or run_dir.name
    sid = status.get("submission_id") or status.get("job_id") or run_dir.name
    out = [f"# Training run {name}", ""]
    label = (plan or {}).get("label")
    if label and not simulated:
        out += [f"> **{label}.** The site's job profile replaced settings of the plan "
                "(listed below): the metrics are the trainer's own, for this profiled run "
                "only.", ""]
    if simulated:
        out += ["> **Simulated run.** The simulator's stand-in trainer printed these metrics; "
                "it does no NPU math, so its figures are not comparable with the recipe's "
                "published figures.", ""]
    state = str(status.get("status") or "unknown")
    if status.get("message"):
        state += f" ({status['message']})"
    steps_text = (f"{s['count']} (steps {s['first_step']} to {s['last_step']})"
                  if s["count"] else "none")
    out += markdown_table(["", ""], [
        ["submission id", f"`{sid}`"],
        ["job state", state],
        ["started", _when(status.get("start_time")) or "-"],
        ["ended", _when(status.get("end_time")) or "-"],
        ["steps logged", steps_text],
        ["figures", "simulated (stand-in trainer)" if simulated
         else (f"measured: {label}" if label else "measured")],
    ])
    out += ["", "## Plan", ""]
    if plan:
        ov = _overrides(plan)
        cluster = "-"
        if facts.get("nodes"):
            cluster = (f"{facts['nodes']} nodes, {facts['cards']} cards "
                       f"({facts['devices']} NPU devices)")
        out += markdown_table(["", ""], [
            ["algorithm", facts.get("algo") or "-"],
            ["model", facts.get("model") or "-"],
            ["weights", facts.get("weights") or "-"],
            ["features", ", ".join(facts.get("features") or []) or "none"],
            ["cluster", cluster],
            ["entrypoint", f"`{plan['entrypoint']}`" if plan.get("entrypoint") else "-"],
            ["config", plan.get("config_name") or "-"],
            ["Hydra overrides", str(len(ov))],
        ])
        if plan.get("replaced"):
            out += ["", "### Replaced by the site's job profile", "",
                    "The real plan above was checked (and composed with Hydra) as on a real "
                    "cluster; what CPU cannot honour was replaced, each for the reason given:",
                    "", *(f"- `{line.split(' (', 1)[0]}` ({line.split(' (', 1)[1]}"
                          if " (" in line else f"- `{line}`" for line in plan["replaced"])]
    else:
        out.append("No plan was given with this run.")

    out += ["", "## Metrics per step", ""]
    if not steps:
        out.append("**No training step was logged**: the job log has no verl metrics line "
                   "(`step:N - key:value - ...`). See the job's log in this folder.")
    else:
        keys = [k for k in KEY_METRICS if any(k in st for st in steps)]
        out += markdown_table(["step", *keys], ([st["step"], *(_fmt(st.get(k)) for k in keys)]
                                        for st in steps))
        out += ["", "First step and mean over the steps (nan and inf left out of the mean):", ""]
        out += markdown_table(["metric", "first step", "mean"],
                      ([k, _fmt(s["first"].get(k)), _fmt(s["mean"].get(k))] for k in keys))
        out += ["", "Every metric verl logged is in `metrics.jsonl`."]

    out += ["", "## Compared with the recipe's published figures", ""]
    rows = comparisons(facts, steps)
    if label and not simulated:
        out += [f"**Not comparable: {label}.** The published figures are shown for reference "
                "only; no ratio is given.", ""]
    if simulated:
        out += ["**Not comparable: this run was simulated.** The published figures are shown "
                "for reference only; no ratio is given.", ""]
    if not plan:
        out.append("Without a plan the run cannot be matched with a published figure.")
    elif not rows:
        out.append(f"The recipe publishes no figure for {facts.get('algo')} on "
                   f"{facts.get('model')} under {conditions(facts.get('features')) or 'these'} "
                   "conditions.")
    else:
        def ratio(r: dict) -> str:
            if simulated:
                return "not comparable (simulated)"
            if label:
                return "not comparable (real verl on CPU, tiny model)"
            return f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"

        out += markdown_table(
            ["metric", "conditions", "step", "cluster", "ours", "published",
             "ratio (ours / published)", "notes"],
            ([r["metric"], r["conditions"] or "not stated",
              "first step" if r["step"] == 1 else "mean over the run",
              f"{r['cards']} cards",
              _fmt(r["ours"]) if r["ours"] is not None else "not logged",
              f"{_fmt(r['value'])} {r['unit']}", ratio(r), "; ".join(r["notes"]) or "-"]
             for r in rows))
    out += ["", f"![metrics over steps]({PLOT_NAME})", ""]
    return "\n".join(out)


def _plot(path: Path, steps: Sequence[dict], refs: Sequence[dict], simulated: bool) -> None:
    # The object API with the Agg canvas: no pyplot global state, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    keys = [k for k in _PLOTTED if any(k in s for s in steps)]
    if not keys:
        fig = Figure(figsize=(6, 2), dpi=100)
        FigureCanvasAgg(fig)
        fig.text(0.5, 0.5, "No training step was logged", ha="center", va="center")
        fig.savefig(path, format="png")
        return
    ncols = 2 if len(keys) > 1 else 1
    nrows = math.ceil(len(keys) / ncols)
    fig = Figure(figsize=(6 * ncols, 3.2 * nrows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, key in zip(axes, keys, strict=False):
        xs = [s["step"] for s in steps if key in s]
        ys = [float(s[key]) if math.isfinite(s[key]) else math.nan for s in steps if key in s]
        ax.plot(xs, ys, marker="o", label="this run (simulated)" if simulated else "this run")
        for r in refs:
            if r["ours_metric"] == key:
                when = "first step" if r["step"] == 1 else "end-to-end"
                ax.axhline(r["value"], color="tab:red", linestyle="--",
                           label=f"recipe: {_fmt(r['value'])} {r['unit']} "
                                 f"({when}, {r['cards']} cards)")
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    if simulated:
        fig.suptitle("SIMULATED run: not comparable with the recipe's figures", color="tab:red")
    fig.savefig(path, format="png")


def render(run_dir: Path, plan: dict | None, steps: list[dict],
           status: dict, goodput: Mapping[str, Any] | None = None,
           attempts: Sequence[Mapping[str, Any]] = (),
           supervisor: Mapping[str, Any] | None = None) -> tuple[Path, Path]:
    """Write ``report.md`` and ``metrics.png`` into ``run_dir``; return their paths.

    ``plan`` is the run's plan (``algo``, ``model``, ``weights``, ``features``, ``nodes``,
    and the rendered ``entrypoint``/``config_name``/``overrides``), or None. ``status`` is
    the job as Ray's job API returns it (``submission_id``, ``status``, ``message``,
    ``start_time``/``end_time`` in ms). ``steps`` come from :func:`a3rl.node.metrics.parse_log`.
    ``goodput``: :func:`a3rl.controller.goodput.goodput` of the run's ``attempts`` (Ray's records).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = sorted(steps, key=lambda s: s["step"])
    facts = _plan_facts(plan)
    md_path, png_path = run_dir / REPORT_NAME, run_dir / PLOT_NAME
    text = _markdown(run_dir, plan, steps, status or {}, facts)
    if goodput is not None:
        text = _with_goodput(text, plan, goodput, attempts, supervisor or {})
    md_path.write_text(text, encoding="utf-8")
    _plot(png_path, steps, comparisons(facts, steps), summary(steps)["simulated"])
    return md_path, png_path


def _seconds(value: Any) -> str:
    return f"{float(value):.1f} s" if isinstance(value, int | float) else "-"


def _with_goodput(text: str, plan: Mapping[str, Any] | None, figures: Mapping[str, Any],
                  attempts: Sequence[Mapping[str, Any]],
                  supervisor: Mapping[str, Any]) -> str:
    """The report with the run's attempts, goodput and checkpoint policy after its
    first table (a3rl.controller.goodput says how each figure is counted)."""
    ratio = figures.get("goodput")
    out = ["", "## Goodput", ""]
    out += markdown_table(["", ""], [
        ["goodput (productive / wall)", f"{ratio:.1%}" if ratio is not None else "-"],
        ["wall time", _seconds(figures.get("wall_s"))],
        ["productive (each step once)", _seconds(figures.get("productive_s"))],
        ["lost: steps redone after a resume", _seconds(figures.get("redone_s"))],
        ["lost: detection, restart, start-up", _seconds(figures.get("restart_s"))],
        ["restarts", str(figures.get("restarts", 0))],
        ["checkpoint overhead (save / wall)",
         f"{figures['checkpoint_overhead']:.1%} ({_seconds(figures.get('save_s'))})"
         if isinstance(figures.get("checkpoint_overhead"), int | float) else "-"],
        ["time to detection", _detections((supervisor or {}).get("events") or [])],
    ])
    if figures.get("simulated"):
        out += ["", "No goodput: the stand-in trainer's step times are the recipe's, not "
                "measured ones."]
    if len(attempts) > 1:
        out += ["", "Attempts:", ""]
        out += markdown_table(["submission id", "state", "started", "ended"], (
            [f"`{a.get('submission_id', '?')}`", str(a.get("status") or "?"),
             _when(a.get("start_time")) or "-", _when(a.get("end_time")) or "-"]
            for a in attempts))
    if supervisor:
        out += ["", f"Supervisor: {supervisor.get('result') or 'following'}"
                + (f" ({supervisor['why']})" if supervisor.get("why") else "") + ".", ""]
        for b in supervisor.get("bundles") or []:
            out.append(f"- forensic bundle of `{b['attempt']}`: {b['line']}"
                       + "".join(f"; warning: {w}" for w in b.get("warnings") or []))
        events = [e for e in supervisor.get("events") or []
                  if e.get("event") not in ("follow", "waiting")]
        if events:
            out += ["", "Supervisor events:", ""]
            out += markdown_table(["time", "event", "attempt", "detail"], (
                [_when(float(e.get("time") or 0) * 1000) or "-", str(e.get("event")),
                 f"`{e.get('submission_id', '')}`",
                 _event_detail(e)] for e in events))
    policy = (plan or {}).get("checkpoint") or {}
    if policy:
        out += ["", "Checkpoints: " + ("`" + str(policy.get("dir")) + "`, " if policy.get("dir")
                                       else "") + "; ".join(policy.get("why") or [])]
    head, sep, rest = text.partition("\n## Plan\n")
    return head.rstrip("\n") + "\n" + "\n".join(out) + "\n" + sep + rest if sep \
        else text + "\n".join(out) + "\n"


def _detections(events: Sequence[Mapping[str, Any]]) -> str:
    """Each failure's and hang's time to detection, in order: ``hang (stall bound) 71 s``."""
    found = [f"{e['event']}" + (f" ({e['bound']} bound)" if e.get("bound") else "")
             + f" {float(e['detection_s']):.0f} s" for e in events
             if e.get("event") in ("failed", "hang") and isinstance(e.get("detection_s"),
                                                                     int | float)]
    return "; ".join(found) or "-"


def _event_detail(event: Mapping[str, Any]) -> str:
    first = event.get("first") or {}
    text = (event.get("why") or (f"resumes from {event['resume_from']}"
                                 if event.get("resume_from") else "")
            or (f"first failure: {first.get('host')}" if first else ""))
    return str(text)[:160].replace("|", "/")
