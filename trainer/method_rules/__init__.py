"""Every method's declaration: the registry of methods (built in and plugins, registered the same way), each
method's rules as data (the defaults it fills into the config keys left null, the combinations it refuses, the
precision it runs under `precision: auto`, its papers' settings per model), and `resolve`, the one step that
applies them to a run config.

    resolve(RunConfig(method="mocose"))   # a new config: weight decay 1e-6, eval every 100 steps, FGSM eps 5e-9,
                                          # Adam, and the paper's lr and batch size for the model
    method_rules("gs").defaults           # dotted config key -> default
    method_entry("dcl")                   # a registered method: label, config section, rules, readings, origin
    method_names()                        # ('simcse', 'mocose', 'gs', 'mix', ...), in the order registered

A method declares (`MethodDefinition`, the base of trainer.methods.Method): `name` (its config name, the value
of `method:`), `label` (tables and figures), `config` (its own config section, a pydantic model read at the
config key `name`, present in its own runs only), `rules` (a MethodRules), `reading_changes` (what the trainer
now computes differently for an older run of it) and, on its nn.Module side, its `loss`. `register_method`
takes the declaration; the four built-in methods are registered by it below, light declarations that name their
nn.Module class ("trainer.methods.simcse:SimCSE"); a plugin's Method subclass is its own (trainer.methods.plugins
imports plugin files and modules); installed packages register through the entry point group
`contrastive_sweep.methods`, loaded on the first look-up.

A default is a value, `ByFlag` (chosen by a `released.*` flag), `FromKey` (computed from another key) or
`PerModel` (the method's paper setting for the run's model); a tuple of keys is filled together, and only where
every one of them is null. A method's defaults are laid over SHARED_DEFAULTS. Every key a rule names is a dotted
RunConfig key (tests/trainer/test_method_rules.py checks the built-in ones against RunConfig's fields; a plugin's
are checked at its first resolve).

This module imports neither torch nor trainer.config nor trainer.methods: the sweep driver resolves thousands of
configs without torch, `RunConfig.resolved()` calls `resolve`, and the nn.Module side (trainer.methods) is found
by name.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from trainer.files import dotted_get, dotted_put
from trainer.method_rules.registry import (
    DISTANCE_METHODS,
    ENTRY_POINT_GROUP,
    MethodDefinition,
    MethodEntry,
    built_in_methods,
    check_rule_keys,
    definition_place,
    distance_methods,
    method_entry,
    method_label,
    method_names,
    method_rules,
    method_sections,
    model_settings,
    plugin_entries,
    register_method,
    registered,
    traces_distance,
)
from trainer.method_rules.rules import (
    FLAG_METHODS,
    GS_INFONCE_RULES,
    MIXCSE_RULES,
    MOCOSE_RULES,
    RELEASED_GAUSSIAN_COUNT,
    SHARED_DEFAULTS,
    SHARED_REFUSALS,
    SIMCSE_RULES,
    ByFlag,
    FromKey,
    Keys,
    MethodRules,
    ModelSettings,
    PerModel,
    Refusal,
    model_family,
    released_gs_dropout,
)


class Resolvable(Protocol):
    """What `resolve` needs of a run config (trainer.config.RunConfig); refusals read its attributes."""

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, validated: Any = None) -> Any: ...


Config = TypeVar("Config", bound=Resolvable)


# ---- the resolve step ----------------------------------------------------------------------------------
def resolve(config: Config) -> Config:
    """A new config with the null keys filled and the whole checked once: first each null `released.*` flag
    from `variant` (on under released), then the method's defaults; then the config's own validation and
    the method's refusals. Resolving a resolved config returns an equal one."""
    data = config.to_dict()
    rules = _fill(data)
    resolved = type(config).from_dict(data)
    rules.check(resolved)
    return resolved


def resolved_dict(config: Config, data: dict[str, Any]) -> dict[str, Any]:
    """`resolve(config).to_dict()`, given `data` = config.to_dict() (filled in place). The sections that no rule
    fills are taken from `config` as they are instead of validated again (config.from_dict's `validated`), so
    the resolved config is only dumped, never handed out: it shares them."""
    filled: set[str] = set()
    rules = _fill(data, filled)
    validated = {name: getattr(config, name) for name in data if isinstance(data[name], dict) and name not in filled}
    resolved = type(config).from_dict(data, validated=validated)
    rules.check(resolved)
    return resolved.to_dict()


def _fill(data: dict[str, Any], filled: set[str] | None = None) -> MethodRules:
    """Fill the null keys of a config dict (resolve's first steps) in place; the method's rules. `filled` gets the
    top-level names under which a value was written."""
    filled = set() if filled is None else filled
    released = data["released"]
    for flag, value in released.items():
        if value is None:
            released[flag] = data["variant"] == "released"
            filled.add("released")
    entry = method_entry(data["method"])
    rules = entry.rules
    check_rule_keys(entry, data)
    for keys, default in rules.all_defaults().items():
        names = keys if isinstance(keys, tuple) else (keys,)
        if all(dotted_get(data, name) is None for name in names):
            value = _value(default, data)
            for name, part in zip(names, value if isinstance(keys, tuple) else (value,)):
                dotted_put(data, name, part)
                filled.add(name.split(".", 1)[0])
    return rules



def _value(default: Any, data: dict[str, Any]) -> Any:
    if isinstance(default, PerModel):
        return getattr(model_settings(data["method"], str(data["model"])), default.field)
    if isinstance(default, ByFlag):
        default = default.released if dotted_get(data, default.flag) else default.paper
    if isinstance(default, FromKey):
        return default.compute(dotted_get(data, default.key))
    return default


__all__ = [
    "DISTANCE_METHODS", "ENTRY_POINT_GROUP", "FLAG_METHODS", "GS_INFONCE_RULES", "MIXCSE_RULES", "MOCOSE_RULES",
    "RELEASED_GAUSSIAN_COUNT", "SHARED_DEFAULTS", "SHARED_REFUSALS", "SIMCSE_RULES", "ByFlag", "FromKey", "Keys",
    "MethodDefinition", "MethodEntry", "MethodRules", "ModelSettings", "PerModel", "Refusal", "Resolvable",
    "built_in_methods", "check_rule_keys", "definition_place", "distance_methods", "method_entry", "method_label",
    "method_names", "method_rules", "method_sections", "model_family", "model_settings", "plugin_entries",
    "register_method", "registered", "released_gs_dropout", "resolve", "resolved_dict", "traces_distance",
]
