"""Seed-level statistics of the heads-ablation report: how well a row's mean BLEU is known from
its seeds, and whether two rows differ by more than their seeds do.

The paired bootstrap (:func:`translate.analysis.ablation_stats.significance`) resamples the
test sentences of fixed trained models: it measures test-set sampling only. Training the same
recipe with another seed, or on another CPU, moves a job's BLEU by more than that
(docs/ablation-multi30k.md), so here each seed's BLEU is one observation: a t interval of the
mean, Welch's t-test and an exact permutation test over seeds, all from scipy.

scipy is imported inside the functions: this module is imported when Hydra starts (for the
report callback), which must stay cheap.
"""

from __future__ import annotations

import math
import statistics
import warnings

CONFIDENCE = 0.95  # of the interval of a row's mean (the CSV's bleu_ci95_* columns)
LEVEL = 0.05  # a difference is reported as detected when the seed-level p-values are below it
# Splits of the pooled seeds the permutation test enumerates at most (10 and 10 seeds: 184,756).
MAX_ARRANGEMENTS = 1_000_000


def ci_of_mean(values: list[float]) -> tuple[float | None, float | None]:
    """The two-sided :data:`CONFIDENCE` interval of the mean from the t distribution with
    n - 1 degrees of freedom: mean ± t · s / √n. ``(None, None)`` with fewer than two values."""
    n = len(values)
    if n < 2:
        return None, None
    from scipy import stats

    half = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    mean = statistics.fmean(values)
    return mean - half, mean + half


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided p of Welch's t-test (unequal variances) of the means of ``a`` and ``b``; None
    with fewer than two values on a side, or where the statistic is undefined (no spread in
    either)."""
    if min(len(a), len(b)) < 2 or statistics.pvariance(a) == statistics.pvariance(b) == 0:
        return None
    from scipy import stats

    with warnings.catch_warnings():
        # scipy warns of precision loss for a side whose seeds agree exactly; its variance is
        # then ~0 and the other side's carries the test, as Welch's formula has it.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def arrangements(n_a: int, n_b: int) -> int:
    """The ways to split ``n_a + n_b`` seeds into groups of ``n_a`` and ``n_b``."""
    return math.comb(n_a + n_b, n_a)


def smallest_permutation_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p the exact permutation test can give: the observed split and
    its mirror image out of all of them (0.1 with 3 and 3 seeds, 0.008 with 5 and 5)."""
    return min(1.0, 2 / arrangements(n_a, n_b))


def permutation_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided p of the exact permutation test of the difference in means: every split of
    the pooled values into groups of these sizes. None with fewer than two values on a side,
    or more than :data:`MAX_ARRANGEMENTS` splits (Welch's test then stands alone)."""
    if min(len(a), len(b)) < 2 or arrangements(len(a), len(b)) > MAX_ARRANGEMENTS:
        return None
    import numpy as np
    from scipy import stats

    result = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        permutation_type="independent",
        vectorized=True,
        n_resamples=arrangements(len(a), len(b)),  # as many as there are splits: exact
        alternative="two-sided",
    )
    return float(result.pvalue)


def detected(*p_values: float | None) -> bool | None:
    """Whether a difference is detected at :data:`LEVEL`: every seed-level test that could be
    run says so (choosing the smaller p would test twice). None when none could be run."""
    known = [p for p in p_values if p is not None]
    return all(p < LEVEL for p in known) if known else None
