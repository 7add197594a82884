"""The seed-level statistics of the ablation report, against textbook values and formulas
computed here independently of scipy's tests: the t interval, Welch's test, the exact
permutation test, and the one rule that calls a difference detected."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from scipy.special import betainc

from translate.ablation.stats import (
    LEVEL,
    ci_of_mean,
    detected,
    permutation_p,
    smallest_permutation_p,
    welch_p,
)

# The first, three-seed heads study's per-seed test BLEU (2026-11-30): 4 and 8 heads.
FOUR = [39.7311, 38.6124, 38.7103]
EIGHT = [37.9757, 38.0551, 37.9291]


# Two-sided 97.5% quantiles of Student's t, from any statistics textbook's table.
@pytest.mark.parametrize(
    "values,t975", [([1.0, 3.0], 12.706), (EIGHT, 4.303), (FOUR + EIGHT[:2], 2.776)]
)
def test_the_interval_of_the_mean_is_mean_plus_minus_t_times_the_standard_error(values, t975):
    low, high = ci_of_mean(values)
    mean, sem = statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))
    assert (low + high) / 2 == pytest.approx(mean)
    assert (high - low) / 2 == pytest.approx(t975 * sem, rel=2e-4)  # 4 digits


def test_one_seed_has_no_interval_and_no_test():
    assert ci_of_mean([38.0]) == (None, None) and ci_of_mean([]) == (None, None)
    assert welch_p([38.0], EIGHT) is None and permutation_p(EIGHT, [38.0]) is None
    assert detected(None, None) is None


def _welch_by_formula(a: list[float], b: list[float]) -> float:
    """Welch's t and the Welch-Satterthwaite degrees of freedom; the two-sided tail of
    Student's t through the regularised incomplete beta function."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return betainc(df / 2, 0.5, df / (df + t * t))


@pytest.mark.parametrize(
    "a,b", [(FOUR, EIGHT), ([20.0, 22.0], [27.0, 27.5]), ([1.0, 2.0, 4.0, 8.0], [3.0, 3.5])]
)
def test_welch_p_is_the_textbook_formula(a, b):
    assert welch_p(a, b) == pytest.approx(_welch_by_formula(a, b), rel=1e-9)


def test_welch_p_is_undefined_without_any_spread_and_the_formula_with_one_sides():
    assert welch_p([38.0, 38.0], [38.0, 38.0]) is None
    a, b = [26.0, 26.0, 26.0], [27.0, 27.5, 26.9]
    assert welch_p(a, b) == pytest.approx(_welch_by_formula(a, b), rel=1e-6)


def _exact_permutation(a: list[float], b: list[float]) -> float:
    """Every split of the pooled values into groups of len(a) and len(b): the two-sided p as
    twice the smaller tail of the difference in means (scipy's definition of two-sided)."""
    pooled, observed = a + b, statistics.fmean(a) - statistics.fmean(b)
    diffs = []
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        diffs.append(statistics.fmean(x) - statistics.fmean(y))
    eps = 1e-9
    low = sum(d <= observed + eps for d in diffs) / len(diffs)
    high = sum(d >= observed - eps for d in diffs) / len(diffs)
    return min(1.0, 2 * min(low, high))


@pytest.mark.parametrize(
    "a,b",
    [(FOUR, EIGHT), ([1.0, 5.0, 2.0], [3.0, 4.0, 0.5, 6.0]), ([10.0, 11.0], [1.0, 2.0, 3.0])],
)
def test_the_permutation_test_is_exact(a, b):
    assert permutation_p(a, b) == pytest.approx(_exact_permutation(a, b), abs=1e-12)


def test_three_seeds_a_side_cannot_reach_the_level_and_five_can():
    """With 3 and 3 seeds, complete separation (every seed above every other) is 2 of the 20
    splits: p = 0.1, whatever the gap. With 5 and 5 it is 2 of 252."""
    assert permutation_p(FOUR, [x - 100 for x in FOUR]) == pytest.approx(0.1)
    assert smallest_permutation_p(3, 3) == pytest.approx(0.1)
    five, lower = [38.0, 38.5, 39.0, 39.5, 40.0], [37.0, 37.1, 37.2, 37.3, 37.4]
    assert permutation_p(five, lower) == pytest.approx(2 / 252)
    assert smallest_permutation_p(5, 5) == pytest.approx(2 / 252)
    assert smallest_permutation_p(5, 5) < LEVEL


def test_a_difference_is_detected_only_where_every_test_run_says_so():
    assert detected(0.01, 0.008) is True
    assert detected(0.01, 0.1) is False and detected(0.2, 0.01) is False
    assert detected(0.01, None) is True  # the permutation test skipped (too many splits)
