"""The Optuna mirror of a study: every trial appears live in an Optuna study (and so in optuna-dashboard).

The sweep driver is the only writer. A trial is created RUNNING when it starts (one transaction: its
parameters with their distributions and its start attributes; tpe trials come from `study.ask`),
gets one intermediate value per evaluation (`trial.report(dev_stsb, step)`: learning curves), and
ends COMPLETE (value = the study metric), FAIL (user attrs `status`, `reason`) or PRUNED.

How trainer verdicts map to Optuna states is decided in trainer.vocabulary.TRIAL_STATUSES (a status and
its Optuna state, e.g. diverged -> FAIL, pruned -> PRUNED); `state_for` applies it. Only COMPLETE carries
a value, the study metric from summary.json; an ok summary without it ends FAIL. The status and reason are
user attrs; a trial left RUNNING by a driver that died ends FAIL with status and reason "interrupted".

Every Optuna trial carries user attr `key` (the trial key), so trials map back to results/<study>/trials/<key>.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import math
import sqlite3
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

import optuna
import sqlalchemy
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from sweep.records.optuna_private import trial_id
from sweep.records.optuna_reads import first_distributions, group_by_key, read_trials
from sweep.records.store import sweep_state
from sweep.spec.expand import ask_in_space
from sweep.spec.schema import StudySpec, Trial
from sweep.spec.search import SearchMethod
from sweep.text import hide_password
from trainer.errors import UserError
from trainer.files import json_safe
from trainer.summary import Summary, metric_value, optuna_attrs
from trainer.vocabulary import ERROR, INTERRUPTED, optuna_state_name

# Which attempts are final (is_final) is decided in sweep.records.store, for this mirror and for sweep.records.resume.


@functools.cache
def dashboard_note_functions() -> tuple[Callable[..., str], Callable[..., None]]:
    """optuna-dashboard's own `get_note` and `save_note`, without its web app.

    The package's __init__ imports the app, and the app imports optuna.importance and with it scikit-learn,
    which no driver needs. The two functions live in optuna_dashboard/_note.py, which imports optuna alone, so
    that file is loaded by itself (the package is located, not imported). Where the file is not there (another
    layout of the package), the public import serves."""
    spec = importlib.util.find_spec("optuna_dashboard")
    folders = list(spec.submodule_search_locations or []) if spec else []
    note_file = next((Path(f) / "_note.py" for f in folders if (Path(f) / "_note.py").is_file()), None)
    if note_file is not None:
        note_spec = importlib.util.spec_from_file_location("_sweep_optuna_dashboard_note", note_file)
        module = importlib.util.module_from_spec(note_spec)
        note_spec.loader.exec_module(module)
        if callable(getattr(module, "get_note", None)) and callable(getattr(module, "save_note", None)):
            return module.get_note, module.save_note
    from optuna_dashboard import get_note, save_note

    return get_note, save_note


def sqlite_problem(url: str) -> str | None:
    """Why the SQLite file behind `url` cannot be read (sqlite's own words), or None: not SQLite, no file
    yet, or it reads. Read-only and quick: `PRAGMA quick_check`, no write lock taken."""
    if not url.startswith("sqlite:///"):
        return None
    path = Path(url[len("sqlite:///"):])
    if not path.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)) as db:
            row = db.execute("PRAGMA quick_check").fetchone()
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        return " ".join(str(exc).split())
    return None if row and row[0] == "ok" else f"integrity check: {row[0] if row else 'no answer'}"


def rebuild_storage(url: str, rebuild: bool, study: str, search: SearchMethod,
                    set_aside: Callable[[Path], Path]) -> None:
    """An unreadable SQLite storage: one line naming `--rebuild-storage` (exit 2), or with `rebuild` the file
    kept aside, so the run that follows records every finished trial again from its summary.json (the
    storage is a mirror of those records: sweep.records.resume's "record"), where the study's search method
    (`search`: sweep.spec.search) keeps nothing else there. Nothing happens to a storage that reads."""
    problem = sqlite_problem(url)
    if problem is None:
        if rebuild:
            print(f"Optuna storage {hide_password(url)} reads fine: nothing to rebuild", flush=True)
        return
    path = Path(url[len("sqlite:///"):])
    if not rebuild:
        raise UserError(f"cannot read the Optuna storage {path} ({problem}); it only mirrors the trials' "
                        f"summary.json files: `sweep run {study} --rebuild-storage` keeps it aside and rebuilds it")
    if not search.rebuildable:
        raise UserError(f"cannot read the Optuna storage {path} ({problem}); a {search.name} study's sampler history "
                        "lives only there, so it is not rebuilt: restore the file from a backup, or start a new study")
    aside = set_aside(path)
    print(f"Optuna storage {path} unreadable ({problem}): kept as {aside.name}; rebuilding it from the trials' "
          "summary.json", flush=True)


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage for `url` (sqlite:///..., postgresql://...).

    A SQLite storage is written without fsync (`PRAGMA synchronous=OFF`): Optuna commits once per user
    attribute, and the driver's cost per trial (bench/trial_overhead.py) must not carry an fsync per attribute.
    A killed driver still cannot damage the file (SQLite's journal keeps each commit atomic); only an
    operating-system crash or a power cut could, and the storage only mirrors the trials' summary.json files:
    `sweep run --rebuild-storage` rebuilds it.
    """
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}  # the dashboard may read while we write
    try:
        storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    except Exception as exc:  # sqlalchemy: bad URL, missing driver, server down
        reason = " ".join(str(exc).split())[:300]
        raise UserError(f"cannot open Optuna storage {hide_password(url)}: {reason}") from None
    if url.startswith("sqlite"):
        sqlalchemy.event.listen(storage.engine, "connect", _without_fsync)
        storage.engine.dispose()  # connections opened while Optuna set the schema up reconnect with the pragma
    return storage


def _without_fsync(connection: Any, record: Any) -> None:
    connection.execute("PRAGMA synchronous=OFF")


def optuna_value(value: Any) -> Any:
    """A parameter value as Optuna stores it: scalars as they are, lists joined with "+" (queue slices
    ["0-256", "768-1024"] -> "0-256+768-1024", as `sweep.spec.search_space` offers them), dicts as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return "+".join(map(str, value))
    return json.dumps(value, sort_keys=True)


def infer_distributions(trials: list[Trial], names: list[str]) -> dict[str, BaseDistribution]:
    """Distributions that hold every value a parameter takes in `trials`.

    Numbers get Int/FloatDistribution(min, max), so a grid can grow later without Optuna's
    "CategoricalDistribution does not support dynamic value space" error and the dashboard plots a
    numeric axis; anything else (strings, booleans, lists) is categorical.
    """
    out: dict[str, BaseDistribution] = {}
    for name in names:
        values = [optuna_value(t.params[name]) for t in trials if name in t.params]
        if not values:
            continue
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) == len(values) and all(math.isfinite(v) for v in numbers):
            if all(isinstance(v, int) for v in numbers):
                out[name] = IntDistribution(min(numbers), max(numbers))
            else:
                out[name] = FloatDistribution(float(min(numbers)), float(max(numbers)))
        else:
            out[name] = CategoricalDistribution(list(dict.fromkeys(values)))
    return out


class OptunaMirror:
    """One study in Optuna storage, written by the sweep driver only."""

    def __init__(self, spec: StudySpec, storage_url: str, distributions: dict[str, BaseDistribution],
                 common_attrs: dict[str, Any] | None = None):
        self.spec = spec
        self.distributions = distributions
        self.common_attrs = common_attrs or {}
        self.storage = open_storage(storage_url)
        self._storage_study_id: int | None = None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=spec.seeds[0] if spec.seeds else None)
        direction = "maximize" if spec.metric.goal == "maximize" else "minimize"
        try:
            self.study = optuna.create_study(
                study_name=spec.name, storage=self.storage, direction=direction, sampler=sampler,
                load_if_exists=True,
            )
        except Exception as exc:
            raise UserError(f"cannot open Optuna study '{spec.name}': {' '.join(str(exc).split())[:300]}") from None
        if self.study.direction.name.lower() != direction:
            raise UserError(f"Optuna study '{spec.name}' already exists with direction "
                            f"{self.study.direction.name.lower()}; the spec's metric.goal is {spec.metric.goal}: "
                            "rename the study or use a new storage")
        if self.study.metric_names != [spec.metric.name]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.study.set_metric_names([spec.metric.name])
        self._check_distributions()
        # The dashboard's note (the study's YAML) is written by a thread, while the driver starts Ray;
        # wait_for_note() joins it.
        self._note_error: str | None = None
        self._note = threading.Thread(target=self._save_note, name="optuna-note", daemon=True)
        self._note.start()
        self.running: dict[int, optuna.Trial] = {}  # Optuna trial number -> live trial
        self._reported_steps: dict[int, set[int]] = {}

    def _check_distributions(self) -> None:
        """Fail before anything runs when the study already holds a parameter with an incompatible
        distribution (Optuna refuses e.g. new categorical choices within one study)."""
        from optuna.distributions import check_distribution_compatibility

        held = first_distributions(self.storage, self._study_id())  # name -> (trial number, distribution)
        order = list(self.distributions)
        for name in sorted((n for n in order if n in held), key=lambda n: (held[n][0], order.index(n))):
            try:
                check_distribution_compatibility(held[name][1], self.distributions[name])
            except ValueError as exc:
                raise UserError(
                    f"parameter '{name}' of study '{self.spec.name}' changed in a way the existing Optuna "
                    f"study cannot hold ({exc}); give the study a new name (or a new storage) to run it"
                ) from None

    def wait_for_note(self, timeout: float = 60.0) -> None:
        """Wait until the dashboard's note is written; a failure to write it is one warning line."""
        self._note.join(timeout)
        if self._note_error:
            print(f"warning: the Optuna dashboard note of study '{self.spec.name}' was not written: "
                  f"{self._note_error}", file=sys.stderr)
            self._note_error = None

    def _save_note(self) -> None:
        try:
            self._write_note()
        except Exception as exc:  # the note is for people; the study goes on without it
            self._note_error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]

    def _write_note(self) -> None:
        get_note, save_note = dashboard_note_functions()
        text = self.spec.source_text.strip() or f"name: {self.spec.name}"
        note = f"## {self.spec.name}\n\n{self.spec.description or ''}\n\n```yaml\n{text}\n```\n"
        if get_note(self.study) != note:
            save_note(self.study, note)

    # ---- resume ---------------------------------------------------------------------------------
    def fail_interrupted(self) -> list[FrozenTrial]:
        """Mark trials a previous driver left RUNNING (or WAITING) as FAIL, reason "interrupted"."""
        stale = read_trials(self.storage, self._study_id(), states=(TrialState.RUNNING, TrialState.WAITING))
        for frozen in stale:
            self.storage.set_trial_user_attr(trial_id(frozen), "status", INTERRUPTED)
            self.storage.set_trial_user_attr(trial_id(frozen), "reason", INTERRUPTED)
            try:
                self.storage.set_trial_state_values(trial_id(frozen), TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass
        return stale

    def trials_by_key(self, user_attrs: Collection[str] | None = None) -> dict[str, list[FrozenTrial]]:
        """Every Optuna trial of the study grouped by its `key` user attr, oldest first. `user_attrs`: the user
        attributes to read besides `key` (None: all; `full_user_attrs` reads one trial's all later)."""
        wanted = None if user_attrs is None else {"key", *user_attrs}
        return group_by_key(read_trials(self.storage, self._study_id(), user_attrs=wanted))

    def full_user_attrs(self, frozen: FrozenTrial) -> dict[str, Any]:
        """Every user attribute of one trial (of one read with only some: trials_by_key's `user_attrs`)."""
        return dict(self.storage.get_trial(trial_id(frozen)).user_attrs)

    # ---- live trials ----------------------------------------------------------------------------
    def start(self, trial: Trial, attrs: dict[str, Any] | None = None) -> int:
        """Create the trial RUNNING with its parameters and start attributes; return its Optuna number.

        One storage transaction (the trial created from a template, as `study.add_trial` does), not one per
        parameter and attribute. The parameters are the study's own, so no sampler is asked."""
        params = {name: optuna_value(trial.params[name]) for name in self.distributions if name in trial.params}
        template = optuna.trial.create_trial(
            state=TrialState.RUNNING, params=params, user_attrs=self._start_attrs(trial, attrs),
            distributions={n: d for n, d in self.distributions.items() if n in params},
        )
        trial_id = self.storage.create_new_trial(self._study_id(), template_trial=template)
        live = optuna.Trial(self.study, trial_id)
        self.running[live.number] = live
        return live.number

    def ask(self, attrs: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        """A new trial with parameters sampled from the distributions (method tpe)."""
        live = ask_in_space(self.study, self.spec, self.distributions)
        for name, value in {**self.common_attrs, **(attrs or {})}.items():
            live.set_user_attr(name, value)
        self.running[live.number] = live
        return live.number, dict(live.params)

    def set_attrs(self, number: int, attrs: dict[str, Any]) -> None:
        live = self.running[number]
        for name, value in attrs.items():
            live.set_user_attr(name, json_safe(value))

    def report(self, number: int, step: int, value: float) -> None:
        live = self.running.get(number)
        if live is None or not isinstance(value, (int, float)):
            return
        steps = self._reported_steps.setdefault(number, set())
        if int(step) in steps:
            return  # the same step twice (a re-sent result): Optuna would only warn
        steps.add(int(step))
        live.report(float(value), int(step))

    def finish(self, number: int, summary: Mapping[str, Any]) -> str:
        """End a live trial from its summary; return the state it got (trainer.vocabulary.TrialState, a str)."""
        live = self.running.pop(number)
        self._reported_steps.pop(number, None)
        self._set_summary_attrs(trial_id(live), summary)
        state, value = self.state_for(summary)
        if state == TrialState.COMPLETE:
            self.study.tell(live, value)
        else:
            self.study.tell(live, state=state)
        return sweep_state(state)

    def fail(self, number: int, reason: str, status: str = ERROR) -> None:
        self.finish(number, Summary.from_json({"status": status, "reason": reason}))

    def add_finished(self, trial: Trial, summary: Mapping[str, Any], metrics: list[dict[str, Any]],
                     attrs: dict[str, Any] | None = None) -> tuple[int, str]:
        """Record a trial that ended on disk but never reached Optuna (the driver died in between)."""
        state, value = self.state_for(summary)
        params = {name: optuna_value(trial.params[name]) for name in self.distributions if name in trial.params}
        user_attrs = self._start_attrs(trial, attrs)
        user_attrs.update({k: json_safe(v) for k, v in optuna_attrs(summary).items()})
        intermediate = {int(m["step"]): float(m["dev_stsb"]) for m in metrics
                        if isinstance(m.get("step"), (int, float)) and isinstance(m.get("dev_stsb"), (int, float))}
        frozen = optuna.trial.create_trial(
            state=state, value=value if state == TrialState.COMPLETE else None, params=params,
            distributions={n: d for n, d in self.distributions.items() if n in params},
            user_attrs=user_attrs, intermediate_values=intermediate,
        )
        # What study.add_trial does (create_trial has validated the trial), keeping the new trial's id: its
        # number then costs one lookup, where reading the study's trials back cost O(trials) per record.
        trial_id = self.storage.create_new_trial(self._study_id(), template_trial=frozen)
        return self.storage.get_trial_number_from_id(trial_id), sweep_state(state)

    def _study_id(self) -> int:
        if self._storage_study_id is None:
            self._storage_study_id = self.storage.get_study_id_from_name(self.spec.name)
        return self._storage_study_id

    def state_for(self, summary: Mapping[str, Any]) -> tuple[TrialState, float | None]:
        """The Optuna state and value a trial ends with: the status's state (trainer.vocabulary); COMPLETE only
        with the study metric's value, FAIL without it."""
        state = TrialState[optuna_state_name(summary.status)]
        if state == TrialState.COMPLETE:
            value = metric_value(summary, self.spec.metric.name)
            return (state, value) if value is not None else (TrialState.FAIL, None)
        return state, None

    # ---- internals ------------------------------------------------------------------------------
    def _start_attrs(self, trial: Trial, attrs: dict[str, Any] | None) -> dict[str, Any]:
        out = {"key": trial.key, "seed": trial.seed}
        if trial.mtd is not None and math.isfinite(trial.mtd):
            out["mtd"] = trial.mtd
        out.update(self.common_attrs)
        out.update(attrs or {})
        return {k: json_safe(v) for k, v in out.items()}

    def _set_summary_attrs(self, trial_id: int, summary: Mapping[str, Any]) -> None:
        for name, value in optuna_attrs(summary).items():
            self.storage.set_trial_user_attr(trial_id, name, json_safe(value))
