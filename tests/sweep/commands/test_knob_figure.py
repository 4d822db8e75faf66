"""The figure for any swept number key that no paper figure is for (analysis.registry's `knob` entry,
analysis.figures.figure_knob): the score along the key's values, over the trials of the methods that read it."""

from __future__ import annotations

import pandas as pd

from analysis.figures import figure_knob
from analysis.registry import figures_called_for, generic_knobs


def test_a_number_key_no_paper_figure_is_for_calls_for_the_knob_figure():
    assert figures_called_for(["temperature"]) == ["knob"]
    assert generic_knobs(["method", "variant", "temperature", "ema.decay", "pooler", "mix.lam"]) == ["temperature"]
    assert "knob" not in figures_called_for(["ema.decay"]) + figures_called_for(["method", "variant"])


def test_the_knob_figure_is_the_mean_and_spread_over_seeds_of_each_value():
    rows = [{"key": f"{tau}-{seed}", "seed": seed, "method": "simcse", "temperature": tau, "avg": 70 + 10 * tau + seed}
            for tau in (0.05, 0.1) for seed in (1, 2, 3)]
    figure, data = figure_knob(pd.DataFrame(rows), "avg", by=["temperature"])
    by_value = {row["x_label"]: (row["mean"], row["std"], row["n"]) for _, row in data.iterrows()}
    assert by_value == {"0.05": (72.5, 1.0, 3), "0.1": (73.0, 1.0, 3)}
    assert "temperature" in figure.axes[0].get_title()
