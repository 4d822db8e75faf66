"""A trial's job (sweep.run.job.TrialJob): one frozen record that the feed builds and the worker reads, carried
by Tune as the trial's config and by Ray as a pickle (no Ray runs here)."""

from __future__ import annotations

import dataclasses
import os
import pickle

import pytest
from ray import cloudpickle

from sweep.run.feed import TrialFeed
from sweep.run.job import TrialJob
from sweep.run.runner import StudyRun
from sweep.spec import load_study
from tests.helpers import study_file


@pytest.fixture()
def feed(tmp_path) -> TrialFeed:
    path = study_file(tmp_path, {"name": "jobs", "base": {"model": "embedded"}, "keep_weights": "best",
                                 "resources": {"cpu": 2, "gpu": 0}, "parameters": {"ema.decay": [0.5, 0.9]},
                                 "results_dir": str(tmp_path / "results")})
    driver = StudyRun(load_study(path), "tests.fake_train:train")
    assert driver.prepare() == 2
    plan = driver.ledger
    return TrialFeed(plan)


def test_the_feed_hands_out_each_planned_trial_as_a_job(feed):
    plan = feed.ledger
    first = plan.to_run[0]
    job = feed.next_job()
    assert isinstance(job, TrialJob) and job.key == first.key and job.seed == first.seed
    assert job.params == first.params and job.trial_dir == str(plan.folder.trial_dir(first.key))
    assert job.config == {**first.config, "output_dir": job.trial_dir, "save_model": True}  # keep_weights: best
    assert job.cwd == os.getcwd() and job.train_fn == "tests.fake_train:train" and job.files is None
    assert (job.cpu, job.gpu) == (2.0, 0.0)
    assert job.key in plan.handed_out and plan.folder.read_config(job.key) is not None  # its config.yaml
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.key = "other"  # type: ignore[misc]
    second = feed.next_job()
    assert second is not None and second.key != job.key
    assert feed.next_job() is None and feed.suggest("tune-3") == TrialFeed.FINISHED


def test_the_job_comes_back_equal_from_its_tune_config_and_from_a_pickle(feed):
    job = feed.next_job()
    suggested = feed.suggest("tune-2")  # the second trial, in the form the searcher gives Tune
    assert isinstance(suggested, dict) and TrialJob.from_tune_config(suggested).key == suggested["key"] != job.key
    config = job.tune_config()
    # what the driver's callbacks read and the trackers log (sweep.run.job's docstring)
    assert {"key", "seed", "params", "config", "trial_dir"} <= set(config)
    assert config["params"] == job.params and config["resources"] == {"cpu": 2.0, "gpu": 0.0}
    assert TrialJob.from_tune_config(config) == job
    assert TrialJob.from_tune_config({**config, "added_by_tune": 1}) == job
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        assert loads(dumps(job)) == job
        assert TrialJob.from_tune_config(loads(dumps(config))) == job
    with pytest.raises(KeyError, match="train_fn"):
        TrialJob.from_tune_config({k: v for k, v in config.items() if k != "train_fn"})
