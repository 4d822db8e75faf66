"""The registry of methods: every method a run may name, the four built in and a researcher's own, registered the
same way (`register_method`) and looked up by name (`method_entry`, `method_names`, ...). Light: no torch, so the
sweep driver validates, resolves and plans configs of any method without it. What a method declares and how:
trainer.method_rules (the package's docstring).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import keyword
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

from pydantic import BaseModel

from trainer.errors import UserError, suggestion_text
from trainer.files import flatten
from trainer.method_rules.rules import (
    BERT_BASE,
    GS_INFONCE_RULES,
    MIXCSE_RULES,
    MOCOSE_RULES,
    SIMCSE_RULES,
    ByFlag,
    FromKey,
    MethodRules,
    ModelSettings,
    model_family,
)
from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, SIMCSE

ENTRY_POINT_GROUP = "contrastive_sweep.methods"
# the run config's own top-level keys and sections (trainer.config.RunConfig): a method's name is its section's
# key, so it may not be one of these; tests/trainer/methods/test_plugins.py checks the list against RunConfig
RESERVED_NAMES = frozenset({
    "model", "method", "variant", "pooler", "seed", "batch_size", "max_steps", "epochs", "temperature", "dropout",
    "device", "precision", "compile", "output_dir", "save_model", "collapse_threshold", "data", "optim", "ema",
    "queue", "fgsm", "heads", "gaussian", "mix", "augment", "eval", "released"})


class MethodDefinition:
    """What a method declares (the module docstring). A subclass of trainer.methods.Method is its own
    implementation; a light declaration (the built-in methods, so that the sweep driver imports no torch) names
    its Method class in `implementation`, "module:Class", imported when a run builds it."""

    name: ClassVar[str]
    label: ClassVar[str]
    config: ClassVar[type[BaseModel] | None] = None
    # no rules of its own: fp32, SimCSE's learning rate and batch size per model, no refusals
    rules: ClassVar[MethodRules] = MethodRules()
    implementation: ClassVar[str | None] = None

    @classmethod
    def reading_changes(cls, config: dict[str, Any], reading: int) -> list[str]:
        """What the trainer now computes differently for a run of this method made under trainer reading
        `reading` (trainer.readings), one short phrase each; [] when nothing changed."""
        return []


@dataclass(frozen=True)
class MethodEntry:
    """One registered method, as every part of the tool reads it."""

    name: str
    label: str
    section: type[BaseModel] | None  # its config section (at the config key `name`); None: it has none
    rules: MethodRules
    reading_changes: Callable[[dict[str, Any], int], list[str]]
    definition: type
    origin: str  # "built in", a plugin file's path, a module's name or an entry point
    source_file: str | None  # the file of its definition (a plugin's code, hashed in the provenance)

    def implementation(self) -> type:
        """The nn.Module class that runs it (trainer.methods.Method), imported on first use."""
        target = self.definition.__dict__.get("implementation")
        if target is None:
            return self.definition
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def traces_distance(self) -> bool:
        return self.rules.traces_distance


_REGISTRY: dict[str, MethodEntry] = {}
_ENTRY_POINTS_LOADED = False
_RULE_KEYS_CHECKED: set[str] = set()  # the plugins whose rule keys check_rule_keys has checked
_SECTIONS: dict[str, type[BaseModel]] | None = None  # method_sections(); None after a registration


def register_method(definition: type, origin: str = "built in") -> MethodEntry:
    """Register a method (the module docstring); a UserError naming the definition's file and line when a
    declaration is wrong. Registering the same definition again (a plugin file imported again) replaces it."""
    where = definition_place(definition)
    name = definition.__dict__.get("name", getattr(definition, "name", None))
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name != name.lower():
        raise UserError(f"{where}: method {definition.__name__} needs `name`, a lower-case identifier (the value "
                        f"of `method:` and the key of its config section), e.g. name = \"dcl\"; got {name!r}")
    if name in RESERVED_NAMES and origin != "built in":  # MixCSE's `mix` is its own RunConfig section
        raise UserError(f"{where}: method name {name!r} is a run config key already; choose another name")
    label = getattr(definition, "label", None)
    if not isinstance(label, str) or not label.strip():
        raise UserError(f"{where}: method {name!r} needs `label`, the name its tables and figures show, e.g. "
                        "label = \"DCL\"")
    known = _REGISTRY.get(name)
    if (known is not None and known.definition is not definition and known.origin != origin
            and not _same_source(known.source_file, _source_file(definition))):
        raise UserError(f"{where}: method name {name!r} is taken by {known.origin}; choose another name")
    section = definition.__dict__.get("config") if "config" in definition.__dict__ else None
    section = _checked_section(section, name, where)
    rules = getattr(definition, "rules", None)
    if not isinstance(rules, MethodRules):
        raise UserError(f"{where}: method {name!r}: `rules` must be a trainer.method_rules.MethodRules, got "
                        f"{type(rules).__name__}")
    if definition.__dict__.get("implementation") is None:
        _check_loss(definition, name, where)
    entry = MethodEntry(name=name, label=label, section=section, rules=dataclasses.replace(rules, name=name),
                        reading_changes=definition.reading_changes, definition=definition, origin=origin,
                        source_file=_source_file(definition))
    global _SECTIONS
    _RULE_KEYS_CHECKED.discard(name)
    _REGISTRY[name] = entry
    _SECTIONS = None
    return entry


def definition_place(definition: type) -> str:
    """FILE:LINE of a definition's class statement (its module's name when the source cannot be read)."""
    try:
        return f"{inspect.getsourcefile(definition)}:{inspect.getsourcelines(definition)[1]}"
    except (OSError, TypeError):
        return f"{definition.__module__}.{definition.__qualname__}"


def _source_file(definition: type) -> str | None:
    try:
        return inspect.getsourcefile(definition)
    except TypeError:
        return None


def _same_source(one: str | None, other: str | None) -> bool:
    """Two copies of one plugin file (a study copied elsewhere): the same bytes."""
    try:
        return one is not None and other is not None and Path(one).read_bytes() == Path(other).read_bytes()
    except OSError:
        return False


def _checked_section(section: Any, name: str, where: str) -> type[BaseModel] | None:
    if section is None:
        return None
    if not (isinstance(section, type) and issubclass(section, BaseModel)):
        raise UserError(f"{where}: method {name!r}: `config` must be a pydantic model (a subclass of "
                        f"trainer.config.Section), got {section!r}")
    if section.model_config.get("extra") != "forbid":
        raise UserError(f"{where}: method {name!r}: its config {section.__name__} must refuse unknown keys; "
                        "subclass trainer.config.Section")
    try:
        section()
    except Exception as exc:  # a knob without a default, or a default its own checks refuse
        text = " ".join(str(exc).split())
        raise UserError(f"{where}: method {name!r}: config {section.__name__} has a knob without a valid "
                        f"default ({text[:200]}); give every knob a default its checks accept") from None
    return section


def _check_loss(definition: type, name: str, where: str) -> None:
    """A method that is its own implementation (a trainer.methods.Method subclass) computes a loss: its own
    `loss`, or one it inherits from a method that has one (the base class's is marked `placeholder`)."""
    loss = getattr(definition, "loss", None)
    if callable(loss) and not getattr(loss, "placeholder", False):
        return
    raise UserError(f"{where}: method {name!r} has no loss: define loss(self, ids, mask, position_ids=None) "
                    "returning trainer.methods.StepOutput in a subclass of trainer.methods.Method (docs: Adding "
                    "your own method)")


def check_rule_keys(entry: MethodEntry, data: Mapping[str, Any]) -> None:
    """Every key a plugin's rules fill or read is a key of its runs' config (`data`, a config dict of the method
    with every key present): a misspelt knob is refused naming the definition's file and line. Checked at a
    method's first resolve (the built-in rules: tests/trainer/test_method_rules.py)."""
    if entry.origin == "built in" or entry.name in _RULE_KEYS_CHECKED:
        return
    known = set(flatten(dict(data)))
    named = [key for keys, default in entry.rules.defaults.items()
             for key in (*(keys if isinstance(keys, tuple) else (keys,)), *_read_keys(default))]
    for key in [*named, *(refusal.key for refusal in entry.rules.refusals)]:
        if key not in known:
            raise UserError(f"{definition_place(entry.definition)}: method {entry.name!r}: its rules name {key!r}, "
                            f"which is no config key of its runs{suggestion_text(key, sorted(known))}")
    _RULE_KEYS_CHECKED.add(entry.name)


def _read_keys(default: Any) -> list[str]:
    if isinstance(default, ByFlag):
        return [default.flag, *_read_keys(default.paper), *_read_keys(default.released)]
    if isinstance(default, FromKey):
        return [default.key]
    return []


# ---- look-ups --------------------------------------------------------------------------------------------------
def method_entry(name: str) -> MethodEntry:
    """The registered method `name`; a ValueError naming the known ones (and the closest) for another name."""
    _load_entry_points()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}{suggestion_text(str(name), list(_REGISTRY))}; known: "
                         f"{', '.join(_REGISTRY)} (a method of your own: the study's plugins key, see "
                         "'Adding your own method')") from None


def method_names() -> tuple[str, ...]:
    """Every registered method's name, in the order registered (the built-in ones first)."""
    _load_entry_points()
    return tuple(_REGISTRY)


def built_in_methods() -> tuple[str, ...]:
    """The methods built into the trainer (what `sweep doctor --bench` measures), in the order registered."""
    return tuple(name for name, entry in _REGISTRY.items() if entry.origin == "built in")


def method_label(name: Any) -> str:
    """The label tables and figures show for a method name (the name itself for an unregistered one)."""
    entry = _REGISTRY.get(name) if isinstance(name, str) else None
    return entry.label if entry is not None else str(name)


def method_sections() -> dict[str, type[BaseModel]]:
    """Method name -> its config section, for the methods that have one (one dict until the next registration,
    read on every config check: never modify it)."""
    global _SECTIONS
    _load_entry_points()
    if _SECTIONS is None:
        _SECTIONS = {name: entry.section for name, entry in _REGISTRY.items() if entry.section is not None}
    return _SECTIONS


def traces_distance(method: Any) -> bool:
    """Whether runs of `method` (a method name; anything else, e.g. a missing value, is not one) have a maximum
    traceable distance: an EMA target and a queue of its keys (MethodRules.traces_distance)."""
    entry = _REGISTRY.get(method) if isinstance(method, str) else None
    return entry is not None and entry.traces_distance


def distance_methods() -> tuple[str, ...]:
    """The methods whose runs have a maximum traceable distance, in the order registered."""
    return tuple(name for name, entry in _REGISTRY.items() if entry.traces_distance)


def method_rules(name: str) -> MethodRules:
    """The rules of a registered method (`simcse`, `gs`, `mix`, `mocose`, a plugin's); a ValueError for another."""
    return method_entry(name).rules


def plugin_entries() -> list[MethodEntry]:
    """The methods registered from outside the tool (plugin files, modules, entry points)."""
    return [entry for entry in _REGISTRY.values() if entry.origin != "built in"]


def _load_entry_points() -> None:
    """Register the methods of installed packages (the entry point group), once per process."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            definition = point.load()
        except Exception as exc:
            raise UserError(f"entry point {point.name} = {point.value} ({ENTRY_POINT_GROUP}) failed on import: "
                            f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}; fix or uninstall its package"
                            ) from None
        register_method(definition, f"entry point {point.name} = {point.value}")



# ---- the built-in methods, registered as a plugin is ---------------------------------------------------------------
class _SimCSE(MethodDefinition):
    name, label, rules, implementation = SIMCSE, "SimCSE", SIMCSE_RULES, "trainer.methods.simcse:SimCSE"


class _MoCoSE(MethodDefinition):
    name, label, rules, implementation = MOCOSE, "MoCoSE", MOCOSE_RULES, "trainer.methods.mocose:MoCoSE"


class _GSInfoNCE(MethodDefinition):
    name, label, rules, implementation = GS_INFONCE, "GS-InfoNCE", GS_INFONCE_RULES, "trainer.methods.simcse:GSInfoNCE"


class _MixCSE(MethodDefinition):
    name, label, rules, implementation = MIXCSE, "MixCSE", MIXCSE_RULES, "trainer.methods.simcse:MixCSE"


for _definition in (_SimCSE, _MoCoSE, _GSInfoNCE, _MixCSE):
    register_method(_definition)


def registered() -> Mapping[str, MethodEntry]:
    """Every registered method by name (read-only view)."""
    _load_entry_points()
    return dict(_REGISTRY)


DISTANCE_METHODS = distance_methods()  # the built-in methods whose runs have a traceable distance (MoCoSE)


def model_settings(method: str, model: str) -> ModelSettings:
    """The paper's learning rate and batch size for `model` under `method` (its rules' `models`); bert-base's for
    a model the paper does not name (its `source` then says so).

    >>> model_settings("mocose", "bert-large-uncased")
    ModelSettings(lr=1e-05, batch_size=32, source='MoCoSE section 4.1')
    >>> model_settings("mix", "roberta-base").source
    "bert-base's (MixCSE, Implementation Details): the paper names no setting for roberta-base"
    """
    table = method_rules(method).models
    family = model_family(model)
    if family in table:
        return table[family]
    base = table[BERT_BASE]
    named = family or repr(model)
    return ModelSettings(base.lr, base.batch_size,
                         f"bert-base's ({base.source}): the paper names no setting for {named}")
