"""Paired differences against a reference configuration (analysis.paired), each number against an independent
computation: scipy.stats.bootstrap for the interval, NumPy written from the definition for the stratified one,
the probability counted seed by seed."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats

from analysis import paired
from analysis.report import analyze
from tests import synthetic_results as fx
from tests.helpers import REPO, first_fast
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


def test_the_differences_intervals_and_probabilities_equal_an_independent_computation():
    rng = np.random.default_rng(0)
    reference = rng.normal(76.0, 0.5, 8)
    better = reference + rng.normal(0.4, 0.3, 8)
    table = stand_in({0.85: list(reference), 0.9: list(better)})
    [d], left_out = paired.paired_differences(table, ["ema.decay"], {"ema.decay": 0.85}, "avg", n_boot=20000)
    diffs = better - reference
    assert left_out == [] and d.n == 8 and d.mean == pytest.approx(diffs.mean(), abs=1e-12)
    ci = scipy_stats.bootstrap((diffs,), np.mean, n_resamples=20000, method="percentile", confidence_level=0.95,
                               random_state=1).confidence_interval
    assert (d.ci_low, d.ci_high) == (pytest.approx(ci.low, abs=0.03), pytest.approx(ci.high, abs=0.03))
    assert d.p_improvement == sum(1.0 if x > 0 else 0.5 if x == 0 else 0.0 for x in diffs) / 8
    assert d.iqm == pytest.approx(scipy_stats.trim_mean(diffs, 0.25)) and not d.stratified


def test_the_seven_task_average_is_bootstrapped_stratified_over_tasks_and_seeds():
    rng = np.random.default_rng(3)
    ref_tasks = rng.normal(75.0, 2.0, (6, 7))
    new_tasks = ref_tasks + rng.normal(0.3, 0.8, (6, 7))
    table = stand_in({0.85: list(ref_tasks.mean(1)), 0.9: list(new_tasks.mean(1))},
                     tasks={0.85: ref_tasks, 0.9: new_tasks})
    [d], _ = paired.paired_differences(table, ["ema.decay"], {"ema.decay": 0.85}, "avg", n_boot=20000, seed=5)
    assert d.stratified
    # from the definition: each resample draws the 6 seeds anew within each of the 7 tasks, then averages
    per_task = new_tasks - ref_tasks
    draws = np.random.default_rng(11)
    means = [np.mean([per_task[draws.integers(0, 6, 6), t].mean() for t in range(7)]) for _ in range(20000)]
    low, high = np.percentile(means, [2.5, 97.5])
    assert (d.ci_low, d.ci_high) == (pytest.approx(low, abs=0.02), pytest.approx(high, abs=0.02))
    assert d.mean == pytest.approx(per_task.mean(), abs=1e-12)
    # an average that is not the mean of the seven tasks (another protocol's): resampled as one score instead
    table["avg"] += np.where(table["seed"] == 0, 0.5, 0.0)
    [d], _ = paired.paired_differences(table, ["ema.decay"], {"ema.decay": 0.85}, "avg", n_boot=200, seed=5)
    assert not d.stratified


def test_two_shared_seeds_give_no_interval_and_one_leaves_the_configuration_out():
    table = stand_in({0.85: [76.0, 76.5, 77.0], 0.9: [76.5, 76.5], 0.95: [75.0]})
    found, left_out = paired.paired_differences(table, ["ema.decay"], {"ema.decay": 0.85}, "avg")
    [d] = found
    assert (d.configuration, d.n, d.mean, d.ci_low, d.note) == ({"ema.decay": 0.9}, 2, 0.25, None,
                                                                "n = 2: no interval")
    assert d.p_improvement == 0.75 and d.iqm is None
    assert left_out == ["ema.decay=0.95 (n = 1)"]
    # the reference lacks seed 2: a configuration with seeds 1 and 2 shares one seed only
    table = stand_in({0.85: [76.0, 76.5], 0.9: [76.0, 76.2, 76.4]})
    table = table[~((table["ema.decay"] == 0.9) & (table["seed"] == 0))]
    assert paired.paired_differences(table, ["ema.decay"], {"ema.decay": 0.85}, "avg")[1] == [
        "ema.decay=0.9 (n = 1)"]


def test_without_a_named_reference_the_best_mean_is_it_and_said_so():
    table = stand_in({0.5: [75.0, 75.2], 0.85: [76.0, 76.4], 0.9: [75.5, 75.9]})
    assert paired.reference_configuration(table, ["ema.decay"], "avg", None) == (
        {"ema.decay": 0.85}, "the best mean avg; the study names none")
    assert paired.reference_configuration(table, ["ema.decay"], "avg", {"ema.decay": 0.5})[1] == \
        "the study's reference"
    # a best mean over one seed cannot be paired: the best of those with two seeds or more is the reference
    table = pd.concat([table, stand_in({0.99: [80.0]})])
    assert paired.reference_configuration(table, ["ema.decay"], "avg", None)[0] == {"ema.decay": 0.85}


def test_a_named_reference_without_finished_trials_skips_the_paired_outputs_with_a_warning(tmp_path):
    folder = fx.stand_in_study(REPO / "studies" / "ema_decay.yaml", tmp_path / "ema", 3)
    reference = pd.read_csv(folder / "trials.csv")
    named = yaml.safe_load((folder / "study.yaml").read_text())["reference"]
    (key,) = named
    for row in reference[reference[key] == named[key]].itertuples():  # the reference's trials: removed
        shutil.rmtree(folder / "trials" / row.key)
    with pytest.warns(UserWarning, match="paired differences skipped: no finished trial has the study's reference"):
        names = {p.name for p in analyze(folder, n_boot=10, formats=["png"])}
    assert "scores.md" in names and not names & {"paired.md", "paired.csv", "paired_differences.png"}


@pytest.mark.parametrize("study, seeds", first_fast(
    ("gaussian_m", 3), ("gaussian_m", 1), ("gaussian_m", 5), ("mix_lambda", 1), ("mix_lambda", 3), ("mix_lambda", 5),
    ("mtd_grid", 1), ("mtd_grid", 3), ("mtd_grid", 5)))
def test_analyze_writes_the_paired_table_and_figure_at_three_and_five_seeds(tmp_path, study, seeds):
    folder = fx.stand_in_study(REPO / "studies" / f"{study}.yaml", tmp_path / study, seeds)
    names = {p.name for p in analyze(folder, n_boot=10, formats=["png"])}
    paired_files = {"paired.md", "paired.tex", "paired.csv", "paired_differences.png"}
    if seeds == 1:
        assert not names & paired_files  # nothing shares two seeds
        return
    assert paired_files <= names
    rows = pd.read_csv(folder / "figures" / "paired.csv")
    assert (rows["n"] == seeds).all() and rows["ci_low"].notna().all()
    assert rows["iqm"].notna().all() == (seeds >= 5)
    text = (folder / "figures" / "paired.md").read_text()
    assert "Paired against the reference " in text and "(the study's reference)" in text


def test_the_methods_table_states_each_method_against_simcse_beside_the_papers(tmp_path):
    folder = fx.stand_in_study(REPO / "studies" / "methods.yaml", tmp_path / "methods", 3)
    analyze(folder, n_boot=10, formats=["png"])
    text = (folder / "figures" / "paired.md").read_text()
    assert "reference method=simcse, variant=paper (the study's reference)" in text
    lines = [line for line in text.splitlines() if line.startswith("| mocose | paper |")]
    assert len(lines) == 1 and lines[0].rstrip().endswith("| +1.02 |")  # 77.27 - 76.25, MoCoSE Table 1
    assert any(line.startswith("| mix | paper |") and line.rstrip().endswith("| +2.83 |") for line in text.splitlines())
