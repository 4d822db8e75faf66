"""Every figure of analysis.registry drawn from a loaded results table (analysis.load.load_results): `draw(entry,
table)` runs the entry's data step (analysis.figure_data, analysis.mtd_figures, analysis.knob_differences), then
draws what it returns: a Plot (panels of series) or a Heatmap. `figure_<name>(table, ...)` is `draw` of the entry
of that name.

Every figure returns `(figure, data)`: a matplotlib Figure (Agg canvas, no pyplot state) laid out for print at
`size` ("single": 3.5 in, one journal column, the default; "double": 7.2 in; analysis.figure_style), and a pandas
DataFrame holding exactly what is drawn, one row per plotted point: series (which set of marks: "this study" / a
series label, "paper", ...), x (the knob's value), x_label (the tick text), mean (the plotted y: the mean over
seeds, or the paper's number), std (sample std over seeds, ddof=1; NaN for one seed), n (trials behind the point),
plus figure-specific columns (heat-map rows; the MTD figures' group, lo, hi and steps_from_best, with their
statistics in `attrs["stats"]`; the knob figure's panel and its paired differences' ci_low/ci_high, interval and
p_adjusted).

A knob's values stand evenly spaced on a categorical x axis: one point per value and series, the series dodged
sideways (and the legend says so) when there are several, a line through a series' points where the values are
ordered numbers, and points alone (a dot plot, never bars from a non-zero base) where they are not. Paper values
(analysis.paper_values, by the registry's `Axis`) are white diamonds labelled "paper", only at the values the
study measured and only beside the score they are, the seven-task STS average; beside any other score they are
left out, and the legend says so.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.figure_data import DEFAULT_SIZE, Heatmap, Plot
from analysis.figure_marks import draw_panel, finished
from analysis.figure_style import SEQUENTIAL, legend_below, new_figure, styled
from analysis.knob_differences import draw_differences
from analysis.registry import FIGURE, FigureEntry

Drawn = tuple[Figure, pd.DataFrame]


@styled
def draw(entry: FigureEntry, table: pd.DataFrame, score: str = "avg", **arguments: Any) -> Drawn:
    """The entry's figure of `table`: its data step (`entry.function()`) over the entry's trials, given those of
    `score` and the `arguments` (by, size, log_x, mtd_source, reference) it takes, then drawn."""
    step = entry.function()
    accepted = inspect.signature(step).parameters
    given = {name: value for name, value in {"score": score, **arguments}.items() if name in accepted}
    data = step(entry, entry.trials(table), **given)
    size = arguments.get("size", DEFAULT_SIZE)
    return draw_heatmap(data, size) if isinstance(data, Heatmap) else draw_plot(data, size)


def draw_plot(plot: Plot, size: str = DEFAULT_SIZE) -> Drawn:
    """A Plot's panels (stacked at "single", side by side at "double"), its paired comparison in the last panel
    where it has one, and one legend: every label once."""
    fig, axes = new_figure(size, len(plot.panels))
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes, plot.panels):
        draw_panel(ax, panel)
        handles.update({label: handle for handle, label in zip(*ax.get_legend_handles_labels())})
    if plot.differences is not None:
        handles.update(draw_differences(axes[-1], plot))
        for ax in axes:  # ticks that do not hang on the panel's size: the layout's passes agree on them
            ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    legend_below(axes[-1], list(handles.values()), list(handles), title=plot.note)
    if plot.suptitle:
        fig.suptitle(plot.suptitle)
    return finished(fig, axes, size), plot.frame


def draw_heatmap(data: Heatmap, size: str = DEFAULT_SIZE) -> Drawn:
    """A Heatmap's panels on one colour scale (SEQUENTIAL), each cell's text in a colour that reads on it."""
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


def __getattr__(name: str) -> Callable[..., Drawn]:
    """figure_<name>: `draw` of the registry entry `name` (figure_ema_decay(table, score, by=..., size=...))."""
    if name.startswith("figure_") and name.removeprefix("figure_") in FIGURE:
        return functools.partial(draw, FIGURE[name.removeprefix("figure_")])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
