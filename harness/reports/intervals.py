"""95% intervals for small samples: a mean over a few seeds (Student's t) and a proportion (Wilson).

With three seeds the t interval is wide (the quantile is 4.30): a change whose interval excludes 0 moved beyond
the seed-to-seed spread; one whose interval holds 0 did not, whatever its mean.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

#: two-sided 95% quantiles of Student's t for 1-30 degrees of freedom
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z975 = 1.959964


def t975(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (past 30: z + 2.37 / df, 3 decimals)."""
    if df < 1:
        raise ValueError(f"t975: degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else Z975 + 2.37 / df


@dataclass(frozen=True)
class Interval:
    """An estimate and its 95% interval."""

    value: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0


def mean_interval(xs: list[float]) -> Interval | None:
    """The mean of ``xs`` and its 95% t interval (``None`` for fewer than two values)."""
    if len(xs) < 2:
        return None
    m = statistics.fmean(xs)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(m, m - half, m + half)


def wilson(successes: int, n: int) -> Interval:
    """A proportion and its 95% Wilson score interval."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson: need 0 <= successes <= n and n > 0, got {successes} of {n}")
    p, z2 = successes / n, Z975**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z975 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return Interval(p, centre - half, centre + half)
