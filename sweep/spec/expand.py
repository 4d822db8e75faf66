"""Expansion: a StudySpec -> its Trials (grid, random), one Trial from sampled values (tpe); their keys: keys.py.

Order: seeds outermost, then the candidates of the study's search method (sweep.spec.search: a grid's cartesian
product of the parameters in the order written, last key fastest; random's draws). Combinations that resolve to
the same trainer config are collapsed to the first.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel

from sweep.spec import expansion_file
from sweep.spec.expressions import compile_expression, evaluate
from sweep.spec.key_lines import KeyLines
from sweep.spec.keys import FORMER_DEFAULTS, key_of_requested, requested_fields
from sweep.spec.schema import StudySpec, Trial
from sweep.spec.search import optuna_choice
from sweep.spec.values import default_config, queue_overfull, valid_sections
from sweep.text import (
    copy_plain,
    format_value_excerpt,
    is_expr,
    overlay,
    shorten,
)
from trainer import config as run_config
from trainer.config import check_value, method_of_key, own_section, scoped, set_dotted
from trainer.errors import ConfigError, UserError, excerpt
from trainer.files import MISSING, dotted_get
from trainer.method_rules import resolve, resolved_dict
from trainer.mtd import planned_traceable_distance

_RANDOM_ATTEMPTS_PER_CONFIG = 20  # random search gives up when constraints reject nearly every sample
_EXPANSIONS: dict[str, Expansion] = {}  # the spec's content -> its expansion


def expand(spec: StudySpec) -> list[Trial]:
    """The study's trials in a deterministic order (see the module doc); [] for tpe."""
    # Callers may edit their trials; the cache stays intact.
    return [dataclasses.replace(t, params=copy_plain(t.params), config=copy_plain(t.config),
                                requested=copy_plain(t.requested)) for t in expansion(spec).trials]


def ask_in_space(study: Any, spec: StudySpec, distributions: dict[str, Any]) -> Any:
    """`study.ask` over `distributions` (search_space), a key of a method's own section drawn only where the trial's
    method (drawn first, else the base's) reads it: a SimCSE trial of a tpe study holds no `dcl.sigma`. A study
    without such a key asks as before, in one call."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if not any(method_of_key(name) for name in distributions):
        return study.ask(distributions)
    live = study.ask()
    method = spec.base.get("method") or default_config()["method"]
    for name in sorted(distributions, key=lambda key: key != "method"):
        if method_of_key(name) not in (None, method):
            continue
        dist = distributions[name]
        if isinstance(dist, CategoricalDistribution):
            value = live.suggest_categorical(name, dist.choices)
        else:
            suggest = live.suggest_int if isinstance(dist, IntDistribution) else live.suggest_float
            value = suggest(name, dist.low, dist.high, step=dist.step, log=dist.log)
        method = value if name == "method" else method
    return live


def trial_from_params(spec: StudySpec, params: dict[str, Any], seed: int) -> Trial | None:
    """The Trial for values a sampler chose (keys of `search_space`); None when a constraint drops it."""
    raw: dict[str, Any] = {}
    for key, values in spec.parameters.items():
        if isinstance(values, list) and all(is_expr(v) for v in values):
            raw[key] = values[0]
            continue
        if key not in params and method_of_key(key) is not None:
            continue  # another method's own key: not drawn for this trial (ask_in_space)
        if key not in params:
            raise UserError(f"study '{spec.name}': no value for parameter '{key}'")
        choices = values if isinstance(values, list) else values.get("choices", [])
        decoded = {optuna_choice(c): c for c in choices if not is_expr(c)}
        value = params[key]
        raw[key] = decoded.get(value, value) if isinstance(value, str) else value
    return _make_trial(spec, raw, seed, spec.where())


@dataclass
class Expansion:
    trials: list[Trial]
    configurations: int  # distinct configurations (before crossing with seeds)
    dropped: int  # combinations (grid) or samples (random) dropped by the constraints
    duplicates: int  # combinations that resolved to a config already present


def expansion(spec: StudySpec) -> Expansion:
    # Building a trainer config costs milliseconds, so expansions are kept (by the spec's content) and
    # reused: load_study validates with one, the dry run prints it, the runner plans with it. A study that ran
    # before keeps its expansion in its results folder (keep_expansion), read back when nothing it depends on
    # changed (sweep.spec.expansion_file).
    fingerprint = _content(spec)
    if fingerprint not in _EXPANSIONS:
        if len(_EXPANSIONS) >= 16:
            _EXPANSIONS.clear()
        stored = expansion_file.read(spec, expansion_file.digest(fingerprint)) if spec.search.expands else None
        _EXPANSIONS[fingerprint] = Expansion(*stored) if stored is not None else _expand_uncached(spec)
    return _EXPANSIONS[fingerprint]


def keep_expansion(spec: StudySpec) -> None:
    """Keep a grid or random study's expansion in its results folder (which must exist) for its next load."""
    if spec.search.expands:
        built = expansion(spec)
        expansion_file.write(spec, expansion_file.digest(_content(spec)), built.trials, built.configurations,
                             built.dropped, built.duplicates)


def _content(spec: StudySpec) -> str:
    """What an expansion is of: the study's content and the trainer's defaults."""
    return json.dumps([spec.to_dict(), default_config()], sort_keys=True, default=str)


def _expand_uncached(spec: StudySpec) -> Expansion:
    where = spec.where()
    if not spec.search.expands:
        return Expansion([], 0, 0, 0)  # tpe: its trials are asked during the run
    candidates = spec.search.candidates(spec.parameters, spec.name)
    limit = spec.search.configurations(spec.budget)
    base = _Base.of(spec)
    first_seed_trials, dropped, duplicates = _distinct_configurations(spec, candidates, limit, where, base)
    seed_matters = _mentions_seed(spec)
    trials, seen = [], set()
    for seed in spec.seeds:
        for raw, first, first_fingerprint in first_seed_trials:
            if seed == spec.seeds[0]:
                trial: Trial | None = first
            elif seed_matters:
                trial = _make_trial(spec, raw, seed, where, base)
            else:
                trial = _with_seed(first, seed)  # the seed changes nothing else in the config
            fingerprint = (first_fingerprint if trial is first else None if trial is None
                           else _fingerprint(trial))
            if fingerprint is not None and fingerprint not in seen:
                seen.add(fingerprint)
                trials.append(trial)
    _check_keys_unique(spec, trials)
    return Expansion(trials, len(first_seed_trials), dropped, duplicates)


def _check_keys_unique(spec: StudySpec, trials: list[Trial]) -> None:
    """Two different trials never share a key (a trial folder): only a FORMER_DEFAULTS field, null in one and
    written out in the other, can make them; the study is refused on that key's line."""
    by_key: dict[str, Trial] = {}
    for trial in trials:
        other = by_key.setdefault(trial.key, trial)
        if other is not trial:
            field = next(k for k in FORMER_DEFAULTS if dotted_get(other.config, k) != dotted_get(trial.config, k))
            raise spec.where().error(("parameters", field) if field in spec.parameters else ("parameters",),
                                     f"two trials would share the key {trial.key}: {field} is null (the paper's "
                                     f"value for the model) in one and {FORMER_DEFAULTS[field]} in the other; "
                                     "write the value out in both")


def _first_point(values: Any) -> Any:
    if isinstance(values, list):
        return values[0]
    return values["choices"][0] if values["distribution"] == "categorical" else values["low"]


def _with_seed(trial: Trial, seed: int) -> Trial:
    config = copy_plain(trial.config)
    config["seed"] = seed
    return Trial(key=key_of_requested(trial.requested, seed), seed=seed, params=copy_plain(trial.params),
                 config=config, mtd=trial.mtd, requested=dict(trial.requested))


def _fingerprint(trial: Trial) -> str:
    """Combinations that resolve to the same trainer config (and seed) are one trial."""
    return json.dumps(trial.config, sort_keys=True)


def _mentions_seed(spec: StudySpec) -> bool:
    texts = list(spec.constraints) + [v["expr"] for values in spec.parameters.values()
                                      if isinstance(values, list) for v in values if is_expr(v)]
    return any("seed" in compile_expression(text)[1] for text in texts)


def _distinct_configurations(
    spec: StudySpec, candidates: Iterator[dict[str, Any]], limit: int | None, where: KeyLines, base: _Base,
) -> tuple[list[tuple[dict[str, Any], Trial, str]], int, int]:
    """(raw values, trial with the first seed, its _fingerprint) for each distinct kept candidate, up to `limit`."""
    kept: list[tuple[dict[str, Any], Trial, str]] = []
    seen: set[str] = set()
    # A repeated random draw (small categorical spaces) has a known fate; building it again is waste.
    fate_of_repeat: dict[str, str] = {}
    dropped = duplicates = 0
    max_attempts = None if limit is None else limit * _RANDOM_ATTEMPTS_PER_CONFIG
    for attempt, raw in enumerate(candidates, start=1):
        raw_text = json.dumps(raw, sort_keys=True, default=str)
        fate = fate_of_repeat.get(raw_text)
        if fate is None:
            trial = _make_trial(spec, raw, spec.seeds[0], where, base)
            fingerprint = None if trial is None else _fingerprint(trial)
            fate = "dropped" if trial is None else "duplicate" if fingerprint in seen else "kept"
            fate_of_repeat[raw_text] = "dropped" if fate == "dropped" else "duplicate"
            if fate == "kept":
                seen.add(fingerprint)
                kept.append((raw, trial, fingerprint))
        dropped += fate == "dropped"
        duplicates += fate == "duplicate"
        if limit is not None and (len(kept) >= limit or attempt >= max_attempts):
            break
    return kept, dropped, duplicates


@dataclass(frozen=True)
class _Base:
    """What every trial of a study starts from: its base over the defaults (never modified; a trial's config
    copies a section before it sets a key there) and those of its sections valid alone, validated."""

    config: dict[str, Any]
    sections: dict[str, BaseModel]

    @classmethod
    def of(cls, spec: StudySpec) -> _Base:
        config = overlay(default_config(), spec.base)
        return cls(config, valid_sections(config))

    def validated(self, config: dict[str, Any]) -> dict[str, BaseModel]:
        """The validated sections that `config` still holds unchanged (RunConfig.from_dict's `validated`)."""
        return {name: section for name, section in self.sections.items() if config.get(name) is self.config[name]}


def _make_trial(spec: StudySpec, raw: dict[str, Any], seed: int, where: KeyLines,
                base: _Base | None = None) -> Trial | None:
    """Base + plain values, then exprs, then the constraints; None when a constraint drops it. `base`: the
    study's _Base, when the caller builds many trials.

    A key of a method's own section (a plugin's `dcl.sigma`) belongs to that method's trials only: in a trial of
    another method it is neither set nor a parameter, so that trial's config, key, row and Optuna parameters are
    those of a study that never named it (its combinations collapse into one trial)."""
    base = base or _Base.of(spec)
    config = dict(base.config)  # its sections are base's until _set copies one
    method = config.get("method") if is_expr(raw.get("method")) else raw.get("method", config.get("method"))
    params: dict[str, Any] = {}
    for key, value in raw.items():
        if not is_expr(value) and _read_by(key, method, config):
            params[key] = copy_plain(value)  # a Trial must not share lists with the spec
            _set(config, key, params[key])
    config["seed"] = seed
    for key, value in raw.items():
        if is_expr(value) and _read_by(key, config["method"], config):
            params[key] = _evaluate_expr_value(key, value["expr"], config, where)
            _set(config, key, params[key])
    params = {key: params[key] for key in raw if key in params}  # written order, exprs in place
    config = scoped(config)
    if queue_overfull(config):
        return None
    try:
        asked = run_config.RunConfig.from_dict(config, validated=base.validated(config))
        requested = asked.to_dict()
        asked_fields = requested_fields(requested)  # before resolved_dict fills `requested` in place
        resolved, problem = resolved_dict(asked, requested), None
    except ConfigError as exc:
        resolved, problem = None, exc
    # Constraints see the method defaults (fgsm.eps, optim.weight_decay) when the combination is a
    # valid config, and may still drop one that is not before its error is raised.
    for index, text in enumerate(spec.constraints):
        if not _evaluate_constraint(index, text, resolved or config, where):
            return None
    if problem is not None:
        raise _combination_error(problem, params, spec, where)
    return Trial(key=key_of_requested(asked_fields, seed), seed=seed, params=params, config=resolved,
                 mtd=planned_traceable_distance(resolved), requested=asked_fields)


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    """set_dotted, after copying the dicts along the dotted `key` (they may be the study's _Base's)."""
    node = config
    for part in key.split(".")[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            break  # set_dotted raises its ConfigError for this key
        node[part] = node = dict(child)
    set_dotted(config, key, value)


def _read_by(key: str, method: Any, config: dict[str, Any]) -> bool:
    """Whether a trial of `method` reads `key`: every RunConfig key, and a method's own keys in its own trials
    (whose section `config` then holds, a fresh dict)."""
    owner = method_of_key(key)
    if owner is None:
        return True
    if owner != method:
        return False
    config[owner] = own_section(config, owner)
    return True


def _combination_error(exc: ConfigError, params: dict[str, Any], spec: StudySpec, where: KeyLines) -> UserError:
    config_key, rest = exc.key, exc.detail
    if config_key in spec.parameters:
        path: tuple = ("parameters", config_key)
    elif config_key and dotted_get(spec.base, config_key, MISSING) is not MISSING:
        path = ("base", *config_key.split("."))
    else:
        path = ("parameters",)
    combination = ", ".join(f"{shorten(k, 60)}={format_value_excerpt(v, 60)}" for k, v in list(params.items())[:12])
    combination = (combination + (", ..." if len(params) > 12 else "")) or "the base alone"
    shown = config_key or ".".join(str(p) for p in path)
    return where.error(path, f"in the combination {combination}: config key '{shown}'{rest}", show_key=False)


def _evaluate_expr_value(key: str, text: str, config: dict[str, Any], where: KeyLines) -> Any:
    try:
        value = evaluate(text, config)
    except ValueError as exc:
        raise where.error(("parameters", key), f"expr '{shorten(text, 80)}' failed: {exc}") from None
    try:
        return check_value(key, value)
    except ConfigError as exc:
        raise where.error(("parameters", key),
                          f"expr '{shorten(text, 80)}' gave {excerpt(value)}{exc.detail}") from None


def _evaluate_constraint(index: int, text: str, config: dict[str, Any], where: KeyLines) -> bool:
    try:
        result = evaluate(text, config)
    except ValueError as exc:
        raise where.error(("constraints", index), f"'{shorten(text, 80)}' failed: {exc}") from None
    if not isinstance(result, bool):
        raise where.error(("constraints", index),
                          f"'{shorten(text, 80)}' gave {excerpt(result)}; expected true or false")
    return result


def check_expansion(spec: StudySpec) -> None:
    """load_study's last check: a grid or random study keeps at least one combination; a tpe study's
    first point is a valid trial (TPE picks its points during the run, so check one now)."""
    spec.search.check_space(spec)
    if not spec.search.expands:
        planning_config(spec)
    elif not expansion(spec).trials:
        raise spec.where().error(("parameters",), f"every combination is dropped ({expansion(spec).dropped} by "
                                 "queue.initial_size > queue.size or the constraints); nothing would run")


def planning_config(spec: StudySpec) -> dict[str, Any]:
    """The resolved config a tpe study is planned with before its first ask (`sweep run` checks its models and
    data and reads the run's length from it): the trial of each parameter's first value, else (a constraint
    drops that one) the base alone. A UserError on the key's line when it is no valid config; load_study
    asks for it, so that the dry run refuses what the run would (a base `batch_size: [64]` under a swept
    batch_size never runs, but the run's plan read it)."""
    where = spec.where()
    trial = _make_trial(spec, {key: _first_point(values) for key, values in spec.parameters.items()},
                        spec.seeds[0], where)
    if trial is not None:
        return trial.config
    try:
        return resolve(run_config.RunConfig.from_dict(spec.base)).to_dict()
    except ConfigError as exc:
        raise _combination_error(exc, {}, spec, where) from None
