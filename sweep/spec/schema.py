"""The study file's schema (pydantic v2 models); sweep/spec/load.py reads a file into them (`load_study`).

Keys whose values are checked against each other and the trainer config (`base`, `parameters`,
`budget` against `method`, `resources.gpu` against `base.device`) are checked after the fields, in
`StudySpec._check_study` (sweep/spec/values.py for base and parameters).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    model_validator,
)

from sweep.spec.expressions import check_expression
from sweep.spec.key_lines import KeyLines
from sweep.spec.limits import MANY_TRIALS_FLAG
from sweep.spec.search import SEARCH_METHOD_NAMES, SearchMethod, search_method
from sweep.text import count_text, suggestion
from trainer.errors import excerpt
from trainer.evaluation.sts_average import AVG
from trainer.files import path_text
from trainer.vocabulary import STS_TASKS

METRIC_NAMES = ("dev_stsb", AVG, *STS_TASKS, "align", "uniform")
LOWER_IS_BETTER = ("align", "uniform")
LOGGERS = ("tensorboard", "mlflow", "wandb")
_NAMED_KEEP = {"best": 1, "all": None, "none": 0}
STORAGE_BACKENDS = ("sqlite", "postgresql", "mysql")
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")

Int = Annotated[int, Strict()]  # no True for an integer
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]  # ints allowed, booleans not


def _slug(name: str) -> str:
    if not _NAME_PATTERN.match(name):
        raise ValueError(f"expected a slug of letters, digits, '-' and '_' (at most 100), got {excerpt(name)}")
    return name


def _condition(text: str) -> str:
    tree = check_expression(text)
    if isinstance(tree, ast.BinOp) or (isinstance(tree, ast.Constant) and not isinstance(tree.value, bool)):
        raise ValueError(f"'{text}' is not a condition; expected a comparison such as 'queue.size >= 256'")
    return text


def _storage_url(url: str) -> str:
    expected = "an Optuna storage URL such as sqlite:///results/study/optuna.db or postgresql://user@host/db"
    from sqlalchemy.engine import make_url  # imported here: only studies with a storage pay for it
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError(f"expected {expected}, got {excerpt(url)}") from None
    backend = parsed.get_backend_name()
    if backend not in STORAGE_BACKENDS:
        hint = " (write postgresql://, not postgres://)" if backend == "postgres" else ""
        raise ValueError(f"expected a {', '.join(STORAGE_BACKENDS)} URL, got scheme {excerpt(backend)}{hint}")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ValueError("expected a SQLite file, e.g. sqlite:///results/study/optuna.db; an in-memory database "
                         "cannot be shared with the dashboard or resumed")
    if backend == "sqlite":
        path_text(parsed.database)  # a path the OS can open (its folder is checked by `sweep run`, dry run too)
    if backend != "sqlite" and (not parsed.database or not (parsed.host or parsed.query.get("host"))):
        raise ValueError(f"expected a host and a database name, e.g. {backend}://user@host/optuna, got {excerpt(url)}")
    return url


def _keep_weights(value: Any) -> Any:
    """keep_weights: best (= 1) | all (None) | none (0) | k: how many trials keep their best-dev weights."""
    if isinstance(value, str) and value in _NAMED_KEEP:
        return _NAMED_KEEP[value]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"expected best, all, none or a number of trials k >= 0, got {excerpt(value)}")


def _loggers(value: list[str]) -> list[str]:
    for index, name in enumerate(value):
        if name not in LOGGERS:
            raise UserErrorAt(("loggers", index), f"expected one of {', '.join(LOGGERS)}, got {excerpt(name)}"
                              + suggestion(str(name), LOGGERS))
        if name in value[:index]:
            raise UserErrorAt(("loggers", index), f"{name} is listed twice")
    return value


def _non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError(f"expected a non-empty string, got {excerpt(text)}")
    return text


def _gpu_rule(gpu: float) -> float:
    if gpu > 1 and not float(gpu).is_integer():
        raise ValueError(f"expected a fraction below 1 or a whole number (Ray's rule), got {excerpt(gpu)}")
    return gpu


def _ray_quantity(amount: float) -> float:
    """Ray counts a resource in ten-thousandths in a 64-bit integer (ray._raylet.RESOURCE_UNIT_SCALING): it
    refuses a non-zero amount below 0.0001 once Ray has started, and cannot hold one past ~9.2e14."""
    if 0 < abs(amount) * 10_000 < 1:  # as Ray's int(amount * 10000) == 0, without overflowing at 1e308
        raise ValueError(f"expected 0 or at least 0.0001 (Ray counts resources in ten-thousandths), got {amount:g}")
    if amount * 10_000 >= 2**63:
        raise ValueError(f"expected at most 1e14 (Ray counts resources in ten-thousandths in 64 bits), got {amount:g}")
    return amount


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Metric(_Section):
    name: Literal[METRIC_NAMES] = "dev_stsb"  # dev_stsb | avg | STSBenchmark | ... (a summary field)
    goal: Literal["maximize", "minimize"] = "maximize"

    @model_validator(mode="before")
    @classmethod
    def _default_goal(cls, data: Any) -> Any:
        """align and uniform are better lower: their goal defaults to minimize."""
        if isinstance(data, dict) and "goal" not in data and data.get("name") in LOWER_IS_BETTER:
            return {**data, "goal": "minimize"}
        return data


class Resources(_Section):
    cpu: Annotated[Number, AfterValidator(_ray_quantity)] = Field(1.0, gt=0)
    gpu: Annotated[Number, AfterValidator(_ray_quantity), AfterValidator(_gpu_rule)] = Field(0.0, ge=0)  # 0.5: half


def _analysis_knobs(value: list[str]) -> list[str]:
    from analysis.registry import KNOWN_KNOBS, generic_knobs  # light: no pandas or matplotlib

    for index, knob in enumerate(value):
        if knob not in KNOWN_KNOBS and not generic_knobs([knob]):  # a number key: the figure `knob`
            raise UserErrorAt(("analysis", "knobs", index), f"expected a knob a figure is drawn for "
                              f"({', '.join(KNOWN_KNOBS)}) or a number config key, got {excerpt(knob)}"
                              + suggestion(str(knob), KNOWN_KNOBS))
    return value


class Analysis(_Section):
    """What `sweep analyze` draws besides the figures the swept `parameters` call for (analysis/registry.py):
    `knobs` names keys (or `mtd`) whose figures to draw although the study does not sweep them directly,
    e.g. `knobs: [mtd]` for a study that moves the traceable distance through a key of its own.
    `seed_spread`: the standard deviation over seeds of a paired difference (score points), for the seeds a
    difference needs before any trial has finished (analysis.seeds; default: sourced from MixCSE Table 1);
    `target_difference`: the difference the study means to resolve, whose seed count the dry run and the
    paired table state."""

    knobs: Annotated[list[Annotated[str, Strict()]], AfterValidator(_analysis_knobs)] = []
    seed_spread: Annotated[Number, Field(gt=0)] | None = None
    target_difference: Annotated[Number, Field(gt=0)] | None = None


class Scheduler(_Section):
    type: Literal["asha"] = "asha"
    grace_period: Int = Field(1, ge=1)  # in evaluations
    reduction_factor: Int = Field(3, ge=2)
    max_t: Int | None = None  # in evaluations; None: the run's number of evaluations

    @model_validator(mode="after")
    def _max_t_after_grace(self) -> Scheduler:
        if self.max_t is not None and self.max_t < self.grace_period:
            raise UserErrorAt(("scheduler", "max_t"), f"expected null or an integer >= grace_period "
                              f"({self.grace_period}), got {excerpt(self.max_t)}")
        return self


class Tracking(_Section):
    """Where the trackers of `loggers` write (nothing here changes what a trial computes)."""

    # MLflow tracking URI (http://host:port, sqlite:///file.db, ...); default: $MLFLOW_TRACKING_URI
    mlflow_uri: Annotated[str, Strict(), AfterValidator(_non_empty)] | None = None
    # W&B project; default: $WANDB_PROJECT, else the study name
    wandb_project: Annotated[str, Strict(), AfterValidator(_non_empty)] | None = None


def _none_is_default(value: Any, info: ValidationInfo) -> Any:
    """`description:` with nothing after it means the default, like leaving the key out."""
    return StudySpec.model_fields[info.field_name].get_default(call_default_factory=True) if value is None else value


class StudySpec(BaseModel):
    """A validated study: one study file's keys, each checked, with its defaults filled in.

    Made by `sweep.load_study` (never by hand in normal use: the file's key lines, `source_text` and
    `path` come from there); read by the runner, the dry run, `sweep status` and `sweep analyze`. The keys,
    their defaults and what each one does are the study file's (docs/study-file.md): `name` and `base`
    (a trainer config, `trainer.RunConfig`'s keys) are required; `parameters` maps dotted trainer keys to
    a list of values, a distribution or an `{expr: ...}`; `method` is grid, random or tpe (with `budget`);
    `seeds`, `metric`, `resources`, `scheduler`, `storage`, `results_dir`, `constraints`, `keep_weights`,
    `reuse_workers`, `loggers`, `analysis`, `tracking`, `reference`, `cost_limit` and `plugins` (files, relative to
    the study file's folder, or modules defining methods of one's own: trainer.methods.plugins, imported before
    `base` and `parameters` are checked) have defaults. Unknown keys are refused.

    The trials it gives are `sweep.spec.expand(spec)` (a list of `Trial`, in the order they run).
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: Annotated[str, Strict(), AfterValidator(_slug)]
    description: Annotated[str, Strict(), BeforeValidator(_none_is_default)] = ""
    base: dict[str, Any]  # a trainer config (RunConfig.from_dict validates it)
    parameters: Annotated[dict[str, Any], BeforeValidator(_none_is_default)] = {}  # dotted key -> list or distribution
    seeds: list[Annotated[Int, Field(ge=0, lt=2**32)]] = Field([42], min_length=1)
    method: Literal[SEARCH_METHOD_NAMES] = "grid"  # grid | random | tpe: the object is `search` (sweep.spec.search)
    metric: Annotated[Metric, BeforeValidator(_none_is_default)] = Field(default_factory=Metric)
    budget: Int | None = Field(None, ge=1)  # number of trials for random/tpe (per seed)
    resources: Annotated[Resources, BeforeValidator(_none_is_default)] = Field(default_factory=Resources)
    scheduler: Scheduler | None = None
    storage: Annotated[str, Strict(), AfterValidator(_storage_url)] | None = None  # None: <study>/optuna.db
    results_dir: Annotated[str, Strict(), BeforeValidator(_none_is_default), AfterValidator(_non_empty),
                           AfterValidator(path_text)] = "results"
    constraints: Annotated[list[Annotated[str, Strict(), AfterValidator(_condition)]],
                           BeforeValidator(_none_is_default)] = []
    # best | all | none | <k>: whose best-dev weights stay (trials/<key>/model/; the top k by the metric)
    keep_weights: Annotated[int | None, BeforeValidator(_keep_weights)] = 1  # None: all; 0: none
    # a Ray worker process runs trial after trial (Tune's actor reuse) instead of one fresh process per trial:
    # the imports and the loaded model, tokenizer and data are paid once per worker (sweep.run.worker)
    reuse_workers: Annotated[bool, Strict()] = True
    # training curves through Ray Tune's logger callbacks: tensorboard, mlflow, wandb (default: none)
    loggers: Annotated[list[Annotated[str, Strict()]], BeforeValidator(_none_is_default), AfterValidator(_loggers)] = []
    # what `sweep analyze` draws beyond what `parameters` call for; changing it changes no trial
    analysis: Annotated[Analysis, BeforeValidator(_none_is_default)] = Field(default_factory=Analysis)
    tracking: Annotated[Tracking, BeforeValidator(_none_is_default)] = Field(default_factory=Tracking)
    # the configuration `sweep analyze` states every other one against (analysis.paired): swept key -> its value;
    # changing it changes no trial
    reference: Annotated[dict[str, Any], BeforeValidator(_none_is_default)] = {}
    # device-hours the study may spend (measured: each trial attempt's wall time x its devices); `sweep run`
    # refuses a study whose estimate passes it and stops handing out trials before the next would (sweep.run.cost_limit)
    cost_limit: Annotated[Number, Field(gt=0)] | None = None
    # methods of one's own: files (relative to the study file's folder) or importable modules, as written
    plugins: Annotated[list[Annotated[str, Strict(), AfterValidator(_non_empty)]],
                       BeforeValidator(_none_is_default)] = []
    source_text: str = ""  # the YAML as written (stored as the Optuna study's note)
    path: str = ""  # the YAML file it was loaded from ("" when built in code)
    key_lines: KeyLines | None = Field(None, exclude=True, repr=False)  # key lines of `path`, for errors

    @model_validator(mode="after")
    def _check_study(self, info: ValidationInfo) -> StudySpec:
        from sweep.spec.values import check_base, check_parameters

        where = self.where()
        load_study_plugins(self, (info.context or {}).get("plugin_folder"))  # before base names their methods
        seen: set[int] = set()  # constant-time lookups: a study may list 100,000 seeds
        for index, seed in enumerate(self.seeds):
            if seed in seen:
                raise where.error(("seeds", index), f"seed {seed} is listed twice")
            seen.add(seed)
        for key, value in self.reference.items():
            values = self.parameters.get(key)
            if values is None:
                raise where.error(("reference", key), f"names {key}, which the study does not sweep; expected keys "
                                  f"of parameters: {', '.join(self.parameters) or 'none'}")
            listed = values if isinstance(values, list) else []
            written = [v for v in listed if not (isinstance(v, dict) and "expr" in v)]
            if written and len(written) == len(values) and not any(v == value for v in written):
                raise where.error(("reference", key), f"{value!r} is none of the values parameters.{key} lists "
                                  f"({', '.join(map(repr, values[:8]))})")
        search = self.search
        search.check_budget(self.budget, where)
        max_trials = (info.context or {}).get("max_trials")
        if search.sized_by_lists:
            self._check_size(max_trials)  # before any value is checked or trial built
        self.base = check_base(self.base, set(self.parameters), where)
        self.parameters = check_parameters(self.parameters, search, self.base, where)
        problem = search.budget_problem(self.parameters, self.budget)
        if problem:  # a budget beyond the space first: asking for the flag would not help
            raise where.error(("budget",), problem)
        if not search.sized_by_lists:
            self._check_size(max_trials)
        device = str(self.base.get("device", "auto"))
        if device.startswith("cuda") and self.resources.gpu == 0:
            raise where.error(("resources", "gpu") if ("resources", "gpu") in where.lines else ("base", "device"),
                              f"base.device is {excerpt(device)} but resources.gpu is 0; expected gpu > 0 (or device "
                              "auto/cpu)", show_key=False)
        return self

    def _check_size(self, max_trials: int | None) -> None:
        """More than `max_trials` trials (load_study's MAX_TRIALS unless `--many-trials`) is refused, saying
        how many, before the work that grows with them (checking, building and keying each trial)."""
        trials = self.search.planned_trials(self.parameters, self.budget, len(self.seeds))
        if max_trials is None or trials <= max_trials:
            return
        seeds = f"{len(self.seeds)} seed{'s' if len(self.seeds) != 1 else ''}"
        path, what = self.search.size_words(trials // len(self.seeds), self.budget)
        raise self.where().error(path, f"{what} x {seeds} = {count_text(trials)} trials, more than the "
                                 f"{count_text(max_trials)} a study plans unasked (each is planned before any "
                                 f"runs); pass {MANY_TRIALS_FLAG} to plan them all, or make the "
                                 "study smaller")

    @property
    def search(self) -> SearchMethod:
        """The study's search method as an object (sweep.spec.search: Grid, Random or Tpe), chosen by `method`;
        what a method means is asked of it, never compared as a word."""
        return search_method(self.method)

    @property
    def plugin_folder(self) -> Path:
        """The folder the study's plugin files are relative to: its study file's (the working directory for a
        spec built in code)."""
        return Path(self.path).parent if self.path else Path.cwd()

    def plugin_sources(self, folder: Path | None = None) -> list[str]:
        """The study's plugins as every process imports them: files by absolute path, modules by name."""
        from trainer.methods.plugins import resolved_plugin

        return [resolved_plugin(spec, folder or self.plugin_folder) for spec in self.plugins]

    def where(self) -> KeyLines:
        """The key lines errors are placed with (no lines for a spec built in code)."""
        return self.key_lines or KeyLines(self.path or f"study '{self.name}'", {})

    @property
    def study_dir(self) -> str:
        return str(Path(self.results_dir) / self.name)

    @property
    def storage_url(self) -> str:
        """The Optuna storage actually used: `storage`, or the SQLite file in the study folder."""
        return self.storage or f"sqlite:///{Path(self.study_dir) / 'optuna.db'}"

    def to_dict(self) -> dict[str, Any]:
        """The spec with defaults filled in, as plain YAML-able data (for results/<study>/study.yaml)."""
        data = self.model_dump(mode="json", exclude={"source_text", "path", "key_lines"})
        data["keep_weights"] = "all" if self.keep_weights is None else self.keep_weights
        return data


def load_study_plugins(spec: StudySpec, folder: Path | None = None) -> None:
    """Import the study's plugins (relative to `folder`, by default the study file's) and register their methods;
    a plugin that is not there or not a module is refused on its line of the study, one that fails inside on the
    plugin's own FILE:LINE (trainer.methods.plugins)."""
    from trainer.methods.plugins import PluginNotFound, load_plugins

    for index, item in enumerate(spec.plugins):
        try:
            load_plugins([item], folder or spec.plugin_folder)
        except PluginNotFound as exc:
            raise spec.where().error(("plugins", index), str(exc)) from None


class UserErrorAt(ValueError):
    """A ValueError raised inside a sub-model's validator that knows its own key path."""

    def __init__(self, path: tuple, message: str):
        super().__init__(message)
        self.path = path


@dataclass
class Trial:
    """One trial of a study: a seed and the swept values, resolved into a full trainer config.

    Attributes:
        key: the trial's stable key, 12 hex characters (`sweep.spec.trial_key`): it hashes what the study
            asks for (the fields that differ from the trainer's defaults, and the seed), so a release that
            changes a default keeps finished trials finished. Its folder is results/<study>/trials/<key>/.
        seed: the training seed.
        params: the swept values, by dotted key (`{"queue.size": 256}`).
        config: the resolved trainer config (`RunConfig.to_dict()` after the method's defaults apply).
        mtd: MoCoSE's maximum traceable distance by formula, None where it is undefined.
        requested: dotted key -> value for every field the study set (in `base` or `parameters`), not the
            defaults.
    """

    key: str  # stable trial key (sweep/spec/expand.py `trial_key`)
    seed: int
    params: dict[str, Any]  # the swept values, by dotted key
    config: dict[str, Any]  # the resolved trainer config (RunConfig.to_dict() after resolved())
    mtd: float | None  # maximum traceable distance by formula, None where undefined
    requested: dict[str, Any] = field(default_factory=dict)  # dotted key -> value the study set (not a default)


# The sections whose unknown keys load_study names with the known ones.
SECTION_MODELS = {"metric": Metric, "resources": Resources, "scheduler": Scheduler, "analysis": Analysis,
                  "tracking": Tracking}
