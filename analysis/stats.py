"""Statistics for sweep results: rank correlation, the score-vs-MTD trend and its peak, seed summaries.

The trend of a score against MTD is a quadratic in log(MTD) by default: MTD is a sum of ages in
steps that the sweeps vary multiplicatively (eta 0.5 -> 0.99 moves 1/(1-eta) from 2 to 100; K/B
doubles per grid step), and MoCoSE Fig. 2 shows one optimum with a slower fall-off on the long side,
which a parabola in log(MTD) has and a parabola in MTD has not. `log_x=False` fits in MTD itself.

The best MTD is the argmax of the fitted curve *within the observed MTD range* (a parabola that
opens upwards, or a vertex outside the data, puts it at an end of the range: the data say nothing
beyond). Its confidence interval is Fieller's for the vertex u* = -b / (2a): the values u0 where the fitted
slope b + 2 a u0 is not significantly different from 0 (a t-test on the least-squares coefficients with the
residual df, N - 3), which holds the true vertex with the stated probability when the scores scatter
normally around a parabola in u; it is projected onto the observed range, so it holds the in-range argmax
at least as often. Where the set is unbounded (the curvature is not shown to be negative) or the fit opens
upwards, the interval is the whole observed range: no peak located. Coverage at the studies' sizes:
analysis.coverage.

Spreads over seeds are the sample standard deviation (ddof=1); a group with one trial has std NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats


@dataclass(frozen=True)
class Correlation:
    rho: float
    pvalue: float
    n: int


@dataclass(frozen=True)
class PeakFit:
    """A quadratic trend y = a*u^2 + b*u + c with u = log(x) (or x) and its argmax in the data's range."""

    coefficients: tuple[float, float, float]  # (a, b, c), highest power first
    log_x: bool
    x_min: float
    x_max: float
    best_x: float
    best_y: float
    ci_low: float
    ci_high: float
    ci_level: float
    n: int  # trials fitted
    located: bool  # Fieller's interval is narrower than the observed range

    def predict(self, x: np.ndarray | Sequence[float] | float) -> np.ndarray:
        u = _to_u(np.asarray(x, dtype=float), self.log_x)
        return np.polyval(self.coefficients, u)

    def curve(self, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
        """The fitted curve over the observed range (evenly spaced in log(x) when fitted in log)."""
        if self.log_x:
            xs = np.geomspace(self.x_min, self.x_max, points)
        else:
            xs = np.linspace(self.x_min, self.x_max, points)
        return xs, self.predict(xs)


def spearman(x: Sequence[float], y: Sequence[float]) -> Correlation:
    """Spearman's rank correlation over the pairs where both values are present."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return Correlation(float("nan"), float("nan"), int(len(x)))
    result = scipy_stats.spearmanr(x, y)
    return Correlation(float(result.statistic), float(result.pvalue), int(len(x)))


def fit_peak(x: Sequence[float], y: Sequence[float], log_x: bool = True, ci_level: float = 0.95) -> PeakFit:
    """Fit the quadratic trend, locate its argmax in the observed range, and give that argmax Fieller's
    interval (module docstring)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if log_x and np.any(x <= 0):
        raise ValueError("a fit in log(x) needs positive x values")
    if len(np.unique(x)) < 3:
        raise ValueError(f"a quadratic trend needs at least 3 distinct x values, got {len(np.unique(x))}")
    u = _to_u(x, log_x)
    u_min, u_max = float(u.min()), float(u.max())
    coefficients = np.polyfit(u, y, 2)
    best_u = _argmax_in_range(coefficients, u_min, u_max)
    low_u, high_u = u_min, u_max
    if len(u) > 3:  # a residual degree of freedom: the coefficients' covariance, and Fieller's set
        residual = y - np.polyval(coefficients, u)
        covariance = covariance_of_fit(u, float(residual @ residual) / (len(u) - 3))
        low_u, high_u = fieller_vertex(coefficients, covariance, len(u) - 3, ci_level, u_min, u_max)
    return PeakFit(
        coefficients=tuple(float(c) for c in coefficients),
        log_x=log_x,
        x_min=float(x.min()),
        x_max=float(x.max()),
        best_x=float(_from_u(best_u, log_x)),
        best_y=float(np.polyval(coefficients, best_u)),
        ci_low=float(_from_u(low_u, log_x)),
        ci_high=float(_from_u(high_u, log_x)),
        ci_level=ci_level,
        n=int(len(x)),
        located=(low_u, high_u) != (u_min, u_max),
    )


def covariance_of_fit(u: np.ndarray, residual_variance: float) -> np.ndarray:
    """The least-squares coefficients' covariance, s^2 (X'X)^-1, for the design [u^2, u, 1]."""
    design = np.column_stack([u ** 2, u, np.ones_like(u)])
    return residual_variance * np.linalg.inv(design.T @ design)


def fieller_vertex(coefficients: Sequence[float], covariance: np.ndarray, df: int, level: float, u_min: float,
                   u_max: float) -> tuple[float, float]:
    """Fieller's interval for the vertex of y = a u^2 + b u + c, projected onto [u_min, u_max]: the u0 with
    (b + 2 a u0)^2 <= t^2 Var(b + 2 a u0), t the two-sided t quantile at `level` with `df` degrees of freedom.
    The whole range where that set is not one bounded interval or the parabola opens upwards."""
    a, b, _ = coefficients
    t2 = scipy_stats.t.ppf(0.5 + level / 2.0, df) ** 2
    # (b + 2 a u)^2 - t2 (v_bb + 4 u v_ab + 4 u^2 v_aa) <= 0, a quadratic q2 u^2 + q1 u + q0 <= 0
    q2 = 4.0 * (a * a - t2 * covariance[0, 0])
    q1 = 4.0 * (a * b - t2 * covariance[0, 1])
    q0 = b * b - t2 * covariance[1, 1]
    discriminant = q1 * q1 - 4.0 * q2 * q0
    if a >= 0 or q2 <= 0 or discriminant < 0:
        return u_min, u_max
    root = math.sqrt(discriminant)
    low, high = (-q1 - root) / (2.0 * q2), (-q1 + root) / (2.0 * q2)
    return min(max(low, u_min), u_max), max(min(high, u_max), u_min)


def distance_from_best(x: Sequence[float] | pd.Series, best_x: float, log_x: bool = True) -> np.ndarray:
    """Signed distance of each MTD from the best one: log(x / best) (log_x) or x - best, in steps."""
    x = np.asarray(x, dtype=float)
    return np.log(x / best_x) if log_x else x - best_x


def seed_summary(table: pd.DataFrame, value: str, by: Sequence[str]) -> pd.DataFrame:
    """Mean, sample std (ddof=1) and count of `value` over the trials (seeds) of each `by` group.

    Missing values of `value` are left out of each group (n counts the values used); groups keep
    missing keys (e.g. predictor_dim None) as their own group.
    """
    by = list(by)
    values = table.dropna(subset=[value])
    if not by:
        column = values[value]
        return pd.DataFrame({"mean": [column.mean()], "std": [column.std(ddof=1)], "n": [len(column)]})
    grouped = values.groupby(by, dropna=False, sort=True)[value]
    summary = grouped.agg(mean="mean", std=lambda v: v.std(ddof=1), n="count").reset_index()
    summary["n"] = summary["n"].astype(int)
    return summary


# ---- internals ----------------------------------------------------------------------------------
def _to_u(x: np.ndarray, log_x: bool) -> np.ndarray:
    return np.log(x) if log_x else x


def _from_u(u: float, log_x: bool) -> float:
    return float(np.exp(u)) if log_x else float(u)


def _argmax_in_range(coefficients: np.ndarray, u_min: float, u_max: float) -> float:
    """Where the parabola is highest on [u_min, u_max]: its vertex if it opens down inside, else an end."""
    a, b, _ = coefficients
    candidates = [u_min, u_max]
    if a < 0:
        vertex = -b / (2.0 * a)
        if u_min < vertex < u_max:
            candidates.append(vertex)
    values = np.polyval(coefficients, candidates)
    return float(candidates[int(np.argmax(values))])
