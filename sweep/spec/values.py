"""Checking a study's `base` and `parameters` against the trainer config (trainer/config.py).

Each swept value is checked alone (its type, by the config's pydantic model) and with the base (the
config's checks across keys); a complaint about another swept key is left to the combinations.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from sweep.spec.expressions import check_expression
from sweep.spec.key_lines import KeyLines
from sweep.text import (
    format_value_excerpt,
    is_expr,
    overlay,
    suggestion,
    type_name,
)
from trainer import config as run_config  # run_config.RunConfig read at call time (tests swap it)
from trainer.config import (
    check_value,
    field_names,
    method_of_key,
    number_kind,
    own_section,
    scoped,
    section_model,
    set_dotted,
)
from trainer.errors import ConfigError, excerpt
from trainer.files import MISSING, dotted_get, dotted_pop, flatten

if TYPE_CHECKING:  # annotations only
    from sweep.spec.search import SearchMethod

DISTRIBUTION_KEYS = {
    "uniform": ("low", "high", "step"),
    "loguniform": ("low", "high"),
    "int": ("low", "high", "step"),
    "categorical": ("choices",),
}
# Keys the study sets per trial; a value in `base` or `parameters` would be silently overridden.
PER_TRIAL_KEYS = {
    "seed": "list the seeds at the top level (seeds: [42, 43])",
    "output_dir": "the runner sets it per trial (results/<study>/trials/<key>/)",
}
# Trainer checks that compare two keys: (key it complains about) -> the other keys it depends on.
_DEPENDS_ON = {
    "queue.initial_size": ("queue.initial_size", "queue.size"),
    "queue.slices": ("queue.slices", "queue.size"),
    "data.max_sentences": ("data.max_sentences", "batch_size"),
}


def default_config() -> dict[str, Any]:
    """RunConfig's defaults as a dict; never modified (`overlay` copies it)."""
    return _defaults_of(run_config.RunConfig)


@functools.lru_cache(maxsize=4)
def _defaults_of(config_class: type) -> dict[str, Any]:
    return config_class().to_dict()


def flat_default_config() -> dict[str, Any]:
    """default_config() by dotted key (trainer.files.flatten); never modified."""
    return _flat_defaults_of(run_config.RunConfig)


@functools.lru_cache(maxsize=4)
def _flat_defaults_of(config_class: type) -> dict[str, Any]:
    return flatten(_defaults_of(config_class))


def valid_sections(config: dict[str, Any]) -> dict[str, BaseModel]:
    """The RunConfig sections of a config dict that are valid alone, validated (name -> section): what
    RunConfig.from_dict(..., validated=...) takes as they are for any config dict holding those same sections."""
    out = {}
    for name, value in config.items():
        model = section_model(name) if name in run_config.RunConfig.model_fields else None
        if model is not None and isinstance(value, dict):
            try:
                out[name] = model.model_validate(value)
            except ValidationError:
                continue
    return out


def queue_overfull(config: dict[str, Any]) -> bool:
    """The built-in constraint: K0 > K cannot be run (Table 7's grid crosses K0 with K)."""
    queue = config["queue"]
    size, initial = queue.get("size"), queue.get("initial_size")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (size, initial))
    return numbers and size >= 0 and initial > size


def _check_expression(text: Any, path: tuple, where: KeyLines) -> Any:
    try:
        return check_expression(text)
    except ValueError as exc:
        raise where.error(path, str(exc)) from None


def check_base(base: Any, swept: set[str], where: KeyLines) -> dict[str, Any]:
    """The study's base trainer config, checked with the swept keys taken out (every trial sets them)."""
    if not isinstance(base, dict):
        raise where.error(("base",), f"expected a mapping of trainer config keys, got {type_name(base)}")
    if base.get("model") in (None, ""):
        state = "is empty" if "model" in base else "is missing"
        raise where.error(("base", "model"), f"{state}; expected an HF model id (bert-base-uncased), "
                          "a local path, or 'embedded' (the study must say what it trains)")
    for key, why in PER_TRIAL_KEYS.items():
        if key in base:
            raise where.error(("base", key), f"is set per trial: {why}")
    checked = copy.deepcopy(base)
    for key in swept:
        value = dotted_get(base, key, MISSING) if key in field_names() else MISSING
        if value is not MISSING:  # never runs (every trial sets it), yet it must be a value of the key
            try:
                check_value(key, value)
            except ConfigError as exc:
                raise where.error(("base", *key.split(".")), exc.detail.lstrip(": ").strip()) from None
        dotted_pop(checked, key)  # every trial sets it, so the base's value never runs
    if "method" in swept:  # a method's own section is read by its trials only: checked with that method
        for name in set(checked) - set(scoped(checked)):
            try:
                run_config.RunConfig.from_dict({"method": name, name: checked[name]})
            except ConfigError as exc:
                raise where.error(("base", *exc.key.split(".")), exc.detail.lstrip(": ").strip()) from None
        checked = scoped(checked)
    try:
        run_config.RunConfig.from_dict(checked)
    except ConfigError as exc:
        if any(other in swept for other in _DEPENDS_ON.get(exc.key, ())):
            return base  # e.g. K0 against a swept K: judged per combination while expanding
        raise where.error(("base", *exc.key.split(".")), exc.detail.lstrip(": ").strip()) from None
    return base


def check_parameters(raw: Any, search: SearchMethod, base: dict[str, Any], where: KeyLines) -> dict[str, Any]:
    """The swept keys: each value list or distribution checked against the trainer config and the base, and
    against what the study's search method plans (`search`: sweep.spec.search)."""
    base_config = overlay(default_config(), base)
    context = _ValueContext(base_config, set(raw) if isinstance(raw, dict) else set(), valid_sections(base_config))
    if not isinstance(raw, dict):
        raise where.error(("parameters",), "expected a mapping of dotted trainer keys to value lists or "
                          f"distributions, got {type_name(raw)}")
    parameters: dict[str, Any] = {}
    for key, spec_value in raw.items():
        path = ("parameters", key)
        if isinstance(key, str) and any(known.startswith(key + ".") for known in field_names()):
            raise where.error(path, f"is a config section; expected dotted keys such as '{key}."
                              f"{next(k for k in field_names() if k.startswith(key + '.')).split('.', 1)[1]}'")
        if not isinstance(key, str) or key not in field_names():
            raise where.error(path, "is not a trainer config key" + suggestion(str(key), field_names()))
        if key in PER_TRIAL_KEYS:
            raise where.error(path, f"is set per trial: {PER_TRIAL_KEYS[key]}")
        if isinstance(spec_value, list):
            parameters[key] = _read_value_list(key, spec_value, search, context, where)
        elif is_expr(spec_value):
            _check_expression(spec_value["expr"], path, where)
            parameters[key] = [spec_value]  # a derived value: one "choice", computed per trial
        elif isinstance(spec_value, dict) and "distribution" in spec_value:
            search.check_distribution(path, where)
            parameters[key] = _read_distribution(key, spec_value, context, where)
        else:
            raise where.error(path, "expected a list of values (grid), a distribution mapping "
                              "{distribution: ..., low: ..., high: ...} or {expr: ...}, got "
                              f"{excerpt(spec_value)}; a fixed value belongs in base")
    return parameters


def _read_value_list(
    key: str, values: list[Any], search: SearchMethod, context: _ValueContext, where: KeyLines,
) -> list[Any]:
    if not values:
        raise where.error(("parameters", key), "expected a non-empty list of values")
    out: list[Any] = []
    seen: list[Any] = []  # values that cannot be hashed (queue slices); the others are looked up in a set
    seen_hashable: set[Any] = set()
    for index, value in enumerate(values):
        path = ("parameters", key, index)
        if is_expr(value):
            search.check_listed_expr(values, path, where)
            _check_expression(value["expr"], path, where)
            out.append(value)
            continue
        if isinstance(value, dict):
            raise where.error(path, f"expected a plain value or {{expr: ...}}, got {excerpt(value)}")
        value = _check_value(key, value, context, path, where)
        try:
            repeated = value in seen_hashable  # a set: a list scan made 10,000 values 50 million comparisons
            seen_hashable.add(value)
        except TypeError:
            repeated = value in seen
            seen.append(value)
        if repeated:
            raise where.error(path, f"value {format_value_excerpt(value)} is listed twice")
        out.append(value)
    return out


def _read_distribution(
    key: str, spec_value: dict[str, Any], context: _ValueContext, where: KeyLines,
) -> dict[str, Any]:
    path = ("parameters", key)
    kind = spec_value["distribution"]
    if kind not in DISTRIBUTION_KEYS:
        raise where.error(path + ("distribution",), f"expected one of {', '.join(DISTRIBUTION_KEYS)}, "
                          f"got {excerpt(kind)}" + suggestion(kind, DISTRIBUTION_KEYS))
    allowed = DISTRIBUTION_KEYS[kind]
    for name in spec_value:
        if name != "distribution" and name not in allowed:
            raise where.error(path + (name,), f"is not a key of a {kind} distribution; expected {', '.join(allowed)}")
    numeric = number_kind(key)
    if kind == "categorical":
        choices = spec_value.get("choices")
        if not isinstance(choices, list) or not choices:
            raise where.error(path + ("choices",), f"expected a non-empty list of choices, got {excerpt(choices)}")
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


def _read_number(value: Any, number_type: type, path: tuple, where: KeyLines) -> int | float:
    if number_type is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise where.error(path, f"expected an integer, got {excerpt(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise where.error(path, f"expected a number, got {excerpt(value)}")


@dataclass
class _ValueContext:
    """What a single swept value is checked against: the base (over defaults) and the swept keys."""

    base_config: dict[str, Any]
    swept: set[str]
    sections: dict[str, BaseModel]  # base_config's sections valid alone, validated (trainer.config.valid_sections)


def _copy_along(config: dict[str, Any], key: str) -> dict[str, Any]:
    """`config` with fresh dicts along the dotted `key` (set_dotted writes there); other sections shared."""
    out = dict(config)
    node = out
    for part in key.split(".")[:-1]:
        if not isinstance(node.get(part), dict):
            break  # set_dotted raises its ConfigError for this key
        node[part] = dict(node[part])
        node = node[part]
    return out


def _check_value(key: str, value: Any, context: _ValueContext, path: tuple, where: KeyLines) -> Any:
    """Coerce one swept value to its trainer type and check it with the base (K0 <= K aside).

    A complaint about another swept key is left to the combinations, which name both values.
    """
    try:
        value = check_value(key, value)
    except ConfigError as exc:
        raise where.error(path, exc.detail.lstrip(": ")) from None
    # Fresh dicts only where this function writes (a full copy per value cost seconds over 10,000 values).
    config = _copy_along(context.base_config, key)
    owner = method_of_key(key)
    if owner is not None:  # a method's own key: checked in a config of that method, as its trials read it
        config = scoped({**config, "method": owner, owner: own_section(config, owner)})
    set_dotted(config, key, value)
    if queue_overfull(config):  # the pair is judged per combination, never here
        config["queue"] = {**config["queue"], "initial_size": config["queue"]["size"]}
    # the sections this value leaves as the base has them are validated once (from_dict's `validated`)
    unchanged = {name: section for name, section in context.sections.items()
                 if config.get(name) is context.base_config[name]}
    try:
        run_config.RunConfig.from_dict(config, validated=unchanged)
    except ConfigError as exc:
        if exc.key == key:
            raise where.error(path, f"value {format_value_excerpt(value)}{exc.detail}") from None
        if exc.key in context.swept:
            return value
        raise where.error(path, f"value {format_value_excerpt(value)} does not fit the base: {exc}") from None
    return value

