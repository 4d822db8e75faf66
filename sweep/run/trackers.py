"""Curves and experiment trackers (study key `loggers`): Ray Tune's own logger callbacks, made safe.

    check_loggers(names)                  # before Ray starts: a missing package is a one-line UserError (exit 2)
    logger_callbacks(spec, warn) -> list  # in the driver, before Tune starts: the callbacks to pass to Tune
    read_tracker_runs(trial_dir) -> dict  # trials/<key>/trackers.json: which tracker run each trial became

What each callback receives (the mixin `StudyResults`):
- every evaluation report of the trainer (dev_stsb, loss, lr, ...), with the trainer step as Tune's
  timesteps_total, which the TensorBoard and MLflow callbacks use as their x axis (W&B plots against the
  evaluation number, Tune's training_iteration);
- one last result when the trial ends with a summary: its final scores (test/<task>, transfer/<task>,
  best_dev_stsb, best_step, align, uniform), the values of summary.json; W&B's run summary keeps the last
  value of each key, so it holds them.
The trial's config is what Ray logs (MLflow params, W&B config): the trial key, seed, the swept
parameters under params/, and the full trainer config under config/.

MLflow: one experiment per study (its name), one run per trial named after the trial key and tagged
sweep.study / sweep.key / sweep.seed. The tracking URI is the study's tracking.mlflow_uri, else
$MLFLOW_TRACKING_URI, else MLflow's default. W&B: project tracking.wandb_project, else $WANDB_PROJECT,
else the study name; group = the study name; run id = Tune's trial id; run folders under
results/<study>/wandb/ (with WANDB_MODE=offline: offline-run-*, uploaded later by `wandb sync`).

A tracker must never cost the study its results: before Tune starts, an MLflow server that does not answer
(or a URI MLflow refuses) is one warning line and the study runs without MLflow; an unreachable W&B server
switches W&B to offline runs. Any exception a tracker's callback raises later is one warning line, and that
tracker is off for the rest of the run. The callback writes the run it created for a trial to
trials/<key>/trackers.json, which `sweep export` names in the model card.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlparse

from sweep.run.job import ERROR_KEY, STEP_KEY, SUMMARY_KEY
from sweep.run.ray_private import wandb_logger_actor
from sweep.text import hide_password, shorten
from trainer.errors import UserError
from trainer.summary import Summary

# study name -> (the Ray Tune callback class "module:name", the package it needs, the extra to install)
LOGGER_CALLBACKS = {
    "tensorboard": ("ray.tune.logger:TBXLoggerCallback", "tensorboardX", "ray[tune]"),
    "mlflow": ("ray.air.integrations.mlflow:MLflowLoggerCallback", "mlflow", "contrastive-sweep[mlflow]"),
    "wandb": ("ray.air.integrations.wandb:WandbLoggerCallback", "wandb", "contrastive-sweep[wandb]"),
}
RECORD_FILE = "trackers.json"  # in trials/<key>/
# Seconds an MLflow request may take before the tracker counts as down (MLflow's own default retries a dead
# server with backoff for minutes per call; each call would stall Tune's driver loop that long).
MLFLOW_TIMEOUT_S = 5
# summary.json fields logged as the final scores (scalars; test and transfer are {task: score}).
FINAL_FIELDS = ("best_dev_stsb", "best_step", "align", "uniform")
# What to do when a tracker fails during the study (the exception says why).
_FIXES = {
    "mlflow": "check that the MLflow server answers at tracking.mlflow_uri / MLFLOW_TRACKING_URI",
    "wandb": "run `wandb login` (or set WANDB_API_KEY, or WANDB_MODE=offline)",
    "tensorboard": "check that the study's ray/ folder is writable",
}


def check_loggers(names: list[str]) -> None:
    """Each chosen logger's package is installed; else a one-line UserError saying what to install."""
    for name in names:
        _, package, extra = LOGGER_CALLBACKS[name]
        if importlib.util.find_spec(package) is None:
            raise UserError(f"loggers: {name} needs the {package} package, which is not installed; "
                            f"pip install '{extra}' (or remove {name} from the study's loggers)")


def warn(text: str) -> None:
    print(f"sweep: warning: {text}", file=sys.stderr, flush=True)


def logger_callbacks(spec: Any, warn: Callable[[str], None] = warn) -> list[Any]:
    """Ray Tune's logger callbacks for the study's `loggers`; a tracker that cannot be reached is left out
    (MLflow) or switched to offline runs (W&B), with one warning line each."""
    callbacks = []
    tracking = getattr(spec, "tracking", None)
    for name in spec.loggers:
        path, _, _ = LOGGER_CALLBACKS[name]
        base = _import(path)
        cls = type(base.__name__, (StudyResults, base), {"tracker": name, "warn": staticmethod(warn)})
        if name == "mlflow":
            uri = (tracking and tracking.mlflow_uri) or os.environ.get("MLFLOW_TRACKING_URI") or None
            problem = mlflow_problem(uri)
            if problem:
                warn(f"loggers: mlflow: {problem}; this study runs without MLflow (its own results are complete); "
                     "start the server (`mlflow server --host 127.0.0.1 --port 5000`) or fix tracking.mlflow_uri "
                     "/ MLFLOW_TRACKING_URI, then re-run to track new trials")
                continue
            callbacks.append(cls(tracking_uri=uri, experiment_name=spec.name, tags={"sweep.study": spec.name}))
        elif name == "wandb":
            project = (tracking and tracking.wandb_project) or os.environ.get("WANDB_PROJECT") or spec.name
            folder = Path(spec.study_dir).resolve()
            problem = wandb_problem()
            if problem:
                os.environ["WANDB_MODE"] = "offline"  # Ray's setup reads the mode from the environment
                warn(f"loggers: wandb: {problem}; this study's W&B runs are written offline to {folder / 'wandb'}; "
                     f"upload them later with `wandb sync {folder / 'wandb'}/offline-run-*`")
            extra = {"mode": os.environ["WANDB_MODE"]} if os.environ.get("WANDB_MODE") else {}
            folder.mkdir(parents=True, exist_ok=True)
            wandb_logger_actor(cls, WandbRunWritten)
            callbacks.append(cls(project=project, group=spec.name, dir=str(folder), **extra))
        else:
            callbacks.append(cls())
    return callbacks


# ---- reachability, checked once before Tune starts ----------------------------------------------------
def mlflow_problem(uri: str | None) -> str | None:
    """None when MLflow answers at `uri` (None: MLflow's default); else why not, in a few words.

    Also limits MLflow's HTTP retries and timeout for this process (unless set by the user), so that a server
    that goes down later costs one short wait, then the tracker is off (see StudyResults)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(MLFLOW_TIMEOUT_S))
    if uri and urlparse(uri).scheme in ("http", "https"):
        problem = _tcp_problem(uri)
        if problem:
            return problem
    try:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:
        return f"tracking URI {hide_password(uri) if uri else '(MLflow default)'} refused: {_one_line(exc)}"
    return None


def wandb_problem() -> str | None:
    """Online W&B only: None when its server accepts a connection; else why not."""
    if os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return None
    return _tcp_problem(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")


def _tcp_problem(url: str) -> str | None:
    parsed = urlparse(url)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError as exc:
        return f"{hide_password(url)} is not a valid URL ({exc})"
    if not parsed.hostname:
        return f"{hide_password(url)} is not a valid URL (no host)"
    try:
        socket.create_connection((parsed.hostname, port), timeout=3).close()
    except OSError as exc:
        return f"{hide_password(url)} is not reachable ({exc.strerror or type(exc).__name__})"
    return None


# ---- the callbacks --------------------------------------------------------------------------------------
class StudyResults:
    """Mixed into a Ray Tune LoggerCallback: log the trainer's evaluation reports (x axis: the trainer step)
    and, at the end, the trial's final scores; skip the nested sweep_summary / sweep_error reports. Any
    exception from the tracker is one warning line, and the tracker is off for the rest of the run."""

    tracker = ""
    warn: Callable[[str], None] = staticmethod(warn)
    broken = False

    def _guarded(self, call: Callable[[], Any]) -> Any:
        if self.broken:
            return None
        try:
            return call()
        except Exception as exc:
            self.broken = True
            self.warn(f"loggers: {self.tracker} failed ({_one_line(exc)}); the study goes on without {self.tracker} "
                      f"(its own results are complete); {_FIXES.get(self.tracker, 'fix it')} and re-run to track "
                      "new trials")
            return None

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._guarded(lambda: super(StudyResults, self).setup(*args, **kwargs))

    def log_trial_start(self, trial: Any) -> None:
        def start() -> None:
            if self.tracker == "mlflow":
                self._start_mlflow_run(trial)
            else:
                super(StudyResults, self).log_trial_start(trial)
            if self.tracker == "wandb":
                _record(trial, "wandb", {"run_id": trial.trial_id, "project": self.project, "group": self.group,
                                         "mode": self.kwargs.get("mode") or "online", "dir": self.kwargs.get("dir")})
        self._guarded(start)

    def _start_mlflow_run(self, trial: Any) -> None:
        """Ray's log_trial_start, with the trial key and seed as tags of the new run."""
        import mlflow

        new = trial not in self._trial_runs
        shared_tags = self.tags
        self.tags = {**shared_tags, "sweep.key": str(trial.config.get("key")),
                     "sweep.seed": str(trial.config.get("seed"))}
        try:
            super(StudyResults, self).log_trial_start(trial)
        finally:
            self.tags = shared_tags
        if new:
            _record(trial, "mlflow", {"run_id": self._trial_runs[trial], "experiment": self.experiment_name,
                                      "experiment_id": self.mlflow_util.experiment_id,
                                      "tracking_uri": hide_password(mlflow.get_tracking_uri())})

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

        if STEP_KEY in result:
            # Tune adds the trial's config to every result; it is logged once as params/config, not as metrics.
            logged = {**{k: v for k, v in result.items() if k != "config"}, TIMESTEPS_TOTAL: result[STEP_KEY]}
        elif isinstance(result.get(SUMMARY_KEY), dict):
            summary = Summary.from_json(result[SUMMARY_KEY])  # the worker's record, as it travelled through Ray
            logged = {**final_scores(summary), TRAINING_ITERATION: result.get(TRAINING_ITERATION, iteration)}
            if isinstance(summary.steps, int):
                logged[TIMESTEPS_TOTAL] = summary.steps
        else:
            if ERROR_KEY in result:  # the trainer raised: Tune saw a normal end, the tracker run is FAILED
                self.__dict__.setdefault("errored", set()).add(getattr(trial, "trial_id", None))
            return
        self._guarded(lambda: super(StudyResults, self).log_trial_result(iteration, trial, logged))

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        failed = failed or getattr(trial, "trial_id", None) in self.__dict__.get("errored", ())
        self._guarded(lambda: super(StudyResults, self).log_trial_end(trial, failed))

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._guarded(lambda: super(StudyResults, self).on_experiment_end(trials, **info))


class WandbRunWritten:
    """Mixed into Ray's W&B logging actor (one per trial): its `run` returns only once W&B's service process
    (wandb-core, the actor's child) has written the run's records and exited.

    Ray ends the actor with `ray.kill` as soon as `run` returns, which kills the actor's child processes too;
    `wandb.finish()` alone can return before wandb-core has written the last records. `wandb.teardown()`
    waits for wandb-core to exit."""

    def run(self) -> Any:
        try:
            return super().run()
        finally:
            self._wandb.teardown()


def final_scores(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers of a trial's summary.json logged as its final scores (nested: test/<task>, transfer/<task>)."""
    scores: dict[str, Any] = {}
    for group in ("test", "transfer"):
        values = getattr(summary, group)
        if isinstance(values, dict):
            numbers = {task: v for task, v in values.items() if _is_number(v)}
            if numbers:
                scores[group] = numbers
    scores.update({name: getattr(summary, name) for name in FINAL_FIELDS if _is_number(getattr(summary, name))})
    return scores


# ---- trials/<key>/trackers.json ------------------------------------------------------------------------
def _record(trial: Any, tracker: str, run: dict[str, Any]) -> None:
    """Add the tracker run of this trial to trials/<key>/trackers.json (the driver is its only writer)."""
    from sweep.records.store import write_json_atomic

    trial_dir = trial.config.get("trial_dir")
    if not trial_dir:
        return
    path = Path(trial_dir) / RECORD_FILE
    runs = read_tracker_runs(path.parent)
    runs[tracker] = run
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, runs)


def read_tracker_runs(trial_dir: str | Path) -> dict[str, Any]:
    """{tracker: {run_id, ...}} for one trial; {} when it had none (or the file is unreadable)."""
    try:
        data = json.loads((Path(trial_dir) / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}



def _import(path: str) -> Any:
    module_name, _, name = path.partition(":")
    return getattr(importlib.import_module(module_name), name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _one_line(exc: BaseException, limit: int = 200) -> str:
    return shorten(f"{type(exc).__name__}: {exc}", limit)
