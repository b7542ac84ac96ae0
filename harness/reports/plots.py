"""The ablation report's plots (PNG, with matplotlib's object API: no pyplot, no global state, no GUI backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.reports.compare import ArmRun
from harness.reports.stats import summarize

#: Plot files written next to report.md.
PLOTS = ("accuracy.png", "error_kinds.png", "saar_events.png", "tokens.png")

_ARM_COLORS = {"off": "#8c8c8c", "on": "#1f77b4"}


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


def write_plots(arms: Sequence[ArmRun], out: Path) -> None:
    """The four plots of :data:`PLOTS`, written into ``out``."""
    plot_accuracy(arms, out / "accuracy.png")
    plot_error_kinds(arms, out / "error_kinds.png")
    plot_saar_events(arms, out / "saar_events.png")
    plot_tokens(arms, out / "tokens.png")
