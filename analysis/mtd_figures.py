"""MoCoSE Figs. 2, 3 and 4: scores, alignment and uniformity against the maximum traceable distance (MTD).

Each configuration (a combination of `by`, the study's declared parameters) is its own point: two routes
to the same MTD are two points at the same x, and no line joins points of different configurations; the
trend is a quadratic fitted over all trials, because MTD is the x variable under test. Returns and data
columns as analysis.figures describes; the statistics (Spearman, fit, best MTD and its interval) go in
`data.attrs["stats"]`.

`mtd_source="measured"` (the table from `load_results(..., mtd_source="measured")`) says "measured" in the
title and on the x axis; the paper's marks stay where eq. 4 puts them, and say so.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

from analysis import paper_values
from analysis.figure_marks import (
    PAPER_LEFT_OUT,
    PAPER_STYLE,
    draw_points,
    paper_comparable,
    score_label,
    series_columns,
    single_value,
    spread_note,
)
from analysis.figure_style import (
    DEFAULT_SIZE,
    REFERENCE_GREY,
    finish,
    legend_below,
    new_figure,
    series_style,
    styled,
)
from analysis.registry import FIGURE
from analysis.stats import PeakFit, fit_peak, seed_summary, spearman
from trainer.method_rules import DISTANCE_METHODS

MTD_LABEL = "MTD (steps)"
MEASURED_MTD_LABEL = "measured MTD (steps)"
MTD_COLUMNS = ["series", "group", "x", "mean", "std", "n", "lo", "hi", "steps_from_best"]


def mtd_name(mtd_source: str) -> str:
    """How a figure names its x: "MTD" (eq. 4) or "measured MTD"."""
    if mtd_source not in ("formula", "measured"):
        raise ValueError(f"mtd_source must be 'formula' or 'measured', got {mtd_source!r}")
    return "measured MTD" if mtd_source == "measured" else "MTD"


@styled
def figure_score_vs_mtd(
    table: pd.DataFrame, score: str = "avg", log_x: bool = True,
    by: Sequence[str] | None = None, mtd_source: str = "formula", size: str = DEFAULT_SIZE,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Fig. 2: score vs MTD over all MoCoSE trials (one point per configuration of `by`), the
    fitted trend and the best MTD."""
    name = mtd_name(mtd_source)
    trials = _mocose_with_mtd(table, score)
    keys = series_columns(trials, (), by)
    fig, (ax,) = new_figure(size)
    data, panel_stats = _draw_mtd_series(ax, trials, score, "measured", 0, log_x, fit_label="trend",
                                         keys=keys)
    data = [data, _draw_paper_mtd(ax, trials["mtd"], score, mtd_source)]
    rho = panel_stats.get("spearman_rho", math.nan)
    ax.set_title(FIGURE["score_vs_mtd"].title(f"{score_label(score)} vs {name}") + "\n"
                 f"Spearman rho = {rho:.2f} over {len(trials)} trials")
    _finish_mtd_axes(ax, score, log_x, mtd_source)
    frame = pd.DataFrame(pd.concat(data, ignore_index=True), columns=MTD_COLUMNS + keys)
    frame.attrs["stats"] = panel_stats
    return finish(fig, [ax], size), frame


@styled
def figure_score_vs_mtd_by_batch(
    table: pd.DataFrame, score: str = "avg", log_x: bool = True,
    by: Sequence[str] | None = None, mtd_source: str = "formula", size: str = DEFAULT_SIZE,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Fig. 3: score vs MTD, one series (and trend, where >= 3 MTD values) per batch size."""
    name = mtd_name(mtd_source)
    trials = _mocose_with_mtd(table, score)
    keys = series_columns(trials, ["batch_size"], by)
    fig, (ax,) = new_figure(size)
    parts, stats = [], {"score": score, "groups": {}}
    for i, (batch, group) in enumerate(trials.groupby("batch_size", sort=True)):
        label = f"B={int(batch)}"
        part, group_stats = _draw_mtd_series(ax, group, score, label, i, log_x, fit_label=None,
                                             keys=keys)
        parts.append(part)
        stats["groups"][label] = group_stats
    parts.append(_draw_paper_mtd(ax, trials["mtd"], score, mtd_source, table3=False))
    ax.set_title(FIGURE["score_vs_mtd_by_batch"].title(f"{score_label(score)} vs {name} per batch size"))
    kind = "log(MTD)" if log_x else "MTD"
    counts = pd.concat(parts).query("series == 'measured'")["n"]
    note = f"a point per configuration: {spread_note(counts)}"
    if any("best_mtd" in group for group in stats["groups"].values()):  # a trend drawn (>= 3 MTD values)
        note += f"\nlines: quadratic in {kind} over each batch size's trials"
    _finish_mtd_axes(ax, score, log_x, mtd_source, note=note)
    frame = pd.DataFrame(pd.concat(parts, ignore_index=True), columns=MTD_COLUMNS + keys)
    frame.attrs["stats"] = stats
    return finish(fig, [ax], size), frame


@styled
def figure_align_uniform_vs_mtd(table: pd.DataFrame, log_x: bool = True, by: Sequence[str] | None = None,
                                mtd_source: str = "formula", size: str = DEFAULT_SIZE) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Fig. 4: alignment and uniformity (Wang & Isola; lower is better) vs MTD, one point per
    configuration and no line through them."""
    name = mtd_name(mtd_source)
    trials = table[table["method"].isin(DISTANCE_METHODS) & table["mtd"].notna()]
    keys = series_columns(trials, (), by)
    fig, axes = new_figure(size, panels=2)
    parts, stats = [], {}
    split = single_value(trials, "align_uniform_split")
    for ax, metric in zip(axes, ("align", "uniform")):
        points = _mtd_points(trials, metric, keys).sort_values("x", kind="stable")
        points["series"], points["group"] = "measured", metric
        draw_points(ax, points["x"], points["mean"], points["std"], points["n"], **series_style(0),
                    label=f"a point per configuration: {spread_note(points['n'])}")
        correlation = spearman(trials["mtd"], trials[metric])
        stats[metric] = {"spearman_rho": correlation.rho, "spearman_p": correlation.pvalue, "n": correlation.n}
        quantity = "alignment" if metric == "align" else "uniformity"
        ax.set_title(f"{quantity} vs {name} (Spearman rho = {correlation.rho:.2f})")
        ax.set_ylabel(f"{quantity} (lower is better)")
        _finish_mtd_axes(ax, None, log_x, mtd_source, legend=metric == "uniform")  # one legend, for both
        parts.append(points)
    split = split.removeprefix("stsb-") if split else split  # summaries say stsb-dev / stsb-test (older: dev)
    fig.suptitle(FIGURE["align_uniform_vs_mtd"].title(f"Alignment and uniformity vs {name}")
                 + (f", STS-B {split}" if split else ""))
    frame = pd.DataFrame(pd.concat(parts, ignore_index=True), columns=MTD_COLUMNS + keys)
    frame.attrs["stats"] = stats
    return finish(fig, axes, size), frame


# ---- drawing ------------------------------------------------------------------------------------
def _mocose_with_mtd(table: pd.DataFrame, score: str) -> pd.DataFrame:
    trials = table[table["method"].isin(DISTANCE_METHODS) & table["mtd"].notna() & table[score].notna()]
    if trials.empty:
        raise ValueError("no MoCoSE trials with an MTD and a score to plot")
    return trials


def _mtd_points(trials: pd.DataFrame, value: str, keys: Sequence[str] = ()) -> pd.DataFrame:
    """Mean ± std of `value` over the seeds of each configuration (`keys`), at its MTD."""
    keyed = trials.assign(_mtd=trials["mtd"].round(6))
    return seed_summary(keyed, value, ["_mtd", *keys]).rename(columns={"_mtd": "x"})


def _draw_mtd_series(
    ax, trials: pd.DataFrame, score: str, label: str, index: int, log_x: bool,
    fit_label: str | None, keys: Sequence[str] = (),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One point per configuration (error bars where it has > 1 seed), and where there are >= 3 MTD
    values the trend and the best-MTD marker. `fit_label` None: the series' points and its best MTD are
    labelled by `label` alone (the legend's title says what the marks are)."""
    style = series_style(index)
    points = _mtd_points(trials, score, keys)
    points["series"] = "measured"
    points["group"] = label
    draw_points(ax, points["x"], points["mean"], points["std"], points["n"], **style,
                label=f"a point per configuration: {spread_note(points['n'])}" if fit_label else label)
    correlation = spearman(trials["mtd"], trials[score])
    stats: dict[str, Any] = {"score": score, "spearman_rho": correlation.rho, "spearman_p": correlation.pvalue,
                             "n_trials": correlation.n}
    parts = [points]
    if points["x"].nunique() >= 3:
        fit = fit_peak(trials["mtd"], trials[score], log_x=log_x)
        parts += _draw_fit(ax, fit, style["color"], label, fit_label)
        points["steps_from_best"] = points["x"] - fit.best_x
        stats.update(_fit_stats(fit))
    return pd.concat(parts, ignore_index=True), stats


def _draw_fit(ax, fit: PeakFit, color: str, group: str, fit_label: str | None) -> list[pd.DataFrame]:
    xs, ys = fit.curve()
    kind = "log(MTD)" if fit.log_x else "MTD"
    ax.plot(xs, ys, "-", color=color, alpha=0.8, zorder=2,
            label=f"{fit_label}: quadratic in {kind}, all trials" if fit_label else None)
    low, high = fit.best_x - fit.ci_low, fit.ci_high - fit.best_x
    best = "best MTD" if fit_label else f"{group}: best MTD"
    # under the measured points (zorder 4), hollow: a configuration at the best MTD stays visible in the star
    ax.errorbar([fit.best_x], [fit.best_y], xerr=[[max(low, 0.0)], [max(high, 0.0)]], fmt="*", color=color,
                markersize=10, markerfacecolor="white", markeredgecolor=color, markeredgewidth=1.0, capsize=3,
                elinewidth=1.2, zorder=3.8,
                label=f"{best} {fit.best_x:.1f} ({_interval_text(fit)})")
    curve = pd.DataFrame({"series": "fit", "group": group, "x": xs, "mean": ys})
    best = pd.DataFrame({"series": ["best MTD"], "group": [group], "x": [fit.best_x], "mean": [fit.best_y],
                         "n": [fit.n], "lo": [fit.ci_low], "hi": [fit.ci_high]})
    return [curve, best]


def _interval_text(fit: PeakFit) -> str:
    """The best MTD's interval as its legend says it: Fieller's, or that no peak was located."""
    if not fit.located:
        return f"not located: {fit.ci_level:.0%} Fieller CI the whole range"
    return f"{fit.ci_level:.0%} Fieller CI {fit.ci_low:.1f}-{fit.ci_high:.1f}"


def _fit_stats(fit: PeakFit) -> dict[str, Any]:
    return {
        "fit": "quadratic in log(MTD)" if fit.log_x else "quadratic in MTD",
        "coefficients": list(fit.coefficients),
        "best_mtd": fit.best_x, "best_score": fit.best_y,
        "ci_low": fit.ci_low, "ci_high": fit.ci_high, "ci_level": fit.ci_level,
        "ci_method": "Fieller, projected onto the MTD range", "peak_located": fit.located,
        "mtd_range": [fit.x_min, fit.x_max],
    }


def _draw_paper_mtd(ax, mtd: pd.Series, score: str, mtd_source: str, table3: bool = True) -> pd.DataFrame:
    """Paper references on the MTD axis, only near the study's range (so they never rescale it): Table 3's
    scores only beside the same score; the best MTD (an x position) always, saying what it is best by.
    Both are eq. 4's distances: on a measured axis their labels say so."""
    low, high = float(mtd.min()) / 1.5, float(mtd.max()) * 1.5
    formula = ", by eq. 4" if mtd_source == "measured" else ""
    rows = []
    if table3 and paper_comparable(score):
        points = {x: y for x, y in paper_values.mocose_table3_as_mtd().items() if low <= x <= high}
        if points:
            ax.plot(list(points), list(points.values()), label=f"paper (Table 3 eta sweep, K=512, B=64{formula})",
                    **PAPER_STYLE)
            rows += [{"series": "paper", "group": "MoCoSE Table 3", "x": x, "mean": y} for x, y in points.items()]
    best = paper_values.BEST_MTD["bert-base"]
    if low <= best <= high:
        by = "" if paper_comparable(score) else ", by the seven-task average"
        ax.axvline(best, color=REFERENCE_GREY, linestyle=":", linewidth=1.0, zorder=1,
                   label=f"paper best MTD {best} (bert-base{by}{formula})")
        rows.append({"series": "paper best MTD", "group": "MoCoSE section 5.7", "x": best, "mean": math.nan})
    return pd.DataFrame(rows, columns=MTD_COLUMNS)


def _finish_mtd_axes(ax, score: str | None, log_x: bool, mtd_source: str, note: str | None = None,
                     legend: bool = True) -> None:
    label = MEASURED_MTD_LABEL if mtd_source == "measured" else MTD_LABEL
    ax.set_xlabel(label + (", log scale" if log_x else ""))
    if score is not None:
        ax.set_ylabel(score_label(score))
    if log_x:
        ax.set_xscale("log")
        low, high = ax.get_xlim()
        ax.xaxis.set_major_locator(FixedLocator(_log_ticks(low, high)))
        ax.xaxis.set_major_formatter(ScalarFormatter())  # plain decimals under STYLE
        ax.xaxis.set_minor_formatter(NullFormatter())
    if legend:
        notes = [note, None if score is None or paper_comparable(score) else PAPER_LEFT_OUT]
        legend_below(ax, title="\n".join(n for n in notes if n) or None)


def _log_ticks(low: float, high: float) -> list[float]:
    """Round tick values on a log axis: the sparsest of these ladders that gives >= 4 ticks."""
    ladders = [(1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 6, 8), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)]
    decades = range(math.floor(math.log10(max(low, 1e-12))) - 1, math.ceil(math.log10(high)) + 1)
    ticks: list[float] = []
    for ladder in ladders:
        ticks = [m * 10.0**d for d in decades for m in ladder if low <= m * 10.0**d <= high]
        if len(ticks) >= 4:
            break
    return ticks
