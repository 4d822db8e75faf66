"""Search methods as objects: what a study's `method:` means, asked of one object instead of compared as a word.

The study file keeps `method: grid | random | tpe` as a word (`StudySpec.method`); `spec.search` (or
`search_method(word)`) is the one frozen, stateless object for it, and every module asks that object:

    Grid()     every combination of the parameters' value lists, expanded before the run
    Random()   `budget` distinct configurations drawn before the run (seeded by the study's name), each per seed
    Tpe()      `budget` configurations asked of Optuna's TPE sampler during the run, each run once per seed

What each one answers (attributes, then methods):

    name                                       the study file's word: grid, random, tpe
    expands                                    its trials are known before the run (grid, random); tpe asks them
    samples                                    it draws from the parameters' distributions (random, tpe)
    unit                                       the dry run's word for a candidate the constraints drop
    rebuildable                                its Optuna storage can be rebuilt from the trials' summary.json (not
                                               tpe: the sampler's history lives only there)
    sized_by_lists                             its size is its value lists' lengths (grid): known, and refused when
                                               too large, before any value is checked
    candidates(parameters, study_name)         the raw configurations to plan, in order (sweep.spec.expand keys them)
    configurations(budget)                     the distinct configurations it plans or asks per seed; None: all
    planned_trials(parameters, budget, seeds)  the most trials it can plan, read from the file as written
    total_trials(planned, budget, seeds)       the study's trials in all: its `planned` trials, or budget x seeds
    distributions(spec)                        the sampler's Optuna distributions ({} for a grid)
    uses_seed_means(seeds)                     the sampler learns from each configuration's mean over its seeds
    pending_cap(remaining, cap)                trials an existing cluster may hold pending beyond what fits now

and its own checks of the study file: check_budget(budget, where), budget_problem(parameters, budget),
size_words(per_seed, budget), check_distribution(path, where), check_listed_expr(values, path, where) and
check_space(spec). SEARCH_METHODS holds one object per word; the schema's `method` takes its words.

Also here, as the sampler reads them: `search_space(spec)` (the Optuna distributions of a study's parameters),
`check_search_space(spec)`, `optuna_choice(value)`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Protocol

from sweep.spec import limits
from sweep.text import count_text, is_expr, shorten
from trainer.errors import excerpt

if TYPE_CHECKING:  # annotations only
    from sweep.spec.key_lines import KeyLines


class Study(Protocol):
    """What the methods read of a study: a sweep.spec.schema.StudySpec (which imports this module)."""

    parameters: dict[str, Any]

    def where(self) -> KeyLines: ...


@dataclass(frozen=True)
class SearchMethod:
    """What every search method answers (module docstring); one subclass per method, without state."""

    name: ClassVar[str]
    expands: ClassVar[bool]
    samples: ClassVar[bool]
    unit: ClassVar[str]
    rebuildable: ClassVar[bool] = True
    sized_by_lists: ClassVar[bool] = False

    def candidates(self, parameters: dict[str, Any], study_name: str) -> Iterator[dict[str, Any]]:
        """The raw configurations to plan (dotted key -> value, exprs unevaluated), in the order they are kept."""
        return iter(())

    def configurations(self, budget: int | None) -> int | None:
        """How many distinct configurations it plans (or asks) per seed; None: every candidate."""
        return budget

    def planned_trials(self, parameters: Any, budget: int | None, seeds: int) -> int:
        """The most trials the study can plan, read from the file as written, before a value is checked, so that it
        costs nothing however large the study."""
        raise NotImplementedError

    def total_trials(self, planned: int, budget: int | None, seeds: int) -> int:
        """The study's trials in all, `planned` being how many its expansion holds."""
        return planned

    def distributions(self, spec: Study) -> dict[str, Any]:
        """The Optuna distributions the sampler draws from (a grid's values are recorded, not drawn: none)."""
        return {}

    def uses_seed_means(self, seeds: int) -> bool:
        """Whether the sampler learns from each configuration's mean over its seeds (sweep.records.seed_means)."""
        return False

    def pending_cap(self, remaining: int, cap: int) -> int:
        """How many trials a run on an existing Ray cluster asks Tune to hold pending, however few fit now: its
        `remaining` trials up to `cap`, so that an autoscaler sees the study's demand (sweep.run.ray_session)."""
        return min(remaining, cap)

    # ---- the study file's checks (StudySpec._check_study, sweep.spec.values, sweep.spec.expand) ----------------
    def check_budget(self, budget: int | None, where: KeyLines) -> None:
        """A budget where the method takes one, and only there."""
        if budget is None:
            raise where.error(("method",), f"method {self.name} needs a budget: the number of configurations "
                              "to try (e.g. budget: 20)")

    def budget_problem(self, parameters: dict[str, Any], budget: int | None) -> str | None:
        """Why the budget cannot be met by the checked `parameters` (sweep.spec.limits.budget_problem), or None."""
        return limits.budget_problem(parameters, budget)

    def size_words(self, per_seed: int, budget: int | None) -> tuple[tuple, str]:
        """The key a study too large is refused on, and how its size is told ("budget 2,000")."""
        return ("budget",), f"budget {count_text(budget)}"

    def check_distribution(self, path: tuple, where: KeyLines) -> None:
        """A parameter given as a distribution: refused where the method draws nothing."""

    def check_listed_expr(self, values: list[Any], path: tuple, where: KeyLines) -> None:
        """An {expr: ...} among the `values` of a list (the one at `path`): refused where the method cannot plan it."""

    def check_space(self, spec: Study) -> None:
        """The sampler can draw from the study's distributions (checked before anything is written)."""


@dataclass(frozen=True)
class Grid(SearchMethod):
    """Every combination of the parameters' value lists (the last key fastest), each run once per seed."""

    name: ClassVar[str] = "grid"
    expands: ClassVar[bool] = True
    samples: ClassVar[bool] = False
    unit: ClassVar[str] = "combination"
    sized_by_lists: ClassVar[bool] = True

    def candidates(self, parameters: dict[str, Any], study_name: str) -> Iterator[dict[str, Any]]:
        keys = list(parameters)
        for values in itertools.product(*(parameters[key] for key in keys)):
            yield dict(zip(keys, values))

    def configurations(self, budget: int | None) -> int | None:
        return None

    def planned_trials(self, parameters: Any, budget: int | None, seeds: int) -> int:
        """The grid's combinations (the product of its list lengths; a value that is not a list counts as one)
        times the seeds."""
        return limits.combinations_written(parameters) * seeds

    def check_budget(self, budget: int | None, where: KeyLines) -> None:
        if budget is not None:
            raise where.error(("budget",), "applies to method random or tpe; a grid runs every combination")

    def budget_problem(self, parameters: dict[str, Any], budget: int | None) -> str | None:
        return None

    def size_words(self, per_seed: int, budget: int | None) -> tuple[tuple, str]:
        return ("parameters",), f"the grid has {count_text(per_seed)} combinations"

    def check_distribution(self, path: tuple, where: KeyLines) -> None:
        raise where.error(path, "a distribution needs method random or tpe; a grid needs a list of values")


@dataclass(frozen=True)
class _Sampling(SearchMethod):
    """A method that draws `budget` configurations from the parameters' values and distributions."""

    samples: ClassVar[bool] = True
    unit: ClassVar[str] = "sample"

    def planned_trials(self, parameters: Any, budget: int | None, seeds: int) -> int:
        """The budget times the seeds: each configuration drawn runs once per seed."""
        return (budget or 0) * seeds

    def distributions(self, spec: Study) -> dict[str, Any]:
        return search_space(spec)

    def check_space(self, spec: Study) -> None:
        check_search_space(spec)


@dataclass(frozen=True)
class Random(_Sampling):
    """`budget` distinct configurations drawn before the run, from a generator seeded by the study's name (every
    process draws the same ones), each run once per seed."""

    name: ClassVar[str] = "random"
    expands: ClassVar[bool] = True

    def candidates(self, parameters: dict[str, Any], study_name: str) -> Iterator[dict[str, Any]]:
        """Endless draws: the expansion keeps the first `budget` distinct ones the constraints leave."""
        # Seeded from the name, not from Python's salted hash(), so every process draws the same trials.
        rng = random.Random(int.from_bytes(hashlib.sha256(study_name.encode()).digest()[:8], "big"))
        while True:
            yield {key: _sample(rng, values) for key, values in parameters.items()}


@dataclass(frozen=True)
class Tpe(_Sampling):
    """`budget` configurations asked of Optuna's TPE sampler during the run (none is known before), each run once
    per seed; with several seeds the sampler learns from their mean (sweep.records.seed_means)."""

    name: ClassVar[str] = "tpe"
    expands: ClassVar[bool] = False
    rebuildable: ClassVar[bool] = False  # the sampler's history lives only in the Optuna storage

    def total_trials(self, planned: int, budget: int | None, seeds: int) -> int:
        """Budget x seeds: its trials are asked during the run, none planned before."""
        return self.planned_trials(None, budget, seeds)

    def uses_seed_means(self, seeds: int) -> bool:
        return seeds > 1

    def pending_cap(self, remaining: int, cap: int) -> int:
        """None beyond what fits: each ask is a sampler decision, made when a trial can start."""
        return 0

    def check_listed_expr(self, values: list[Any], path: tuple, where: KeyLines) -> None:
        if len(values) > 1:
            raise where.error(path, "expr values in a list need method grid or random (TPE samples "
                              "plain values); write a lone {expr: ...} for a derived value")


SEARCH_METHODS: dict[str, SearchMethod] = {method.name: method for method in (Grid(), Random(), Tpe())}
SEARCH_METHOD_NAMES = tuple(SEARCH_METHODS)  # the study file's words, in the schema's order


def search_method(method: str | SearchMethod) -> SearchMethod:
    """The object for a study file's `method:` word (an object is returned as it is)."""
    if isinstance(method, SearchMethod):
        return method
    try:
        return SEARCH_METHODS[method]
    except (KeyError, TypeError):
        raise ValueError(f"expected a search method ({', '.join(SEARCH_METHOD_NAMES)}), "
                         f"got {excerpt(method)}") from None


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


# ---- the parameters as Optuna's sampler reads them ----------------------------------------------------------------
def search_space(spec: Study) -> dict[str, Any]:
    """Optuna distributions of the sampled parameters (random/tpe); lists with `expr` values are left out.

    Categorical choices that are lists (queue slices) are offered to Optuna as strings joined with
    "+", which `trial_from_params` turns back into lists.
    """
    space: dict[str, Any] = {}
    for key, values in spec.parameters.items():
        distribution = optuna_distribution(values)
        if distribution is not None:
            space[key] = distribution
    return space


def optuna_distribution(values: Any) -> Any:
    """One parameter's Optuna distribution; None for a list with `expr` values (computed per trial)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(values, list):
        if any(is_expr(v) for v in values):
            return None  # computed per trial, not chosen by the sampler
        return CategoricalDistribution([optuna_choice(v) for v in values])
    kind = values["distribution"]
    if kind == "categorical":
        return CategoricalDistribution([optuna_choice(v) for v in values["choices"]])
    if kind == "int":
        return IntDistribution(values["low"], values["high"], step=values.get("step") or 1)
    return FloatDistribution(values["low"], values["high"], log=kind == "loguniform", step=values.get("step"))


def check_search_space(spec: Study) -> None:
    """Each distribution of a random or tpe study is one Optuna accepts, checked before anything is written: the
    ones Optuna itself refuses (e.g. a uniform range with a step too small to divide it) are refused here."""
    import warnings

    for key, values in spec.parameters.items():
        try:
            with warnings.catch_warnings():  # "the range is not divisible by step": Optuna's own note, at run time
                warnings.simplefilter("ignore")
                optuna_distribution(values)
        except ArithmeticError:  # decimal's DivisionImpossible: (high - low) / step past 28 digits
            raise spec.where().error(("parameters", key), "Optuna cannot sample this distribution: its step "
                                     "splits high - low into too many parts; expected a larger step") from None
        except ValueError as exc:
            raise spec.where().error(("parameters", key), f"Optuna cannot sample this distribution: "
                                     f"{shorten(str(exc), 160)}") from None


def optuna_choice(value: Any) -> Any:
    """Optuna's categorical choices must be scalars; lists (queue slices) become 'a+b'."""
    return "+".join(map(str, value)) if isinstance(value, list) else value
