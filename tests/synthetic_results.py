"""Synthetic results folders with known answers, for the analysis tests: laid out as results/README.md describes
(trials.csv and/or trials/<key>/summary.json, and study.yaml), from trials whose configs use only RunConfig's
keys (checked in `base_config`), so they read as a real study's do.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from trainer.config import field_names
from trainer.readings import READING
from trainer.summary import flat_config
from trainer.vocabulary import STS_TASKS

# ---- synthetic results folders with known answers (the analysis tests) ----------------------------------
# Laid out as results/README.md describes: `write_results` writes trials.csv and/or
# trials/<key>/summary.json (and study.yaml) from a list of trials; the `*_study` helpers build the specific
# sweeps the analysis tests check.
# Per-task offsets from the average, roughly the shape of the papers' Table 1.
TASK_OFFSETS = (-6.0, 5.0, -2.5, 5.5, 2.0, 1.5, -5.5)
PEAK_MTD = 14.67
SEEDS = (0, 1, 2)


def base_config(method: str = "mocose", **sections: dict[str, Any]) -> dict[str, Any]:
    """A resolved trainer config dict with the fields the analysis reads."""
    config = {
        "model": "embedded", "method": method, "pooler": "cls_before_pooler", "seed": 0, "batch_size": 64,
        "max_steps": None, "epochs": 1.0, "output_dir": None,
        "ema": {"schedule": "constant", "decay": 0.85, "decay_end": 0.95, "schedule_steps": None},
        "queue": {"size": 512, "initial_size": 128, "slices": None},
        "fgsm": {"eps": 5e-9, "mode": "lagged"},
        "heads": {"projection_layers": 1, "predictor_layers": 2, "embedding_dim": None, "predictor_hidden_dim": None},
        "gaussian": {"count": None, "count_per_batch": None, "mu": 0.0, "sigma": 1.0, "weight": 1.0},
        "mix": {"enabled": method == "mix", "lam": 0.2, "directions": "both", "stop_grad": True},
        "eval": {"final_tasks": None, "selection": "dev"},
    }
    for name, values in sections.items():
        if isinstance(values, dict):
            config[name].update(values)
        else:
            config[name] = values
    unknown = sorted(set(flat_config(config)) - set(field_names()))
    if unknown:
        raise KeyError(f"synthetic config keys RunConfig does not have: {unknown}")
    return config


def make_trial(config: dict[str, Any], seed: int, avg: float, steps: int = 200, **extra: Any) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config["seed"] = seed
    scores = {task: round(avg + offset, 4) for task, offset in zip(STS_TASKS, TASK_OFFSETS)}
    # avg exactly as the trainer defines it: the mean of the seven 2-decimal task figures
    scores["avg"] = float(np.mean([round(scores[t], 2) for t in STS_TASKS]))
    trial = {"config": config, "seed": seed, "test": scores, "steps": steps, "status": "ok", "state": "COMPLETE"}
    trial.update(extra)
    return trial


def trial_key(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def write_results(
    study_dir: Path,
    trials: list[dict[str, Any]],
    params: list[str],
    csv_file: bool = True,
    summaries: bool = True,
    slices_format: str = "plus",
) -> Path:
    """Write the trials as results/<study>/ (trials.csv, trials/<key>/summary.json, study.yaml)."""
    study_dir.mkdir(parents=True, exist_ok=True)
    study = {"name": study_dir.name, "parameters": {p: [] for p in params}}
    (study_dir / "study.yaml").write_text(yaml.safe_dump(study))
    rows = []
    for trial in trials:
        config = trial["config"]
        key = trial_key(config)
        summary = {
            "status": trial["status"], "reason": None, "steps": trial["steps"], "best_step": 100,
            "best_dev_stsb": _dev_score(trial), "test": trial["test"],
            "align": trial.get("align"), "uniform": trial.get("uniform"), "align_uniform_split": "dev",
            "mtd": {"formula": 0.0, "eta": config["ema"]["decay"], "eta_choice": "constant",
                    "queue_k": config["queue"]["size"], "batch_size": config["batch_size"],
                    "queue_age_mean": trial.get("age_mean", 4.0), "queue_age_max": trial.get("age_max", 8.0),
                    "ema_age": 1 / (1 - config["ema"]["decay"]),
                    "measured": 1 / (1 - config["ema"]["decay"]) + trial.get("age_max", 8.0)},
            "sentences_per_s": 150.0, "wall_time_s": 800.0, "config": config, "reading": READING,
        }
        # only where the trial has them
        for name in ("variant", "transfer", "transfer_mode", "test_label", "reading", "provenance", "precision"):
            if name in trial:
                summary[name] = trial[name]
        if trial["state"] != "COMPLETE":
            summary = None
        if summaries and summary is not None:
            folder = study_dir / "trials" / key
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "summary.json").write_text(json.dumps(summary))
        rows.append(_csv_row(key, trial, params, slices_format))
    if csv_file:
        columns = list(dict.fromkeys(c for row in rows for c in row))
        with open(study_dir / "trials.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    return study_dir


def _csv_row(key: str, trial: dict[str, Any], params: list[str], slices_format: str) -> dict[str, Any]:
    config = trial["config"]
    slices = config["queue"]["slices"]
    if slices is None:
        slices_text = ""
    elif slices_format == "json":
        slices_text = json.dumps(slices)
    else:
        slices_text = "+".join(slices)
    row: dict[str, Any] = {"key": key, "seed": trial["seed"], "state": trial["state"], "status": trial["status"],
                           "reason": ""}
    for param in params:
        value = _dotted(config, param)
        row[param] = slices_text if param == "queue.slices" else ("" if value is None else value)
    row.update({
        "method": config["method"], "batch_size": config["batch_size"], "steps": trial["steps"],
        "ema.schedule": config["ema"]["schedule"], "ema.decay": config["ema"]["decay"],
        "ema.decay_end": config["ema"]["decay_end"], "queue.size": config["queue"]["size"],
        "queue.initial_size": config["queue"]["initial_size"], "queue.slices": slices_text,
        "mtd": 0.0,  # deliberately wrong: load_results must recompute MTD, not trust this column
        "queue_age_mean": trial.get("age_mean", 4.0), "queue_age_max": trial.get("age_max", 8.0),
        "best_step": 100, "dev_stsb": _dev_score(trial),
    })
    row.update(trial["test"] if trial["state"] == "COMPLETE" else {t: "" for t in trial["test"]})
    row.update({"align": trial.get("align", ""), "uniform": trial.get("uniform", ""),
                "sentences_per_s": 150.0, "wall_time_s": 800.0})
    return row


def _dev_score(trial: dict[str, Any]) -> float:
    """STS-B dev, 4 points above the trial's test average (its STS-B test score when it has no average)."""
    test = trial["test"]
    return test.get("avg", test["STSBenchmark"]) + 4.0


def _dotted(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node[part]
    return node


# ---- the sweeps ---------------------------------------------------------------------------------
MTD_GRID = [  # (eta, K) at B = 64: MTD = 1/(1-eta) + K/64
    (0.5, 512), (0.75, 512), (0.8, 512), (0.85, 512), (0.9, 512), (0.95, 512), (0.85, 256), (0.85, 1024),
]


def mtd_score(mtd: float, curvature: float = 8.0) -> float:
    """The known answer: a parabola in log(MTD) peaking at 77 at MTD 14.67."""
    return 77.0 - curvature * (math.log(mtd) - math.log(PEAK_MTD)) ** 2


def mtd_study(study_dir: Path, noise: float = 0.05, **write_options: Any) -> Path:
    """EMA decay x queue size at B = 64, 3 seeds; score = mtd_score(MTD) + seeded noise."""
    rng = np.random.default_rng(123)
    trials = []
    for eta, size in MTD_GRID:
        mtd = 1.0 / (1.0 - eta) + size / 64
        config = base_config(ema={"decay": eta}, queue={"size": size})
        for seed in SEEDS:
            avg = mtd_score(mtd) + rng.normal(0.0, noise)
            trials.append(make_trial(config, seed, avg, align=0.2 + 0.01 * mtd + rng.normal(0, 0.002),
                                     uniform=-2.0 - 0.02 * mtd + rng.normal(0, 0.002)))
    return write_results(study_dir, trials, ["ema.decay", "queue.size"], **write_options)


SLICES = [["0-512"], ["256-768"], ["512-1024"], ["0-256", "768-1024"], None]


def slices_study(study_dir: Path, **write_options: Any) -> Path:
    """MoCoSE Table 8's setting (K 1024, K0 128, N 256), five slices, 2 seeds, in shuffled order."""
    rng = np.random.default_rng(7)
    trials = []
    for i in (3, 0, 4, 2, 1):  # not the display order: the chart must sort
        config = base_config(batch_size=256, queue={"size": 1024, "initial_size": 128, "slices": SLICES[i]})
        for seed in (0, 1):
            trials.append(make_trial(config, seed, 75.0 + i * 0.5 + rng.normal(0, 0.1)))
    return write_results(study_dir, trials, ["queue.slices"], **write_options)


def heatmap_study(study_dir: Path) -> Path:
    """Queue size K x initial size K0 (fractions 0, 1/4, 1/2, 1 of K), 2 seeds."""
    rng = np.random.default_rng(11)
    trials = []
    for size in (256, 512, 1024):
        for fraction in (0.0, 0.25, 0.5, 1.0):
            config = base_config(queue={"size": size, "initial_size": int(size * fraction)})
            for seed in (0, 1):
                avg = 76.0 + math.log2(size / 256) * 0.3 - fraction + rng.normal(0, 0.1)
                trials.append(make_trial(config, seed, avg))
    return write_results(study_dir, trials, ["queue.size", "queue.initial_size"])


def gaussian_study(study_dir: Path) -> Path:
    """GS-InfoNCE M / N in {0.5, 1, 3}, 2 seeds (no MoCoSE trials: no MTD figures)."""
    trials = []
    for ratio, avg in ((0.5, 76.9), (1.0, 76.8), (3.0, 77.5)):
        config = base_config(method="gs", gaussian={"count_per_batch": ratio})
        for seed in (0, 1):
            trials.append(make_trial(config, seed, avg + 0.1 * seed))
    return write_results(study_dir, trials, ["gaussian.count_per_batch"])


def one_task_study(study_dir: Path, legacy_avg: bool = False, **write_options: Any) -> Path:
    """The quickstart's shape: MoCoSE over EMA decay x queue size at B = 64, 2 seeds, scored on STS-B test
    alone (`eval.final_tasks: [STSBenchmark]`), so no seven-task average. `legacy_avg` writes `avg` = the
    STS-B score, as summaries and trials.csv did before the average needed all seven tasks."""
    from trainer.evaluation.sts_average import sts_test_label

    trials = []
    for eta, size in MTD_GRID:  # K0 = K/4: Table 7's row "K/4" holds a paper value for every K
        config = base_config(ema={"decay": eta}, queue={"size": size, "initial_size": size // 4})
        for seed in (0, 1):
            stsb = round(mtd_score(1.0 / (1.0 - eta) + size / 64) + 0.1 * seed, 2)
            test = {"STSBenchmark": stsb, **({"avg": stsb} if legacy_avg else {})}
            trials.append(make_trial(config, seed, stsb, test=test, test_label=sts_test_label(test),
                                     align=0.2 + 0.001 * size, uniform=-2.0 - 0.01 * eta))
    return write_results(study_dir, trials, ["ema.decay", "queue.size"], **write_options)


# ---- stand-in results for the study files (the figure layout tests) ------------------------------------
def stand_in_study(study_file: Path, study_dir: Path, seeds: int, spread: float = 1.0) -> Path:
    """Results the study file's grid could give, without training: every configuration `sweep` expands it
    to, each over seeds 0 .. `seeds`-1. MoCoSE trials score mtd_score of their MTD, the others 76, plus a
    fixed offset per configuration (within ±0.3) and seeded noise per seed (std 0.1), both times `spread`
    about 76 (0.001: scores that differ in the third decimal). Scored on STS-B test alone where the study
    evaluates that task alone (the quickstart), else on all seven. study.yaml is the study file itself."""
    from sweep.spec import load_study  # here: bench/ imports this module without loading the spec's schema
    from sweep.spec.expand import expand
    from trainer.evaluation.sts_average import sts_test_label

    spec = load_study(study_file)
    rng = np.random.default_rng(17)
    trials = []
    for trial in (t for t in expand(spec) if t.seed == spec.seeds[0]):
        config = trial.config
        tasks = config["eval"]["final_tasks"] or STS_TASKS
        mtd = trial.mtd if config["method"] == "mocose" and trial.mtd else None
        offset = int(hashlib.sha256(trial.key.encode()).hexdigest()[:8], 16) / 2**32 * 0.6 - 0.3
        centre = (mtd_score(mtd) if mtd else 76.0) + offset
        for seed in range(seeds):
            score = round(76.0 + spread * (centre - 76.0 + rng.normal(0.0, 0.1)), 6)
            extra: dict[str, Any] = {}
            if set(tasks) == {"STSBenchmark"}:
                extra["test"] = {"STSBenchmark": score}
                extra["test_label"] = sts_test_label(extra["test"])
            ages = {"align": 0.2 + 0.01 * (mtd or 10.0) + rng.normal(0, 0.002),
                    "uniform": -2.0 - 0.02 * (mtd or 10.0) + rng.normal(0, 0.002)}
            trials.append(make_trial(config, seed, score, **ages, **extra))
    write_results(study_dir, trials, list(spec.parameters))
    shutil.copyfile(study_file, study_dir / "study.yaml")
    return study_dir
