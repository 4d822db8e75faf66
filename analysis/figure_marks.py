"""The marks every figure draws from its data step (analysis.figure_data): a panel of series (`draw_panel`), a
series' points with their error bars, its line, its trend and its "n=k" labels, the paper's diamonds, and
`finished`, which lays a figure out (figure_style.finish) and then moves each n label where it covers nothing.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter
from matplotlib.transforms import Bbox

from analysis.figure_data import PAPER_LEFT_OUT as PAPER_LEFT_OUT
from analysis.figure_data import Panel, Series
from analysis.figure_style import REFERENCE_GREY, finish, series_style

PAPER_STYLE = dict(marker="D", markersize=5, markerfacecolor="white", markeredgecolor="black",
                   markeredgewidth=1.0, linestyle="none", zorder=6)
N_LABEL = "n_label"
N_OFFSETS = (  # where an n label may go, in points from its point: (dx, dy, ha, va), first choice first
    (5, 0, "left", "center"), (-5, 0, "right", "center"), (4, 4, "left", "bottom"), (4, -4, "left", "top"),
    (-4, 4, "right", "bottom"), (-4, -4, "right", "top"), (0, 6, "center", "bottom"), (0, -6, "center", "top"),
    (9, 0, "left", "center"), (-9, 0, "right", "center"), (0, 11, "center", "bottom"), (0, -11, "center", "top"),
)
LOG_LADDERS = ((1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 6, 8), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9))


def draw_panel(ax, panel: Panel) -> None:
    """A panel (analysis.figure_data.Panel) on `ax`: its series, reference lines, texts and x axis (categorical:
    a tick per labelled value and no grid across; log: round ticks from LOG_LADDERS, the sparsest giving >= 4, in
    plain decimals)."""
    for series in panel.series:
        draw_series(ax, series, show_n=panel.show_n)
    for x, label in panel.lines:
        ax.axvline(x, color=REFERENCE_GREY, linestyle=":", linewidth=1.0, zorder=1, label=label)
    ax.set(xlabel=panel.xlabel, ylabel=panel.ylabel, title=panel.title)
    if panel.ticks:
        at = [i for i, tick in enumerate(panel.ticks) if tick is not None]  # a tick only where there is a label
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
    """A measured series in its style: means as markers, a ±1 std bar only where n > 1 (one seed has no spread to
    show, and a zero-length bar would claim one), "n=k" beside each point when n differs between its points
    (`show_n` None) or the panel's; its line through the points it `join`s where they are two or more and of
    distinct x (never across configurations that share an x); its trend: the curve, and the best MTD as a hollow
    star under the points (zorder 3.8 < 4), so that a configuration at the best MTD stays visible in it. A paper
    series (style -1) as white diamonds."""
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


def label_n(ax, xs: Sequence[float], ys: Sequence[float], ns: Sequence[float], color: str) -> None:
    """An "n=k" label at each point; `finished` moves each where it covers nothing."""
    for x, y, n in zip(xs, ys, ns):
        if np.isfinite(y):
            note = ax.annotate(f"n={int(n)}", (x, y), textcoords="offset points", xytext=N_OFFSETS[0][:2],
                               ha=N_OFFSETS[0][2], va=N_OFFSETS[0][3], fontsize=6, color=color,
                               annotation_clip=False, gid=N_LABEL)
            note.set_in_layout(False)


def finished(fig: Figure, axes: Sequence, size: str, panel_height: float | None = None) -> Figure:
    """`fig` laid out (figure_style.finish), then each n label of `axes` placed beside its point: the first place
    of N_OFFSETS inside the panel that covers no mark, line or other label (the least covered, where none)."""
    finish(fig, axes, size, panel_height)
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        notes = [t for t in ax.texts if t.get_gid() == N_LABEL]
        boxes, lines = mark_boxes(ax) if notes else ([], [])
        inside = ax.bbox.padded(-1.0)
        extents = np.array([_sorted_extents(b) for b in boxes] + [(np.inf,) * 4] * len(notes)).reshape(-1, 4)
        for k, note in enumerate(notes, start=len(boxes)):
            places = []
            for dx, dy, ha, va in N_OFFSETS:
                note.set(ha=ha, va=va)
                note.xyann = (dx, dy)
                places.append(note.get_window_extent(renderer).padded(1.0))
            # what could touch a place at all: of many points, the few near this one (the same costs, found in
            # time linear, not quadratic, in the points)
            area = _sorted_extents(Bbox.union(places))
            close = [boxes[i] for i in np.flatnonzero(_overlapping(extents[:k], area))]
            paths = [path for path in (_segments_in(line, area) for line in lines) if path is not None]
            costs = [(100 * sum(box.overlaps(b) for b in close) + 100 * (not _contains(inside, box))
                      + 10 * sum(path.intersects_bbox(box, filled=False) for path in paths) + rank * 0.1, rank)
                     for rank, box in enumerate(places)]
            dx, dy, ha, va = N_OFFSETS[min(costs)[1]]
            note.set(ha=ha, va=va)
            note.xyann = (dx, dy)
            boxes.append(note.get_window_extent(renderer))
            extents[k] = _sorted_extents(boxes[-1])
    return fig


def _sorted_extents(box: Bbox) -> tuple[float, float, float, float]:
    (x0, x1), (y0, y1) = sorted(box.intervalx), sorted(box.intervaly)
    return x0, y0, x1, y1


def _overlapping(extents: np.ndarray, area: tuple[float, float, float, float]) -> np.ndarray:
    """Which boxes (rows of x0, y0, x1, y1) overlap `area`, edges touching included, as Bbox.overlaps counts."""
    x0, y0, x1, y1 = area
    return (extents[:, 0] <= x1) & (x0 <= extents[:, 2]) & (extents[:, 1] <= y1) & (y0 <= extents[:, 3])


def _segments_in(line: np.ndarray, area: tuple[float, float, float, float]) -> Path | None:
    """The segments of `line` (vertices) whose bounding boxes overlap `area`, as one path (None: no segment)."""
    ends = np.concatenate([np.minimum(line[:-1], line[1:]), np.maximum(line[:-1], line[1:])], axis=1)
    kept = np.flatnonzero(_overlapping(ends, area))
    if not len(kept):
        return None
    vertices = np.stack([line[kept], line[kept + 1]], axis=1).reshape(-1, 2)
    return Path(vertices, np.tile([Path.MOVETO, Path.LINETO], len(kept)).astype(Path.code_type))


def mark_boxes(ax) -> tuple[list[Bbox], list[np.ndarray]]:
    """Display-space boxes of the marks that stand for data (markers, error bars), and the vertices of the lines
    through them."""
    boxes, lines = [], []
    scale = ax.get_figure().dpi / 72
    for line in ax.get_lines():
        if not line.get_visible() or line.get_transform() != ax.transData:
            continue
        xy = np.column_stack([np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)])
        points = line.get_transform().transform(xy)
        points = points[np.isfinite(points).all(axis=1)]
        if line.get_marker() not in (None, "", " ", "None", "none"):
            half = (line.get_markersize() / 2 + line.get_markeredgewidth()) * scale
            boxes += [Bbox.from_extents(x - half, y - half, x + half, y + half) for x, y in points]
        if line.get_linestyle() not in ("None", "none", " ", "") and len(points) > 1:
            lines.append(points)
    for collection in ax.collections:
        if isinstance(collection, LineCollection) and collection.get_visible():
            width = max(float(np.max(collection.get_linewidths(), initial=1.0)) * scale, 1.0)
            for segment in collection.get_segments():
                points = collection.get_transform().transform(segment)
                (x0, y0), (x1, y1) = points.min(axis=0), points.max(axis=0)
                boxes.append(Bbox.from_extents(x0 - width, y0 - width, x1 + width, y1 + width))
    return boxes, lines


def _contains(outer: Bbox, inner: Bbox) -> bool:
    return outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1
