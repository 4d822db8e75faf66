"""Trial events: Tune's calls when it starts a trial, gets one of its results, or ends it, told to the ledger.

Owns: TrialEvents, the Tune callback that turns each of Tune's calls into one of the ledger's verbs
(sweep.run.ledger.Ledger: started, evaluated, ended, interrupted) and keeps, per live Tune trial, what the
verdict needs (LiveTrial). It makes sure summary.json and metrics.jsonl exist for every ended trial (the worker
may be on another node, or killed before writing them): the driver writes summary.json only when the worker's
copy is not the record (it never arrived, the trial was lost with its node, or the worker's summary says how its
files travelled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import result as tune_result

from sweep.run.job import CURVE_KEY, ERROR_KEY, STEP_KEY, SUMMARY_KEY
from sweep.run.ledger import Ledger
from sweep.text import shorten
from trainer.summary import Summary, ended_summary, metrics_lines
from trainer.vocabulary import ERROR, PRUNED

# The keys Tune adds to every result a trial reports; the rest is the trainer's metrics line as it reported it.
TUNE_RESULT_KEYS = frozenset({*tune_result.AUTO_RESULT_KEYS, tune_result.DONE, tune_result.TRIAL_ID,
                              tune_result.EXPERIMENT_TAG, tune_result.SHOULD_CHECKPOINT, tune_result.TRIAL_INFO})


@dataclass
class LiveTrial:
    """What the driver knows of a trial Tune is running: its key, its Optuna number, the metrics lines it
    reported, and the worker's verdict once it came (its summary, or the error it reported)."""

    key: str
    number: int
    metrics: list[dict[str, Any]] = field(default_factory=list)
    summary: Summary | None = None
    error: str | None = None


class TrialEvents(tune.Callback):
    """Tune callback: trial start/result/end -> the ledger's verbs; summary.json and metrics.jsonl ensured."""

    def __init__(self, ledger: Ledger, stopping: Any = None):
        self.ledger = ledger
        self.stopping = stopping  # sweep.run.stopping.StopSignals of the driver
        self.live: dict[str, LiveTrial] = {}  # Tune trial id -> its live record

    def __getstate__(self) -> dict[str, Any]:
        return {"live": {}}  # see sweep.run.feed.TrialFeed.__getstate__

    # ---- Tune's callback hooks ------------------------------------------------------------------
    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.ledger.table.write_if_due()  # changes of a quiet spell reach trials.csv within seconds

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        live = self.live.get(trial.trial_id)
        if live is not None:  # Tune runs it again after its node was lost: the same trial
            live.metrics, live.summary, live.error = [], None, None
            return
        key = trial.config["key"]
        self.live[trial.trial_id] = LiveTrial(key, self.ledger.started(key, trial.trial_id))

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        live = self.live.get(trial.trial_id)
        if live is None:
            return
        if SUMMARY_KEY in result:
            live.summary = Summary.from_json(result[SUMMARY_KEY])  # the worker's record, as it travelled through Ray
        elif ERROR_KEY in result:
            live.error = result[ERROR_KEY]
        elif STEP_KEY in result:
            live.metrics.append(reported_metrics(result))
            step, value = result.get(STEP_KEY), result.get(CURVE_KEY)
            if isinstance(step, (int, float)) and isinstance(value, (int, float)):
                self.ledger.evaluated(live.key, live.number, int(step), float(value))

    def finish_interrupted(self) -> None:
        """Trials still running when the driver stops: FAIL (interrupted) (sweep.run.ledger.Ledger.interrupted)."""
        self.ledger.interrupted()

    def _take_ended(self, trial: Any) -> LiveTrial | None:
        """The live record of a trial Tune ended, taken out of `live`; None when there is nothing to record: a
        trial Tune ended because the driver is stopping, with no verdict of its own, stays RUNNING in Optuna until
        finish_interrupted records it FAIL (interrupted); one never started here has no record."""
        live = self.live.get(trial.trial_id)
        stopping = self.stopping is not None and self.stopping.requested
        if live is not None and stopping and live.summary is None and live.error is None:
            return None
        return self.live.pop(trial.trial_id, None)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        live = self._take_ended(trial)
        if live is None:
            return
        if live.summary is not None:
            summary = live.summary
        elif live.error is not None:
            summary = ended_summary(ERROR, live.error)
        elif self.ledger.spec.scheduler is not None:
            summary = self._pruned_summary(live, trial)
        else:
            summary = ended_summary(ERROR, "the trial ended without a summary")
        self._ensure_files(live, trial, summary)
        self.ledger.ended(live.key, live.number, summary)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        live = self._take_ended(trial)
        if live is None:
            return
        watch, spec = self.ledger.node_watch, self.ledger.spec
        if watch is None:
            summary = ended_summary(ERROR, trial_error(trial))
        else:  # on a cluster: the node it was lost with, and that its files never arrived
            place = watch.location(trial)
            attempts = trial.run_metadata.num_failures
            summary = ended_summary(
                ERROR, f"{trial_error(trial)} (on node {watch.describe(trial)}; {attempts} attempt(s))",
                resources={**place, "cpu": spec.resources.cpu, "gpu": spec.resources.gpu},
                files={"arrived": False, "from": place["host"], "lost": True})
        self._ensure_files(live, trial, summary, overwrite=True)
        self.ledger.ended(live.key, live.number, summary)

    def _pruned_summary(self, live: LiveTrial, trial: Any) -> Summary:
        curve = [m for m in live.metrics if isinstance(m.get("dev_stsb"), (int, float))]
        best = max(curve, key=lambda m: m["dev_stsb"]) if curve else {}
        last_step = live.metrics[-1].get("step") if live.metrics else 0
        return ended_summary(
            PRUNED, f"stopped by the {self.ledger.spec.scheduler.type} scheduler at step {last_step}",
            steps=last_step, best_step=best.get("step"), best_dev_stsb=best.get("dev_stsb"),
            config=trial.config.get("config"))

    def _ensure_files(self, live: LiveTrial, trial: Any, summary: Summary, overwrite: bool = False) -> None:
        """summary.json and metrics.jsonl exist for every ended trial (the worker may be on another node,
        or killed before writing them)."""
        folder, key = self.ledger.folder, live.key
        # A summary that says how its files travelled (sweep.run.trial_files) is newer than the copy that
        # travelled with them: it is the record.
        if overwrite or summary.files is not None or folder.read_summary(key) is None:
            if summary.config is None:
                summary = summary.replace(config=trial.config.get("config"))
            folder.write_summary(key, summary)
        lines = metrics_lines(summary) or live.metrics  # the trainer's curve, else what it reported live
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

