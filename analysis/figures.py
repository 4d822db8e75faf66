"""The drawing step of every figure: `draw(entry, table)` (and `figure_<name>(table, ...)`, `draw` of the
analysis.registry entry of that name) runs the entry's data step and draws the Plot or Heatmap it returns, as (a
Figure on an Agg canvas, the data drawn); `figure_paired_differences` draws the paired table's Rows. How the figures
read: docs/running/analysis.md.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.path import Path
from matplotlib.ticker import FixedLocator, MaxNLocator, NullFormatter, ScalarFormatter

from analysis import paired
from analysis.figure_data import DEFAULT_SIZE, PAIRED_TITLE, Differences, Heatmap, Panel, Plot, Rows, Series
from analysis.figure_style import REFERENCE_GREY, SEQUENTIAL, finish, legend_below, new_figure, series_style, styled
from analysis.knob_differences import paired_rows
from analysis.registry import FIGURE, FigureEntry

Drawn = tuple[Figure, pd.DataFrame]
PAPER_STYLE = dict(marker="D", markersize=5, markerfacecolor="white", markeredgecolor="black",
                   markeredgewidth=1.0, linestyle="none", zorder=6)
REFERENCE_MARK = dict(marker="x", markersize=5, markeredgewidth=1.2, color="black", linestyle="none", zorder=5)
N_LABEL = "n_label"
N_OFFSETS = (  # where an n label may go, in points from its point: (dx, dy, ha, va), first choice first
    (5, 0, "left", "center"), (-5, 0, "right", "center"), (4, 4, "left", "bottom"), (4, -4, "left", "top"),
    (-4, 4, "right", "bottom"), (-4, -4, "right", "top"), (0, 6, "center", "bottom"), (0, -6, "center", "top"),
    (9, 0, "left", "center"), (-9, 0, "right", "center"), (0, 11, "center", "bottom"), (0, -11, "center", "top"),
)
LOG_LADDERS = ((1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 6, 8), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9))


@styled
def draw(entry: FigureEntry, table: pd.DataFrame, score: str = "avg", **arguments: Any) -> Drawn:
    """The entry's figure of `table`: its data step over the entry's trials, given `score` and those of the
    `arguments` (by, size, mtd_source, reference) it takes, then drawn."""
    step = entry.function()
    accepted = inspect.signature(step).parameters
    given = {name: value for name, value in {"score": score, **arguments}.items() if name in accepted}
    data = step(entry, entry.trials(table), **given)
    size = arguments.get("size", DEFAULT_SIZE)
    return draw_heatmap(data, size) if isinstance(data, Heatmap) else draw_plot(data, size)


def draw_plot(plot: Plot, size: str = DEFAULT_SIZE) -> Drawn:
    """A Plot's panels, its paired differences in the last panel where it has them, and one legend."""
    fig, axes = new_figure(size, len(plot.panels))
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes, plot.panels):
        draw_panel(ax, panel)
        handles.update({label: handle for handle, label in zip(*ax.get_legend_handles_labels())})
    if plot.differences is not None:
        handles.update(draw_differences(axes[-1], plot.differences))
        for ax in axes:  # ticks that do not hang on the panel's size: the layout's passes agree on them
            ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    legend_below(axes[-1], list(handles.values()), list(handles), title=plot.note)
    if plot.suptitle:
        fig.suptitle(plot.suptitle)
    return finished(fig, axes, size), plot.frame


def draw_heatmap(data: Heatmap, size: str = DEFAULT_SIZE) -> Drawn:
    """A Heatmap's panels on one colour scale, each cell's text in a colour that reads on it."""
    fig, axes = new_figure(size, panels=len(data.matrices))
    for ax, matrix, cells, title in zip(axes, data.matrices, data.texts, data.titles):
        image = ax.imshow(matrix, cmap=SEQUENTIAL, vmin=data.low, vmax=data.high, aspect="auto")
        for i, j, text, shade in cells:
            ax.text(j, i, text, ha="center", va="center", fontsize=data.cell_points, linespacing=1.1,
                    color="white" if shade < 0.5 else "black")
        ax.set_xticks(range(len(data.columns)), data.columns)
        ax.set_yticks(range(len(data.rows)), data.rows)
        ax.set(xlabel="queue size K (keys)", ylabel=data.ylabel, title=title)
        ax.grid(False)
    fig.colorbar(image, ax=axes, label=data.bar_label, shrink=0.9, aspect=25).outline.set_linewidth(0.5)
    legend_below(axes[-1], [], [], title=data.note)
    fig.suptitle(data.suptitle)
    return finished(fig, axes, size), data.frame


@styled
def figure_paired_differences(table: pd.DataFrame, by: Sequence[str], reference: paired.Reference, score: str = "avg",
                              size: str = DEFAULT_SIZE) -> Drawn:
    """The paired table's figure (analysis.knob_differences.paired_rows), drawn."""
    return draw_rows(paired_rows(table, by, reference, score), size)


def draw_rows(data: Rows, size: str = DEFAULT_SIZE) -> Drawn:
    """The paired figure: its differences across, a row each, labelled on the y axis; the panel as tall as its rows
    need."""
    fig, (ax,) = new_figure(size)
    legend = draw_differences(ax, data.differences, across=True)
    ax.set_yticks([mark[0] for mark in data.differences.marks], data.labels)
    ax.set_ylim(-0.5, len(data.labels) - 0.5)
    ax.set(xlabel=data.xlabel, title=PAIRED_TITLE)
    legend_below(ax, list(legend.values()), list(legend), title=data.note)
    return finish(fig, [ax], size, panel_height=0.3 + 0.2 * len(data.labels)), data.frame


def draw_panel(ax, panel: Panel) -> None:
    """A Panel on `ax`; a log x axis with round ticks from the sparsest of LOG_LADDERS that gives four or more."""
    for series in panel.series:
        draw_series(ax, series, show_n=panel.show_n)
    for x, label in panel.lines:
        ax.axvline(x, color=REFERENCE_GREY, linestyle=":", linewidth=1.0, zorder=1, label=label)
    ax.set(xlabel=panel.xlabel, ylabel=panel.ylabel, title=panel.title)
    if panel.ticks:
        at = [i for i, tick in enumerate(panel.ticks) if tick is not None]
        ax.set_xticks(at, [panel.ticks[i] for i in at])
        ax.tick_params(axis="x", labelrotation=90 if panel.rotate else 0)
        ax.set_xlim(-0.5, len(panel.ticks) - 0.5)
        ax.margins(y=0.1)
        ax.grid(False, axis="x")
    if panel.log_x:
        ax.set_xscale("log")
        low, high = ax.get_xlim()
        decades = range(math.floor(math.log10(max(low, 1e-12))) - 1, math.ceil(math.log10(high)) + 1)
        for ladder in LOG_LADDERS:
            ticks = [m * 10.0**d for d in decades for m in ladder if low <= m * 10.0**d <= high]
            if len(ticks) >= 4:
                break
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(ScalarFormatter())  # plain decimals under STYLE
        ax.xaxis.set_minor_formatter(NullFormatter())


def draw_series(ax, series: Series, show_n: bool | None = None) -> None:
    """A series: means with a ±1 std bar where n > 1, "n=k" beside each point (`show_n`; None: where n differ),
    a line through the points it `join`s (two or more, of distinct x) and its trend: the curve and the best MTD, a
    hollow star under the points. A paper series (style -1) as white diamonds."""
    if series.style < 0:
        ax.plot(series.x, series.mean, label=series.label, **PAPER_STYLE)
        return
    color, marker = series_style(series.style).values()
    xs, means = np.asarray(series.x, dtype=float), np.asarray(series.mean, dtype=float)
    stds, ns = np.asarray(series.std, dtype=float), np.asarray(series.n, dtype=float)
    joined = sorted((x, y) for x, y, j in zip(xs, means, series.join) if j and np.isfinite(x) and np.isfinite(y))
    if len({x for x, _ in joined}) == len(joined) >= 2:
        ax.plot(*zip(*joined), marker="none", zorder=3, color=color, alpha=0.7)
    ax.plot(xs, means, linestyle="none", marker=marker, color=color, label=series.label, zorder=4)
    multi = ns > 1
    if multi.any():
        ax.errorbar(xs[multi], means[multi], yerr=np.nan_to_num(stds[multi]), fmt="none", color=color, ecolor=color,
                    elinewidth=0.8, zorder=3.5)
    if show_n if show_n is not None else len(set(ns.tolist())) > 1:
        label_n(ax, xs, means, ns, color)
    if series.trend is not None:
        fit = series.trend.fit
        ax.plot(*fit.curve(), "-", color=color, alpha=0.8, zorder=2, label=series.trend.curve_label)
        low, high = fit.best_x - fit.ci_low, fit.ci_high - fit.best_x
        ax.errorbar([fit.best_x], [fit.best_y], xerr=[[max(low, 0.0)], [max(high, 0.0)]], fmt="*", color=color,
                    markersize=10, markerfacecolor="white", markeredgecolor=color, markeredgewidth=1.0, capsize=3,
                    elinewidth=1.2, zorder=3.8, label=series.trend.best_label)


def draw_differences(ax, found: Differences, across: bool = False) -> dict[str, Any]:
    """Paired differences, upright at their places or `across` (a row each): each mark with its bar, filled where it
    stands, the mean alone (hollow) where it has none; a line at 0 for the reference, a cross at its own place. Their
    legend (label: handle)."""
    for place, mean, bar, stands, style, n in found.marks:
        color, marker = series_style(style).values()
        at = ([mean], [place]) if across else ([place], [mean])
        if bar is None:  # n = 2: the mean alone
            ax.plot(*at, linestyle="none", marker=marker, color=color, markerfacecolor="white", zorder=4)
        else:
            ax.errorbar(*at, **{"xerr" if across else "yerr": [[bar[0]], [bar[1]]]}, fmt=marker, color=color,
                        elinewidth=0.8, zorder=4, markerfacecolor=color if stands else "white")
        if found.show_n:
            label_n(ax, *at, [n], color)
    zero = (ax.axvline if across else ax.axhline)(0.0, color="0.4", linewidth=0.8, linestyle=":", zorder=0)
    handles = {found.zero_label: zero} if found.zero_label else {}
    if found.reference_x is not None:
        handles["the reference itself"] = ax.plot([found.reference_x], [0.0], **REFERENCE_MARK)[0]
    for label, style, stands in found.kinds:
        color, marker = series_style(style).values() if style is not None else ("black", "o")
        handles[label] = Line2D([], [], linestyle="none", marker=marker, color=color,
                                markerfacecolor=color if stands else "white")
    return handles


def label_n(ax, xs: Sequence[float], ys: Sequence[float], ns: Sequence[float], color: str) -> None:
    """An "n=k" label at each point; `finished` moves each where it covers nothing."""
    for x, y, n in zip(xs, ys, ns):
        if np.isfinite(y):
            note = ax.annotate(f"n={int(n)}", (x, y), textcoords="offset points", xytext=N_OFFSETS[0][:2],
                               ha=N_OFFSETS[0][2], va=N_OFFSETS[0][3], fontsize=6, color=color,
                               annotation_clip=False, gid=N_LABEL)
            note.set_in_layout(False)


def finished(fig: Figure, axes: Sequence, size: str) -> Figure:
    """`fig` laid out (figure_style.finish), then each n label of `axes` at the first place of N_OFFSETS inside its
    panel that covers no mark, line or other label (the least covered, where none is free)."""
    finish(fig, axes, size)
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        notes = [t for t in ax.texts if t.get_gid() == N_LABEL]
        boxes, lines = _marks(ax) if notes else (None, [])
        inside = ax.bbox.padded(-1.0)
        for note in notes:
            costs = []
            for rank, (dx, dy, ha, va) in enumerate(N_OFFSETS):
                note.set(ha=ha, va=va, position=(dx, dy))  # (dx, dy): offset points from the point
                box = note.get_window_extent(renderer).padded(1.0)
                x0, y0, x1, y1 = box.extents
                covered = (boxes[:, 0] <= x1) & (x0 <= boxes[:, 2]) & (boxes[:, 1] <= y1) & (y0 <= boxes[:, 3])
                out = not (inside.x0 <= x0 and x1 <= inside.x1 and inside.y0 <= y0 and y1 <= inside.y1)
                crossed = sum(line.intersects_bbox(box, filled=False) for line in lines)
                costs.append(100 * covered.sum() + 100 * out + 10 * crossed + 0.1 * rank)
            dx, dy, ha, va = N_OFFSETS[int(np.argmin(costs))]
            note.set(ha=ha, va=va, position=(dx, dy))
            boxes = np.vstack([boxes, note.get_window_extent(renderer).extents])
    return fig


def _marks(ax) -> tuple[np.ndarray, list[Path]]:
    """Display extents (x0, y0, x1, y1) of the data's marks (markers, error bars), and the lines through them."""
    boxes, lines = [], []
    scale = ax.get_figure().dpi / 72
    for line in ax.get_lines():
        if not line.get_visible() or line.get_transform() != ax.transData:
            continue
        points = line.get_transform().transform(np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float))
        points = points[np.isfinite(points).all(axis=1)]
        if line.get_marker() not in (None, "", " ", "None", "none"):
            half = (line.get_markersize() / 2 + line.get_markeredgewidth()) * scale
            boxes += [(x - half, y - half, x + half, y + half) for x, y in points]
        if line.get_linestyle() not in ("None", "none", " ", "") and len(points) > 1:
            lines.append(Path(points))
    for collection in ax.collections:
        if isinstance(collection, LineCollection) and collection.get_visible():
            width = max(float(np.max(collection.get_linewidths(), initial=1.0)) * scale, 1.0)
            for segment in collection.get_segments():
                points = collection.get_transform().transform(segment)
                boxes.append((*(points.min(axis=0) - width), *(points.max(axis=0) + width)))
    return np.array(boxes, dtype=float).reshape(-1, 4), lines


def __getattr__(name: str) -> Callable[..., Drawn]:
    """figure_<name>: `draw` of the registry entry `name` (figure_ema_decay(table, score, by=..., size=...))."""
    if name.startswith("figure_") and name.removeprefix("figure_") in FIGURE:
        return functools.partial(draw, FIGURE[name.removeprefix("figure_")])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
