"""How often each interval `sweep analyze` prints holds the truth, measured by seeded simulation:
`python -m analysis.coverage` prints the table docs/running/analysis.md shows, and the test suite checks it.

Each scenario draws studies whose truth is known and calls the analysis's own procedures on them:

- one score: per seed, a seed effect shared by both configurations plus each one's own noise; the paired
  t-interval (analysis.intervals.paired_t) should hold the true difference 95% of the time;
- the seven-task average: per seed, seven task differences correlated `rho` within the seed; the interval of
  the per-seed average difference should hold the true mean of the seven;
- a data-chosen best: k equal configurations sharing a seed effect, the best mean taken as the reference; the
  family-wise rate of false claims (any interval that misses its configuration's truth) of Hsu's MCB
  (analysis.intervals.mcb_bounds) should be at most 5%, and so should Holm's against a named reference;
- unequal configurations, so that MCB's intervals must do more than touch 0: their simultaneous coverage;
- the best MTD: scores scattered around a parabola in log(MTD) at the MTD values of the project's studies;
  Fieller's interval (analysis.stats.fit_peak) should hold the true in-range peak at least 95% of the time.
"""

from __future__ import annotations

import gc
import itertools
from dataclasses import dataclass

import numpy as np

from analysis.intervals import holm, mcb_bounds, paired_t
from analysis.stats import fit_peak

LEVEL = 0.95


@dataclass(frozen=True)
class Measured:
    """A simulated rate: `hits` of `reps` studies, and what it is a rate of."""

    what: str
    setting: str
    hits: int
    reps: int

    @property
    def rate(self) -> float:
        return self.hits / self.reps


def one_score(n: int, reps: int = 2000, seed: int = 0, difference: float = 0.3, seed_sd: float = 1.0,
              noise_sd: float = 0.5) -> Measured:
    """Coverage of the paired t-interval for one score's difference."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        shared = rng.normal(0.0, seed_sd, n)
        reference = 76.0 + shared + rng.normal(0.0, noise_sd, n)
        other = 76.0 + difference + shared + rng.normal(0.0, noise_sd, n)
        low, high, _ = paired_t(other, reference)
        hits += low <= difference <= high
    return Measured("coverage, one score (paired t)", f"n = {n}", hits, reps)


def task_average(n: int, rho: float = 0.8, reps: int = 2000, seed: int = 0, tasks: int = 7,
                 task_sd: float = 0.8) -> Measured:
    """Coverage of the paired t-interval of the seven-task average, the tasks' differences correlated `rho`
    within a seed (one model per seed) and each task's true difference its own."""
    rng = np.random.default_rng(seed)
    truth = np.linspace(-0.2, 0.8, tasks)
    covariance = task_sd ** 2 * ((1.0 - rho) * np.eye(tasks) + rho * np.ones((tasks, tasks)))
    hits = 0
    for _ in range(reps):
        reference = rng.normal(75.0, 1.0, (n, tasks))
        other = reference + rng.multivariate_normal(truth, covariance, n)
        low, high, _ = paired_t(other.mean(axis=1), reference.mean(axis=1))
        hits += low <= truth.mean() <= high
    return Measured(f"coverage, seven-task average (paired t), task differences correlated {rho:g}",
                    f"n = {n}", hits, reps)


def _configurations(rng: np.random.Generator, means: np.ndarray, n: int, seed_sd: float,
                    noise_sd: float) -> np.ndarray:
    """(configurations, seeds) scores: a seed effect shared by all configurations plus each trial's noise."""
    return 76.0 + means[:, None] + rng.normal(0.0, seed_sd, n)[None, :] + rng.normal(0.0, noise_sd, (len(means), n))


def chosen_best(k: int = 9, n: int = 4, reps: int = 2000, seed: int = 0, seed_sd: float = 1.0,
                noise_sd: float = 0.3) -> Measured:
    """Family-wise false claims of MCB against the data-chosen best, k equal configurations: a study counts when
    any configuration's interval misses its truth (0)."""
    rng = np.random.default_rng(seed)
    false = 0
    for _ in range(reps):
        low, high, _ = mcb_bounds(_configurations(rng, np.zeros(k), n, seed_sd, noise_sd))
        false += bool(np.any((low > 0) | (high < 0)))
    return Measured("family-wise false claims, data-chosen best (MCB)", f"{k} equal configurations, n = {n}",
                    false, reps)


def named_reference(k: int = 9, n: int = 4, reps: int = 2000, seed: int = 0, seed_sd: float = 1.0,
                    noise_sd: float = 0.3) -> Measured:
    """Family-wise false claims of Holm's adjusted p against a named reference, k equal configurations: a study
    counts when Holm rejects any of its k - 1 comparisons, which is when its smallest p is below alpha / (k - 1)
    (Holm's first step; `holm_agrees` checks that rule against `holm` itself, which is slow to call thousands of
    times: statsmodels collects garbage on each call)."""
    rng = np.random.default_rng(seed)
    false = 0
    for _ in range(reps):
        false += min(_named_p_values(rng, k, n, seed_sd, noise_sd)) < (1.0 - LEVEL) / (k - 1)
    return Measured("family-wise false claims, named reference (Holm)", f"{k} equal configurations, n = {n}",
                    false, reps)


def holm_agrees(k: int = 9, n: int = 4, reps: int = 200, seed: int = 1) -> bool:
    """Whether `holm` rejects some comparison exactly when the smallest p is below alpha / (k - 1), on `reps`
    studies drawn as `named_reference` draws them (half of them with a real difference, so both answers occur)."""
    rng = np.random.default_rng(seed)
    gc.freeze()  # statsmodels' Holm runs gc.collect() on each call: the objects alive before the loop are left out
    try:
        for i in range(reps):
            p = _named_p_values(rng, k, n, 1.0, 0.3, shift=0.6 if i % 2 else 0.0)
            if (min(holm(p)) < 1.0 - LEVEL) != (min(p) < (1.0 - LEVEL) / (k - 1)):
                return False
        return True
    finally:
        gc.unfreeze()


def _named_p_values(rng: np.random.Generator, k: int, n: int, seed_sd: float, noise_sd: float,
                    shift: float = 0.0) -> list[float]:
    """The paired t-tests' p of configurations 1..k-1 against configuration 0 (`shift` added to the last)."""
    means = np.zeros(k)
    means[-1] = shift
    scores = _configurations(rng, means, n, seed_sd, noise_sd)
    return [paired_t(scores[i], scores[0])[2] for i in range(1, k)]


def chosen_best_unequal(n: int = 4, reps: int = 2000, seed: int = 0, seed_sd: float = 1.0,
                        noise_sd: float = 0.3) -> Measured:
    """Simultaneous coverage of MCB where the truth is not 0: nine configurations 0.1 apart."""
    rng = np.random.default_rng(seed)
    means = np.linspace(0.0, 0.8, 9)
    theta = np.array([means[i] - np.delete(means, i).max() for i in range(len(means))])
    hits = 0
    for _ in range(reps):
        low, high, _ = mcb_bounds(_configurations(rng, means, n, seed_sd, noise_sd))
        hits += bool(np.all((low <= theta) & (theta <= high)))
    return Measured("simultaneous coverage, data-chosen best (MCB), 9 configurations 0.1 apart", f"n = {n}",
                    hits, reps)


# The MTD values of the project's studies (MoCoSE eq. 4, d = 1/(1-eta) + K/B): mtd_grid.yaml's 36
# configurations, ema_decay.yaml's six decays at K/B = 8, and the quickstart's eight trials.
STUDY_MTDS = {
    "mtd_grid": [1 / (1 - eta) + k / b for eta, k, b in itertools.product((0.75, 0.85, 0.9), (128, 256, 512, 1024),
                                                                          (32, 64, 128))],
    "ema_decay": [1 / (1 - eta) + 8 for eta in (0.5, 0.8, 0.85, 0.9, 0.95, 0.99)],
    "quickstart": [2 + 8, 2 + 4, 2 + 6, 2 + 8, 10 + 8, 10 + 4, 10 + 6, 10 + 8],
}
PAPER_BEST_MTD = 14.67  # MoCoSE section 5.7, bert-base


def peak(study: str, seeds: int, reps: int = 1000, seed: int = 0, curvature: float = 0.8,
         noise_sd: float = 0.5) -> Measured:
    """Coverage of the best MTD's interval: scores 77 - curvature (log d - log 14.67)^2 + noise at the study's
    MTD values, each configuration run with `seeds` seeds; the truth is the parabola's argmax in the range."""
    rng = np.random.default_rng(seed)
    x = np.repeat(np.asarray(STUDY_MTDS[study], dtype=float), seeds)
    u, centre = np.log(x), np.log(PAPER_BEST_MTD)
    truth = float(np.exp(np.clip(centre, u.min(), u.max())))
    hits = 0
    for _ in range(reps):
        fit = fit_peak(x, 77.0 - curvature * (u - centre) ** 2 + rng.normal(0.0, noise_sd, len(u)))
        hits += fit.ci_low * (1 - 1e-9) <= truth <= fit.ci_high * (1 + 1e-9)
    return Measured("coverage, best MTD (Fieller)", f"{study}, {seeds} seed{'s' if seeds != 1 else ''} "
                    f"({len(x)} trials)", hits, reps)


def all_measurements(reps: int = 2000) -> list[Measured]:
    """Every scenario of the module docstring at the seed counts users run."""
    out = [one_score(n, reps) for n in (3, 4, 5, 10)]
    out += [task_average(n, rho, reps) for rho in (0.5, 0.8) for n in (3, 5, 10)]
    out += [chosen_best(reps=reps), named_reference(reps=reps), chosen_best_unequal(n=3, reps=reps),
            chosen_best_unequal(n=5, reps=reps)]
    out += [peak(study, seeds, reps=reps // 2) for study, seeds in
            (("mtd_grid", 1), ("mtd_grid", 3), ("ema_decay", 3), ("ema_decay", 5), ("quickstart", 1))]
    return out


def markdown(measurements: list[Measured]) -> str:
    lines = ["| what | setting | rate | studies |", "| --- | --- | ---: | ---: |"]
    lines += [f"| {m.what} | {m.setting} | {m.rate:.1%} | {m.reps:,} |" for m in measurements]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(all_measurements()))
