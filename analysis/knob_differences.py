"""The data steps of the figures of paired differences (analysis.paired). The paired table's own figure
(`paired_rows`): a row per configuration. The knob figure (`knob_data`, the registry's "knob" entry): the score along
any swept number key no paper figure is for and, in a second panel, each of its values against the study's
reference, seed by seed: the rows of the study's paired table (the same reference, interval, adjusted p and family)
whose trials are the knob's. A value with two shared seeds is a mean alone; one sharing fewer is left out and
counted.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from analysis import figure_data as fd
from analysis import paired
from analysis.registry import generic_knobs, knob_trials, varying_knobs

SCORE_PANEL, DIFFERENCE_PANEL = "score", "paired difference"  # the knob figure's `panel` column
GEQ = "\u2265"
COLUMNS = ["panel", "ci_low", "ci_high", "interval", "p_adjusted"]  # what the lower panel adds to the data


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
                     named: dict[str, Any] | None, series: Sequence[str]) -> KnobDifferences | None:
    """The paired table of `table` (configurations of `by`, against the study's reference `named` or the best mean,
    as analysis.report makes it), its rows whose trials are among `trials` located at their x label and series
    (the values of `series`). None where no such row shares MIN_PAIRED seeds with the reference, where
    the reference has no finished trial, or where a row's trials stand at more than one point of the figure."""
    by = list(by)
    if not by or not paired.has_pairs(table, by, score):
        return None
    scored = trials[trials[score].notna()]
    try:
        reference = paired.reference_configuration(table, by, score, named)
        if not paired.has_pairs(table, by, score, reference.configuration):
            return None
        comparison = paired.paired_differences(table, by, reference, score)
        points = [Point(d, *at) for d in comparison.rows
                  if (at := _located(scored, d.configuration, knob, series)) is not None]
        reference_at = _located(scored, reference.configuration, knob, series)
    except ValueError:
        return None
    places = [(p.x_label, p.series) for p in points] + ([reference_at[1:]] if reference_at else [])
    if not points or len(set(places)) != len(places):
        return None
    configurations = scored.groupby(by, dropna=False, sort=True).ngroups
    return KnobDifferences(comparison, points, reference_at,
                           left_out=configurations - len(points) - (reference_at is not None))


def _located(scored: pd.DataFrame, configuration: dict[str, Any], knob: str, series: Sequence[str]
             ) -> tuple[Any, str, str] | None:
    """(x, x label, series) of a configuration's trials; None where it has none (another method's); ValueError
    where they stand at more than one point."""
    rows = paired.configuration_trials(scored, configuration)
    if rows.empty:
        return None
    labels = {fd.format_number(value) for value in rows[knob]}
    # (not rows[[]].itertuples(): a frame without columns yields no rows under pandas < 2.2)
    names = ({fd.series_label(series, tuple(key)) for key in rows[list(series)].itertuples(index=False)} if series
             else {"this study"})
    if len(labels) != 1 or len(names) != 1:
        raise ValueError(f"{configuration} stands at more than one point")
    return rows[knob].iloc[0], labels.pop(), names.pop()


def knob_data(entry: Any, trials: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
              size: str = fd.DEFAULT_SIZE, reference: dict[str, Any] | None = None) -> fd.Plot:
    """The score along a swept number key no paper figure is for (registry.generic_knobs; the first of `by`, else
    the first that varies), over the trials of the methods that read it (null: the knob's default), one series per
    combination of the other swept keys. Where its values share seeds with the reference (`reference`, the
    study's; None: the best mean), a second panel (beneath at "single", beside at "double") gives each value's
    paired difference to it; the data's `panel` column says where a row is drawn ("score" or "paired
    difference"), the lower panel's rows with their ci_low, ci_high, interval (procedure) and p_adjusted."""
    table = trials  # the entry's: every trial, whose paired table the second panel reads
    knobs = [key for key in generic_knobs(by or []) if key in table.columns] or varying_knobs(table)
    if not knobs:
        raise ValueError("figure_knob: no number key that no other figure is for varies among the trials")
    knob = knobs[0]
    others = [key for key in (by or []) if key != knob]  # the method too, where several read the knob
    trials = knob_trials(table, knob)
    series = fd.series_columns(trials[trials[score].notna()], [knob], others)
    found = knob_differences(table, trials, knob, list(by) if by else [knob], score, reference, series)
    plot = fd.ablation_data(trials, knob, score, title=entry.title(knob), xlabel=knob, x_format=fd.format_number,
                         size=size, panels=1 if found is None else 2, by=others)
    parts = [plot.frame.assign(panel=SCORE_PANEL)]
    if found is None:  # seeds do not allow it: the score alone
        return dataclasses.replace(plot, frame=parts[0].reindex(columns=[*plot.frame.columns, *COLUMNS]))
    (upper,) = plot.panels
    lower = fd.Panel((), fd.PAIRED_TITLE, upper.xlabel, f"\u0394 {fd.score_label(score)}",
                     upper.ticks, upper.rotate)
    frame = pd.concat([*parts, _rows(found, series)], ignore_index=True)
    frame["n"] = frame["n"].astype("Int64")
    return dataclasses.replace(plot, panels=(upper, lower), frame=frame[[*plot.frame.columns, *COLUMNS]],
                               note=f"{plot.note}\n{_note(found, 'lower' if size == 'single' else 'right')}",
                               differences=_marks(found, plot))


def _marks(found: KnobDifferences, plot: fd.Plot) -> fd.Differences:
    """What the lower panel draws: each row at its value's position and its series' offset and style above, its
    interval ended one point past the panel's other values where unbounded, filled where its adjusted p is below
    0.05; a legend entry per kind of interval drawn, in the series' style where there is one series."""
    styles, points = {s.label: s.style for s in plot.panels[0].series}, found.points
    bars = _bars([p.difference for p in points], *paired.drawn_ends([p.difference for p in points]))
    marks = tuple((plot.position[p.x_label] + plot.offset[p.series], p.difference.mean, bar,
                   bar is not None and p.difference.p_adjusted < 0.05, styles[p.series], p.difference.n)
                  for p, bar in zip(points, bars))
    reference, adjusted = found.comparison.reference, paired.adjusted_p_label(found.comparison)
    style = styles[points[0].series] if len({p.series for p in points}) == 1 else None
    kinds = tuple((f"\u0394 and its interval, {adjusted} {'<' if stands else GEQ} 0.05", style, stands)
                  for stands in sorted({m[3] for m in marks if m[2] is not None}, reverse=True))
    at = found.reference_at
    return fd.Differences(
        marks, f"\u0394 = 0: the reference, {paired.configuration_text(reference.configuration)} ({reference.how})",
        None if at is None else plot.position[at[1]] + plot.offset[at[2]], kinds, len({m[5] for m in marks}) > 1)


def _bars(differences: Sequence[paired.PairedDifference], low_end: float, high_end: float
          ) -> tuple[tuple[float, float] | None, ...]:
    """Each difference's bar, its extent below and above the mean, an unbounded end (MCB's) drawn at `low_end` or
    `high_end`; None without an interval (n = 2)."""
    return tuple(None if d.ci_low is None else
                 (max(0.0, d.mean - max(d.ci_low, low_end)), max(0.0, min(d.ci_high, high_end) - d.mean))
                 for d in differences)


def paired_rows(table: pd.DataFrame, by: Sequence[str], reference: paired.Reference, score: str = "avg") -> fd.Rows:
    """The paired table of `table` (configurations of `by` against `reference`) as a row each, in its order: the
    mean difference and, where it has one, its interval, ended one point past the others where unbounded
    (paired.drawn_ends) and standing where its adjusted p is below 0.05; the legend's title names the rows' keys,
    the reference, the seeds and what was left out."""
    comparison = paired.paired_differences(table, by, reference, score)
    rows = comparison.rows
    if not rows:
        raise ValueError("no configuration shares two seeds with the reference")
    with_ci = [d for d in rows if d.ci_low is not None]
    bars = _bars(rows, *(paired.drawn_ends(with_ci) if with_ci else (math.nan, math.nan)))
    ns = sorted({d.n for d in rows})
    seeds = f"{ns[0]} shared seeds" if len(ns) == 1 else f"{ns[0]}-{ns[-1]} shared seeds (n per row in the csv)"
    note = (f"rows: {' / '.join(by)}; reference: {paired.values_text(reference.configuration, by)} "
            f"({reference.how}); \u0394 = row - reference over {seeds}")
    if comparison.procedure == paired.MCB:
        note += "; intervals: row - best of the others, all rows at once"
    if comparison.left_out:
        note += f"; not compared (under {paired.MIN_PAIRED} shared seeds): {len(comparison.left_out)}"
    marks = f"mean difference, {paired.interval_label(comparison)}; {paired.adjusted_p_label(comparison)}"
    return fd.Rows(tuple(paired.values_text(d.configuration, by) for d in rows), tuple(d.mean for d in rows), bars,
                   tuple(d.ci_low is not None and d.p_adjusted < 0.05 for d in rows),
                   (f"{marks} < 0.05", f"{marks} >= 0.05", "mean difference, n = 2: no interval"),
                   f"\u0394 {fd.score_label(score)}", note, paired.paired_frame(comparison))


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
