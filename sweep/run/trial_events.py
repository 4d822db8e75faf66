"""Trial events: what the driver does when Tune starts a trial, gets one of its results, or ends it.

Owns: TrialEvents, the Tune callback that mirrors each trial live into the Optuna study (start: a
RUNNING trial with its parameters; each dev evaluation: an intermediate value; end: COMPLETE, PRUNED or
FAIL with the summary's scores as user attributes), into trials.csv (rewritten at most every few
seconds: sweep.records.store.TrialsTable.write_soon), into the kept weights (sweep.records.weights) and onto the
terminal (sweep.run.progress). The driver is the only writer of the Optuna study and of trials.csv; a
worker writes only its trial's folder, and TrialEvents makes sure summary.json and metrics.jsonl exist
for every ended trial (the worker may be on another node, or killed before writing them).

Each event costs O(1) in the size of the study: no event rescans the study's trials, files or Optuna.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import result as tune_result

from sweep.run.cost_limit import DEVICE_SECONDS, devices_per_trial
from sweep.run.plan import StudyPlan, number_or_none
from sweep.run.worker import CURVE_KEY, ERROR_KEY, STEP_KEY, SUMMARY_KEY
from sweep.text import shorten
from trainer.summary import Summary, ended_summary, metric_value, metrics_lines
from trainer.vocabulary import ERROR, INTERRUPTED, PRUNED, RESULT_STATUSES, TrialState

# The keys Tune adds to every result a trial reports; the rest is the trainer's metrics line as it reported it.
TUNE_RESULT_KEYS = frozenset({*tune_result.AUTO_RESULT_KEYS, tune_result.DONE, tune_result.TRIAL_ID,
                              tune_result.EXPERIMENT_TAG, tune_result.SHOULD_CHECKPOINT, tune_result.TRIAL_INFO})


class TrialEvents(tune.Callback):
    """Tune callback: trial start/result/end -> Optuna, trials.csv, summary.json, kept weights, terminal.

        events = TrialEvents(plan, stopping)      # plan: a prepared sweep.run.plan.StudyPlan
        number = events.trial_started(key, "tune-1")
        events.trial_result(key, number, {"step": 100, "dev_stsb": 81.2})
        events.trial_ended(key, number, summary)
    """

    def __init__(self, plan: StudyPlan, stopping: Any = None):
        self.plan = plan
        self.stopping = stopping  # sweep.run.stopping.StopSignals of the driver
        self.live: dict[str, dict[str, Any]] = {}  # Tune trial id -> {key, number, metrics, summary}
        self.began: dict[str, float] = {}  # key -> time.monotonic() when Tune started its attempt

    def __getstate__(self) -> dict[str, Any]:
        return {"live": {}, "began": {}}  # see sweep.run.feed.TrialFeed.__getstate__

    def trial_started(self, key: str, tune_trial_id: str) -> int:
        """Tune started the trial: RUNNING in Optuna (the asked trial for tpe) and trials.csv; its number."""
        plan = self.plan
        trial = plan.trials[key]
        number = plan.asked.pop(key, None)
        self.began[key] = time.monotonic()
        if plan.cost_limit is not None:
            plan.cost_limit.started(key)
        if number is None:
            configuration = plan.seed_means.configuration_of(key) if plan.seed_means is not None else None
            number = plan.mirror.start(trial, {"tune_trial_id": tune_trial_id, **(
                {"configuration": configuration} if configuration is not None else {})})
        else:
            plan.mirror.set_attrs(number, {"tune_trial_id": tune_trial_id})
        plan.table.update(key, state=TrialState.RUNNING, status=None, reason=None, optuna_trial=number,
                          steps=None, best_step=None, dev_stsb=None, weights=None)
        plan.table.write_soon()
        plan.progress.trial_started(key, " ".join(f"{k}={format_value(v)}" for k, v in trial.params.items()))
        return number

    def trial_result(self, key: str, number: int, result: dict[str, Any]) -> None:
        """A dev evaluation: an intermediate value in Optuna, the best so far in trials.csv."""
        step, value = result.get(STEP_KEY), result.get(CURVE_KEY)
        if not isinstance(step, (int, float)) or not isinstance(value, (int, float)):
            return
        self.plan.mirror.report(number, int(step), float(value))
        row = self.plan.table.rows[key]
        best = number_or_none(row.get("dev_stsb"))
        row["steps"] = int(step)
        if math.isfinite(value) and (best is None or value > best):
            row.update(dev_stsb=float(value), best_step=int(step))
        self.plan.table.write_soon()

    def trial_ended(self, key: str, number: int, summary: Summary) -> None:
        """The trial's verdict: told to Optuna, copied to trials.csv, weights kept or deleted, printed."""
        plan = self.plan
        plan.handed_out.discard(key)
        self._measure(key, number, summary.get("status") in RESULT_STATUSES)
        state = plan.mirror.finish(number, summary)
        plan.table.set_summary(key, summary)
        plan.table.update(key, state=state)
        for other, weights in plan.keeper.trial_ended(key, summary).items():
            plan.table.update(other, weights=weights)
        plan.table.write_soon()
        value = metric_value(summary, plan.spec.metric.name) if state == TrialState.COMPLETE else None
        if plan.seed_means is not None:
            plan.seed_means.seed_ended(key, state, summary.get("status"), value)
        plan.progress.trial_ended(key, state, summary.get("status"), value, summary.get("reason"))

    def finish_interrupted(self) -> None:
        """Trials still running when the driver stops: FAIL (interrupted) in Optuna and trials.csv."""
        plan = self.plan
        if plan.mirror is None:
            return
        for number in list(plan.mirror.running):
            key = plan.mirror.running[number].user_attrs.get("key")
            self._measure(key, number, False)
            plan.mirror.fail(number, INTERRUPTED, status=INTERRUPTED)
            if key in plan.table.rows:
                plan.table.update(key, state=TrialState.FAIL, status=INTERRUPTED, reason=INTERRUPTED)
                plan.progress.trial_interrupted(key)
        plan.table.write()

    def _measure(self, key: str, number: int, with_result: bool) -> None:
        """The attempt's device time (its wall time since Tune started it x the devices it held) as the Optuna
        user attribute device_seconds, and told to the study's cost limit (sweep.run.cost_limit)."""
        began = self.began.pop(key, None)
        if began is None:
            return  # never seen starting (a trial asked but not started)
        seconds = (time.monotonic() - began) * devices_per_trial(self.plan.spec)
        self.plan.mirror.set_attrs(number, {DEVICE_SECONDS: round(seconds, 3)})
        if self.plan.cost_limit is not None:
            self.plan.cost_limit.ended(key, seconds, with_result)

    # ---- Tune's callback hooks ------------------------------------------------------------------
    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.plan.table.write_if_due()  # changes of a quiet spell reach trials.csv within seconds

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id in self.live:  # Tune runs it again after its node was lost: the same trial
            self.live[trial.trial_id].update(metrics=[], summary=None, error=None)
            return
        key = trial.config["key"]
        number = self.trial_started(key, trial.trial_id)
        self.live[trial.trial_id] = {"key": key, "number": number, "metrics": [], "summary": None, "error": None}

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        live = self.live.get(trial.trial_id)
        if live is None:
            return
        if SUMMARY_KEY in result:
            live["summary"] = Summary(result[SUMMARY_KEY])  # the worker's record, as it travelled through Ray
        elif ERROR_KEY in result:
            live["error"] = result[ERROR_KEY]
        elif STEP_KEY in result:
            live["metrics"].append(reported_metrics(result))
            self.trial_result(live["key"], live["number"], result)

    def _stopped_by_signal(self, trial: Any) -> bool:
        """A trial that Tune ended because the driver is stopping, with no verdict of its own: it stays
        RUNNING in Optuna until finish_interrupted records it FAIL (interrupted)."""
        live = self.live.get(trial.trial_id)
        stopping = self.stopping is not None and self.stopping.requested
        return live is not None and stopping and live["summary"] is None and live["error"] is None

    def _take_ended(self, trial: Any) -> dict[str, Any] | None:
        """The live record of a trial Tune ended, taken out of `live`; None when there is nothing to record
        (stopped by a signal: finish_interrupted records it; or never started here)."""
        if self._stopped_by_signal(trial):
            return None
        return self.live.pop(trial.trial_id, None)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        live = self._take_ended(trial)
        if live is None:
            return
        if live["summary"] is not None:
            summary = live["summary"]
        elif live["error"] is not None:
            summary = ended_summary(ERROR, live["error"])
        elif self.plan.spec.scheduler is not None:
            summary = self._pruned_summary(live, trial)
        else:
            summary = ended_summary(ERROR, "the trial ended without a summary")
        self._ensure_files(live, trial, summary)
        self.trial_ended(live["key"], live["number"], summary)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        live = self._take_ended(trial)
        if live is None:
            return
        watch = self.plan.node_watch
        if watch is None:
            summary = ended_summary(ERROR, trial_error(trial))
        else:  # on a cluster: the node it was lost with, and that its files never arrived
            place = watch.location(trial)
            attempts = trial.run_metadata.num_failures
            summary = ended_summary(
                ERROR, f"{trial_error(trial)} (on node {watch.describe(trial)}; {attempts} attempt(s))",
                resources={**place, "cpu": self.plan.spec.resources.cpu, "gpu": self.plan.spec.resources.gpu},
                files={"arrived": False, "from": place["host"], "lost": True})
        self._ensure_files(live, trial, summary, overwrite=True)
        self.trial_ended(live["key"], live["number"], summary)

    def _pruned_summary(self, live: dict[str, Any], trial: Any) -> dict[str, Any]:
        curve = [m for m in live["metrics"] if isinstance(m.get("dev_stsb"), (int, float))]
        best = max(curve, key=lambda m: m["dev_stsb"]) if curve else {}
        last_step = live["metrics"][-1].get("step") if live["metrics"] else 0
        return ended_summary(
            PRUNED, f"stopped by the {self.plan.spec.scheduler.type} scheduler at step {last_step}",
            steps=last_step, best_step=best.get("step"), best_dev_stsb=best.get("dev_stsb"),
            config=trial.config.get("config"))

    def _ensure_files(self, live: dict[str, Any], trial: Any, summary: Summary, overwrite: bool = False) -> None:
        """summary.json and metrics.jsonl exist for every ended trial (the worker may be on another node,
        or killed before writing them)."""
        folder = self.plan.folder
        key = live["key"]
        # A summary that says how its files travelled (sweep.run.trial_files) is newer than the copy that
        # travelled with them: it is the record.
        if overwrite or "files" in summary or folder.read_summary(key) is None:
            if "config" not in summary:
                summary = summary.replace(config=trial.config.get("config"))
            folder.write_summary(key, summary)
        lines = metrics_lines(summary) or live["metrics"]  # the trainer's curve, else what it reported live
        if not folder.metrics_path(key).exists() and lines:
            folder.write_metrics(key, lines)


def reported_metrics(result: dict[str, Any]) -> dict[str, Any]:
    """The metrics line the trainer reported (every field of its metrics.jsonl line), from a Tune result."""
    return {name: value for name, value in result.items() if name not in TUNE_RESULT_KEYS}


def trial_error(trial: Any) -> str:
    """One line saying why Tune marked the trial ERROR (the worker died, ran out of memory, ...)."""
    text = None
    try:
        text = trial.get_error()
    except Exception:
        pass
    if not text and getattr(trial, "error_file", None):
        try:
            text = Path(trial.error_file).read_text()
        except OSError:
            text = None
    if not text:
        return "the trial's worker process failed (see the Ray logs)"
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "Killed" in line:
            return shorten(line, 300)
    return shorten(lines[-1], 300)


def format_value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)
