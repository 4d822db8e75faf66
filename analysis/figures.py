"""The papers' figures from a loaded results table (analysis.load.load_results).

Every figure function returns `(figure, data)`: a matplotlib Figure (Agg canvas, no pyplot state)
and a pandas DataFrame holding exactly what is drawn, one row per plotted point:

    series   which set of marks: "measured" / a series label, "fit", "best MTD", "paper", ...
    x        the x value (MTD in steps, a parameter value, a slice label)
    x_label  the tick text (categorical figures)
    mean     the plotted y (mean over seeds, a fitted value, or the paper's number)
    std      the error bar: sample std over seeds (ddof=1; NaN for one seed or non-measured marks)
    n        trials behind the point

plus figure-specific columns (group, lo/hi of the bootstrap interval, heat-map rows, ...).
MTD figures also put their statistics (Spearman, fit, best MTD and interval) in `data.attrs["stats"]`.

Measured points are means over seeds with ±1 std error bars; a point with one seed is drawn without a
bar, every legend says which (`spread_note`), and where n differs between points each point is
labelled with its n. Trials whose other swept parameters differ are kept apart as separate series
(`by`: the study's declared parameters, inferred when None), never pooled; on the MTD figures each
configuration is its own point (two routes to the same MTD are two points at the same x), and the
fit runs over all trials, because MTD is the x variable under test.
Paper values (analysis.paper_values) are drawn as white diamonds labelled "paper", only at the x
values the study measured, and only beside the score they are: the seven-task STS average. Beside any
other score (the STS-B test score of a study that evaluated that task alone) they are left out, and the
legend says so; the y axis always names the score it plots.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterable, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

from analysis import paper_values
from analysis.load import swept_parameters
from analysis.stats import PeakFit, fit_peak, seed_summary, spearman
from trainer.sts_average import TASK_NAMES
from trainer.vocabulary import SICK_RELATEDNESS, STS_BENCHMARK

STYLE = {
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
FIGSIZE = (6.0, 4.0)
STD_NOTE = "mean ± 1 std over seeds"  # the plain form; legends use spread_note(n of the points)
PAPER_STYLE = dict(marker="D", markersize=7, markerfacecolor="white", markeredgecolor="black",
                   markeredgewidth=1.3, linestyle="none", zorder=6)
SCORE_LABELS = {
    "avg": "STS avg Spearman x100",  # the seven-task average (a trial without all seven has no avg)
    "dev_stsb": "STS-B dev Spearman x100",
    STS_BENCHMARK: "STS-B test Spearman x100",
    SICK_RELATEDNESS: "SICK-R Spearman x100",
}
PAPER_LEFT_OUT = "paper values not drawn: they are seven-task STS averages"
MTD_LABEL = "MTD (steps)"
COLUMNS = ["series", "x", "x_label", "mean", "std", "n"]
MTD_COLUMNS = ["series", "group", "x", "mean", "std", "n", "lo", "hi", "steps_from_best"]


def score_label(score: str) -> str:
    if score in SCORE_LABELS:
        return SCORE_LABELS[score]
    if score in TASK_NAMES:
        return f"{TASK_NAMES[score]} test Spearman x100"
    return f"{score} Spearman x100"


def paper_comparable(score: str) -> bool:
    """Whether the papers' values are the same quantity as `score` (all of them are seven-task averages)."""
    return score == paper_values.ABLATION_SCORE


def _styled(function: Callable) -> Callable:
    """Run a figure function under the module's rc style (rcParams are read as artists are made)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context(STYLE):
            return function(*args, **kwargs)

    return wrapper


# ---- MoCoSE Fig. 2, 3, 4: scores against MTD ----------------------------------------------------
@_styled
def figure_score_vs_mtd(
    table: pd.DataFrame, score: str = "avg", log_x: bool = True, n_boot: int = 1000, seed: int = 0,
    by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Fig. 2: score vs MTD over all MoCoSE trials (one point per configuration of `by`), the
    fitted trend and the best MTD."""
    trials = _mocose_with_mtd(table, score)
    keys = _series_columns(trials, (), by)
    fig, (ax,) = _new_figure()
    data, panel_stats = _draw_mtd_series(ax, trials, score, "measured", "C0", log_x, n_boot, seed, fit_label="trend",
                                         keys=keys)
    data = [data, _draw_paper_mtd(ax, trials["mtd"], score)]
    rho = panel_stats.get("spearman_rho", math.nan)
    ax.set_title(
        f"{score_label(score)} vs maximum traceable distance (MoCoSE Fig. 2)\n"
        f"Spearman rho = {rho:.2f} over {len(trials)} trials"
    )
    _finish_mtd_axes(ax, score, log_x)
    frame = pd.DataFrame(pd.concat(data, ignore_index=True), columns=MTD_COLUMNS + keys)
    frame.attrs["stats"] = panel_stats
    return fig, frame


@_styled
def figure_score_vs_mtd_by_batch(
    table: pd.DataFrame, score: str = "avg", log_x: bool = True, n_boot: int = 1000, seed: int = 0,
    by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Fig. 3: score vs MTD, one series (and trend, where >= 3 MTD values) per batch size."""
    trials = _mocose_with_mtd(table, score)
    keys = _series_columns(trials, ["batch_size"], by)
    fig, (ax,) = _new_figure()
    parts, stats = [], {"score": score, "groups": {}}
    for i, (batch, group) in enumerate(trials.groupby("batch_size", sort=True)):
        label = f"B={int(batch)}"
        part, group_stats = _draw_mtd_series(ax, group, score, label, f"C{i}", log_x, n_boot, seed,
                                             fit_label=f"trend B={int(batch)}", keys=keys)
        parts.append(part)
        stats["groups"][label] = group_stats
    parts.append(_draw_paper_mtd(ax, trials["mtd"], score, table3=False))
    ax.set_title(f"{score_label(score)} vs MTD per batch size (MoCoSE Fig. 3)")
    _finish_mtd_axes(ax, score, log_x)
    frame = pd.DataFrame(pd.concat(parts, ignore_index=True), columns=MTD_COLUMNS + keys)
    frame.attrs["stats"] = stats
    return fig, frame


@_styled
def figure_align_uniform_vs_mtd(table: pd.DataFrame, log_x: bool = True,
                                by: Sequence[str] | None = None) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Fig. 4: alignment and uniformity (Wang & Isola; lower is better) vs MTD."""
    trials = table[(table["method"] == "mocose") & table["mtd"].notna()]
    keys = _series_columns(trials, (), by)
    fig, axes = _new_figure(ncols=2, figsize=(9.0, 3.8))
    parts, stats = [], {}
    split = _single_value(trials, "align_uniform_split")
    for ax, metric, color in zip(axes, ("align", "uniform"), ("C2", "C3")):
        points = _mtd_points(trials, metric, keys).sort_values("x", kind="stable")
        points["series"], points["group"] = "measured", metric
        draw_points(ax, points["x"], points["mean"], points["std"], points["n"], fmt="o-", color=color,
                    label=f"this study: {spread_note(points['n'])}")
        correlation = spearman(trials["mtd"], trials[metric])
        stats[metric] = {"spearman_rho": correlation.rho, "spearman_p": correlation.pvalue, "n": correlation.n}
        name = "alignment" if metric == "align" else "uniformity"
        ax.set_title(f"{name} vs MTD (Spearman rho = {correlation.rho:.2f})")
        ax.set_ylabel(f"{name} (lower is better)")
        _finish_mtd_axes(ax, None, log_x)
        parts.append(points)
    fig.suptitle("Alignment and uniformity vs MTD (MoCoSE Fig. 4)" + (f", STS-B {split}" if split else ""))
    frame = pd.DataFrame(pd.concat(parts, ignore_index=True), columns=MTD_COLUMNS + keys)
    frame.attrs["stats"] = stats
    return fig, frame


# ---- MoCoSE ablation tables as charts -----------------------------------------------------------
@_styled
def figure_queue_slices(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Table 8: which age-ordered queue positions the loss uses, as a bar chart."""
    trials = table[table["method"] == "mocose"]
    paper = paper_values.MOCOSE_TABLE8_QUEUE_SLICES
    setting = paper_values.MOCOSE_TABLE8_SETTING
    return _ablation_figure(
        trials, "queue.slices", score, by=by, bars=True, sort_key=slice_sort_key, x_format=str,
        title="Queue slices used by the loss (MoCoSE Table 8)", xlabel="queue positions used (0 = newest key)",
        paper=lambda label: paper.get(label),
        paper_label=f"paper (K={setting['queue.size']}, K0={setting['queue.initial_size']}, N={setting['batch_size']})",
    )


@_styled
def figure_ema_decay(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Table 3 / Fig. 8: EMA decay eta (constant schedule; eta0 under a cosine schedule)."""
    trials = table[table["method"] == "mocose"]
    constant = "ema.schedule" not in trials.columns or (trials["ema.schedule"] == "constant").all()
    return _ablation_figure(
        trials, "ema.decay", score, by=by, x_format=_format_number,
        title="EMA decay (MoCoSE Table 3 / Fig. 8)",
        xlabel="EMA decay eta" if constant else "EMA decay eta (eta0 for cosine schedules)",
        paper=_numeric_lookup(paper_values.MOCOSE_TABLE3_EMA) if constant else None,
        paper_label="paper (fixed eta, K=512, B=64)",
    )


@_styled
def figure_queue_heatmap(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Table 7 / Fig. 12: queue size K x initial queue size K0, cells = mean ± std over seeds.

    Rows are K0 as a fraction of K (the paper's w.o. / K/4 / K/2 / all) when that gives fewer rows
    than the absolute K0 values, else the absolute K0. Paper values, where the cell exists in
    Table 7, are printed in the cell in brackets and returned in the `paper` column.
    """
    trials = table[table["method"] == "mocose"].copy()
    fractions = trials["queue.initial_size"] / trials["queue.size"]
    by_fraction = fractions.round(6).nunique() <= trials["queue.initial_size"].nunique()
    trials["_row"] = fractions.round(6) if by_fraction else trials["queue.initial_size"]
    series_columns = _series_columns(trials, ["queue.size", "queue.initial_size"], by)
    panels = list(trials.groupby(series_columns, sort=True, dropna=False)) if series_columns else [((), trials)]

    fig, axes = _new_figure(ncols=len(panels), figsize=(5.6 * len(panels) + 0.8, 4.2))
    summaries = []
    for key, panel in panels:
        summary = seed_summary(panel, score, ["queue.size", "_row"])
        summary["series"] = _series_label(series_columns, key) if series_columns else "measured"
        summaries.append(summary)
    cells = pd.concat(summaries, ignore_index=True)
    low, high = np.nanmin(cells["mean"]), np.nanmax(cells["mean"])
    comparable = paper_comparable(score)

    image = None
    parts = []
    for ax, summary in zip(axes, summaries):
        columns = sorted(summary["queue.size"].unique())
        rows = sorted(summary["_row"].unique())
        matrix = np.full((len(rows), len(columns)), np.nan)
        for _, cell in summary.iterrows():
            matrix[rows.index(cell["_row"]), columns.index(cell["queue.size"])] = cell["mean"]
        image = ax.imshow(matrix, cmap="viridis", vmin=low, vmax=high, aspect="auto")
        summary["paper"] = [
            paper_values.MOCOSE_TABLE7_QUEUE_INIT.get((float(r), int(k))) if by_fraction and comparable else None
            for r, k in zip(summary["_row"], summary["queue.size"])
        ]
        for _, cell in summary.iterrows():
            i, j = rows.index(cell["_row"]), columns.index(cell["queue.size"])
            text = f"{cell['mean']:.2f}" + (f"\n±{cell['std']:.2f}" if not math.isnan(cell["std"]) else "")
            if cell["paper"] is not None and not pd.isna(cell["paper"]):
                text += f"\n[paper {cell['paper']:.2f}]"
            shade = (cell["mean"] - low) / (high - low) if high > low else 1.0
            ax.text(j, i, text, ha="center", va="center", fontsize=7.5, color="white" if shade < 0.5 else "black")
        ax.set_xticks(range(len(columns)), [str(int(k)) for k in columns])
        ax.set_yticks(range(len(rows)), [_init_label(r, by_fraction) for r in rows])
        ax.set_xlabel("queue size K (keys)")
        ax.set_ylabel("initial queue size K0" + (" (fraction of K)" if by_fraction else " (keys)"))
        ax.grid(False)
        note = spread_note(summary["n"])
        paper_mark = "; [paper]" if comparable else ""
        ax.set_title(f"{summary['series'].iloc[0]}; cells: {note}" if series_columns else f"cells: {note}{paper_mark}",
                     fontsize=8.5)
        parts.append(summary)
    fig.colorbar(image, ax=list(axes), label=score_label(score), shrink=0.9)
    fig.suptitle("Queue size x initial queue size (MoCoSE Table 7 / Fig. 12)"
                 + ("" if comparable else f"\n{PAPER_LEFT_OUT}"))

    frame = pd.concat(parts, ignore_index=True)
    frame = frame.rename(columns={"queue.size": "x", "_row": "y"})
    frame["x_label"] = frame["x"].map(lambda k: str(int(k)))
    frame["y_label"] = frame["y"].map(lambda r: _init_label(r, by_fraction))
    frame["paper"] = pd.to_numeric(frame["paper"], errors="coerce")
    return fig, frame[["series", "x", "x_label", "y", "y_label", "mean", "std", "n", "paper"]]


@_styled
def figure_head_depth(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Table 4: projection layers P / predictor layers Q."""
    trials = table[table["method"] == "mocose"].copy()
    trials["heads.depth"] = [
        f"{_format_number(p)}/{_format_number(q)}"
        for p, q in zip(_column(trials, "heads.projection_layers", 1), _column(trials, "heads.predictor_layers", 2))
    ]
    return _ablation_figure(
        trials, "heads.depth", score, by=by, bars=True, x_format=str,
        exclude=("heads.projection_layers", "heads.predictor_layers"),
        sort_key=lambda label: tuple(int(v) for v in label.split("/")),
        title="Projection / predictor depth (MoCoSE Table 4)", xlabel="projection layers P / predictor layers Q",
        paper=lambda label: paper_values.MOCOSE_TABLE4_DEPTH.get(tuple(int(v) for v in label.split("/"))),
        paper_label="paper (MoCoSE Table 4)",
    )


@_styled
def figure_predictor_width(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Table 6a: the "predictor dimension", the width of the embedding the loss sees
    (heads.embedding_dim: projection output, predictor layers, queue; null = the encoder's hidden size)."""
    trials = table[table["method"] == "mocose"]
    return _ablation_figure(
        trials, "heads.embedding_dim", score, by=by,
        x_format=lambda v: "hidden size" if pd.isna(v) else _format_number(v),
        title="Predictor dimension (MoCoSE Table 6a)", xlabel="predictor dimension heads.embedding_dim (units)",
        paper=_numeric_lookup(paper_values.MOCOSE_TABLE6A_PREDICTOR_WIDTH), paper_label="paper (MoCoSE Table 6a)",
    )


@_styled
def figure_batch_size(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Table 6b: batch size N (the paper keeps K = 512, so MTD changes with N)."""
    all_mocose = (table["method"] == "mocose").all()
    return _ablation_figure(
        table, "batch_size", score, by=by, x_format=_format_number,
        title="Batch size (MoCoSE Table 6b)", xlabel="batch size N (sentences)",
        paper=_numeric_lookup(paper_values.MOCOSE_TABLE6B_BATCH_SIZE) if all_mocose else None,
        paper_label="paper (MoCoSE, K=512)",
    )


@_styled
def figure_fgsm_eps(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MoCoSE Table 9: FGSM epsilon on the word embeddings (0 = no FGSM)."""
    all_mocose = (table["method"] == "mocose").all()
    return _ablation_figure(
        table, "fgsm.eps", score, by=by, x_format=_format_eps,
        title="FGSM perturbation size (MoCoSE Table 9)", xlabel="FGSM epsilon (0 = none)",
        paper=_numeric_lookup(paper_values.MOCOSE_TABLE9_FGSM_EPS) if all_mocose else None,
        paper_label="paper (MoCoSE Table 9)",
    )


# ---- GS-InfoNCE and MixCSE -----------------------------------------------------------------------
@_styled
def figure_gaussian_m(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """GS-InfoNCE Table 3: number of Gaussian negatives M as a multiple of the batch size (0 = SimCSE)."""
    trials = table[table["method"].isin(["gs", "simcse"])]
    return _ablation_figure(
        trials, "gaussian.m_per_batch", score, by=by, x_format=lambda v: f"{_format_number(v)}x",
        exclude=("method", "gaussian.count", "gaussian.count_per_batch"),
        title="Gaussian negatives (GS-InfoNCE Table 3)", xlabel="Gaussian negatives M (multiple of batch size N)",
        paper=_numeric_lookup(paper_values.GS_TABLE3_GAUSSIAN_M), paper_label="paper (N=64)",
    )


@_styled
def figure_mix_lambda(
    table: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    """MixCSE: the mixing coefficient lambda (share of the anchor's own positive in the mixed negative)."""
    trials = table[table["method"] == "mix"]
    return _ablation_figure(
        trials, "mix.lam", score, by=by, x_format=_format_number,
        title="Mixing coefficient (MixCSE; paper default 0.2)", xlabel="mixing lambda",
    )


# ---- shared drawing -----------------------------------------------------------------------------
def _new_figure(ncols: int = 1, figsize: tuple[float, float] = FIGSIZE) -> tuple[Figure, list]:
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)  # Agg canvas, so savefig works with no pyplot and no display
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _mocose_with_mtd(table: pd.DataFrame, score: str) -> pd.DataFrame:
    trials = table[(table["method"] == "mocose") & table["mtd"].notna() & table[score].notna()]
    if trials.empty:
        raise ValueError("no MoCoSE trials with an MTD and a score to plot")
    return trials


def _mtd_points(trials: pd.DataFrame, value: str, keys: Sequence[str] = ()) -> pd.DataFrame:
    """Mean ± std of `value` over the seeds of each configuration (`keys`), at its MTD."""
    keyed = trials.assign(_mtd=trials["mtd"].round(6))
    points = seed_summary(keyed, value, ["_mtd", *keys]).rename(columns={"_mtd": "x"})
    return points


def _draw_mtd_series(
    ax, trials: pd.DataFrame, score: str, label: str, color: str, log_x: bool, n_boot: int, seed: int, fit_label: str,
    keys: Sequence[str] = (),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One point per configuration (error bars where it has > 1 seed), and where there are >= 3 MTD
    values the trend and the best-MTD marker."""
    points = _mtd_points(trials, score, keys)
    points["series"] = "measured"
    points["group"] = label
    name = "this study" if label == "measured" else label
    draw_points(ax, points["x"], points["mean"], points["std"], points["n"], fmt="o", color=color,
                label=f"{name}: {spread_note(points['n'])}")
    correlation = spearman(trials["mtd"], trials[score])
    stats: dict[str, Any] = {"score": score, "spearman_rho": correlation.rho, "spearman_p": correlation.pvalue,
                             "n_trials": correlation.n}
    parts = [points]
    if points["x"].nunique() >= 3:
        fit = fit_peak(trials["mtd"], trials[score], log_x=log_x, n_boot=n_boot, seed=seed)
        parts += _draw_fit(ax, fit, color, label, fit_label)
        points["steps_from_best"] = points["x"] - fit.best_x
        stats.update(_fit_stats(fit))
    return pd.concat(parts, ignore_index=True), stats


def _draw_fit(ax, fit: PeakFit, color: str, group: str, fit_label: str) -> list[pd.DataFrame]:
    xs, ys = fit.curve()
    kind = "log(MTD)" if fit.log_x else "MTD"
    ax.plot(xs, ys, "-", color=color, alpha=0.8, label=f"{fit_label}: quadratic in {kind}")
    low, high = fit.best_x - fit.ci_low, fit.ci_high - fit.best_x
    ax.errorbar([fit.best_x], [fit.best_y], xerr=[[max(low, 0.0)], [max(high, 0.0)]], fmt="*", color=color,
                markersize=13, markeredgecolor="black", capsize=4, elinewidth=2, zorder=7,
                label=f"best MTD {fit.best_x:.1f} ({fit.ci_level:.0%} bootstrap CI {fit.ci_low:.1f}-{fit.ci_high:.1f})")
    curve = pd.DataFrame({"series": "fit", "group": group, "x": xs, "mean": ys})
    best = pd.DataFrame({"series": ["best MTD"], "group": [group], "x": [fit.best_x], "mean": [fit.best_y],
                         "n": [fit.n], "lo": [fit.ci_low], "hi": [fit.ci_high]})
    return [curve, best]


def _fit_stats(fit: PeakFit) -> dict[str, Any]:
    return {
        "fit": "quadratic in log(MTD)" if fit.log_x else "quadratic in MTD",
        "coefficients": list(fit.coefficients),
        "best_mtd": fit.best_x, "best_score": fit.best_y,
        "ci_low": fit.ci_low, "ci_high": fit.ci_high, "ci_level": fit.ci_level, "n_boot": fit.n_boot,
        "mtd_range": [fit.x_min, fit.x_max],
    }


def _draw_paper_mtd(ax, mtd: pd.Series, score: str, table3: bool = True) -> pd.DataFrame:
    """Paper references on the MTD axis, only near the study's range (so they never rescale it): Table 3's
    scores only beside the same score; the best MTD (an x position) always, saying what it is best by."""
    low, high = float(mtd.min()) / 1.5, float(mtd.max()) * 1.5
    rows = []
    if table3 and paper_comparable(score):
        points = {x: y for x, y in paper_values.mocose_table3_as_mtd().items() if low <= x <= high}
        if points:
            ax.plot(list(points), list(points.values()), label="paper (Table 3 eta sweep, K=512, B=64)", **PAPER_STYLE)
            rows += [{"series": "paper", "group": "MoCoSE Table 3", "x": x, "mean": y} for x, y in points.items()]
    best = paper_values.BEST_MTD["bert-base"]
    if low <= best <= high:
        by = "" if paper_comparable(score) else ", by the seven-task average"
        ax.axvline(best, color="0.3", linestyle=":", linewidth=1.2, label=f"paper best MTD {best} (bert-base{by})")
        rows.append({"series": "paper best MTD", "group": "MoCoSE section 5.7", "x": best, "mean": math.nan})
    return pd.DataFrame(rows, columns=MTD_COLUMNS)


def _finish_mtd_axes(ax, score: str | None, log_x: bool) -> None:
    ax.set_xlabel(MTD_LABEL + (", log scale" if log_x else ""))
    if score is not None:
        ax.set_ylabel(score_label(score))
    if log_x:
        ax.set_xscale("log")
        low, high = ax.get_xlim()
        ax.xaxis.set_major_locator(FixedLocator(_log_ticks(low, high)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(loc="best", title=None if score is None or paper_comparable(score) else PAPER_LEFT_OUT)


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


def _ablation_figure(
    table: pd.DataFrame,
    x: str,
    score: str,
    *,
    title: str,
    xlabel: str,
    x_format: Callable[[Any], str],
    by: Sequence[str] | None = None,
    exclude: Iterable[str] = (),
    sort_key: Callable[[Any], Any] | None = None,
    paper: Callable[[Any], float | None] | None = None,
    paper_label: str = "paper",
    bars: bool = False,
) -> tuple[Figure, pd.DataFrame]:
    """One parameter on a categorical x axis: mean ± std over seeds per value, one series per
    combination of the other swept parameters, paper values as diamonds at the measured x values (beside
    the seven-task average only)."""
    paper_note = "" if paper is None or paper_comparable(score) else f"\n{PAPER_LEFT_OUT}"
    paper = paper if paper_comparable(score) else None
    trials = table[table[score].notna()]
    series_columns = _series_columns(trials, [x, *exclude], by)
    summary = seed_summary(trials, score, [x, *series_columns])
    summary["x_label"] = summary[x].map(x_format)
    values = summary.drop_duplicates("x_label")[[x, "x_label"]]
    values = sorted(zip(values[x], values["x_label"]), key=lambda item: _sort_value(item[0], sort_key))
    order = [label for _, label in values]
    position = {label: i for i, label in enumerate(order)}

    summary["_position"] = summary["x_label"].map(position)
    summary = summary.sort_values([*series_columns, "_position"], kind="stable")  # rows in drawing order

    fig, (ax,) = _new_figure()
    show_n = summary["n"].nunique() > 1  # n beside each point only where it differs between points
    groups = list(summary.groupby(series_columns, sort=True, dropna=False)) if series_columns else [((), summary)]
    width = 0.8 / len(groups)
    parts = []
    for i, (key, group) in enumerate(groups):
        label = _series_label(series_columns, key) if series_columns else "this study"
        offset = (i - (len(groups) - 1) / 2) * (width if bars else 0.08)
        xs = np.array([position[lab] for lab in group["x_label"]]) + offset
        draw_points(ax, xs, group["mean"], group["std"], group["n"], fmt="o-", color=f"C{i}", label=label,
                    bar_width=width * 0.9 if bars else None, show_n=show_n)
        part = group.rename(columns={x: "x"}).assign(series=label)
        parts.append(part)

    if paper is not None:
        paper_rows = [
            {"series": "paper", "x": value, "x_label": lab, "mean": paper(value)}
            for value, lab in values if paper(value) is not None
        ]
        if paper_rows:
            ax.plot([position[r["x_label"]] for r in paper_rows], [r["mean"] for r in paper_rows],
                    label=paper_label, **PAPER_STYLE)
            parts.append(pd.DataFrame(paper_rows))

    frame = pd.concat(parts, ignore_index=True)
    frame["n"] = frame["n"].astype("Int64")  # paper rows have no n
    if bars:
        _zoom_y(ax, frame)  # scores sit near 75-78: a zero baseline would hide every difference
    ax.set_xticks(range(len(order)), order)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(score_label(score))
    ax.set_title(title)
    ax.legend(title=spread_note(summary["n"]) + paper_note, loc="best")
    extra = [c for c in series_columns if c in frame.columns]
    return fig, frame[COLUMNS + extra]


def spread_note(n: Iterable[int]) -> str:
    """What the marks show, from the number of seeds behind each point.

    >>> spread_note([1, 1])
    'single runs (one seed each, no error bars)'
    >>> spread_note([3, 3])
    'mean ± 1 std over 3 seeds'
    >>> spread_note([3, 1])
    'mean ± 1 std over seeds (n at each point); no bar: a single run'
    """
    counts = sorted({int(v) for v in n if not pd.isna(v)})
    if counts == [1]:
        return "single runs (one seed each, no error bars)"
    if len(counts) == 1:
        return f"mean ± 1 std over {counts[0]} seeds"
    return STD_NOTE + " (n at each point)" + ("; no bar: a single run" if 1 in counts else "")


def draw_points(ax, xs: Any, means: Any, stds: Any, ns: Any, *, fmt: str, color: str, label: str,
                bar_width: float | None = None, show_n: bool | None = None) -> None:
    """Means as markers (or bars), a ±1 std bar only where n > 1 (one seed has no spread to show, and a
    zero-length bar would claim one), and "n=k" beside each point when n differs between points."""
    xs, means = np.asarray(xs, dtype=float), np.asarray(means, dtype=float)
    stds, ns = np.asarray(stds, dtype=float), np.asarray(ns, dtype=float)
    multi = ns > 1
    if bar_width is not None:
        ax.bar(xs, means, width=bar_width, color=color, alpha=0.85, label=label, zorder=3)
        error_color = "black"
    else:
        ax.plot(xs, means, fmt, color=color, label=label, zorder=4)
        error_color = color
    if multi.any():
        ax.errorbar(xs[multi], means[multi], yerr=np.nan_to_num(stds[multi]), fmt="none", ecolor=error_color,
                    capsize=3, zorder=5)
    if show_n if show_n is not None else len(set(ns.tolist())) > 1:
        for x, y, n in zip(xs, means, ns):
            ax.annotate(f"n={int(n)}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)


def _series_columns(table: pd.DataFrame, x_columns: Sequence[str], by: Sequence[str] | None) -> list[str]:
    """The other swept parameters that vary in `table`: each combination becomes its own series."""
    candidates = swept_parameters(table) if by is None else list(by)
    return [c for c in candidates if c not in x_columns and c in table.columns and table[c].nunique(dropna=False) > 1]


def _series_label(columns: Sequence[str], key: Any) -> str:
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{column}={_format_value(value)}" for column, value in zip(columns, key))


def _zoom_y(ax, frame: pd.DataFrame) -> None:
    tops = frame["mean"] + frame["std"].fillna(0.0)
    bottoms = frame["mean"] - frame["std"].fillna(0.0)
    low, high = float(np.nanmin(bottoms)), float(np.nanmax(tops))
    pad = 0.25 * (high - low) + 0.2
    ax.set_ylim(low - pad, high + pad)


def _numeric_lookup(table: dict[float, float]) -> Callable[[Any], float | None]:
    def lookup(value: Any) -> float | None:
        if value is None or pd.isna(value):
            return None
        for key, paper_value in table.items():
            if math.isclose(float(key), float(value), rel_tol=1e-9, abs_tol=1e-15):
                return paper_value
        return None

    return lookup


def slice_sort_key(label: str) -> tuple:
    """Order of MoCoSE Table 8: single ranges by start, then concatenations, then "all"."""
    if label == "all":
        return (1, 0, ())
    ranges = tuple(tuple(int(v) for v in part.split("-")) for part in label.split("+"))
    return (0, len(ranges), ranges)


def _sort_value(value: Any, sort_key: Callable[[Any], Any] | None) -> tuple:
    if sort_key is not None:
        return (0, sort_key(value))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (1, 0)  # missing (the config default) last
    if isinstance(value, (int, float, np.number)):
        return (0, float(value))
    return (0, str(value))


def _init_label(row: float, by_fraction: bool) -> str:
    if not by_fraction:
        return str(int(row))
    names = {0.0: "w.o. init (0)", 0.25: "K/4", 0.5: "K/2", 1.0: "all (K)"}
    return names.get(float(row), f"{float(row):g} K")


def _format_number(value: Any) -> str:
    if value is None or pd.isna(value):
        return "default"
    value = float(value)
    return str(int(value)) if value.is_integer() else f"{value:g}"


def _format_eps(value: Any) -> str:
    if float(value) == 0.0:
        return "none"
    mantissa, exponent = f"{float(value):.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _format_value(value: Any) -> str:
    if isinstance(value, (int, float, np.number)) or value is None:
        return _format_number(value)
    return str(value)


def _column(table: pd.DataFrame, name: str, default: Any) -> pd.Series:
    return table[name] if name in table.columns else pd.Series(default, index=table.index)


def _single_value(table: pd.DataFrame, name: str) -> str | None:
    if name not in table.columns:
        return None
    values = table[name].dropna().unique()
    return str(values[0]) if len(values) == 1 else None
