"""Paired differences against a reference configuration (analysis.paired), each number against an independent
computation: scipy.stats.bootstrap for the interval, NumPy written from the definition for the stratified one,
the probability counted seed by seed."""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats

from analysis import paired
from analysis.load import load_results
from analysis.report import analyze
from tests import synthetic_results as fx
from tests.helpers import REPO, first_fast
from tests.written_out import holm_written_out, mcb_written_out
from trainer.vocabulary import STS_TASKS


def stand_in(per_seed: dict[float, list[float]], tasks: dict[float, np.ndarray] | None = None) -> pd.DataFrame:
    """A results table: one configuration per ema.decay, its avg over seeds 0.. as given (and per-task scores)."""
    rows = []
    for eta, scores in per_seed.items():
        for seed, score in enumerate(scores):
            row = {"ema.decay": eta, "seed": seed, "avg": score}
            if tasks is not None:
                row.update(dict(zip(STS_TASKS, tasks[eta][seed])))
            rows.append(row)
    return pd.DataFrame(rows)


def t_interval(d: np.ndarray) -> tuple[float, float, float]:
    """The paired t-interval and two-sided p written out: mean +- t_{n-1,0.975} sd / sqrt(n)."""
    n, mean, se = len(d), d.mean(), d.std(ddof=1) / np.sqrt(len(d))
    half = scipy_stats.t.ppf(0.975, n - 1) * se
    return mean - half, mean + half, 2 * scipy_stats.t.sf(abs(mean / se), n - 1)


def sign_flip(d: np.ndarray) -> float:
    """The two-sided sign-flip p, every sign pattern enumerated."""
    means = [np.mean(d * signs) for signs in itertools.product((1, -1), repeat=len(d))]
    return float(np.mean(np.abs(means) >= abs(d.mean()) - 1e-12))


NAMED = paired.Reference({"ema.decay": 0.85}, True, "the study's reference")


def test_the_differences_intervals_and_probabilities_equal_an_independent_computation():
    rng = np.random.default_rng(0)
    reference = rng.normal(76.0, 0.5, 8)
    better = reference + rng.normal(0.4, 0.3, 8)
    table = stand_in({0.85: list(reference), 0.9: list(better)})
    comparison = paired.paired_differences(table, ["ema.decay"], NAMED, "avg")
    [d] = comparison.rows
    diffs = better - reference
    assert comparison.left_out == [] and d.n == 8 and d.mean == pytest.approx(diffs.mean(), abs=1e-12)
    low, high, p = t_interval(diffs)
    assert (d.ci_low, d.ci_high, d.p_value) == (pytest.approx(low), pytest.approx(high), pytest.approx(p))
    assert (d.t_low, d.t_high) == (d.ci_low, d.ci_high) and comparison.procedure == paired.PAIRED_T
    assert d.p_adjusted == pytest.approx(p)  # a family of one
    assert d.p_signflip == pytest.approx(sign_flip(diffs))
    assert d.p_improvement == sum(1.0 if x > 0 else 0.5 if x == 0 else 0.0 for x in diffs) / 8
    assert d.iqm == pytest.approx(scipy_stats.trim_mean(diffs, 0.25))


def test_the_seven_task_average_takes_the_seed_as_its_unit():
    """One seed's seven task scores come from one model: the interval is the per-seed average's t-interval,
    never a resampling of each task's seeds apart."""
    rng = np.random.default_rng(3)
    ref_tasks = rng.normal(75.0, 2.0, (6, 7))
    shared = rng.normal(0.3, 0.8, (6, 1))  # a seed's tasks move together
    new_tasks = ref_tasks + shared + rng.normal(0.0, 0.3, (6, 7))
    table = stand_in({0.85: list(ref_tasks.mean(1)), 0.9: list(new_tasks.mean(1))},
                     tasks={0.85: ref_tasks, 0.9: new_tasks})
    [d] = paired.paired_differences(table, ["ema.decay"], NAMED, "avg").rows
    low, high, _ = t_interval(new_tasks.mean(1) - ref_tasks.mean(1))
    assert (d.ci_low, d.ci_high) == (pytest.approx(low), pytest.approx(high))
    # and each task keeps its own paired interval in the per-task table
    tasks = paired.task_frame(table, ["ema.decay"], NAMED)
    assert list(tasks["task"]) == list(STS_TASKS)
    for t, row in enumerate(tasks.itertuples()):
        low, high, p = t_interval(new_tasks[:, t] - ref_tasks[:, t])
        assert (row.t_low, row.t_high, row.p_value) == (pytest.approx(low), pytest.approx(high), pytest.approx(p))


def test_holm_adjusts_the_named_references_family_as_written_out():
    rng = np.random.default_rng(8)
    reference = rng.normal(76.0, 1.0, 5)
    per_seed = {0.85: list(reference)}
    for eta, shift in ((0.5, -1.5), (0.8, 0.05), (0.9, 0.4), (0.95, -0.1)):
        per_seed[eta] = list(reference + shift + rng.normal(0.0, 0.3, 5))
    rows = paired.paired_differences(stand_in(per_seed), ["ema.decay"], NAMED, "avg").rows
    p = np.array([t_interval(np.array(per_seed[d.configuration["ema.decay"]]) - reference)[2] for d in rows])
    assert [d.p_adjusted for d in rows] == pytest.approx(list(holm_written_out(p)))
    assert rows[0].configuration == {"ema.decay": 0.5} and rows[0].p_adjusted < 0.05


def test_against_a_best_chosen_from_the_data_the_intervals_are_hsus_mcb():
    rng = np.random.default_rng(5)
    seed_effect = rng.normal(0.0, 1.0, 4)
    etas = (0.5, 0.8, 0.85, 0.9)
    scores = np.array([76.0 + shift + seed_effect + rng.normal(0.0, 0.3, 4)
                       for shift in (-1.0, 0.0, 0.1, 0.3)])
    table = stand_in(dict(zip(etas, map(list, scores))))
    reference = paired.reference_configuration(table, ["ema.decay"], "avg", None)
    assert reference == paired.Reference({"ema.decay": 0.9}, False, "the best mean avg; the study names none")
    comparison = paired.paired_differences(table, ["ema.decay"], reference, "avg")
    assert comparison.procedure == paired.MCB and comparison.family == 4
    expected = mcb_written_out(scores)
    for d, eta in zip(comparison.rows, (0.5, 0.8, 0.85)):
        i = etas.index(eta)
        assert (d.ci_low, d.ci_high) == (pytest.approx(expected[i][0]), pytest.approx(expected[i][1]))
        low, high, _ = t_interval(scores[i] - scores[3])
        assert (d.t_low, d.t_high) == (pytest.approx(low), pytest.approx(high))
    # the clearly worse configuration is shown not to be the best, and its p says at what level
    assert comparison.rows[0].ci_high == 0.0 and comparison.rows[0].p_adjusted < 0.05
    text = paired.paired_markdown(comparison)
    assert "simultaneous 95% CI (MCB)" in text and "Hsu's multiple comparisons with the best" in text


def test_two_shared_seeds_give_no_interval_and_one_leaves_the_configuration_out():
    table = stand_in({0.85: [76.0, 76.5, 77.0], 0.9: [76.5, 76.5], 0.95: [75.0]})
    comparison = paired.paired_differences(table, ["ema.decay"], NAMED, "avg")
    [d] = comparison.rows
    assert (d.configuration, d.n, d.mean, d.ci_low, d.note) == ({"ema.decay": 0.9}, 2, 0.25, None,
                                                                "n = 2: no interval")
    assert d.p_improvement is None and d.iqm is None  # P(better) is never shown without its interval
    assert comparison.left_out == ["ema.decay=0.95 (n = 1)"]
    # the reference lacks seed 2: a configuration with seeds 1 and 2 shares one seed only
    table = stand_in({0.85: [76.0, 76.5], 0.9: [76.0, 76.2, 76.4]})
    table = table[~((table["ema.decay"] == 0.9) & (table["seed"] == 0))]
    assert paired.paired_differences(table, ["ema.decay"], NAMED, "avg").left_out == ["ema.decay=0.9 (n = 1)"]


def test_without_a_named_reference_the_best_mean_is_it_and_said_so():
    table = stand_in({0.5: [75.0, 75.2], 0.85: [76.0, 76.4], 0.9: [75.5, 75.9]})
    assert paired.reference_configuration(table, ["ema.decay"], "avg", None) == paired.Reference(
        {"ema.decay": 0.85}, False, "the best mean avg; the study names none")
    assert paired.reference_configuration(table, ["ema.decay"], "avg", {"ema.decay": 0.5}).how == \
        "the study's reference"
    # a best mean over one seed cannot be paired: the best of those with two seeds or more is the reference
    table = pd.concat([table, stand_in({0.99: [80.0]})])
    assert paired.reference_configuration(table, ["ema.decay"], "avg", None).configuration == {"ema.decay": 0.85}


def test_a_named_reference_without_finished_trials_skips_the_paired_outputs_with_a_warning(tmp_path):
    folder = fx.stand_in_study(REPO / "studies" / "ema_decay.yaml", tmp_path / "ema", 3)
    reference = pd.read_csv(folder / "trials.csv")
    named = yaml.safe_load((folder / "study.yaml").read_text())["reference"]
    (key,) = named
    for row in reference[reference[key] == named[key]].itertuples():  # the reference's trials: removed
        shutil.rmtree(folder / "trials" / row.key)
    with pytest.warns(UserWarning, match="paired differences skipped: no finished trial has the study's reference"):
        names = {p.name for p in analyze(folder, formats=["png"])}
    assert "scores.md" in names and not names & {"paired.md", "paired.csv", "paired_differences.png"}


@pytest.mark.parametrize("study, seeds", first_fast(
    ("gaussian_m", 3), ("gaussian_m", 1), ("gaussian_m", 5), ("mix_lambda", 1), ("mix_lambda", 3), ("mix_lambda", 5),
    ("mtd_grid", 1), ("mtd_grid", 3), ("mtd_grid", 5)))
def test_analyze_writes_the_paired_table_and_figure_at_three_and_five_seeds(tmp_path, study, seeds):
    folder = fx.stand_in_study(REPO / "studies" / f"{study}.yaml", tmp_path / study, seeds)
    names = {p.name for p in analyze(folder, formats=["png"])}
    paired_files = {"paired.md", "paired.tex", "paired.csv", "paired_differences.png"}
    if seeds == 1:
        assert not names & paired_files  # nothing shares two seeds
        return
    assert paired_files <= names
    rows = pd.read_csv(folder / "figures" / "paired.csv")
    assert (rows["n"] == seeds).all() and rows["ci_low"].notna().all()
    assert rows["iqm"].notna().all() == (seeds >= 5)
    assert (rows["interval"] == "paired t").all() and (rows["ci_low"] == rows["t_low"]).all()
    assert rows["p_adjusted"].between(0, 1).all() and (rows["p_adjusted"] >= rows["p_value"] - 1e-12).all()
    assert (rows["resolvable"] > 0).all()
    unresolved = rows["mean_difference"].abs() < rows["resolvable"]
    assert (rows.loc[unresolved, "note"] == f"not resolved at n = {seeds}").all()
    text = (folder / "figures" / "paired.md").read_text()
    assert "Paired against the reference " in text and "(the study's reference)" in text
    assert "p (Holm)" in text and f"{seeds} seeds resolve " in text


def test_a_study_without_a_reference_gets_selection_aware_intervals_in_every_output(tmp_path):
    folder = fx.stand_in_study(REPO / "studies" / "ema_decay.yaml", tmp_path / "ema", 4)
    spec = yaml.safe_load((folder / "study.yaml").read_text())
    del spec["reference"]
    spec["analysis"] = {"target_difference": 0.3}
    (folder / "study.yaml").write_text(yaml.safe_dump(spec))
    analyze(folder, formats=["png"])
    rows = pd.read_csv(folder / "figures" / "paired.csv")
    table = load_results(folder)
    scores = np.array([group.sort_values("seed")["avg"].to_numpy()
                       for _, group in table.groupby("ema.decay", sort=True)])
    best = int(np.argmax(scores.mean(axis=1)))
    expected = [bounds for i, bounds in enumerate(mcb_written_out(scores)) if i != best]
    assert (rows["interval"] == "Hsu MCB").all()
    assert list(zip(rows["ci_low"], rows["ci_high"])) == [pytest.approx(bounds) for bounds in expected]
    text = (folder / "figures" / "paired.md").read_text()
    assert "the best mean avg; the study names none" in text and "simultaneous 95% CI (MCB)" in text
    assert "A difference of 0.3 (analysis.target_difference) needs " in text


def test_the_methods_table_states_each_method_against_simcse_beside_the_papers(tmp_path):
    folder = fx.stand_in_study(REPO / "studies" / "methods.yaml", tmp_path / "methods", 3)
    analyze(folder, formats=["png"])
    text = (folder / "figures" / "paired.md").read_text()
    assert "reference method=simcse, variant=paper (the study's reference)" in text
    lines = [line for line in text.splitlines() if line.startswith("| mocose | paper |")]
    assert len(lines) == 1 and lines[0].rstrip().endswith("| +1.02 |")  # 77.27 - 76.25, MoCoSE Table 1
    assert any(line.startswith("| mix | paper |") and line.rstrip().endswith("| +2.83 |") for line in text.splitlines())


def test_a_key_a_configuration_does_not_set_reads_as_a_dash_not_nan():
    rows = []
    for seed in range(3):
        rows.append({"method": "simcse", "dcl.sigma": float("nan"), "seed": seed, "avg": 76.0 + seed / 10})
        rows.append({"method": "dcl", "dcl.sigma": 0.5, "seed": seed, "avg": 76.2 + seed / 10})
    reference = paired.Reference({"method": "simcse", "dcl.sigma": float("nan")}, True, "the study's reference")
    comparison = paired.paired_differences(pd.DataFrame(rows), ["method", "dcl.sigma"], reference)
    text = paired.paired_markdown(comparison)
    assert "nan" not in text and "| dcl | 0.5 |" in text and "method=simcse, dcl.sigma=nan" not in text


def test_has_pairs_answers_as_every_pair_compared_and_never_compares_pairs(monkeypatch):
    """Random small tables against the question asked pair by pair (NaN keys, scores missing, repeated seeds);
    then 10,000 configurations: the subsets the search forms stay linear in them (no pair is ever formed)."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        rows = [{"a": rng.choice([0.1, 0.2, np.nan]), "b": int(rng.integers(3)), "seed": int(rng.integers(5)),
                 "avg": np.nan if rng.random() < 0.2 else 1.0} for _ in range(int(rng.integers(0, 14)))]
        table = pd.DataFrame(rows, columns=["a", "b", "seed", "avg"])
        seeds: dict[tuple, set] = {}
        for row in rows:
            if not np.isnan(row["avg"]):
                seeds.setdefault((repr(row["a"]), row["b"]), set()).add(row["seed"])
        written_out = any(len(seeds[x] & seeds[y]) >= paired.MIN_PAIRED for x, y in itertools.combinations(seeds, 2))
        assert paired.has_pairs(table, ["a", "b"], "avg") == written_out
    formed = []
    counting = type("counting", (), {"combinations": staticmethod(
        lambda s, r: formed.append(1) or itertools.combinations(s, r))})
    monkeypatch.setattr(paired, "itertools", counting)
    one_seed = pd.DataFrame({"a": np.arange(10_000) * 1e-7, "seed": 0, "avg": 1.0})  # the grid benchmark
    assert not paired.has_pairs(one_seed, ["a"], "avg") and len(formed) == 10_000
    chain = pd.DataFrame({"a": np.repeat(np.arange(10_000), 2), "seed": np.stack([np.zeros(10_000, int),
                                                                                  np.arange(1, 10_001)], 1).ravel(),
                          "avg": 1.0})  # every configuration shares seed 0 with every other, and only it
    formed.clear()
    assert not paired.has_pairs(chain, ["a"], "avg") and len(formed) == 10_000
