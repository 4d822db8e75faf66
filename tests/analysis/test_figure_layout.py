"""Every figure `sweep analyze` draws is laid out for print, checked on the drawn artists after a draw.

The figures come from stand-in results for every study file in studies/ (tests.helpers.stand_in_study:
the configurations the study expands to, scored by a known function) at 1, 2 and 5 seeds, at both widths,
with scores that differ in the third decimal, with seed counts that differ between points, and against
the measured MTD. `layout_problems` reads what matplotlib drew, in display coordinates, independently of
how analysis.figure_style placed it:

  - every text (titles, axis labels, tick labels, legends, annotations) lies on the canvas;
  - no legend and no annotation covers a data mark (a marker or an error bar), and no two texts overlap;
  - number axes show no offset ("+7.377e1") or power of ten, and their tick labels have as many decimals
    as the ticks need to be written exactly, and no more;
  - a line runs along one series' x only: its x strictly increases (a line through configurations that
    share an x, or back and forth, fails);
  - error bars come with a legend that says what they are (std, CI) and over how many seeds;
  - points dodged sideways off a categorical tick are said to be dodged;
  - bars, if any, start at zero;
  - every mark's colour is from the one palette (Okabe & Ito), or black, white or a grey;
  - the figure is one or two journal columns wide.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection
from matplotlib.colors import to_hex, to_rgba
from matplotlib.container import ErrorbarContainer
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, FuncFormatter, NullFormatter
from matplotlib.transforms import Bbox

from analysis import figure_style, report
from analysis.load import load_results
from tests import synthetic_results as fx
from tests.helpers import REPO, first_fast

STUDIES = sorted((REPO / "studies").glob("*.yaml"))
OKABE_ITO = {"#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#000000"}
WIDTHS = (3.5, 7.2)
SLACK = 0.5  # px: rounding in the text extents


# ---- what is drawn --------------------------------------------------------------------------------------
def layout_problems(fig) -> list[str]:
    """What is wrong with the drawn figure's layout, as sentences (empty when nothing is)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    problems = []
    if round(float(fig.get_size_inches()[0]), 3) not in WIDTHS:
        problems.append(f"width {fig.get_size_inches()[0]} in is not a journal column width {WIDTHS}")
    texts = drawn_texts(fig)
    for text, box in texts:
        if not _inside(box, canvas):
            problems.append(f"text {text.get_text()!r} off the canvas: {_fmt(box)} not in {_fmt(canvas)}")
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    for legend in legends:
        box = legend.get_window_extent(renderer)
        if not _inside(box, canvas):
            problems.append(f"legend off the canvas: {_fmt(box)}")
    marks = [(ax, mark) for ax in fig.axes for mark in data_marks(ax)]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        covered = [m for _, m in marks if _overlap(box, m)]
        if covered:
            problems.append(f"legend {_fmt(box)} covers {len(covered)} data marks, e.g. {_fmt(covered[0])}")
    notes = [(t, b) for t, b in texts if t.axes is not None and t in t.axes.texts and not _in_heatmap(t)]
    for text, box in notes:
        covered = [m for ax, m in marks if ax is text.axes and _overlap(box, m)]
        if covered:
            problems.append(f"annotation {text.get_text()!r} covers a data mark at {_fmt(covered[0])}")
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1:]:
            if _overlap(box_a, box_b) and not _nested(a, b):
                problems.append(f"texts {a.get_text()!r} and {b.get_text()!r} overlap")
    for ax in fig.axes:
        problems += axis_problems(ax) + line_problems(ax) + cell_problems(ax, renderer)
        problems += bar_problems(ax) + dodge_problems(ax, legend_words(fig)) + colour_problems(ax)
    problems += interval_problems(fig)
    return problems


def drawn_texts(fig) -> list[tuple[Text, Bbox]]:
    """Every non-empty visible text matplotlib draws, with its extent: figure texts, titles, axis labels,
    offset texts, the tick labels of ticks in view, annotations, legend texts."""
    renderer = fig.canvas.get_renderer()
    found: list[Text] = list(fig.texts)
    for ax in fig.axes:
        found += [ax.title, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            found += [axis.label, axis.get_offset_text()]
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if low - 1e-9 * max(1, abs(high)) <= tick.get_loc() <= high + 1e-9 * max(1, abs(high)):
                    found += [tick.label1, tick.label2]
        legend = ax.get_legend()
        if legend is not None:
            found += [legend.get_title(), *legend.get_texts()]
    seen, out = set(), []
    for text in found:
        if id(text) in seen or not text.get_visible() or not text.get_text().strip():
            continue
        seen.add(id(text))
        out.append((text, text.get_window_extent(renderer)))
    return out


def data_marks(ax) -> list[Bbox]:
    """Display-space boxes of the marks that stand for data: each marker (its size), each error bar
    segment, each bar."""
    if _is_colorbar(ax):
        return []
    scale = ax.get_figure().dpi / 72
    boxes = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_marker() in (None, "", " ", "None", "none"):
            continue
        xy = line.get_transform().transform(np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float))
        half = (line.get_markersize() + line.get_markeredgewidth()) / 2 * scale
        boxes += [Bbox.from_extents(x - half, y - half, x + half, y + half) for x, y in xy if np.isfinite([x, y]).all()]
    for collection in ax.collections:
        if isinstance(collection, LineCollection) and collection.get_visible():
            for segment in collection.get_segments():
                xy = collection.get_transform().transform(segment)
                boxes.append(Bbox.from_extents(*xy.min(axis=0), *xy.max(axis=0)).padded(0.5))
    boxes += [p.get_window_extent() for p in ax.patches if isinstance(p, Rectangle)]
    return boxes


def axis_problems(ax) -> list[str]:
    """Offsets, powers of ten, and tick labels with too few or too many decimals, on number axes."""
    problems = []
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        if axis.get_offset_text().get_text():
            problems.append(f"{name} axis offset text {axis.get_offset_text().get_text()!r}")
        if _categorical(axis) or not axis.get_visible():
            continue  # their labels are names
        low, high = sorted(axis.get_view_interval())
        ticks = [(t.get_loc(), t.label1.get_text()) for t in axis.get_major_ticks()
                 if low - 1e-9 * max(1, abs(high)) <= t.get_loc() <= high + 1e-9 * max(1, abs(high))
                 and t.label1.get_visible() and t.label1.get_text()]
        labels = [text for _, text in ticks]
        if any(re.search(r"[eE×^]", text) for text in labels):
            problems.append(f"{name} tick labels in scientific notation: {labels}")
            continue
        if len(set(labels)) != len(labels):
            problems.append(f"{name} tick labels repeat: {labels}")
        decimals = max((len(text.split(".")[1]) if "." in text else 0 for text in labels), default=0)
        for loc, text in ticks:
            if abs(float(text.replace("\N{MINUS SIGN}", "-")) - loc) > 0.5 * 10.0**-decimals + 1e-9:
                problems.append(f"{name} tick {loc!r} labelled {text!r}")
        if decimals and all(abs(round(loc, decimals - 1) - loc) < 1e-9 * max(1, abs(loc)) for loc, _ in ticks):
            problems.append(f"{name} tick labels carry a decimal the ticks do not need: {labels}")
    return problems


def line_problems(ax) -> list[str]:
    """A drawn line through data must run along strictly increasing x (one series along its knob)."""
    problems = []
    for line in ax.get_lines():
        if line.get_linestyle() in ("None", "none", "", " ") or line.get_transform() != ax.transData:
            continue  # markers alone; reference lines (axvline) are drawn in axes coordinates
        xs = np.asarray(line.get_xdata(), dtype=float)
        if len(xs) > 1 and not np.all(np.diff(xs) > 0):
            problems.append(f"a line joins points not in increasing x (label {line.get_label()!r}): {xs.tolist()}")
    return problems


def cell_problems(ax, renderer) -> list[str]:
    """A heat map's cell texts stay inside their cells."""
    images = [i for i in ax.get_images() if isinstance(i, AxesImage)]
    if not images:
        return []
    problems = []
    for text in ax.texts:
        x, y = text.get_position()
        corners = ax.transData.transform([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)])
        cell = Bbox.from_extents(*corners.min(axis=0), *corners.max(axis=0))
        if not _inside(text.get_window_extent(renderer), cell):
            problems.append(f"cell text {text.get_text()!r} overflows its cell")
    return problems


def bar_problems(ax) -> list[str]:
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    if bars and (min(p.get_y() for p in bars) != 0 or ax.get_ylim()[0] > 0):
        return [f"bars do not start at zero (y from {ax.get_ylim()[0]})"]
    return []


def dodge_problems(ax, words: str) -> list[str]:
    """Markers off their categorical tick must be said to be dodged."""
    if not _categorical(ax.xaxis):
        return []
    positions = set(np.round(ax.get_xticks(), 9))
    off = [x for line in ax.get_lines() if line.get_marker() not in (None, "", "None", "none")
           for x in np.asarray(line.get_xdata(), dtype=float) if round(x, 9) not in positions]
    if off and "dodged" not in words:
        return [f"points off their tick (x {off[:3]}...) and no legend says they are dodged"]
    return []


def interval_problems(fig) -> list[str]:
    """Error bars need a legend that says what they are and over how many seeds."""
    words = legend_words(fig)
    problems = []
    vertical = horizontal = False
    for ax in fig.axes:
        for container in ax.containers:
            if isinstance(container, ErrorbarContainer):
                vertical |= container.has_yerr
                horizontal |= container.has_xerr
    if vertical and not (re.search(r"\bstd\b|\bCI\b", words) and re.search(r"\d+ seeds|n at each point", words)):
        problems.append(f"error bars without saying what they are and over how many seeds: {words!r}")
    if horizontal and "CI" not in words:
        problems.append("an x interval without saying what it is")
    return problems


def colour_problems(ax) -> list[str]:
    colours = []
    for line in ax.get_lines():
        colours += [line.get_color(), line.get_markerfacecolor(), line.get_markeredgecolor()]
    for collection in ax.collections:
        if isinstance(collection, LineCollection):
            colours += list(collection.get_edgecolor())
    wrong = sorted({to_hex(c) for c in colours if not _allowed_colour(c)})
    return [f"colours outside the palette: {wrong}"] if wrong else []


def legend_words(fig) -> str:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    return " ".join(t.get_text() for legend in legends for t in [legend.get_title(), *legend.get_texts()])


def _allowed_colour(colour) -> bool:
    if isinstance(colour, str) and colour.lower() in ("none", "auto"):
        return True
    r, g, b, _ = to_rgba(colour)
    return to_hex((r, g, b)) in OKABE_ITO or (abs(r - g) < 1e-6 and abs(g - b) < 1e-6)  # black, white, greys


def _categorical(axis) -> bool:
    """Ticks named one by one (set_ticks with labels), not numbers formatted from their value."""
    return isinstance(axis.get_major_formatter(), (FixedFormatter, FuncFormatter, NullFormatter))


def _is_colorbar(ax) -> bool:
    return ax.get_label() == "<colorbar>"  # matplotlib's name for a colour bar's axes


def _in_heatmap(text: Text) -> bool:
    return bool(text.axes.get_images())


def _nested(a: Text, b: Text) -> bool:
    """Texts meant to share room: the cell texts of one heat map are checked against their cells instead."""
    return a.axes is not None and a.axes is b.axes and _in_heatmap(a) and a in a.axes.texts and b in b.axes.texts


def _inside(inner: Bbox, outer: Bbox) -> bool:
    return (inner.x0 >= outer.x0 - SLACK and inner.x1 <= outer.x1 + SLACK
            and inner.y0 >= outer.y0 - SLACK and inner.y1 <= outer.y1 + SLACK)


def _overlap(a: Bbox, b: Bbox) -> bool:
    return a.x0 < b.x1 - SLACK and b.x0 < a.x1 - SLACK and a.y0 < b.y1 - SLACK and b.y0 < a.y1 - SLACK


def _fmt(box: Bbox) -> str:
    return "[" + ", ".join(f"{v:.0f}" for v in box.extents) + "]"


# ---- the figures ----------------------------------------------------------------------------------------
def draw_study(folder: Path, size: str = "single", mtd_source: str = "formula", table: pd.DataFrame | None = None,
               only: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """(name, figure) for every figure `sweep analyze` draws for the results in `folder` (those in `only`)."""
    table = load_results(folder, mtd_source=mtd_source) if table is None else table
    params, knobs = report.study_knobs(folder, table)
    score = "avg" if "avg" in table and table["avg"].notna().any() else report.fallback_score(table)
    plans = report.applicable_figures(table, params, score, knobs=knobs, mtd_source=mtd_source,
                                      size=size)
    return [(name, draw()[0]) for name, draw in plans if not only or name in only]


def assert_laid_out(drawn: list[tuple[str, object]]) -> None:
    found = {name: layout_problems(fig) for name, fig in drawn}
    assert {name: p for name, p in found.items() if p} == {}


# The fast tier draws mtd_grid's figures (the most, and the densest) from one seed; the full suite every study's
# from one, two and five seeds (error bars, n labels).
@pytest.mark.parametrize("study_file, seeds", first_fast(*[
    (path, seeds) for seeds in (1, 2, 5) for path in sorted(STUDIES, key=lambda path: path.stem != "mtd_grid")]),
    ids=lambda value: value.stem if isinstance(value, Path) else str(value))
def test_every_figure_of_every_study_is_laid_out_for_print(study_file, seeds, tmp_path):
    drawn = draw_study(fx.stand_in_study(study_file, tmp_path / study_file.stem, seeds))
    if study_file.stem != "methods":  # methods.yaml sweeps method and variant: no figure
        assert drawn, "no figure drawn"
    assert_laid_out(drawn)


@pytest.mark.parametrize("study", first_fast("mtd_grid", "queue_init", "quickstart", "proj_pred"))
def test_double_column_figures_are_laid_out_for_print(study, tmp_path):
    drawn = draw_study(fx.stand_in_study(REPO / "studies" / f"{study}.yaml", tmp_path / study, 3),
                       size="double")
    assert drawn and {round(float(fig.get_size_inches()[0]), 3) for _, fig in drawn} == {7.2}
    assert_laid_out(drawn)


def test_scores_that_differ_in_the_third_decimal_read_plainly(tmp_path):
    # the quickstart's shape (STS-B test alone: no paper values widen the axis), scores within 0.01
    folder = fx.stand_in_study(REPO / "studies" / "quickstart.yaml", tmp_path / "quick", 3, spread=0.001)
    drawn = dict(draw_study(folder))
    assert set(drawn) == {"score_vs_mtd", "align_uniform_vs_mtd", "queue_slices", "ema_decay", "paired_differences"}
    assert_laid_out(list(drawn.items()))
    for name in ("ema_decay", "queue_slices", "score_vs_mtd"):
        ticks = [t.get_text() for t in drawn[name].axes[0].get_yticklabels() if t.get_text()]
        assert all(re.fullmatch(r"7\d\.\d{3}", t) for t in ticks), (name, ticks)  # 75.998, ...: no "+7.6e1"


def test_points_with_different_seed_counts_carry_their_n_beside_them(tmp_path):
    folder = fx.stand_in_study(REPO / "studies" / "quickstart.yaml", tmp_path / "quick", 3)
    table = load_results(folder)
    table = table[~((table["ema.decay"] == 0.9) & (table["seed"] > 0))]  # the eta 0.9 trials: one seed
    drawn = draw_study(folder, table=table)
    notes = {name: sorted({t.get_text() for t in fig.axes[0].texts}) for name, fig in drawn}
    assert notes["queue_slices"] == ["n=1", "n=3"] and notes["ema_decay"] == ["n=1", "n=3"]
    assert_laid_out(drawn)


@pytest.mark.slow  # mtd_grid's figures again, against the measured distance
def test_measured_mtd_figures_are_laid_out_and_say_measured(tmp_path):
    folder = fx.stand_in_study(REPO / "studies" / "mtd_grid.yaml", tmp_path / "grid", 2)
    drawn = dict(draw_study(folder, mtd_source="measured"))
    assert_laid_out(list(drawn.items()))
    for name in ("score_vs_mtd", "score_vs_mtd_by_batch", "align_uniform_vs_mtd"):
        fig = drawn[name]
        titles = " ".join([fig.get_suptitle()] + [ax.get_title() for ax in fig.axes])
        assert "measured MTD" in titles.replace("\n", " "), name
        assert all(ax.get_xlabel().startswith("measured MTD (steps)") for ax in fig.axes), name


def test_the_inspection_finds_what_it_looks_for(tmp_path):
    """Each check fails on a figure broken on purpose: a legend over the points, a title off the canvas,
    an offset on the score axis, a line back and forth through configurations, bars from a non-zero base."""
    folder = fx.stand_in_study(REPO / "studies" / "quickstart.yaml", tmp_path / "quick", 3, spread=0.001)
    fig = dict(draw_study(folder, only=("ema_decay",)))["ema_decay"]
    assert layout_problems(fig) == []
    ax = fig.axes[0]
    ax.legend(loc="center", bbox_to_anchor=(0.5, 0.5), bbox_transform=ax.transAxes)
    assert any("legend" in p and "covers" in p for p in layout_problems(fig))

    fig = dict(draw_study(folder, only=("ema_decay",)))["ema_decay"]
    ax = fig.axes[0]
    ax.set_title(ax.get_title() + " and a long tail of words that runs off the right edge of the canvas")
    assert any("off the canvas" in p for p in layout_problems(fig))

    from matplotlib.ticker import ScalarFormatter

    formatter = ScalarFormatter()
    formatter.set_useOffset(True)
    ax.yaxis.set_major_formatter(formatter)
    assert any("offset text" in p for p in layout_problems(fig))

    xs = [line.get_xdata() for line in ax.get_lines() if line.get_marker() not in ("None", "none", "")][0]
    ax.plot([xs[0], xs[-1], xs[0]], [76.0, 76.001, 76.002], "-", color=figure_style.PALETTE[0])
    assert any("increasing x" in p for p in layout_problems(fig))

    ax.bar([0], [76.0], bottom=70.0, color=figure_style.PALETTE[1])
    ax.set_ylim(70, 77)
    assert any("bars do not start at zero" in p for p in layout_problems(fig))


@pytest.mark.parametrize("size", ["single", "double"])
def test_a_legend_taller_than_the_figure_makes_the_figure_taller(size):
    """Forty series: the legend strip alone is taller than the figure as first made; the figure grows so that
    the panel keeps its height above it, and the layout holds."""
    import matplotlib

    with matplotlib.rc_context(figure_style.STYLE):
        fig, (ax,) = figure_style.new_figure(size)
        for i in range(40):
            ax.plot([0, 1], [i, i + 1], label=f"configuration {i} with a long name", **figure_style.series_style(i))
        ax.set_title("Forty series")
        figure_style.legend_below(ax, title="mean over seeds")
        first_height = float(fig.get_size_inches()[1])
        figure_style.finish(fig, [ax], size)
    assert fig.get_size_inches()[1] > first_height
    assert ax.bbox.height / fig.dpi >= figure_style.PANEL_HEIGHT[size] - 0.05
    assert layout_problems(fig) == []


@pytest.mark.parametrize("size", ["single", "double"])
def test_the_knob_figure_and_its_paired_panel_are_laid_out_for_print(size):
    """The generic knob figure (no study in studies/ sweeps such a key): two methods along the temperature, with
    the panel of paired differences beneath (beside, at the double width) against a named reference and against
    the best mean, with seed counts that differ between points; and without shared seeds, the score alone."""
    from analysis.figures import figure_knob

    rng = np.random.default_rng(7)
    seed_effect = rng.normal(0.0, 1.0, 3)
    rows = [{"method": method, "temperature": tau, "seed": seed,
             "avg": 76.0 + shift + (0.4 if method == "gs" else 0.0) + seed_effect[seed] + rng.normal(0.0, 0.15)}
            for method in ("simcse", "gs") for tau, shift in ((0.05, 0.0), (0.1, 0.5), (0.2, -0.6))
            for seed in range(3)
            if not ((method, tau) == ("gs", 0.2) and seed == 2) and not ((method, tau) == ("simcse", 0.2) and seed)]
    table = pd.DataFrame(rows)
    by = ["method", "temperature"]
    for reference in ({"method": "simcse", "temperature": 0.05}, None):
        fig, _ = figure_knob(table, "avg", by=by, size=size, reference=reference)
        assert len(fig.axes) == 2
        assert layout_problems(fig) == []
    fig, _ = figure_knob(table[table["seed"] == 0], "avg", by=by, size=size, reference=None)
    assert len(fig.axes) == 1 and layout_problems(fig) == []
