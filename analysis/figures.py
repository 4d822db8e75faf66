"""The papers' figures from a loaded results table (analysis.load.load_results).

Every figure function returns `(figure, data)`: a matplotlib Figure (Agg canvas, no pyplot state), laid
out for print at `size` ("single": 3.5 in, one journal column, the default; "double": 7.2 in; see
analysis.figure_style), and a pandas DataFrame holding exactly what is drawn, one row per plotted point:

    series   which set of marks: "measured" / a series label, "fit", "best MTD", "paper", ...
    x        the x value (MTD in steps, a parameter value, a slice label)
    x_label  the tick text (categorical figures)
    mean     the plotted y (mean over seeds, a fitted value, or the paper's number)
    std      the error bar: sample std over seeds (ddof=1; NaN for one seed or non-measured marks)
    n        trials behind the point

plus figure-specific columns (group, lo/hi of the best MTD's interval, heat-map rows, the knob figure's panel
and its paired differences' ci_low/ci_high, interval and p_adjusted, ...).
MTD figures (analysis.mtd_figures) also put their statistics (Spearman, fit, best MTD and interval) in
`data.attrs["stats"]`.

Measured points are means over seeds with ±1 std error bars; a point with one seed is drawn without a
bar, every legend says which and over how many seeds (`spread_note`), and where n differs between points
each point is labelled with its n. Trials whose other swept parameters differ are kept apart as separate
series (`by`: the study's declared parameters, inferred when None), never pooled. A parameter's values
stand evenly spaced on a categorical x axis: one point per value and series, the series dodged sideways
(and the legend says so) when there are several, a line through a series' points where the values are
ordered numbers, and points alone (a dot plot, never bars from a non-zero base) where they are not
(queue slices, head depths).
Paper values (analysis.paper_values) are drawn as white diamonds labelled "paper", only at the x
values the study measured, and only beside the score they are: the seven-task STS average. Beside any
other score (the STS-B test score of a study that evaluated that task alone) they are left out, and the
legend says so; the y axis always names the score it plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis import paper_values
from analysis.figure_marks import (
    DODGE_NOTE,
    PAPER_LEFT_OUT,
    PAPER_STYLE,
    column_or,
    draw_points,
    format_eps,
    format_number,
    numeric_lookup,
    paper_comparable,
    score_label,
    series_columns,
    series_label,
    spread_note,
)
from analysis.figure_style import (
    CELL_TEXT,
    DEFAULT_SIZE,
    SEQUENTIAL,
    finish,
    legend_below,
    new_figure,
    series_style,
    styled,
)
from analysis.knob_differences import COLUMNS as DIFFERENCE_COLUMNS
from analysis.knob_differences import SCORE_PANEL, draw_differences, knob_differences
from analysis.registry import FIGURE, generic_knobs, knob_trials, varying_knobs
from analysis.stats import seed_summary
from trainer.vocabulary import MOCOSE

COLUMNS = ["series", "x", "x_label", "mean", "std", "n"]
Keys = Sequence[str] | None  # the parameters that set series apart (None: inferred)
Drawn = tuple[Figure, pd.DataFrame]


# ---- MoCoSE ablation tables as charts -----------------------------------------------------------
@styled
def figure_queue_slices(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MoCoSE Table 8: which age-ordered queue positions the loss uses, as a dot plot (the slices have no order
    to draw a line along)."""
    trials = FIGURE["queue_slices"].trials(table)
    paper = paper_values.MOCOSE_TABLE8_QUEUE_SLICES
    setting = paper_values.MOCOSE_TABLE8_SETTING
    return _ablation_figure(
        trials, "queue.slices", score, by=by, size=size, ordered=False, sort_key=slice_sort_key, x_format=str,
        title=FIGURE["queue_slices"].title("Queue slices used by the loss"),
        xlabel="queue positions used (0 = newest key)",
        paper=lambda label: paper.get(label),
        paper_label=f"paper (K={setting['queue.size']}, K0={setting['queue.initial_size']}, N={setting['batch_size']})",
    )


@styled
def figure_ema_decay(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MoCoSE Table 3 / Fig. 8: EMA decay eta (constant schedule; eta0 under a cosine schedule)."""
    trials = FIGURE["ema_decay"].trials(table)
    constant = "ema.schedule" not in trials.columns or (trials["ema.schedule"] == "constant").all()
    return _ablation_figure(
        trials, "ema.decay", score, by=by, size=size, x_format=format_number,
        title=FIGURE["ema_decay"].title("EMA decay"),
        xlabel="EMA decay eta" if constant else "EMA decay eta (eta0 for cosine schedules)",
        paper=numeric_lookup(paper_values.MOCOSE_TABLE3_EMA) if constant else None,
        paper_label="paper (fixed eta, K=512, B=64)",
    )


@styled
def figure_queue_heatmap(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MoCoSE Table 7 / Fig. 12: queue size K x initial queue size K0, cells = mean ± std over seeds.

    Rows are K0 as a fraction of K (the paper's w.o. / K/4 / K/2 / all) when that gives fewer rows
    than the absolute K0 values, else the absolute K0. Paper values, where the cell exists in
    Table 7, are printed in the cell in brackets and returned in the `paper` column. One panel per
    combination of the other swept parameters, all on one colour scale (SEQUENTIAL).
    """
    trials = FIGURE["queue_heatmap"].trials(table).copy()
    fractions = trials["queue.initial_size"] / trials["queue.size"]
    by_fraction = fractions.round(6).nunique() <= trials["queue.initial_size"].nunique()
    trials["_row"] = fractions.round(6) if by_fraction else trials["queue.initial_size"]
    other = series_columns(trials, ["queue.size", "queue.initial_size"], by)
    panels = list(trials.groupby(other, sort=True, dropna=False)) if other else [((), trials)]

    fig, axes = new_figure(size, panels=len(panels))
    summaries = []
    for key, panel in panels:
        summary = seed_summary(panel, score, ["queue.size", "_row"])
        summary["series"] = series_label(other, key) if other else "measured"
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
        image = ax.imshow(matrix, cmap=SEQUENTIAL, vmin=low, vmax=high, aspect="auto")
        summary["paper"] = [
            paper_values.MOCOSE_TABLE7_QUEUE_INIT.get((float(r), int(k))) if by_fraction and comparable else None
            for r, k in zip(summary["_row"], summary["queue.size"])
        ]
        for _, cell in summary.iterrows():
            i, j = rows.index(cell["_row"]), columns.index(cell["queue.size"])
            text = f"{cell['mean']:.2f}" + (f"\n±{cell['std']:.2f}" if not math.isnan(cell["std"]) else "")
            if cell["paper"] is not None and not pd.isna(cell["paper"]):
                text += f"\n[{cell['paper']:.2f}]"
            shade = (cell["mean"] - low) / (high - low) if high > low else 1.0
            ax.text(j, i, text, ha="center", va="center", fontsize=6.5, linespacing=1.1, gid=CELL_TEXT,
                    color="white" if shade < 0.5 else "black")
        ax.set_xticks(range(len(columns)), [str(int(k)) for k in columns])
        ax.set_yticks(range(len(rows)), [_init_label(r, by_fraction) for r in rows])
        ax.set_xlabel("queue size K (keys)")
        ax.set_ylabel("initial queue size K0" + (" (fraction of K)" if by_fraction else " (keys)"))
        ax.grid(False)
        if other:
            ax.set_title(summary["series"].iloc[0])
        parts.append(summary)
    colorbar = fig.colorbar(image, ax=list(axes), label=score_label(score), shrink=0.9, aspect=25)
    colorbar.outline.set_linewidth(0.5)
    frame = pd.concat(parts, ignore_index=True)
    frame["paper"] = pd.to_numeric(frame["paper"], errors="coerce")
    spread = spread_note(cells["n"]).replace("error bars", "± std")  # a cell has a ± line, not a bar
    note = "cells: " + spread + ("; [paper, Table 7]" if frame["paper"].notna().any() else "")
    legend_below(axes[-1], [], [], title=note + ("" if comparable else f"\n{PAPER_LEFT_OUT}"))
    fig.suptitle(FIGURE["queue_heatmap"].title("Queue size x initial queue size"))

    frame = frame.rename(columns={"queue.size": "x", "_row": "y"})
    frame["x_label"] = frame["x"].map(lambda k: str(int(k)))
    frame["y_label"] = frame["y"].map(lambda r: _init_label(r, by_fraction))
    return finish(fig, axes, size), frame[["series", "x", "x_label", "y", "y_label", "mean", "std", "n", "paper"]]


@styled
def figure_head_depth(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MoCoSE Table 4: projection layers P / predictor layers Q."""
    trials = FIGURE["head_depth"].trials(table).copy()
    trials["heads.depth"] = [
        f"{format_number(p)}/{format_number(q)}"
        for p, q in zip(column_or(trials, "heads.projection_layers", 1), column_or(trials, "heads.predictor_layers", 2))
    ]
    return _ablation_figure(
        trials, "heads.depth", score, by=by, size=size, ordered=False, x_format=str,
        exclude=("heads.projection_layers", "heads.predictor_layers"),
        sort_key=lambda label: tuple(int(v) for v in label.split("/")),
        title=FIGURE["head_depth"].title("Projection / predictor depth"),
        xlabel="projection layers P / predictor layers Q",
        paper=lambda label: paper_values.MOCOSE_TABLE4_DEPTH.get(tuple(int(v) for v in label.split("/"))),
        paper_label="paper (MoCoSE Table 4)",
    )


@styled
def figure_predictor_width(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MoCoSE Table 6a: the "predictor dimension", the width of the embedding the loss sees
    (heads.embedding_dim: projection output, predictor layers, queue; null = the encoder's hidden size)."""
    trials = FIGURE["predictor_width"].trials(table)
    return _ablation_figure(
        trials, "heads.embedding_dim", score, by=by, size=size,
        x_format=lambda v: "hidden size" if pd.isna(v) else format_number(v),
        title=FIGURE["predictor_width"].title("Predictor dimension"),
        xlabel="predictor dimension heads.embedding_dim (units)",
        paper=numeric_lookup(paper_values.MOCOSE_TABLE6A_PREDICTOR_WIDTH), paper_label="paper (MoCoSE Table 6a)",
    )


@styled
def figure_batch_size(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MoCoSE Table 6b: batch size N (the paper keeps K = 512, so MTD changes with N)."""
    all_mocose = (table["method"] == MOCOSE).all()
    return _ablation_figure(
        table, "batch_size", score, by=by, size=size, x_format=format_number,
        title=FIGURE["batch_size"].title("Batch size"), xlabel="batch size N (sentences)",
        paper=numeric_lookup(paper_values.MOCOSE_TABLE6B_BATCH_SIZE) if all_mocose else None,
        paper_label="paper (MoCoSE, K=512)",
    )


@styled
def figure_fgsm_eps(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MoCoSE Table 9: FGSM epsilon on the word embeddings (0 = no FGSM)."""
    all_mocose = (table["method"] == MOCOSE).all()
    return _ablation_figure(
        table, "fgsm.eps", score, by=by, size=size, x_format=format_eps,
        title=FIGURE["fgsm_eps"].title("FGSM perturbation size"), xlabel="FGSM epsilon (0 = none)",
        paper=numeric_lookup(paper_values.MOCOSE_TABLE9_FGSM_EPS) if all_mocose else None,
        paper_label="paper (MoCoSE Table 9)",
    )


# ---- GS-InfoNCE and MixCSE -----------------------------------------------------------------------
@styled
def figure_gaussian_m(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """GS-InfoNCE Table 3: number of Gaussian negatives M as a multiple of the batch size (0 = SimCSE)."""
    trials = FIGURE["gaussian_m"].trials(table)
    return _ablation_figure(
        trials, "gaussian.m_per_batch", score, by=by, size=size, x_format=lambda v: f"{format_number(v)}x",
        exclude=("method", "gaussian.count", "gaussian.count_per_batch"),
        title=FIGURE["gaussian_m"].title("Gaussian negatives"),
        xlabel="Gaussian negatives M (multiple of batch size N)",
        paper=numeric_lookup(paper_values.GS_TABLE3_GAUSSIAN_M), paper_label="paper (N=64)",
    )


@styled
def figure_mix_lambda(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE) -> Drawn:
    """MixCSE: the mixing coefficient lambda (share of the anchor's own positive in the mixed negative)."""
    trials = FIGURE["mix_lambda"].trials(table)
    return _ablation_figure(
        trials, "mix.lam", score, by=by, size=size, x_format=format_number,
        title=FIGURE["mix_lambda"].title("Mixing coefficient", "paper default 0.2"), xlabel="mixing lambda",
    )


@styled
def figure_knob(table: pd.DataFrame, score: str = "avg", by: Keys = None, size: str = DEFAULT_SIZE,
                reference: dict[str, Any] | None = None) -> Drawn:
    """Any swept number key no paper figure is for (analysis.registry.generic_knobs), a plugin's own knob included:
    the score along its values (null: the knob's default), over the trials of the methods that read it, one series
    per combination of the other swept keys; the first such key when a study sweeps several (else the first that
    varies among the trials: a key `analysis: {knobs}` names, set through an expr).

    Where the knob's values share seeds with the study's reference (`reference`, the study's; None: the best mean),
    a second panel (beneath at the single width, beside at the double) gives each value's paired difference to
    it, with the interval and adjusted p of the study's paired table (analysis.knob_differences); elsewhere the
    figure is the one panel. The data's `panel` column says which panel a row is drawn on ("score" or "paired
    difference"), with the difference's ci_low, ci_high, interval (its procedure) and p_adjusted."""
    knobs = [key for key in generic_knobs(by or []) if key in table.columns] or varying_knobs(table)
    if not knobs:
        raise ValueError("figure_knob: no number key that no other figure is for varies among the trials")
    knob = knobs[0]
    others = [key for key in (by or []) if key != knob]  # the method too, where several read the knob
    trials = knob_trials(table, knob)
    options: dict[str, Any] = dict(by=others, x_format=format_number, title=FIGURE["knob"].title(knob), xlabel=knob)
    series = ablation_series(trials, knob, score, others)
    found = knob_differences(table, trials, knob, list(by) if by else [knob], score, reference, format_number,
                             series)
    if found is None:  # seeds do not allow it: the score alone
        fig, frame = _ablation_figure(trials, knob, score, size=size, **options)
        return fig, frame.assign(panel=SCORE_PANEL).reindex(columns=[*frame.columns, *DIFFERENCE_COLUMNS])
    fig, (above, below) = new_figure(size, panels=2)
    drawn = draw_ablation(above, trials, knob, score, **options)
    differences, handles, labels, note = draw_differences(below, found, drawn.position, drawn.offset, drawn.index,
                                                          knob, score, series,
                                                          where="lower" if size == "single" else "right")
    for ax in (above, below):  # ticks that do not hang on the panel's size: the layout's two passes agree on them
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    upper, upper_labels = above.get_legend_handles_labels()
    legend_below(above, upper + handles, upper_labels + labels, title=f"{drawn.note}\n{note}")
    frame = pd.concat([drawn.frame.assign(panel=SCORE_PANEL), differences], ignore_index=True)
    frame["n"] = frame["n"].astype("Int64")
    return finish(fig, [above, below], size), frame[[*drawn.frame.columns, *DIFFERENCE_COLUMNS]]


# ---- one parameter on a categorical axis --------------------------------------------------------
@dataclass(frozen=True)
class Ablation:
    """What `draw_ablation` drew on its panel: the data (COLUMNS and the series' keys), where each x label stands,
    each series' sideways offset and style index (by its label), and the legend's title for what the marks are."""

    frame: pd.DataFrame
    position: dict[str, int]
    offset: dict[str, float]
    index: dict[str, int]
    note: str


def _ablation_figure(table: pd.DataFrame, x: str, score: str, *, size: str = DEFAULT_SIZE, **options: Any
                     ) -> tuple[Figure, pd.DataFrame]:
    """One parameter on a categorical x axis, alone in its figure (`draw_ablation`, whose options it takes)."""
    fig, (ax,) = new_figure(size)
    drawn = draw_ablation(ax, table, x, score, **options)
    legend_below(ax, title=drawn.note)
    return finish(fig, [ax], size), drawn.frame


def draw_ablation(
    ax,
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
    ordered: bool = True,
) -> Ablation:
    """One parameter on a categorical x axis of `ax`: mean ± std over seeds per value, one series per
    combination of the other swept parameters (`ablation_series`; dodged sideways when there are several),
    paper values as diamonds at the measured x values (beside the seven-task average only). `ordered`: the values
    are a knob's numbers, and a line joins each series' points that are numbers; else a dot plot."""
    paper_note = "" if paper is None or paper_comparable(score) else f"\n{PAPER_LEFT_OUT}"
    paper = paper if paper_comparable(score) else None
    trials = table[table[score].notna()]
    others = ablation_series(table, x, score, by, exclude)
    summary = seed_summary(trials, score, [x, *others])
    summary["x_label"] = summary[x].map(x_format)
    values = summary.drop_duplicates("x_label")[[x, "x_label"]]
    values = sorted(zip(values[x], values["x_label"]), key=lambda item: _sort_value(item[0], sort_key))
    order = [label for _, label in values]
    position = {label: i for i, label in enumerate(order)}

    summary["_position"] = summary["x_label"].map(position)
    summary = summary.sort_values([*others, "_position"], kind="stable")  # rows in drawing order

    show_n = summary["n"].nunique() > 1  # n beside each point only where it differs between points
    groups = list(summary.groupby(others, sort=True, dropna=False)) if others else [((), summary)]
    step = min(0.12, 0.5 / len(groups))
    parts, offsets, indices = [], {}, {}
    for i, (key, group) in enumerate(groups):
        label = series_label(others, key) if others else "this study"
        offset = (i - (len(groups) - 1) / 2) * step
        offsets[label], indices[label] = offset, i
        xs = np.array([position[lab] for lab in group["x_label"]]) + offset
        numeric = np.array([_is_number(v) for v in group[x]]) & ordered
        draw_points(ax, xs, group["mean"], group["std"], group["n"], **series_style(i), label=label,
                    join=numeric, show_n=show_n)
        parts.append(group.rename(columns={x: "x"}).assign(series=label))

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
    ax.set_xticks(range(len(order)), order)
    ax.set_xlim(-0.5, len(order) - 0.5)
    ax.margins(y=0.1)
    ax.grid(False, axis="x")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(score_label(score))
    ax.set_title(title)
    dodged = f"\n{DODGE_NOTE}" if len(groups) > 1 else ""
    extra = [c for c in others if c in frame.columns]
    return Ablation(frame[COLUMNS + extra], position, offsets, indices,
                    spread_note(summary["n"]) + dodged + paper_note)


def ablation_series(table: pd.DataFrame, x: str, score: str, by: Sequence[str] | None = None,
                    exclude: Iterable[str] = ()) -> list[str]:
    """The keys whose combinations are `draw_ablation`'s series: the other swept parameters (`by`; inferred when
    None) that vary among the trials with a `score`."""
    return series_columns(table[table[score].notna()], [x, *exclude], by)


def slice_sort_key(label: str) -> tuple:
    """Order of MoCoSE Table 8: single ranges by start, then concatenations, then "all"."""
    if label == "all":
        return (1, 0, ())
    ranges = tuple(tuple(int(v) for v in part.split("-")) for part in label.split("+"))
    return (0, len(ranges), ranges)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and not pd.isna(value)


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
