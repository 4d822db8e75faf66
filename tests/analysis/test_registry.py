"""analysis.registry: each figure's knobs, methods, data condition and drawing function, declared once."""

from __future__ import annotations

import inspect

import pandas as pd
import pytest

from analysis import figures, registry
from analysis.load import load_results
from tests import synthetic_results as fx
from tests.helpers import first_fast


def test_every_entry_names_its_data_step_once_and_is_drawn_by_its_name():
    names = [entry.name for entry in registry.FIGURES]
    assert len(names) == len(set(names))
    for entry in registry.FIGURES:
        step = entry.function()
        assert callable(step) and list(inspect.signature(step).parameters)[:2] == ["entry", "trials"], entry.step
        assert getattr(figures, f"figure_{entry.name}").args == (entry,)


def test_a_figure_is_called_for_only_when_every_group_of_its_knobs_is_varied():
    assert "queue_heatmap" not in registry.figures_called_for(["queue.size"])
    assert "queue_heatmap" in registry.figures_called_for(["queue.size", "queue.initial_size"])
    assert "head_depth" in registry.figures_called_for(["heads.predictor_layers"])
    assert registry.figures_called_for(["fgsm.eps"]) == ["fgsm_eps"]
    assert set(registry.KNOWN_KNOBS) >= {"mtd", "mix.lam", "gaussian.count"}


def _with_other_method(table: pd.DataFrame, method: str) -> pd.DataFrame:
    """`table` and a copy of its trials under `method`, each 5 points better (they would move every point)."""
    intruders = table.copy()
    intruders["method"] = method
    for column in ("avg", "STSBenchmark"):
        intruders[column] = intruders[column] + 5.0
    return pd.concat([table, intruders], ignore_index=True)


@pytest.mark.parametrize("name, study, intruder", first_fast(
    ("queue_slices", fx.slices_study, "simcse"),
    ("gaussian_m", fx.gaussian_study, "mix"),
    ("queue_heatmap", fx.heatmap_study, "gs"),
))
def test_a_figure_draws_the_methods_its_entry_names_and_no_other(name, study, intruder, tmp_path):
    entry = registry.FIGURE[name]
    assert intruder not in entry.methods
    table = load_results(study(tmp_path / name))
    _, alone = figures.draw(entry, table)
    _, mixed = figures.draw(entry, _with_other_method(table, intruder))
    pd.testing.assert_frame_equal(alone, mixed)


def test_a_figure_applies_only_where_its_methods_have_trials_and_its_data_suffices(tmp_path):
    gaussian = load_results(fx.gaussian_study(tmp_path / "gs"))  # GS-InfoNCE only: no MoCoSE, no distances
    assert registry.FIGURE["gaussian_m"].applies(gaussian, "avg")
    assert not registry.FIGURE["queue_slices"].applies(gaussian, "avg")
    assert not registry.FIGURE["score_vs_mtd"].applies(gaussian, "avg")
    assert not registry.FIGURE["gaussian_m"].applies(gaussian.assign(method="simcse"), "avg")  # SimCSE is its x=0
    assert registry.FIGURE["batch_size"].applies(gaussian, "avg")  # every method's trials

    mtd = load_results(fx.mtd_study(tmp_path / "mtd"))
    assert registry.FIGURE["score_vs_mtd"].applies(mtd, "avg")
    two_distances = mtd[mtd["mtd"].round(6).isin(sorted(mtd["mtd"].round(6).unique())[:2])]
    assert not registry.FIGURE["score_vs_mtd"].applies(two_distances, "avg")
