"""The interval procedures of the paired tables, on plain arrays (analysis.paired applies them to a results
table; analysis.coverage measures how often they hold the truth):

- `paired_t`: the paired t-interval and test (scipy.stats.ttest_rel), for a difference against a named reference;
- `sign_flip_p`: the exact sign-flip permutation test (scipy.stats.permutation_test), with no normality assumed;
- `mcb_bounds`: Hsu's multiple comparisons with the best from paired t's, for a reference chosen from the data;
- `holm`: Holm's family-wise adjustment (statsmodels).
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats

CI_LEVEL = 0.95
EXACT_SIGN_FLIPS = 12  # up to 2^12 sign patterns, enumerated; more seeds: a seeded sample of them


def paired_t(c: np.ndarray, r: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """(low, high, p) of the paired t-interval and two-sided test of mean(c - r) = 0 (scipy.stats.ttest_rel).
    Differences without spread give the point as the interval, p 0 (or 1 where they are all 0)."""
    d = np.asarray(c, dtype=float) - np.asarray(r, dtype=float)
    if np.ptp(d) == 0:
        return float(d[0]), float(d[0]), 1.0 if d[0] == 0 else 0.0
    result = scipy_stats.ttest_rel(c, r)
    interval = result.confidence_interval(level)
    return float(interval.low), float(interval.high), float(result.pvalue)


def sign_flip_p(d: np.ndarray, seed: int = 0) -> float:
    """Two-sided p of the sign-flip permutation test of mean(d) = 0: exact up to EXACT_SIGN_FLIPS values."""
    d = np.asarray(d, dtype=float)
    resamples = np.inf if len(d) <= EXACT_SIGN_FLIPS else 9999
    return float(scipy_stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=resamples,
                                              random_state=seed).pvalue)


def mcb_bounds(scores: np.ndarray, level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hsu's multiple comparisons with the best, from paired t's: `scores` (configurations x seeds, NaN where a
    configuration lacks a seed). For each configuration i, (low_i, high_i) hold theta_i = mu_i - max_{j != i}
    mu_j for all i at once with probability >= `level`, and p_i is the smallest family-wise level at which
    high_i = 0 (i is not the best):

        low_i  = min(0, min_{j != i} (m_ij - c_ij se_ij))      (-inf when some pair shares under 2 seeds)
        high_i = max(0, min_{j != i} (m_ij + c_ij se_ij))
        p_i    = min(1, (k - 1) min_{j != i} P(T_{n_ij - 1} <= m_ij / se_ij))

    with m_ij, se_ij the mean and standard error of the paired differences i - j over their n_ij shared seeds and
    c_ij = t_{n_ij - 1, 1 - alpha/(k - 1)} (one-sided, Bonferroni over the k - 1 comparisons with the unknown
    best; the pairs' own spreads, not a pooled one). Valid because with probability >= level every
    configuration's difference to the true best lies within its one-sided bound."""
    x = np.asarray(scores, dtype=float)
    k = x.shape[0]
    if k < 2:
        raise ValueError("multiple comparisons with the best need two configurations or more")
    d = x[:, None, :] - x[None, :, :]  # i - j per seed
    n = np.sum(~np.isnan(d), axis=2)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(d, axis=2)
        se = np.nanstd(d, axis=2, ddof=1) / np.sqrt(n)
        df = np.where(n >= 2, n - 1, np.nan)
        c = scipy_stats.t.ppf(1.0 - (1.0 - level) / (k - 1), df)
        below = mean - c * se
        above = mean + c * se
        t_stat = np.where(se > 0, mean / se, np.where(mean < 0, -np.inf, np.where(mean > 0, np.inf, np.nan)))
        one_sided = np.where(np.isnan(t_stat), 1.0, scipy_stats.t.cdf(t_stat, df))
    off = ~np.eye(k, dtype=bool)
    low, high, p = np.empty(k), np.empty(k), np.empty(k)
    for i in range(k):
        lows, highs, ps = below[i, off[i]], above[i, off[i]], one_sided[i, off[i]]
        low[i] = -np.inf if np.isnan(lows).any() else min(0.0, float(lows.min()))
        high[i] = np.inf if np.isnan(highs).all() else max(0.0, float(np.nanmin(highs)))
        p[i] = 1.0 if np.isnan(ps).all() else min(1.0, (k - 1) * float(np.nanmin(ps)))
    return low, high, p


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (statsmodels.stats.multitest.multipletests)."""
    if not len(pvalues):
        return []
    from statsmodels.stats.multitest import multipletests

    return [float(p) for p in multipletests(list(pvalues), method="holm")[1]]
