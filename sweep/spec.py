"""Study spec: one YAML file -> a validated `StudySpec`, expanded into `Trial`s.

INTERFACE CONTRACT (the runner consumes it):

    load_study(path) -> StudySpec           # raises trainer.errors.UserError (one line, names key+line)
    expand(spec) -> list[Trial]             # deterministic order; constraints applied
    trial_key(config_dict, seed) -> str     # stable hash of the resolved config + seed (12 hex chars)

and beside it: `search_space(spec)` (Optuna distributions for random/tpe), `trial_from_params(spec,
params, seed)` (one Trial from values a sampler chose), `read_trial_states(spec)`,
`format_trial_table(spec, trials, states)` and `print_dry_run(spec)`.

A study file (every key but `name` and `base` is optional)::

    name: queue_init                  # slug: letters, digits, - and _; results go to <results_dir>/<name>/
    description: Table 7 of MoCoSE ...
    base:                             # a trainer config (trainer/config.py); `model` is required,
      model: bert-base-uncased        # `seed` and `output_dir` are set per trial and may not appear
      method: mocose
    parameters:                       # dotted trainer config key -> values
      queue.size: [128, 256, 512]     # grid: a list of values, swept in the order written
      queue.initial_size:             # a value may be computed from the others:
        - 0                           #   {expr: "..."} is evaluated after the plain values of the
        - {expr: "queue.size // 4"}   #   trial are set (exprs in the order written, each seeing the
        - {expr: "queue.size"}        #   ones before it); the result is checked like a plain value
      ema.decay: {distribution: uniform, low: 0.5, high: 0.99}   # random/tpe only, see below
      optim.lr: {expr: "..."}         # a lone {expr} mapping is a derived (not swept) value
    seeds: [42, 43, 44]               # default [42]
    method: grid                      # grid (lists only) | random | tpe (both need `budget`)
    budget: 20                        # configurations to sample (random) or to try (tpe), per seed
    metric: {name: dev_stsb, goal: maximize}   # dev_stsb avg STS12..STS16 STSBenchmark SICKRelatedness
                                               # align uniform (these two default to minimize)
    resources: {cpu: 4, gpu: 1}       # per trial; fractions allowed (gpu: 0.5); gpu > 1 must be whole
    scheduler: {type: asha, grace_period: 1, reduction_factor: 3, max_t: null}   # or null (default)
    storage: postgresql://user@host/db   # Optuna URL (sqlite, postgresql[+driver], mysql[+driver]);
                                         # default sqlite:///<results_dir>/<name>/optuna.db
    results_dir: results              # default "results" (relative to the working directory)
    constraints:                      # combinations for which any is false are dropped
      - "queue.initial_size <= queue.size"
      - "mix.lam == 0.2 or mix.directions == 'both'"

Distributions: `{distribution: uniform|loguniform, low, high}` (uniform may add `step`),
`{distribution: int, low, high, step?}`, `{distribution: categorical, choices: [...]}`. Under random and
tpe a plain list means "choose one of these".

Expressions (constraints and `expr` values) are a small safe subset of Python, read with `ast` and
never passed to eval(): numbers, strings, True/False/None, dotted trainer keys (`queue.size`,
`method`), + - * / // %, comparisons (== != < <= > >=, chainable), and/or/not. Anything else (calls,
indexing, attributes that are not trainer keys, names starting with `_`) is refused when the file loads.
`expr` values see the trial's config before the method defaults are filled in (`optim.weight_decay`,
`fgsm.eps` may be null there); constraints see it after, whenever the combination is a valid config.

Built-in constraint: a combination whose queue.initial_size exceeds queue.size is dropped silently
(Table 7 crosses K0 with K); the same values in `base` alone are an error.

Queue slices are lists of half-open position ranges or "all": `queue.slices: [["0-512"],
["0-256", "768-1024"], all]` sweeps three slicings.

Expansion order: seeds outermost, then the cartesian product of the parameters in the order written
(last key fastest), so the first len(configurations) trials cover the whole grid once with the first
seed; later seeds add repeats. Random draws `budget` distinct configurations with an RNG seeded from
the study name (the same file always gives the same trials), then crosses them with the seeds. TPE is
driven during the run by Optuna's sampler through Ray Tune (`search_space`, `trial_from_params`).
Combinations that resolve to the same trainer config are collapsed to the first.
"""

from __future__ import annotations

import ast
import copy
import difflib
import functools
import hashlib
import itertools
import json
import math
import operator
import random
import re
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, get_args, get_origin

import yaml

from analysis.mtd import config_traceable_distance
from trainer.config import RunConfig, coerce, field_names, field_type, set_dotted
from trainer.errors import UserError


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
    path: str = ""  # the YAML file it was loaded from ("" when built in code)

    @property
    def study_dir(self) -> str:
        return str(Path(self.results_dir) / self.name)

    @property
    def storage_url(self) -> str:
        """The Optuna storage actually used: `storage`, or the SQLite file in the study folder."""
        return self.storage or f"sqlite:///{Path(self.study_dir) / 'optuna.db'}"

    def to_dict(self) -> dict[str, Any]:
        """The spec with defaults filled in, as plain YAML-able data (for results/<study>/study.yaml)."""
        return {
            "name": self.name,
            "description": self.description,
            "base": copy.deepcopy(self.base),
            "parameters": copy.deepcopy(self.parameters),
            "seeds": list(self.seeds),
            "method": self.method,
            "metric": asdict(self.metric),
            "budget": self.budget,
            "resources": asdict(self.resources),
            "scheduler": asdict(self.scheduler) if self.scheduler else None,
            "storage": self.storage,
            "results_dir": self.results_dir,
            "constraints": list(self.constraints),
        }


@dataclass
class Trial:
    key: str  # stable trial key
    seed: int
    params: dict[str, Any]  # the swept values, by dotted key
    config: dict[str, Any]  # the resolved trainer config (RunConfig.to_dict() after resolved())
    mtd: float | None  # maximum traceable distance by formula, None where undefined


TOP_LEVEL_KEYS = (
    "name", "description", "base", "parameters", "seeds", "method", "metric", "budget",
    "resources", "scheduler", "storage", "results_dir", "constraints",
)
METHODS = ("grid", "random", "tpe")
METRIC_NAMES = (
    "dev_stsb", "avg", "STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness",
    "align", "uniform",
)
LOWER_IS_BETTER = ("align", "uniform")
GOALS = ("maximize", "minimize")
DISTRIBUTION_KEYS = {
    "uniform": ("low", "high", "step"),
    "loguniform": ("low", "high"),
    "int": ("low", "high", "step"),
    "categorical": ("choices",),
}
STORAGE_BACKENDS = ("sqlite", "postgresql", "mysql")
TRIAL_KEY_LENGTH = 12

# Keys the study sets per trial; a value in `base` or `parameters` would be silently overridden.
_PER_TRIAL_KEYS = {
    "seed": "list the seeds at the top level (seeds: [42, 43])",
    "output_dir": "the runner sets it per trial (results/<study>/trials/<key>/)",
}
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
_MAX_FILE_BYTES = 1_000_000
_MAX_EXPRESSION_CHARS = 500
_RANDOM_ATTEMPTS_PER_CONFIG = 20  # random search gives up when constraints reject nearly every sample
_NOT_SET = object()
# Trainer checks that compare two keys: (key it complains about) -> the other keys it depends on.
_DEPENDS_ON = {
    "queue.initial_size": ("queue.initial_size", "queue.size"),
    "queue.slices": ("queue.slices", "queue.size"),
    "data.max_sentences": ("data.max_sentences", "batch_size"),
}


# ==== public API ===============================================================================
def load_study(path: str | Path) -> StudySpec:
    """Read and validate a study file; every mistake is a one-line UserError naming file, key, line.

    Nothing is written. Grid and random studies are expanded once here, so a combination that is not
    a valid trainer config fails now rather than halfway through a sweep.
    """
    text = _read_study_text(Path(path))
    data, lines = _parse_yaml(text, str(path))
    where = _Where(str(path), lines)
    if data is None:
        raise UserError(f"{path}:1: the study file is empty; expected a mapping with at least name and base")
    if not isinstance(data, dict):
        raise UserError(f"{path}:1: expected a mapping of study keys ({', '.join(TOP_LEVEL_KEYS)}), "
                        f"got {_type_name(data)}")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise where.error((key,), f"is not a study key; expected one of {', '.join(TOP_LEVEL_KEYS)}"
                              + _suggestion(key, TOP_LEVEL_KEYS))

    method = _read_choice(data, "method", METHODS, "grid", where)
    parameters_raw = data.get("parameters")
    swept = set(parameters_raw) if isinstance(parameters_raw, dict) else set()
    base = _read_base(data.get("base", _NOT_SET), swept, where)
    context = _ValueContext(_overlay(_default_config(), base), swept)
    spec = StudySpec(
        name=_read_name(data, where),
        description=_read_string(data, "description", "", where),
        base=base,
        parameters=_read_parameters(parameters_raw, method, context, where),
        seeds=_read_seeds(data, where),
        method=method,
        metric=_read_metric(data, where),
        budget=_read_budget(data, method, where),
        resources=_read_resources(data, base, where),
        scheduler=_read_scheduler(data, where),
        storage=_read_storage(data, where),
        results_dir=_read_string(data, "results_dir", "results", where, non_empty=True),
        constraints=_read_constraints(data, where),
        source_text=text,
        path=str(path),
    )
    spec._where = where  # line numbers for errors raised while expanding (not a dataclass field)
    if method == "tpe":
        # TPE picks its points during the run; check one now so a broken expr or constraint shows here.
        _make_trial(spec, {key: _first_point(values) for key, values in spec.parameters.items()},
                    spec.seeds[0], where)
    elif not _expand(spec).trials:
        expansion = _expand(spec)
        raise where.error(("parameters",), f"every combination is dropped ({expansion.dropped} by "
                          "queue.initial_size > queue.size or the constraints); nothing would run")
    return spec


def expand(spec: StudySpec) -> list[Trial]:
    """The study's trials in a deterministic order (see the module doc); [] for tpe."""
    return copy.deepcopy(_expand(spec).trials)  # callers may edit their trials; the cache stays intact


def trial_key(config: dict[str, Any], seed: int) -> str:
    """First 12 hex digits of sha256 over the canonical JSON of the resolved config and the seed."""
    canonical = json.dumps({"config": config, "seed": seed}, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:TRIAL_KEY_LENGTH]


def search_space(spec: StudySpec) -> dict[str, Any]:
    """Optuna distributions of the sampled parameters (random/tpe); lists with `expr` values are left out.

    Categorical choices that are lists (queue slices) are offered to Optuna as strings joined with
    "+", which `trial_from_params` turns back into lists.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    space: dict[str, Any] = {}
    for key, values in spec.parameters.items():
        if isinstance(values, list):
            if any(_is_expr(v) for v in values):
                continue  # computed per trial, not chosen by the sampler
            space[key] = CategoricalDistribution([_optuna_choice(v) for v in values])
            continue
        kind = values["distribution"]
        if kind == "categorical":
            space[key] = CategoricalDistribution([_optuna_choice(v) for v in values["choices"]])
        elif kind == "int":
            space[key] = IntDistribution(values["low"], values["high"], step=values.get("step") or 1)
        else:
            space[key] = FloatDistribution(values["low"], values["high"], log=kind == "loguniform",
                                           step=values.get("step"))
    return space


def trial_from_params(spec: StudySpec, params: dict[str, Any], seed: int) -> Trial | None:
    """The Trial for values a sampler chose (keys of `search_space`); None when a constraint drops it."""
    raw: dict[str, Any] = {}
    for key, values in spec.parameters.items():
        if isinstance(values, list) and all(_is_expr(v) for v in values):
            raw[key] = values[0]
            continue
        if key not in params:
            raise UserError(f"study '{spec.name}': no value for parameter '{key}'")
        choices = values if isinstance(values, list) else values.get("choices", [])
        decoded = {_optuna_choice(c): c for c in choices if not _is_expr(c)}
        value = params[key]
        raw[key] = decoded.get(value, value) if isinstance(value, str) else value
    return _make_trial(spec, raw, seed, _where_of(spec))


def read_trial_states(spec: StudySpec) -> dict[str, str] | None:
    """key -> what `sweep run` would do with it (sweep.resume.trial_states: the trial folders and the
    Optuna study, as the run decides); None when the study has not run here."""
    from sweep.resume import trial_states

    try:
        return trial_states(spec)
    except UserError as exc:  # e.g. a PostgreSQL storage out of reach: the dry run still shows the trials
        import sys

        print(f"note: trial states unknown: {exc}", file=sys.stderr)
        return None


def format_trial_table(spec: StudySpec, trials: list[Trial], states: dict[str, str] | None = None) -> str:
    """A plain-text table: key, seed, one column per swept parameter, MTD, and status when `states`."""
    headers = ["key", "seed", *spec.parameters, "mtd"] + (["status"] if states is not None else [])
    rows = []
    for trial in trials:
        row = [trial.key, str(trial.seed)]
        row += [_format_value(trial.params.get(key)) for key in spec.parameters]
        row.append("-" if trial.mtd is None else f"{trial.mtd:.2f}")
        if states is not None:
            row.append(states.get(trial.key, "-"))
        rows.append(row)
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    numeric = {1, len(headers) - 1 - (states is not None)}  # seed and mtd read better right-aligned
    out = []
    for row in [headers, *rows]:
        cells = [cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def print_dry_run(spec: StudySpec) -> None:
    """What `sweep run --dry-run` shows: the study, its trials (with states if it ran before), MTD."""
    print(_dry_run_text(spec))


# ==== expansion =================================================================================
@dataclass
class _Expansion:
    trials: list[Trial]
    configurations: int  # distinct configurations (before crossing with seeds)
    dropped: int  # combinations (grid) or samples (random) dropped by the constraints
    duplicates: int  # combinations that resolved to a config already present


def _expand(spec: StudySpec) -> _Expansion:
    # Building a trainer config costs milliseconds, so the expansion is kept on the spec and reused
    # (load_study validates with it, the dry run prints it) for as long as the spec is unchanged.
    fingerprint = json.dumps(spec.to_dict(), sort_keys=True, default=str)
    cached = getattr(spec, "_expansion", None)
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    expansion = _expand_uncached(spec)
    spec._expansion = (fingerprint, expansion)
    return expansion


def _expand_uncached(spec: StudySpec) -> _Expansion:
    where = _where_of(spec)
    if spec.method == "tpe":
        return _Expansion([], 0, 0, 0)
    if spec.method == "grid":
        candidates: Iterator[dict[str, Any]] = _grid_combinations(spec.parameters)
        limit = None
    else:
        candidates = _random_samples(spec.parameters, spec.name)
        limit = spec.budget
    first_seed_trials, dropped, duplicates = _distinct_configurations(spec, candidates, limit, where)
    seed_matters = _mentions_seed(spec)
    trials, seen = [], set()
    for seed in spec.seeds:
        for raw, first in first_seed_trials:
            if seed == spec.seeds[0]:
                trial: Trial | None = first
            elif seed_matters:
                trial = _make_trial(spec, raw, seed, where)
            else:
                trial = _with_seed(first, seed)  # the seed changes nothing else in the config
            if trial is not None and trial.key not in seen:
                seen.add(trial.key)
                trials.append(trial)
    return _Expansion(trials, len(first_seed_trials), dropped, duplicates)


def _first_point(values: Any) -> Any:
    if isinstance(values, list):
        return values[0]
    return values["choices"][0] if values["distribution"] == "categorical" else values["low"]


def _with_seed(trial: Trial, seed: int) -> Trial:
    config = copy.deepcopy(trial.config)
    config["seed"] = seed
    return Trial(key=trial_key(config, seed), seed=seed, params=copy.deepcopy(trial.params),
                 config=config, mtd=trial.mtd)


def _mentions_seed(spec: StudySpec) -> bool:
    texts = list(spec.constraints) + [v["expr"] for values in spec.parameters.values()
                                      if isinstance(values, list) for v in values if _is_expr(v)]
    return any("seed" in _compile_expression(text)[1] for text in texts)


def _grid_combinations(parameters: dict[str, list[Any]]) -> Iterator[dict[str, Any]]:
    keys = list(parameters)
    for values in itertools.product(*(parameters[key] for key in keys)):
        yield dict(zip(keys, values))


def _random_samples(parameters: dict[str, Any], study_name: str) -> Iterator[dict[str, Any]]:
    # Seeded from the name, not from Python's salted hash(), so every process draws the same trials.
    rng = random.Random(int.from_bytes(hashlib.sha256(study_name.encode()).digest()[:8], "big"))
    while True:
        yield {key: _sample(rng, values) for key, values in parameters.items()}


def _sample(rng: random.Random, values: Any) -> Any:
    if isinstance(values, list):
        return rng.choice(values)
    kind = values["distribution"]
    if kind == "categorical":
        return rng.choice(values["choices"])
    low, high, step = values["low"], values["high"], values.get("step")
    if kind == "int":
        return rng.randrange(low, high + 1, step or 1)
    if kind == "loguniform":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    value = rng.uniform(low, high)
    if step:
        value = min(high, low + round((value - low) / step) * step)
        value = round(value, 12)  # keep 0.1-steps from printing as 0.30000000000000004
    return value


def _distinct_configurations(
    spec: StudySpec, candidates: Iterator[dict[str, Any]], limit: int | None, where: "_Where",
) -> tuple[list[tuple[dict[str, Any], Trial]], int, int]:
    """(raw values, trial with the first seed) for each distinct kept candidate, up to `limit`."""
    kept: list[tuple[dict[str, Any], Trial]] = []
    keys: set[str] = set()
    # A repeated random draw (small categorical spaces) has a known fate; building it again is waste.
    fate_of_repeat: dict[str, str] = {}
    dropped = duplicates = 0
    max_attempts = None if limit is None else limit * _RANDOM_ATTEMPTS_PER_CONFIG
    for attempt, raw in enumerate(candidates, start=1):
        raw_text = json.dumps(raw, sort_keys=True, default=str)
        fate = fate_of_repeat.get(raw_text)
        if fate is None:
            trial = _make_trial(spec, raw, spec.seeds[0], where)
            fate = "dropped" if trial is None else "duplicate" if trial.key in keys else "kept"
            fate_of_repeat[raw_text] = "dropped" if fate == "dropped" else "duplicate"
            if fate == "kept":
                keys.add(trial.key)
                kept.append((raw, trial))
        dropped += fate == "dropped"
        duplicates += fate == "duplicate"
        if limit is not None and (len(kept) >= limit or attempt >= max_attempts):
            break
    return kept, dropped, duplicates


def _make_trial(spec: StudySpec, raw: dict[str, Any], seed: int, where: "_Where") -> Trial | None:
    """Base + plain values, then exprs, then the constraints; None when a constraint drops it."""
    config = _overlay(_default_config(), spec.base)
    params: dict[str, Any] = {}
    for key, value in raw.items():
        if not _is_expr(value):
            params[key] = copy.deepcopy(value)  # a Trial must not share lists with the spec
            set_dotted(config, key, params[key])
    config["seed"] = seed
    for key, value in raw.items():
        if _is_expr(value):
            params[key] = _evaluate_expr_value(key, value["expr"], config, where)
            set_dotted(config, key, params[key])
    params = {key: params[key] for key in raw}  # written order, exprs in place
    if _queue_overfull(config):
        return None
    try:
        resolved, problem = RunConfig.from_dict(config).resolved().to_dict(), None
    except UserError as exc:
        resolved, problem = None, exc
    # Constraints see the method defaults (fgsm.eps, optim.weight_decay) when the combination is a
    # valid config, and may still drop one that is not before its error is raised.
    for index, text in enumerate(spec.constraints):
        if not _evaluate_constraint(index, text, resolved or config, where):
            return None
    if problem is not None:
        raise _combination_error(problem, params, spec, where)
    return Trial(
        key=trial_key(resolved, seed),
        seed=seed,
        params=params,
        config=resolved,
        mtd=config_traceable_distance(resolved),
    )


def _queue_overfull(config: dict[str, Any]) -> bool:
    """The built-in constraint: K0 > K cannot be run (Table 7's grid crosses K0 with K)."""
    queue = config["queue"]
    size, initial = queue.get("size"), queue.get("initial_size")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (size, initial))
    return numbers and size >= 0 and initial > size


def _combination_error(exc: UserError, params: dict[str, Any], spec: StudySpec, where: "_Where") -> UserError:
    config_key, rest = _split_trainer_message(str(exc))
    if config_key in spec.parameters:
        path: tuple = ("parameters", config_key)
    elif config_key and dotted_get(spec.base, config_key, _MISSING) is not _MISSING:
        path = ("base", *config_key.split("."))
    else:
        path = ("parameters",)
    combination = ", ".join(f"{k}={_format_value(v)}" for k, v in params.items()) or "the base alone"
    shown = config_key or ".".join(str(p) for p in path)
    return where.error(path, f"in the combination {combination}: config key '{shown}'{rest}", show_key=False)


def _evaluate_expr_value(key: str, text: str, config: dict[str, Any], where: "_Where") -> Any:
    tree, _ = _compile_expression(text)
    try:
        value = _evaluate(tree, functools.partial(_lookup, config))
    except ValueError as exc:
        raise where.error(("parameters", key), f"expr '{text}' failed: {exc}") from None
    try:
        return coerce(value, field_type(key), key)
    except UserError as exc:
        _, rest = _split_trainer_message(str(exc))
        raise where.error(("parameters", key), f"expr '{text}' gave {value!r}{rest}") from None


def _evaluate_constraint(index: int, text: str, config: dict[str, Any], where: "_Where") -> bool:
    tree, _ = _compile_expression(text)
    try:
        result = _evaluate(tree, functools.partial(_lookup, config))
    except ValueError as exc:
        raise where.error(("constraints", index), f"'{text}' failed: {exc}") from None
    if not isinstance(result, bool):
        raise where.error(("constraints", index), f"'{text}' gave {result!r}; expected true or false")
    return result


# ==== reading the top-level keys ================================================================
def _read_name(data: dict[str, Any], where: "_Where") -> str:
    if "name" not in data:
        raise where.error((), "the study has no 'name'; expected e.g. name: queue_init (it names the "
                          "results folder and the Optuna study)", show_key=False)
    name = data["name"]
    if not isinstance(name, str) or not _NAME_PATTERN.match(name):
        raise where.error(("name",), f"expected a slug of letters, digits, '-' and '_' (at most 100), got {name!r}")
    return name


def _read_string(data: dict[str, Any], key: str, default: str, where: "_Where", non_empty: bool = False) -> str:
    value = data.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str) or (non_empty and not value.strip()):
        raise where.error((key,), f"expected a{' non-empty' if non_empty else ''} string, got {value!r}")
    return value


def _read_choice(data: dict[str, Any], key: str, choices: tuple[str, ...], default: str, where: "_Where") -> str:
    value = data.get(key, default)
    if value not in choices:
        raise where.error((key,), f"expected one of {', '.join(choices)}, got {value!r}" + _suggestion(value, choices))
    return value


def _read_base(base: Any, swept: set[str], where: "_Where") -> dict[str, Any]:
    if base is _NOT_SET:
        raise where.error((), "the study has no 'base'; expected a trainer config mapping with at least "
                          "'model' (e.g. base: {model: bert-base-uncased, method: mocose})", show_key=False)
    if not isinstance(base, dict):
        raise where.error(("base",), f"expected a mapping of trainer config keys, got {_type_name(base)}")
    if base.get("model") in (None, ""):
        state = "is empty" if "model" in base else "is missing"
        raise where.error(("base", "model"), f"{state}; expected an HF model id (bert-base-uncased), "
                          "a local path, or 'embedded' (the study must say what it trains)")
    for key, why in _PER_TRIAL_KEYS.items():
        if key in base:
            raise where.error(("base", key), f"is set per trial: {why}")
    checked = copy.deepcopy(base)
    for key in swept:
        _pop_dotted(checked, key)  # every trial sets it, so the base's value never runs
    try:
        RunConfig.from_dict(checked)
    except UserError as exc:
        config_key, rest = _split_trainer_message(str(exc))
        if any(other in swept for other in _DEPENDS_ON.get(config_key, ())):
            return base  # e.g. K0 against a swept K: judged per combination while expanding
        path = ("base", *config_key.split(".")) if config_key else ("base",)
        raise where.error(path, rest.lstrip(": ") if rest.startswith(":") else rest.strip()) from None
    return base


def _read_parameters(raw: Any, method: str, context: "_ValueContext", where: "_Where") -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise where.error(("parameters",), "expected a mapping of dotted trainer keys to value lists or "
                          f"distributions, got {_type_name(raw)}")
    parameters: dict[str, Any] = {}
    for key, spec_value in raw.items():
        path = ("parameters", key)
        if isinstance(key, str) and any(known.startswith(key + ".") for known in _known_keys()):
            raise where.error(path, f"is a config section; expected dotted keys such as '{key}."
                              f"{next(k for k in _known_keys() if k.startswith(key + '.')).split('.', 1)[1]}'")
        if not isinstance(key, str) or key not in _known_keys():
            raise where.error(path, "is not a trainer config key" + _suggestion(str(key), _known_keys()))
        if key in _PER_TRIAL_KEYS:
            raise where.error(path, f"is set per trial: {_PER_TRIAL_KEYS[key]}")
        if isinstance(spec_value, list):
            parameters[key] = _read_value_list(key, spec_value, method, context, where)
        elif _is_expr(spec_value):
            _check_expression(spec_value["expr"], path, where)
            parameters[key] = [spec_value]  # a derived value: one "choice", computed per trial
        elif isinstance(spec_value, dict) and "distribution" in spec_value:
            if method == "grid":
                raise where.error(path, "a distribution needs method random or tpe; a grid needs a list of values")
            parameters[key] = _read_distribution(key, spec_value, context, where)
        else:
            raise where.error(path, "expected a list of values (grid), a distribution mapping "
                              "{distribution: ..., low: ..., high: ...} or {expr: ...}, got "
                              f"{spec_value!r}; a fixed value belongs in base")
    return parameters


def _read_value_list(
    key: str, values: list[Any], method: str, context: "_ValueContext", where: "_Where",
) -> list[Any]:
    if not values:
        raise where.error(("parameters", key), "expected a non-empty list of values")
    out: list[Any] = []
    seen: list[Any] = []
    for index, value in enumerate(values):
        path = ("parameters", key, index)
        if _is_expr(value):
            if method == "tpe" and len(values) > 1:
                raise where.error(path, "expr values in a list need method grid or random (TPE samples "
                                  "plain values); write a lone {expr: ...} for a derived value")
            _check_expression(value["expr"], path, where)
            out.append(value)
            continue
        if isinstance(value, dict):
            raise where.error(path, f"expected a plain value or {{expr: ...}}, got {value!r}")
        value = _check_value(key, value, context, path, where)
        if value in seen:
            raise where.error(path, f"value {_format_value(value)} is listed twice")
        seen.append(value)
        out.append(value)
    return out


def _read_distribution(
    key: str, spec_value: dict[str, Any], context: "_ValueContext", where: "_Where",
) -> dict[str, Any]:
    path = ("parameters", key)
    kind = spec_value["distribution"]
    if kind not in DISTRIBUTION_KEYS:
        raise where.error(path + ("distribution",), f"expected one of {', '.join(DISTRIBUTION_KEYS)}, got {kind!r}"
                          + _suggestion(kind, DISTRIBUTION_KEYS))
    allowed = DISTRIBUTION_KEYS[kind]
    for name in spec_value:
        if name != "distribution" and name not in allowed:
            raise where.error(path + (name,), f"is not a key of a {kind} distribution; expected {', '.join(allowed)}")
    numeric = _numeric_kind(field_type(key))
    if kind == "categorical":
        choices = spec_value.get("choices")
        if not isinstance(choices, list) or not choices:
            raise where.error(path + ("choices",), f"expected a non-empty list of choices, got {choices!r}")
        checked = [_check_value(key, c, context, path + ("choices", i), where) for i, c in enumerate(choices)]
        return {"distribution": kind, "choices": checked}
    if numeric is None:
        raise where.error(path, f"is not numeric; a {kind} distribution needs a number key (use categorical)")
    if kind != "int" and numeric == "int":
        raise where.error(path + ("distribution",), f"'{key}' is an integer; expected distribution int or categorical")
    for name in ("low", "high"):
        if name not in spec_value:
            raise where.error(path, f"a {kind} distribution needs '{name}'")
    bound_type = int if kind == "int" else float
    low = _read_number(spec_value["low"], bound_type, path + ("low",), where)
    high = _read_number(spec_value["high"], bound_type, path + ("high",), where)
    if not low < high:
        raise where.error(path + ("high",), f"expected high > low ({low}), got {high}")
    if kind == "loguniform" and low <= 0:
        raise where.error(path + ("low",), f"a loguniform distribution needs low > 0, got {low}")
    out = {"distribution": kind, "low": low, "high": high}
    if spec_value.get("step") is not None:
        step = _read_number(spec_value["step"], bound_type, path + ("step",), where)
        if step <= 0:
            raise where.error(path + ("step",), f"expected a positive step, got {step}")
        out["step"] = step
    # Every constraint the trainer puts on a number is an interval, so valid ends mean a valid range.
    _check_value(key, low, context, path + ("low",), where)
    _check_value(key, high, context, path + ("high",), where)
    return out


def _read_number(value: Any, number_type: type, path: tuple, where: "_Where") -> int | float:
    if number_type is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise where.error(path, f"expected an integer, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise where.error(path, f"expected a number, got {value!r}")


@dataclass
class _ValueContext:
    """What a single swept value is checked against: the base (over defaults) and the swept keys."""

    base_config: dict[str, Any]
    swept: set[str]


def _check_value(key: str, value: Any, context: _ValueContext, path: tuple, where: "_Where") -> Any:
    """Coerce one swept value to its trainer type and check it with the base (K0 <= K aside).

    A complaint about another swept key is left to the combinations, which name both values.
    """
    try:
        value = coerce(value, field_type(key), key)
    except UserError as exc:
        _, rest = _split_trainer_message(str(exc))
        raise where.error(path, rest.lstrip(": ")) from None
    config = copy.deepcopy(context.base_config)
    set_dotted(config, key, value)
    queue = config["queue"]
    if _queue_overfull(config):
        queue["initial_size"] = queue["size"]  # the pair is judged per combination, never here
    try:
        RunConfig.from_dict(config)
    except UserError as exc:
        config_key, rest = _split_trainer_message(str(exc))
        if config_key == key:
            raise where.error(path, f"value {_format_value(value)}{rest}") from None
        if config_key in context.swept:
            return value
        raise where.error(path, f"value {_format_value(value)} does not fit the base: "
                          f"config key '{config_key}'{rest}") from None
    return value


def _read_seeds(data: dict[str, Any], where: "_Where") -> list[int]:
    seeds = data.get("seeds", [42])
    if not isinstance(seeds, list) or not seeds:
        raise where.error(("seeds",), f"expected a non-empty list of integers, e.g. [42, 43, 44], got {seeds!r}")
    for index, seed in enumerate(seeds):
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
            raise where.error(("seeds", index), f"expected an integer in [0, 2**32), got {seed!r}")
        if seed in seeds[:index]:
            raise where.error(("seeds", index), f"seed {seed} is listed twice")
    return list(seeds)


def _read_metric(data: dict[str, Any], where: "_Where") -> Metric:
    raw = data.get("metric")
    if raw is None:
        return Metric()
    if not isinstance(raw, dict):
        raise where.error(("metric",), f"expected a mapping {{name: dev_stsb, goal: maximize}}, got {raw!r}")
    for key in raw:
        if key not in ("name", "goal"):
            raise where.error(("metric", key), "is not a metric key; expected name, goal")
    name = raw.get("name", "dev_stsb")
    if name not in METRIC_NAMES:
        raise where.error(("metric", "name"), f"expected one of {', '.join(METRIC_NAMES)}, got {name!r}"
                          + _suggestion(name, METRIC_NAMES))
    goal = raw.get("goal", "minimize" if name in LOWER_IS_BETTER else "maximize")
    if goal not in GOALS:
        raise where.error(("metric", "goal"), f"expected maximize or minimize, got {goal!r}")
    return Metric(name=name, goal=goal)


def _read_budget(data: dict[str, Any], method: str, where: "_Where") -> int | None:
    budget = data.get("budget")
    if method == "grid":
        if budget is not None:
            raise where.error(("budget",), "applies to method random or tpe; a grid runs every combination")
        return None
    if budget is None:
        raise where.error(("method",), f"method {method} needs a budget: the number of configurations to try "
                          "(e.g. budget: 20)")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise where.error(("budget",), f"expected a positive integer, got {budget!r}")
    return budget


def _read_resources(data: dict[str, Any], base: dict[str, Any], where: "_Where") -> Resources:
    raw = data.get("resources")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise where.error(("resources",), f"expected a mapping {{cpu: 1, gpu: 0.5}}, got {raw!r}")
    for key in raw:
        if key not in ("cpu", "gpu"):
            raise where.error(("resources", key), "is not a resource; expected cpu, gpu")
    cpu, gpu = raw.get("cpu", Resources.cpu), raw.get("gpu", Resources.gpu)
    if not _is_number(cpu) or cpu <= 0:
        raise where.error(("resources", "cpu"), f"expected a number > 0 (fractions allowed), got {cpu!r}")
    if not _is_number(gpu) or gpu < 0:
        raise where.error(("resources", "gpu"), f"expected a number >= 0 (fractions allowed), got {gpu!r}")
    if gpu > 1 and not float(gpu).is_integer():
        raise where.error(("resources", "gpu"), "expected a fraction below 1 or a whole number (Ray's rule), "
                          f"got {gpu!r}")
    device = str(base.get("device", "auto"))
    if device.startswith("cuda") and gpu == 0:
        raise where.error(("resources", "gpu") if "gpu" in raw else ("base", "device"),
                          f"base.device is {device!r} but resources.gpu is 0; expected gpu > 0 (or device auto/cpu)",
                          show_key=False)
    return Resources(cpu=float(cpu), gpu=float(gpu))


def _read_scheduler(data: dict[str, Any], where: "_Where") -> Scheduler | None:
    raw = data.get("scheduler")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise where.error(("scheduler",), "expected null or a mapping {type: asha, grace_period: 1, ...}, "
                          f"got {raw!r}")
    known = ("type", "grace_period", "reduction_factor", "max_t")
    for key in raw:
        if key not in known:
            raise where.error(("scheduler", key), f"is not a scheduler key; expected {', '.join(known)}")
    if raw.get("type", "asha") != "asha":
        raise where.error(("scheduler", "type"), f"expected asha, got {raw.get('type')!r}")
    scheduler = Scheduler()
    for key, minimum in (("grace_period", 1), ("reduction_factor", 2)):
        value = raw.get(key, getattr(scheduler, key))
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise where.error(("scheduler", key), f"expected an integer >= {minimum}, got {value!r}")
        setattr(scheduler, key, value)
    max_t = raw.get("max_t")
    if max_t is not None and (not isinstance(max_t, int) or isinstance(max_t, bool) or max_t < scheduler.grace_period):
        raise where.error(("scheduler", "max_t"), f"expected null or an integer >= grace_period "
                          f"({scheduler.grace_period}), got {max_t!r}")
    scheduler.max_t = max_t
    return scheduler


def _read_storage(data: dict[str, Any], where: "_Where") -> str | None:
    url = data.get("storage")
    if url is None:
        return None
    expected = "an Optuna storage URL such as sqlite:///results/study/optuna.db or postgresql://user@host/db"
    if not isinstance(url, str) or not url.strip():
        raise where.error(("storage",), f"expected {expected}, got {url!r}")
    from sqlalchemy.engine import make_url  # imported here: only studies with a storage pay for it
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise where.error(("storage",), f"expected {expected}, got {url!r}") from None
    backend = parsed.get_backend_name()
    if backend not in STORAGE_BACKENDS:
        hint = " (write postgresql://, not postgres://)" if backend == "postgres" else ""
        raise where.error(("storage",), f"expected a {', '.join(STORAGE_BACKENDS)} URL, got scheme {backend!r}{hint}")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise where.error(("storage",), "expected a SQLite file, e.g. sqlite:///results/study/optuna.db; an "
                          "in-memory database cannot be shared with the dashboard or resumed")
    if backend != "sqlite" and (not parsed.database or not (parsed.host or parsed.query.get("host"))):
        raise where.error(("storage",), f"expected a host and a database name, e.g. {backend}://user@host/optuna, "
                          f"got {url!r}")
    return url


def _read_constraints(data: dict[str, Any], where: "_Where") -> list[str]:
    raw = data.get("constraints")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise where.error(("constraints",), f"expected a list of expressions like 'queue.initial_size <= "
                          f"queue.size', got {raw!r}")
    for index, text in enumerate(raw):
        path = ("constraints", index)
        if not isinstance(text, str):
            raise where.error(path, "expected an expression string like 'queue.initial_size <= queue.size', "
                              f"got {text!r}")
        tree = _check_expression(text, path, where)
        if isinstance(tree, ast.BinOp) or (isinstance(tree, ast.Constant) and not isinstance(tree.value, bool)):
            raise where.error(path, f"'{text}' is not a condition; expected a comparison such as 'queue.size >= 256'")
    return list(raw)


# ==== safe expressions ==========================================================================
_BINARY_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_COMPARISONS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_NODE_WORDS = {
    ast.Call: "function calls", ast.Subscript: "indexing", ast.Lambda: "lambdas", ast.IfExp: "if/else",
    ast.List: "lists", ast.Tuple: "tuples", ast.Dict: "dicts", ast.Set: "sets", ast.Pow: "**",
    ast.ListComp: "comprehensions", ast.GeneratorExp: "generators", ast.NamedExpr: ":=",
    ast.Starred: "*", ast.JoinedStr: "f-strings",
}
_EXPRESSION_HELP = ("only numbers, strings, True/False/None, dotted trainer keys, + - * / // %, "
                    "comparisons and and/or/not are allowed")


def _check_expression(text: Any, path: tuple, where: "_Where") -> ast.expr:
    """Parse and vet an expression at load time, naming its line; returns the parsed tree."""
    if not isinstance(text, str):
        raise where.error(path, f"expected an expression string, got {text!r}")
    try:
        tree, names = _compile_expression(text)
    except ValueError as exc:
        raise where.error(path, f"'{text}': {exc}") from None
    for name in names:
        if name not in _known_keys():
            raise where.error(path, f"'{text}': '{name}' is not a trainer config key"
                              + _suggestion(name, _known_keys()))
    return tree


@functools.lru_cache(maxsize=256)
def _compile_expression(text: str) -> tuple[ast.expr, tuple[str, ...]]:
    """Parse `text` and refuse every construct outside the safe subset; returns (tree, dotted names)."""
    if len(text) > _MAX_EXPRESSION_CHARS:
        raise ValueError(f"longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        where = f"at column {exc.offset}" if exc.offset else "at the end"
        raise ValueError(f"{exc.msg} {where}; expected an expression like "
                         "'queue.initial_size <= queue.size'") from None
    names: list[str] = []
    _vet(tree, names)
    return tree, tuple(names)


def _vet(node: ast.AST, names: list[str]) -> None:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, type(None))):
            raise ValueError(f"the constant {node.value!r} is not allowed; {_EXPRESSION_HELP}")
        return
    if isinstance(node, (ast.Name, ast.Attribute)):
        names.append(_dotted_name(node))
        return
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _vet(value, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        _vet(node.operand, names)
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPERATORS:
        _vet(node.left, names)
        _vet(node.right, names)
        return
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
        _vet(node.left, names)
        for comparator in node.comparators:
            _vet(comparator, names)
        return
    what = _NODE_WORDS.get(type(getattr(node, "op", node)), type(node).__name__)
    raise ValueError(f"{what} ('{ast.unparse(node)[:60]}') not allowed; {_EXPRESSION_HELP}")


def _dotted_name(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise ValueError(f"'{ast.unparse(node)[:60]}' is not a dotted trainer key; {_EXPRESSION_HELP}")
    parts.append(node.id)
    name = ".".join(reversed(parts))
    if any(part.startswith("_") for part in parts):
        raise ValueError(f"names starting with '_' ('{name}') are not allowed; {_EXPRESSION_HELP}")
    return name


def _evaluate(node: ast.AST, lookup: Callable[[str], Any]) -> Any:
    """Evaluate a vetted tree; ValueError on a run-time problem (types, division by zero)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Name, ast.Attribute)):
        return lookup(_dotted_name(node))
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        result: Any = is_and
        for value in node.values:
            result = _evaluate(value, lookup)
            if bool(result) != is_and:  # short-circuit exactly like Python
                return result
        return result
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, lookup)
        if isinstance(node.op, ast.Not):
            return not operand
        operand = _number(operand)
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _number(_evaluate(node.left, lookup)), _number(_evaluate(node.right, lookup))
        try:
            return _BINARY_OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError(f"division by zero in '{ast.unparse(node)}'") from None
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, lookup)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, lookup)
            try:
                if not _COMPARISONS[type(op)](left, right):
                    return False
            except TypeError:
                raise ValueError(f"cannot compare {left!r} with {right!r}") from None
            left = right
        return True
    raise ValueError(f"'{ast.unparse(node)}' is not allowed")  # unreachable after _vet


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"arithmetic needs numbers, got {value!r}")
    return value


def _lookup(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node[part]
    return node


# ==== YAML with line numbers ====================================================================
class _DuplicateKey(Exception):
    def __init__(self, path: tuple, first_line: int, line: int):
        super().__init__(path)
        self.path, self.first_line, self.line = path, first_line, line


class _StudyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML would keep the last one silently).

    `mapping_paths` (filled before construction) names each mapping node's key path for the error.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self.mapping_paths: dict[int, tuple] = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` may legitimately be overridden by the keys beside it
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            line = key_node.start_mark.line + 1
            if key in first_lines:
                raise _DuplicateKey(self.mapping_paths.get(id(node), ()) + (key,), first_lines[key], line)
            first_lines[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads 5e-9 (no dot) as a string; studies are full of such epsilons, so read them as floats.
_StudyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _read_study_text(path: Path) -> str:
    if not path.is_file():
        raise UserError(f"{path}: no such study file; expected the path of a study YAML file (see studies/)")
    if path.stat().st_size > _MAX_FILE_BYTES:
        raise UserError(f"{path}:1: the study file is over {_MAX_FILE_BYTES} bytes; expected a short YAML file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}:1: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a YAML file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the study file ({exc.strerror})") from None


def _parse_yaml(text: str, file: str) -> tuple[Any, dict[tuple, int]]:
    """Safe-load one YAML document and map every key path to its 1-based line."""
    loader = _StudyLoader(text)
    lines: dict[tuple, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return None, lines
        mapping_paths: dict[int, tuple] = {}
        _record_lines(node, (), lines, mapping_paths, set())
        loader.mapping_paths = mapping_paths
        return loader.construct_document(node), lines
    except _DuplicateKey as dup:
        key = _format_path(dup.path)
        raise UserError(f"{file}:{dup.line}: key '{key}' is written twice (first on line {dup.first_line}); "
                        "expected each key once") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        what = exc.problem or exc.context or "unreadable"
        if exc.context and exc.problem and exc.context_mark:
            what += f" ({exc.context} started on line {exc.context_mark.line + 1})"
        raise UserError(_one_line(f"{file}:{line}: not valid YAML: {what}")) from None
    except yaml.YAMLError as exc:
        raise UserError(_one_line(f"{file}:1: not valid YAML: {exc}")) from None
    except RecursionError:
        raise UserError(f"{file}:1: not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _record_lines(node: yaml.Node, path: tuple, lines: dict[tuple, int], mapping_paths: dict[int, tuple],
                  on_path: set[int]) -> None:
    if id(node) in on_path:
        raise yaml.YAMLError(f"the alias at line {node.start_mark.line + 1} refers to itself")
    if id(node) in mapping_paths or not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        return  # scalars have nothing inside; an aliased collection is recorded once (no blow-up)
    mapping_paths[id(node)] = path
    on_path.add(id(node))
    if isinstance(node, yaml.MappingNode):
        children = [((key.value if isinstance(key, yaml.ScalarNode) else "?"), key, value) for key, value in node.value]
    else:
        children = [(index, item, item) for index, item in enumerate(node.value)]
    for name, mark_node, child in children:
        lines.setdefault(path + (name,), mark_node.start_mark.line + 1)
        _record_lines(child, path + (name,), lines, mapping_paths, on_path)
    on_path.discard(id(node))


class _Where:
    """Turns a key path into a one-line 'FILE:LINE: key 'a.b': message' error."""

    def __init__(self, file: str, lines: dict[tuple, int]):
        self.file, self.lines = file, lines

    def line(self, path: tuple) -> int:
        for end in range(len(path), 0, -1):  # a key that is not written: its section's line
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1

    def error(self, path: tuple, message: str, show_key: bool = True) -> UserError:
        prefix = f"{self.file}:{self.line(path)}: "
        if show_key and path:
            # "key 'x' is unknown ..." reads as a sentence; everything else follows a colon
            prefix += f"key '{_format_path(path)}'" + (" " if message.startswith("is ") else ": ")
        return UserError(_one_line(prefix + message))


def _where_of(spec: StudySpec) -> _Where:
    return getattr(spec, "_where", None) or _Where(spec.path or f"study '{spec.name}'", {})


# ==== dry run ===================================================================================
def _dry_run_text(spec: StudySpec) -> str:
    out: list[str] = []

    def line(label: str, text: str) -> None:
        out.append(f"{label + ':':<11}{text}")

    line("study", spec.name + (f"  ({spec.path})" if spec.path else ""))
    if spec.description:
        line("about", _one_line(spec.description))
    swept = " x ".join(spec.parameters) or "no parameters"
    line("method", f"{spec.method} over {swept}; {_plural(len(spec.seeds), 'seed')} {spec.seeds}; "
                   f"metric {spec.metric.name} ({spec.metric.goal})")
    scheduler = "none (every trial runs to the end)"
    if spec.scheduler:
        scheduler = (f"{spec.scheduler.type} (grace {spec.scheduler.grace_period}, reduction "
                     f"{spec.scheduler.reduction_factor}, max_t {spec.scheduler.max_t or 'all evaluations'})")
    line("resources", f"{_format_value(spec.resources.cpu)} cpu, {_format_value(spec.resources.gpu)} gpu per trial; "
                      f"scheduler {scheduler}")
    line("storage", spec.storage_url)
    line("results", f"{spec.study_dir}/")
    if spec.method == "tpe":
        line("trials", f"up to {spec.budget} per seed x {_plural(len(spec.seeds), 'seed')} = "
                       f"{spec.budget * len(spec.seeds)}, chosen by TPE during the run")
        line("space", "")
        for key, values in spec.parameters.items():
            out.append(f"  {key}: {_describe_parameter(values)}")
        return "\n".join(out)

    expansion = _expand(spec)
    trials = expansion.trials
    unit = "combination" if spec.method == "grid" else "sample"
    line("trials", f"{len(trials)} ({_plural(expansion.configurations, 'configuration')} x "
                   f"{_plural(len(spec.seeds), 'seed')}; {_plural(expansion.dropped, unit)} dropped by "
                   f"constraints, {_plural(expansion.duplicates, 'duplicate')} collapsed)"
                   + (f"; only {expansion.configurations} distinct configurations for budget {spec.budget}"
                      if spec.method == "random" and expansion.configurations < (spec.budget or 0) else ""))
    mtds = [t.mtd for t in trials if t.mtd is not None]
    if mtds:
        line("MTD", f"{min(mtds):.2f} to {max(mtds):.2f} ({len(mtds)} of {len(trials)} trials)")
    else:
        line("MTD", "- (no MoCoSE trials)")
    states = read_trial_states(spec)
    if states is not None:
        counts: dict[str, int] = {}
        for trial in trials:
            state = states.get(trial.key, "not run")
            counts[state] = counts.get(state, 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        line("status", f"{summary} (from {spec.study_dir}: trial folders and the Optuna study)")
    out.append("")
    out.append(format_trial_table(spec, trials, states))
    return "\n".join(out)


def _describe_parameter(values: Any) -> str:
    if isinstance(values, list):
        return ", ".join(f"{{expr: {v['expr']}}}" if _is_expr(v) else _format_value(v) for v in values)
    kind = values["distribution"]
    if kind == "categorical":
        return "categorical " + ", ".join(_format_value(v) for v in values["choices"])
    step = f" step {values['step']}" if values.get("step") else ""
    return f"{kind} [{_format_value(values['low'])}, {_format_value(values['high'])}]{step}"


# ==== small helpers =============================================================================
@functools.lru_cache(maxsize=1)
def _known_keys() -> tuple[str, ...]:
    return tuple(field_names())


@functools.lru_cache(maxsize=1)
def _default_config() -> dict[str, Any]:
    """RunConfig's defaults as a dict; never modified (`_overlay` copies it)."""
    return RunConfig().to_dict()


def _is_expr(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == ["expr"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numeric_kind(hint: Any) -> str | None:
    """'int' or 'float' for number-typed keys (optional or not), None for the rest."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    if hint is bool or get_origin(hint) is Literal:
        return None
    return {int: "int", float: "float"}.get(hint)


def _overlay(defaults: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """`defaults` with `values` written over it, section by section (a null section keeps defaults)."""
    out = copy.deepcopy(defaults)
    for key, value in values.items():
        if isinstance(out.get(key), dict):
            if isinstance(value, dict):
                out[key] = _overlay(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _pop_dotted(data: dict[str, Any], dotted: str) -> None:
    *sections, last = dotted.split(".")
    node: Any = data
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


_MISSING = object()  # dotted_get's default when "absent" must differ from a stored None


def dotted_get(data: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """data["a"]["b"] for "a.b"; `default` when a part is missing or its parent is not a mapping."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _split_trainer_message(message: str) -> tuple[str | None, str]:
    """Trainer errors read "config key 'a.b': expected ..."; return ('a.b', ": expected ...")."""
    match = re.match(r"^config key '([^']*)'(.*)$", message, re.S)
    if not match:
        return None, ": " + message
    return match.group(1), match.group(2)


def _optuna_choice(value: Any) -> Any:
    """Optuna's categorical choices must be scalars; lists (queue slices) become 'a+b'."""
    return "+".join(map(str, value)) if isinstance(value, list) else value


def _format_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "+".join(_format_value(v) for v in value)
    if _is_expr(value):
        return f"{{expr: {value['expr']}}}"
    return str(value)


def _format_path(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _suggestion(word: Any, choices: Any) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _type_name(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(
        type(value), type(value).__name__)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
