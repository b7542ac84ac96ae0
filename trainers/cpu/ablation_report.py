"""The report of a CPU training ablation (``python -m trainers ablation``): what its runs measured, collected, compared
and written as ``report.md``, ``summary.json`` and ``ablation.png`` in the run directory.

Per step, each arm's metrics by half of the run and the paired per-seed differences (SAAR on minus off); held out,
each policy's evaluation (the warm start, after SAAR off, after SAAR on); and every change the ablation asks about
with its 95% interval over seeds (:mod:`harness.reports.intervals`). A ``reading.md`` written by hand in the run
directory is kept in the report when it is redrawn (``--report-only``).
"""

from __future__ import annotations

import json
import platform
import statistics
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from harness.reports.intervals import mean_interval, wilson
from harness.reports.markdown import markdown_table
from trainers.core.plot import read_metrics
from trainers.core.recipes import Recipe
from trainers.cpu.ablation_config import ARMS, HELD_OUT_SEED, AblationConfig, recorded_elapsed, run_name

#: per-step metrics the report compares (key, what it is)
COMPARED = (
    ("first_call_failure_rate", "tool-failure rate of the policy's first attempts (SAAR regenerations excluded)"),
    ("tool_failure_rate_pooled", "tool-failure rate over every executed call"),
    ("accuracy", "accuracy of the step's rollouts"),
    ("reward", "mean reward"),
    ("loss", "GRPO loss"),
    ("frac_reward_zero_std", "fraction of groups whose rewards are all equal"),
)


#: per-step metrics of runs with importance-sampling correction on (``cpu.is_correction``): how far SAAR's data is
#: from on-policy (trainers.core.rescore.gap_summary), beside TRL's engine/trainer gap of the trained tokens
GAP = (
    ("saar_replaced_token_share", "share of response tokens SAAR replaced"),
    ("saar_gap_mean", "SAAR gap: replaced span's log-prob as sampled minus under the purified context (mean)"),
    ("saar_gap_std", "SAAR gap: standard deviation over spans"),
    ("rescore_floor", "engine's decode/prefill difference of in-context tokens (mean absolute)"),
    ("sampling/sampling_logp_difference/mean", "engine/trainer log-prob gap of trained tokens (TRL)"),
)


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _collect(cfg: AblationConfig) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """arm -> seed -> per-step metrics rows, for the runs that exist."""
    out: dict[str, dict[int, list[dict[str, Any]]]] = {arm: {} for arm in ARMS}
    for arm in ARMS:
        for seed in cfg.seeds:
            path = cfg.run_dir / "runs" / run_name(arm, seed) / "metrics.jsonl"
            if path.is_file():
                out[arm][seed] = read_metrics(path)
    return out


def _eval(cfg: AblationConfig, arm: str | None, seed: int) -> dict[str, Any] | None:
    runs = cfg.run_dir / "runs"
    path = runs / f"warm-eval-seed{seed}.json" if arm is None else runs / run_name(arm, seed) / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


def summarize(cfg: AblationConfig) -> dict[str, Any]:
    """The numbers of the report: per-arm means by step range, paired per-seed differences, held-out evals."""
    data = _collect(cfg)
    paired = [s for s in cfg.seeds if s in data["off"] and s in data["on"]]
    summary: dict[str, Any] = {"seeds_complete": paired, "steps": cfg.steps, "arms": {}, "paired": {}, "eval": {}}
    half = max(cfg.steps // 2, 1)
    for arm in ARMS:
        rows = [r for s in paired for r in data[arm][s]]
        early = [r for r in rows if r["step"] <= half]
        late = [r for r in rows if r["step"] > half]
        summary["arms"][arm] = {
            key: {
                "all": _mean([r.get(key, 0.0) for r in rows]),
                "first_half": _mean([r.get(key, 0.0) for r in early]),
                "second_half": _mean([r.get(key, 0.0) for r in late]),
            }
            for key, _ in COMPARED
        }
        for key in ("saar_shallow", "saar_deep", "saar_exhausted", "saar_purified", "tool_calls", "tool_failures"):
            summary["arms"][arm][key] = sum(r.get(key, 0.0) for r in rows)
        summary["arms"][arm]["step_s"] = _mean([r.get("step_s", 0.0) for r in rows])
        gap = {key: _mean([r[key] for r in rows if key in r]) for key, _ in GAP if any(key in r for r in rows)}
        if gap:
            summary.setdefault("gap", {})[arm] = gap
    for key, _ in COMPARED:
        diffs = []
        for s in paired:
            on = _mean([r.get(key, 0.0) for r in data["on"][s] if r["step"] > half])
            off = _mean([r.get(key, 0.0) for r in data["off"][s] if r["step"] > half])
            diffs.append(on - off)
        summary["paired"][key] = {"on_minus_off_second_half": diffs, "mean": _mean(diffs)}
    for s in cfg.seeds:
        summary["eval"][s] = {"warm": _eval(cfg, None, s), **{arm: _eval(cfg, arm, s) for arm in ARMS}}
    summary["intervals"] = _intervals(cfg, data, summary)
    summary["held_out_pooled"] = _held_out_pooled(cfg, summary)
    return summary


#: what the intervals are computed for: (key, what) of the held-out evaluations and of the training steps
HELD_OUT = (("accuracy", "held-out accuracy"), ("first_call_failure_rate", "held-out first-attempt tool-failure rate"))
PER_STEP = (
    ("first_call_failure_rate", "first-attempt tool-failure rate of the steps"),
    ("accuracy", "accuracy of the steps"),
)


def _intervals(
    cfg: AblationConfig, data: dict[str, dict[int, list[dict[str, Any]]]], summary: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each change the ablation asks about, per seed and as a mean with its 95% t interval over seeds: what
    training did in each arm (held out: after minus the warm start; per step: second half minus first half), and
    SAAR on minus off."""
    rows: list[dict[str, Any]] = []

    def add(what: str, comparison: str, values: list[float]) -> None:
        if not values:  # not measured (no held-out evaluation, or no seed finished both arms)
            return
        iv = mean_interval(values)
        rows.append(
            {
                "what": what,
                "comparison": comparison,
                "per_seed": values,
                "mean": _mean(values),
                "interval": None if iv is None else [iv.low, iv.high],
                "beyond_seed_spread": None if iv is None else iv.excludes_zero,
            }
        )

    for key, what in HELD_OUT:
        held = {p: [_held(summary, s, p, key) for s in cfg.seeds] for p in ("warm", *ARMS)}
        for a, b, comparison in (
            ("off", "warm", "after SAAR off - warm start"),
            ("on", "warm", "after SAAR on - warm start"),
            ("on", "off", "after SAAR on - after SAAR off"),
        ):
            add(
                what,
                comparison,
                [x - y for x, y in zip(held[a], held[b], strict=True) if x is not None and y is not None],
            )
    half = max(cfg.steps // 2, 1)
    for key, what in PER_STEP:
        for arm in ARMS:
            values = []
            for s in summary["seeds_complete"]:
                early = [r.get(key, 0.0) for r in data[arm][s] if r["step"] <= half]
                late = [r.get(key, 0.0) for r in data[arm][s] if r["step"] > half]
                if early and late:
                    values.append(_mean(late) - _mean(early))
            add(what, f"SAAR {arm}: second half - first half", values)
        add(what, "SAAR on - off, second half", summary["paired"][key]["on_minus_off_second_half"])
    return rows


def _held(summary: dict[str, Any], seed: int, policy: str, key: str) -> float | None:
    """One held-out evaluation's ``key`` (``policy``: warm, off or on), or ``None`` where it was not run."""
    ev = summary["eval"][seed].get(policy)
    return None if not ev or ev.get(key) is None else float(ev[key])


def _held_out_pooled(cfg: AblationConfig, summary: dict[str, Any]) -> dict[str, Any]:
    """Held-out accuracy of each policy pooled over the seeds (problems x seeds samples), with its Wilson interval."""
    out = {}
    for policy in ("warm", *ARMS):
        accs = [a for s in cfg.seeds if (a := _held(summary, s, policy, "accuracy")) is not None]
        if accs and cfg.eval_problems:
            n = cfg.eval_problems * len(accs)
            k = sum(round(a * cfg.eval_problems) for a in accs)
            iv = wilson(k, n)
            out[policy] = {"right": k, "samples": n, "accuracy": iv.value, "interval": [iv.low, iv.high]}
    return out


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if x != x else f"{x:.3f}"
    return str(x)


def reading(summary: dict[str, Any]) -> list[str]:
    """Plain sentences on the paired differences: their mean, and in how many seeds they agree in sign."""
    out = []
    for key, what in COMPARED[:3]:
        diffs = summary["paired"][key]["on_minus_off_second_half"]
        if not diffs:
            continue
        lower = sum(1 for d in diffs if d < 0)
        higher = sum(1 for d in diffs if d > 0)
        out.append(
            f"- {what}, second half: SAAR on minus off = {_fmt(summary['paired'][key]['mean'])} on average; "
            f"lower with SAAR in {lower} of {len(diffs)} seeds, higher in {higher}."
        )
    moved = [r for r in summary.get("intervals", []) if r["beyond_seed_spread"]]
    if moved:
        out += [
            "- Beyond the seed-to-seed spread (95% interval over seeds excludes 0): "
            + "; ".join(f"{r['what']}, {r['comparison']}: {r['mean']:+.3f}" for r in moved)
            + "."
        ]
    else:
        out.append("- No change moved beyond the seed-to-seed spread (every 95% interval over seeds holds 0).")
    return out


def _per_step_table(summary: dict[str, Any]) -> str:
    header = [
        "metric", "off, first half", "off, second half", "on, first half", "on, second half",
        "on - off, second half (per seed)",
    ]  # fmt: skip
    rows = []
    for key, what in COMPARED:
        off, on = summary["arms"]["off"][key], summary["arms"]["on"][key]
        diffs = ", ".join(_fmt(d) for d in summary["paired"][key]["on_minus_off_second_half"])
        rows.append(
            [
                what,
                _fmt(off["first_half"]),
                _fmt(off["second_half"]),
                _fmt(on["first_half"]),
                _fmt(on["second_half"]),
                f"{_fmt(summary['paired'][key]['mean'])} ({diffs})",
            ]
        )
    return markdown_table(header, rows)


def _totals_table(summary: dict[str, Any]) -> str:
    off, on = summary["arms"]["off"], summary["arms"]["on"]
    keys = ("tool_calls", "tool_failures", "saar_shallow", "saar_deep", "saar_exhausted", "saar_purified")
    rows = [[key, str(int(off[key])), str(int(on[key]))] for key in keys]
    rows.append(["seconds per step (mean)", _fmt(off["step_s"]), _fmt(on["step_s"])])
    return markdown_table(["totals over the runs", "off", "on"], rows)


def _gap_table(summary: dict[str, Any]) -> str:
    gap = summary["gap"]
    rows = [[what, *(_fmt(gap.get(arm, {}).get(key)) for arm in ARMS)] for key, what in GAP]
    return markdown_table(["per step, mean over the steps of every seed", *ARMS], rows)


def _held_out_table(cfg: AblationConfig, summary: dict[str, Any]) -> str:
    header = ["seed", "policy", "accuracy", "first-attempt tool-failure rate", "tool calls per problem"]
    rows = []
    for s in cfg.seeds:
        for name, ev in (
            ("warm start", summary["eval"][s]["warm"]),
            *((f"after SAAR {a}", summary["eval"][s][a]) for a in ARMS),
        ):
            if ev:
                rows.append(
                    [
                        str(s),
                        name,
                        _fmt(ev.get("accuracy")),
                        _fmt(ev.get("first_call_failure_rate")),
                        _fmt(ev.get("tool_calls_mean")),
                    ]
                )
    return markdown_table(header, rows)


def _intervals_table(summary: dict[str, Any]) -> str:
    header = ["measure", "change", "per seed", "mean [95% interval]", "beyond the seed spread"]
    rows = []
    for row in summary["intervals"]:
        iv = row["interval"]
        shown = "-" if iv is None else f"{row['mean']:+.3f} [{iv[0]:+.3f}, {iv[1]:+.3f}]"
        beyond = {None: "too few seeds", True: "**yes**", False: "no"}[row["beyond_seed_spread"]]
        per_seed = ", ".join(f"{v:+.3f}" for v in row["per_seed"])
        rows.append([row["what"], row["comparison"], per_seed, shown, beyond])
    return markdown_table(header, rows)


def write_report(cfg: AblationConfig, recipe: Recipe, elapsed_s: float | None) -> Path:
    """``report.md``, ``summary.json`` and ``ablation.png`` in the run directory (a redrawn report keeps the wall
    time its runs measured)."""
    from trainers.core.plot import plot_ablation  # noqa: PLC0415

    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    if elapsed_s is None:
        elapsed_s = recorded_elapsed(cfg)
    data = _collect(cfg)
    summary = summarize(cfg)
    summary["config"] = asdict(cfg)
    summary["recipe"] = {"path": recipe.shown_path, "model": recipe.model, "cpu": recipe.cpu, "data": recipe.data}
    summary["recipe"]["saar"] = asdict(recipe.executor.saar)
    models = sorted({str(ev.get("model")) for s in cfg.seeds for arm in ARMS if (ev := _eval(cfg, arm, s))})
    if elapsed_s is not None:
        summary["elapsed_s"] = elapsed_s
    (cfg.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    plot = plot_ablation(data, cfg.run_dir / "ablation.png")
    seeds = " ".join(str(s) for s in cfg.seeds)
    command = f"python -m trainers ablation --recipe {cfg.recipe} --seeds {seeds} --steps {cfg.steps} --run {cfg.run}"
    if cfg.eval_problems != 16:
        command += f" --eval-problems {cfg.eval_problems}"
    if cfg.jobs > 1:
        command += f" --jobs {cfg.jobs}"
    lines = [
        f"# SAAR in training: on vs off ({cfg.run})",
        "",
        f"Command: `{command}`",
        "",
        f"Model `{recipe.model or 'smollm2'}` (warm start, the same in both arms), recipe `{recipe.shown_path}`, "
        f"seeds {seeds}, {cfg.steps} steps per run; seeds with both arms finished: {summary['seeds_complete']}. "
        f"Per step: {recipe.cpu.get('prompts_per_step')} problems x {recipe.cpu.get('num_generations')} rollouts, "
        f"at most {recipe.cpu.get('max_new_tokens')} tokens per turn, {recipe.executor.max_turns} turns; "
        f"SAAR settings of the on arm: `{json.dumps(asdict(replace(recipe.executor.saar, enabled=True)))}`. "
        f"Weights every run started from: {', '.join(models) or 'not recorded'}. "
        f"Machine: {platform.machine()}, CPU only"
        + (f"; wall time {elapsed_s / 60:.1f} min." if elapsed_s is not None else "."),
        "",
        f"![tool-failure rate and accuracy per step, both arms]({plot.name})",
        "",
        f"## Per-step metrics, mean over seeds (first half: steps 1-{max(cfg.steps // 2, 1)}; second half: the rest)",
        "",
        _per_step_table(summary),
        "",
        _totals_table(summary),
    ]
    if "gap" in summary:
        lines += [
            "",
            "## How far from on-policy (importance-sampling correction on)",
            "",
            "The correction weighs each token by the trainer's log-prob over the engine's, SAAR's replaced spans "
            "rescored under the purified context; what it cannot correct is how those spans were sampled, with the "
            "error in view: the SAAR gap (docs/training.md).",
            "",
            _gap_table(summary),
        ]
    if cfg.eval_problems:
        lines += [
            "",
            f"## Held-out problems ({cfg.eval_problems}, seed {HELD_OUT_SEED}), SAAR off at test, one sample each",
            "",
            _held_out_table(cfg, summary),
        ]
    if pooled := summary["held_out_pooled"]:
        names = {"warm": "warm start", "off": "after SAAR off", "on": "after SAAR on"}
        lines += [
            "",
            "Pooled over the seeds (95% Wilson intervals): "
            + "; ".join(
                f"{names[p]} {v['right']}/{v['samples']} = {v['accuracy']:.3f} "
                f"[{v['interval'][0]:.3f}, {v['interval'][1]:.3f}]"
                for p, v in pooled.items()
            )
            + ".",
        ]
    lines += [
        "",
        "## Changes and their 95% intervals over seeds (Student's t)",
        "",
        "A change moved beyond the seed-to-seed spread when its interval excludes 0.",
        "",
        _intervals_table(summary),
    ]
    lines += ["", "## What the numbers say", "", *reading(summary), ""]
    notes = cfg.run_dir / "reading.md"  # a hand-written interpretation, kept when the report is redrawn
    if notes.is_file():
        lines += ["## Reading (written by hand after the run)", "", notes.read_text(encoding="utf-8").strip(), ""]
    path = cfg.run_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
