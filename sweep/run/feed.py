"""The trial feed: the Tune searcher that hands Tune the study's trials, one job at a time.

Owns: TrialFeed, which gives Tune the next trial of the plan (grid and random: the expanded list; tpe:
an Optuna ask, run once per seed) as the job its worker runs (a sweep.run.job.TrialJob, in the form of a
Tune trial config: sweep.run.worker.run_trial), and the Optuna asks the study's constraints drop. Taking a
trial off the plan's queue costs O(1) however many trials it holds. Tune asks the feed for a trial whenever
it has room (`max_concurrent_trials`, sized by sweep.run.ray_session.trial_room); the feed hands out nothing
once a stop signal came, or once the next trial would pass the study's cost_limit (sweep.run.cost_limit).
"""

from __future__ import annotations

import os
from typing import Any

from ray.tune.search import Searcher

from sweep.run.job import TrialJob
from sweep.run.plan import StudyPlan
from sweep.spec import trial_from_params
from trainer.vocabulary import DROPPED, DUPLICATE

# Optuna asks in a row that the constraints drop (or that repeat a configuration) before a tpe study
# counts its search space as exhausted.
MAX_DROPPED_ASKS = 100


class TrialFeed(Searcher):
    """A Tune searcher that hands out the study's trials (grid/random list, or Optuna asks for tpe).

        feed = TrialFeed(plan)            # plan: a prepared sweep.run.plan.StudyPlan
        job = feed.next_job()             # the next trial's sweep.run.job.TrialJob, or None when there is none
        config = feed.suggest(trial_id)   # what Tune asks: job.tune_config(), or Searcher.FINISHED
    """

    def __init__(self, plan: StudyPlan, stopping: Any = None):
        super().__init__()
        self.plan = plan
        self.stopping = stopping  # sweep.run.stopping.StopSignals: nothing new is handed out once it is requested

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        job = self.next_job()
        return job.tune_config() if job is not None else self.FINISHED

    def has_more(self) -> bool:
        return bool(self.plan.to_run) or self.plan.asks_left > 0

    def next_job(self) -> TrialJob | None:
        """The next trial as the job its worker runs (sweep.run.worker.run_trial); None when there is none."""
        if self.stopping is not None and self.stopping.requested:
            return None  # stopping: launch nothing new
        plan = self.plan
        if plan.cost_limit is not None and self.has_more():
            if not plan.cost_limit.allows(plan.to_run[0].key if plan.to_run else None):
                return None  # the next trial would pass the study's cost_limit: nothing more is handed out
        if not plan.to_run and plan.asks_left > 0:
            self.ask_tpe()
        if not plan.to_run:
            return None
        trial = plan.to_run.popleft()  # O(1): plan.to_run is a deque
        plan.handed_out.add(trial.key)
        if trial.key in plan.replacing:  # a finished trial run again: its record kept beside, never deleted
            plan.set_aside_for_rerun(trial.key)
        plan.folder.clear_attempt(trial.key)
        plan.folder.write_trial_config(trial)
        trial_dir = plan.folder.trial_dir(trial.key)
        config = dict(trial.config)
        config["output_dir"] = str(trial_dir)
        if plan.spec.keep_weights != 0:  # set here, not in trial.config: the trial key stays the same
            config["save_model"] = True
        return TrialJob(
            key=trial.key, seed=trial.seed, params=dict(trial.params), config=config, trial_dir=str(trial_dir),
            cwd=os.getcwd(), train_fn=plan.train_fn, files=plan.files,
            cpu=float(plan.spec.resources.cpu), gpu=float(plan.spec.resources.gpu), plugins=plan.plugins,
            plugin_texts=plan.plugin_texts if plan.files is not None else {},  # on a cluster only (--address)
        )

    def ask_tpe(self) -> None:
        """tpe: ask Optuna for a parameter set; it becomes one trial per seed (one seed: the trial is the asked
        Optuna trial; several: the set is asked in the seed-means study, sweep.records.seed_means, and each seed's
        trial starts in the study's own). A set the constraints drop, or one already run, is told FAIL (status
        "dropped" / "duplicate") and asked again; after many in a row the search space is exhausted."""
        plan = self.plan
        means = plan.seed_means
        for _ in range(MAX_DROPPED_ASKS):
            number, params = means.ask() if means is not None else plan.mirror.ask({"asked": True})
            refuse = means.refuse if means is not None else plan.mirror.fail
            first = trial_from_params(plan.spec, params, plan.spec.seeds[0])
            if first is None:
                refuse(number, "dropped by the study's constraints", status=DROPPED)
            elif first.key in plan.trials:
                refuse(number, f"same configuration as trial {first.key}", status=DUPLICATE)
            else:
                break
        else:
            plan.progress.say(f"tpe: no new configuration in {MAX_DROPPED_ASKS} asks; the search space "
                              "looks exhausted, stopping early")
            plan.progress.total -= plan.asks_left * len(plan.spec.seeds)
            plan.asks_left = 0
            return
        plan.asks_left -= 1
        if means is None:
            plan.asked[first.key] = number
            plan.mirror.set_attrs(number, {"key": first.key, "seed": first.seed})
        seeds: dict[int, str] = {}
        for seed in plan.spec.seeds:
            trial = first if seed == first.seed else trial_from_params(plan.spec, params, seed)
            if trial is None or trial.key in plan.trials:
                plan.progress.total -= 1
                continue
            seeds[seed] = trial.key
            plan.trials[trial.key] = trial
            plan.table.add(trial)
            plan.to_run.append(trial)
        if means is not None:
            means.register(number, seeds)

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its config into ray/<run>/tuner.pkl for Tuner.restore, which resume does not use;
        # the plan (open storage, terminal stream) stays out of it.
        return {k: v for k, v in self.__dict__.items() if k not in ("plan", "stopping")}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass  # the Optuna study is told by sweep.run.trial_events.TrialEvents

    def save(self, checkpoint_path: str) -> None:
        pass  # resume does not use Tune's restore

    def restore(self, checkpoint_path: str) -> None:
        pass
