"""The data steps of the figures of paired differences (analysis.paired). The paired table's own figure
(`paired_rows`): a row per configuration. The knob figure (`knob_data`, the registry's "knob" entry): the score along
any swept number key no paper figure is for and, in a second panel, each of its values against the study's
reference, seed by seed: the rows of the study's paired table (the same reference, interval, adjusted p and family)
whose trials are the knob's. A value with two shared seeds is a mean alone; one sharing fewer is left out and
counted.
"""

from __future__ import annotations

import dataclasses
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
class KnobDifferences:
    """The paired comparison behind the panel, its rows drawn (each with the (knob value, x label, series) of its
    configuration's point above) and the reference's own point, where it is one of the knob's."""

    comparison: paired.PairedComparison
    points: list[tuple[paired.PairedDifference, Any, str, str]]
    reference_at: tuple[Any, str, str] | None
    left_out: int  # the knob's configurations sharing fewer than MIN_PAIRED seeds with the reference


def knob_differences(table: pd.DataFrame, scored: pd.DataFrame, knob: str, by: Sequence[str], score: str,
                     named: dict[str, Any] | None, series: Sequence[str]) -> KnobDifferences | None:
    """The paired table of `table` (configurations of `by`, against the study's reference `named` or the best mean,
    as analysis.report makes it), its rows with trials among `scored` (the knob's, with a score) each at its
    configuration's knob value and series (its values of `series`). None where the knob is not one of `by` (a
    configuration would stand at several values), where no row shares MIN_PAIRED seeds with the reference or where
    the reference has no finished trial."""
    if knob not in by or not paired.has_pairs(table, by, score):
        return None
    try:
        reference = paired.reference_configuration(table, by, score, named)
        if not paired.has_pairs(table, by, score, reference.configuration):
            return None
        comparison = paired.paired_differences(table, by, reference, score)
    except ValueError:
        return None

    def point(configuration: dict[str, Any]) -> tuple[Any, str, str] | None:
        if paired.configuration_trials(scored, configuration).empty:  # another method's, or no score
            return None
        label = fd.series_label(series, tuple(configuration.get(key) for key in series)) if series else "this study"
        value = configuration.get(knob)
        return value, fd.format_number(value), label

    points = [(d, *at) for d in comparison.rows if (at := point(d.configuration)) is not None]
    if not points:
        return None
    reference_at = point(reference.configuration)
    configurations = scored.groupby(list(by), dropna=False, sort=True).ngroups
    return KnobDifferences(comparison, points, reference_at, configurations - len(points) - (reference_at is not None))


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
    scored = trials[trials[score].notna()]
    series = fd.series_columns(scored, [knob], others)
    found = knob_differences(table, scored, knob, list(by) if by else [knob], score, reference, series)
    plot = fd.ablation_data(trials, knob, score, title=entry.title(knob), xlabel=knob, x_format=fd.format_number,
                         size=size, panels=1 if found is None else 2, by=others)
    parts = [plot.frame.assign(panel=SCORE_PANEL)]
    if found is None:  # seeds do not allow it: the score alone
        return dataclasses.replace(plot, frame=parts[0].reindex(columns=[*plot.frame.columns, *COLUMNS]))
    (upper,) = plot.panels
    lower = fd.Panel((), fd.PAIRED_TITLE, upper.xlabel, f"\u0394 {fd.score_label(score)}", upper.ticks, upper.rotate)
    styles = {s.label: s.style for s in upper.series}
    reference, at = found.comparison.reference, found.reference_at
    differences = _differences(
        found.comparison, [d for d, *_ in found.points],
        [plot.position[x_label] + plot.offset[label] for _, _, x_label, label in found.points],
        [styles[label] for *_, label in found.points],
        zero_label=f"\u0394 = 0: the reference, {paired.configuration_text(reference.configuration)} ({reference.how})",
        reference_x=None if at is None else plot.position[at[1]] + plot.offset[at[2]],
        show_n=len({d.n for d, *_ in found.points}) > 1)
    frame = pd.concat([*parts, _rows(found, series)], ignore_index=True)
    frame["n"] = frame["n"].astype("Int64")
    return dataclasses.replace(plot, panels=(upper, lower), frame=frame[[*plot.frame.columns, *COLUMNS]],
                               note=f"{plot.note}\n{_note(found, 'lower' if size == 'single' else 'right')}",
                               differences=differences)


def _differences(comparison: paired.PairedComparison, rows: Sequence[paired.PairedDifference],
                 places: Sequence[float], styles: Sequence[int], **labels: Any) -> fd.Differences:
    """Each row's mark at its place in its style: its interval, an unbounded end (MCB's) ended one point past the
    marks drawn (paired.drawn_ends), filled where its adjusted p is below 0.05; the mean alone without one (n = 2);
    a legend entry per kind of interval drawn, in the rows' style where they share one."""
    low, high = paired.drawn_ends(rows)
    bars = [None if d.ci_low is None else
            (max(0.0, d.mean - max(d.ci_low, low)), max(0.0, min(d.ci_high, high) - d.mean)) for d in rows]
    marks = tuple((place, d.mean, bar, bar is not None and d.p_adjusted < 0.05, style, d.n)
                  for d, place, style, bar in zip(rows, places, styles, bars))
    what = f"mean difference, {paired.interval_label(comparison)}; {paired.adjusted_p_label(comparison)}"
    shared = styles[0] if len(set(styles)) == 1 else None  # the rows' one style, else black
    kinds = tuple((f"{what} {'<' if stands else GEQ} 0.05", shared, stands)
                  for stands in sorted({m[3] for m in marks if m[2] is not None}, reverse=True))
    return fd.Differences(marks, kinds, **labels)


def paired_rows(table: pd.DataFrame, by: Sequence[str], reference: paired.Reference, score: str = "avg") -> fd.Rows:
    """The paired table of `table` (configurations of `by` against `reference`) as a row each, in its order (the
    marks of `_differences`); the legend's title names the rows' keys, the reference, the seeds and what was left
    out."""
    comparison = paired.paired_differences(table, by, reference, score)
    rows = comparison.rows
    if not rows:
        raise ValueError("no configuration shares two seeds with the reference")
    ns = sorted({d.n for d in rows})
    seeds = f"{ns[0]} shared seeds" if len(ns) == 1 else f"{ns[0]}-{ns[-1]} shared seeds (n per row in the csv)"
    note = (f"rows: {' / '.join(by)}; reference: {paired.values_text(reference.configuration, by)} "
            f"({reference.how}); \u0394 = row - reference over {seeds}")
    bars = [d.ci_low is not None for d in rows]
    if comparison.procedure == paired.MCB and any(bars):
        note += "; intervals: row - best of the others, all rows at once"
    if not all(bars):
        note += f"; no bar: {paired.MIN_PAIRED} shared seeds, no interval"
    if comparison.left_out:
        note += f"; not compared (under {paired.MIN_PAIRED} shared seeds): {len(comparison.left_out)}"
    differences = _differences(comparison, rows, range(len(rows) - 1, -1, -1), [0] * len(rows))
    return fd.Rows(differences, tuple(paired.values_text(d.configuration, by) for d in rows),
                   f"\u0394 {fd.score_label(score)}", note, paired.paired_frame(comparison))


def _rows(found: KnobDifferences, series: Sequence[str]) -> pd.DataFrame:
    """The lower panel's data: a row per difference, and the reference's own point where it is one of the knob's."""
    comparison, rows = found.comparison, []
    for d, x, x_label, label in found.points:
        rows.append({**{key: d.configuration.get(key) for key in series}, "series": label, "x": x,
                     "x_label": x_label, "mean": d.mean, "n": d.n, "ci_low": d.ci_low, "ci_high": d.ci_high,
                     "interval": comparison.procedure if d.ci_low is not None else "", "p_adjusted": d.p_adjusted})
    if found.reference_at is not None:
        x, x_label, _ = found.reference_at
        rows.append({"series": "reference", "x": x, "x_label": x_label, "mean": 0.0, "interval": ""})
    return pd.DataFrame(rows).assign(panel=DIFFERENCE_PANEL)


def _note(found: KnobDifferences, where: str) -> str:
    """What the `where` panel's marks are: the difference, over how many seeds, its interval and what fills a mark."""
    comparison, adjusted = found.comparison, paired.adjusted_p_label(found.comparison)
    ns = {d.n for d, *_ in found.points}
    seeds = f"over {min(ns)} shared seeds" if len(ns) == 1 else "over the shared seeds (n at each point)"
    text = f"{where} panel: \u0394 = value \u2212 reference, seed by seed, mean {seeds}"
    bars = [d.ci_low is not None for d, *_ in found.points]
    if any(bars) and comparison.procedure == paired.PAIRED_T:
        text += (f"; bar: its 95% CI (paired t); filled where {adjusted} < 0.05, Holm over the study's "
                 f"{comparison.family} comparisons")
    elif any(bars):
        text += (f"; bar: its simultaneous 95% CI (MCB, over the study's {comparison.family} configurations) on "
                 f"value \u2212 the best of the others; filled where {adjusted} < 0.05")
    if not all(bars):
        text += f"; no bar: {paired.MIN_PAIRED} shared seeds, no interval"
    if found.left_out:
        text += (f"; not drawn: {found.left_out} of the knob's configurations, sharing fewer than "
                 f"{paired.MIN_PAIRED} seeds with the reference")
    return text
