"""A PNG plot of a training run's per-step metrics (``metrics.jsonl``), with matplotlib."""

from __future__ import annotations

import json
from pathlib import Path

PANELS = [
    ("reward", "mean reward"),
    ("accuracy", "accuracy"),
    ("tool_failure_rate", "tool-failure rate"),
    (("saar_shallow", "saar_deep"), "SAAR events (shallow, deep)"),
    ("tokens_generated", "generated tokens"),
    ("step_s", "step time (s)"),
]


def read_metrics(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_step = {row["step"]: row for row in rows}  # a resumed run may repeat a step; the last line wins
    return [by_step[s] for s in sorted(by_step)]


def plot_metrics(metrics: str | Path, out: str | Path) -> Path:
    """Draw every panel of :data:`PANELS` against the step and save ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
