"""Read a study's results folder into one pandas DataFrame, one row per trial.

Input contract: results/README.md. Each trial's `trials/<key>/summary.json` is the record (results
and the full resolved config); `trials.csv`, a view the sweep writes from those summaries, adds the
Optuna state and the trials that have no summary yet (pending, running, interrupted). A folder with
only a trials.csv (copied by hand) is read from it. Either way each row gets:

- the trial's columns (key, seed, state, status, swept parameters, scores, align/uniform, ...);
- `queue.slices` as a canonical label ("all", "0-512", "0-256+768-1024") so slices group and sort;
- `mtd`: MoCoSE's d_trace, by formula (`mtd_source="formula"`, the default: recomputed by
  `trainer.mtd.config_traceable_distance` with the caller's explicit `eta_choice` / `k_choice`) or as
  the trainer measured it (`mtd_source="measured"`: summary.json's `mtd.measured`, docs/science/traceable-distance.md);
  NaN for methods without EMA and queue. The formula value the trainer recorded is kept as
  `mtd_recorded`, the measured one as `mtd_measured`, with `ema_age`, `queue_age_mean`, `queue_age_max`;
- `gaussian.m_per_batch`: the number of Gaussian negatives as a multiple of the batch size;
- `avg` only where the trial has all seven STS task scores (trainer.evaluation.sts_average): an older one-task trial's
  `avg` (its STS-B score) is dropped, so it is never read as the papers' seven-task average;
- `older_reading`: what the current reading of the papers does differently for the trial (trainer.readings),
  "" for a trial of the current reading; `reading_groups` keeps the two apart.

The config that MTD needs comes from the trial's summary.json "config" when that file exists (it
holds everything, e.g. `ema.schedule_steps`), else from the CSV's columns.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
import yaml

from trainer.evaluation.sts_average import AVG
from trainer.method_rules import traces_distance
from trainer.mtd import ETA_CHOICES, K_CHOICES, config_traceable_distance
from trainer.summary import (
    PROVENANCE_WORDS,
    Summary,
    analysis_row,
    older_reading,
    provenance_spread,
    read_summary_file,
)
from trainer.vocabulary import FINAL_FAIL_STATUSES, OK, PRUNED, STS_TASKS, TRANSFER_TASKS, TrialState, optuna_state_name

MTD_SOURCES = ("formula", "measured")
SCORES = STS_TASKS + ("avg",)
ENDED_EARLY = (*FINAL_FAIL_STATUSES, PRUNED)  # statuses of runs that stopped before their planned steps
# SentEval transfer accuracies (summary.transfer; "avg" there is the column transfer_avg)
TRANSFER_SCORES = TRANSFER_TASKS + ("transfer_avg",)

# Columns that are never swept parameters (bookkeeping, measurements, per-trial paths).
NOT_PARAMETERS = {
    "key", "seed", "state", "status", "reason", "steps", "mtd", "mtd_recorded", "mtd_measured", "ema_age",
    "queue_age_mean", "queue_age_max", "age_mean", "age_max", "variant", "precision",
    "best_step", "dev_stsb", "align", "uniform", "align_uniform_split", "sentences_per_s", "wall_time_s",
    "output_dir", "device", "save_model", "data.data_dir", "data.cache_dir", "data.corpus", "eval.batch_size",
    "gaussian.m_per_batch", "error", "transfer_mode", "eval.final_tasks", "eval.transfer_mode", "reading",
    "older_reading", "protocol", "commit", "packages", "device_name",
    *SCORES, *TRANSFER_SCORES,
}
# Top-level config keys without a dot that may be swept.
UNDOTTED_CONFIG_KEYS = {
    "model", "method", "pooler", "batch_size", "max_steps", "epochs", "temperature", "dropout", "precision",
    "collapse_threshold",
}


class ResultsError(ValueError):
    """A results folder that cannot be analysed; the message says what to do."""


def load_results(
    study_dir: str | Path,
    eta_choice: str = "mean",
    k_choice: str = "oldest",
    include_failed: bool = False,
    mtd_source: str = "formula",
) -> pd.DataFrame:
    """One row per trial of `study_dir`, as a pandas DataFrame; by default only COMPLETE trials with status ok.

    Columns: the trial's `key`, `seed`, `state` and `status`; its resolved config by dotted key (`ema.decay`,
    `queue.size`, ...); the scores (`dev_stsb`, the seven STS tasks, `avg`, the transfer tasks where run);
    `mtd`, by formula (`eta_choice`: "initial", "final" or "mean" of the EMA schedule; `k_choice`: the
    "oldest" queue position read, or the queue "size") or as measured (`mtd_source="measured"`); and the
    run's other summary fields. `include_failed=True` keeps every row (FAIL, PRUNED, RUNNING, diverged,
    collapsed ...), e.g. to count failures; their scores are whatever was recorded (often NaN). A folder
    with nothing to analyse raises `ResultsError` (which `sweep analyze` prints as one line, exit status 2).
    """
    if eta_choice not in ETA_CHOICES:
        raise ValueError(f"eta_choice must be one of {ETA_CHOICES}, got {eta_choice!r}")
    if k_choice not in K_CHOICES:
        raise ValueError(f"k_choice must be one of {K_CHOICES}, got {k_choice!r}")
    if mtd_source not in MTD_SOURCES:
        raise ValueError(f"mtd_source must be one of {MTD_SOURCES}, got {mtd_source!r}")
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise ResultsError(f"{study_dir}: no such results folder; pass results/<study name> or run the study first")
    summaries = _read_summaries(study_dir)
    view = _read_trials_csv(study_dir / "trials.csv")
    states = dict(zip(view["key"], view["state"])) if {"key", "state"} <= set(view.columns) else {}
    rows = [_row_from_summary(key, s, states.get(key)) for key, s in summaries.items()]
    rest = view[~view["key"].isin(summaries)] if "key" in view.columns else view  # no summary (yet)
    table = pd.concat([pd.DataFrame(rows), rest], ignore_index=True) if rows else rest
    if table.empty:
        raise ResultsError(
            f"{study_dir}: no trials found (no rows in trials.csv and no trials/*/summary.json); "
            "run the study with `sweep run` first"
        )

    table = _normalise(table)
    if not include_failed:
        finished = table[(table["state"] == TrialState.COMPLETE) & (table["status"] == OK)]
        if finished.empty:
            counts = ", ".join(f"{n} {s}" for s, n in _state_counts(table).items())
            raise ResultsError(
                f"{study_dir}: no COMPLETE trials with status ok yet ({counts}); "
                "wait for the sweep (`sweep status`) or look at the failed trials' summary.json"
            )
        table = finished.copy()

    measured = {key: (s.mtd or {}).get("measured") for key, s in summaries.items()}
    for name in ("ema_age", "queue_age_mean", "queue_age_max"):
        if name not in table.columns:
            table[name] = [_mtd_field(summaries.get(str(k)), name) for k in table["key"]]
    table["mtd_measured"] = pd.to_numeric(pd.Series([measured.get(str(k)) for k in table["key"]],
                                                    index=table.index, dtype=object), errors="coerce")
    if mtd_source == "measured":
        table["mtd"] = table["mtd_measured"]
    else:
        table["mtd"] = [
            trial_mtd(row, summaries.get(str(row["key"])), eta_choice, k_choice) for _, row in table.iterrows()
        ]
    table["gaussian.m_per_batch"] = [_gaussian_ratio(row) for _, row in table.iterrows()]
    table["older_reading"] = ["; ".join(older_reading(summaries.get(str(k)))) for k in table["key"]]
    return table.reset_index(drop=True)


OLDER_READING_FOLDER = "older_reading"


@dataclass
class ComparableGroup:
    """Trials that may be put in one table or figure: one reading of the papers and one evaluation protocol.
    `folder`: where under the figures folder they go ("" for the main group); `note`: the one line saying why
    they are apart (None for the main group); `warning`: what differs among them that is not the protocol (code,
    packages, device), or None."""

    folder: str
    table: pd.DataFrame
    note: str | None
    warning: str | None


def comparable_groups(table: pd.DataFrame) -> list[ComparableGroup]:
    """The trials split so that nothing not comparable is pooled: first by reading (reading_groups), then by
    evaluation protocol (trainer.summary.evaluation_protocol). The main group is the current reading's largest
    protocol group (the first in trial order on a tie); every other group goes to a folder of its own, named
    after what sets it apart, with one line saying so. Each group carries a warning when its trials ran on
    different code commits, package versions or devices (analysis.load.provenance_warning)."""
    groups = []
    for folder, part, note in [split for group in reading_groups(table) for split in code_groups(*group)]:
        protocols = part["protocol"].fillna("") if "protocol" in part.columns else pd.Series("", part.index)
        order = protocols.value_counts(sort=False)
        main = max(order.index, key=lambda p: (order[p], -list(order.index).index(p))) if len(order) else ""
        reference = _protocol(main)
        for protocol in [main, *[p for p in order.index if p != main]]:
            trials = part[protocols == protocol].copy()
            if protocol == main:
                groups.append(ComparableGroup(folder, trials, note, provenance_warning(trials)))
                continue
            differs = {k: v for k, v in _protocol(protocol).items() if reference.get(k) != v}
            name = "_".join(f"{k.split('.')[-1]}-{_slug(v)}" for k, v in differs.items()) or "protocol"
            sub = f"{folder}/protocol_{name}".lstrip("/")
            what = ", ".join(f"{k} {_text(v)} (the others: {_text(reference.get(k))})" for k, v in differs.items())
            groups.append(ComparableGroup(sub, trials, f"{len(trials)} of {len(table)} trials were evaluated under "
                                          f"another protocol ({what}): analysed apart in {sub}/, never compared "
                                          "with the others", provenance_warning(trials)))
    return groups


def provenance_warning(table: pd.DataFrame) -> str | None:
    """One line naming what differs among trials drawn together that is not their protocol: their code commits,
    package versions, devices (each value with its trial count; trainer.summary.provenance_spread); None when
    nothing does."""
    columns = [c for c in PROVENANCE_WORDS if c in table.columns]
    spread = provenance_spread(table[columns].to_dict("records")) if columns else None
    return f"these trials ran on {spread}: differences between them may come from that" if spread else None


def _protocol(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return "+".join(map(str, value)) if isinstance(value, list) else str(value)


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", _text(value))[:40].strip("-") or "none"


def code_groups(folder: str, table: pd.DataFrame, note: str | None) -> list[tuple[str, pd.DataFrame, str | None]]:
    """A group of trials split by the edited source they ran (trainer.provenance.short_commit "<commit>+<hash>":
    uncommitted changes, untracked files under the packages, plugins), never pooled: two different edits are two
    code states. Trials of clean commits stay together (their commits differ at most: provenance_warning says so).
    The largest state keeps `folder`; every other goes to `folder`/code_<state>/, with a line saying so."""
    commits = table["commit"] if "commit" in table.columns else pd.Series(None, table.index, dtype=object)
    state = commits.map(lambda c: c if isinstance(c, str) and "+" in c and not c.endswith("+dirty") else "")
    counts = state.value_counts(sort=False)
    if len(counts) < 2:
        return [(folder, table, note)]
    main = max(counts.index, key=lambda s: (counts[s], -list(counts.index).index(s)))
    out = [(folder, table[state == main].copy(), note)]
    for other in [s for s in counts.index if s != main]:
        sub = f"{folder}/code_{_slug(other or 'committed')}".lstrip("/")
        out.append((sub, table[state == other].copy(),
                    f"{counts[other]} of {len(table)} trials ran on another code state "
                    f"({other or 'committed code'}; the others: {main or 'committed code'}): analysed apart in {sub}/, "
                    "never pooled with the others"))
    return out


def reading_groups(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str | None]]:
    """The trials split by reading, never pooled: [(sub-folder, trials, note)]. The current reading's trials go
    to "" (the figures folder itself) and the older reading's to OLDER_READING_FOLDER; when every trial is of an
    older reading they stay in "". The note (one line, None for the current reading's) says which and why."""
    older = table["older_reading"].astype(bool) if "older_reading" in table.columns else pd.Series(False, table.index)
    if not older.any():
        return [("", table, None)]
    changes = "; ".join(dict.fromkeys(c for text in table.loc[older, "older_reading"] for c in text.split("; ")))
    count = f"{int(older.sum())} of {len(table)} trials ran" if not older.all() else f"all {len(table)} trials ran"
    if older.all():
        return [("", table, f"{count} under an older reading of the papers ({changes}); re-run them with "
                           "`sweep run STUDY --rerun-changed` for the current one")]
    return [("", table[~older].copy(), None),
            (OLDER_READING_FOLDER, table[older].copy(),
             f"{count} under an older reading of the papers ({changes}): analysed apart in {OLDER_READING_FOLDER}/, "
             "never pooled with the others")]


def read_study_spec(study_dir: str | Path) -> dict[str, Any]:
    """The resolved spec the sweep wrote as <study_dir>/study.yaml, or {} when absent or unreadable."""
    path = Path(study_dir) / "study.yaml"
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def declared_parameters(spec: dict[str, Any]) -> list[str]:
    """The keys a study spec (study.yaml as a dict) sweeps: its `parameters`, less the lone `{expr: ...}`
    entries, which are derived from the others and so tell no configuration apart.

    >>> declared_parameters({"parameters": {"queue.size": [128, 256], "optim.lr": {"expr": "1e-5"}}})
    ['queue.size']
    """
    parameters = spec.get("parameters") or {}
    return [key for key, values in parameters.items()
            if not (isinstance(values, dict) and set(values) == {"expr"})]


def grouping_keys(table: pd.DataFrame, declared: Iterable[str] | None) -> list[str]:
    """The keys one configuration is told apart by: every key the study's `parameters` declare (those the
    table has), whether or not it also counts as bookkeeping elsewhere (`variant`, `precision`) and whether
    or not the trials finished so far still differ in it; without a study.yaml (`declared` None), the
    inferred `swept_parameters`. Keys that differ only through defaults (a derived
    value) are never added.

    >>> t = pd.DataFrame({"method": ["gs", "gs", "mix"], "variant": ["paper", "released", "paper"],
    ...                   "fgsm.eps": [0.0, 0.0, 5e-9]})
    >>> grouping_keys(t, ["method", "variant"])
    ['method', 'variant']
    """
    if declared is None:
        return swept_parameters(table)
    return [key for key in declared if key in table.columns]


def swept_parameters(table: pd.DataFrame, declared: Iterable[str] | None = None) -> list[str]:
    """Parameter columns that take more than one value in `table` (seed excluded).

    `declared` (the study's `parameters` keys) narrows the candidates; without it every config-like
    column (dotted names and top-level config keys) is a candidate.
    """
    if declared:
        candidates = [c for c in declared if c in table.columns]
    else:
        candidates = [c for c in table.columns if ("." in c or c in UNDOTTED_CONFIG_KEYS)]
    candidates = [c for c in candidates if c not in NOT_PARAMETERS]
    return [c for c in candidates if table[c].nunique(dropna=False) > 1]


def slices_label(value: Any, size: Any = None) -> str:
    """Canonical text of a queue.slices value: "all", or ranges joined by "+", e.g. "0-256+768-1024"."""
    parts = _slices_list(value)
    if not parts or parts == ["all"]:
        return "all"
    if size is not None and not _is_missing(size) and parts == [f"0-{int(size)}"]:
        return "all"  # one slice covering the whole queue is the whole queue
    return "+".join(parts)


# ---- internals ----------------------------------------------------------------------------------
def _read_summaries(study_dir: Path) -> dict[str, Summary]:
    summaries = {}
    for path in sorted(study_dir.glob("trials/*/summary.json")):
        summary, _ = read_summary_file(path)  # None: damaged or gone since the glob; trials.csv still has the row
        if summary is not None:
            summaries[path.parent.name] = summary
    return summaries


def _read_trials_csv(path: Path) -> pd.DataFrame:
    try:
        # keys are hex strings: read as text so "0123e4..." is neither an int nor a float
        return pd.read_csv(path, dtype={"key": str})
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def _mtd_field(summary: Summary | None, name: str) -> Any:
    return (summary.mtd or {}).get(name) if summary is not None else None


def _row_from_summary(key: str, summary: Summary, state: str | None = None) -> dict[str, Any]:
    """A trials.csv-like row from one summary.json (trainer.summary's analysis view: its config flattened
    to dotted columns; its `mtd` is renamed mtd_recorded with the CSV's column); `state` is the Optuna state
    from trials.csv, else the one the status implies (trainer.vocabulary)."""
    config = summary.config or {}
    state = state if isinstance(state, str) else optuna_state_name(summary.status)
    row: dict[str, Any] = {"key": key, "seed": config.get("seed"), "state": state}
    row.update(analysis_row(summary))
    return row


def _normalise(table: pd.DataFrame) -> pd.DataFrame:
    table = table.copy()
    if "heads.predictor_dim" in table.columns and "heads.embedding_dim" not in table.columns:
        # results written before the key was renamed: Table 6a's "predictor dimension" (trainer/config.py)
        table = table.rename(columns={"heads.predictor_dim": "heads.embedding_dim"})
    if "mtd" in table.columns:
        table = table.rename(columns={"mtd": "mtd_recorded"})
    defaults = (("key", None), ("seed", np.nan), ("state", TrialState.COMPLETE), ("status", OK), ("method", None))
    for name, default in defaults:
        if name not in table.columns:
            table[name] = default
    if table["key"].isna().all():
        table["key"] = [f"row{i}" for i in range(len(table))]
    table["key"] = table["key"].astype(str)
    if "queue.slices" in table.columns:
        sizes = table["queue.size"] if "queue.size" in table.columns else [None] * len(table)
        table["queue.slices"] = [slices_label(v, s) for v, s in zip(table["queue.slices"], sizes)]
    for name in SCORES + TRANSFER_SCORES + ("align", "uniform", "ema_age", "queue_age_mean", "queue_age_max",
                                           "dev_stsb"):
        if name in table.columns:
            table[name] = pd.to_numeric(table[name], errors="coerce")
    return _without_partial_averages(table)


def _without_partial_averages(table: pd.DataFrame) -> pd.DataFrame:
    """NaN for an `avg` beside fewer than seven task scores (a trials.csv written before the rule)."""
    if AVG not in table.columns:
        return table
    missing_task = table.reindex(columns=list(STS_TASKS)).isna().any(axis=1)  # an absent task column: all missing
    table.loc[missing_task, AVG] = np.nan
    return table


def _state_counts(table: pd.DataFrame) -> dict[str, int]:
    labels = [state if state != TrialState.COMPLETE else f"{state}/{status}"
              for state, status in zip(table["state"], table["status"])]
    return pd.Series(labels).value_counts().to_dict()


def trial_mtd(row: pd.Series, summary: Summary | None, eta_choice: str, k_choice: str) -> float:
    config = (summary.config if summary is not None else None) or _config_from_row(row)
    if config is None or not traces_distance(config.get("method")):
        return math.nan
    steps = row.get("steps")
    if _is_missing(steps) and summary is not None:
        steps = summary.steps
    steps_run = None if _is_missing(steps) else int(steps)
    # the planned length sets the cosine period; a run that ended early averages the etas of its own steps
    # (a trial that ended as planned ran them all; one that ended early says how many it planned, or the
    # config does)
    planned = summary.total_steps if summary is not None else None
    status = row.get("status") if not _is_missing(row.get("status")) else (summary.status if summary else None)
    if _is_missing(planned) and status in ENDED_EARLY:
        planned = config.get("max_steps") or planned_steps_or_none(config)
    total_steps = steps_run if _is_missing(planned) else int(planned)
    try:
        value = config_traceable_distance(config, total_steps=total_steps, eta_choice=eta_choice, k_choice=k_choice,
                                          steps_run=steps_run)
    except (KeyError, TypeError, ValueError):
        return math.nan  # a config without (valid) EMA/queue fields: MTD unknown for this trial
    return math.nan if value is None else float(value)


def planned_steps_or_none(config: dict[str, Any]) -> int | None:
    """The steps a run of `config` planned (trainer.data.planned_steps: from the corpus when `max_steps` is
    unset); None when that cannot be told here (no corpus, an incomplete config)."""
    from trainer.data import planned_steps
    from trainer.errors import UserError

    try:
        return planned_steps(config)
    except (UserError, KeyError, TypeError, ValueError):
        return None


def _config_from_row(row: pd.Series) -> dict[str, Any] | None:
    """The part of the trainer config MTD needs, rebuilt from trials.csv columns."""
    if not traces_distance(row.get("method")):
        return {"method": row.get("method")}
    needed = ("batch_size", "ema.schedule", "ema.decay", "queue.size")
    if any(_is_missing(row.get(name)) for name in needed):
        return None
    return {
        "method": row["method"],
        "batch_size": int(row["batch_size"]),
        "max_steps": _int_or_none(row.get("max_steps")),
        "ema": {
            "schedule": row["ema.schedule"],
            "decay": float(row["ema.decay"]),
            "decay_end": (float(row.get("ema.decay_end")) if not _is_missing(row.get("ema.decay_end"))
                          else float(row["ema.decay"])),
            "schedule_steps": _int_or_none(row.get("ema.schedule_steps")),
        },
        "queue": {
            "size": int(row["queue.size"]),
            "initial_size": _int_or_none(row.get("queue.initial_size")),
            "slices": _slices_list(row.get("queue.slices")) or None,
        },
    }


def _gaussian_ratio(row: pd.Series) -> float:
    """Gaussian negatives M / batch size N (GS-InfoNCE Table 3's unit); NaN when unknown."""
    per_batch = row.get("gaussian.count_per_batch")
    if not _is_missing(per_batch):
        return float(per_batch)
    count, batch = row.get("gaussian.count"), row.get("batch_size")
    if not _is_missing(count) and not _is_missing(batch):
        return float(count) / float(batch)
    if row.get("method") == "gs":
        return 3.0  # the trainer's default for method gs (paper: M = 3 x batch size)
    return math.nan


def _slices_list(value: Any) -> list[str]:
    """queue.slices as a list of range strings from a list, a JSON/Python list text, or "a-b+c-d"."""
    if value is None or _is_missing(value):
        return []
    if isinstance(value, (list, tuple)):
        items = list(value)
    else:
        text = str(value).strip()
        if text in ("", "None", "null", "nan"):
            return []
        if text.startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError:
                items = ast.literal_eval(text)
            if not items:
                return []
        else:
            items = text.replace(",", "+").split("+")
    return [str(item).strip() for item in items if str(item).strip()]


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False  # lists and other containers are values


def _int_or_none(value: Any) -> int | None:
    return None if _is_missing(value) else int(value)
