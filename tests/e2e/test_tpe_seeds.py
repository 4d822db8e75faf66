"""tpe with several seeds (sweep.records.seed_means): the sampler learns from each configuration's mean over its
seeds, told once all of them have ended, while the study's own Optuna study lists every seed's run; a resume after
the driver is killed keeps it so. The stand-in trainer (tests/fake_train.py) scores a trial
50 + 10 x ema.decay + seed / 100, so a configuration's mean is known in advance."""

from __future__ import annotations

import statistics

import optuna
import pytest

from sweep.records.seed_means import SeedMeans, seed_means_name
from sweep.spec import load_study
from tests.helpers import (
    Driver,
    assert_complete_study,
    fake_env,
    fake_study,
    kill_session_until_gone,
    optuna_trials,
    run_sweep,
    study_file,
    trial_progress,
)
from trainer.vocabulary import DROPPED, DUPLICATE

SEEDS = [1, 2, 3]


def expected_mean(decay: float) -> float:
    return statistics.mean(50.0 + 10.0 * decay + seed / 100 for seed in SEEDS)


@pytest.mark.slow
def test_the_sampler_sees_configuration_means_and_the_dashboard_every_seed_also_after_a_kill(tmp_path,
                                                                                           shared_data_dir):
    path = fake_study(tmp_path, "tpe3", shared_data_dir, parameters={"ema.decay": [0.1, 0.2, 0.3, 0.4, 0.5]},
                      method="tpe", budget=3, seeds=SEEDS)
    study_dir = tmp_path / "results" / "tpe3"
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    env = fake_env(steps=2, step_s=0.3)
    driver = Driver(["run", str(path), "--max-concurrent", "1"], tmp_path, env)
    try:  # killed with one configuration told and another's seeds under way
        driver.wait_for(lambda: any(s == "COMPLETE" for s, _ in trial_progress(study_dir, seed_means_name("tpe3")))
                        and any(s == "RUNNING" for s, _ in trial_progress(study_dir, "tpe3")))
    finally:
        kill_session_until_gone(driver.proc.pid)
        driver.proc.wait()

    result = run_sweep(["run", str(path), "--max-concurrent", "1"], cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr

    runs = [t for t in optuna_trials("tpe3", storage) if t.state.name == "COMPLETE"]
    assert len(runs) == 9  # the dashboard's study: every seed's run, once each
    assert_complete_study(study_dir, "tpe3", storage, 9)
    configurations = [t for t in optuna_trials(seed_means_name("tpe3"), storage) if t.user_attrs.get("keys")]
    assert len(configurations) == 3 and all(t.state.name == "COMPLETE" for t in configurations)
    by_key = {t.user_attrs["key"]: t for t in runs}
    for configuration in configurations:
        keys = configuration.user_attrs["keys"]
        assert sorted(keys) == [str(s) for s in SEEDS]
        seeds_runs = [by_key[key] for key in keys.values()]
        assert all(run.user_attrs["configuration"] == configuration.number for run in seeds_runs)
        assert {run.params["ema.decay"] for run in seeds_runs} == {configuration.params["ema.decay"]}
        # what the sampler received: the mean over the three seeds, from the trainer's formula
        assert configuration.value == pytest.approx(expected_mean(configuration.params["ema.decay"]), abs=1e-9)
        assert configuration.value == pytest.approx(statistics.mean(run.value for run in seeds_runs), abs=1e-9)
    assert not any(t.user_attrs.get("asked") for t in runs)  # nothing asked in the dashboard's study


def test_a_configuration_is_told_only_when_every_seed_has_ended_for_good(tmp_path):
    spec = load_study(study_file(tmp_path, {"name": "means", "base": {"model": "embedded", "method": "simcse"},
                                            "parameters": {"optim.lr": [1e-5, 3e-5]}, "method": "tpe", "budget": 2,
                                            "seeds": [1, 2], "results_dir": str(tmp_path / "results")}))
    storage = optuna.storages.InMemoryStorage()
    distributions = {"optim.lr": optuna.distributions.CategoricalDistribution([1e-5, 3e-5])}
    means = SeedMeans(spec, storage, distributions)

    number, params = means.ask()
    assert set(params) == {"optim.lr"}
    means.register(number, {1: "a1", 2: "a2"})
    means.seed_ended("a1", "COMPLETE", "ok", 70.0)
    means.seed_ended("a2", "FAIL", "error", None)  # not for good: it runs again on resume
    assert means.study.trials[number].state.name == "RUNNING"
    means.seed_ended("a2", "COMPLETE", "ok", 72.0)
    told = means.study.trials[number]
    assert (told.state.name, told.value, told.user_attrs["values"]) == ("COMPLETE", 71.0, [70.0, 72.0])

    number, _ = means.ask()
    means.register(number, {1: "b1", 2: "b2"})
    means.seed_ended("b1", "PRUNED", "pruned", None)
    means.seed_ended("b2", "COMPLETE", "ok", 60.0)
    assert means.study.trials[number].state.name == "PRUNED"

    number, _ = means.ask()
    means.refuse(number, "same configuration as trial a1", DUPLICATE)
    number, _ = means.ask()
    means.refuse(number, "dropped by the study's constraints", DROPPED)
    assert [t.user_attrs.get("status") for t in means.study.trials[2:]] == [DUPLICATE, DROPPED]

    # a new driver on the same storage: the configurations asked before, the refused asks left out
    again = SeedMeans(spec, storage, distributions)
    assert [number for number, _ in again.asked()] == [0, 1] and again.of == {"a1": 0, "a2": 0, "b1": 1, "b2": 1}
