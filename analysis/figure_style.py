"""How every figure of analysis.figures looks and is laid out: one style, two widths, one palette.

Style (STYLE, rcParams): DejaVu Sans (shipped with matplotlib) at 7-8 pt; fonts embedded as TrueType in PDF and
PS; number axes in plain decimals (no offset, no power of ten). Widths (SIZES): one journal column (3.5 in) or the
page (7.2 in); several panels stand side by side at the double width and one above the other at the single
width, and the height follows from the panels (PANEL_HEIGHT each). Colours: PALETTE (Okabe & Ito), each series
with its own marker too so the figure reads in grey; heat maps in SEQUENTIAL (cividis).

`finish(fig, axes, size)` lays a drawn figure out on matplotlib's constrained layout, after which every text lies
on the canvas (titles and labels wrapped to their panel, crowded categorical ticks broken into lines or turned
upright); the one legend sits in a strip under the panels (the layout's rect starts above it), so it covers no
mark; each "n=k" label (gid N_LABEL) sits beside its point where it covers nothing; each heat-map cell text
(gid CELL_TEXT) fits its cell.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import textwrap
from typing import Any, Callable, Iterator, Sequence

import matplotlib
import numpy as np
from cycler import cycler
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.transforms import Bbox

# Okabe & Ito: blue, vermillion, bluish green, reddish purple, orange, sky blue, black, yellow (the palest last)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
# 7 markers against 8 colours: the first 56 series all differ in colour or marker ("D" is the papers' values,
# "*" the best MTD)
MARKERS = ("o", "s", "^", "v", "P", "X", "h")
SEQUENTIAL = "cividis"
REFERENCE_GREY = "0.35"  # reference lines (the paper's best MTD)
SIZES = {"single": 3.5, "double": 7.2}  # figure width in inches: one journal column, the full page width
DEFAULT_SIZE = "single"
PANEL_HEIGHT = {"single": 1.9, "double": 2.5}  # the height (in) every panel keeps
PNG_DPI = 300
N_LABEL = "n_label"
CELL_TEXT = "cell_text"
STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "figure.titlesize": 8.5,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "legend.frameon": False,
    "legend.handlelength": 1.6,
    "legend.columnspacing": 1.2,
    "legend.borderaxespad": 0.0,
    "axes.prop_cycle": cycler(color=list(PALETTE)),
    "axes.linewidth": 0.6,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.formatter.useoffset": False,
    "axes.formatter.limits": (-1000, 1000),  # never a power of ten
    "figure.constrained_layout.w_pad": 2 / 72,
    "figure.constrained_layout.h_pad": 2 / 72,
    "figure.constrained_layout.wspace": 0.04,
    "figure.constrained_layout.hspace": 0.04,
    "lines.linewidth": 1.0,
    "lines.markersize": 4.5,
    "errorbar.capsize": 2.0,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "image.cmap": SEQUENTIAL,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.hashsalt": "contrastive-sweep",  # SVG ids from a fixed salt: the same figure gives the same file
    "savefig.dpi": PNG_DPI,
    "figure.dpi": 100,
}
MAX_PASSES = 10  # layout passes before the figure is drawn as it stands
_PAD = 4.0  # px kept free at the canvas' edges and between a label and a mark (at 100 dpi)
N_OFFSETS = (  # where an n label may go, in points from its point: (dx, dy, ha, va), first choice first
    (5, 0, "left", "center"), (-5, 0, "right", "center"), (4, 4, "left", "bottom"), (4, -4, "left", "top"),
    (-4, 4, "right", "bottom"), (-4, -4, "right", "top"), (0, 6, "center", "bottom"), (0, -6, "center", "top"),
    (9, 0, "left", "center"), (-9, 0, "right", "center"), (0, 11, "center", "bottom"), (0, -11, "center", "top"),
)


def styled(function: Callable) -> Callable:
    """Run a figure function under STYLE (rcParams are read as artists are made)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context(STYLE):
            return function(*args, **kwargs)

    return wrapper


def check_size(size: str) -> str:
    if size not in SIZES:
        raise ValueError(f"figure size must be one of {sorted(SIZES)}, got {size!r}")
    return size


def new_figure(size: str = DEFAULT_SIZE, panels: int = 1) -> tuple[Figure, list]:
    """A figure of `size`'s width with `panels` axes (side by side at "double", stacked at "single"), on an
    Agg canvas so savefig works with no pyplot and no display."""
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
    with matplotlib.rc_context(STYLE):  # the Type 42 fonts, and the palette behind any "C0" colour
        if file_format == "pdf":
            fig.savefig(path, format="pdf", metadata={"CreationDate": None})
        elif file_format == "svg":
            fig.savefig(path, format="svg", metadata={"Date": None})
        else:
            fig.savefig(path, format=file_format, dpi=dpi)


# ---- the legend ---------------------------------------------------------------------------------
_FOOTNOTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("footnote", default=None)


@contextlib.contextmanager
def footnote(text: str | None) -> Iterator[None]:
    """Every figure drawn inside the block carries `text` as the last line of its legend (None: nothing)."""
    token = _FOOTNOTE.set(text)
    try:
        yield
    finally:
        _FOOTNOTE.reset(token)


def legend_below(ax, handles: list | None = None, labels: list[str] | None = None, title: str | None = None):
    """The figure's legend (one per figure), made on `ax` and kept out of the layout: `finish` hangs it in a
    strip under the panels from the canvas' left edge. Its texts are wrapped to the canvas' width and set in
    as many columns (up to four) as fit."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if _FOOTNOTE.get():
        title = f"{title}\nwarning: {_FOOTNOTE.get()}" if title else f"warning: {_FOOTNOTE.get()}"
    fig = ax.get_figure()
    rc = matplotlib.rcParams
    font, title_font = FontProperties(size=rc["legend.fontsize"]), FontProperties(size=rc["legend.title_fontsize"])
    unit = font.get_size_in_points() * fig.dpi / 72  # one em in px ("small" and the like read as points)
    available = _strip_width(fig) - 2 * rc["legend.borderpad"] * unit  # inside the frame
    handle = (rc["legend.handlelength"] + rc["legend.handletextpad"]) * unit
    labels = [_wrap(label, available - handle, font, fig) for label in labels]
    title = _wrap(title, available, title_font, fig) if title else None
    for columns in range(max(1, min(len(labels), 4)), 0, -1):  # the most columns that fit the strip's width
        legend = ax.legend(handles, labels, title=title, ncols=columns, loc="upper left", alignment="left",
                           bbox_to_anchor=(0.0, 0.0), bbox_transform=fig.transFigure)
        if legend.get_window_extent(fig.canvas.get_renderer()).width <= _strip_width(fig):
            break
    legend.set_in_layout(False)  # its room is the strip `finish` keeps free
    return legend


def _strip_width(fig: Figure) -> float:
    return fig.bbox.width - 2 * _PAD * fig.dpi / 100


def _keep_legend_strip(fig: Figure, renderer) -> bool:
    """Start the constrained layout's rect above the legends' strip and hang the legends at its top; True when the
    strip changed."""
    pad = _PAD * fig.dpi / 100
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    strip = max((legend.get_window_extent(renderer).height + 2 * pad for legend in legends), default=0.0)
    bottom = strip / fig.bbox.height
    changed = abs(fig.get_layout_engine().get()["rect"][1] - bottom) > 0.5 / fig.bbox.height
    fig.get_layout_engine().set(rect=(0.0, bottom, 1.0, 1.0 - bottom))
    for legend in legends:
        legend.set_bbox_to_anchor((pad / fig.bbox.width, (strip - pad) / fig.bbox.height), transform=fig.transFigure)
    return changed


# ---- text fitting -------------------------------------------------------------------------------
def _text_width(text: str, font: FontProperties, fig: Figure) -> float:
    renderer = fig.canvas.get_renderer()
    return max((renderer.get_text_width_height_descent(line or " ", font, ismath=False)[0]
                for line in text.split("\n")), default=0.0)


def _wrap(text: str, width_px: float, font: FontProperties, fig: Figure) -> str:
    """`text` with every line longer than `width_px` broken at spaces to fit it, outside brackets where
    that is enough ("(MoCoSE Fig. 2)" stays on one line)."""
    lines = []
    for line in text.split("\n"):
        if _text_width(line, font, fig) <= width_px:
            lines.append(line)
            continue
        for candidate in (_protect_brackets(line), line):
            pieces = _wrap_line(candidate, width_px, font, fig)
            if all(_text_width(piece, font, fig) <= width_px for piece in pieces):
                break
        lines += [piece.replace(_KEEP, " ") for piece in pieces]
    return "\n".join(lines)


_KEEP = "\u00a0"  # a space inside brackets while wrapping: textwrap does not break there


def _protect_brackets(line: str) -> str:
    out, depth = [], 0
    for char in line:
        depth += (char == "(") - (char == ")")
        out.append(_KEEP if char == " " and depth > 0 else char)
    return "".join(out)


def _wrap_line(line: str, width_px: float, font: FontProperties, fig: Figure) -> list[str]:
    chars = max(8, int(len(line) * width_px / _text_width(line.replace(_KEEP, " "), font, fig)))
    while True:
        pieces = textwrap.wrap(line, chars, break_long_words=False, break_on_hyphens=False)
        if chars <= 8 or all(_text_width(p.replace(_KEEP, " "), font, fig) <= width_px for p in pieces):
            return pieces
        chars -= 1


def _fit_labels(fig: Figure, axes: Sequence, unwrapped: dict[Text, str]) -> bool:
    """Wrap the suptitle, the panels' titles and the axis labels to their room, each from its text as first set
    (`unwrapped`), so that a panel that grows back unwraps it; True when a text changed."""
    room = [(text, fig.bbox.width - 2 * _PAD * fig.dpi / 100) for text in fig.texts]
    for ax in fig.axes:
        room += [(ax.title, max(ax.bbox.width, 40.0))] if ax in axes else []
        room += [(ax.xaxis.label, max(ax.bbox.width, 40.0)), (ax.yaxis.label, max(ax.bbox.height, 40.0))]
    changed = False
    for text, width in room:
        original = unwrapped.setdefault(text, text.get_text())
        wrapped = _wrap(original, width, text.get_fontproperties(), fig) if original else original
        if wrapped != text.get_text():
            text.set_text(wrapped)
            changed = True
    return changed


def _fit_ticks(axes: Sequence, renderer) -> bool:
    """Categorical x tick labels that crowd each other: broken into lines where they have a natural break
    ("0-256+" / "768-1024", "hidden" / "size"), then, if they still crowd, turned upright."""
    changed = False
    for ax in axes:
        labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        if not labels or not _crowded(labels, renderer):
            continue
        texts = [t.get_text() for t in ax.get_xticklabels()]
        if all("\n" not in t for t in texts) and any(re.search(r"[+ ]", t) for t in texts):
            broken = [re.sub(r"(\+)|( )", lambda m: "+\n" if m.group(1) else "\n", t) for t in texts]
            ax.set_xticks(ax.get_xticks(), broken)
            changed = True
        elif labels[0].get_rotation() == 0:
            ax.tick_params(axis="x", labelrotation=90)
            changed = True
    return changed


def _crowded(labels: Sequence, renderer) -> bool:
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    return any(a.x1 + 2 > b.x0 for a, b in zip(boxes, boxes[1:]))


def _keep_panel_height(fig: Figure, axes: Sequence, wanted: float, rows: int) -> bool:
    """Make the figure as tall as it takes for its shortest panel (of `rows` stacked) to be `wanted` inches high."""
    missing = wanted - min(ax.bbox.height for ax in axes) / fig.dpi
    if abs(missing) <= 0.05:
        return False
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + missing * rows)
    return True


def finish(fig: Figure, axes: Sequence, size: str, panel_height: float | None = None) -> Figure:
    """Lay `fig` out for print (see the module doc); `axes` are its plotting panels (not colour bars), each kept
    PANEL_HEIGHT[size] high, or `panel_height` inches where that is more (a panel of many labelled rows).

    Wrapping a label moves the panels, and moving them changes the room a label has: the passes repeat until
    nothing changes (MAX_PASSES at most). The figure starts tall enough for its panels above the legend strip."""
    wanted = max(PANEL_HEIGHT[size], panel_height or 0.0)
    renderer = fig.canvas.get_renderer()
    _keep_legend_strip(fig, renderer)
    rows = max(ax.get_subplotspec().get_gridspec().nrows for ax in axes)
    width, height = fig.get_size_inches()
    strip = fig.get_layout_engine().get()["rect"][1] * height
    if height - strip < rows * wanted:  # the legend strip would leave the panels less than their own height
        fig.set_size_inches(width, strip + rows * wanted + 1.2)
        _keep_legend_strip(fig, renderer)
    unwrapped: dict[Text, str] = {}
    for _ in range(MAX_PASSES):
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()
        changed = _fit_labels(fig, axes, unwrapped) | _fit_ticks(axes, renderer)
        if not (changed | _keep_panel_height(fig, axes, wanted, rows) | _keep_legend_strip(fig, renderer)):
            break
    else:
        fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        _fit_cells(ax, renderer)
        _place_n_labels(ax, renderer)
    return fig


# ---- labels beside points -----------------------------------------------------------------------
def mark_boxes(ax, renderer) -> tuple[list[Bbox], list[np.ndarray]]:
    """Display-space boxes of the marks that stand for data (markers, error bars), and the vertices of
    the lines through them."""
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


def _place_n_labels(ax, renderer) -> None:
    notes = [t for t in ax.texts if t.get_gid() == N_LABEL]
    if not notes:
        return
    boxes, lines = mark_boxes(ax, renderer)
    inside = ax.bbox.padded(-1.0)
    taken: list[Bbox] = []
    for note in notes:
        scored = []
        for rank, (dx, dy, ha, va) in enumerate(N_OFFSETS):
            note.set(ha=ha, va=va)
            note.xyann = (dx, dy)
            box = note.get_window_extent(renderer).padded(1.0)
            cost = (100 * sum(box.overlaps(b) for b in boxes + taken) + 100 * (not _contains(inside, box))
                    + 10 * sum(Path(line).intersects_bbox(box, filled=False) for line in lines) + rank * 0.1)
            scored.append((cost, rank))
        _, best = min(scored)
        dx, dy, ha, va = N_OFFSETS[best]
        note.set(ha=ha, va=va)
        note.xyann = (dx, dy)
        taken.append(note.get_window_extent(renderer))


def _contains(outer: Bbox, inner: Bbox) -> bool:
    return outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1


def _fit_cells(ax, renderer) -> None:
    """Shrink each heat-map cell text (data coordinates = cell centre, cells 1 wide) until it fits its cell."""
    for text in (t for t in ax.texts if t.get_gid() == CELL_TEXT):
        x, y = text.get_position()
        corners = ax.transData.transform([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)])
        cell = Bbox.from_extents(*corners.min(axis=0), *corners.max(axis=0)).padded(-1.5)
        while not _contains(cell, text.get_window_extent(renderer)) and text.get_fontsize() > 4.5:
            text.set_fontsize(text.get_fontsize() - 0.5)
