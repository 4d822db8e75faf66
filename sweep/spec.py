"""Study spec: one YAML file -> a validated `StudySpec`, expanded into `Trial`s.

INTERFACE CONTRACT (filled in by the spec module's implementation; the runner consumes it):

    load_study(path) -> StudySpec           # raises trainer.errors.UserError (one line, names key+line)
    expand(spec) -> list[Trial]             # deterministic order; constraints applied
    trial_key(config_dict, seed) -> str     # stable hash of the resolved config + seed (12 hex chars)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Metric:
    name: str = "dev_stsb"  # dev_stsb | avg | STSBenchmark | ... (a summary field)
    goal: str = "maximize"  # maximize | minimize


@dataclass
class Resources:
    cpu: float = 1.0
    gpu: float = 0.0  # fractions allowed, e.g. 0.5


@dataclass
class Scheduler:
    type: str = "asha"
    grace_period: int = 1  # in evaluations
    reduction_factor: int = 3
    max_t: int | None = None  # in evaluations; None: the run's number of evaluations


@dataclass
class StudySpec:
    name: str
    description: str
    base: dict[str, Any]  # a trainer config (RunConfig.from_dict validates it)
    parameters: dict[str, Any]  # dotted key -> list (grid) or distribution dict
    seeds: list[int]
    method: str  # grid | random | tpe
    metric: Metric
    budget: int | None  # number of trials for random/tpe (per seed)
    resources: Resources
    scheduler: Scheduler | None
    storage: str | None  # Optuna URL; None: sqlite:///<results_dir>/<name>/optuna.db
    results_dir: str  # parent folder; the study writes to <results_dir>/<name>/
    constraints: list[str] = field(default_factory=list)
    source_text: str = ""  # the YAML as written (stored as the Optuna study's note)

    @property
    def study_dir(self) -> str:
        from pathlib import Path

        return str(Path(self.results_dir) / self.name)


@dataclass
class Trial:
    key: str  # stable trial key
    seed: int
    params: dict[str, Any]  # the swept values, by dotted key
    config: dict[str, Any]  # the resolved trainer config (RunConfig.to_dict() after resolved())
    mtd: float | None  # maximum traceable distance by formula, None where undefined
