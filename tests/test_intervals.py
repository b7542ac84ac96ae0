"""The 95% intervals of the training ablation's report: Student's t over seeds, Wilson for a proportion."""

from __future__ import annotations

import pytest

from harness.reports.intervals import mean_interval, t975, wilson


def test_t_quantiles_are_the_tables_and_approach_the_normal():
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(30) == 2.042
    assert t975(60) == pytest.approx(2.000, abs=0.002) and t975(1000) == pytest.approx(1.962, abs=0.001)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t975(0)


def test_a_mean_over_three_seeds_has_a_wide_interval():
    iv = mean_interval([1.0, 2.0, 3.0])  # sd 1: 2 +- 4.303 / sqrt(3)
    assert (iv.value, iv.low, iv.high) == pytest.approx((2.0, -0.4843, 4.4843), abs=1e-4)
    assert not iv.excludes_zero
    assert mean_interval([-0.10, -0.12, -0.08]).excludes_zero  # consistent in every seed: beyond the spread
    assert mean_interval([0.5]) is None  # one seed has no spread


def test_wilson_intervals_stay_inside_zero_and_one():
    assert (wilson(5, 10).low, wilson(5, 10).high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    none = wilson(0, 10)
    assert none.low == pytest.approx(0.0, abs=1e-12) and none.high == pytest.approx(0.2775, abs=1e-4)
    with pytest.raises(ValueError, match="successes"):
        wilson(11, 10)
