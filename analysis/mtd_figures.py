"""The MTD figures' data steps (MoCoSE Figs. 2, 3 and 4): score, alignment and uniformity against the maximum
traceable distance. Each configuration (a combination of `by`) is its own point at its MTD; the trend is a quadratic
over all trials, its statistics (Spearman, fit, best MTD and Fieller's interval) in the data's `attrs["stats"]`.
Against the measured distance (`mtd_source="measured"`) the texts say so, and the papers' marks, eq. 4's distances,
say that.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Sequence

import pandas as pd

from analysis import figure_data as fd
from analysis import paper_values
from analysis.stats import fit_peak, seed_summary, spearman

MTD_COLUMNS = ["series", "group", "x", "mean", "std", "n", "lo", "hi", "steps_from_best"]


def mtd_names(mtd_source: str) -> tuple[str, str]:
    """How a figure names its x, "MTD" (eq. 4's) or "measured MTD", and its x label (a log axis)."""
    if mtd_source not in ("formula", "measured"):
        raise ValueError(f"mtd_source must be 'formula' or 'measured', got {mtd_source!r}")
    name = "measured MTD" if mtd_source == "measured" else "MTD"
    return name, f"{name} (steps), log scale"


def score_vs_mtd(entry: Any, trials: pd.DataFrame, score: str = "avg", by: Sequence[str] | None = None,
                 mtd_source: str = "formula", size: str = fd.DEFAULT_SIZE, per_batch: bool = False) -> fd.Plot:
    """MoCoSE Fig. 2: score vs MTD, a point per configuration of `by`, the fitted trend and the best MTD.
    `per_batch` (Fig. 3): a series per batch size, each with a trend where it has >= 3 MTD values."""
    name, xlabel = mtd_names(mtd_source)
    trials = trials[trials["mtd"].notna() & trials[score].notna()]
    if trials.empty:
        raise ValueError("no MoCoSE trials with an MTD and a score to plot")
    keys = fd.series_columns(trials, ["batch_size"] if per_batch else (), by)
    groups = ([(f"B={int(b)}", group) for b, group in trials.groupby("batch_size", sort=True)] if per_batch
              else [("measured", trials)])
    series, parts, stats = zip(*(mtd_group(group, score, label, i, keys, None if per_batch else "trend")
                                 for i, (label, group) in enumerate(groups)))
    stats = dict(zip((label for label, _ in groups), stats))
    paper, lines, paper_data = paper_mtd(trials["mtd"], score, mtd_source == "measured", table3=not per_batch)
    what, notes = f"{fd.score_label(score)} vs {name}", []
    if per_batch:
        title, stats = entry.title(f"{what} per batch size"), {"score": score, "groups": stats}
        counts = pd.concat(parts).query("series == 'measured'")["n"]
        notes.append(f"a point per configuration: {fd.spread_note(counts)}")
        if any(points.trend is not None for points in series):
            notes.append("lines: quadratic in log(MTD) over each batch size's trials")
    else:
        title, stats = entry.title(what), stats["measured"]
        title += f"\nSpearman rho = {stats.get('spearman_rho', math.nan):.2f} over {len(trials)} trials"
    notes += [] if fd.paper_comparable(score) else [fd.PAPER_LEFT_OUT]
    panel = fd.Panel((*series, *paper), fd.wrap(title, fd.panel_width(size), fd.TITLE_PT), xlabel,
                     fd.ylabel(fd.score_label(score), size), log_x=True, lines=lines)
    return _plot((panel,), [*parts, paper_data], keys, stats, "\n".join(notes) or None)


score_vs_mtd_by_batch = partial(score_vs_mtd, per_batch=True)


def align_uniform_vs_mtd(entry: Any, trials: pd.DataFrame, by: Sequence[str] | None = None,
                         mtd_source: str = "formula", size: str = fd.DEFAULT_SIZE) -> fd.Plot:
    """MoCoSE Fig. 4: alignment and uniformity (lower is better) vs MTD, a panel each, a point per configuration."""
    name, xlabel = mtd_names(mtd_source)
    trials = trials[trials["mtd"].notna()]
    keys = fd.series_columns(trials, (), by)
    panels, parts, stats = [], [], {}
    for metric, quantity in (("align", "alignment"), ("uniform", "uniformity")):
        points = mtd_points(trials, metric, keys).sort_values("x", kind="stable")
        points = points.assign(series="measured", group=metric)
        correlation = spearman(trials["mtd"], trials[metric])
        stats[metric] = {"spearman_rho": correlation.rho, "spearman_p": correlation.pvalue, "n": correlation.n}
        series = fd.Series(f"a point per configuration: {fd.spread_note(points['n'])}", 0, tuple(points["x"]),
                           tuple(points["mean"]), tuple(points["std"]), tuple(points["n"]))
        title = f"{quantity} vs {name} (Spearman rho = {correlation.rho:.2f})"
        panels.append(fd.Panel((series,), fd.wrap(title, fd.panel_width(size, 2), fd.TITLE_PT), xlabel,
                               fd.ylabel(f"{quantity} (lower is better)", size), log_x=True))
        parts.append(points)
    splits = trials["align_uniform_split"].dropna().unique() if "align_uniform_split" in trials.columns else []
    split = str(splits[0]).removeprefix("stsb-") if len(splits) == 1 else None  # stsb-dev / stsb-test (older: dev)
    title = entry.title(f"Alignment and uniformity vs {name}") + (f", STS-B {split}" if split else "")
    return _plot(tuple(panels), parts, keys, stats, None, fd.wrap(title, fd.SIZES[size], 8.5))


def mtd_group(trials: pd.DataFrame, score: str, label: str, index: int, keys: Sequence[str],
              fit_label: str | None) -> tuple[fd.Series, pd.DataFrame, dict[str, Any]]:
    """A point per configuration (`keys`) at its MTD and, where there are >= 3 MTD values, the trend and best MTD:
    (the series, the data drawn, the statistics). `fit_label` None: points and best MTD labelled by `label`."""
    points = mtd_points(trials, score, keys).assign(series="measured", group=label)
    correlation = spearman(trials["mtd"], trials[score])
    stats: dict[str, Any] = {"score": score, "spearman_rho": correlation.rho, "spearman_p": correlation.pvalue,
                             "n_trials": correlation.n}
    parts, trend = [points], None
    if points["x"].nunique() >= 3:
        fit = fit_peak(trials["mtd"], trials[score], log_x=True)
        points["steps_from_best"] = points["x"] - fit.best_x
        interval = (f"{fit.ci_level:.0%} Fieller CI {fit.ci_low:.1f}-{fit.ci_high:.1f}" if fit.located
                    else f"not located: {fit.ci_level:.0%} Fieller CI the whole range")
        trend = fd.Trend(fit, f"{fit_label}: quadratic in log(MTD), all trials" if fit_label else None,
                         f"{'best MTD' if fit_label else f'{label}: best MTD'} {fit.best_x:.1f} ({interval})")
        parts += [pd.DataFrame({"series": "fit", "group": label, **dict(zip(("x", "mean"), fit.curve()))}),
                  pd.DataFrame({"series": ["best MTD"], "group": [label], "x": [fit.best_x], "mean": [fit.best_y],
                                "n": [fit.n], "lo": [fit.ci_low], "hi": [fit.ci_high]})]
        stats.update({
            "fit": "quadratic in log(MTD)", "coefficients": list(fit.coefficients),
            "best_mtd": fit.best_x, "best_score": fit.best_y, "ci_low": fit.ci_low, "ci_high": fit.ci_high,
            "ci_level": fit.ci_level, "ci_method": "Fieller, projected onto the MTD range",
            "peak_located": fit.located, "mtd_range": [fit.x_min, fit.x_max]})
    name = f"a point per configuration: {fd.spread_note(points['n'])}" if fit_label else label
    series = fd.Series(name, index, tuple(points["x"]), tuple(points["mean"]), tuple(points["std"]),
                       tuple(points["n"]), trend=trend)
    return series, pd.concat(parts, ignore_index=True), stats


def mtd_points(trials: pd.DataFrame, value: str, keys: Sequence[str] = ()) -> pd.DataFrame:
    """Mean ± std of `value` over the seeds of each configuration (`keys`), at its MTD."""
    keyed = trials.assign(_mtd=trials["mtd"].round(6))
    return seed_summary(keyed, value, ["_mtd", *keys]).rename(columns={"_mtd": "x"})


def paper_mtd(mtd: pd.Series, score: str, measured: bool, table3: bool = True
              ) -> tuple[tuple[fd.Series, ...], tuple[tuple[float, str], ...], pd.DataFrame]:
    """The papers' marks near the study's MTD range (so they never rescale it), as (series, lines, data): Table 3's
    scores beside the same score only; the best MTD (a line) always, saying what it is best by."""
    low, high = float(mtd.min()) / 1.5, float(mtd.max()) * 1.5
    formula = ", by eq. 4" if measured else ""
    rows, table, best = [], (), ()
    points = {x: y for x, y in paper_values.mocose_table3_as_mtd().items() if low <= x <= high}
    if table3 and fd.paper_comparable(score) and points:
        label = f"paper (Table 3 eta sweep, K=512, B=64{formula})"
        table = (fd.Series(label, -1, tuple(points), tuple(points.values())),)
        rows += [{"series": "paper", "group": "MoCoSE Table 3", "x": x, "mean": y} for x, y in points.items()]
    where = paper_values.BEST_MTD["bert-base"]
    if low <= where <= high:
        by = "" if fd.paper_comparable(score) else ", by the seven-task average"
        best = ((where, f"paper best MTD {where} (bert-base{by}{formula})"),)
        rows.append({"series": "paper best MTD", "group": "MoCoSE section 5.7", "x": where, "mean": math.nan})
    return table, best, pd.DataFrame(rows, columns=MTD_COLUMNS)


def _plot(panels: tuple[fd.Panel, ...], parts: list[pd.DataFrame], keys: list[str], stats: dict[str, Any],
          note: str | None, suptitle: str | None = None) -> fd.Plot:
    frame = pd.DataFrame(pd.concat(parts, ignore_index=True), columns=MTD_COLUMNS + keys)
    frame.attrs["stats"] = stats
    return fd.Plot(panels, frame, note, suptitle)
