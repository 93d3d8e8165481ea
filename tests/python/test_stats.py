"""reports.stats against values computed by hand and by the textbook tables."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from reports import stats  # noqa: E402


def test_t_quantiles_match_the_tables():
    # Two-sided 95%: the textbook table's 12.706 (1 df), 2.776 (4), 2.228 (10); the normal's 1.960.
    for df, t in ((1, 12.706), (4, 2.776), (10, 2.228), (1e6, 1.960)):
        assert stats.t_quantile(0.975, df) == pytest.approx(t, abs=1e-3)
    assert stats.t_quantile(0.995, 5) == pytest.approx(4.032, abs=1e-3)
    # fractional degrees of freedom, as Welch's give, fall between their neighbours
    assert 3.182 < stats.t_quantile(0.975, 2.5) < 4.303


def test_incomplete_beta_known_values():
    assert stats.incomplete_beta(0.5, 2, 2) == pytest.approx(0.5)
    assert stats.incomplete_beta(0.3, 1, 1) == pytest.approx(0.3)  # the uniform distribution
    assert stats.incomplete_beta(0.2, 2, 3) == pytest.approx(0.1808)  # by hand: 6x^2 - 8x^3 + 3x^4
    assert stats.t_cdf(0, 3) == pytest.approx(0.5)


def test_ratio_interval_brackets_the_ratio_and_narrows_with_samples():
    base = [10.0, 10.4, 9.7, 10.1, 9.9]
    current = [x * 1.2 for x in base]
    low, high = stats.ratio_interval(base, current)
    assert low < 1.2 < high
    # the same two spreads: the ratio of geometric means is exactly 1.2, the interval symmetric in logs
    assert math.log(high / 1.2) == pytest.approx(math.log(1.2 / low))
    wide = stats.ratio_interval(base[:2], current[:2])
    assert wide[1] - wide[0] > high - low
    assert stats.ratio_interval([10.0], [12.0, 12.1]) is None  # no spread on one side: no interval
    assert stats.ratio_interval([10.0, 10.0], [12.0, 12.0]) == pytest.approx((1.2, 1.2))


def test_ratio_interval_against_welchs_test_by_hand():
    # logs of a: 0, ln 2; of b: ln 2, ln 4. Means 0.3466 and 1.0397; both variances 0.2402, so se =
    # sqrt(0.2402/2 * 2) = 0.4901 and Welch's df = 2; t(0.975, 2) = 4.3027.
    low, high = stats.ratio_interval([1.0, 2.0], [2.0, 4.0])
    d, half = math.log(2), 4.3027 * math.sqrt(math.log(2) ** 2 / 2)
    assert low == pytest.approx(math.exp(d - half), rel=1e-4)
    assert high == pytest.approx(math.exp(d + half), rel=1e-4)


def test_median_cv_and_geometric_mean():
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 3, 2]) == 2.5
    assert stats.cv([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7) / 5)
    assert stats.geometric_mean([1, 4]) == pytest.approx(2)
    with pytest.raises(ValueError):
        stats.median([])


def test_percentile_interpolates_like_the_harness():
    # the harness's stats::percentile: rank q(n-1), linear between neighbours
    assert stats.percentile([5, 1, 4, 2, 3], 0.25) == 2.0
    assert stats.percentile([4, 3, 2, 1], 0.25) == pytest.approx(1.75)
    assert stats.percentile([7], 0.25) == 7
    with pytest.raises(ValueError):
        stats.percentile([], 0.25)


def test_paired_interval_cancels_drift_that_moves_both_sides_alike():
    # Three rounds on a drifting machine (10, 20 and 15 ms), the current side 10% slower in each:
    # paired, the ratio is exactly 1.1; unpaired, the drift swamps it.
    base, current = [10.0, 20.0, 15.0], [11.0, 22.0, 16.5]
    assert stats.paired_ratio_interval(base, current) == pytest.approx((1.1, 1.1))
    low, high = stats.ratio_interval(base, current)
    assert low < 0.8 and high > 1.5
    # spread in the ratios widens it by t(0.975, n-1) sd / sqrt(n) on the log scale
    ratios = [1.05, 1.10, 1.15]
    low, high = stats.paired_ratio_interval([10.0] * 3, [10.0 * r for r in ratios])
    logs = [math.log(r) for r in ratios]
    m = sum(logs) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    assert math.log(high) - m == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-5)
    assert stats.paired_ratio_interval([1.0], [1.0]) is None
    assert stats.paired_ratio_interval([1.0, 2.0], [1.0]) is None
