"""The ablation report: per-arm metrics, a paired test between the SAAR arms, tables and plots.

Input is a list of :class:`~harness.reports.compare.ArmRun` (one per task and SAAR
setting); output is ``report.md``, ``summary.json`` and four PNG plots in one
directory. Everything here is a pure function of the logs, so a report made on a
laptop from a GPU cluster's logs is the report the cluster would have made. The
statistics are :mod:`harness.reports.stats`'s, the plots :mod:`harness.reports.plots`'s.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.reports.card import render_card
from harness.reports.compare import ArmRun
from harness.reports.markdown import markdown_table
from harness.reports.plots import PLOTS, write_plots
from harness.reports.stats import PairedTest, events_by_error_kind, pair_arms, paired_test, summarize

# ---------------------------------------------------------------------------------------------- tables


def _f(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def _n(x: float) -> str:
    return "-" if math.isnan(x) else str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def arms_table(arms: Sequence[ArmRun]) -> str:
    """One row per task and arm: accuracy, tool failures, SAAR events, tokens, time."""
    header = [
        "task",
        "arm",
        "model",
        "samples x epochs",
        "pass@1 ± stderr",
        "pass@k",
        "tool calls",
        "failure rate (mean/sample)",
        "failure rate (pooled)",
        "failures kept",
        "shallow",
        "deep",
        "purified",
        "exhausted",
        "tokens/sample",
        "s/sample",
        "wall s",
        "status",
    ]
    rows = []
    for a in arms:
        s = summarize(a)
        rows.append(
            [
                a.task,
                a.arm,
                a.model,
                f"{_n(s['samples'])} x {_n(s['epochs'])}",
                f"{s['accuracy']:.3f} ± {s['accuracy_stderr']:.3f}",
                f"{s['pass_at_k']:.3f} (k={_n(s['epochs'])})",
                _n(s["tool_calls"]),
                f"{s['tool_failure_rate']:.3f}",
                f"{s['tool_failure_rate_pooled']:.3f}",
                _n(s["failures_kept"]),
                _n(s["saar_shallow"]),
                _n(s["saar_deep"]),
                _n(s["saar_purified"]),
                _n(s["saar_exhausted"]),
                f"{s['tokens_mean']:.1f}",
                _f(s["time"], 2),
                _f(s["wall_time"], 1),
                a.status + (f" ({len(a.errored)} errored)" if a.errored else ""),
            ]
        )
    return markdown_table(header, rows)


def paired_tests(arms: Sequence[ArmRun], n_boot: int = 10_000, seed: int = 0) -> list[PairedTest]:
    """The paired test of every (task, model) that has both arms with samples."""
    return [
        paired_test(off, on, n_boot=n_boot, seed=seed)
        for off, on in pair_arms(arms)
        if off is not None and on is not None and off.samples and on.samples
    ]


def verdict(t: PairedTest, alpha: float = 0.05) -> str:
    """One plain sentence: whether the paired difference is significant, and what that does and does not say."""
    ci = f"95% CI [{t.ci_low:+.3f}, {t.ci_high:+.3f}], p = {t.p_value:.4f}, {t.pairs} pairs"
    if t.p_value < alpha and not t.ci_low <= 0.0 <= t.ci_high:
        better = "SAAR on" if t.diff > 0 else "SAAR off"
        return f"{t.task}: significant at the {alpha:.0%} level: {better} is better by {abs(t.diff):.3f} ({ci})."
    return (
        f"{t.task}: NOT significant at the {alpha:.0%} level ({ci}): this comparison cannot tell a difference of "
        f"{t.diff:+.3f} from noise, nor rule out one as large as the interval's ends."
    )


def tests_table(tests: Sequence[PairedTest]) -> str:
    header = ["task", "pairs", "pass@1 off", "pass@1 on", "on - off", "95% CI (bootstrap)", "test", "p-value"]
    rows = []
    for t in tests:
        method = t.method if t.discordant is None else f"McNemar exact (b={t.discordant[0]}, c={t.discordant[1]})"
        rows.append(
            [
                t.task,
                str(t.pairs),
                f"{t.off:.3f}",
                f"{t.on:.3f}",
                f"{t.diff:+.3f}",
                f"[{t.ci_low:+.3f}, {t.ci_high:+.3f}]",
                method if t.method == "mcnemar" else "paired bootstrap",
                f"{t.p_value:.4f}",
            ]
        )
    return markdown_table(header, rows)


def error_kind_table(arms: Sequence[ArmRun]) -> str:
    """Failed attempts by error kind, and what SAAR did about each kind."""
    header = [
        "task", "arm", "error kind", "failed attempts", "shallow", "deep", "repeated", "purified", "exhausted", "other"
    ]  # fmt: skip
    rows = []
    for a in arms:
        s = summarize(a)
        by_kind = events_by_error_kind(a)
        kinds = sorted({k[len("errors.") :] for k in s if k.startswith("errors.")} | set(by_kind))
        for kind in kinds:
            ev = by_kind.get(kind, Counter())
            other = sum(ev[x] for x in ("no_call", "length", "max_turns", "cap"))
            rows.append(
                [
                    a.task,
                    a.arm,
                    kind,
                    _n(s.get(f"errors.{kind}", 0.0)),
                    str(ev["shallow"]),
                    str(ev["deep"]),
                    str(ev["repeated"]),
                    str(ev["purified"]),
                    str(ev["exhausted"]),
                    str(other),
                ]
            )
    return markdown_table(header, rows) if rows else "_No tool call failed in any arm._"


def _code_cell(code: object, limit: int = 120) -> str:
    """A program in one table cell: newlines shown as ⏎, the middle cut beyond ``limit`` characters."""
    if not isinstance(code, str):
        return "-"
    text = code.strip().replace("\n", " ⏎ ")
    if len(text) > limit:
        text = f"{text[: limit // 2]} … {text[-limit // 2 :]}"
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def purified_table(arms: Sequence[ArmRun], limit: int = 20) -> str:
    """Each purified failure: where it was, what failed, and the call that replaced it (at most ``limit`` rows)."""
    header = ["task", "arm", "sample", "epoch", "turn", "error kind", "action", "similarity", "failed call", "new call"]
    rows = [
        [
            a.task,
            a.arm,
            r.sample_id,
            str(r.epoch),
            str(e.get("turn")),
            str(e.get("error_kind") or "Error"),
            str(e.get("action")),
            "-" if e.get("similarity") is None else f"{e['similarity']:.2f}",
            _code_cell(e.get("failed_code")),
            _code_cell(e.get("new_code")),
        ]
        for a in arms
        for r in a.samples
        for e in r.events
        if e.get("ok")
    ]
    if not rows:
        return "_No failure was purified._"
    more = f"\n\n{len(rows) - limit} more in the logs' SAAR events." if len(rows) > limit else ""
    return markdown_table(header, rows[:limit]) + more


def side_by_side(arms: Sequence[ArmRun]) -> str:
    """A plain-text summary for the terminal: one column per task and arm, one row per headline metric."""
    arms = sorted(arms, key=lambda a: (a.task, a.model, a.arm))
    sums = [summarize(a) for a in arms]
    rows: list[tuple[str, list[str]]] = [
        ("status", [a.status for a in arms]),
        ("samples x epochs", [f"{_n(s['samples'])} x {_n(s['epochs'])}" for s in sums]),
        ("pass@1", [f"{s['accuracy']:.3f} ± {s['accuracy_stderr']:.3f}" for s in sums]),
        ("tool calls", [_n(s["tool_calls"]) for s in sums]),
        ("tool failures (pooled)", [f"{_n(s['tool_failures'])} ({s['tool_failure_rate_pooled']:.0%})" for s in sums]),
        ("failure rate/sample", [f"{s['tool_failure_rate']:.0%}" for s in sums]),
        ("failures kept", [_n(s["failures_kept"]) for s in sums]),
        ("SAAR shallow/deep", [f"{_n(s['saar_shallow'])}/{_n(s['saar_deep'])}" for s in sums]),
        ("SAAR purified", [_n(s["saar_purified"]) for s in sums]),
        ("SAAR exhausted", [_n(s["saar_exhausted"]) for s in sums]),
        ("tokens/sample", [f"{s['tokens_mean']:.0f}" for s in sums]),
        ("generations shared", [_n(s["shared_generations"]) for s in sums]),
        ("wall time s", [_f(s["wall_time"], 1) for s in sums]),
    ]
    header = ["", *[f"{a.task} SAAR {a.arm}" for a in arms]]
    widths = [max(len(header[0]), *(len(r[0]) for r in rows))]
    widths += [max(len(header[i + 1]), *(len(r[1][i]) for r in rows)) for i in range(len(arms))]
    lines = [[*header], *([name, *cells] for name, cells in rows)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


# ---------------------------------------------------------------------------------------------- report


def _finite(x: Any) -> Any:
    """NaN (a metric with no data) as null, so summary.json is strict JSON."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def write_report(
    arms: Sequence[ArmRun],
    out_dir: str | Path,
    *,
    title: str = "SAAR ablation",
    notes: Sequence[str] = (),
    n_boot: int = 10_000,
    seed: int = 0,
) -> Path:
    """Write ``report.md``, ``summary.json`` and the plots into ``out_dir``; return the report's path."""
    if not arms:
        raise ValueError("no arms to report on")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    arms = sorted(arms, key=lambda a: (a.task, a.model, a.arm))
    tests = paired_tests(arms, n_boot=n_boot, seed=seed)
    unpaired = [
        f"{only.task} ({only.model}) has only the SAAR {only.arm} arm: no paired test"
        for off, on in pair_arms(arms)
        if (off is None) != (on is None) and (only := off or on) is not None
    ]
    write_plots(arms, out)
    bad = [
        f"{a.label}: log status {a.status}" + (f" ({a.error})" if a.error else "") + f" - {a.location}"
        for a in arms
        if a.status != "success"
    ]
    parts = [
        f"# {title}",
        "",
        "## Arms",
        "",
        "pass@1 is the mean over samples of each sample's accuracy over epochs, with its stderr over samples. "
        "Failure rate (mean/sample) = the mean over (sample, epoch) of each trajectory's failed / executed calls "
        "(what Inspect shows); failure rate (pooled) = failed attempts / executed calls over the arm (purified "
        "attempts included). Shallow, deep, purified and exhausted count SAAR events over all samples; tokens "
        "include discarded regenerations.",
        "",
        arms_table(arms),
        "",
        "## SAAR on vs off (paired by sample)",
        "",
        tests_table(tests) if tests else "_No task has both arms._",
        "",
        *[f"- {verdict(x)}" for x in tests],
        "",
        "## Failures by error kind, and what SAAR did",
        "",
        "Shallow and deep count regenerations installed in place of a failed call; repeated, those whose call was "
        "the failed call verbatim (similarity 1.0, so it fails again); purified, those whose call then ran.",
        "",
        error_kind_table(arms),
        "",
        "## Purified failures",
        "",
        "Each SAAR regeneration whose call ran: the failed call and the call installed in its place ('-' where "
        "the log does not record the program).",
        "",
        purified_table(arms),
        "",
        "## Plots",
        "",
        *[f"![{p[:-4]}]({p})" for p in PLOTS],
        "",
    ]
    parts += ["## Setup", ""]
    for a in arms:
        args = ", ".join(f"{k}={v}" for k, v in sorted(a.task_args.items()) if v is not None)
        parts.append(f"- {a.label}: model `{a.model}`; task args: {args or '-'}; log `{a.location}`")
    parts.append("")
    cards = {json.dumps(a.card, sort_keys=True): a.card for a in arms if a.card}
    if cards:
        parts += ["### Protocol cards", ""]
        for card in cards.values():
            parts += ["```", render_card(card), "```", ""]
    shared = [
        f"{a.label}: {summarize(a)['shared_generations']:.0f} generations read from the other arm (requests both arms "
        "sent before SAAR first acted, generated once: `share_prefix`)"
        for a in arms
        if any(r.shared_generations for r in a.samples)
    ]
    notes = [*shared, *notes]
    if bad or unpaired or notes:
        parts += ["## Notes", "", *[f"- {n}" for n in [*bad, *unpaired, *notes]], ""]
    report = out / "report.md"
    report.write_text("\n".join(parts), encoding="utf-8")
    summary = {
        "arms": [
            {
                "task": a.task,
                "arm": a.arm,
                "model": a.model,
                "status": a.status,
                "log": a.location,
                "metrics": summarize(a),
            }
            for a in arms
        ],
        "tests": [asdict(t) for t in tests],
        "notes": [*bad, *unpaired, *notes],
    }
    (out / "summary.json").write_text(json.dumps(_finite(summary), indent=2, default=str), encoding="utf-8")
    return report
