"""The results folder of a study (results/README.md): paths, atomic writes, trials.csv.

Everything here is plain files; nothing imports Ray or Optuna. Every write goes to a temporary
file in the same folder and is moved into place with `os.replace`, so a reader (or a driver killed
with SIGKILL) never sees half a file.

    results/<study>/study.yaml, optuna.db, trials.csv, trials/<key>/{config.yaml, metrics.jsonl,
    summary.json, log.txt}, figures/, artifacts/, ray/
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from sweep.spec.schema import StudySpec, Trial
from trainer.files import dotted_get, json_safe, write_text_atomic
from trainer.summary import Summary, read_summary_file, trials_csv_row, write_summary_file
from trainer.vocabulary import STS_TASKS, TRAINED_STATUSES, TRANSFER_TASKS, TrialState, ends_for_good

# STS_TASKS, TRANSFER_TASKS (summary.transfer = {task: acc, ..., "avg": ...}) and what each trial status means
# (final, a result, its Optuna state) are trainer.vocabulary's.

# libyaml's parser when PyYAML was built with it (the same documents as the pure-Python one, parsed in C): a
# resume reads every finished trial's config.yaml.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# trials.csv: these come first, then one column per swept parameter, then CONFIG_COLUMNS, RESULT_COLUMNS.
HEAD_COLUMNS = ("key", "seed", "state", "status", "reason", "optuna_trial")
CONFIG_COLUMNS = (
    "method", "variant", "batch_size", "ema.schedule", "ema.decay", "ema.decay_end",
    "queue.size", "queue.initial_size", "queue.slices",
)
RESULT_COLUMNS = (
    "steps", "mtd", "mtd_measured", "ema_age", "queue_age_mean", "queue_age_max", "best_step", "dev_stsb",
    *STS_TASKS, "avg", *TRANSFER_TASKS, "transfer_avg", "precision", "commit",
    "align", "uniform", "sentences_per_s", "wall_time_s", "weights",
)


# ---- atomic writes ------------------------------------------------------------------------------
# write_text_atomic and json_safe live in trainer.files (the trainer writes its summary the same way).
def write_json_atomic(path: str | Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(json_safe(data), indent=2) + "\n")


# ---- the study folder ---------------------------------------------------------------------------
class StudyFolder:
    """Paths and files of one study's results folder."""

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        self._trials = self.path / "trials"

    @property
    def study_yaml(self) -> Path:
        return self.path / "study.yaml"

    @property
    def trials_csv(self) -> Path:
        return self.path / "trials.csv"

    @property
    def ray_dir(self) -> Path:
        return self.path / "ray"

    @property
    def artifacts_dir(self) -> Path:
        return self.path / "artifacts"

    @property
    def lock_file(self) -> Path:
        return self.path / ".driver.lock"

    def default_storage(self) -> str:
        return f"sqlite:///{self.path / 'optuna.db'}"

    def trial_dir(self, key: str) -> Path:
        return self._trials / key

    def summary_path(self, key: str) -> Path:
        return self.trial_dir(key) / "summary.json"

    def metrics_path(self, key: str) -> Path:
        return self.trial_dir(key) / "metrics.jsonl"

    def log_path(self, key: str) -> Path:
        return self.trial_dir(key) / "log.txt"

    def model_dir(self, key: str) -> Path:
        """The trial's best-dev encoder and tokenizer (kept as the study's keep_weights says)."""
        return self.trial_dir(key) / "model"

    # ---- writes ----
    def write_study_yaml(self, spec: StudySpec) -> None:
        text = spec.source_text
        if not text.strip():
            text = yaml.safe_dump(spec.to_dict(), sort_keys=False)
        write_text_atomic(self.study_yaml, text)

    def write_trial_config(self, trial: Trial) -> None:
        write_text_atomic(self.trial_dir(trial.key) / "config.yaml", yaml.safe_dump(trial.config, sort_keys=False))

    def write_summary(self, key: str, summary: Summary) -> None:
        write_summary_file(self.summary_path(key), summary)

    def write_metrics(self, key: str, metrics: Iterable[dict[str, Any]]) -> None:
        lines = "".join(json.dumps(json_safe(m)) + "\n" for m in metrics)
        write_text_atomic(self.metrics_path(key), lines)

    def clear_attempt(self, key: str) -> None:
        """Remove what an interrupted or failed attempt left (metrics.jsonl, summary.json, trackers.json,
        model/)."""
        for path in (self.summary_path(key), self.metrics_path(key), self.trial_dir(key) / "trackers.json"):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        shutil.rmtree(self.model_dir(key), ignore_errors=True)

    # ---- reads ----
    def read_config(self, key: str) -> dict[str, Any] | None:
        """The resolved config a trial ran with: its config.yaml, else the config in its summary.json."""
        try:
            data = yaml.load(self.trial_dir(key).joinpath("config.yaml").read_text(), Loader=_YAML_LOADER)
        except (OSError, yaml.YAMLError):
            summary = self.read_summary(key)
            data = summary.config if summary is not None else None
        return data if isinstance(data, dict) else None

    def read_summary(self, key: str) -> Summary | None:
        """The trial's summary.json, or None when absent or unreadable (see summary_problem)."""
        return self.read_summary_checked(key)[0]

    def summary_problem(self, key: str) -> str | None:
        """Why the trial's summary.json exists but cannot be used (None when it is absent or fine): reported, never
        taken as "no result" (trainer.summary.read_summary_file)."""
        return self.read_summary_checked(key)[1]

    def read_summary_checked(self, key: str) -> tuple[Summary | None, str | None]:
        """(read_summary, summary_problem) from one read of the file (trainer.summary.read_summary_file)."""
        return read_summary_file(self.summary_path(key))

    def set_aside(self, path: Path, why: str = "damaged") -> Path:
        """Rename a file or trial folder to <name>.<why>-<time> beside it (`why`: damaged, or replaced by a re-run);
        return the new path."""
        target = path.with_name(f"{path.name}.{why}-{time.strftime('%Y%m%d-%H%M%S')}")
        n = 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.name}.{why}-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        os.replace(path, target)
        return target

    def read_metrics(self, key: str) -> list[dict[str, Any]]:
        rows = []
        try:
            lines = self.metrics_path(key).read_text().splitlines()
        except OSError:
            return rows
        for line in lines:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a kill
        return rows

    def read_trials_csv(self) -> list[dict[str, str]]:
        try:
            with open(self.trials_csv, newline="", encoding="utf-8") as f:
                return list(csv.DictReader(f))
        except FileNotFoundError:
            return []


# ---- trials.csv ---------------------------------------------------------------------------------
class TrialsTable:
    """The rows of trials.csv, one per trial key, kept in memory and rewritten whole (atomically).

    While trials run, changes are written with `write_soon()`: at most once per REWRITE_EVERY_S, and
    never more often than 20 times the last rewrite took, so the file stays seconds behind the run while
    its rewrites (each O(study size)) take at most ~5% of the driver's time; one rewrite per trial event
    would make a study of n trials cost O(n^2). `write()` writes now (the plan, the end of a run).
    """

    REWRITE_EVERY_S = 2.0

    def __init__(self, folder: StudyFolder, param_names: Iterable[str]):
        self.folder = folder
        self.param_names = list(param_names)
        self.rows: dict[str, dict[str, Any]] = {}
        self.unwritten = False  # rows changed since the last write
        self._written_at = -math.inf  # time.monotonic() of the last write
        self.last_write_seconds = 0.0  # how long the last rewrite took (the wait scales with it)

    def columns(self) -> list[str]:
        columns = list(HEAD_COLUMNS)
        for name in (*self.param_names, *CONFIG_COLUMNS, *RESULT_COLUMNS):
            if name not in columns:
                columns.append(name)
        return columns

    def add(self, trial: Trial, state: TrialState = TrialState.PENDING) -> dict[str, Any]:
        row = self.rows.get(trial.key)
        if row is None:
            row = {"key": trial.key, "seed": trial.seed, "state": state, "mtd": trial.mtd}
            for name in (*self.param_names, *CONFIG_COLUMNS):
                row[name] = trial.params[name] if name in trial.params else dotted_get(trial.config, name)
            self.rows[trial.key] = row
        return row

    def update(self, key: str, **values: Any) -> None:
        self.rows[key].update(values)

    def set_summary(self, key: str, summary: Summary) -> None:
        """Copy a trainer summary's results into the row."""
        self.rows[key].update(trials_csv_row(summary))

    def write(self) -> None:
        started = time.monotonic()
        columns = self.columns()
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([csv_cell(row.get(name)) for name in columns] for row in self.rows.values())
        write_text_atomic(self.folder.trials_csv, buffer.getvalue())
        self.unwritten = False
        self._written_at = time.monotonic()
        self.last_write_seconds = self._written_at - started

    def write_soon(self) -> None:
        """Note a change; rewrite trials.csv if the last rewrite is old enough (see the class docstring)."""
        self.unwritten = True
        self.write_if_due()

    def write_if_due(self) -> None:
        """Rewrite trials.csv when it has unwritten changes and the last rewrite is old enough."""
        wait = max(self.REWRITE_EVERY_S, 20 * self.last_write_seconds)
        if self.unwritten and time.monotonic() - self._written_at >= wait:
            self.write()


def weights_state(folder: StudyFolder, key: str, summary: Summary, on_disk: bool | None = None) -> str:
    """kept (trials/<key>/model/ is there), deleted (the trainer saved it: save_model was set and the run
    ended with a best-dev state; a better trial's end removed it), none (never saved), or, on a cluster,
    "lost with node <host>" / "not received from <host>" (the trial's files never reached the driver).
    `on_disk`: whether trials/<key>/model/ is there, when the caller knows (None: look)."""
    if folder.model_dir(key).is_dir() if on_disk is None else on_disk:
        return "kept"
    files = summary.files  # on a cluster: whether the trial's files reached the driver (sweep.run.trial_files)
    if isinstance(files, dict) and files.get("arrived") is False:
        return f"{'lost with node' if files.get('lost') else 'not received from'} {files.get('from') or '?'}"
    saved = ((summary.config or {}).get("save_model") and summary.best_step is not None
             and summary.status in TRAINED_STATUSES)
    return "deleted" if saved else "none"


def sweep_state(state: Any) -> TrialState:
    """The sweep's TrialState (trainer.vocabulary) of an Optuna `optuna.trial.TrialState`, by its name: the one
    place the sweep reads an Optuna trial's state (`sweep_state(frozen.state)`). Duck-typed, so that this module
    imports no Optuna."""
    return TrialState[state.name]


def is_final(attempt: Any) -> bool:
    """True when this Optuna attempt (a FrozenTrial) ended its key for good: COMPLETE, PRUNED, or FAIL with a
    final status (trainer.vocabulary.ends_for_good). Read by the resume decision (sweep.records.resume) and the mirror
    (sweep.records.mirror)."""
    return ends_for_good(sweep_state(attempt.state), attempt.user_attrs.get("status"))


def csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)  # one cell, e.g. queue.slices ["0-256", "768-1024"]
    if isinstance(value, float) and math.isnan(value):
        return ""
    return value




@dataclass
class StudyLocation:
    """Where a study's results and Optuna storage are: what `sweep status` and `sweep dashboard` need."""

    folder: StudyFolder
    name: str  # the Optuna study name (the spec's name)
    storage: str  # Optuna storage URL
    spec: Any = None  # the StudySpec, when located from the study YAML (load_study(path, trials=False))

    def study_file(self) -> str | None:
        """The study file to change and run again: the one given, else the one `sweep run` last ran the study
        from (the Optuna study's user attribute study_file, sweep.run.plan) while it exists; None when unknown."""
        if self.spec is not None and self.spec.path:
            return self.spec.path
        if self.storage.startswith("sqlite:///") and not Path(self.storage[len("sqlite:///"):]).is_file():
            return None  # no Optuna study here (and none is created by looking)
        try:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            path = optuna.load_study(study_name=self.name, storage=self.storage).user_attrs.get("study_file")
        except Exception:  # an unreachable or missing Optuna storage: the user knows the file
            return None
        return path if isinstance(path, str) and Path(path).is_file() else None


def locate_study(study: str | Path) -> StudyLocation:
    """Resolve a CLI STUDY argument (the study YAML or its results folder).

    A results folder is recognised by its study.yaml (or optuna.db / trials.csv); the study name and
    storage come from that study.yaml (`name:`, `storage:`), else the folder name and its optuna.db.
    """
    from trainer.errors import UserError

    path = Path(study)
    if path.is_file():
        from sweep.spec.load import load_study

        spec = load_study(path, trials=False)  # its name, folder and storage; the trials are not read here
        folder = StudyFolder(spec.study_dir)
        return StudyLocation(folder, spec.name, spec.storage_url, spec)
    if path.is_dir():
        folder = StudyFolder(path)
        if not any(p.exists() for p in (folder.study_yaml, folder.trials_csv, folder.path / "optuna.db")):
            raise UserError(f"{path}: not a study results folder (no study.yaml, trials.csv or optuna.db); "
                            "pass the study YAML file or results/<study name>")
        data: Any = {}
        try:
            data = yaml.safe_load(folder.study_yaml.read_text()) or {}
        except (OSError, yaml.YAMLError):
            pass
        if not isinstance(data, dict):
            data = {}
        name = str(data.get("name") or folder.path.name)
        storage = str(data.get("storage") or folder.default_storage())
        return StudyLocation(folder, name, storage)
    raise UserError(f"{study}: no such study file or results folder; pass studies/<name>.yaml or results/<name>")
