"""sweep.run.plan.plan_study: the plan of a run from the study's records, a value, made without Ray, Optuna or a file.

The records are written out here as the study would hold them: attempts are stand-ins with what an Optuna
FrozenTrial gives the plan (state, number, user_attrs, params), summaries are Summary records. Each expectation is
worked out from the study's trials by hand (which trial ended how), not from the plan."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from sweep.run.plan import StudyPlan, WeightsOnDisk, plan_study
from sweep.spec import expand, load_study, trial_from_params
from tests.helpers import REPO, study_file
from trainer.readings import READING
from trainer.summary import Summary
from trainer.vocabulary import TrialState


@dataclass
class Attempt:
    """What the plan reads of an Optuna attempt (a FrozenTrial)."""

    state: TrialState
    number: int
    user_attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


def grid(tmp_path, keep: str | None = None):
    text = ("name: plan_unit\nbase: {model: embedded, method: mocose, queue: {size: 64, initial_size: 8}}\n"
            "parameters:\n  ema.decay: [0.5, 0.7, 0.8, 0.9]\n" + (f"keep_weights: {keep}\n" if keep else "")
            + f"results_dir: {tmp_path / 'results'}\n")
    spec = load_study(study_file(tmp_path, text))
    return spec, expand(spec)


def ended(trial, status: str = "ok", dev: float | None = 70.0, **fields: Any) -> Summary:
    return Summary.from_json({"status": status, "reason": None if status == "ok" else status, "steps": 6,
                              "best_step": 6 if dev is not None else None, "best_dev_stsb": dev,
                              "test": {"STSBenchmark": 60.0}, "config": trial.config, "reading": READING, **fields})


def test_a_study_never_run_runs_every_trial_in_order(tmp_path):
    spec, trials = grid(tmp_path)
    plan = plan_study(spec, {}, {})
    assert [t.key for t in plan.to_run] == [t.key for t in trials] and list(plan.trials) == [t.key for t in trials]
    assert plan.done == () and plan.to_record == () and dict(plan.ended) == {}
    assert plan.total == 4 and plan.skipped == 0 and plan.asks_left == 0


def test_resume_sorts_each_trial_by_its_attempts_and_summary(tmp_path):
    spec, (done, on_disk, failed, never) = grid(tmp_path)
    attempts = {done.key: [Attempt(TrialState.COMPLETE, 0, {"key": done.key, "status": "ok"})],
                failed.key: [Attempt(TrialState.FAIL, 1, {"key": failed.key, "status": "error"})]}
    summaries = {done.key: ended(done), on_disk.key: ended(on_disk, "diverged", dev=None), failed.key: None}
    plan = plan_study(spec, attempts, summaries)
    # done: final in Optuna (skip); on_disk: a final verdict only on disk (record); failed: an error (run again)
    assert plan.done == (done.key, on_disk.key) and plan.to_record == (on_disk.key,)
    assert [t.key for t in plan.to_run] == [failed.key, never.key]
    assert dict(plan.ended) == {done.key: summaries[done.key], on_disk.key: summaries[on_disk.key]}
    assert plan.skipped == 2 and plan.total == 2


def test_a_trial_that_would_resolve_differently_is_kept_or_rerun_on_request(tmp_path):
    spec, trials = grid(tmp_path)
    first = trials[0]
    ran_with = {**first.config, "collapse_threshold": 0.123}
    attempts = {t.key: [Attempt(TrialState.COMPLETE, i, {"key": t.key})] for i, t in enumerate(trials)}
    summaries = {t.key: ended(t) for t in trials} | {first.key: ended(first, config=ran_with)}
    kept = plan_study(spec, attempts, summaries)
    assert dict(kept.changed) == {first.key: ("collapse_threshold",)} and kept.to_run == () and kept.skipped == 4
    rerun = plan_study(spec, attempts, summaries, rerun_changed=True)
    assert rerun.replacing == {first.key} and [t.key for t in rerun.to_run] == [first.key]
    assert first.key not in rerun.done and rerun.skipped == 3
    # a summary without its config: the config.yaml the opening read stands in
    without = summaries | {first.key: Summary.from_json({**ended(first).to_json(), "config": None})}
    plan = plan_study(spec, attempts, without, stored_configs={first.key: ran_with})
    assert dict(plan.changed) == {first.key: ("collapse_threshold",)}
    assert dict(plan_study(spec, attempts, without).changed) == {}  # no config at all: nothing to compare


def test_a_trial_of_an_older_reading_is_named(tmp_path):
    spec, trials = grid(tmp_path)
    attempts = {t.key: [Attempt(TrialState.COMPLETE, i, {"key": t.key})] for i, t in enumerate(trials)}
    summaries = {t.key: ended(t) for t in trials}
    record = summaries[trials[2].key].to_json()
    del record["reading"]  # a record written before readings were numbered: reading 1
    summaries[trials[2].key] = Summary.from_json(record)
    plan = plan_study(spec, attempts, summaries)
    assert list(plan.older_reading) == [trials[2].key] and plan.older_reading[trials[2].key]


@pytest.mark.parametrize("keep, saved, wanted, keep_changed, restoring", [
    ("2", set(), set(), True, [1, 3]),  # the top 2 by dev: trials 1 (80) and 3 (75), neither saved
    ("2", {1}, set(), True, [3]),  # trial 1's weights are there
    ("2", set(), set(), False, []),  # keep_weights unchanged and nothing marked: nothing to restore
    ("2", set(), {3}, False, [3]),  # a re-run for weights that a stop cut short
    ("all", {0}, set(), True, [1, 3]),  # every trial that ended ok with a best-dev state: 2 has none (diverged)
    ("none", set(), set(), True, []),
])
def test_weights_the_study_now_keeps_are_restored_last(tmp_path, keep, saved, wanted, keep_changed, restoring):
    spec, trials = grid(tmp_path, keep)
    devs = [60.0, 80.0, None, 75.0]
    attempts = {t.key: [Attempt(TrialState.COMPLETE, i, {"key": t.key})] for i, t in enumerate(trials)}
    summaries = {t.key: ended(t, "ok" if dev is not None else "diverged", dev=dev) for t, dev in zip(trials, devs)}
    disk = WeightsOnDisk(saved=frozenset(trials[i].key for i in saved),
                         wanted=frozenset(trials[i].key for i in wanted), keep_changed=keep_changed)
    plan = plan_study(spec, attempts, summaries, weights=disk)
    expected = [trials[i].key for i in restoring]
    assert list(plan.restoring) == expected and [t.key for t in plan.to_run] == expected
    assert plan.skipped == 4 - len(expected) and len(plan.done) == 4


def test_tpe_plans_the_seeds_of_every_configuration_asked_before_and_the_asks_left(tmp_path):
    path = study_file(tmp_path, "name: tpe_plan\nmethod: tpe\nbudget: 3\nseeds: [1, 2]\n"
                                "base: {model: embedded, method: mocose, queue: {size: 64, initial_size: 8}}\n"
                                "parameters:\n  ema.decay: {distribution: uniform, low: 0.5, high: 0.9}\n"
                                f"results_dir: {tmp_path / 'results'}\n")
    spec = load_study(path)
    assert plan_study(spec, {}, {}).asks_left == 3 and plan_study(spec, {}, {}).total == 6
    one = trial_from_params(spec, {"ema.decay": 0.6}, 1)
    asked = {one.key: [Attempt(TrialState.COMPLETE, 0, {"key": one.key, "asked": True}, {"ema.decay": 0.6})]}
    plan = plan_study(spec, asked, {one.key: ended(one)}, configurations=[{"ema.decay": 0.8}])
    keys = [trial_from_params(spec, {"ema.decay": v}, s).key for v in (0.6, 0.8) for s in (1, 2)]
    assert list(plan.trials) == keys and plan.done == (keys[0],)
    assert [t.key for t in plan.to_run] == keys[1:] and plan.asks_left == 1  # 3 asks, 2 made
    assert plan.total == 3 + 2


def test_the_plan_is_a_value(tmp_path):
    spec, trials = grid(tmp_path, "2")
    attempts = {trials[0].key: [Attempt(TrialState.COMPLETE, 0, {"key": trials[0].key})]}
    summaries = {trials[0].key: ended(trials[0])}
    before = (repr(attempts), {k: s.to_json() for k, s in summaries.items()})
    plan = plan_study(spec, attempts, summaries, weights=WeightsOnDisk(keep_changed=True))
    assert plan == plan_study(spec, attempts, summaries, weights=WeightsOnDisk(keep_changed=True))
    assert (repr(attempts), {k: s.to_json() for k, s in summaries.items()}) == before  # its inputs unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.asks_left = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.ended["x"] = summaries[trials[0].key]  # type: ignore[index]
    with pytest.raises(TypeError):
        plan.trials["x"] = trials[0]  # type: ignore[index]
    assert isinstance(plan.to_run, tuple) and isinstance(plan.done, tuple) and isinstance(plan, StudyPlan)


def test_planning_imports_neither_ray_nor_optuna():
    code = ("import sys; import sweep.run.plan; "
            "print(sorted(m for m in ('ray', 'optuna', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
