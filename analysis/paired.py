"""Paired differences between configurations over the seeds they share, against one reference configuration.

A study pairs seeds (grid and random studies give every configuration the same seed list). For a configuration
C and the reference R, over the n seeds both ran with:

    d_s        = score_C(s) - score_R(s)                      (one seed's paired difference)
    mean       = (1/n) sum_s d_s
    95% CI     = the 2.5th and 97.5th percentiles of the mean of d over B bootstrap resamples of the seeds
                 (drawn with replacement, seeded); when the score is the seven-task STS average, a stratified
                 bootstrap: each resample draws the seeds anew for each task, and its value is the mean over the
                 tasks of each task's mean paired difference
    P(C > R)   = (1/n) sum_s [d_s > 0] + 0.5 [d_s = 0]          (the probability of improvement over seed pairs)
    IQM        = the mean of the middle half of the d_s (scipy.stats.trim_mean(d, 0.25)), with n >= 5

With n = 2 the mean is given and no interval ("n = 2: no interval"); a configuration sharing fewer than two seeds
with the reference is left out, said so. The reference is the study's `reference` (study.yaml), else the best
configuration by mean score, said as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from analysis.figure_style import styled
from trainer.evaluation.sts_average import AVG
from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, STS_TASKS

MIN_PAIRED = 2  # seeds shared with the reference to state a difference at all
MIN_INTERVAL = 3  # ... to give it an interval
MIN_IQM = 5  # ... to give the interquartile mean
CI_LEVEL = 0.95


@dataclass(frozen=True)
class PairedDifference:
    """One configuration against the reference, over the seeds both ran with (module docstring)."""

    configuration: dict[str, Any]
    n: int
    mean: float
    ci_low: float | None
    ci_high: float | None
    p_improvement: float
    iqm: float | None
    stratified: bool  # the interval resampled seeds within each STS task

    @property
    def note(self) -> str:
        return f"n = {self.n}: no interval" if self.ci_low is None else ""


def reference_configuration(table: pd.DataFrame, by: Sequence[str], score: str,
                            named: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The reference configuration (values of `by`) and how it was chosen: the study's `reference`, or, when the
    study names none, the configuration with the best mean score among those with MIN_PAIRED seeds or more. A
    ValueError when the study's reference names a key it does not sweep or matches no finished trial."""
    by = list(by)
    if named:
        unknown = [key for key in named if key not in by]
        if unknown:
            raise ValueError(f"the study's reference names {', '.join(unknown)}, which it does not sweep")
        configuration = {key: named.get(key) for key in by}
        rows = _matching(table, configuration)
        if not rows.any():
            raise ValueError(f"no finished trial has the study's reference configuration {_text(configuration)}")
        configuration = {key: table.loc[rows, key].iloc[0] for key in by}
        return configuration, "the study's reference"
    scored = table.dropna(subset=[score])
    counts = scored.groupby(by, dropna=False, sort=True)["seed"].nunique()
    means = scored.groupby(by, dropna=False, sort=True)[score].mean()
    candidates = means[counts >= MIN_PAIRED] if (counts >= MIN_PAIRED).any() else means  # one that can be paired
    best = candidates.idxmax()
    best = best if isinstance(best, tuple) else (best,)
    return dict(zip(by, best)), f"the best mean {score}; the study names none"


def has_pairs(table: pd.DataFrame, by: Sequence[str], score: str, reference: dict[str, Any] | None = None) -> bool:
    """Whether some two configurations of `by` share MIN_PAIRED seeds with a score (with `reference`: some
    configuration shares them with it): what a paired table needs."""
    seeds = _scored_seeds(table, by, score)
    if reference is not None:
        reference_seeds = next((s for configuration, s in seeds if _same(configuration, reference)), frozenset())
        return any(len(s & reference_seeds) >= MIN_PAIRED
                   for configuration, s in seeds if not _same(configuration, reference))
    return any(len(a & b) >= MIN_PAIRED for i, (_, a) in enumerate(seeds) for _, b in seeds[i + 1:])


def _scored_seeds(table: pd.DataFrame, by: Sequence[str], score: str) -> list[tuple[dict[str, Any], frozenset]]:
    """(configuration, the seeds with a score) of each configuration of `by`."""
    by = list(by)
    if not by or "seed" not in table.columns or score not in table.columns:
        return []
    scored = table.dropna(subset=[score])
    return [(dict(zip(by, key if isinstance(key, tuple) else (key,))), frozenset(group["seed"]))
            for key, group in scored.groupby(by, dropna=False, sort=True)]


def paired_differences(table: pd.DataFrame, by: Sequence[str], reference: dict[str, Any], score: str = AVG,
                       n_boot: int = 2000, seed: int = 0) -> tuple[list[PairedDifference], list[str]]:
    """Each configuration of `by` against `reference` over their shared seeds (module docstring), in the
    configurations' sorted order; and the configurations left out for sharing fewer than MIN_PAIRED seeds."""
    by = list(by)
    scored = table.dropna(subset=[score])
    reference_rows = scored[_matching(scored, reference)].set_index("seed")
    stratified = score == AVG and _avg_is_task_mean(scored)
    rng = np.random.default_rng(seed)
    out, left_out = [], []
    for key, group in scored.groupby(by, dropna=False, sort=True):
        configuration = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        if _same(configuration, reference):
            continue
        group = group.set_index("seed")
        seeds = sorted(set(group.index) & set(reference_rows.index))
        if len(seeds) < MIN_PAIRED:
            left_out.append(f"{_text(configuration)} (n = {len(seeds)})")
            continue
        d = group.loc[seeds, score].to_numpy(float) - reference_rows.loc[seeds, score].to_numpy(float)
        low = high = None
        if len(seeds) >= MIN_INTERVAL:
            if stratified:
                per_task = (group.loc[seeds, list(STS_TASKS)].to_numpy(float)
                            - reference_rows.loc[seeds, list(STS_TASKS)].to_numpy(float))  # (seeds, tasks)
                boot = stratified_bootstrap_means(per_task, n_boot, rng)
            else:
                boot = bootstrap_means(d, n_boot, rng)
            tail = (1.0 - CI_LEVEL) / 2.0 * 100.0
            low, high = (float(v) for v in np.percentile(boot, [tail, 100.0 - tail]))
        out.append(PairedDifference(
            configuration=configuration, n=len(seeds), mean=float(d.mean()), ci_low=low, ci_high=high,
            p_improvement=float(np.mean((d > 0) + 0.5 * (d == 0))),
            iqm=float(scipy_stats.trim_mean(d, 0.25)) if len(seeds) >= MIN_IQM else None,
            stratified=stratified and low is not None))
    return out, left_out


def _avg_is_task_mean(scored: pd.DataFrame) -> bool:
    """Whether each row's seven-task average is the mean of its seven task scores (to 0.01): what the stratified
    bootstrap, which resamples the tasks' differences, needs to be an interval of the average's difference."""
    if not all(task in scored.columns for task in STS_TASKS):
        return False
    tasks = scored[list(STS_TASKS)].to_numpy(float)
    return bool(np.isfinite(tasks).all() and np.allclose(tasks.mean(axis=1), scored[AVG].to_numpy(float), atol=0.01))


def bootstrap_means(d: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """The mean of `d` over `n_boot` resamples of its entries (with replacement)."""
    picks = rng.integers(0, len(d), size=(n_boot, len(d)))
    return d[picks].mean(axis=1)


def stratified_bootstrap_means(per_task: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """`per_task`: (seeds, tasks) paired differences. Each resample draws the seeds anew within each task (the
    stratum) and averages the tasks' means: the seven-task average's difference."""
    seeds, tasks = per_task.shape
    picks = rng.integers(0, seeds, size=(n_boot, seeds, tasks))
    return np.take_along_axis(per_task[None, :, :].repeat(n_boot, axis=0), picks, axis=1).mean(axis=(1, 2))


def paired_frame(differences: list[PairedDifference], by: Sequence[str]) -> pd.DataFrame:
    """The table's numbers: the configuration's keys, then n, mean, ci_low, ci_high, p_improvement, iqm."""
    rows = [{**{key: d.configuration[key] for key in by}, "n": d.n, "mean_difference": d.mean, "ci_low": d.ci_low,
             "ci_high": d.ci_high, "p_improvement": d.p_improvement, "iqm": d.iqm, "note": d.note}
            for d in differences]
    return pd.DataFrame(rows, columns=[*by, "n", "mean_difference", "ci_low", "ci_high", "p_improvement", "iqm",
                                       "note"])


def _latex(text: str) -> str:
    return text.replace("_", "\\_").replace("%", "\\%").replace(">=", "$\\geq$")


def _matching(table: pd.DataFrame, configuration: dict[str, Any]) -> pd.Series:
    rows = pd.Series(True, index=table.index)
    for key, value in configuration.items():
        column = table[key]
        rows &= column.isna() if _missing(value) else column.map(lambda v, value=value: _equal(v, value))
    return rows


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(_equal(a[key], b.get(key)) for key in a)


def _equal(a: Any, b: Any) -> bool:
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    if isinstance(a, (int, float, np.number)) and isinstance(b, (int, float, np.number)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return str(a) == str(b)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _values(configuration: dict[str, Any], by: Sequence[str]) -> str:
    """A configuration by its values alone, in `by`'s order (a figure's row label; the keys go in its legend)."""
    return " / ".join(f"{value:g}" if isinstance(value, float) else str(value)
                      for value in (configuration.get(key) for key in by))


def _text(configuration: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in configuration.items())


# ---- what analyze writes ----------------------------------------------------------------------------------
# Each paper's own difference to SimCSE (bert-base, seven-task STS average), against the SimCSE figure that paper
# itself reports: MoCoSE Table 1 (77.27 against 76.25), GS-InfoNCE Table 2 (77.63 against 76.25), MixCSE Table 1
# (77.66 against its own five re-runs of SimCSE, 74.83).
PAPER_VS_SIMCSE = {MOCOSE: (77.27 - 76.25, "MoCoSE Table 1"), GS_INFONCE: (77.63 - 76.25, "GS-InfoNCE Table 2"),
                   MIXCSE: (77.66 - 74.83, "MixCSE Table 1")}


def _paper_column(differences: list[PairedDifference], reference: dict[str, Any], score: str) -> list[str] | None:
    """The papers' own difference to SimCSE beside each method's row, when the reference is SimCSE and the score is
    the seven-task average the papers report; None otherwise."""
    if score != AVG or reference.get("method") != "simcse":
        return None
    return [f"{PAPER_VS_SIMCSE[d.configuration.get('method')][0]:+.2f}"
            if d.configuration.get("method") in PAPER_VS_SIMCSE else "" for d in differences]


def paired_markdown(differences: list[PairedDifference], by: Sequence[str], reference: dict[str, Any], chosen: str,
                    score: str, left_out: list[str], latex: bool = False) -> str:
    """The paired table (Markdown, or LaTeX with `latex`), its reference and formulas named under it."""
    paper = _paper_column(differences, reference, score)
    header = [*by, f"{score} difference", "95% CI", "P(better)", "IQM", "n"] + (["paper"] if paper else [])
    rows = []
    for i, d in enumerate(differences):
        interval = f"[{d.ci_low:+.2f}, {d.ci_high:+.2f}]" if d.ci_low is not None else d.note
        rows.append([*(str(d.configuration[key]) for key in by), f"{d.mean:+.2f}", interval,
                     f"{d.p_improvement:.2f}", "-" if d.iqm is None else f"{d.iqm:+.2f}", str(d.n)]
                    + ([paper[i]] if paper else []))
    stratified = any(d.stratified for d in differences)
    note = (f"Paired against the reference {_text(reference)} ({chosen}): per seed, the configuration's {score} "
            "minus the reference's, then averaged; 95% CI: percentile bootstrap over the shared seeds"
            + (", stratified over the seven STS tasks" if stratified else "")
            + "; P(better): the share of shared seeds where the configuration scores higher (ties count half); "
            "IQM: the mean of the middle half of the differences (n >= 5).")
    if paper:
        note += (" paper: the paper's own difference to the SimCSE figure it reports (MoCoSE, GS-InfoNCE: 76.25; "
                 "MixCSE: its re-run, 74.83).")
    if left_out:
        note += f" Not compared (fewer than {MIN_PAIRED} seeds shared with the reference): {'; '.join(left_out)}."
    if latex:
        align = "l" * len(by) + "r" * (len(header) - len(by))
        lines = ["\\begin{table}[t]", "\\centering", "\\small", f"\\begin{{tabular}}{{{align}}}",
                 "\\toprule", " & ".join(_latex(h) for h in header) + " \\\\", "\\midrule"]
        lines += [" & ".join(_latex(cell) for cell in row) + " \\\\" for row in rows]
        lines += ["\\bottomrule", "\\end{tabular}", f"\\caption{{{_latex(note)}}}", "\\label{tab:paired}",
                  "\\end{table}"]
        return "\n".join(lines) + "\n"
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out) + "\n\n" + note + "\n"


@styled
def figure_paired_differences(table: pd.DataFrame, by: Sequence[str], reference: dict[str, Any], chosen: str,
                              score: str = AVG, n_boot: int = 2000, seed: int = 0, size: str = "single"):
    """Each configuration's mean paired difference to the reference with its 95% bootstrap interval (a point alone
    where n = 2), a zero line, the reference named in the title; (figure, its data)."""
    from analysis.figure_marks import score_label
    from analysis.figure_style import finish, legend_below, new_figure, series_style

    differences, left_out = paired_differences(table, by, reference, score, n_boot, seed)
    if not differences:
        raise ValueError("no configuration shares two seeds with the reference")
    data = paired_frame(differences, by)
    fig, (ax,) = new_figure(size)
    labels = [_values(d.configuration, by) for d in differences]
    ys = np.arange(len(differences))[::-1]
    style = series_style(0)
    with_ci = [i for i, d in enumerate(differences) if d.ci_low is not None]
    without = [i for i, d in enumerate(differences) if d.ci_low is None]
    if with_ci:
        ax.errorbar([differences[i].mean for i in with_ci], ys[with_ci],
                    xerr=[[max(0.0, differences[i].mean - differences[i].ci_low) for i in with_ci],
                          [max(0.0, differences[i].ci_high - differences[i].mean) for i in with_ci]],
                    fmt="o", capsize=3, color=style["color"], label="mean difference, 95% bootstrap CI")
    if without:
        ax.plot([differences[i].mean for i in without], ys[without], "s", color=series_style(1)["color"],
                label="mean difference, n = 2: no interval")
    ax.axvline(0.0, color="0.4", linewidth=0.8, linestyle=":", zorder=0)
    ax.set_yticks(ys, labels)
    ax.set_ylim(-0.5, len(differences) - 0.5)
    ax.set_xlabel(f"\u0394 {score_label(score)}")
    ax.set_title("Paired difference to the reference")
    ns = sorted({d.n for d in differences})
    seeds = f"{ns[0]} shared seeds" if len(ns) == 1 else f"{ns[0]}-{ns[-1]} shared seeds (n per row in the csv)"
    title = (f"rows: {' / '.join(by)}; reference: {_values(reference, by)} ({chosen}); "
             f"\u0394 = row - reference over {seeds}")
    if left_out:
        title += f"; not compared (under {MIN_PAIRED} shared seeds): {len(left_out)}"
    legend_below(ax, title=title)
    return finish(fig, [ax], size, panel_height=0.3 + 0.2 * len(differences)), data  # a row per configuration
