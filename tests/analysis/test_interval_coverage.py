"""The intervals `sweep analyze` prints have the coverage they claim at the seed counts users run: seeded
simulations (analysis.coverage) that draw studies with a known truth and call the analysis's own procedures
(analysis.intervals.paired_t and mcb_bounds, which paired_differences uses; analysis.stats.fit_peak).

With 2,000 simulated studies the standard error of a 95% coverage is 0.5 points, so 93-97% is a band of four
standard errors around the claim; the seeds are fixed, so each run draws the same studies."""

from __future__ import annotations

import pytest

from analysis import coverage


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_paired_t_interval_of_one_score_holds_the_truth_95_percent_of_the_time(n):
    measured = coverage.one_score(n, reps=2000)
    assert 0.93 <= measured.rate <= 0.97, measured


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_seven_task_averages_interval_holds_the_truth_with_tasks_correlated_within_a_seed(n):
    measured = coverage.task_average(n, rho=0.8, reps=2000)
    assert 0.93 <= measured.rate <= 0.97, measured


def test_against_a_data_chosen_best_the_family_wise_false_claims_stay_under_five_percent():
    measured = coverage.chosen_best(k=9, n=4, reps=2000)
    assert measured.rate <= 0.05, measured


@pytest.mark.parametrize("n", [3, 5])
def test_the_selection_aware_intervals_hold_every_truth_at_once_where_the_configurations_differ(n):
    measured = coverage.chosen_best_unequal(n=n, reps=2000)
    assert measured.rate >= 0.93, measured


@pytest.mark.slow  # holm_agrees calls statsmodels 200 times
def test_holms_family_wise_false_claims_against_a_named_reference_stay_under_five_percent():
    assert coverage.holm_agrees()  # the rule the simulation counts with is holm()'s own
    measured = coverage.named_reference(k=9, n=4, reps=2000)
    assert measured.rate <= 0.05 + 2 * (0.05 * 0.95 / 2000) ** 0.5, measured


@pytest.mark.parametrize("study, seeds", [("mtd_grid", 1), ("mtd_grid", 3), ("ema_decay", 3), ("ema_decay", 5),
                                          ("quickstart", 1)])
def test_the_best_mtds_interval_holds_the_peak_at_the_studies_sizes(study, seeds):
    measured = coverage.peak(study, seeds, reps=1000)
    assert measured.rate >= 0.93, measured
