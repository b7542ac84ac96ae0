"""PNG plots of training runs, with matplotlib: one run's per-step metrics, and a SAAR on/off ablation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: panels of a run's plot: (metrics.jsonl key or keys, title)
PANELS = [
    ("reward", "mean reward"),
    ("accuracy", "accuracy"),
    (("tool_failure_rate_pooled", "first_call_failure_rate"), "tool-failure rate (all calls, first attempts)"),
    (("saar_shallow", "saar_deep", "saar_exhausted"), "SAAR events"),
    (("loss", "reward_std"), "GRPO loss, reward std"),
    ("step_s", "step time (s)"),
]

#: panels of the ablation plot: (metrics.jsonl key, title)
ABLATION_PANELS = [
    ("first_call_failure_rate", "tool-failure rate, policy's first attempts"),
    ("tool_failure_rate_pooled", "tool-failure rate, every executed call"),
    ("accuracy", "accuracy of the step's rollouts"),
    ("reward", "mean reward"),
]
ARM_COLORS = {"off": "tab:blue", "on": "tab:red"}


def read_metrics(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_step = {row["step"]: row for row in rows}  # a resumed run may repeat a step; the last line wins
    return [by_step[s] for s in sorted(by_step)]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_metrics(metrics: str | Path, out: str | Path) -> Path:
    """Draw every panel of :data:`PANELS` against the step and save ``out``."""
    plt = _pyplot()
    rows = read_metrics(metrics)
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6), constrained_layout=True)
    for ax, (key, title) in zip(axes.flat, PANELS, strict=True):
        for k in key if isinstance(key, tuple) else (key,):
            ax.plot(steps, [r.get(k, 0.0) for r in rows], marker="o", label=k)
        if isinstance(key, tuple):
            ax.legend(fontsize=8)
        ax.set_title(title)
        ax.set_xlabel("step")
    out = Path(out)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def plot_ablation(runs: dict[str, dict[int, list[dict]]], out: str | Path) -> Path:
    """Per-step metrics of both arms (arm -> seed -> rows): each seed thin, the mean over seeds thick."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for ax, (key, title) in zip(axes.flat, ABLATION_PANELS, strict=True):
        for arm, seeds in runs.items():
            color = ARM_COLORS.get(arm)
            by_step: dict[int, list[float]] = {}
            for rows in seeds.values():
                steps = [r["step"] for r in rows]
                values = [r.get(key, 0.0) for r in rows]
                ax.plot(steps, values, color=color, alpha=0.25, linewidth=1)
                for s, v in zip(steps, values, strict=True):
                    by_step.setdefault(s, []).append(v)
            if by_step:
                xs = sorted(by_step)
                ys = [sum(by_step[s]) / len(by_step[s]) for s in xs]
                ax.plot(xs, ys, color=color, marker="o", linewidth=2, label=f"SAAR {arm} (mean of {len(seeds)})")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    out = Path(out)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out
