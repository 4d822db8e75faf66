"""Handing out a trial costs O(1) however many trials the study plans (sweep.run.ledger.Ledger.next_job).

A study may plan up to MAX_TRIALS (100,000) trials. The feed hands them out one at a time from the ledger's
queue (Ledger.to_run); a hand-out that cost O(trials left) would make a study O(n^2). The ledger is a real
Ledger whose results folder is a stand-in that writes nothing (the folder's writes are O(1) per trial and
are not what is measured), holding stand-in trials; both sizes are timed (best of a few tries, so a busy
machine slows neither by chance) and the time of the large one must grow with the trials, well below the
25x that a cost quadratic in the trials gives for 5x the trials.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

from sweep.run.feed import TrialFeed
from sweep.run.ledger import Ledger
from sweep.run.plan import StudyPlan
from sweep.spec import Metric, Resources, StudySpec, Trial
from sweep.spec.limits import MAX_TRIALS

SMALL, LARGE = 20_000, MAX_TRIALS
TRIES = 3
# 5x the trials: linear is 5x, quadratic 25x; the bound is halfway between them on a log scale (sqrt(5 x 25)),
# so a loaded machine's noise on either timing (seen: 8.3x) does not fail a linear feed, and a quadratic one fails
MAX_RATIO = (LARGE / SMALL) ** 1.5


class StandInFolder:
    """The results folder as the feed uses it, writing nothing."""

    def __init__(self, path: Path):
        self.path = path

    def clear_attempt(self, key: str) -> None:
        pass

    def write_trial_config(self, trial: Trial) -> None:
        pass

    def trial_dir(self, key: str) -> str:
        return f"{self.path}/trials/{key}"


def planned(tmp_path: Path, trials: int) -> Ledger:
    spec = StudySpec(
        name="scale", description=None, base={"model": "embedded"}, parameters={"optim.lr": [1e-5]},
        seeds=[1], method="grid", metric=Metric(), budget=None, resources=Resources(), scheduler=None,
        storage=None, results_dir=str(tmp_path / "results"), source_text="name: scale\n",
    )
    stand_ins = [Trial(key=f"{index:012x}", seed=1, params={"optim.lr": index}, config={"seed": 1}, mtd=None)
                 for index in range(trials)]
    plan = StudyPlan(trials={t.key: t for t in stand_ins}, to_run=tuple(stand_ins), done=(), to_record=(), ended={})
    return Ledger(spec, plan, StandInFolder(tmp_path / "results" / "scale"), None, None, None, None, None,
                  "unused:train", {}, {})


def hand_out_seconds(tmp_path: Path, trials: int) -> float:
    """The fastest of TRIES runs of handing out every trial of a plan of `trials` stand-in trials."""
    best = float("inf")
    for _ in range(TRIES):
        feed = TrialFeed(planned(tmp_path, trials))
        gc.collect()
        gc.disable()  # a collection's pause lands on whichever size it happens to hit
        try:
            started = time.perf_counter()
            handed = 0
            while feed.next_job() is not None:
                handed += 1
            took = time.perf_counter() - started
        finally:
            gc.enable()
        assert handed == trials and not feed.ledger.to_run and len(feed.ledger.handed_out) == trials
        best = min(best, took)
    return best


@pytest.mark.slow  # a scale measurement: two studies, one of them large
def test_handing_out_a_trial_costs_the_same_however_many_are_planned(tmp_path):
    small = hand_out_seconds(tmp_path, SMALL)
    large = hand_out_seconds(tmp_path, LARGE)
    ratio = large / small
    print(f"hand-out: {SMALL} trials {small:.3f}s, {LARGE} trials {large:.3f}s, ratio {ratio:.1f}")
    assert ratio < MAX_RATIO, f"{LARGE} trials took {ratio:.1f}x the time of {SMALL} (linear: {LARGE // SMALL}x)"
