"""How big a study is, known before any trial is built: planning stays bounded by the file, not its numbers.

    combinations_written(parameters) -> int       # a grid's combinations, from the lists' lengths as written
    space_size(parameters) -> int | None          # configurations random/tpe can draw; None: endless
    budget_problem(parameters, budget) -> str | None   # why a budget is more than the space holds

The most trials a study plans (a grid's combinations or a budget, times the seeds) is its search method's
answer: sweep.spec.search, `planned_trials`.

A grid of 100 x 100 x 100 values is a million trials from a 2 KB file, each of which would be built and
checked; `budget: 1000000000` over two values would ask the sampler for a billion distinct configurations.
load_study refuses a study of more than MAX_TRIALS trials unless asked for (`sweep run
--many-trials`), and a random or tpe budget larger than the space it draws from.
"""

from __future__ import annotations

import math
from typing import Any

from sweep.text import is_expr

# A study of more trials than this is planned only with `sweep run --many-trials` (and `sweep slurm
# --many-trials`): every trial is planned before any runs, so a larger study (most often a grid mistyped) would
# hold the driver for minutes first.
MAX_TRIALS = 100_000
MANY_TRIALS_FLAG = "--many-trials"


def combinations_written(parameters: Any) -> int:
    """A grid's combinations: the product of its list lengths (a value that is not a list counts as one). Read
    from the file as written, before a value is checked, so that it costs nothing however large the grid."""
    combinations = 1
    for values in (parameters.values() if isinstance(parameters, dict) else ()):
        if isinstance(values, list):
            combinations *= len(values)
    return combinations


def space_size(parameters: dict[str, Any]) -> int | None:
    """How many configurations random or tpe can draw from checked `parameters` (lists, distributions,
    exprs): the product of each key's count; None when a key is continuous (uniform, loguniform without
    a step). An upper bound: constraints and duplicates may leave fewer."""
    total = 1
    for values in parameters.values():
        count = _choices(values)
        if count is None:
            return None
        total *= count
    return total


def _choices(values: Any) -> int | None:
    if isinstance(values, list):
        return len(values)  # a lone {expr} is [expr]: one value, computed per trial
    kind = values["distribution"]
    if kind == "categorical":
        return len(values["choices"])
    low, high, step = values["low"], values["high"], values.get("step")
    if kind == "int":
        return (high - low) // (step or 1) + 1  # not len(range()): past 2**63 values it overflows
    if not step:
        return None
    # random rounds to low + k * step (k up to round((high - low) / step)), Optuna to low + k * step <= high
    steps = (high - low) / step
    if not math.isfinite(steps):
        return None
    return math.floor(steps + 0.5) + 1


def budget_problem(parameters: dict[str, Any], budget: int | None) -> str | None:
    """Why a random/tpe budget cannot be met (more configurations than the space holds), or None."""
    if budget is None:
        return None
    size = space_size(parameters)
    if size is None or budget <= size:
        return None
    from sweep.text import count_text

    sizes = " x ".join(f"{key}: {_choices(values)}" for key, values in list(parameters.items())[:6])
    exprs = any(is_expr(v) for values in parameters.values() if isinstance(values, list) for v in values)
    return (f"{count_text(budget)} is more than the {count_text(size)} configuration{'s' if size != 1 else ''} "
            f"the parameters hold ({sizes or 'no parameters'}{'; an expr counts as one value' if exprs else ''}); "
            f"expected a budget of at most {count_text(size)}, or method: grid to run each of them once")
