"""MTD of a MoCoSE run that ends before its planned steps (diverged, collapsed, stopped by ASHA).

The eta that enters d_trace is the mean of the etas the run's EMA updates used: steps 1..n of the steps it
ran, each on the schedule's planned period (the run's planned length, or `schedule_steps`, or the released
schedule's 15000). The expected values below are computed by hand, step by step, from the papers' cosine
formula (MoCoSE eq. 3) and d_trace = 1/(1-eta) + K/B: no code of trainer.mtd or trainer.schedules is used.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from analysis.load import trial_mtd
from trainer.config import RunConfig
from trainer.methods.mocose import MoCoSE
from trainer.summary import Summary

K, B = 512, 64


def hand_mean_eta(eta0: float, eta1: float, period: int, steps: int, released: bool = False) -> float:
    """The mean eta over the EMA updates after optimiser steps 1..steps: the paper's t = step, held at eta1
    after T; the released code's t = step + 1 with no hold (the cosine swings back after T)."""
    etas = []
    for step in range(1, steps + 1):
        t = step + 1 if released else step
        if not released:
            t = min(t, period)
        etas.append(eta1 - (eta1 - eta0) * (math.cos(math.pi * t / period) + 1) / 2)
    return sum(etas) / len(etas)


def hand_mtd(eta: float) -> float:
    return 1 / (1 - eta) + K / B


def mocose_config(schedule: str, variant: str = "paper", **overrides) -> dict:
    data = {"method": "mocose", "variant": variant, "batch_size": B, "queue": {"size": K},
            "ema": {"schedule": schedule, "decay": 0.75, "decay_end": 0.95}, **overrides}
    if variant == "released":
        data["ema"] = {"schedule": schedule, "decay": 0.75}
    return RunConfig.from_dict(data).resolved().to_dict()


def summary_mtd(config: dict, planned: int, steps_run: int) -> dict:
    """MoCoSE.summary_fields as train() calls it at the end of a run, on a stand-in holding what it reads."""
    method = SimpleNamespace(config=RunConfig.from_dict(config), total_steps=planned, oldest_position=K,
                             meter=SimpleNamespace(summary=lambda: {}))
    return MoCoSE.summary_fields(method, steps_run)["mtd"]


def test_the_issues_example_40_of_1000_steps_under_a_cosine_ramp():
    eta = hand_mean_eta(0.75, 0.95, 1000, 40)
    assert round(eta, 3) == 0.750 and round(hand_mtd(eta), 1) == 12.0  # the worked example
    mtd = summary_mtd(mocose_config("cosine"), planned=1000, steps_run=40)
    assert mtd["eta"] == pytest.approx(eta, abs=1e-12)
    assert mtd["formula"] == pytest.approx(hand_mtd(eta), abs=1e-9)
    assert mtd["formula"] < 12.1  # the period is not the steps run (that reading gave 14.8)


@pytest.mark.parametrize("status", ["diverged", "collapsed"])
@pytest.mark.parametrize("schedule, variant", [("constant", "paper"), ("cosine", "paper"), ("cosine", "released")])
def test_a_run_that_ends_early_averages_the_etas_of_its_own_steps(status, schedule, variant):
    config = mocose_config(schedule, variant)
    planned, steps_run = 2000, 137
    mtd = summary_mtd(config, planned, steps_run)
    if schedule == "constant":
        expected = 0.75
    elif variant == "released":
        assert config["ema"]["decay_end"] == 1.0 and config["ema"]["schedule_steps"] == 15000
        expected = hand_mean_eta(0.75, 1.0, 15000, steps_run, released=True)
    else:
        expected = hand_mean_eta(0.75, 0.95, planned, steps_run)
    assert mtd["eta"] == pytest.approx(expected, abs=1e-12)
    assert mtd["formula"] == pytest.approx(hand_mtd(expected), abs=1e-9)
    # a run of all its planned steps: the mean over all of them
    full = summary_mtd(config, planned, planned)["eta"]
    expected_full = (0.75 if schedule == "constant" else
                     hand_mean_eta(0.75, 1.0, 15000, planned, released=True) if variant == "released" else
                     hand_mean_eta(0.75, 0.95, planned, planned))
    assert full == pytest.approx(expected_full, abs=1e-12)


@pytest.mark.parametrize("schedule, variant", [("constant", "paper"), ("cosine", "paper"), ("cosine", "released")])
def test_the_analysis_reads_an_early_end_the_same_way(schedule, variant):
    config = mocose_config(schedule, variant, max_steps=1000)
    if schedule == "constant":
        expected = 0.75
    elif variant == "released":
        expected = hand_mean_eta(0.75, 1.0, 15000, 40, released=True)
    else:
        expected = hand_mean_eta(0.75, 0.95, 1000, 40)
    row = pd.Series({"method": "mocose", "steps": 40})
    # stopped by ASHA: the driver's summary has the steps and the config, no total_steps (max_steps plans it)
    pruned = Summary(status="pruned", steps=40, config=config)
    assert trial_mtd(row, pruned, "mean", "oldest") == pytest.approx(hand_mtd(expected), abs=1e-9)
    # diverged in an epochs-planned run: the trainer's summary says how many steps it planned
    by_epochs = {**config, "max_steps": None, "epochs": 1.0}
    diverged = Summary(status="diverged", steps=40, total_steps=1000, config=by_epochs)
    assert trial_mtd(row, diverged, "mean", "oldest") == pytest.approx(hand_mtd(expected), abs=1e-9)


def test_a_diverged_training_run_reports_the_mean_over_its_own_steps(tiny_model_dir, shared_data_dir, tmp_path):
    from trainer.train import train

    planned, queue = 30, 64
    config = RunConfig.from_dict({
        "model": str(tiny_model_dir), "method": "mocose", "batch_size": 8, "max_steps": planned, "device": "cpu",
        "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 400},
        "eval": {"eval_steps": 1000, "final_tasks": ["STSBenchmark"]}, "queue": {"size": queue, "initial_size": 0},
        "ema": {"schedule": "cosine", "decay": 0.75, "decay_end": 0.95}, "fgsm": {"eps": 0.0},
        # AdamW's decoupled decay, theta <- theta (1 - lr wd), blows the weights up at this lr; Adam's update (the
        # paper reading's) stays lr-sized
        "optim": {"lr": 1e8, "grad_clip": 0.0, "algorithm": "adamw"}})
    summary = train(config)
    assert summary.status == "diverged" and 0 < summary.steps < summary.total_steps == planned
    eta = hand_mean_eta(0.75, 0.95, planned, summary.steps)
    assert summary.mtd["eta"] == pytest.approx(eta, abs=1e-12)
    assert summary.mtd["formula"] == pytest.approx(1 / (1 - eta) + queue / 8, abs=1e-9)
