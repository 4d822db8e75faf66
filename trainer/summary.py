"""summary.json, one trial's record, and every flat view of it: the one place a summary field is added.

A record is a `Summary`: a frozen pydantic model of summary.json's fields, read by attribute (`summary.status`,
`summary.test`; its blocks, test, config, provenance, ..., are dicts), checked across fields when it is made
(status ok has a best STS-B dev score; steps within total_steps). `to_json` and `Summary.from_json` are its one
boundary with plain data: the file, Ray (worker to driver) and Optuna's attributes; `from_json` upgrades an older
record (`upgrade_summary`) once, there. `replace` gives a changed, checked copy. `to_json` gives back exactly the
fields the record was made with (a field set to None stays, a field never set stays out), in their order.

Two constructors build every record a run makes, each stamping SUMMARY_VERSION and the trainer's reading:
`build_summary`, the trainer's (trainer.train; the sweep's worker adds `resources` and, on a cluster, `files`), and
`ended_summary`, for a run that ended without it (the worker's verdict when `train` raised; the driver's for a
trial that crashed, was lost with its node or was stopped by a scheduler); `summary_from_attrs` gives back one
recorded in Optuna, and `read_summary_file` one from its file. The views, each derived here from the record and
nowhere else:

- `trials_csv_row(summary)`: the result columns of trials.csv (sweep.records.store.RESULT_COLUMNS):
  every STS task, `avg` and transfer column (None when not scored), `mtd_measured`, `precision` as the trainer
  recorded it, `commit` (the code's short commit, trainer.provenance), and `mtd` only when the trainer recorded a
  formula value (otherwise the row keeps the MTD planned for the trial).
- `analysis_row(summary)`: the resolved config flattened to dotted columns after status and reason,
  what ran (`reading`, trainer.readings; `protocol`, `evaluation_protocol` as JSON; `commit`, `packages`,
  `device_name`, `provenance_columns`; `variant`, `precision`: the summary's, else the config's), the test
  scores the trial has (no column for the others), `mtd` even when None, `transfer_mode` and `align_uniform_split`,
  each MTEB score as `mteb:<task>`; no `mtd_measured` (the analysis adds it).
- `metrics_lines(summary)`: the metrics.jsonl lines the record's curve holds (what the driver writes for a
  trial whose worker's own file never arrived).
- `optuna_attrs(summary)` and its inverse `summary_from_attrs(attrs)`: the Optuna user attributes, one flat
  attribute per score and scalar (the dashboard's columns) and the rest of the record, but the curve, under
  `summary_other`; a damaged summary.json is restored from them whole (marked `restored_from: optuna`).

Older records: `upgrade_summary` states what a summary.json of an earlier version meant in this code's terms and
changes no score; `Summary.from_json` (so `read_summary_file` and `summary_from_attrs`) is the one place it runs.

Light (no torch): the sweep driver and the analysis import it.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator

from trainer.evaluation.sts_average import AVG, readable_test, sts_test_label
from trainer.files import dotted_get, dotted_holds, dotted_pop, dotted_put, flatten, json_safe, write_text_atomic
from trainer.method_rules import FLAG_METHODS
from trainer.provenance import short_commit
from trainer.readings import READING, reading_changes, summary_reading
from trainer.vocabulary import OK, STS_TASKS, TRANSFER_TASKS

# The shape of summary.json this code writes. Version 1 (no `version` field) is read through upgrade_summary.
SUMMARY_VERSION = 2

Number = int | float  # kept as written: an int stays an int in the file
Block = dict[str, Any]


class Summary(BaseModel):
    """One trial's record (summary.json), frozen (module docstring). Scores are x100; None where a run did not get
    that far. Its blocks are shared with the data it was made from: read them, never change them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int | None = None  # SUMMARY_VERSION of the code that wrote it (absent: 1)
    status: str  # trainer.vocabulary's trial statuses: ok, diverged, collapsed, pruned, error, ...
    reading: int | None = None  # trainer.readings.READING of the code that made it (absent: reading 1)
    reason: str | None = None  # why a run ended other than ok, one line
    steps: int | None = None  # optimiser steps run
    total_steps: int | None = None  # optimiser steps planned
    variant: str | None = None  # paper | released
    precision: str | None = None  # what ran: fp32, fp16, bf16
    released: Block | None = None  # the released-code switches, as resolved
    selection: str | None = None  # which state the test scores come from
    best_step: int | None = None  # the step of the best STS-B dev score (the state tested)
    best_dev_stsb: Number | None = None
    test: Block | None = None  # STS task -> test Spearman; "avg" only with all seven tasks
    test_label: str | None = None  # what `test` holds, in words
    sts_details: Block | None = None  # per-subset Pearson/Spearman, mean and wmean (fractions)
    transfer: Block | None = None  # transfer task -> test accuracy, and their "avg"
    transfer_mode: str | None = None  # test | fasttest
    mteb: Block | None = None  # MTEB task -> main score x100 (eval.mteb); what made them: provenance["mteb"]
    align: Number | None = None
    uniform: Number | None = None
    align_uniform_split: str | None = None
    mtd: Block | None = None  # MoCoSE: formula, eta, eta_choice, queue_k, batch_size and the meter's fields
    test_selected: Block | None = None  # the released code's test-selected state (label, step, test), when tracked
    eval_cutoff: str | None = None  # the released code's evaluation-time cutoff, when on
    compile: Block | None = None  # asked, used, reason; seconds (the compile, at set-up) and graphs compiled
    sentences_per_s: Number | None = None
    train_seconds: Number | None = None
    eval_seconds: Number | None = None
    final_eval_seconds: Number | None = None
    wall_time_s: Number | None = None
    device: str | None = None
    corpus_sentences: int | None = None
    history: list[Block] | None = None  # every evaluation's metrics line (metrics.jsonl)
    config: Block | None = None  # the resolved run config
    provenance: Block | None = None  # trainer.provenance: code, packages, device, precision, node, data
    resources: Block | None = None  # added by the sweep's worker: where it ran
    files: Block | None = None  # added on a cluster: whether the trial's files reached the driver
    restored_from: str | None = None  # "optuna" when rebuilt by summary_from_attrs
    started_at: Number | None = None  # time.time() at the run's start and end: the stand-in trainer's
    ended_at: Number | None = None  # (tests.fake_train), which timing tests read; the trainer leaves them out
    _order: tuple[str, ...] = PrivateAttr(default=())  # the fields in the order they were given (to_json's)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: Any) -> Summary:
        record = handler(data)
        if isinstance(data, Mapping):
            record._order = tuple(data)
        return record

    @model_validator(mode="after")
    def _fields_agree(self) -> Summary:
        if self.status == OK and self.best_dev_stsb is None:
            raise ValueError("status ok without best_dev_stsb: an ok run is evaluated on STS-B dev at its last step")
        if self.steps is not None and self.total_steps is not None and self.steps > self.total_steps:
            raise ValueError(f"steps {self.steps} beyond total_steps {self.total_steps}")
        return self

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Summary:
        """The record in plain data (a summary.json's object, a worker's record through Ray, summary_from_attrs'
        rebuilt fields), of any version: upgraded (`upgrade_summary`), then checked. ValueError (pydantic's
        ValidationError) for data that is not a record."""
        return cls.model_validate(upgrade_summary(data))

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON data (a new dict, NaN and infinity as null): the fields it was made with,
        in their order."""
        given = self.model_dump(exclude_unset=True)
        ordered = {name: given[name] for name in self._order if name in given}
        return json_safe({**ordered, **given})

    def replace(self, **changes: Any) -> Summary:
        """A checked copy with `changes` (fields by name; another name is a TypeError); a new field goes last."""
        _check_fields("Summary.replace", changes)
        return Summary.model_validate({**self.to_json(), **changes})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Summary) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]  # its blocks are dicts


FIELDS = tuple(Summary.model_fields)


def build_summary(*, steps: int, batch_size: int, train_seconds: float, eval_seconds: float,
                  final_eval_seconds: float, wall_time_s: float, best_dev: float | None, **fields: Any) -> Summary:
    """The record of one run from what the trainer knows at its end: `fields` are Summary fields by name (a
    name Summary does not have is a TypeError); `best_dev` is the best STS-B dev Spearman as a fraction. Derived
    here: `reading` (trainer.readings), `best_dev_stsb` (x100, 4 decimals), `test_label`, `transfer_mode` (only
    beside transfer scores), `sentences_per_s` and the rounded timings. JSON-safe (no NaN or infinity: None)."""
    _check_fields("build_summary", fields)
    record: dict[str, Any] = {"version": SUMMARY_VERSION, "steps": steps, **fields, "reading": READING}
    record["best_dev_stsb"] = round(best_dev * 100, 4) if best_dev is not None else None
    record["test_label"] = sts_test_label(record.get("test") or ())
    if not record.get("transfer"):
        record["transfer_mode"] = None
    record["sentences_per_s"] = round(steps * batch_size / train_seconds, 2) if train_seconds > 0 else None
    record.update(train_seconds=round(train_seconds, 2), eval_seconds=round(eval_seconds, 2),
                  final_eval_seconds=round(final_eval_seconds, 2), wall_time_s=round(wall_time_s, 2))
    return Summary.model_validate(json_safe(record))


def ended_summary(status: str, reason: str | None, **fields: Any) -> Summary:
    """The record of a run that ended without the trainer's own: the worker's verdict when `train` raised (out of
    memory, an error), the driver's for a trial that crashed, was lost with its node, ended without a summary or
    was stopped by a scheduler. `fields` are Summary fields by name (a name Summary does not have is a TypeError);
    stamped with this code's version and reading. JSON-safe."""
    _check_fields("ended_summary", fields)
    return Summary.model_validate(json_safe({"version": SUMMARY_VERSION, "status": status, "reason": reason,
                                             **fields, "reading": READING}))


def _check_fields(writer: str, fields: Mapping[str, Any]) -> None:
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise TypeError(f"{writer}: not summary.json fields: {unknown}")


def upgrade_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """A summary.json's data of any version, as this code reads its own: new data with `reading` stated (absent:
    1, the records written before readings were numbered) and, in `test`, an `avg` beside fewer than the
    seven STS tasks dropped (records written before the average needed all seven held the mean of whatever
    tasks ran as `avg`, for one task that task's score; trainer.evaluation.sts_average). A current record's data
    comes back equal. Run by Summary.from_json, the one reader of plain data.

    >>> upgrade_summary({"status": "ok", "test": {"STSBenchmark": 70.1, "avg": 70.1}})
    {'status': 'ok', 'test': {'STSBenchmark': 70.1}, 'reading': 1}
    """
    upgraded = dict(record)  # the blocks are shared, not copied: no view changes them
    if isinstance(upgraded.get("test"), dict):
        upgraded["test"] = readable_test(upgraded["test"])
    upgraded["reading"] = summary_reading(upgraded)
    return upgraded


def read_summary_file(path: str | Path) -> tuple[Summary | None, str | None]:
    """(the record, None) from a trial's summary.json (Summary.from_json); (None, None) when there is no such
    file; (None, why) when it exists but cannot be used. A summary is written atomically, so one that does not
    parse, or is not a record, was damaged afterwards (a disk, a hand edit): its reader reports it, never taking
    it as "no result"."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    except ValueError as exc:
        return None, f"does not parse ({exc})"
    if not isinstance(data, dict):
        return None, "does not hold a JSON object"
    try:
        return Summary.from_json(data), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return None, f"is not a record this code reads ({where + ': ' if where else ''}{first['msg']})"


def write_summary_file(path: str | Path, summary: Summary) -> None:
    """summary.json at `path`, atomically: the record's to_json, indented, ending in a newline."""
    write_text_atomic(path, json.dumps(summary.to_json(), indent=2) + "\n")


def older_reading(summary: Summary | None) -> list[str]:
    """What the current reading of the papers does differently for the run a record describes
    (trainer.readings), one phrase each; [] for a record of the current reading, or no record."""
    if summary is None:
        return []
    return reading_changes(summary.config or {}, summary.reading)


def metric_value(summary: Summary, name: str) -> float | None:
    """The study metric (sweep.spec.schema.METRIC_NAMES) from a record: dev_stsb -> best_dev_stsb, STS task
    names and avg -> test[...] (avg: None unless the trial evaluated all seven STS tasks), align and uniform;
    None where it is not a finite number."""
    if name == "dev_stsb":
        value = summary.best_dev_stsb
    elif name in STS_TASKS or name == AVG:
        value = (summary.test or {}).get(name)
    else:
        value = getattr(summary, name, None) if name in FIELDS else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def metrics_lines(summary: Summary) -> list[dict[str, Any]]:
    """The metrics.jsonl lines of the run: every evaluation's line, as the trainer wrote them (its curve)."""
    return list(summary.history or [])


# The evaluation protocol: everything that changes a score for the same weights. Trials whose protocols differ are
# never compared (analysis.load.comparable_groups).
PROTOCOL_FIELDS = ("pooler", "eval.final_tasks", "eval.align_uniform_split", "eval.transfer_mode", "eval.selection",
                   "released.eval_cutoff", "released.dev_on_mlp", "precision")


def evaluation_protocol(summary: Summary) -> dict[str, Any]:
    """The protocol one trial's scores were made under (PROTOCOL_FIELDS, by dotted key), from its summary.json:
    the resolved config's evaluation keys and the precision the run used; an unset final-task list is the seven
    STS tasks it stands for.

    >>> record = Summary(status="error", config={"pooler": "avg", "eval": {"final_tasks": None}}, precision="fp32")
    >>> evaluation_protocol(record)["pooler"]
    'avg'
    """
    flat = flatten(summary.config or {})
    protocol = {name: flat.get(name) for name in PROTOCOL_FIELDS}
    protocol["eval.final_tasks"] = list(protocol["eval.final_tasks"] or STS_TASKS)
    for flag, methods in FLAG_METHODS.items():  # a switch that does not act on this method changes nothing
        protocol[flag] = bool(protocol[flag]) and flat.get("method") in methods  # unset: off
    protocol["precision"] = summary.precision or protocol["precision"]
    return protocol


PROVENANCE_WORDS = {"commit": "code states", "packages": "package sets", "device_name": "devices"}


def provenance_spread(columns: list[dict[str, Any]]) -> str | None:
    """What differs among trials besides their settings, from their `provenance_columns`: "2 code states (abc:
    3 trials; def+dirty: 1 trial), ...", the most common value first; None when their code, packages and device
    agree (unknown values left out).

    >>> provenance_spread([{"commit": "b+dirty"}, {"commit": "a"}, {"commit": "a"}])
    '2 code states (a: 2 trials; b+dirty: 1 trial)'
    """
    parts = []
    for column, words in PROVENANCE_WORDS.items():
        counts: dict[str, int] = {}
        for row in columns:
            if row.get(column) is not None:
                counts[str(row[column])] = counts.get(str(row[column]), 0) + 1
        if len(counts) > 1:  # the most common first
            ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            parts.append(f"{len(counts)} {words} (" + "; ".join(
                f"{value}: {n} trial{'s' if n > 1 else ''}" for value, n in ranked) + ")")
    return ", ".join(parts) or None


def provenance_columns(summary: Summary) -> dict[str, Any]:
    """What made a trial's numbers, as the analysis compares it: the code's short commit, the package versions
    (one text), the device's name and the precision (trainer.provenance); None where the summary has no
    provenance block (written before it existed)."""
    block = summary.provenance
    if not isinstance(block, dict):
        return {"commit": None, "packages": None, "device_name": None}
    packages = block.get("packages") or {}
    return {"commit": short_commit(block),
            "packages": ", ".join(f"{name} {version}" for name, version in packages.items() if version),
            "device_name": (block.get("device") or {}).get("name")}


MTEB_PREFIX = "mteb:"  # an MTEB task's column in the analysis' rows: mteb:<task>
MTD_AGES = ("ema_age", "queue_age_mean", "queue_age_max")  # summary["mtd"] fields copied under their own name

# The Optuna attributes: flat name -> where it lives in the record. Everything else but the curve is kept
# under OTHER_ATTR, so the record comes back whole.
FLAT_ATTRS: dict[str, str] = {  # attribute -> its dotted key in the summary
    **{name: name for name in ("status", "reason", "steps", "best_step", "best_dev_stsb", "align", "uniform",
                               "sentences_per_s", "wall_time_s", "transfer_mode", "variant", "precision")},
    **{name: f"test.{name}" for name in (*STS_TASKS, AVG)},
    **{name: f"transfer.{name}" for name in TRANSFER_TASKS},
    "transfer_avg": "transfer.avg",
    "mtd": "mtd.formula",
    **{f"mtd_{name}": f"mtd.{name}" for name in ("measured", *MTD_AGES, "eta")},
    # what made the numbers (trainer.provenance): the dashboard's columns; the rest of the block in summary_other
    "commit": "provenance.code.commit", "code_dirty": "provenance.code.dirty",
    "torch": "provenance.packages.torch", "transformers": "provenance.packages.transformers",
    "device_name": "provenance.device.name", "hostname": "provenance.node.hostname",
}
OTHER_ATTR = "summary_other"
NOT_IN_OPTUNA = ("history",)  # the curve: Optuna holds dev_stsb as intermediate values, metrics.jsonl all of it


def trials_csv_row(summary: Summary) -> dict[str, Any]:
    """The result columns of trials.csv (module docstring) from one trial's summary.json."""
    mtd = summary.mtd or {}
    test = summary.test or {}
    row: dict[str, Any] = {"status": summary.status, "reason": summary.reason, "steps": summary.steps}
    if mtd.get("formula") is not None:  # otherwise the row keeps the distance planned for the trial
        row["mtd"] = mtd["formula"]
    row["mtd_measured"] = mtd.get("measured")
    row.update({name: mtd.get(name) for name in MTD_AGES})
    row["precision"] = summary.precision
    row["commit"] = short_commit(summary.provenance)
    row.update(_scores(summary, {name: test.get(name) for name in (*STS_TASKS, AVG)}))
    row.update(align=summary.align, uniform=summary.uniform, sentences_per_s=summary.sentences_per_s,
               wall_time_s=summary.wall_time_s)
    return row


def analysis_row(summary: Summary) -> dict[str, Any]:
    """The analysis' row (module docstring) from one trial's summary.json. Its config columns are those its method
    reads: another method's section (a plugin's knob a trial written before keys were scoped still holds) is left
    out, as sweep.spec.expand leaves it out of the trial."""
    from trainer.config import scoped

    config = scoped(summary.config or {})
    mtd = summary.mtd or {}
    row: dict[str, Any] = {"status": summary.status, "reason": summary.reason,
                           **flat_config(config), "steps": summary.steps, "mtd": mtd.get("formula")}
    row.update({name: mtd.get(name) for name in MTD_AGES})
    # what ran, as the trainer recorded it (precision "auto" resolves per device); else the config's
    row["reading"] = summary.reading
    row["protocol"] = json.dumps(evaluation_protocol(summary), sort_keys=True)
    row.update(provenance_columns(summary))
    row["variant"] = summary.variant or config.get("variant")
    row["precision"] = summary.precision or config.get("precision")
    row.update(_scores(summary, summary.test or {}))  # only the scores the trial has
    row["transfer_mode"] = summary.transfer_mode
    row.update({f"{MTEB_PREFIX}{task}": score for task, score in (summary.mteb or {}).items()})
    row.update(align=summary.align, uniform=summary.uniform, align_uniform_split=summary.align_uniform_split,
               sentences_per_s=summary.sentences_per_s, wall_time_s=summary.wall_time_s)
    return row


def _scores(summary: Summary, test: dict[str, Any]) -> dict[str, Any]:
    """Both views' selection and score columns: the best step, its dev score, `test`, the transfer tasks."""
    transfer = summary.transfer or {}
    return {"best_step": summary.best_step, "dev_stsb": summary.best_dev_stsb, **test,
            **{name: transfer.get(name) for name in TRANSFER_TASKS}, "transfer_avg": transfer.get("avg")}


def flat_config(config: dict[str, Any]) -> dict[str, Any]:
    """A nested config as dotted columns (trainer.files.flatten); a list becomes one JSON cell (hashable, so it
    groups)."""
    return {name: json.dumps(value) if isinstance(value, (list, tuple)) else value
            for name, value in flatten(config).items()}


# ---- Optuna's user attributes ---------------------------------------------------------------------------
def optuna_attrs(summary: Summary) -> dict[str, Any]:
    """The user attributes a trial's summary is recorded under in Optuna (module docstring): `status` and
    `reason` always, each other flat attribute when it has a value, and `summary_other`."""
    record = summary.to_json()
    attrs: dict[str, Any] = {}
    for name, path in FLAT_ATTRS.items():
        value = dotted_get(record, path)
        if value is not None or name in ("status", "reason"):
            attrs[name] = value
    other = {k: v for k, v in record.items() if k not in NOT_IN_OPTUNA}  # to_json's: a new copy
    for name, path in FLAT_ATTRS.items():
        if name in attrs:
            dotted_pop(other, path)
    attrs[OTHER_ATTR] = other
    return attrs


def summary_from_attrs(attrs: dict[str, Any]) -> Summary:
    """The summary optuna_attrs recorded, rebuilt (for a damaged or missing summary.json): every field but the
    curve, marked "restored_from": "optuna", read by Summary.from_json (so upgraded). Records without
    `summary_other` give back their flat fields."""
    summary = copy.deepcopy(attrs.get(OTHER_ATTR) or {})
    for name, path in FLAT_ATTRS.items():
        if name in attrs and not dotted_holds(summary, path):
            dotted_put(summary, path, attrs[name])
    summary.setdefault("status", attrs.get("status"))
    summary.setdefault("reason", attrs.get("reason"))
    summary["restored_from"] = "optuna"
    return Summary.from_json(summary)
