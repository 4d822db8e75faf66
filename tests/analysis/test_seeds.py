"""The seeds a paired difference needs (analysis.seeds), against the power of a two-sided paired t-test written
out with scipy's noncentral t."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from analysis import seeds


def power_written_out(delta: float, sd: float, n: int) -> float:
    critical, shift = stats.t.ppf(0.975, n - 1), delta * math.sqrt(n) / sd
    lower = stats.nct.cdf(-critical, n - 1, shift)  # ~0 far out, where scipy may give NaN
    return stats.nct.sf(critical, n - 1, shift) + (0.0 if math.isnan(lower) else lower)


@pytest.mark.parametrize("target, sd", [(0.5, 0.8), (0.3, 2.4), (5.0, 0.8), (1.0, 1.0), (0.2, 0.3)])
def test_the_seeds_a_target_needs_are_the_first_whose_power_reaches_80_percent(target, sd):
    expected = next(n for n in range(2, 10_000) if power_written_out(target, sd, n) >= 0.8)
    assert seeds.seeds_needed(target, sd) == expected
    assert power_written_out(seeds.resolvable_difference(sd, expected), sd, expected) == pytest.approx(0.8, abs=1e-4)


def test_a_target_beyond_reach_and_the_defaults_source():
    assert seeds.seeds_needed(0.001, 2.4) is None  # more than MAX_SEEDS
    assert seeds.resolvable_difference(1.0, 1) is None
    spread = seeds.default_spread("avg")
    assert spread.sd == pytest.approx(math.hypot(2.32, 0.61)) and "MixCSE Table 1" in spread.source
    dev = seeds.default_spread("dev_stsb")  # no paper reports dev: STS-B test's figure, said so
    assert dev.sd == pytest.approx(math.hypot(1.44, 0.82)) and "no paper reports dev_stsb" in dev.source
