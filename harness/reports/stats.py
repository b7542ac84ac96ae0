"""The statistics of an ablation report: per-arm metrics, pass@k and the paired test between the SAAR arms.

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

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from harness.core.metrics import aggregate, is_repeat
from harness.reports.compare import ArmRun


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
