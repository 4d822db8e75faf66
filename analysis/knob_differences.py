"""The knob figure (`knob_data`, the registry's "knob" entry): the score along any swept number key no paper figure
is for and, in a second panel, each of its values against the study's reference, seed by seed, as the study's
paired table states it (analysis.paired).

The numbers are the paired table's own rows (`paired.paired_differences` over the whole study: every
configuration of its declared keys, the same reference, the same family), those whose trials are the knob's. The
reference is the study's `reference` (the interval: the paired t-interval; filled where Holm's p over the table's
comparisons is below 0.05) or else the best mean (Hsu's MCB over the table's configurations, each one's difference
to the best of the others; filled where MCB's p is below 0.05). A value with two shared seeds is a mean alone (no
bar); one sharing fewer is left out and counted; no second panel (`knob_differences` None) where none shares two.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pandas as pd
from matplotlib.lines import Line2D

from analysis import figure_data as fd
from analysis import paired
from analysis.figure_marks import label_n
from analysis.figure_style import series_style
from analysis.registry import generic_knobs, knob_trials, varying_knobs

SCORE_PANEL, DIFFERENCE_PANEL = "score", "paired difference"  # the knob figure's `panel` column
COLUMNS = ["panel", "ci_low", "ci_high", "interval", "p_adjusted"]  # what the lower panel adds to the data
GEQ = "\u2265"
REFERENCE_MARK = dict(marker="x", markersize=5, markeredgewidth=1.2, color="black", linestyle="none", zorder=5)


@dataclass(frozen=True)
class Point:
    """One of the paired table's rows, at the knob value and in the series its trials are drawn at above."""

    difference: paired.PairedDifference
    x: Any
    x_label: str
    series: str


@dataclass(frozen=True)
class KnobDifferences:
    """The paired comparison behind the panel and where each of its rows stands on the knob's axis."""

    comparison: paired.PairedComparison
    points: list[Point]
    reference_at: tuple[Any, str, str] | None  # (x, x_label, series) where the reference is one of the knob's
    left_out: int  # the knob's configurations sharing fewer than MIN_PAIRED seeds with the reference


def knob_differences(table: pd.DataFrame, trials: pd.DataFrame, knob: str, by: Sequence[str], score: str,
                     named: dict[str, Any] | None, x_format: Callable[[Any], str], series: Sequence[str]
                     ) -> KnobDifferences | None:
    """The paired table's comparison of `table` (configurations of `by`, against the study's reference `named`, or
    the best mean; analysis.report does the same) located on the knob's axis: each row whose trials are among
    `trials` (the knob figure's), at their x label (`x_format`) and series (the combination of `series`' values).
    None where seeds do not allow it (no row of the knob's shares MIN_PAIRED seeds with the reference), where the
    study's reference has no finished trial (the paired table warns of it), or where a row's trials stand at more
    than one point of the figure."""
    by = list(by)
    if not by or not paired.has_pairs(table, by, score):
        return None
    try:
        reference = paired.reference_configuration(table, by, score, named)
        if not paired.has_pairs(table, by, score, reference.configuration):
            return None
        comparison = paired.paired_differences(table, by, reference, score)
    except ValueError:
        return None
    scored = trials[trials[score].notna()]
    try:
        points = [Point(d, *at) for d in comparison.rows
                  if (at := _located(scored, d.configuration, knob, x_format, series)) is not None]
        reference_at = _located(scored, reference.configuration, knob, x_format, series)
    except _Ambiguous:
        return None
    places = [(p.x_label, p.series) for p in points] + ([reference_at[1:]] if reference_at else [])
    if not points or len(set(places)) != len(places):
        return None
    configurations = scored.groupby(by, dropna=False, sort=True).ngroups
    return KnobDifferences(comparison, points, reference_at,
                           left_out=configurations - len(points) - (reference_at is not None))


class _Ambiguous(Exception):
    """A configuration's trials stand at more than one point of the figure."""


def _located(scored: pd.DataFrame, configuration: dict[str, Any], knob: str, x_format: Callable[[Any], str],
             series: Sequence[str]) -> tuple[Any, str, str] | None:
    rows = paired.configuration_trials(scored, configuration)
    if rows.empty:
        return None  # not one of the knob's trials (another method's, the reference of a method without the knob)
    labels = {x_format(value) for value in rows[knob]}
    # (not rows[[]].itertuples(): a frame without columns yields no rows under pandas < 2.2)
    names = ({fd.series_label(series, tuple(key)) for key in rows[list(series)].itertuples(index=False)} if series
             else {"this study"})
    if len(labels) != 1 or len(names) != 1:
        raise _Ambiguous
    return rows[knob].iloc[0], labels.pop(), names.pop()


def knob_data(entry: Any, trials: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
              size: str = fd.DEFAULT_SIZE, reference: dict[str, Any] | None = None) -> fd.Plot:
    """Any swept number key no paper figure is for (analysis.registry.generic_knobs), a plugin's own knob included:
    the score along its values (null: the knob's default), over the trials of the methods that read it, one series
    per combination of the other swept keys; the first such key when a study sweeps several (else the first that
    varies among the trials: a key `analysis: {knobs}` names, set through an expr).

    Where the knob's values share seeds with the study's reference (`reference`, the study's; None: the best mean),
    a second panel (beneath at the single width, beside at the double) gives each value's paired difference to
    it, with the interval and adjusted p of the study's paired table; elsewhere the figure is the one panel. The
    data's `panel` column says which panel a row is drawn on ("score" or "paired difference"), with the
    difference's ci_low, ci_high, interval (its procedure) and p_adjusted."""
    table = trials  # the entry's: every trial, whose paired table the second panel reads
    knobs = [key for key in generic_knobs(by or []) if key in table.columns] or varying_knobs(table)
    if not knobs:
        raise ValueError("figure_knob: no number key that no other figure is for varies among the trials")
    knob = knobs[0]
    others = [key for key in (by or []) if key != knob]  # the method too, where several read the knob
    trials = knob_trials(table, knob)
    series = fd.ablation_series(trials, knob, score, others)
    found = knob_differences(table, trials, knob, list(by) if by else [knob], score, reference, fd.format_number,
                             series)
    plot = fd.ablation_data(trials, knob, score, title=entry.title(knob), xlabel=knob, x_format=fd.format_number,
                         size=size, panels=1 if found is None else 2, by=others)
    parts = [plot.frame.assign(panel=SCORE_PANEL)]
    if found is None:  # seeds do not allow it: the score alone
        return dataclasses.replace(plot, frame=parts[0].reindex(columns=[*plot.frame.columns, *COLUMNS]))
    (upper,) = plot.panels
    lower = fd.Panel((), "Paired difference to the reference", upper.xlabel, f"\u0394 {fd.score_label(score)}",
                     upper.ticks, upper.rotate)
    frame = pd.concat([*parts, _rows(found, series)], ignore_index=True)
    frame["n"] = frame["n"].astype("Int64")
    return dataclasses.replace(plot, panels=(upper, lower), frame=frame[[*plot.frame.columns, *COLUMNS]],
                               note=f"{plot.note}\n{_note(found, 'lower' if size == 'single' else 'right')}",
                               differences=found)


def _rows(found: KnobDifferences, series: Sequence[str]) -> pd.DataFrame:
    """The lower panel's data: a row per difference, and the reference's own point where it is one of the knob's."""
    comparison, rows = found.comparison, []
    for p in found.points:
        d = p.difference
        rows.append({**{key: d.configuration.get(key) for key in series}, "series": p.series, "x": p.x,
                     "x_label": p.x_label, "mean": d.mean, "n": d.n, "ci_low": d.ci_low, "ci_high": d.ci_high,
                     "interval": comparison.procedure if d.ci_low is not None else "", "p_adjusted": d.p_adjusted})
    if found.reference_at is not None:
        x, x_label, _ = found.reference_at
        rows.append({"series": "reference", "x": x, "x_label": x_label, "mean": 0.0, "interval": ""})
    return pd.DataFrame(rows).assign(panel=DIFFERENCE_PANEL)


def draw_differences(ax, plot: fd.Plot) -> dict[str, Any]:
    """The knob figure's paired differences (`plot.differences`) on `ax`, at the score panel's x positions, series
    offsets and styles; their legend entries (label: handle)."""
    found, at = plot.differences, {s.label: s.style for s in plot.panels[0].series}
    comparison = found.comparison
    adjusted = paired.adjusted_p_label(comparison)
    low_end, high_end = paired.drawn_ends([p.difference for p in found.points])
    ns = {p.difference.n for p in found.points}
    kinds: set[bool] = set()  # True: the difference stands at 0.05; False: it does not
    for p in found.points:
        d, style = p.difference, series_style(at[p.series])
        x = plot.position[p.x_label] + plot.offset[p.series]
        if d.ci_low is None:  # n = 2: the mean alone
            ax.plot([x], [d.mean], linestyle="none", marker=style["marker"], color=style["color"],
                    markerfacecolor="white", zorder=4)
        else:
            stands = d.p_adjusted < 0.05
            kinds.add(stands)
            low, high = max(d.ci_low, low_end), min(d.ci_high, high_end)
            ax.errorbar([x], [d.mean], yerr=[[max(0.0, d.mean - low)], [max(0.0, high - d.mean)]],
                        fmt=style["marker"], color=style["color"], elinewidth=0.8, zorder=4,
                        markerfacecolor=style["color"] if stands else "white")
        if len(ns) > 1:
            label_n(ax, [x], [d.mean], [d.n], style["color"])
    reference = comparison.reference
    handles = {f"\u0394 = 0: the reference, {paired.configuration_text(reference.configuration)} ({reference.how})":
               ax.axhline(0.0, color="0.4", linewidth=0.8, linestyle=":", zorder=0)}
    if found.reference_at is not None:  # the reference is one of the knob's values: its own point, at 0
        _, x_label, name = found.reference_at
        handles["the reference itself"] = ax.plot([plot.position[x_label] + plot.offset[name]], [0.0],
                                                  **REFERENCE_MARK)[0]
    one = len({p.series for p in found.points}) == 1
    style = series_style(at[found.points[0].series]) if one else {"color": "black", "marker": "o"}
    for stands in sorted(kinds, reverse=True):
        handles[f"\u0394 and its interval, {adjusted} {'<' if stands else GEQ} 0.05"] = Line2D(
            [], [], linestyle="none", marker=style["marker"], color=style["color"],
            markerfacecolor=style["color"] if stands else "white")
    return handles


def _note(found: KnobDifferences, where: str) -> str:
    """What the `where` panel's marks are: the difference, over how many seeds, its interval and what fills a mark."""
    comparison, adjusted = found.comparison, paired.adjusted_p_label(found.comparison)
    ns = {p.difference.n for p in found.points}
    seeds = f"over {min(ns)} shared seeds" if len(ns) == 1 else "over the shared seeds (n at each point)"
    text = f"{where} panel: \u0394 = value \u2212 reference, seed by seed, mean {seeds}; "
    if comparison.procedure == paired.PAIRED_T:
        text += (f"bar: its 95% CI (paired t); filled where {adjusted} < 0.05, Holm over the study's "
                 f"{comparison.family} comparisons")
    else:
        text += (f"bar: its simultaneous 95% CI (MCB, over the study's {comparison.family} configurations) on "
                 f"value \u2212 the best of the others; filled where {adjusted} < 0.05")
    if any(p.difference.ci_low is None for p in found.points):
        text += f"; no bar: {paired.MIN_PAIRED} shared seeds, no interval"
    if found.left_out:
        text += (f"; not drawn: {found.left_out} of the knob's configurations, sharing fewer than "
                 f"{paired.MIN_PAIRED} seeds with the reference")
    return text
