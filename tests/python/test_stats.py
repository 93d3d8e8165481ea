"""reports.stats against values computed by hand and by the textbook tables."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from reports import stats  # noqa: E402


def test_exact_u_test_of_fully_separated_samples():
    # 5 vs 5, all of a below all of b: U = 0, exact two-sided p = 2 / C(10, 5) = 2 / 252.
    u, p = stats.mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert u == 0
    assert p == pytest.approx(2 / 252)


def test_exact_u_test_of_interleaved_samples_is_not_significant():
    u, p = stats.mann_whitney_u([1, 3, 5, 7, 9], [2, 4, 6, 8, 10])
    assert u == 10
    assert p > 0.5


def test_u_test_is_symmetric():
    a, b = [1.0, 2.5, 3.1], [2.0, 4.0, 5.5, 6.0]
    ua, pa = stats.mann_whitney_u(a, b)
    ub, pb = stats.mann_whitney_u(b, a)
    assert ua + ub == len(a) * len(b)
    assert pa == pytest.approx(pb)


def test_ties_use_the_normal_approximation():
    # Identical samples: no evidence of a difference at all.
    _, p = stats.mann_whitney_u([5, 5, 5, 5], [5, 5, 5, 5])
    assert p == 1.0
    _, p = stats.mann_whitney_u([1, 1, 2, 2, 3, 3], [7, 7, 8, 8, 9, 9])
    assert p < 0.01


def test_median_cv_and_geometric_mean():
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 3, 2]) == 2.5
    assert stats.cv([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7) / 5)
    assert stats.geometric_mean([1, 4]) == pytest.approx(2)
    with pytest.raises(ValueError):
        stats.median([])
