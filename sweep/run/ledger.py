"""The ledger of one `sweep run`: what happens to the plan's trials, recorded as it happens.

Owns: Ledger, the run's one record keeper. It holds the frozen plan (sweep.run.plan.StudyPlan) and the records
the run writes (the Optuna mirror, trials.csv, the kept weights, a tpe study's seed means, the cost limit, the
progress line), hands out the trials to run (`next_job`, `ask_tpe`), and records each trial through three verbs:

    number = ledger.started(key, "tune-1")             # RUNNING in Optuna (the asked trial for tpe) and trials.csv
    ledger.evaluated(key, number, step, dev_stsb)      # an intermediate value; the best so far in trials.csv
    ledger.ended(key, number, summary)                 # the verdict: Optuna, trials.csv, weights, seed means, terminal
    ledger.interrupted()                               # trials still running when the driver stops: FAIL (interrupted)

The driver is the only writer of the Optuna study and of trials.csv (rewritten at most every few seconds:
sweep.records.store.TrialsTable.write_soon). Each verb and each hand-out costs O(1) in the size of the study: none
rescans the study's trials, files or Optuna. The Tune searcher and callback (sweep.run.feed, sweep.run.trial_events)
only translate Tune's calls into these.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from typing import Any

from sweep.records.mirror import OptunaMirror
from sweep.records.seed_means import SeedMeans
from sweep.records.store import StudyFolder, TrialsTable
from sweep.records.weights import WeightKeeper
from sweep.run.cost_limit import DEVICE_SECONDS, devices_per_trial
from sweep.run.job import TrialJob
from sweep.run.plan import REPLACED, StudyPlan, tpe_configs
from sweep.run.progress import Progress
from sweep.spec import StudySpec, Trial, trial_from_params
from trainer.summary import Summary, metric_value
from trainer.vocabulary import DROPPED, DUPLICATE, INTERRUPTED, RESULT_STATUSES, TrialState

# Optuna asks in a row that the constraints drop (or that repeat a configuration) before a tpe study
# counts its search space as exhausted.
MAX_DROPPED_ASKS = 100


class Ledger:
    """The run's record keeper (module docstring). Built by sweep.run.opening.open_study."""

    def __init__(self, spec: StudySpec, plan: StudyPlan, folder: StudyFolder, mirror: OptunaMirror,
                 table: TrialsTable, progress: Progress, keeper: WeightKeeper, seed_means: SeedMeans | None,
                 train_fn: str, plugins: dict[str, str], plugin_texts: dict[str, str]):
        self.spec, self.plan, self.folder = spec, plan, folder
        self.mirror, self.table, self.progress, self.keeper = mirror, table, progress, keeper
        self.seed_means = seed_means
        self.train_fn = train_fn
        self.plugins = plugins  # the study's plugins as every worker imports them -> the sha256 of each one's source
        self.plugin_texts = plugin_texts  # for nodes that do not see the driver's disk
        self.cost_limit: Any = None  # sweep.run.cost_limit.CostLimit when the study has a cost_limit
        # the `files` of each job (sweep.run.trial_files) and the node watch on a cluster (use_cluster); else None
        self.files: dict[str, Any] | None = None
        self.node_watch: Any = None
        self.trials: dict[str, Trial] = dict(plan.trials)  # key -> trial, every trial of this run (tpe asks add)
        self.to_run: deque[Trial] = deque(plan.to_run)  # taken from the left: a hand-out costs O(1)
        self.asks_left = plan.asks_left  # tpe: Optuna asks still to make
        self.asked: dict[str, int] = {}  # tpe: key -> number of the asked Optuna trial it starts as
        self.handed_out: set[str] = set()  # keys given to Tune and not ended yet
        self.began: dict[str, float] = {}  # key -> time.monotonic() when its attempt started

    def use_cluster(self, files: dict[str, Any], node_watch: Any) -> None:
        """The run is on a Ray cluster: every job from now on carries `files` (where its worker sends the trial's
        files: sweep.run.trial_files), and `node_watch` (sweep.run.node_watch.NodeWatch) names a lost trial's node."""
        self.files = files
        self.node_watch = node_watch

    def configs_to_run(self) -> list[dict[str, Any]]:
        """The configs this run will start (tpe: its planning config with each model the study may choose)."""
        if self.spec.search.expands:
            return [t.config for t in self.to_run]
        return tpe_configs(self.spec)

    def has_more(self) -> bool:
        return bool(self.to_run) or self.asks_left > 0

    def left(self) -> int:
        """Trials not handed out yet (an ask runs once per seed)."""
        return len(self.to_run) + self.asks_left * len(self.spec.seeds)

    # ---- hand-outs --------------------------------------------------------------------------------
    def next_job(self) -> TrialJob | None:
        """The next trial as the job its worker runs (sweep.run.worker.run_trial); None when there is none, or
        when it would pass the study's cost_limit."""
        if self.cost_limit is not None and self.has_more():
            if not self.cost_limit.allows(self.to_run[0].key if self.to_run else None):
                return None
        if not self.to_run and self.asks_left > 0:
            self.ask_tpe()
        if not self.to_run:
            return None
        trial = self.to_run.popleft()
        self.handed_out.add(trial.key)
        if trial.key in self.plan.replacing:  # a finished trial run again: its record kept beside, never deleted
            for path in (self.folder.summary_path(trial.key), self.folder.metrics_path(trial.key)):
                if path.is_file():
                    self.folder.set_aside(path, REPLACED)
        self.folder.clear_attempt(trial.key)
        self.folder.write_trial_config(trial)
        trial_dir = self.folder.trial_dir(trial.key)
        config = dict(trial.config)
        config["output_dir"] = str(trial_dir)
        if self.spec.keep_weights != 0:  # set here, not in trial.config: the trial key stays the same
            config["save_model"] = True
        return TrialJob(
            key=trial.key, seed=trial.seed, params=dict(trial.params), config=config, trial_dir=str(trial_dir),
            cwd=os.getcwd(), train_fn=self.train_fn, files=self.files,
            cpu=float(self.spec.resources.cpu), gpu=float(self.spec.resources.gpu), plugins=self.plugins,
            plugin_texts=self.plugin_texts if self.files is not None else {},  # on a cluster only (--address)
        )

    def ask_tpe(self) -> None:
        """tpe: ask Optuna for a parameter set; it becomes one trial per seed (one seed: the trial is the asked
        Optuna trial; several: the set is asked in the seed-means study, sweep.records.seed_means, and each seed's
        trial starts in the study's own). A set the constraints drop, or one already run, is told FAIL (status
        "dropped" / "duplicate") and asked again; after many in a row the search space is exhausted."""
        means, spec = self.seed_means, self.spec
        for _ in range(MAX_DROPPED_ASKS):
            number, params = means.ask() if means is not None else self.mirror.ask({"asked": True})
            refuse = means.refuse if means is not None else self.mirror.fail
            first = trial_from_params(spec, params, spec.seeds[0])
            if first is None:
                refuse(number, "dropped by the study's constraints", status=DROPPED)
            elif first.key in self.trials:
                refuse(number, f"same configuration as trial {first.key}", status=DUPLICATE)
            else:
                break
        else:
            self.progress.say(f"tpe: no new configuration in {MAX_DROPPED_ASKS} asks; the search space "
                              "looks exhausted, stopping early")
            self.progress.total -= self.asks_left * len(spec.seeds)
            self.asks_left = 0
            return
        self.asks_left -= 1
        if means is None:
            self.asked[first.key] = number
            self.mirror.set_attrs(number, {"key": first.key, "seed": first.seed})
        seeds: dict[int, str] = {}
        for seed in spec.seeds:
            trial = first if seed == first.seed else trial_from_params(spec, params, seed)
            if trial is None or trial.key in self.trials:
                self.progress.total -= 1
                continue
            seeds[seed] = trial.key
            self.trials[trial.key] = trial
            self.table.add(trial)
            self.to_run.append(trial)
        if means is not None:
            means.register(number, seeds)

    # ---- the verbs ----------------------------------------------------------------------------------
    def started(self, key: str, tune_trial_id: str) -> int:
        """Tune started the trial: RUNNING in Optuna (the asked trial for tpe) and trials.csv; its number."""
        trial = self.trials[key]
        number = self.asked.pop(key, None)
        self.began[key] = time.monotonic()
        if self.cost_limit is not None:
            self.cost_limit.started(key)
        if number is None:
            configuration = self.seed_means.configuration_of(key) if self.seed_means is not None else None
            number = self.mirror.start(trial, {"tune_trial_id": tune_trial_id, **(
                {"configuration": configuration} if configuration is not None else {})})
        else:
            self.mirror.set_attrs(number, {"tune_trial_id": tune_trial_id})
        self.table.update(key, state=TrialState.RUNNING, status=None, reason=None, optuna_trial=number,
                          steps=None, best_step=None, dev_stsb=None, weights=None)
        self.table.write_soon()
        self.progress.trial_started(key, " ".join(f"{k}={param_text(v)}" for k, v in trial.params.items()))
        return number

    def evaluated(self, key: str, number: int, step: int, value: float) -> None:
        """A dev evaluation: an intermediate value in Optuna, the best so far in trials.csv."""
        self.mirror.report(number, step, value)
        row = self.table.rows[key]
        best = number_or_none(row.get("dev_stsb"))
        row["steps"] = step
        if math.isfinite(value) and (best is None or value > best):
            row.update(dev_stsb=value, best_step=step)
        self.table.write_soon()

    def ended(self, key: str, number: int, summary: Summary) -> None:
        """The trial's verdict: told to Optuna, copied to trials.csv, weights kept or deleted, printed."""
        self.handed_out.discard(key)
        self._measure(key, number, summary.status in RESULT_STATUSES)
        state = self.mirror.finish(number, summary)
        self.table.set_summary(key, summary)
        self.table.update(key, state=state)
        for other, weights in self.keeper.trial_ended(key, summary).items():
            self.table.update(other, weights=weights)
        self.table.write_soon()
        value = metric_value(summary, self.spec.metric.name) if state == TrialState.COMPLETE else None
        if self.seed_means is not None:
            self.seed_means.seed_ended(key, state, summary.status, value)
        self.progress.trial_ended(key, state, summary.status, value, summary.reason)

    def interrupted(self) -> None:
        """Trials still running when the driver stops: FAIL (interrupted) in Optuna and trials.csv."""
        for number in list(self.mirror.running):
            key = self.mirror.running[number].user_attrs.get("key")
            self._measure(key, number, False)
            self.mirror.fail(number, INTERRUPTED, status=INTERRUPTED)
            if key in self.table.rows:
                self.table.update(key, state=TrialState.FAIL, status=INTERRUPTED, reason=INTERRUPTED)
                self.progress.trial_interrupted(key)
        self.table.write()

    def _measure(self, key: str, number: int, with_result: bool) -> None:
        """The attempt's device time (its wall time since it started x the devices it held) as the Optuna user
        attribute device_seconds, and told to the study's cost limit (sweep.run.cost_limit)."""
        began = self.began.pop(key, None)
        if began is None:
            return  # never seen starting (a trial asked but not started)
        seconds = (time.monotonic() - began) * devices_per_trial(self.spec)
        self.mirror.set_attrs(number, {DEVICE_SECONDS: round(seconds, 3)})
        if self.cost_limit is not None:
            self.cost_limit.ended(key, seconds, with_result)


def number_or_none(value: Any) -> float | None:
    """`value` as a finite float, or None (a trials.csv cell may be empty, text or nan)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def param_text(value: Any) -> str:
    """A parameter's value on the progress line: lists and dicts as JSON."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)
