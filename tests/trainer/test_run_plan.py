"""The run plan (trainer.run_plan.RunPlan) is what a run does: for each method, a real run's steps, evaluations
and final tasks against its plan and against what the dry run's cost estimate plans (sweep.commands.cost)."""

from __future__ import annotations

import pytest

from sweep.commands.cost import trial_cost
from tests.helpers import first_fast
from trainer.config import RunConfig
from trainer.method_rules import method_names
from trainer.run_plan import RunPlan
from trainer.train import train

METHODS = method_names()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("method", first_fast(*sorted(METHODS, key=lambda method: method != "mocose")))
def test_the_plan_and_the_estimate_are_what_the_run_does(method, tiny_model_dir, shared_data_dir, tmp_path):
    # the length from the corpus (no max_steps): 44 sentences in batches of 8 are 5 drop-last steps; evaluations
    # every 2 steps and at the last: 2, 4, 5; a repeated final task is scored once
    config = RunConfig.from_dict({
        "model": str(tiny_model_dir), "method": method, "batch_size": 8, "device": "cpu",
        "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 44},
        "eval": {"eval_steps": 2, "final_tasks": ["STSBenchmark", "SICKRelatedness", "STSBenchmark"]},
        "queue": {"size": 32, "initial_size": 4}, "fgsm": {"eps": 0.0}})
    summary = train(config)
    resolved = config.resolved().to_dict()
    plan = RunPlan.of(resolved)
    estimate = trial_cost(resolved, "cpu", None)
    assert summary.status == "ok", summary.reason
    assert summary.total_steps == summary.steps == plan.total_steps == estimate.steps == 5
    assert [h["step"] for h in summary.history] == [s for s in range(1, 6) if plan.evaluates_at(s)] == [2, 4, 5]
    assert len(summary.history) == plan.evaluations == estimate.evaluations
    scored = [task for task in summary.test if task != "avg"]
    assert scored == list(plan.final_sts) == ["STSBenchmark", "SICKRelatedness"]
    assert plan.precision_on("cpu") == summary.precision == "fp32"
