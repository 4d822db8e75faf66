"""Paired differences between configurations over the seeds they share, against one reference configuration.

A study pairs seeds (grid and random studies give every configuration the same seed list). For a configuration
C and the reference R, over the n seeds both ran with:

    d_s        = score_C(s) - score_R(s)                      (one seed's paired difference)
    mean       = (1/n) sum_s d_s

The seed is the unit: one seed trains one model, which is scored on every task, so the seven-task STS average's
difference is the per-seed average's d_s like any other score's (its tasks' differences are never resampled
apart: they move together within a seed). The interval stated beside `mean` depends on how R was chosen:

- R named by the study (`reference`): the paired t-interval, mean +- t_{n-1, 0.975} sd(d)/sqrt(n)
  (scipy.stats.ttest_rel; it assumes roughly normal d_s). Its p is the paired t-test's; `p_adjusted` is that p
  adjusted by Holm over the configurations of the table (statsmodels `multipletests`), the family-wise test of
  which differences stand.
- R the best mean (the study names none): Hsu's multiple comparisons with the best, built from a paired t per
  pair of configurations with a one-sided Bonferroni level over the k - 1 comparisons each has (`mcb_bounds`,
  which holds with unequal spreads). With probability >= 95%, for every configuration at once, its interval
  holds theta_C = mu_C - max over the others mu_j; an interval ending at 0 shows C is not the best. `p_adjusted`
  is the smallest family-wise level at which it is shown not to be the best. The per-comparison t-interval
  stays in `t_low`/`t_high`.

Beside them: `p_signflip`, the exact two-sided sign-flip permutation test of mean d = 0 (scipy.stats.
permutation_test; no normality assumed, but at n seeds no p below 2/2^n exists); P(C > R) =
(1/n) sum_s [d_s > 0] + 0.5 [d_s = 0], given only where the interval is; IQM = the mean of the middle half of
the d_s (scipy.stats.trim_mean(d, 0.25)), with n >= 5; `resolvable`, the smallest true difference n seeds
resolve (analysis.seeds), and a row whose |mean| is below it says "not resolved at n = k".

With n = 2 the mean is given and no interval ("n = 2: no interval"); a configuration sharing fewer than two seeds
with the reference is left out, said so. Per-task intervals (paired t, one per task) are in `task_frame`.
Measured coverage of each interval: analysis.coverage.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from analysis.intervals import holm, mcb_bounds, paired_t, sign_flip_p
from analysis.seeds import Spread, default_spread, resolvable_difference, seed_lines, spread_of_differences
from trainer.evaluation.sts_average import AVG
from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, STS_TASK_LABELS, STS_TASKS

MIN_PAIRED = 2  # seeds shared with the reference to state a difference at all
MIN_INTERVAL = 3  # ... to give it an interval
MIN_IQM = 5  # ... to give the interquartile mean
PAIRED_T, MCB = "paired t", "Hsu MCB"  # the procedures behind ci_low/ci_high (module docstring)


@dataclass(frozen=True)
class Reference:
    """The configuration every other is stated against: the study's `reference` (`named`), or the best mean."""

    configuration: dict[str, Any]
    named: bool
    how: str  # how it was chosen, as the tables say it


@dataclass(frozen=True)
class PairedDifference:
    """One configuration against the reference, over the seeds both ran with (module docstring)."""

    configuration: dict[str, Any]
    n: int
    mean: float
    ci_low: float | None  # the interval the tool stands behind: paired t, or MCB when the reference was chosen
    ci_high: float | None
    t_low: float | None  # the per-comparison paired t-interval
    t_high: float | None
    p_value: float | None  # the paired t-test's, two-sided
    p_adjusted: float | None  # Holm (named reference) or MCB (chosen reference)
    p_signflip: float | None
    p_improvement: float | None
    iqm: float | None
    resolvable: float | None

    @property
    def note(self) -> str:
        if self.ci_low is None:
            return f"n = {self.n}: no interval"
        if self.resolvable is not None and abs(self.mean) < self.resolvable:
            return f"not resolved at n = {self.n}"
        return ""


@dataclass(frozen=True)
class PairedComparison:
    """Every configuration of a table against its reference, and what made the numbers."""

    rows: list[PairedDifference]
    left_out: list[str]  # configurations sharing fewer than MIN_PAIRED seeds with the reference
    reference: Reference
    by: list[str]
    score: str
    procedure: str  # PAIRED_T or MCB
    family: int  # configurations the adjustment covers
    spread: Spread
    target: float | None  # the study's analysis.target_difference


# ---- on a results table ----------------------------------------------------------------------------------
def reference_configuration(table: pd.DataFrame, by: Sequence[str], score: str,
                            named: dict[str, Any] | None) -> Reference:
    """The reference: the study's `reference`, or, when the study names none, the configuration with the best
    mean score among those with MIN_PAIRED seeds or more. A ValueError when the study's reference names a key it
    does not sweep or matches no finished trial."""
    by = list(by)
    if named:
        unknown = [key for key in named if key not in by]
        if unknown:
            raise ValueError(f"the study's reference names {', '.join(unknown)}, which it does not sweep")
        configuration = {key: named.get(key) for key in by}
        rows = _matching(table, configuration)
        if not rows.any():
            raise ValueError(f"no finished trial has the study's reference configuration {_text(configuration)}")
        return Reference({key: table.loc[rows, key].iloc[0] for key in by}, True, "the study's reference")
    scored = table.dropna(subset=[score])
    counts = scored.groupby(by, dropna=False, sort=True)["seed"].nunique()
    means = scored.groupby(by, dropna=False, sort=True)[score].mean()
    candidates = means[counts >= MIN_PAIRED] if (counts >= MIN_PAIRED).any() else means  # one that can be paired
    best = candidates.idxmax()
    best = best if isinstance(best, tuple) else (best,)
    return Reference(dict(zip(by, best)), False, f"the best mean {score}; the study names none")


def has_pairs(table: pd.DataFrame, by: Sequence[str], score: str, reference: dict[str, Any] | None = None) -> bool:
    """Whether some two configurations of `by` share MIN_PAIRED seeds with a score (with `reference`: some
    configuration shares them with it): what a paired table needs. Not pair by pair: two share them exactly when
    both hold one MIN_PAIRED-subset of seeds, so the first subset seen twice decides (at most C(seeds, MIN_PAIRED))."""
    seeds = _scored_seeds(table, by, score)
    if reference is not None:
        reference_seeds = next((s for configuration, s in seeds if _same(configuration, reference)), frozenset())
        return any(len(s & reference_seeds) >= MIN_PAIRED
                   for configuration, s in seeds if not _same(configuration, reference))
    seen: set[frozenset] = set()  # one configuration's subsets are distinct: a subset seen before is another's too
    return any(subset in seen or seen.add(subset)  # (add: None, so the search goes on)
               for _, s in seeds for subset in map(frozenset, itertools.combinations(s, MIN_PAIRED)))


def configuration_trials(table: pd.DataFrame, configuration: dict[str, Any]) -> pd.DataFrame:
    """The rows of `table` that ran `configuration` (a PairedDifference's or the Reference's): equal in each of its
    keys, a missing value matching a missing one."""
    return table[_matching(table, configuration)]


def _scored_seeds(table: pd.DataFrame, by: Sequence[str], score: str) -> list[tuple[dict[str, Any], frozenset]]:
    """(configuration, the seeds with a score) of each configuration of `by`."""
    by = list(by)
    if not by or "seed" not in table.columns or score not in table.columns:
        return []
    seeds = table.dropna(subset=[score]).groupby(by, dropna=False, sort=True)["seed"].agg(frozenset)  # no frames
    return [(dict(zip(by, key if isinstance(key, tuple) else (key,))), s) for key, s in seeds.items()]


def _configurations(table: pd.DataFrame, by: Sequence[str], score: str) -> list[tuple[dict[str, Any], pd.Series]]:
    """(configuration, its scores indexed by seed) for each configuration of `by` with a score, in sorted order
    (one score per seed: a repeated seed keeps its mean)."""
    scored = table.dropna(subset=[score])
    return [(dict(zip(by, key if isinstance(key, tuple) else (key,))), group.groupby("seed")[score].mean())
            for key, group in scored.groupby(list(by), dropna=False, sort=True)]


def paired_differences(table: pd.DataFrame, by: Sequence[str], reference: Reference, score: str = AVG,
                       given_spread: float | None = None, target: float | None = None) -> PairedComparison:
    """Each configuration of `by` against `reference` over their shared seeds (module docstring), in the
    configurations' sorted order. `given_spread`: the study's analysis.seed_spread, the per-seed difference
    spread used for `resolvable` where these trials' own differences give none; `target`: its
    analysis.target_difference, carried to the table's note."""
    by = list(by)
    configurations = _configurations(table, by, score)
    at = next((i for i, (c, _) in enumerate(configurations) if _same(c, reference.configuration)), None)
    if at is None:
        raise ValueError(f"no scored trial has the reference configuration {_text(reference.configuration)}")
    reference_scores = configurations[at][1]
    mcb = None
    if not reference.named and len(configurations) >= 2:  # the reference was chosen from these very scores
        seeds = sorted(set().union(*(s.index for _, s in configurations)))
        matrix = np.array([s.reindex(seeds).to_numpy(float) for _, s in configurations])
        mcb = mcb_bounds(matrix)
    rows, left_out, spreads = [], [], []
    for i, (configuration, scores) in enumerate(configurations):
        if i == at:
            continue
        seeds = sorted(set(scores.index) & set(reference_scores.index))
        if len(seeds) < MIN_PAIRED:
            left_out.append(f"{_text(configuration)} (n = {len(seeds)})")
            continue
        c, r = scores.loc[seeds].to_numpy(float), reference_scores.loc[seeds].to_numpy(float)
        d = c - r
        spreads.append(d)
        fields: dict[str, Any] = dict.fromkeys(("ci_low", "ci_high", "t_low", "t_high", "p_value", "p_adjusted",
                                                "p_signflip", "p_improvement"))
        if len(seeds) >= MIN_INTERVAL:
            t_low, t_high, p_value = paired_t(c, r)
            fields.update(t_low=t_low, t_high=t_high, p_value=p_value, p_signflip=sign_flip_p(d),
                          p_improvement=float(np.mean((d > 0) + 0.5 * (d == 0))))
            if mcb is None:
                fields.update(ci_low=t_low, ci_high=t_high)
            else:
                fields.update(ci_low=float(mcb[0][i]), ci_high=float(mcb[1][i]), p_adjusted=float(mcb[2][i]))
        rows.append(dict(configuration=configuration, n=len(seeds), mean=float(d.mean()),
                         iqm=float(scipy_stats.trim_mean(d, 0.25)) if len(seeds) >= MIN_IQM else None, **fields))
    if mcb is None:  # Holm over the rows that have a test
        tested = [row for row in rows if row["p_value"] is not None]
        for row, adjusted in zip(tested, holm([row["p_value"] for row in tested])):
            row["p_adjusted"] = adjusted
    spread = (spread_of_differences(spreads)
              or (Spread(given_spread, "the study's analysis.seed_spread") if given_spread else default_spread(score)))
    differences = [PairedDifference(**row, resolvable=resolvable_difference(spread.sd, row["n"])) for row in rows]
    return PairedComparison(rows=differences, left_out=left_out, reference=reference, by=by, score=score,
                            procedure=PAIRED_T if mcb is None else MCB,
                            family=len(configurations) if mcb is not None else len(
                                [d for d in differences if d.p_value is not None]),
                            spread=spread, target=target)


def task_frame(table: pd.DataFrame, by: Sequence[str], reference: Reference) -> pd.DataFrame:
    """Per STS task, each configuration against the reference: n, the mean paired difference and its paired
    t-interval (per comparison, unadjusted), over the seeds both have that task's score for (MIN_INTERVAL or
    more)."""
    by = list(by)
    rows = []
    for task in (t for t in STS_TASKS if t in table.columns and table[t].notna().any()):
        configurations = _configurations(table, by, task)
        reference_scores = next((s for c, s in configurations if _same(c, reference.configuration)), None)
        if reference_scores is None:
            continue
        for configuration, scores in configurations:
            seeds = sorted(set(scores.index) & set(reference_scores.index))
            if _same(configuration, reference.configuration) or len(seeds) < MIN_INTERVAL:
                continue
            c, r = scores.loc[seeds].to_numpy(float), reference_scores.loc[seeds].to_numpy(float)
            low, high, p = paired_t(c, r)
            rows.append({**configuration, "task": task, "n": len(seeds), "mean_difference": float((c - r).mean()),
                         "t_low": low, "t_high": high, "p_value": p})
    return pd.DataFrame(rows, columns=[*by, "task", "n", "mean_difference", "t_low", "t_high", "p_value"])


def task_markdown(frame: pd.DataFrame, by: Sequence[str], reference: Reference) -> str:
    """The per-task table: one row per configuration, one column per task, "mean [low, high]"."""
    tasks = list(dict.fromkeys(frame["task"]))
    header = [*by, *(STS_TASK_LABELS[t] for t in tasks), "n"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for key, group in frame.groupby(list(by), dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        cells = {row.task: f"{row.mean_difference:+.2f} [{row.t_low:+.2f}, {row.t_high:+.2f}]"
                 for row in group.itertuples()}
        ns = sorted(set(group["n"]))
        lines.append("| " + " | ".join([*(_cell(v) for v in key), *(cells.get(t, "-") for t in tasks),
                                        "/".join(map(str, ns))]) + " |")
    return ("\n".join(lines) + f"\n\nPer task, paired against the reference {_text(reference.configuration)} "
            f"({reference.how}): mean difference [95% paired t-interval, per comparison and per task, not adjusted "
            "for the tasks or configurations]. The seven tasks of one seed come from one model, so these are "
            "not seven independent findings.\n")


def paired_frame(comparison: PairedComparison) -> pd.DataFrame:
    """The table's numbers: the configuration's keys, then n, mean_difference, the interval the tool stands
    behind (ci_low, ci_high) and its procedure, the per-comparison t-interval, the p-values, P(C > R), IQM, the
    resolvable difference and the note."""
    by = comparison.by
    columns = ["n", "mean_difference", "ci_low", "ci_high", "interval", "t_low", "t_high", "p_value", "p_adjusted",
               "p_signflip", "p_improvement", "iqm", "resolvable", "note"]
    rows = [{**{key: d.configuration[key] for key in by}, "n": d.n, "mean_difference": d.mean, "ci_low": d.ci_low,
             "ci_high": d.ci_high, "interval": comparison.procedure if d.ci_low is not None else "",
             "t_low": d.t_low, "t_high": d.t_high, "p_value": d.p_value, "p_adjusted": d.p_adjusted,
             "p_signflip": d.p_signflip, "p_improvement": d.p_improvement, "iqm": d.iqm,
             "resolvable": d.resolvable, "note": d.note}
            for d in comparison.rows]
    return pd.DataFrame(rows, columns=[*by, *columns])


def _latex(text: str) -> str:
    return (text.replace("_", "\\_").replace("%", "\\%").replace(">=", "$\\geq$").replace("\u2265", "$\\geq$")
            .replace("\u2212", "-").replace("\u03b1", "$\\alpha$").replace("\u03b8", "$\\theta$"))


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


def values_text(configuration: dict[str, Any], by: Sequence[str]) -> str:
    """A configuration by its values alone, in `by`'s order (a figure's row label; the keys go in its legend)."""
    return " / ".join(_cell(configuration.get(key)) for key in by)


def _cell(value: Any) -> str:
    """A key's value in a table or label: "-" where the configuration sets none (a key of another method, or
    left to its default), floats in their shortest form."""
    if _missing(value):
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def configuration_text(configuration: dict[str, Any]) -> str:
    """A configuration as the tables' notes name it: "key=value, ..." ("-" where it sets no value)."""
    return _text(configuration)


def _text(configuration: dict[str, Any]) -> str:
    return ", ".join(f"{key}={_cell(value)}" for key, value in configuration.items())


# ---- what analyze writes ----------------------------------------------------------------------------------
# Each paper's own difference to SimCSE (bert-base, seven-task STS average), against the SimCSE figure that paper
# itself reports: MoCoSE Table 1 (77.27 against 76.25), GS-InfoNCE Table 2 (77.63 against 76.25), MixCSE Table 1
# (77.66 against its own five re-runs of SimCSE, 74.83).
PAPER_VS_SIMCSE = {MOCOSE: (77.27 - 76.25, "MoCoSE Table 1"), GS_INFONCE: (77.63 - 76.25, "GS-InfoNCE Table 2"),
                   MIXCSE: (77.66 - 74.83, "MixCSE Table 1")}


def _paper_column(comparison: PairedComparison) -> list[str] | None:
    """The papers' own difference to SimCSE beside each method's row, when the reference is SimCSE and the score is
    the seven-task average the papers report; None otherwise."""
    if comparison.score != AVG or comparison.reference.configuration.get("method") != "simcse":
        return None
    return [f"{PAPER_VS_SIMCSE[d.configuration.get('method')][0]:+.2f}"
            if d.configuration.get("method") in PAPER_VS_SIMCSE else "" for d in comparison.rows]


def adjusted_p_label(comparison: PairedComparison) -> str:
    """The adjusted p's name in tables and figures: Holm's over the family beside a named reference, MCB's beside a
    best chosen from the data."""
    return "p (Holm)" if comparison.procedure == PAIRED_T else "p (MCB)"


def drawn_ends(differences: Sequence[PairedDifference]) -> tuple[float, float]:
    """Where a figure ends an unbounded interval (an MCB end at +-inf): one point past the finite means and interval
    ends of `differences`."""
    finite = [v for d in differences for v in (d.mean, d.ci_low, d.ci_high) if v is not None and np.isfinite(v)]
    return min(finite) - 1.0, max(finite) + 1.0


def interval_label(comparison: PairedComparison) -> str:
    """The interval column's name, which says its procedure."""
    return "95% CI (paired t)" if comparison.procedure == PAIRED_T else "simultaneous 95% CI (MCB)"


def procedure_note(comparison: PairedComparison) -> str:
    """Which procedure made each column, and what it assumes (the note under the table)."""
    score, n_rows = comparison.score, comparison.family
    text = (f"Paired against the reference {_text(comparison.reference.configuration)} ({comparison.reference.how}): "
            f"per seed, the configuration's {score} minus the reference's, then averaged; the seed is the unit "
            "(one seed's tasks come from one model). ")
    if comparison.procedure == PAIRED_T:
        text += ("95% CI: the paired t-interval over the shared seeds, per row (it assumes roughly normal "
                 f"per-seed differences); p (Holm): the paired t-test's p adjusted by Holm over the {n_rows} "
                 "comparisons of this table, * where the difference stands for the family at 0.05. ")
    else:
        text += ("The reference was chosen for its best mean, which makes every other configuration look worse, so "
                 "the intervals account for that choice: Hsu's multiple comparisons with the best over the "
                 f"{n_rows} configurations (a paired t per pair, Bonferroni over the {n_rows - 1} comparisons each "
                 "has). With 95% probability, for all rows at once, a row's interval holds its configuration's true "
                 f"{score} minus the best true {score} among the others; an interval ending at 0 shows the "
                 "configuration is not the best, not by how much it is worse. p (MCB): the smallest family-wise "
                 "level at which it is shown not to be the best, * below 0.05. The per-comparison t-intervals, "
                 "which ignore the choice, are t_low and t_high in paired.csv. ")
    text += ("sign-flip p: the exact permutation test of a zero mean difference over the seeds' sign patterns (no "
             "normality assumed; at n seeds it cannot go below 2/2^n). P(better): the share of shared seeds where "
             "the configuration scores higher (ties count half). IQM: the mean of the middle half of the "
             "differences (n >= 5). ")
    text += " ".join(line[0].upper() + line[1:] + "." for line in _seed_note(comparison))
    text += (" A row whose |difference| is below the difference its n resolves says \"not resolved at n = k\": its "
             "seeds find a true difference of that size less than 80% of the time, so even where its interval "
             "excludes 0 its size is likely overstated.")
    return text


def _seed_note(comparison: PairedComparison) -> list[str]:
    ns = sorted({d.n for d in comparison.rows})
    return seed_lines(comparison.spread, ns[-1] if ns else 0, comparison.score, comparison.target)


def paired_markdown(comparison: PairedComparison, latex: bool = False) -> str:
    """The paired table (Markdown, or LaTeX with `latex`), its reference and procedures named under it."""
    by, paper = comparison.by, _paper_column(comparison)
    adjusted = adjusted_p_label(comparison)
    header = [*by, f"{comparison.score} difference", interval_label(comparison), adjusted, "sign-flip p",
              "P(better)", "IQM", "n"] + (["paper"] if paper else [])
    rows = []
    for i, d in enumerate(comparison.rows):
        if d.ci_low is None:
            interval = p_text = flip = better = "-"
        else:
            interval = f"[{_signed(d.ci_low)}, {_signed(d.ci_high)}]"
            p_text = _p(d.p_adjusted) + ("*" if d.p_adjusted < 0.05 else "")
            flip, better = _p(d.p_signflip), f"{d.p_improvement:.2f}"
        mean = f"{d.mean:+.2f}" + (f" ({d.note})" if d.note else "")
        rows.append([*(_cell(d.configuration[key]) for key in by), mean, interval, p_text, flip, better,
                     "-" if d.iqm is None else f"{d.iqm:+.2f}", str(d.n)] + ([paper[i]] if paper else []))
    note = procedure_note(comparison)
    if paper:
        note += (" paper: the paper's own difference to the SimCSE figure it reports (MoCoSE, GS-InfoNCE: 76.25; "
                 "MixCSE: its re-run, 74.83).")
    if comparison.left_out:
        note += (f" Not compared (fewer than {MIN_PAIRED} seeds shared with the reference): "
                 f"{'; '.join(comparison.left_out)}.")
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


def _p(value: float) -> str:
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _signed(value: float) -> str:
    if value == 0:  # an MCB interval's end at 0 exactly
        return "0"
    return "-inf" if value == -np.inf else "+inf" if value == np.inf else f"{value:+.2f}"

