"""`sweep status STUDY`: the trials of a study and their states, from trials.csv and the Optuna storage.

STUDY is the study YAML or its results folder. Nothing is written (a missing SQLite file is not created).
"""

from __future__ import annotations

import fcntl
import math
from collections import Counter
from pathlib import Path
from typing import Any

from sweep.records.store import StudyFolder, StudyLocation, locate_study, sweep_state
from sweep.run.cost_limit import spent_seconds
from sweep.text import shorten
from trainer.errors import UserError
from trainer.summary import provenance_columns, provenance_spread
from trainer.vocabulary import STS_TASKS, TrialState

SHOWN_RESULTS = ("dev_stsb", "avg", "mtd")


def show_status(study: str) -> int:
    """Print the trial table, the state counts and the Optuna study's counts; return 0."""
    location = locate_study(study)
    rows = location.folder.read_trials_csv()
    optuna_trials = _optuna_trials(location)
    if not rows and optuna_trials is None:
        raise UserError(f"study '{location.name}' has not run yet (no {location.folder.trials_csv} and no Optuna "
                        f"study in {_display(location.storage)}); start it with `sweep run`")
    if not rows and optuna_trials:
        rows = [_row_from_optuna(t) for t in optuna_trials]
    latest = _latest_optuna_by_key(optuna_trials or [])

    params = _param_columns(location.folder, rows)
    headers = ["key", "seed", "state", "status", "optuna", *params, *SHOWN_RESULTS, "reason"]
    table = []
    for row in rows:
        cells = {name: row.get(name, "") for name in headers}
        cells["avg"] = seven_task_average(row)
        frozen = latest.get(row.get("key"))
        cells["optuna"] = row.get("optuna_trial") or (str(frozen.number) if frozen is not None else "")
        in_optuna = sweep_state(frozen.state) if frozen is not None else None
        if in_optuna is not None and cells["optuna"] == str(frozen.number) and in_optuna != row.get("state"):
            cells["state"] = f"{row.get('state')} (optuna {in_optuna})"
        cells["reason"] = shorten(row.get("reason") or "", 60)
        table.append([_format(cells[name]) for name in headers])
    headers, table = without_empty_columns(headers, table)
    print(f"study {location.name}: {location.folder.path}")
    print(_render(headers, table))

    counts = Counter(row.get("state") or "?" for row in rows)
    print(f"{len(rows)} trials: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if optuna_trials is not None:
        optuna_counts = Counter(sweep_state(t.state) for t in optuna_trials)
        print(f"optuna ({_display(location.storage)}): {len(optuna_trials)} trials: "
              + ", ".join(f"{n} {state}" for state, n in sorted(optuna_counts.items())))
        spent, _ = spent_seconds({"": optuna_trials})
        limit = _cost_limit(location)
        if spent or limit is not None:
            print(f"device time spent: {spent / 3600:.3g} device-hours ({spent:.0f} s, measured per attempt)"
                  + ("" if limit is None else f" of the study's cost_limit {limit:.3g}"))
    problems: dict[str, str] = {}  # key -> why its summary.json cannot be used; filled by _next_run's read
    next_run = _next_run(location, [row.get("key") for row in rows if row.get("key")], optuna_trials, problems)
    for row in rows:  # a damaged result is reported, not shown as if the trial had none
        key = row.get("key")
        if next_run is None and key:  # the summaries were not read for the next run
            problems[key] = location.folder.summary_problem(key) or ""
        if key and problems.get(key):
            print(f"trial {key}: {location.folder.summary_path(key)} {problems[key]}; "
                  "`sweep run` sets it aside and restores it from Optuna (or runs the trial again)")
    if next_run:
        print(next_run)
    spread = provenance_spread([provenance_columns(summary) for summary in _ended_summaries(location.folder, rows)])
    if spread:
        print(f"the study's finished trials ran on {spread}: `sweep analyze` warns where it compares them")
    if counts.get(TrialState.RUNNING) and not _driver_running(location.folder):
        print("no `sweep run` is running this study: its RUNNING trials were interrupted and run again "
              "on the next `sweep run`")
    return 0


def _cost_limit(location: StudyLocation) -> float | None:
    """The study's cost_limit: from its study file when located by it, else from the results folder's study.yaml."""
    if location.spec is not None:
        return location.spec.cost_limit
    import yaml

    try:
        recorded = yaml.safe_load(location.folder.study_yaml.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    limit = recorded.get("cost_limit") if isinstance(recorded, dict) else None
    return float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool) else None


def _ended_summaries(folder: StudyFolder, rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The summary.json of every trial that ended with a result (a COMPLETE or PRUNED row)."""
    summaries = []
    for row in rows:
        if row.get("key") and row.get("state") in (TrialState.COMPLETE, TrialState.PRUNED):
            summary = folder.read_summary(row["key"])
            if summary is not None:
                summaries.append(summary)
    return summaries


def _optuna_trials(location: StudyLocation) -> list[Any] | None:
    """The study's Optuna trials, or None when the storage or the study does not exist (yet)."""
    from sweep.records.resume import optuna_trials

    return optuna_trials(location.name, location.storage, "trials.csv is intact; restore or remove the storage file")


def _next_run(location: StudyLocation, keys: list[str], optuna_trials: list[Any] | None,
              problems: dict[str, str]) -> str | None:
    """What the next `sweep run` does, decided as it decides (sweep.records.resume); None without a valid study.yaml.
    Fills `problems` (key -> why its summary.json cannot be used) from the same read of the summaries."""
    from sweep.records.optuna_reads import group_by_key
    from sweep.records.resume import is_done, trial_states
    from sweep.spec import load_study

    try:
        recorded = location.folder.study_yaml.read_text()
    except OSError:
        recorded = None
    if location.spec is not None and recorded == location.spec.source_text:
        spec = location.spec  # study.yaml holds the study file given: validated once, by locate_study
    else:
        try:
            # the study file's plugins: the one given, else the one the study last ran from (a results folder's
            # study.yaml is a copy whose plugin files lie beside the original)
            study_file = location.study_file() if location.spec is None else None
            folder = location.spec.plugin_folder if location.spec is not None else \
                (Path(study_file).parent if study_file else None)
            spec = load_study(location.folder.study_yaml, trials=False, plugin_folder=folder)  # trials: the rows
        except UserError:
            return None
    if spec.name != location.name:
        return None
    if Path(spec.study_dir).resolve() != location.folder.path:  # a relative results_dir, read from elsewhere
        # (a pydantic model: dataclasses.replace, used here before, raised TypeError)
        spec = spec.model_copy(update={"results_dir": str(location.folder.path.parent)})
    same_storage = spec.storage_url == location.storage
    by_key = None  # trial_states reads them
    if optuna_trials is not None and same_storage:
        by_key = group_by_key(optuna_trials)  # read once, by show_status
    states = trial_states(spec, keys=keys, by_key=by_key, problems=problems) or {}
    to_run = [k for k in keys if not is_done(states.get(k))]
    return (f"next `sweep run`: {len(keys) - len(to_run)} done (skipped), {len(to_run)} to run"
            + (f" ({', '.join(to_run[:5])}{', ...' if len(to_run) > 5 else ''})" if to_run else ""))


def _latest_optuna_by_key(trials: list[Any]) -> dict[str, Any]:
    latest: dict[str, Any] = {}
    for frozen in trials:
        key = frozen.user_attrs.get("key")
        if key:
            latest[key] = frozen  # trials come in number order: the last one wins
    return latest


def seven_task_average(row: dict[str, Any]) -> Any:
    """The row's avg, shown only beside all seven task scores: a trials.csv or Optuna record written before
    the average needed them holds a one-task study's STS-B score as its avg."""
    if any(row.get(task) in (None, "") for task in STS_TASKS):
        return ""
    return row.get("avg", "")


def without_empty_columns(headers: list[str], table: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """The table without the columns that are empty in every row (`avg` of a study that evaluates fewer than
    the seven tasks, `mtd` of one without MoCoSE, `reason` when no trial has one); the key column stays.

    >>> without_empty_columns(["key", "avg", "dev_stsb"], [["a", "", "70.10"], ["b", "", ""]])
    (['key', 'dev_stsb'], [['a', '70.10'], ['b', '']])
    """
    keep = [i for i in range(len(headers)) if i == 0 or any(row[i] for row in table)]
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in table]


def _row_from_optuna(frozen: Any) -> dict[str, Any]:
    row = {"key": frozen.user_attrs.get("key", f"#{frozen.number}"), "seed": frozen.user_attrs.get("seed", ""),
           "state": sweep_state(frozen.state), "status": frozen.user_attrs.get("status", ""),
           "reason": frozen.user_attrs.get("reason", ""), "optuna_trial": str(frozen.number),
           "dev_stsb": frozen.user_attrs.get("best_dev_stsb", ""), "avg": frozen.user_attrs.get("avg", ""),
           "mtd": frozen.user_attrs.get("mtd", ""), **{task: frozen.user_attrs.get(task, "") for task in STS_TASKS}}
    row.update(frozen.params)
    return row


def _param_columns(folder: StudyFolder, rows: list[dict[str, Any]]) -> list[str]:
    """The swept parameters: the study.yaml's `parameters` keys that appear in the rows."""
    import yaml

    try:
        # libyaml's parser when PyYAML has it: a 10,000-value grid takes seconds in the pure-Python one
        data = yaml.load(folder.study_yaml.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        declared = list((data.get("parameters") or {}).keys()) if isinstance(data, dict) else []
    except (OSError, yaml.YAMLError, AttributeError):
        declared = []
    present = set().union(*(row.keys() for row in rows)) if rows else set()
    return [name for name in declared if name in present]


def _driver_running(folder: StudyFolder) -> bool:
    """Whether a `sweep run` holds the study's lock (on this machine)."""
    if not folder.lock_file.exists():
        return False
    with open(folder.lock_file, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.2f}"
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    if "." in text and math.isfinite(number):
        return f"{number:.4g}" if abs(number) < 1 else f"{number:.2f}"
    return text


def _render(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)




def _display(url: str) -> str:
    from sweep.text import hide_password

    return hide_password(url)
