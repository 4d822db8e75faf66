"""Statistics written out from their definitions with numpy and scipy.stats, independent of analysis/: the
references the tests check analysis.paired and analysis.intervals against."""

from __future__ import annotations

import numpy as np
from scipy import stats as scipy_stats


def holm_written_out(p: np.ndarray) -> np.ndarray:
    """Holm's step-down: the i-th smallest p times (m - i), kept monotone, capped at 1."""
    order = np.argsort(p)
    steps = np.minimum(1.0, np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))))
    adjusted = np.empty_like(p)
    adjusted[order] = steps
    return adjusted


def mcb_written_out(scores: np.ndarray, level: float = 0.95) -> list[tuple[float, float]]:
    """Hsu's MCB from paired t's, pair by pair (configurations x seeds): for configuration i, the one-sided
    Bonferroni bounds over its k - 1 comparisons, low = min(0, min_j (m - c se)), high = max(0, min_j (m + c se))."""
    k, out = len(scores), []
    for i in range(k):
        lows, highs = [], []
        for j in (j for j in range(k) if j != i):
            d = scores[i] - scores[j]
            c = scipy_stats.t.ppf(1 - (1 - level) / (k - 1), len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
            lows.append(d.mean() - c)
            highs.append(d.mean() + c)
        out.append((min(0.0, min(lows)), max(0.0, min(highs))))
    return out
