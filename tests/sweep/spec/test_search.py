"""The search methods as objects (sweep.spec.search): each one's answers, its checks of the study file, and no
module outside them comparing the method's word."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest

from sweep.spec import load_study, search_space
from sweep.spec.key_lines import KeyLines
from sweep.spec.schema import StudySpec
from sweep.spec.search import SEARCH_METHOD_NAMES, SEARCH_METHODS, Grid, Random, Tpe, search_method
from tests.helpers import REPO, study_file
from trainer.errors import UserError

HEAD = "name: s\nbase:\n  model: embedded\n  max_steps: 30\n"
WHERE = KeyLines("study.yaml", {})


def test_one_object_per_word_of_the_study_file():
    assert SEARCH_METHOD_NAMES == ("grid", "random", "tpe")
    assert [search_method(name) for name in SEARCH_METHOD_NAMES] == [Grid(), Random(), Tpe()]
    assert all(SEARCH_METHODS[name].name == name for name in SEARCH_METHOD_NAMES)
    assert search_method(Tpe()) == Tpe()  # an object is its own answer
    assert StudySpec.model_fields["method"].annotation.__args__ == SEARCH_METHOD_NAMES  # the schema's words
    with pytest.raises(ValueError, match="expected a search method"):
        search_method("bayes")


def test_the_objects_are_frozen_and_stateless():
    for method in (Grid(), Random(), Tpe()):
        assert dataclasses.fields(method) == ()
        with pytest.raises(dataclasses.FrozenInstanceError):
            method.expands = False  # type: ignore[misc]
        assert hash(method) == hash(type(method)())


@pytest.mark.parametrize("method, expands, samples, unit, rebuildable, sized_by_lists", [
    (Grid(), True, False, "combination", True, True),
    (Random(), True, True, "sample", True, False),
    (Tpe(), False, True, "sample", False, False),
])
def test_what_each_method_is(method, expands, samples, unit, rebuildable, sized_by_lists):
    assert (method.expands, method.samples, method.unit, method.rebuildable, method.sized_by_lists) == (
        expands, samples, unit, rebuildable, sized_by_lists)


def test_how_many_trials_each_plans():
    grid = {"a": [1, 2, 3], "b": [4, 5], "c": {"expr": "a + b"}}  # a value that is not a list counts once
    assert Grid().planned_trials(grid, None, 2) == 12
    assert Grid().planned_trials("not a mapping", None, 2) == 2  # read before the file is checked
    assert Random().planned_trials(grid, 7, 3) == Tpe().planned_trials(grid, 7, 3) == 21  # budget x seeds
    assert (Grid().configurations(None), Random().configurations(7), Tpe().configurations(7)) == (None, 7, 7)
    # the study's total: the expansion's trials, or (tpe, none planned before the run) budget x seeds
    assert Grid().total_trials(11, None, 2) == 11
    assert Random().total_trials(13, 7, 2) == 13
    assert Tpe().total_trials(0, 7, 3) == 21


def test_seed_means_and_the_pending_cap():
    assert [m.uses_seed_means(seeds) for m in (Grid(), Random(), Tpe()) for seeds in (1, 3)] == [
        False, False, False, False, False, True]
    assert Grid().pending_cap(30, 64) == Random().pending_cap(30, 64) == 30
    assert Grid().pending_cap(1000, 64) == 64
    assert Tpe().pending_cap(1000, 64) == 0  # each ask a sampler decision: only what fits


def test_the_candidates_each_plans():
    parameters = {"a": [1, 2], "b": ["x", "y", "z"]}
    assert list(Grid().candidates(parameters, "s")) == [{"a": a, "b": b} for a in (1, 2) for b in "xyz"]
    assert list(Tpe().candidates(parameters, "s")) == []  # asked during the run
    space = {"a": [1, 2], "lr": {"distribution": "loguniform", "low": 1e-5, "high": 1e-3},
             "k": {"distribution": "int", "low": 0, "high": 100, "step": 10}}
    draws = list(itertools.islice(Random().candidates(space, "s"), 50))
    assert draws == list(itertools.islice(Random().candidates(space, "s"), 50))  # seeded by the study's name
    assert draws != list(itertools.islice(Random().candidates(space, "other"), 50))
    assert all(d["a"] in (1, 2) and 1e-5 <= d["lr"] <= 1e-3 and d["k"] % 10 == 0 for d in draws)


def test_the_budget_checks():
    Grid().check_budget(None, WHERE)
    with pytest.raises(UserError, match="applies to method random or tpe; a grid runs every combination"):
        Grid().check_budget(5, WHERE)
    Tpe().check_budget(5, WHERE)
    with pytest.raises(UserError, match="method random needs a budget"):
        Random().check_budget(None, WHERE)
    small = {"a": [1, 2]}
    assert Grid().budget_problem(small, 5) is None
    assert "is more than the 2 configurations" in Random().budget_problem(small, 5)
    assert Tpe().budget_problem(small, 2) is None
    assert Grid().size_words(4, None) == (("parameters",), "the grid has 4 combinations")
    assert Tpe().size_words(4, 2000) == (("budget",), "budget 2,000")


def test_the_parameter_checks():
    Random().check_distribution(("parameters", "lr"), WHERE)
    with pytest.raises(UserError, match="a distribution needs method random or tpe"):
        Grid().check_distribution(("parameters", "lr"), WHERE)
    two = [{"expr": "1"}, {"expr": "2"}]
    Grid().check_listed_expr(two, ("parameters", "k", 0), WHERE)
    Random().check_listed_expr(two, ("parameters", "k", 0), WHERE)
    Tpe().check_listed_expr(two[:1], ("parameters", "k", 0), WHERE)  # a lone expr: a derived value
    with pytest.raises(UserError, match="expr values in a list need method grid or random"):
        Tpe().check_listed_expr(two, ("parameters", "k", 0), WHERE)


@pytest.mark.parametrize("method, budget", [("grid", ""), ("random", "budget: 3\n"), ("tpe", "budget: 3\n")])
def test_a_study_asks_its_method(tmp_path, method, budget):
    spec = load_study(study_file(tmp_path, HEAD + f"method: {method}\n{budget}parameters:\n"
                                            "  optim.warmup_steps: [0, 1, 2]\n  ema.decay: [0.9, 0.99]\n"))
    assert spec.method == method and spec.search == search_method(method)
    distributions = spec.search.distributions(spec)
    assert distributions == ({} if method == "grid" else search_space(spec))
    assert set(distributions) == (set() if method == "grid" else {"optim.warmup_steps", "ema.decay"})


def test_a_study_file_s_errors_are_the_method_s(tmp_path):
    with pytest.raises(UserError, match="key 'budget': applies to method random or tpe"):
        load_study(study_file(tmp_path, HEAD + "budget: 3\nparameters:\n  ema.decay: [0.9]\n"))
    with pytest.raises(UserError, match="key 'method': method tpe needs a budget"):
        load_study(study_file(tmp_path, HEAD + "method: tpe\nparameters:\n  ema.decay: [0.9]\n"))
    with pytest.raises(UserError, match="a distribution needs method random or tpe"):
        load_study(study_file(tmp_path, HEAD + "parameters:\n  ema.decay: {distribution: uniform, low: 0.5, "
                                               "high: 0.9}\n"))


# The acceptance check of issue 80: no module compares the method's word; the broader pattern catches the other
# spellings (a word first, single quotes, a set).
ACCEPTANCE = re.compile(r'method (==|!=|in) \(?"(tpe|grid|random)"')
ANY_COMPARISON = re.compile(r"""(==|!=|\bin\b) *[(\[{]?["'](tpe|grid|random)["']|["'](tpe|grid|random)["'] *(==|!=)""")


def test_no_module_outside_the_search_objects_compares_the_method_s_word():
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in sorted((REPO / "sweep").rglob("*.py")) if path != REPO / "sweep" / "spec" / "search.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if ACCEPTANCE.search(line) or ANY_COMPARISON.search(line)]
    assert found == [], "ask spec.search (sweep.spec.search) instead:\n" + "\n".join(found)


def test_the_comparison_check_finds_each_spelling():
    for line in ('if spec.method == "tpe":', "if method != 'grid':", 'if spec.method in ("random", "tpe"):',
                 'if "tpe" == spec.method:', "if method in {'random'}:"):
        assert ACCEPTANCE.search(line) or ANY_COMPARISON.search(line), line
    assert not ANY_COMPARISON.search('method: Literal[SEARCH_METHOD_NAMES] = "grid"')
