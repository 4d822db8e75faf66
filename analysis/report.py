"""Turn a results folder into its figures and tables: `analyze(study_dir) -> [written paths]`.

Which figures apply is decided by what the study varies, never by what merely differs between trials:
a figure is drawn for a knob the study's `parameters` sweep (or its `analysis: {knobs: [...]}` names),
and only where the finished trials hold what it needs; analysis.registry lists every figure, the knobs
that call for it, the methods it draws and what it needs.

Tables and figures group trials by every key the study's `parameters` declare (analysis.load.grouping_keys):
one row, point or series per configuration, seeds pooled and nothing else. A results folder without
study.yaml (a trials.csv copied by hand) falls back to the keys that vary among its trials.

Each figure is written as <name>.png (300 dpi), <name>.pdf (fonts embedded as TrueType, Type 42) and
<name>.csv (the plotted data), or in the `formats` asked for (png, pdf, svg) with its .csv; MTD figures add
<name>.json (Spearman, fit, best MTD and its Fieller interval). Figures are one journal column wide
(`size="single"`, 3.5 in) or two (`"double"`, 7.2 in), in one colour-blind-safe palette
(analysis.figure_style). Against the measured distance (`mtd_source="measured"`) the MTD figures are named
<name>_measured (score_vs_mtd_measured.png, ...) and say "measured MTD" in their title and on their x axis, so
that they are never taken for, or attached over, the formula's. The per-task table is written as scores.md,
scores.tex and scores.csv; when trials ran the SentEval transfer tasks, their Table 2 (MR ... MRPC, Avg) as
transfer.md, transfer.tex and transfer.csv. Every file is written to a temporary name in the same folder and
moved into place with os.replace, so a reader never sees half a file.
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from analysis import paired, tables
from analysis.figure_data import DEFAULT_SIZE, check_size
from analysis.load import (
    SCORES,
    TRANSFER_SCORES,
    ResultsError,
    comparable_groups,
    declared_parameters,
    grouping_keys,
    load_results,
    read_study_spec,
)
from analysis.registry import FIGURES, MTD_FIGURES, figures_called_for
from analysis.seeds import Spread
from trainer.evaluation.sts_average import AVG
from trainer.vocabulary import STS_BENCHMARK, STS_TASKS


@dataclass(frozen=True)
class SeedSettings:
    """The study's `analysis.seed_spread` and `analysis.target_difference` (analysis.seeds): the spread used
    where the trials give none, and the difference whose seed count the paired table states."""

    spread: float | None = None
    target: float | None = None

    @classmethod
    def of(cls, spec: dict[str, Any]) -> SeedSettings:
        section = spec.get("analysis") or {}
        return cls(section.get("seed_spread"), section.get("target_difference"))


# the files a figure may be written as, and those written unless `formats` says otherwise
FIGURE_FORMATS = ("png", "pdf", "svg")
DEFAULT_FORMATS = ("png", "pdf")


def analyze(
    study_dir: str | Path,
    out_dir: str | Path | None = None,
    eta_choice: str = "mean",
    k_choice: str = "oldest",
    score: str = "avg",
    mtd_source: str = "formula",
    size: str = DEFAULT_SIZE,
    notes: list[str] | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
) -> list[Path]:
    """Write every applicable figure and the score tables; return the written paths.

    What `sweep analyze` calls. `out_dir` defaults to <study_dir>/figures (<study_dir>/figures/measured_mtd
    for the measured distance). `eta_choice` ("initial", "final" or "mean" of the EMA schedule) and
    `k_choice` ("oldest" queue position read, or the queue "size") pick the MTD definition (trainer.mtd);
    `mtd_source="measured"` plots against the distance the trainer measured instead
    (docs/science/traceable-distance.md). `score` is the y of the figures ("avg" = the seven-task STS test
    average; trials that did not evaluate all seven have none, and the figures plot `fallback_score`
    instead, under its own name). `size`:
    "single" (one journal column) or "double" (the page's width). `formats`: the files each figure is written as
    (FIGURE_FORMATS). Trials that may not be compared are analysed
    apart (analysis.load.comparable_groups): those of an older reading of the papers in <out_dir>/older_reading/,
    those evaluated under another protocol in <out_dir>/protocol_<what differs>/; trials drawn together that ran
    on different code, packages or devices get a warning under each table and in each figure's legend. `notes`,
    when given, gets the one line for each split and each warning.

    Written: each applicable figure in each of `formats` (.png at 300 dpi and .pdf with TrueType fonts by
    default; .svg on request) with its data as .csv, and the
    score tables scores.md/.tex/.csv (and transfer.* when trials ran the transfer tasks).
    Raises analysis.load.ResultsError when the folder has no finished trials.
    """
    from analysis.figure_style import footnote  # the drawing code: loaded where a figure is drawn

    check_size(size)
    formats = check_formats(formats)
    study_dir = Path(study_dir)
    if out_dir is None:  # the measured-distance figures go beside the formula ones, never over them
        out_dir = study_dir / "figures" / ("measured_mtd" if mtd_source == "measured" else "")
    out_dir = Path(out_dir)
    table = load_results(study_dir, eta_choice=eta_choice, k_choice=k_choice, mtd_source=mtd_source)
    params, knobs = study_knobs(study_dir, table)
    spec = read_study_spec(study_dir)
    reference = spec.get("reference") or None
    seeds = SeedSettings.of(spec)
    written: list[Path] = []
    for group in comparable_groups(table):
        if notes is not None:
            notes += [line for line in (group.note, group.warning and f"{group.folder or 'figures'}: {group.warning}")
                      if line]
        with footnote(group.warning):
            written += _analyze_part(group.table, study_dir, out_dir / group.folder, params, knobs, score,
                                     mtd_source, size, group.warning, reference, formats, seeds)
    return written


def _analyze_part(table: pd.DataFrame, study_dir: Path, out_dir: Path, params: list[str], knobs: list[str],
                  score: str, mtd_source: str, size: str, warning: str | None,
                  reference: dict[str, Any] | None = None, formats: tuple[str, ...] = DEFAULT_FORMATS,
                  seeds: SeedSettings | None = None) -> list[Path]:
    """`analyze` for one set of trials that may be pooled: its figures and tables into `out_dir`; `warning` (what
    differs among them that is not the protocol) ends each table's note; `reference`: the study's reference
    configuration for the paired table (analysis.paired)."""
    if not _has_values(table, score):
        fallback = fallback_score(table) if score == AVG else None
        if fallback is None:
            raise ResultsError(f"{study_dir}: the trials have no {score!r} scores; pass another score (e.g. dev_stsb)")
        score = fallback
    from trainer.files import write_text_atomic  # here: importing analysis stays light

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    plans = applicable_figures(table, params, score, knobs=knobs, mtd_source=mtd_source, size=size,
                               reference=reference)
    for name, draw in plans:
        try:
            fig, data = draw()
        except ValueError as exc:  # degenerate data for this figure (e.g. no scores in a subset)
            warnings.warn(f"figure {name} skipped: {exc}", stacklevel=3)
            continue
        written += _write_figure(out_dir, figure_file_name(name, mtd_source), fig, data, formats)

    if any(_has_values(table, column) for column in SCORES):  # runs without test evaluation have no table
        numbers = tables.score_table(table, by=params)
        written.append(write_text_atomic(out_dir / "scores.md", tables.markdown_table(table, by=params)
                                         + _warning_line(warning)))
        written.append(write_text_atomic(out_dir / "scores.tex", tables.latex_table(table, by=params)
                                         + _warning_line(warning, "% ")))
        written.append(write_text_atomic(out_dir / "scores.csv", numbers.to_csv(index=False)))
    if paired.has_pairs(table, params, score):
        written += _write_paired(table, out_dir, params, score, reference, warning, seeds or SeedSettings())
    if any(_has_values(table, column) for column in TRANSFER_SCORES):
        numbers = tables.score_table(table, by=params, scores=TRANSFER_SCORES)
        written.append(write_text_atomic(out_dir / "transfer.md", tables.transfer_markdown_table(table, by=params)
                                         + _warning_line(warning)))
        written.append(write_text_atomic(out_dir / "transfer.tex", tables.transfer_latex_table(table, by=params)
                                         + _warning_line(warning, "% ")))
        written.append(write_text_atomic(out_dir / "transfer.csv", numbers.to_csv(index=False)))
    mteb = tables.mteb_headers(table)
    if mteb:  # trials that ran MTEB tasks (eval.mteb): their table beside the STS one
        numbers = tables.score_table(table, by=params, scores=list(mteb))
        written.append(write_text_atomic(out_dir / "mteb.md", tables.mteb_markdown_table(table, by=params)
                                         + _warning_line(warning)))
        written.append(write_text_atomic(out_dir / "mteb.csv", numbers.to_csv(index=False)))
    return written


def _write_paired(table: pd.DataFrame, out_dir: Path, params: list[str], score: str, named: dict[str, Any] | None,
                  warning: str | None, seeds: SeedSettings) -> list[Path]:
    """paired.md, paired.tex and paired.csv: each configuration against the reference (analysis.paired); with
    per-task scores, paired_tasks.md and paired_tasks.csv, each task's own paired intervals."""
    from trainer.files import write_text_atomic  # here: importing analysis stays light

    reference = _reference(table, params, score, named)
    if reference is None:
        return []
    comparison = paired.paired_differences(table, params, reference, score, seeds.spread, seeds.target)
    if not comparison.rows:
        return []
    written = [write_text_atomic(out_dir / "paired.md", paired.paired_markdown(comparison) + _warning_line(warning)),
               write_text_atomic(out_dir / "paired.tex", paired.paired_markdown(comparison, latex=True)
                                 + _warning_line(warning, "% ")),
               write_text_atomic(out_dir / "paired.csv", paired.paired_frame(comparison).to_csv(index=False))]
    tasks = paired.task_frame(table, params, reference)
    if len(tasks):
        written += [write_text_atomic(out_dir / "paired_tasks.md", paired.task_markdown(tasks, params, reference)
                                      + _warning_line(warning)),
                    write_text_atomic(out_dir / "paired_tasks.csv", tasks.to_csv(index=False))]
    return written


def _reference(table: pd.DataFrame, params: list[str], score: str, named: dict[str, Any] | None
               ) -> paired.Reference | None:
    """The paired comparisons' reference (analysis.paired.reference_configuration); None with a warning when the
    study's reference has no finished trial among these."""
    try:
        return paired.reference_configuration(table, params, score, named)
    except ValueError as exc:
        warnings.warn(f"paired differences skipped: {exc}", stacklevel=3)
        return None


def finished_spread(study_dir: str | Path, score: str) -> Spread | None:
    """The per-seed difference spread of a study's finished trials (their paired differences against the
    reference, analysis.paired, pooled), for the seeds a difference needs; None when no two configurations of
    its current trials share two seeds with a `score`."""
    study_dir = Path(study_dir)
    if not (study_dir / "trials").is_dir():
        return None
    try:
        table = load_results(study_dir)
    except ResultsError:
        return None
    table = comparable_groups(table)[0].table
    if score not in table.columns:
        return None
    params, _ = study_knobs(study_dir, table)
    if not paired.has_pairs(table, params, score):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        reference = _reference(table, params, score, read_study_spec(study_dir).get("reference") or None)
    if reference is None or not paired.has_pairs(table, params, score, reference.configuration):
        return None
    spread = paired.paired_differences(table, params, reference, score).spread
    return spread if spread.measured else None


def _warning_line(warning: str | None, prefix: str = "") -> str:
    """The table's closing note on what differs among its trials besides the settings ("" when nothing does)."""
    return f"\n{prefix}Warning: {warning}.\n" if warning else ""


def fallback_score(table: pd.DataFrame) -> str | None:
    """What the figures plot when the trials have no seven-task average: the STS test score they have
    (STS-B test first, as the quickstart evaluates it), else STS-B dev; None when there is neither."""
    return next((name for name in (STS_BENCHMARK, *STS_TASKS, "dev_stsb") if _has_values(table, name)), None)


def _has_values(table: pd.DataFrame, column: str) -> bool:
    return column in table.columns and bool(table[column].notna().any())


def study_knobs(study_dir: str | Path, table: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(grouping keys, figure knobs) of a study: its declared `parameters` (study.yaml), and those plus
    `analysis.knobs`; without a study.yaml, the keys that vary among the trials for both."""
    spec = read_study_spec(study_dir)
    if not spec:  # a trials.csv copied by hand: what varies among the trials is all there is to go by
        params = grouping_keys(table, None)
        return params, params
    declared = declared_parameters(spec)
    named = list(((spec.get("analysis") or {}).get("knobs")) or [])
    return grouping_keys(table, declared), list(dict.fromkeys(declared + named))


def figure_file_name(name: str, mtd_source: str = "formula") -> str:
    """The file stem a figure is written and attached under: an MTD figure against the measured distance
    is <name>_measured.

    >>> figure_file_name("score_vs_mtd", "measured"), figure_file_name("ema_decay", "measured")
    ('score_vs_mtd_measured', 'ema_decay')
    """
    return f"{name}_measured" if mtd_source == "measured" and name in MTD_FIGURES else name


def applicable_figures(
    table: pd.DataFrame, params: list[str], score: str = "avg",
    knobs: list[str] | None = None, mtd_source: str = "formula", size: str = DEFAULT_SIZE,
    reference: dict[str, Any] | None = None,
) -> list[tuple[str, Callable[[], tuple[Any, pd.DataFrame]]]]:
    """(name, draw) for every figure the study's `knobs` call for and the trials support, in analysis.registry's order.

    `params` keep series (and MTD points) apart; `knobs` (default: `params`) decide which figures apply;
    `mtd_source` names the x of the MTD figures (the table's "mtd" column must hold that distance); every
    figure is drawn at `size`; `reference` (the study's) goes to the figures that state differences against it
    (the knob figure's paired panel), as to the paired table.
    """
    from analysis.figures import draw as draw_figure
    from analysis.figures import figure_paired_differences

    called = set(figures_called_for(params if knobs is None else knobs))
    arguments = {"score": score, "by": params, "mtd_source": mtd_source, "size": size, "reference": reference}
    plans: list[tuple[str, Callable]] = [(entry.name, functools.partial(draw_figure, entry, table, **arguments))
                                         for entry in FIGURES if entry.name in called and entry.applies(table, score)]
    if paired.has_pairs(table, params, score):  # configurations that share seeds: their paired differences
        chosen = _reference(table, params, score, reference)
        if chosen is not None and paired.has_pairs(table, params, score, chosen.configuration):
            plans.append(("paired_differences", lambda: figure_paired_differences(
                table, params, chosen, score, size)))
    return plans


# ---- writing ------------------------------------------------------------------------------------
def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    """`formats` without repeats, in the order given; a ValueError names an unknown one."""
    chosen = tuple(dict.fromkeys(formats))
    unknown = [f for f in chosen if f not in FIGURE_FORMATS]
    if unknown or not chosen:
        raise ValueError(f"figure formats must be one or more of {', '.join(FIGURE_FORMATS)}; got "
                         f"{', '.join(map(repr, unknown)) or 'none'}")
    return chosen


def _write_figure(out_dir: Path, name: str, fig: Any, data: pd.DataFrame, formats: tuple[str, ...]) -> list[Path]:
    from analysis.figure_style import save_figure
    from trainer.files import json_safe, write_atomic, write_text_atomic  # here: importing analysis stays light

    paths = [write_atomic(out_dir / f"{name}.{kind}", lambda tmp, kind=kind: save_figure(fig, tmp, kind))
             for kind in formats]
    paths.append(write_text_atomic(out_dir / f"{name}.csv", data.to_csv(index=False)))
    stats = data.attrs.get("stats")
    if stats:
        paths.append(write_text_atomic(out_dir / f"{name}.json", json.dumps(json_safe(stats), indent=2) + "\n"))
    return paths
