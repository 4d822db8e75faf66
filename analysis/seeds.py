"""How many seeds a paired difference needs: the smallest difference a seed count resolves, and the seeds a
target difference needs, for a two-sided paired t-test (statsmodels' `TTestPower`).

A study's configurations share their seeds, so a difference is stated over per-seed differences
d_s = score_C(s) - score_R(s) (analysis.paired). With sigma the standard deviation of d_s over seeds:

    resolvable(n)  = the smallest true mean difference that a two-sided paired t-test at ALPHA detects with
                     probability POWER from n seeds: effect size (delta / sigma) solved by TTestPower, times sigma
    seeds(target)  = the smallest n whose resolvable(n) <= target

sigma comes, in this order, from the study's finished trials (the pooled sample spread of their paired
differences, `spread_of_differences`), from the study's `analysis.seed_spread`, or from DEFAULT_SPREAD, which
is sourced: MixCSE Table 1 gives the mean and standard deviation of five runs of SimCSE and five of MixCSE per
STS task; the spread of a difference between two configurations whose runs share nothing is then
sqrt(sd_SimCSE^2 + sd_MixCSE^2). Runs that share seeds (as a study's do) usually differ by less, so the default
errs towards more seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from trainer.evaluation.sts_average import AVG
from trainer.vocabulary import STS_BENCHMARK, STS_TASKS

ALPHA = 0.05  # two-sided
POWER = 0.8
MIN_SEEDS = 2  # a paired t-test needs one degree of freedom
MAX_SEEDS = 100_000  # the search for seeds(target) stops here; beyond it the answer is "more than this"

# MixCSE Table 1 (bert-base, test Spearman x100): the standard deviation over five runs of SimCSE (the MixCSE
# authors' re-runs) and of MixCSE, per STS task and for the seven-task average.
MIXCSE_TABLE1_SD = {
    "SimCSE": dict(zip((*STS_TASKS, AVG), (9.61, 2.72, 3.97, 1.42, 1.24, 1.44, 1.25, 2.32))),
    "MixCSE": dict(zip((*STS_TASKS, AVG), (4.04, 0.72, 1.25, 2.32, 0.16, 0.82, 0.46, 0.61))),
}


@dataclass(frozen=True)
class Spread:
    """The standard deviation over seeds of a per-seed paired difference, and where it comes from."""

    sd: float
    source: str
    measured: bool = False  # pooled from finished trials' paired differences


def default_spread(score: str) -> Spread:
    """DEFAULT_SPREAD for `score` (module docstring): from MixCSE Table 1; STS-B dev, which no paper reports,
    takes STS-B test's figure, said so."""
    column = score if score in MIXCSE_TABLE1_SD["SimCSE"] else STS_BENCHMARK
    simcse, mixcse = MIXCSE_TABLE1_SD["SimCSE"][column], MIXCSE_TABLE1_SD["MixCSE"][column]
    stand_in = "" if column == score else f" (its {column} test figure: no paper reports {score})"
    return Spread(math.hypot(simcse, mixcse),
                  f"default{stand_in}: sqrt({simcse}^2 + {mixcse}^2), the standard deviations of five runs of SimCSE "
                  "and of MixCSE in MixCSE Table 1, runs taken as unpaired; set analysis.seed_spread to your own")


def spread_of_differences(differences: Sequence[np.ndarray]) -> Spread | None:
    """The pooled sample standard deviation of several sets of per-seed differences (each set its own mean:
    sum (n_i - 1) s_i^2 / sum (n_i - 1)); None without two differences in some set."""
    sets = [np.asarray(d, dtype=float) for d in differences if len(d) >= 2]
    df = sum(len(d) - 1 for d in sets)
    if not df:
        return None
    pooled = math.sqrt(sum(float(np.var(d, ddof=1)) * (len(d) - 1) for d in sets) / df)
    return Spread(pooled, f"pooled from the paired differences of {len(sets)} configuration"
                          f"{'s' if len(sets) != 1 else ''} against the reference (df {df})", measured=True)


def resolvable_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest true mean difference a two-sided paired t-test at `alpha` detects with probability `power`
    from `n` seeds whose differences have standard deviation `sd` (TTestPower's effect size for `n`, times
    `sd`); None below MIN_SEEDS seeds."""
    if n < MIN_SEEDS:
        return None
    if sd == 0:
        return 0.0
    from statsmodels.stats.power import TTestPower

    effect = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power, alternative="two-sided")
    return float(np.squeeze(effect)) * sd


def seeds_needed(target: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """The fewest seeds whose resolvable difference is at most `target`; None when even MAX_SEEDS are too few.
    Found by bisection over n on `resolvable_difference`, which falls as n grows (statsmodels' power function
    itself gives NaN where scipy's noncentral t does, which its solver for n does not survive)."""
    if target <= 0:
        raise ValueError(f"a target difference must be positive, got {target}")
    if sd == 0:
        return MIN_SEEDS
    if resolvable_difference(sd, MAX_SEEDS, alpha, power) > target:
        return None
    low, high = MIN_SEEDS, MAX_SEEDS
    while low < high:
        middle = (low + high) // 2
        if resolvable_difference(sd, middle, alpha, power) <= target:
            high = middle
        else:
            low = middle + 1
    return low


def seed_lines(spread: Spread, n: int, score: str, target: float | None) -> list[str]:
    """What a study's seed count can resolve and, with `target`, how many seeds that difference needs: the
    texts the dry run and `sweep analyze` print (their `score` named as the reader knows it)."""
    test = f"two-sided paired t-test, alpha {ALPHA:g}, power {POWER:.0%}"
    name = "the seven-task STS average" if score == AVG else score
    at = [n] if n >= 3 else [3, 5]
    resolved = "; ".join(f"{plural_seeds(k)} resolve {resolvable_difference(spread.sd, k):.2f}" for k in at)
    lines = [(f"{'' if n >= 3 else plural_seeds(n) + ': no paired interval (it needs 3 shared seeds); '}"
              f"{resolved} points of {name} ({test}; per-seed difference sd {spread.sd:.2f}, {spread.source})")]
    if target is not None:
        needed = seeds_needed(target, spread.sd)
        lines.append(f"a difference of {target:g} (analysis.target_difference) needs "
                     + (f"{plural_seeds(needed)}" if needed is not None else f"more than {MAX_SEEDS:,} seeds")
                     + f" at that spread; the study has {n}")
    return lines


def plural_seeds(n: int) -> str:
    return f"{n:,} seed{'s' if n != 1 else ''}"
