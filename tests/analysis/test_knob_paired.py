"""The knob figure's paired panel (analysis.figures.figure_knob, analysis.knob_differences): where the knob's values
share seeds with the study's reference, each value's paired difference to it, with the interval and adjusted p of
the study's paired table. Every number drawn is checked against scipy.stats on the raw table (the paired t-interval
and test, Holm and Hsu's MCB written out here), never against analysis.paired's own output; without shared seeds
the figure is the score panel alone and says nothing of differences."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.container import ErrorbarContainer
from scipy import stats as scipy_stats

from analysis.figure_style import save_figure
from analysis.figures import figure_knob
from analysis.load import load_results
from analysis.report import analyze, applicable_figures, study_knobs
from tests import synthetic_results as fx
from tests.helpers import REPO
from tests.written_out import holm_written_out, mcb_written_out
from trainer.methods.plugins import load_plugins

SIGMAS = (None, 0.5, 1.0)  # DCL's knob: null (plain DCL), and DCLW at two weight temperatures
BY = ["method", "dcl.sigma"]
SIMCSE = {"method": "simcse"}


@pytest.fixture(scope="module", autouse=True)
def dcl():
    """The docs' DCL plugin, registered: dcl.sigma is a knob of its own, read by its trials alone."""
    load_plugins(["dcl.py"], REPO / "docs" / "examples" / "dcl")


def dcl_table(shifts: dict[float | None, float], seeds: int = 3, noise: float = 0.15, rng_seed: int = 4,
              skip: tuple = ()) -> pd.DataFrame:
    """SimCSE (no dcl.sigma) and DCL at each sigma of `shifts` (its shift from SimCSE), over seeds 0 .. seeds-1
    that move every configuration together; `skip`: (sigma or "simcse", seed) pairs that did not run."""
    rng = np.random.default_rng(rng_seed)
    seed_effect = rng.normal(0.0, 1.0, seeds)
    rows = []
    for seed in range(seeds):
        if ("simcse", seed) not in skip:
            rows.append({"method": "simcse", "dcl.sigma": np.nan, "seed": seed,
                         "avg": 76.0 + seed_effect[seed] + rng.normal(0.0, noise)})
        for sigma, shift in shifts.items():
            if (sigma, seed) not in skip:
                rows.append({"method": "dcl", "dcl.sigma": np.nan if sigma is None else sigma, "seed": seed,
                             "avg": 76.0 + shift + seed_effect[seed] + rng.normal(0.0, noise)})
    return pd.DataFrame(rows)


def scores(table: pd.DataFrame, method: str, sigma: float | None) -> pd.Series:
    """One configuration's avg by seed, read off the raw table."""
    rows = table[(table["method"] == method)
                 & (table["dcl.sigma"].isna() if sigma is None else table["dcl.sigma"] == sigma)]
    return rows.set_index("seed")["avg"].sort_index()


def drawn_differences(fig) -> dict[str, dict]:
    """What the lower panel shows at each x tick label: the marker's y, the bar's ends (None without a bar) and
    whether the marker is filled, read off the drawn artists."""
    ax = fig.axes[1]
    ticks = {round(float(x)): label.get_text() for x, label in zip(ax.get_xticks(), ax.get_xticklabels())}
    found = {}
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            line, _, (bars,) = container.lines
            (x,), (y,) = line.get_xdata(), line.get_ydata()
            (segment,) = bars.get_segments()
            found[ticks[round(x)]] = {"mean": y, "ends": (min(segment[:, 1]), max(segment[:, 1])),
                                      "filled": line.get_markerfacecolor() != "white"}
    in_bars = {id(line) for c in ax.containers for line in (c.lines[0], *c.lines[1])}  # markers and caps
    for line in ax.get_lines():  # points without a bar (n = 2) and the reference's own mark
        if line.get_linestyle() in ("None", "none") and id(line) not in in_bars:
            label = ticks[round(float(line.get_xdata()[0]))]
            found[label] = {"mean": float(line.get_ydata()[0]), "ends": None, "marker": line.get_marker(),
                            "filled": line.get_markerfacecolor() not in ("white", "none")}
    return found


def figure_words(fig) -> str:
    """Every text of the figure, its lines joined (the legend's are wrapped to the canvas)."""
    texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    return " ".join(" ".join(texts).split())


def test_each_value_is_drawn_against_the_named_reference_with_its_paired_t_interval_and_holm():
    table = dcl_table({None: 0.3, 0.5: 0.9, 1.0: -0.1})
    fig, data = figure_knob(table, "avg", by=BY, reference=SIMCSE)
    assert len(fig.axes) == 2 and fig.axes[1].get_title() == "Paired difference to the reference"

    reference = scores(table, "simcse", None)
    expected = {}
    for sigma in SIGMAS:
        c = scores(table, "dcl", sigma)
        test = scipy_stats.ttest_rel(c.to_numpy(), reference.loc[c.index].to_numpy())
        interval = test.confidence_interval(0.95)
        label = "default" if sigma is None else f"{sigma:g}"
        expected[label] = dict(mean=(c - reference).mean(), low=interval.low, high=interval.high, p=test.pvalue,
                               n=len(c))
    labels = list(expected)
    adjusted = dict(zip(labels, holm_written_out(np.array([expected[label]["p"] for label in labels]))))
    assert adjusted["0.5"] < 0.05 < min(adjusted["default"], adjusted["1"])  # the data make both kinds of mark

    rows = data[data["panel"] == "paired difference"].set_index("x_label")
    assert sorted(rows.index) == sorted(labels)
    drawn = drawn_differences(fig)
    for label, want in expected.items():
        row = rows.loc[label]
        assert (row["mean"], row["ci_low"], row["ci_high"], row["p_adjusted"]) == (
            pytest.approx(want["mean"]), pytest.approx(want["low"]), pytest.approx(want["high"]),
            pytest.approx(adjusted[label]))
        assert row["n"] == want["n"] == 3 and row["interval"] == "paired t"
        assert drawn[label]["mean"] == pytest.approx(want["mean"])
        assert drawn[label]["ends"] == (pytest.approx(want["low"]), pytest.approx(want["high"]))
        assert drawn[label]["filled"] == (adjusted[label] < 0.05)
    # the score panel is what it was: the mean and std of each value's seeds
    upper = data[data["panel"] == "score"].set_index("x_label")
    for sigma in SIGMAS:
        label = "default" if sigma is None else f"{sigma:g}"
        assert upper.loc[label, "mean"] == pytest.approx(scores(table, "dcl", sigma).mean())
        assert upper.loc[label, "std"] == pytest.approx(scores(table, "dcl", sigma).std(ddof=1))
    words = figure_words(fig)
    assert "the reference, method=simcse" in words and "(the study's reference)" in words
    assert "95% CI (paired t)" in words and "Holm over the study's 3 comparisons" in words
    assert "over 3 shared seeds" in words


def test_without_a_named_reference_the_best_mean_is_it_and_the_bars_are_hsus_mcb():
    table = dcl_table({None: 0.3, 0.5: 0.9, 1.0: -0.1})
    fig, data = figure_knob(table, "avg", by=BY)
    # the study's configurations, SimCSE included, in the paired table's order: (dcl, 0.5), (dcl, 1), (dcl, -),
    # (simcse, -); the best mean is DCLW at 0.5
    configurations = [("dcl", 0.5), ("dcl", 1.0), ("dcl", None), ("simcse", None)]
    matrix = np.array([scores(table, *c).to_numpy() for c in configurations])
    best = int(np.argmax(matrix.mean(axis=1)))
    assert configurations[best] == ("dcl", 0.5)
    bounds = mcb_written_out(matrix)
    rows = data[data["panel"] == "paired difference"].set_index("x_label")
    drawn = drawn_differences(fig)
    for (method, sigma), (low, high), values in zip(configurations, bounds, matrix):
        if method != "dcl" or sigma == 0.5:
            continue
        label = "default" if sigma is None else f"{sigma:g}"
        mean = (values - matrix[best]).mean()
        assert (rows.loc[label, "mean"], rows.loc[label, "ci_low"], rows.loc[label, "ci_high"]) == (
            pytest.approx(mean), pytest.approx(low), pytest.approx(high))
        assert rows.loc[label, "interval"] == "Hsu MCB"
        assert drawn[label]["mean"] == pytest.approx(mean)
        assert drawn[label]["ends"] == (pytest.approx(low), pytest.approx(high))
    # the reference is one of the knob's values: its own mark, at 0
    assert drawn["0.5"]["mean"] == 0.0 and drawn["0.5"]["ends"] is None and drawn["0.5"]["marker"] == "x"
    assert rows.loc["0.5", "series"] == "reference"
    words = figure_words(fig)
    assert "the best mean avg; the study names none" in words and "simultaneous 95% CI (MCB" in words


def test_two_shared_seeds_give_a_mean_without_a_bar_and_one_leaves_the_value_out():
    # sigma 1.0 lacks seed 2 (two shared seeds), the default lacks seeds 1 and 2 (one)
    table = dcl_table({None: 0.3, 0.5: 0.9, 1.0: -0.1}, skip=((1.0, 2), (None, 1), (None, 2)))
    fig, data = figure_knob(table, "avg", by=BY, reference=SIMCSE)
    rows = data[data["panel"] == "paired difference"].set_index("x_label")
    assert sorted(rows.index) == ["0.5", "1"]
    c, r = scores(table, "dcl", 1.0), scores(table, "simcse", None)
    assert rows.loc["1", "n"] == 2 and rows.loc["1", "mean"] == pytest.approx((c - r.loc[c.index]).mean())
    assert pd.isna(rows.loc["1", "ci_low"]) and rows.loc["0.5", "n"] == 3
    drawn = drawn_differences(fig)
    assert drawn["1"]["ends"] is None and not drawn["1"]["filled"] and "default" not in drawn
    labels = {t.get_text() for t in fig.axes[1].texts}
    assert labels == {"n=2", "n=3"}  # n differs between the points: each carries its own
    words = figure_words(fig)
    assert "no bar: 2 shared seeds, no interval" in words
    assert "not drawn: 1 of the knob's configurations, sharing fewer than 2 seeds with the reference" in words


@pytest.mark.parametrize("reference", [SIMCSE, None], ids=["named: paired t", "best mean: MCB"])
def test_with_two_seeds_everywhere_no_interval_is_named_only_the_missing_bars(reference):
    fig, data = figure_knob(dcl_table({None: 0.3, 0.5: 0.9, 1.0: -0.1}, seeds=2), "avg", by=BY, reference=reference)
    rows = data[data["panel"] == "paired difference"]
    assert rows["ci_low"].isna().all() and not rows.empty
    words = figure_words(fig)
    assert "no bar: 2 shared seeds, no interval" in words
    assert not re.search(r"bar: its|95% CI|filled where|p \((Holm|MCB)\)", words), words


@pytest.mark.parametrize("case", ["one seed each", "no seed shared", "one seed shared"])
def test_without_two_shared_seeds_the_figure_is_the_score_panel_alone(case):
    if case == "one seed each":
        table = dcl_table({None: 0.3, 0.5: 0.9, 1.0: -0.1}, seeds=1)
    else:  # every configuration its own seeds (or one in common)
        table = dcl_table({None: 0.3, 0.5: 0.9, 1.0: -0.1}, seeds=2)
        table["seed"] = table["seed"] + 10 * table.groupby(BY, dropna=False).ngroup()
        if case == "one seed shared":
            table.loc[table["seed"] % 10 == 0, "seed"] = 0
    for reference in (SIMCSE, None):
        fig, data = figure_knob(table, "avg", by=BY, reference=reference)
        assert len(fig.axes) == 1
        assert (data["panel"] == "score").all() and data["ci_low"].isna().all()
        words = figure_words(fig)
        assert not re.search("\u0394|reference|paired|shared seeds", words), words
        assert fig.axes[0].get_title() == "dcl.sigma (this study's ablation)"


def test_the_figure_with_its_paired_panel_has_no_type3_fonts(tmp_path):
    fig, _ = figure_knob(dcl_table({None: 0.3, 0.5: 0.9, 1.0: -0.1}), "avg", by=BY, reference=SIMCSE)
    save_figure(fig, tmp_path / "knob.pdf", "pdf")
    pdf = (tmp_path / "knob.pdf").read_bytes()
    assert b"/FontFile2" in pdf and not re.search(rb"/Subtype\s*/Type3", pdf)


def temperature_study(folder, reference: dict | None, seeds: int = 3):
    """A results folder sweeping the temperature (a RunConfig number key no paper figure is for) over 3 values
    and 3 seeds, the study naming `reference`."""
    rng = np.random.default_rng(11)
    seed_effect = rng.normal(0.0, 1.0, seeds)
    trials = [fx.make_trial(fx.base_config("simcse", temperature=tau), seed,
                            round(76.0 + shift + seed_effect[seed] + rng.normal(0.0, 0.1), 4))
              for tau, shift in ((0.05, 0.0), (0.1, 0.6), (0.2, -0.4)) for seed in range(seeds)]
    fx.write_results(folder, trials, ["temperature"])
    spec = {"name": folder.name, "parameters": {"temperature": [0.05, 0.1, 0.2]}}
    if reference is not None:
        spec["reference"] = reference
    (folder / "study.yaml").write_text(yaml.safe_dump(spec))
    return folder


@pytest.mark.parametrize("reference", [{"temperature": 0.1}, None])
def test_analyze_draws_the_knob_against_the_reference_of_the_paired_table(tmp_path, reference):
    folder = temperature_study(tmp_path / "temperature", reference)
    analyze(folder, formats=["png"])
    knob = pd.read_csv(folder / "figures" / "knob.csv")
    table = pd.read_csv(folder / "figures" / "paired.csv")
    rows = knob[(knob["panel"] == "paired difference") & (knob["series"] != "reference")]
    # the same reference, the same procedure, the same numbers as the study's paired table
    assert rows["x"].tolist() == table["temperature"].tolist()
    for column, want in (("mean", "mean_difference"), ("ci_low", "ci_low"), ("ci_high", "ci_high"),
                         ("interval", "interval"), ("p_adjusted", "p_adjusted"), ("n", "n")):
        assert rows[column].tolist() == (pytest.approx(table[want].tolist()) if rows[column].dtype.kind == "f"
                                         else table[want].tolist()), column
    # and against the raw trials: the reference is the study's, or the best mean
    trials = load_results(folder)
    by_tau = {tau: group.set_index("seed")["avg"].sort_index() for tau, group in trials.groupby("temperature")}
    chosen = 0.1 if reference else max(by_tau, key=lambda tau: by_tau[tau].mean())
    assert knob.loc[knob["series"] == "reference", "x"].tolist() == [chosen]
    for row in rows.itertuples():
        assert row.mean == pytest.approx((by_tau[row.x] - by_tau[chosen]).mean())
    params, knobs = study_knobs(folder, trials)
    plans = dict(applicable_figures(trials, params, "avg", knobs=knobs, reference=reference))
    assert len(plans["knob"]()[0].axes) == 2


def test_methods_that_read_the_same_knob_stay_apart_in_both_panels():
    """The temperature is read by every method: SimCSE's and GS-InfoNCE's trials are two series, never pooled,
    each point against the one reference."""
    rows = [{"method": method, "temperature": tau, "seed": seed, "avg": 76.0 + (1.0 if method == "gs" else 0.0)
             + 2 * tau + 0.1 * seed + (0.05 * seed if method == "gs" else 0.0)}
            for method in ("simcse", "gs") for tau in (0.05, 0.1) for seed in range(3)]
    table = pd.DataFrame(rows)
    fig, data = figure_knob(table, "avg", by=["method", "temperature"],
                            reference={"method": "simcse", "temperature": 0.05})
    upper = data[data["panel"] == "score"]
    assert sorted(zip(upper["series"], upper["x_label"], upper["n"])) == [
        ("method=gs", "0.05", 3), ("method=gs", "0.1", 3), ("method=simcse", "0.05", 3), ("method=simcse", "0.1", 3)]
    lower = data[(data["panel"] == "paired difference") & (data["series"] != "reference")].set_index("series")
    assert lower.loc["method=simcse", "mean"] == pytest.approx(0.1)  # 2 x 0.05, seed by seed
    assert sorted(lower.loc["method=gs", "mean"]) == pytest.approx([1.05, 1.15])
