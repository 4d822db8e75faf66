"""One trial's summary.json as a table row: the one conversion behind trials.csv (sweep.records.store) and the
analysis table (analysis.load), so a new summary field is added in one place.

The two views differ on purpose, and `view` names which is wanted:

- "trials.csv": the result columns of trials.csv (sweep.records.store.RESULT_COLUMNS): every STS task, `avg` and
  transfer column (None when not scored), `mtd_measured`, `precision` as the trainer recorded it, and `mtd`
  only when the trainer recorded a formula value (otherwise the row keeps the MTD planned for the trial).
- "analysis": the resolved config flattened to dotted columns after status and reason, what ran (`variant`,
  `precision`: the summary's, else the config's), the test scores the trial has (no column for the others),
  `mtd` even when None, `transfer_mode` and `align_uniform_split`; no `mtd_measured` (the analysis adds it).

Light (no torch): the sweep driver and the analysis import it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from trainer.evaluation.sts_average import AVG, readable_test
from trainer.vocabulary import STS_TASKS, TRANSFER_TASKS

View = Literal["trials.csv", "analysis"]
MTD_AGES = ("ema_age", "queue_age_mean", "queue_age_max")  # summary["mtd"] fields copied under their own name


def summary_row(summary: dict[str, Any], view: View) -> dict[str, Any]:
    """The row of `view` (module docstring) from one trial's summary.json."""
    analysis = view == "analysis"
    config = summary.get("config") or {}
    mtd = summary.get("mtd") or {}
    test = readable_test(summary.get("test")) or {}  # avg only beside the seven tasks (older summaries too)
    transfer = summary.get("transfer") or {}
    row: dict[str, Any] = {"status": summary.get("status"), "reason": summary.get("reason")}
    if analysis:
        row.update(flat_config(config))
    row["steps"] = summary.get("steps")
    if analysis or mtd.get("formula") is not None:
        row["mtd"] = mtd.get("formula")
    if not analysis:
        row["mtd_measured"] = mtd.get("measured")
    for name in MTD_AGES:
        row[name] = mtd.get(name)
    if analysis:  # what ran, as the trainer recorded it (precision "auto" resolves per device); else the config's
        row["variant"] = summary.get("variant") or config.get("variant")
        row["precision"] = summary.get("precision") or config.get("precision")
    else:
        row["precision"] = summary.get("precision")
    row["best_step"] = summary.get("best_step")
    row["dev_stsb"] = summary.get("best_dev_stsb")
    row.update(test if analysis else {name: test.get(name) for name in (*STS_TASKS, AVG)})
    for name in TRANSFER_TASKS:
        row[name] = transfer.get(name)
    row["transfer_avg"] = transfer.get("avg")
    if analysis:
        row["transfer_mode"] = summary.get("transfer_mode")
    for name in ("align", "uniform", "align_uniform_split", "sentences_per_s", "wall_time_s"):
        if analysis or name != "align_uniform_split":
            row[name] = summary.get(name)
    return row


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted columns; a list becomes one JSON cell (hashable, so it groups)."""
    flat = {}
    for name, value in config.items():
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{prefix}{name}."))
        elif isinstance(value, (list, tuple)):
            flat[prefix + name] = json.dumps(value)
        else:
            flat[prefix + name] = value
    return flat
