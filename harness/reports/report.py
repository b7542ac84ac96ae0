"""The ablation report: per-arm metrics, a paired test between the SAAR arms, tables and plots.

Input is a list of :class:`~harness.reports.compare.ArmRun` (one per task and SAAR
setting); output is ``report.md``, ``summary.json`` and four PNG plots in one
directory. Everything here is a pure function of the logs, so a report made on a
laptop from a GPU cluster's logs is the report the cluster would have made.

Statistics:

* pass@1 is the mean over samples of each sample's mean accuracy over epochs; its
  stderr is the standard error over samples (as Inspect's ``stderr()`` over
  epoch-reduced scores), so epochs of one problem are not counted as independent.
* pass@k uses the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` per sample.
* The arms are compared per sample (same problems, same seeds). With one epoch
  the outcome per sample is binary and the exact McNemar test is used; with more
  epochs the paired bootstrap of the mean difference over samples. The paired
  bootstrap's 95% interval of the difference is reported in both cases.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.core.metrics import aggregate, is_repeat
from harness.reports.card import render_card
from harness.reports.compare import ArmRun
from harness.reports.markdown import markdown_table

#: Plot files written next to report.md.
PLOTS = ("accuracy.png", "error_kinds.png", "saar_events.png", "tokens.png")

_ARM_COLORS = {"off": "#8c8c8c", "on": "#1f77b4"}


# ---------------------------------------------------------------------------------------------- statistics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``c`` correct answers out of ``n`` samples."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def stderr(xs: Sequence[float]) -> float:
    """Standard error of the mean (sample standard deviation, ddof=1); 0 for fewer than 2 values."""
    n = len(xs)
    if n < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n)


def per_sample(arm: ArmRun) -> dict[str, list[float]]:
    """Sample id -> its accuracies over epochs."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in arm.samples:
        out[r.sample_id].append(r.correct)
    return dict(out)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class PairedTest:
    """SAAR on minus SAAR off, over the samples both arms scored."""

    task: str
    pairs: int
    off: float  #: pass@1 of the off arm on the paired samples
    on: float
    diff: float  #: on - off
    ci_low: float  #: paired bootstrap 95% interval of ``diff``
    ci_high: float
    method: str  #: "mcnemar" (one epoch, binary outcomes) or "bootstrap"
    p_value: float
    p_bootstrap: float
    discordant: tuple[int, int] | None = None  #: (on right & off wrong, off right & on wrong) for McNemar


def paired_test(off: ArmRun, on: ArmRun, n_boot: int = 10_000, seed: int = 0) -> PairedTest:
    """Compare the arms sample by sample (see the module docstring for the choice of test)."""
    a, b = per_sample(off), per_sample(on)
    ids = sorted(set(a) & set(b))
    if not ids:
        raise ValueError(f"{off.task}: the SAAR arms share no scored sample; cannot pair them")
    xa = [mean(a[i]) for i in ids]
    xb = [mean(b[i]) for i in ids]
    d = [y - x for x, y in zip(xa, xb, strict=True)]
    dbar = mean(d)
    rng = random.Random(seed)
    n = len(d)
    boots = sorted(mean([d[rng.randrange(n)] for _ in range(n)]) for _ in range(n_boot))
    lo, hi = boots[int(0.025 * (n_boot - 1))], boots[int(math.ceil(0.975 * (n_boot - 1)))]
    # p-value of "no difference": how often the bootstrap, centred on the null, is as extreme as observed
    extreme = sum(1 for m in boots if abs(m - dbar) >= abs(dbar) - 1e-12)
    p_boot = (1 + extreme) / (n_boot + 1)
    binary = all(len(a[i]) == 1 and len(b[i]) == 1 for i in ids) and all(v in (0.0, 1.0) for v in xa + xb)
    if binary:
        won = sum(1 for x, y in zip(xa, xb, strict=True) if y > x)
        lost = sum(1 for x, y in zip(xa, xb, strict=True) if x > y)
        return PairedTest(
            off.task, n, mean(xa), mean(xb), dbar, lo, hi, "mcnemar", mcnemar_exact(won, lost), p_boot, (won, lost)
        )
    return PairedTest(off.task, n, mean(xa), mean(xb), dbar, lo, hi, "bootstrap", p_boot, p_boot)


def summarize(arm: ArmRun) -> dict[str, float]:
    """The metrics of one arm, by name (the names baselines in ``results/baselines/`` refer to).

    ``accuracy`` is pass@1 and ``accuracy_stderr`` its stderr; ``pass_at_k`` uses
    ``k`` = the arm's epochs. The trajectory metrics are :func:`harness.core.metrics.aggregate`'s
    over every scored (sample, epoch): ``tool_failure_rate`` is the mean of each one's rate
    (as Inspect shows it), ``tool_failure_rate_pooled`` failed / executed calls over the arm;
    counts (``tool_calls``, ``saar_<action>``, ``errors.<Kind>``, ...) are totals and ``*_mean``
    names are means per (sample, epoch). ``time`` is seconds per scored (sample, epoch);
    ``errored`` counts samples that errored instead of scoring.
    """
    acc = per_sample(arm)
    means = [mean(v) for v in acc.values()]
    k = max((len(v) for v in acc.values()), default=1)
    recs = arm.samples
    times = [r.time for r in recs if r.time is not None]
    return {
        "samples": float(len(acc)),
        "epochs": float(k),
        "scored": float(len(recs)),
        "errored": float(len(arm.errored)),
        "accuracy": mean(means),
        "accuracy_stderr": stderr(means),
        "pass_at_k": mean([pass_at_k(len(v), int(round(sum(v))), len(v)) for v in acc.values()]),
        **aggregate([r.metrics for r in recs]),
        "shared_generations": float(sum(r.shared_generations for r in recs)),
        "time": mean(times) if times else float("nan"),
        "wall_time": arm.wall_time if arm.wall_time is not None else float("nan"),
    }


def events_by_error_kind(arm: ArmRun) -> dict[str, Counter[str]]:
    """Error kind -> counts of SAAR actions taken on failures of that kind, plus ``purified``
    (the installed call ran) and ``repeated`` (the regenerated call was the failed call verbatim)."""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for r in arm.samples:
        for e in r.events:
            kind = e.get("error_kind") or "Error"
            table[kind][str(e.get("action"))] += 1
            if e.get("ok"):
                table[kind]["purified"] += 1
            if is_repeat(e):
                table[kind]["repeated"] += 1
    return dict(table)


def pair_arms(arms: Sequence[ArmRun]) -> list[tuple[ArmRun | None, ArmRun | None]]:
    """(off, on) per (task, model), in a stable order."""
    groups: dict[tuple[str, str], dict[str, ArmRun]] = defaultdict(dict)
    for a in arms:
        groups[(a.task, a.model)][a.arm] = a
    return [(g.get("off"), g.get("on")) for _, g in sorted(groups.items())]


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


# ---------------------------------------------------------------------------------------------- plots


def _figure(width: float = 7.0, height: float = 4.0) -> Any:
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def plot_accuracy(arms: Sequence[ArmRun], path: Path) -> None:
    """pass@1 per task and arm with 95% intervals (± 1.96 stderr, clipped to [0, 1])."""
    fig, ax = _figure()
    tasks = sorted({a.task for a in arms})
    width = 0.38
    for j, arm in enumerate(("off", "on")):
        xs, ys, lo, hi = [], [], [], []
        for i, t in enumerate(tasks):
            run = next((a for a in arms if a.task == t and a.arm == arm), None)
            if run is None:
                continue
            s = summarize(run)
            y, e = s["accuracy"], 1.96 * s["accuracy_stderr"]
            xs.append(i + (j - 0.5) * width)
            ys.append(y)
            lo.append(y - max(0.0, y - e))
            hi.append(min(1.0, y + e) - y)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=4, label=f"SAAR {arm}", color=_ARM_COLORS[arm])
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass@1 (95% interval)")
    ax.set_title("Accuracy per task and arm")
    ax.legend()
    fig.savefig(path)


def plot_error_kinds(arms: Sequence[ArmRun], path: Path) -> None:
    """Failed tool attempts per task and arm, stacked by error kind."""
    fig, ax = _figure(8.0, 4.5)
    labels = [f"{a.task}\n{a.arm}" for a in arms]
    sums = [summarize(a) for a in arms]
    kinds = sorted({k for s in sums for k in s if k.startswith("errors.")})
    bottom = [0.0] * len(arms)
    for kind in kinds:
        vals = [s.get(kind, 0.0) for s in sums]
        ax.bar(range(len(arms)), vals, bottom=bottom, label=kind[len("errors.") :])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(arms)), labels)
    ax.set_ylabel("failed tool attempts")
    ax.set_title("Tool-call failures by error kind")
    if kinds:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no failed tool calls", ha="center", va="center", transform=ax.transAxes)
    fig.savefig(path)


def plot_saar_events(arms: Sequence[ArmRun], path: Path) -> None:
    """SAAR events by action (shallow vs deep, and the rest) per task, SAAR-on arms."""
    fig, ax = _figure()
    runs = [a for a in arms if a.arm == "on"] or list(arms)
    shown = ("shallow", "deep", "exhausted", "no_call", "length", "cap")
    width = 0.8 / len(shown)
    sums = [summarize(a) for a in runs]
    for j, action in enumerate(shown):
        ax.bar(
            [i + (j - (len(shown) - 1) / 2) * width for i in range(len(runs))],
            [s[f"saar_{action}"] for s in sums],
            width,
            label=action,
        )
    ax.set_xticks(range(len(runs)), [a.task for a in runs])
    ax.set_ylabel("events")
    ax.set_title("SAAR events: shallow vs deep replacement")
    ax.legend(fontsize="small", ncols=3)
    fig.savefig(path)


def plot_tokens(arms: Sequence[ArmRun], path: Path) -> None:
    """Distribution of generated tokens per sample, per task and arm."""
    fig, ax = _figure(8.0, 4.5)
    data = [[r.tokens for r in a.samples] or [0.0] for a in arms]
    box = ax.boxplot(data, patch_artist=True)
    for patch, a in zip(box["boxes"], arms, strict=True):
        patch.set_facecolor(_ARM_COLORS.get(a.arm, "#cccccc"))
    ax.set_xticks(range(1, len(arms) + 1), [f"{a.task}\n{a.arm}" for a in arms])
    ax.set_ylabel("generated tokens per sample")
    ax.set_title("Tokens per sample (regenerations included)")
    fig.savefig(path)


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
    plot_accuracy(arms, out / "accuracy.png")
    plot_error_kinds(arms, out / "error_kinds.png")
    plot_saar_events(arms, out / "saar_events.png")
    plot_tokens(arms, out / "tokens.png")
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
