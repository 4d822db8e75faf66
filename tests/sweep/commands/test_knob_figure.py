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
    by_value = {row["x_label"]: (row["mean"], row["std"], row["n"])
                for _, row in data[data["panel"] == "score"].iterrows()}  # the score panel (below it: differences)
    assert by_value == {"0.05": (72.5, 1.0, 3), "0.1": (73.0, 1.0, 3)}
    assert "temperature" in figure.axes[0].get_title()


def test_analysis_knobs_may_name_any_number_key_and_nothing_else(tmp_path):
    import pytest

    from sweep.spec import load_study
    from tests.helpers import study_file
    from trainer.errors import UserError

    def study(knobs):
        return study_file(tmp_path, {"name": "named", "base": {"model": "embedded"}, "analysis": {"knobs": knobs}})

    assert load_study(study(["temperature"])).analysis.knobs == ["temperature"]
    with pytest.raises(UserError, match=r"key 'analysis.knobs\[0\]': expected a knob a figure is drawn for .* or a "
                                        r"number config key, got 'pooler'"):
        load_study(study(["pooler"]))


def test_the_knob_figure_is_not_drawn_where_no_such_key_varies():
    from analysis.registry import FIGURE

    table = pd.DataFrame({"key": ["a", "b"], "seed": [1, 2], "method": ["simcse"] * 2, "temperature": [0.05] * 2,
                          "avg": [70.0, 71.0]})
    assert not FIGURE["knob"].applies(table, "avg")
    assert FIGURE["knob"].applies(table.assign(temperature=[0.05, 0.1]), "avg")
