"""The private names of Optuna and Ray the project uses (sweep.records.optuna_private, sweep.run.ray_private):
each still exists on the installed library, on a version each use was checked on; and no other module of
trainer/, sweep/ or analysis/ reaches one of them."""

from __future__ import annotations

import ast
import importlib
import re

import optuna
import pytest
import ray

from sweep.records import optuna_private
from sweep.run import ray_private
from tests.helpers import REPO

ADAPTERS = [(optuna, optuna_private), (ray, ray_private)]


def resolve(dotted: str) -> object:
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ImportError(dotted)


@pytest.mark.parametrize("library, adapter", ADAPTERS, ids=["optuna", "ray"])
def test_the_installed_version_is_one_the_private_uses_were_checked_on(library, adapter):
    series = ".".join(library.__version__.split(".")[:2])
    assert series in adapter.CHECKED_ON, (
        f"{library.__name__} {library.__version__} is not of a series in {adapter.CHECKED_ON}: check each private "
        f"use listed in {adapter.__name__} on it, then add its series to CHECKED_ON")


@pytest.mark.parametrize("library, adapter", ADAPTERS, ids=["optuna", "ray"])
def test_each_private_name_exists_on_the_installed_library(library, adapter):
    for dotted in adapter.PRIVATE_NAMES:
        assert resolve(dotted) is not None, dotted
    assert all(re.search(r"\._[a-z]", dotted) for dotted in adapter.PRIVATE_NAMES)  # each names a private part


def test_the_adapters_read_what_the_library_has():
    assert optuna_private.rdb_models() is not None
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    study_id = storage.get_study_id_from_name(study.study_name)
    assert optuna_private.trial_id(trial) == storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)


# attribute names private to Optuna or Ray that the adapters wrap
PRIVATE_ATTRIBUTES = {"_trial_id", "_logger_actor_cls", "print_to_stdstream", "tag_callbacks",
                      "_datetime_start_utc", "_datetime_complete_utc"}


def private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each import of a private module of optuna or ray and each use of PRIVATE_ATTRIBUTES."""
    out = []
    for node in ast.walk(tree):
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module + "." + alias.name for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] in ("optuna", "ray") and any(part.startswith("_") for part in parts[1:]):
                out.append((node.lineno, f"import {module}"))
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
            out.append((node.lineno, f".{node.attr}"))
    return out


def test_no_module_outside_the_adapters_uses_a_private_name():
    adapters = {"sweep/records/optuna_private.py", "sweep/run/ray_private.py"}
    found = []
    for package in ("trainer", "sweep", "analysis"):
        for path in sorted((REPO / package).rglob("*.py")):
            relative = str(path.relative_to(REPO))
            if relative not in adapters:
                found += [f"{relative}:{line}: {what}" for line, what in private_uses(ast.parse(path.read_text()))]
    assert found == []


def test_the_check_finds_a_private_use():
    code = "from optuna.storages._rdb import models\nimport ray._private.worker\nx = trial._trial_id\n"
    assert [what for _, what in private_uses(ast.parse(code))] == [
        "import optuna.storages._rdb.models", "import ray._private.worker", "._trial_id"]
