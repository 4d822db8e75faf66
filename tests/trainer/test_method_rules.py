"""The method rules: the resolved config of every method x variant (and of configs that set some of the keys
a rule fills) against a record (resolved_configs.json), the refusals, the declarations against RunConfig's
fields, and the rules' place between the config and the nn.Module methods."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tests.helpers import REPO
from trainer.config import RunConfig, field_names
from trainer.errors import ConfigError
from trainer.files import flatten
from trainer.method_rules import ByFlag, FromKey, MethodRules, method_rules, registered, resolve

RULES = {name: entry.rules for name, entry in registered().items() if entry.origin == "built in"}

RECORD = json.loads((Path(__file__).with_name("resolved_configs.json")).read_text())


# ---- the resolved configs ---------------------------------------------------------------------------------
def test_the_record_covers_every_method_and_variant():
    asked = {(case["input"]["method"], case["input"]["variant"]) for case in RECORD}
    assert asked == {(m, v) for m in RULES for v in ("paper", "released")}


@pytest.mark.parametrize("case", RECORD, ids=lambda case: json.dumps(case["input"], separators=(",", ":")))
def test_resolved_config_matches_the_record(case):
    """`filled` lists exactly the keys whose value (or JSON type: 0 against 0.0) differs from the config asked for."""
    asked = RunConfig.from_dict(case["input"])
    expected = json.dumps({**flatten(asked.to_dict()), **case["filled"]}, sort_keys=True)
    assert json.dumps(flatten(resolve(asked).to_dict()), sort_keys=True) == expected
    assert json.dumps(flatten(asked.resolved().to_dict()), sort_keys=True) == expected  # the same step


@pytest.mark.parametrize("case", RECORD, ids=lambda case: json.dumps(case["input"], separators=(",", ":")))
def test_resolving_twice_changes_nothing(case):
    once = resolve(RunConfig.from_dict(case["input"]))
    assert resolve(once) == once


@pytest.mark.parametrize("config, key, says", [
    ({"method": "gs", "variant": "released", "gaussian": {"weight": 2.0}}, "gaussian.weight", "got 2.0"),
    ({"method": "mocose", "heads": {"projection_layers": 0, "embedding_dim": 16}}, "heads.embedding_dim",
     "set heads.projection_layers >= 1"),
])
def test_each_refusal_names_its_key(config, key, says):
    with pytest.raises(ConfigError) as caught:
        resolve(RunConfig.from_dict(config))
    assert caught.value.key == key and says in str(caught.value)


def test_a_refusal_holds_only_for_its_own_method():
    resolve(RunConfig.from_dict({"method": "simcse", "variant": "released", "gaussian": {"weight": 2.0}}))
    resolve(RunConfig.from_dict({"method": "gs", "heads": {"projection_layers": 0, "embedding_dim": 16}}))


def test_unknown_method_names_are_refused():
    with pytest.raises(ValueError, match="unknown method 'byol'; known: simcse, mocose, gs, mix"):
        method_rules("byol")


# ---- the declarations --------------------------------------------------------------------------------------
def declared_keys(rules: MethodRules) -> tuple[set[str], set[str]]:
    """(the keys the rules fill, every other key they read: flags, FromKey sources, refusals)."""
    filled, read = set(), {refusal.key for refusal in rules.refusals}
    for keys, default in rules.all_defaults().items():
        filled.update(keys if isinstance(keys, tuple) else (keys,))
        values = [default.paper, default.released] if isinstance(default, ByFlag) else [default]
        read.update([default.flag] if isinstance(default, ByFlag) else [])
        read.update(value.key for value in values if isinstance(value, FromKey))
    return filled, read


@pytest.mark.parametrize("name", list(RULES))
def test_every_declared_key_is_a_config_key(name):
    filled, read = declared_keys(RULES[name])
    assert (filled | read) - set(field_names()) == set()


@pytest.mark.parametrize("name", list(RULES))
def test_rules_fill_only_null_keys_and_read_only_keys_no_rule_fills(name):
    """A filled key defaults to null in RunConfig (else its default would never apply); a flag is a
    `released.*` key; what a default is computed from is filled by no rule, so the order of filling is free."""
    defaults = flatten(RunConfig().to_dict())
    filled, read = declared_keys(RULES[name])
    assert {key for key in filled if defaults[key] is not None} == set()
    all_filled = set().union(*(declared_keys(rules)[0] for rules in RULES.values()))
    assert read & all_filled == set()
    for default in RULES[name].all_defaults().values():
        if isinstance(default, ByFlag):
            assert default.flag.startswith("released.")


@pytest.mark.parametrize("name", list(RULES))
def test_a_group_of_keys_gets_one_value_per_key(name):
    for keys, default in RULES[name].all_defaults().items():
        if isinstance(keys, tuple):
            for value in (default.paper, default.released) if isinstance(default, ByFlag) else (default,):
                assert isinstance(value, tuple) and len(value) == len(keys)


# ---- the rules' place ----------------------------------------------------------------------------------------
def test_each_method_class_finds_its_rules_by_name():
    from torch import nn

    from trainer.methods import method_class

    for name in RULES:
        cls = method_class(name)
        assert cls.name == name and cls.entry().rules is RULES[name]
        assert issubclass(cls, nn.Module) and not issubclass(cls, MethodRules)


def trainer_imports() -> dict[str, set[str]]:
    """module -> the trainer modules its file imports anywhere, `if TYPE_CHECKING:` blocks included."""
    paths = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (REPO / "trainer").rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
        graph[name] = {t for t in targets if t in paths and t != name and not name.startswith(t + ".")}
    return graph


def test_no_two_trainer_modules_import_each_other_even_for_types():
    graph = trainer_imports()
    assert "trainer.method_rules" in graph["trainer.methods.base"]  # the graph is read
    assert sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph[b]) == []


def test_the_rules_import_neither_the_config_nor_the_methods():
    graph = trainer_imports()
    assert {t for t in graph["trainer.method_rules"] if t.startswith(("trainer.config", "trainer.methods"))} == set()
    assert {t for t in graph["trainer.config"] if t.startswith("trainer.methods")} == set()
