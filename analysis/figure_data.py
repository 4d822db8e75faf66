"""What each figure shows, as data, before anything is drawn (no matplotlib here): its series, the order of a
categorical axis, the paper's points, the legend's notes, and every text wrapped to a character budget for its
room: at `points` pt a line of n characters of DejaVu Sans is at most n * points * EM_WIDTH pt wide.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from analysis import paper_values
from analysis.load import swept_parameters
from analysis.stats import PeakFit, seed_summary
from trainer.vocabulary import SICK_RELATEDNESS, STS_BENCHMARK, STS_TASK_LABELS

SIZES = {"single": 3.5, "double": 7.2}  # figure width in inches: one journal column, the full page width
DEFAULT_SIZE = "single"
PANEL_HEIGHT = {"single": 1.9, "double": 2.5}  # the height (in) every panel keeps
EM_WIDTH = 0.6  # ems: DejaVu Sans' widest average advance over a line of text (digits, capitals)
AXIS_ROOM = 0.6  # in: what a panel's y label and y tick labels take of the figure's width
TITLE_PT, LABEL_PT, TICK_PT, LEGEND_PT = 8.0, 8.0, 7.0, 7.0  # as figure_style.STYLE sets them
MAX_TICKS = 12  # labels a categorical axis carries at most: more overlap (and each costs the layout a measure)
NBSP = "\u00a0"  # a space inside brackets while wrapping: "(MoCoSE Fig. 2)" stays on one line
PAIRED_TITLE = "Paired difference to the reference"  # the panel of paired differences, in either figure
PAPER_LEFT_OUT = "paper values not drawn: they are seven-task STS averages"
SCORE_LABELS = {
    "avg": "STS avg Spearman x100",  # the seven-task average (a trial without all seven has no avg)
    "dev_stsb": "STS-B dev Spearman x100",
    STS_BENCHMARK: "STS-B test Spearman x100",
    SICK_RELATEDNESS: "SICK-R Spearman x100",
}


# ---- room and wrapping ----------------------------------------------------------------------------
def check_size(size: str) -> str:
    if size not in SIZES:
        raise ValueError(f"figure size must be one of {sorted(SIZES)}, got {size!r}")
    return size


def panel_width(size: str, panels: int = 1, room: float = AXIS_ROOM) -> float:
    """Inches of width each of `panels` panels has (side by side at "double"), less `room` for its y axis."""
    return SIZES[size] / (panels if check_size(size) == "double" else 1) - room


def budget(width: float, points: float) -> int:
    """Characters a line `width` inches wide holds at `points` pt."""
    return max(8, int(width * 72 / (points * EM_WIDTH)))


def ylabel(text: str, size: str) -> str:
    return wrap(text, PANEL_HEIGHT[size], LABEL_PT)  # along its panel's height


def wrap(text: str, width: float, points: float) -> str:
    return wrap_to(text, budget(width, points))


def wrap_to(text: str, chars: int) -> str:
    """`text` with every line longer than `chars` characters broken at spaces, outside brackets where that is
    enough, and never between a number and "seeds"."""
    lines = []
    for line in text.split("\n"):
        kept = re.sub(r"\([^()]*\)", lambda m: m.group(0).replace(" ", NBSP), line.replace(" seeds", NBSP + "seeds"))
        pieces = textwrap.wrap(kept, chars, break_long_words=False, break_on_hyphens=False)
        if any(len(piece) > chars for piece in pieces):
            pieces = textwrap.wrap(line, chars, break_long_words=False, break_on_hyphens=False)
        lines += [piece.replace(NBSP, " ") for piece in pieces] or [""]
    return "\n".join(lines)


def fit_ticks(labels: Sequence[str], width: float) -> tuple[list[str | None], bool]:
    """Categorical tick labels fitted to their panel (`width` in): at most MAX_TICKS (`labelled`; None where a
    value is left unlabelled), broken at "+" and spaces where they crowd, else (True) to be turned upright."""
    shown = labelled(len(labels))
    gap = min((b - a for a, b in zip(shown, shown[1:])), default=1)  # values from one label to the next
    room = width * 72 * gap / max(len(labels), 1) / (TICK_PT * EM_WIDTH) - 0.5  # a gap kept between neighbours
    kept = {i: labels[i] for i in shown}
    broken = {i: re.sub(r"\+(?!\n)", "+\n", label).replace(" ", "\n") for i, label in kept.items()}
    for ticks in (kept, broken):
        if max((len(line) for label in ticks.values() for line in label.split("\n")), default=0) <= room:
            return [ticks.get(i) for i in range(len(labels))], False
    return [kept.get(i) for i in range(len(labels))], True


def labelled(count: int, most: int = MAX_TICKS) -> list[int]:
    """Which of `count` values on a categorical axis carry a label: all up to `most`, else `most` spread evenly.

    >>> labelled(100, most=5)
    [0, 24, 49, 74, 99]
    """
    if count <= most:
        return list(range(count))
    return [i * (count - 1) // (most - 1) for i in range(most)]


# ---- what the marks are and how values read -------------------------------------------------------
def score_label(score: str) -> str:
    if score in SCORE_LABELS:
        return SCORE_LABELS[score]
    return f"{STS_TASK_LABELS[score]} test Spearman x100" if score in STS_TASK_LABELS else f"{score} Spearman x100"


def paper_comparable(score: str) -> bool:
    """Whether the papers' values (all seven-task averages) are the same quantity as `score`."""
    return score == paper_values.ABLATION_SCORE


def spread_note(n: Iterable[int]) -> str:
    """What the marks show (means over seeds, ±1 sample std), from the number of seeds behind each point.

    >>> spread_note([3, 1])
    'mean ± 1 std over seeds (n at each point); no bar: a single run'
    """
    counts = sorted({int(v) for v in n if not pd.isna(v)})
    if counts == [1]:
        return "single runs (one seed each, no error bars)"
    if len(counts) == 1:
        return f"mean ± 1 std over {counts[0]} seeds"
    return "mean ± 1 std over seeds (n at each point)" + ("; no bar: a single run" if 1 in counts else "")


def series_columns(table: pd.DataFrame, x_columns: Sequence[str], by: Sequence[str] | None) -> list[str]:
    """The other swept parameters that vary in `table`: each combination is its own series, never pooled."""
    candidates = swept_parameters(table) if by is None else list(by)
    return [c for c in candidates if c not in x_columns and c in table.columns and table[c].nunique(dropna=False) > 1]


def series_label(columns: Sequence[str], key: Any) -> str:
    values = [format_number(v) if isinstance(v, (int, float, np.number)) or v is None else str(v)
              for v in (key if isinstance(key, tuple) else (key,))]
    return ", ".join(f"{column}={value}" for column, value in zip(columns, values))


def paper_at(table: dict[Any, float], value: Any) -> float | None:
    """The paper's value at a knob's `value`: numbers matched as numbers, anything else by equality."""
    for key, paper in table.items():
        if _is_number(key) and _is_number(value):
            if math.isclose(float(key), float(value), rel_tol=1e-9, abs_tol=1e-15):
                return paper
        elif key == value and value is not None:
            return paper
    return None


def format_number(value: Any) -> str:
    if value is None or pd.isna(value):
        return "default"
    value = float(value)
    return str(int(value)) if value.is_integer() else f"{value:g}"


def format_eps(value: Any) -> str:
    if float(value) == 0.0:
        return "none"
    mantissa, exponent = f"{float(value):.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def slice_sort_key(label: str) -> tuple:
    """Order of MoCoSE Table 8: single ranges by start, then concatenations, then "all"."""
    if label == "all":
        return (1, 0, ())
    ranges = tuple(tuple(int(v) for v in part.split("-")) for part in label.split("+"))
    return (0, len(ranges), ranges)


# How a knob's value reads on its axis, and in what order (registry.Axis' `ticks` and `order`)
TICKS: dict[str, Callable[[Any], str]] = {
    "number": format_number, "eps": format_eps, "text": str, "multiple": lambda v: f"{format_number(v)}x",
    "width": lambda v: "hidden size" if pd.isna(v) else format_number(v),  # null: the encoder's hidden size
}
ORDERS: dict[str, Callable[[Any], Any]] = {
    "slices": slice_sort_key, "depth": lambda label: tuple(int(v) for v in label.split("/")),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and not pd.isna(value)


# ---- figures of series ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Trend:
    """A quadratic fit over MTD and the legend labels of its curve (None: not in the legend) and best MTD."""

    fit: PeakFit
    curve_label: str | None
    best_label: str


@dataclass(frozen=True)
class Series:
    """One set of marks: its legend label, style index (figure_style.series_style; -1: the paper's diamonds), and
    per point its x, mean, std (NaN: no bar), n and whether the series' line runs through it; its trend, if any."""

    label: str
    style: int
    x: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...] = ()
    n: tuple[int, ...] = ()
    join: tuple[bool, ...] = ()
    trend: Trend | None = None


@dataclass(frozen=True)
class Panel:
    """One panel: its series (the paper's too), vertical reference lines (x, legend label), its texts, and its x
    axis: categorical (`ticks`: one per value, None where unlabelled; `rotate`: upright) or numbers (`log_x`).
    `show_n`: whether every series labels its points' n (None: each series whose n differ)."""

    series: tuple[Series, ...]
    title: str
    xlabel: str
    ylabel: str
    ticks: tuple[str | None, ...] = ()
    rotate: bool = False
    log_x: bool = False
    lines: tuple[tuple[float, str], ...] = ()
    show_n: bool | None = None


@dataclass(frozen=True)
class Differences:
    """Paired differences to a reference, a mark each at its place on a categorical axis (the knob figure's lower
    panel; the paired figure's rows): per mark its place, mean, bar (its extent below and above the mean; None: no
    interval, the mean alone, hollow), whether it stands at 0.05 (filled), style (its series') and n; the legend's
    entry for each kind of interval drawn (label, style or None for black circles, filled), the zero line's legend
    label, the reference's own place (None: not one of the places) and whether each mark labels its n."""

    marks: tuple[tuple[float, float, tuple[float, float] | None, bool, int, int], ...]
    kinds: tuple[tuple[str, int | None, bool], ...]
    zero_label: str | None = None
    reference_x: float | None = None
    show_n: bool = False


@dataclass(frozen=True)
class Plot:
    """A figure of series panels: the data drawn (one row per point), the legend's title (`note`) and the
    figure's; on a categorical axis each value's position and each series' sideways offset (by label); paired
    differences drawn in its last panel."""

    panels: tuple[Panel, ...]
    frame: pd.DataFrame
    note: str | None = None
    suptitle: str | None = None
    position: dict[str, int] = field(default_factory=dict)
    offset: dict[str, float] = field(default_factory=dict)
    differences: Differences | None = None


# ---- one parameter on a categorical axis ----------------------------------------------------------
def axis_data(entry: Any, trials: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
              size: str = DEFAULT_SIZE) -> Plot:
    """A registry entry's knob (`entry.axis`, analysis.registry.Axis) on a categorical x axis."""
    axis = entry.axis
    if axis.parts:
        joined = zip(*(trials[key] if key in trials.columns else [value] * len(trials) for key, value in axis.parts))
        trials = trials.assign(**{axis.column: ["/".join(map(format_number, values)) for values in joined]})
    where = axis.paper_where
    drawn = where is None or where[0] not in trials.columns or bool((trials[where[0]] == where[1]).all())
    return ablation_data(trials, axis.column, score, title=entry.title(axis.what, axis.note),
                         xlabel=axis.label if drawn or not axis.other_label else axis.other_label,
                         x_format=TICKS[axis.ticks], size=size, by=by, exclude=axis.exclude,
                         sort_key=ORDERS.get(axis.order or ""), paper=axis.paper if drawn else None,
                         paper_label=axis.paper_label, ordered=axis.ordered)


def ablation_data(table: pd.DataFrame, x: str, score: str, *, title: str, xlabel: str,
                  x_format: Callable[[Any], str], size: str = DEFAULT_SIZE, panels: int = 1,
                  by: Sequence[str] | None = None, exclude: Iterable[str] = (),
                  sort_key: Callable[[Any], Any] | None = None, paper: dict[Any, float] | None = None,
                  paper_label: str = "paper", ordered: bool = True) -> Plot:
    """Mean ± std over seeds per value of `x`, one series per combination of the other swept parameters (dodged
    sideways when there are several), the paper's values (`paper`, by value) at the measured values beside the
    seven-task average only. `ordered`: a line joins a series' points that are numbers (else a dot plot). Texts
    are wrapped for one of `panels` panels at `size`."""
    paper_note = "" if paper is None or paper_comparable(score) else f"\n{PAPER_LEFT_OUT}"
    others = series_columns(table[table[score].notna()], [x, *exclude], by)
    summary = seed_summary(table[table[score].notna()], score, [x, *others])
    summary["x_label"] = summary[x].map(x_format)
    values = summary.drop_duplicates("x_label")[[x, "x_label"]]
    values = sorted(zip(values[x], values["x_label"]), key=lambda item: _sort_value(item[0], sort_key))
    position = {label: i for i, (_, label) in enumerate(values)}
    summary["_position"] = summary["x_label"].map(position)
    summary = summary.sort_values([*others, "_position"], kind="stable")  # rows in drawing order

    groups = list(summary.groupby(others, sort=True, dropna=False)) if others else [((), summary)]
    step = min(0.12, 0.5 / len(groups))
    series, parts, offset = [], [], {}
    for i, (key, group) in enumerate(groups):
        label = series_label(others, key) if others else "this study"
        offset[label] = (i - (len(groups) - 1) / 2) * step
        xs = tuple(position[lab] + offset[label] for lab in group["x_label"])
        join = tuple(bool(ordered and _is_number(v)) for v in group[x])
        series.append(Series(label, i, xs, tuple(group["mean"]), tuple(group["std"]), tuple(group["n"]), join))
        parts.append(group.rename(columns={x: "x"}).assign(series=label))

    rows = [(value, label, y) for value, label in (values if paper and not paper_note else [])
            if (y := paper_at(paper, value)) is not None]
    if rows:
        xs, labels, ys = map(list, zip(*rows))
        series.append(Series(paper_label, -1, tuple(position[label] for label in labels), tuple(ys)))
        parts.append(pd.DataFrame({"series": "paper", "x": xs, "x_label": labels, "mean": ys}))

    frame = pd.concat(parts, ignore_index=True)
    frame["n"] = frame["n"].astype("Int64")  # paper rows have no n
    width = panel_width(size, panels)
    ticks, rotate = fit_ticks([label for _, label in values], width)
    note = spread_note(summary["n"]) + ("\nseries dodged sideways at each value" if len(groups) > 1 else "")
    columns = ["series", "x", "x_label", "mean", "std", "n"] + [c for c in others if c in frame.columns]
    panel = Panel(tuple(series), wrap(title, width, TITLE_PT), wrap(xlabel, width, LABEL_PT),
                  ylabel(score_label(score), size), tuple(ticks), rotate, show_n=summary["n"].nunique() > 1)
    return Plot((panel,), frame[columns], note + paper_note, position=position, offset=offset)


def _sort_value(value: Any, sort_key: Callable[[Any], Any] | None) -> tuple:
    if sort_key is not None:
        return (0, sort_key(value))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (1, 0)  # missing (the config default) last
    return (0, float(value)) if isinstance(value, (int, float, np.number)) else (0, str(value))


# ---- one mark per row ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rows:
    """The paired figure: its differences a row each, the first at the top (places counting down to 0), with the
    rows' labels, the x label, the legend's title (`note`) and the data drawn."""

    differences: Differences
    labels: tuple[str, ...]
    xlabel: str
    note: str
    frame: pd.DataFrame


# ---- the queue heat map -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Heatmap:
    """Cells of queue size K (columns) x initial queue size K0 (rows), one matrix per panel (`titles`), every
    cell's text (mean, ± std, [paper]) at `cell_points` pt so that it fits its cell; the data drawn, the colour
    scale's ends and label, the tick labels, the legend's note and the figure's title."""

    frame: pd.DataFrame
    matrices: tuple[np.ndarray, ...]
    texts: tuple[tuple[tuple[int, int, str, float], ...], ...]  # per panel: (row, column, text, shade 0-1)
    titles: tuple[str, ...]
    columns: tuple[str, ...]
    rows: tuple[str, ...]
    low: float
    high: float
    cell_points: float
    ylabel: str
    bar_label: str
    note: str
    suptitle: str


def heatmap_data(entry: Any, trials: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
                 size: str = DEFAULT_SIZE) -> Heatmap:
    """MoCoSE Table 7's cells: rows are K0 as a fraction of K (w.o. / K/4 / K/2 / all) when that gives fewer rows
    than the absolute K0 values, else the absolute K0; the paper's value in brackets where Table 7 has the cell;
    one panel per combination of the other swept parameters, all on one colour scale."""
    trials = trials.copy()
    fractions = (trials["queue.initial_size"] / trials["queue.size"]).round(6)
    by_fraction = fractions.nunique() <= trials["queue.initial_size"].nunique()
    trials["_row"] = fractions if by_fraction else trials["queue.initial_size"]
    other = series_columns(trials, ["queue.size", "queue.initial_size"], by)
    panels = list(trials.groupby(other, sort=True, dropna=False)) if other else [((), trials)]
    comparable = paper_comparable(score)
    parts = []
    for key, panel in panels:
        summary = seed_summary(panel, score, ["queue.size", "_row"])
        summary["series"] = series_label(other, key) if other else "measured"
        summary["paper"] = [paper_values.MOCOSE_TABLE7_QUEUE_INIT.get((float(r), int(k)))
                            if by_fraction and comparable else None
                            for r, k in zip(summary["_row"], summary["queue.size"])]
        parts.append(summary)
    frame = pd.concat(parts, ignore_index=True)
    frame["paper"] = pd.to_numeric(frame["paper"], errors="coerce")
    low, high = float(np.nanmin(frame["mean"])), float(np.nanmax(frame["mean"]))
    columns, rows = sorted(frame["queue.size"].unique()), sorted(frame["_row"].unique())
    names = {0.0: "w.o. init (0)", 0.25: "K/4", 0.5: "K/2", 1.0: "all (K)"}
    row_labels = {r: names.get(float(r), f"{float(r):g} K") if by_fraction else str(int(r)) for r in rows}
    matrices, texts = [], []
    for part in parts:
        matrix, cells = np.full((len(rows), len(columns)), np.nan), []
        for k, r, mean, std, paper in zip(*(part[c] for c in ("queue.size", "_row", "mean", "std", "paper"))):
            i, j = rows.index(r), columns.index(k)
            matrix[i, j] = mean
            text = f"{mean:.2f}" + (f"\n±{std:.2f}" if not math.isnan(std) else "")
            text += f"\n[{paper:.2f}]" if paper is not None and not pd.isna(paper) else ""
            cells.append((i, j, text, (mean - low) / (high - low) if high > low else 1.0))
        matrices.append(matrix)
        texts.append(tuple(cells))
    width = panel_width(size, len(parts), room=1.3 + (0.6 / len(parts) if size == "double" else 0.6))
    lines = max(t.count("\n") + 1 for panel in texts for _, _, t, _ in panel)
    chars = max(len(line) for panel in texts for _, _, t, _ in panel for line in t.split("\n"))
    fitting = min(width / len(columns) * 72 / (chars * EM_WIDTH), PANEL_HEIGHT[size] / len(rows) * 72 / (lines * 1.4))
    spread = spread_note(frame["n"]).replace("error bars", "± std")  # a cell has a ± line, not a bar
    note = "cells: " + spread + ("; [paper, Table 7]" if frame["paper"].notna().any() else "")
    frame = frame.rename(columns={"queue.size": "x", "_row": "y"})
    frame["x_label"] = frame["x"].map(lambda k: str(int(k)))
    frame["y_label"] = frame["y"].map(row_labels)
    rows_label = "initial queue size K0" + (" (fraction of K)" if by_fraction else " (keys)")
    return Heatmap(frame[["series", "x", "x_label", "y", "y_label", "mean", "std", "n", "paper"]], tuple(matrices),
                   tuple(texts), tuple(wrap(p["series"].iloc[0], width, TITLE_PT) if other else "" for p in parts),
                   tuple(str(int(k)) for k in columns), tuple(row_labels.values()), low, high,
                   max(4.5, min(6.5, math.floor(fitting * 2) / 2)), ylabel(rows_label, size), score_label(score),
                   note + ("" if comparable else f"\n{PAPER_LEFT_OUT}"),
                   wrap(entry.title("Queue size x initial queue size"), SIZES[size], 8.5))
