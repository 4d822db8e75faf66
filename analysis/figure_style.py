"""How every figure looks and where its legend goes. STYLE: DejaVu Sans (shipped with matplotlib) at 7-8 pt, fonts
embedded as TrueType in PDF and PS, number axes in plain decimals. PALETTE: Okabe & Ito, each series with its own
marker too, so that a figure reads in grey; heat maps in SEQUENTIAL. The widths and panel heights are the data
step's (analysis.figure_data.SIZES, PANEL_HEIGHT).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Sequence

import matplotlib
from cycler import cycler
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

from analysis.figure_data import DEFAULT_SIZE, LEGEND_PT, PANEL_HEIGHT, SIZES, check_size, wrap_to

# Okabe & Ito: blue, vermillion, bluish green, reddish purple, orange, sky blue, black, yellow (the palest last)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
# 7 markers against 8 colours: the first 56 series all differ ("D" is the papers' values, "*" the best MTD)
MARKERS = ("o", "s", "^", "v", "P", "X", "h")
SEQUENTIAL = "cividis"
REFERENCE_GREY = "0.35"  # reference lines (the paper's best MTD)
PNG_DPI = 300
STYLE = {
    "font.family": "DejaVu Sans", "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "figure.titlesize": 8.5,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "legend.fontsize": LEGEND_PT, "legend.title_fontsize": LEGEND_PT,
    "legend.frameon": False, "legend.handlelength": 1.6, "legend.columnspacing": 1.2, "legend.borderaxespad": 0.0,
    "axes.prop_cycle": cycler(color=list(PALETTE)), "axes.linewidth": 0.6, "axes.grid": True, "grid.alpha": 0.3,
    "grid.linewidth": 0.5, "axes.spines.top": False, "axes.spines.right": False,
    "axes.formatter.useoffset": False, "axes.formatter.limits": (-1000, 1000),  # never a power of ten
    "figure.constrained_layout.w_pad": 2 / 72, "figure.constrained_layout.h_pad": 2 / 72,
    "figure.constrained_layout.wspace": 0.04, "figure.constrained_layout.hspace": 0.04,
    "lines.linewidth": 1.0, "lines.markersize": 4.5, "errorbar.capsize": 2.0,
    "xtick.major.width": 0.6, "ytick.major.width": 0.6, "image.cmap": SEQUENTIAL,
    "pdf.fonttype": 42, "ps.fonttype": 42,
    "svg.hashsalt": "contrastive-sweep",  # SVG ids from a fixed salt: the same figure gives the same file
    "savefig.dpi": PNG_DPI, "figure.dpi": 100,
}
PAD = 0.04  # in kept free at the canvas' edges
PASSES = 4  # layout passes to bring the panels to their height

# @styled: a figure function run under STYLE (rcParams are read as artists are made); a fresh context each call
styled = matplotlib.rc_context(STYLE)
_FOOTNOTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("footnote", default=None)


def new_figure(size: str = DEFAULT_SIZE, panels: int = 1) -> tuple[Figure, list]:
    """A figure of `size`'s width with `panels` axes (side by side at "double", stacked at "single"), on an
    Agg canvas, so that savefig needs no pyplot and no display."""
    rows, cols = (panels, 1) if check_size(size) == "single" else (1, panels)
    fig = Figure(figsize=(SIZES[size], PANEL_HEIGHT[size] * rows + 1.2), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(rows, cols, squeeze=False).ravel())


def series_style(i: int) -> dict[str, str]:
    """Colour and marker of the i-th series of a figure."""
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]}


def save_figure(fig: Figure, path: Any, file_format: str, dpi: float = PNG_DPI) -> None:
    """Write `fig` as PNG (at `dpi`), PDF (fonts embedded as Type 42) or SVG; PDF and SVG carry no date, so that
    the same figure gives the same bytes."""
    metadata = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(file_format)
    with matplotlib.rc_context(STYLE):  # the Type 42 fonts, and the palette behind any "C0" colour
        fig.savefig(path, format=file_format, dpi=dpi, metadata=metadata)


@contextlib.contextmanager
def footnote(text: str | None) -> Iterator[None]:
    """Every figure drawn inside the block carries `text` as the last line of its legend (None: nothing)."""
    token = _FOOTNOTE.set(text)
    try:
        yield
    finally:
        _FOOTNOTE.reset(token)


def legend_below(ax, handles: list | None = None, labels: list[str] | None = None, title: str | None = None):
    """The figure's one legend, made on `ax` and kept out of the layout (`finish` hangs it under the panels from
    the canvas' left edge): its texts wrapped to the canvas' width as measured, in as many columns (up to four) as
    fit."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if _FOOTNOTE.get():
        title = "\n".join(filter(None, [title, f"warning: {_FOOTNOTE.get()}"]))
    fig, rc = ax.get_figure(), matplotlib.rcParams
    font = FontProperties(size=LEGEND_PT)
    strip = fig.get_figwidth() - 2 * PAD  # in: the legend's box, its border pad in it
    width = strip - 2 * rc["legend.borderpad"] * LEGEND_PT / 72
    handle = (rc["legend.handlelength"] + rc["legend.handletextpad"]) * LEGEND_PT / 72
    labels = [_fit(label, width - handle, font, fig) for label in labels]
    title = _fit(title, width, font, fig) if title else None
    for columns in range(max(1, min(len(labels), 4)), 0, -1):  # the most columns that fit the canvas' width
        legend = ax.legend(handles, labels, title=title, ncols=columns, loc="upper left", alignment="left",
                           bbox_to_anchor=(0.0, 0.0), bbox_transform=fig.transFigure)
        if legend.get_window_extent(fig.canvas.get_renderer()).width <= strip * fig.dpi:
            break
    legend.set_in_layout(False)  # its room is the strip `finish` keeps free
    return legend


def _inches(line: str, font: FontProperties, fig: Figure) -> float:
    return fig.canvas.get_renderer().get_text_width_height_descent(line or " ", font, ismath=False)[0] / fig.dpi


def _fit(text: str, width: float, font: FontProperties, fig: Figure) -> str:
    """`text` wrapped (figure_data.wrap_to) at the most characters a line that leave every line within `width` in."""
    longest = max(text.split("\n"), key=lambda line: _inches(line, font, fig))
    chars = int(len(longest) * width / max(_inches(longest, font, fig), 1e-9)) + 1
    while True:
        wrapped = wrap_to(text, chars)
        if chars <= 8 or all(_inches(line, font, fig) <= width for line in wrapped.split("\n")):
            return wrapped
        chars -= 1


def _hang_legends(fig: Figure) -> None:
    """Start the constrained layout's rect above the legends' strip and hang the legends at its top; the figure
    made taller first where the strip would leave the panels no room."""
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    strip = max((legend.get_window_extent(renderer).height / fig.dpi + 2 * PAD for legend in legends), default=0.0)
    if fig.get_figheight() - strip < 1.0:
        fig.set_size_inches(fig.get_figwidth(), strip + 1.0)
    bottom = strip / fig.get_figheight()
    fig.get_layout_engine().set(rect=(0.0, bottom, 1.0, 1.0 - bottom))
    for legend in legends:
        legend.set_bbox_to_anchor((PAD / fig.get_figwidth(), bottom - PAD / fig.get_figheight()),
                                  transform=fig.transFigure)


def finish(fig: Figure, axes: Sequence, size: str, panel_height: float | None = None) -> Figure:
    """`fig` laid out for print on matplotlib's constrained layout, its legend in a strip under the panels (it
    covers no mark), and made as tall as its plotting panels `axes` (not colour bars) need to be PANEL_HEIGHT[size]
    high each, or `panel_height` inches where that is more (a panel of many labelled rows)."""
    wanted = max(PANEL_HEIGHT[size], panel_height or 0.0)
    rows = max(ax.get_subplotspec().get_gridspec().nrows for ax in axes)
    for _ in range(PASSES):
        _hang_legends(fig)
        fig.draw_without_rendering()
        missing = wanted - min(ax.bbox.height for ax in axes) / fig.dpi
        if abs(missing) <= 0.02:
            return fig
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + missing * rows)
    _hang_legends(fig)
    return fig
