"""What the figures of analysis.figures draw and say, shared by all of them: score names, the spread note
of the error bars, points over seeds, series of configurations and how their values read.

Measured points are means over seeds with ±1 std error bars (sample std, ddof=1); a point with one seed is
drawn without a bar, every legend says which and over how many seeds (`spread_note`), and where n differs
between points each point is labelled with its n.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis import paper_values
from analysis.figure_style import N_LABEL, N_OFFSETS
from analysis.load import swept_parameters
from trainer.vocabulary import SICK_RELATEDNESS, STS_BENCHMARK, STS_TASK_LABELS


def label_n(ax, xs: Sequence[float], ys: Sequence[float], ns: Sequence[float], color: str) -> None:
    """An "n=k" label at each point; `finish` moves each where it covers nothing."""
    for x, y, n in zip(xs, ys, ns):
        if np.isfinite(y):
            note = ax.annotate(f"n={int(n)}", (x, y), textcoords="offset points", xytext=N_OFFSETS[0][:2],
                               ha=N_OFFSETS[0][2], va=N_OFFSETS[0][3], fontsize=6, color=color,
                               annotation_clip=False)
            note.set_gid(N_LABEL)
            note.set_in_layout(False)


def line_through(ax, xs: Sequence[float], ys: Sequence[float], **style: Any) -> Line2D | None:
    """One series' line along its swept knob: only through points of increasing x (None if fewer than two)."""
    points = sorted((x, y) for x, y in zip(xs, ys) if np.isfinite(x) and np.isfinite(y))
    if len({x for x, _ in points}) < 2 or len({x for x, _ in points}) != len(points):
        return None
    (line,) = ax.plot([x for x, _ in points], [y for _, y in points], marker="none", zorder=3, **style)
    return line


STD_NOTE = "mean ± 1 std over seeds"  # the plain form; legends use spread_note(n of the points)
DODGE_NOTE = "series dodged sideways at each value"
PAPER_STYLE = dict(marker="D", markersize=5, markerfacecolor="white", markeredgecolor="black",
                   markeredgewidth=1.0, linestyle="none", zorder=6)
SCORE_LABELS = {
    "avg": "STS avg Spearman x100",  # the seven-task average (a trial without all seven has no avg)
    "dev_stsb": "STS-B dev Spearman x100",
    STS_BENCHMARK: "STS-B test Spearman x100",
    SICK_RELATEDNESS: "SICK-R Spearman x100",
}
PAPER_LEFT_OUT = "paper values not drawn: they are seven-task STS averages"


def score_label(score: str) -> str:
    if score in SCORE_LABELS:
        return SCORE_LABELS[score]
    if score in STS_TASK_LABELS:
        return f"{STS_TASK_LABELS[score]} test Spearman x100"
    return f"{score} Spearman x100"


def paper_comparable(score: str) -> bool:
    """Whether the papers' values are the same quantity as `score` (all of them are seven-task averages)."""
    return score == paper_values.ABLATION_SCORE


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


def draw_points(ax, xs: Any, means: Any, stds: Any, ns: Any, *, color: str, label: str | None, marker: str = "o",
                join: Any = False, show_n: bool | None = None, markersize: float | None = None) -> None:
    """Means as markers, a ±1 std bar only where n > 1 (one seed has no spread to show, and a zero-length
    bar would claim one), and "n=k" beside each point when n differs between points.

    `join`: True (or a mask of the points) draws the series' line through those points in x order, for a
    series along its swept knob; never across configurations that share an x.
    """
    xs, means = np.asarray(xs, dtype=float), np.asarray(means, dtype=float)
    stds, ns = np.asarray(stds, dtype=float), np.asarray(ns, dtype=float)
    mask = np.broadcast_to(np.asarray(join, dtype=bool), xs.shape)
    if mask.any():
        line_through(ax, xs[mask], means[mask], color=color, alpha=0.7)
    ax.plot(xs, means, linestyle="none", marker=marker, color=color, label=label, zorder=4,
            **({} if markersize is None else {"markersize": markersize}))
    multi = ns > 1
    if multi.any():
        ax.errorbar(xs[multi], means[multi], yerr=np.nan_to_num(stds[multi]), fmt="none", color=color, ecolor=color,
                    elinewidth=0.8, zorder=3.5)
    if show_n if show_n is not None else len(set(ns.tolist())) > 1:
        label_n(ax, xs, means, ns, color)


def series_columns(table: pd.DataFrame, x_columns: Sequence[str], by: Sequence[str] | None) -> list[str]:
    """The other swept parameters that vary in `table`: each combination becomes its own series."""
    candidates = swept_parameters(table) if by is None else list(by)
    return [c for c in candidates if c not in x_columns and c in table.columns and table[c].nunique(dropna=False) > 1]


def series_label(columns: Sequence[str], key: Any) -> str:
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{column}={format_value(value)}" for column, value in zip(columns, key))


def numeric_lookup(table: dict[float, float]) -> Any:
    def lookup(value: Any) -> float | None:
        if value is None or pd.isna(value):
            return None
        for key, paper_value in table.items():
            if math.isclose(float(key), float(value), rel_tol=1e-9, abs_tol=1e-15):
                return paper_value
        return None

    return lookup


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


def format_value(value: Any) -> str:
    if isinstance(value, (int, float, np.number)) or value is None:
        return format_number(value)
    return str(value)


def column_or(table: pd.DataFrame, name: str, default: Any) -> pd.Series:
    return table[name] if name in table.columns else pd.Series(default, index=table.index)


def single_value(table: pd.DataFrame, name: str) -> str | None:
    if name not in table.columns:
        return None
    values = table[name].dropna().unique()
    return str(values[0]) if len(values) == 1 else None
