"""The figures' data steps (analysis.figure_data), without matplotlib: series, order, paper points, notes and the
texts' budgets, each checked against a computation written out here."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from analysis import figure_data, knob_differences, mtd_figures, paired, paper_values
from analysis.registry import FIGURE
from tests.helpers import REPO
from tests.written_out import holm_written_out


def _ablation_table() -> pd.DataFrame:
    rows = [{"method": "mocose", "ema.decay": eta, "queue.size": size, "seed": seed,
             "avg": 75.0 + 2 * eta + size / 1024 + 0.1 * seed}
            for eta in (0.9, 0.5, 0.8) for size in (256, 512) for seed in range(3)]
    return pd.DataFrame(rows)


def test_the_data_steps_import_no_matplotlib():
    code = "import sys, analysis.figure_data; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_an_ablation_is_one_series_per_other_key_with_its_seed_means_order_and_paper_points():
    table = _ablation_table()
    data = figure_data.ablation_data(table, "ema.decay", "avg", title="EMA decay", xlabel="eta",
                                     x_format=figure_data.format_number, by=["ema.decay", "queue.size"],
                                     paper=paper_values.MOCOSE_TABLE3_EMA, paper_label="paper")
    assert data.position == {"0.5": 0, "0.8": 1, "0.9": 2}
    (panel,) = data.panels
    *measured, paper = panel.series
    assert [s.label for s in measured] == ["queue.size=256", "queue.size=512"]
    expected = table.groupby(["queue.size", "ema.decay"])["avg"].agg(["mean", "std", "count"])
    for series, size in zip(measured, (256, 512)):
        assert series.mean == pytest.approx(tuple(expected.loc[size, "mean"]))
        assert series.std == pytest.approx(tuple(expected.loc[size, "std"]))
        assert series.n == tuple(expected.loc[size, "count"])
        assert series.join == (True, True, True)
    # two series dodged symmetrically about each tick, and the legend says so
    assert [s.x[0] for s in measured] == pytest.approx([-0.12 / 2, 0.12 / 2])
    assert "dodged" in data.note and data.note.startswith("mean ± 1 std over 3 seeds")
    assert paper.style == -1 and paper.x == (0, 1, 2) and paper.mean == (75.76, 75.19, 76.05)
    assert not panel.show_n and not panel.rotate


def test_beside_another_score_the_paper_is_left_out_and_said_to_be():
    table = _ablation_table().assign(STSBenchmark=lambda t: t["avg"] + 1)
    data = figure_data.ablation_data(table, "ema.decay", "STSBenchmark", title="t", xlabel="x",
                                     x_format=figure_data.format_number, by=["ema.decay"],
                                     paper=paper_values.MOCOSE_TABLE3_EMA)
    assert [s.style for s in data.panels[0].series] == [0] and (data.frame["series"] != "paper").all()
    assert figure_data.PAPER_LEFT_OUT in data.note and data.panels[0].ylabel == "STS-B test Spearman x100"


def test_texts_are_wrapped_to_their_budget_keeping_brackets_whole():
    text = "Queue size x initial queue size (MoCoSE Table 7 / Fig. 12)"
    chars = figure_data.budget(2.0, 8.0)
    assert chars == int(2.0 * 72 / (8.0 * figure_data.EM_WIDTH))
    wrapped = figure_data.wrap(text, 2.0, 8.0)
    assert wrapped.replace("\n", " ") == text
    assert all(len(line) <= chars for line in wrapped.split("\n"))
    assert "(MoCoSE Table 7 / Fig. 12)" in wrapped.split("\n")
    assert figure_data.wrap("mean ± 1 std over 2 seeds", 1.0, 7.0).count("2 seeds") == 1  # never "2\nseeds"


def test_crowded_tick_labels_break_at_their_natural_breaks_then_stand_upright():
    slices = ["0-512", "256-768", "0-256+768-1024", "all"]
    assert figure_data.fit_ticks(slices, 10.0) == (slices, False)
    broken, rotate = figure_data.fit_ticks(slices, 2.5)
    assert broken[2] == "0-256+\n768-1024" and not rotate
    assert figure_data.fit_ticks(["a-long-label-without-breaks"] * 6, 1.5)[1]


def test_the_heat_map_cells_are_the_seed_means_with_the_paper_in_brackets():
    rows = [{"method": "mocose", "queue.size": k, "queue.initial_size": int(k * f), "seed": s,
             "avg": 70 + k / 256 + 4 * f + 0.2 * s}
            for k in (256, 512) for f in (0.0, 0.5) for s in range(2)]
    table = pd.DataFrame(rows)
    data = figure_data.heatmap_data(FIGURE["queue_heatmap"], table, "avg", None, "single")
    assert data.rows == ("w.o. init (0)", "K/2") and data.columns == ("256", "512")
    expected = table.assign(f=table["queue.initial_size"] / table["queue.size"]).groupby(["f", "queue.size"])["avg"]
    np.testing.assert_allclose(data.matrices[0], expected.mean().unstack().to_numpy())
    texts = {(i, j): text for i, j, text, _ in data.texts[0]}
    assert texts[(1, 1)].split("\n")[-1] == f"[{paper_values.MOCOSE_TABLE7_QUEUE_INIT[(0.5, 512)]:.2f}]"
    assert 4.5 <= data.cell_points <= 6.5


def test_a_knob_axis_draws_the_paper_only_where_its_condition_holds_and_builds_its_column_from_parts():
    table = _ablation_table()
    constant = figure_data.axis_data(FIGURE["ema_decay"], table.assign(**{"ema.schedule": "constant"}))
    cosine = figure_data.axis_data(FIGURE["ema_decay"], table.assign(**{"ema.schedule": "cosine"}))
    assert constant.panels[0].series[-1].style == -1 and constant.panels[0].xlabel == "EMA decay eta"
    assert [s.style for s in cosine.panels[0].series] == [0, 1] and "eta0" in cosine.panels[0].xlabel
    depth = figure_data.axis_data(FIGURE["head_depth"], table.assign(**{"heads.predictor_layers": 3}))
    assert depth.panels[0].ticks == ("1/3",)  # projection layers: the default 1


def test_the_mtd_data_steps_give_series_trends_and_the_papers_marks():
    rows = [{"method": "mocose", "mtd": mtd, "batch_size": batch, "seed": seed,
             "avg": 76 - (np.log(mtd) - np.log(14)) ** 2 + 0.05 * seed}
            for mtd in (5.0, 10.0, 14.0, 20.0, 40.0) for batch in (32, 64) for seed in range(2)]
    table = pd.DataFrame(rows)
    data = mtd_figures.score_vs_mtd(FIGURE["score_vs_mtd"], table, by=["mtd", "batch_size"])
    (panel,) = data.panels
    points = panel.series[0]
    assert points.trend is not None and points.trend.fit.best_x == pytest.approx(14, rel=0.05)
    assert panel.log_x and panel.lines[0][0] == paper_values.BEST_MTD["bert-base"]
    assert panel.series[-1].style == -1 and data.frame.attrs["stats"]["best_mtd"] == points.trend.fit.best_x
    by_batch = mtd_figures.score_vs_mtd_by_batch(FIGURE["score_vs_mtd_by_batch"], table)
    assert [s.label for s in by_batch.panels[0].series] == ["B=32", "B=64"] and "lines: quadratic" in by_batch.note


def _many_values(count: int, seeds: int = 1) -> pd.DataFrame:
    """A grid of `count` learning rates 1e-7, 2e-7, ... (the bookkeeping benchmark's study), `seeds` seeds each."""
    return pd.DataFrame([{"method": "mocose", "optim.lr": (i + 1) * 1e-7, "seed": seed,
                          "avg": 70.0 + (i % 97) / 10 + 0.2 * seed} for i in range(count) for seed in range(seeds)])


def test_a_knob_of_a_thousand_values_labels_twelve_evenly_the_first_and_last_among_them():
    table = pd.DataFrame([{"queue.size": size, "seed": 0, "avg": 70.0 + size / 100} for size in range(1, 1001)])
    data = figure_data.ablation_data(table, "queue.size", "avg", title="K", xlabel="K",
                                     x_format=figure_data.format_number, by=["queue.size"])
    (panel,) = data.panels
    # position i * 999 // 11 for i = 0 .. 11, the value there 1 more (sizes 1 .. 1000 in order)
    at = [0, 90, 181, 272, 363, 454, 544, 635, 726, 817, 908, 999]
    assert figure_data.labelled(1000) == at
    assert len(panel.ticks) == 1000  # one per value: every point keeps its place
    assert {i: tick for i, tick in enumerate(panel.ticks) if tick is not None} == {i: str(i + 1) for i in at}
    assert panel.series[0].x == tuple(range(1000))
    few = ["a", "b", "c"] * 4  # twelve values or fewer: every one labelled, as before
    assert figure_data.fit_ticks(few, 3.0) == (few, False)
    assert figure_data.fit_ticks(few + ["d"], 3.0)[0] == few[:11] + [None, "d"]  # i * 12 // 11: 0 .. 10, then 12


@pytest.mark.parametrize("count, seeds", [(1000, 1), (30, 3)])
def test_the_drawn_knob_figure_sets_a_tick_only_where_its_data_step_put_a_label(count, seeds):
    """Each panel (with three seeds the paired one too) draws the labels its data step chose, no more."""
    from analysis.figures import figure_knob  # (matplotlib: this module's other tests import none)

    fig, _ = figure_knob(_many_values(count, seeds), "avg", by=["optim.lr"], reference={"optim.lr": 1e-7})
    at = figure_data.labelled(count)
    assert len(fig.axes) == (1 if seeds == 1 else 2) and len(at) == min(count, 12)
    for ax in fig.axes:
        labels = [label.get_text() for label in ax.get_xticklabels()]
        assert list(ax.get_xticks()) == at and labels == [figure_data.format_number((i + 1) * 1e-7) for i in at]
        assert ax.get_xlim() == (-0.5, count - 0.5)


def test_every_data_step_the_statistics_and_the_report_import_no_matplotlib():
    # analysis.report: the dry run reads the finished trials' seed spread through it, and draws nothing
    modules = "analysis.figure_data, analysis.mtd_figures, analysis.knob_differences, analysis.paired, analysis.report"
    code = f"import sys, {modules}; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_the_paired_figure_is_a_row_per_configuration_with_the_tables_interval_and_holm():
    rng = np.random.default_rng(7)
    seed_effect = rng.normal(0.0, 1.0, 4)
    shifts = {0.5: 0.0, 0.8: 1.5, 0.9: 0.05}  # eta 0.5 is the named reference
    table = pd.DataFrame([{"method": "mocose", "ema.decay": eta, "seed": seed,
                           "avg": 76.0 + shift + seed_effect[seed] + rng.normal(0.0, 0.2)}
                          for eta, shift in shifts.items() for seed in range(4)])
    reference = paired.reference_configuration(table, ["ema.decay"], "avg", {"ema.decay": 0.5})
    rows = knob_differences.paired_rows(table, ["ema.decay"], reference)

    by_eta = {eta: table[table["ema.decay"] == eta].set_index("seed")["avg"].sort_index() for eta in shifts}
    tests = {eta: scipy_stats.ttest_rel(by_eta[eta].to_numpy(), by_eta[0.5].to_numpy()) for eta in (0.8, 0.9)}
    adjusted = dict(zip(tests, holm_written_out(np.array([tests[eta].pvalue for eta in tests]))))
    assert adjusted[0.8] < 0.05 < adjusted[0.9]  # both kinds of mark
    assert rows.labels == ("0.8", "0.9")
    marks = rows.differences.marks
    assert [place for place, *_ in marks] == [1, 0]  # the first row at the top
    for label, (_, mean, bar, stands, _, _) in zip(rows.labels, marks):
        eta = float(label)
        interval = tests[eta].confidence_interval(0.95)
        assert mean == pytest.approx((by_eta[eta] - by_eta[0.5]).mean())
        assert (mean - bar[0], mean + bar[1]) == (pytest.approx(interval.low), pytest.approx(interval.high))
        assert stands == (adjusted[eta] < 0.05)
    assert rows.differences.kinds[0][0] == "mean difference, 95% CI (paired t); p (Holm) < 0.05"
    assert "reference: 0.5 (the study's reference)" in rows.note and "over 4 shared seeds" in rows.note
    assert list(rows.frame["mean_difference"]) == pytest.approx([mean for _, mean, *_ in marks])


def test_the_paired_figure_names_no_interval_where_no_row_has_one():
    """Two seeds per configuration: every row is a mean alone; the note says so and names no interval, whether
    the reference is named (paired t) or the best mean (MCB)."""
    table = pd.DataFrame([{"method": "mocose", "ema.decay": eta, "seed": seed, "avg": 76.0 + shift + 0.1 * seed}
                          for eta, shift in {0.5: 0.0, 0.8: 1.5, 0.9: 0.05}.items() for seed in range(2)])
    for named in ({"ema.decay": 0.5}, None):
        reference = paired.reference_configuration(table, ["ema.decay"], "avg", named)
        rows = knob_differences.paired_rows(table, ["ema.decay"], reference)
        assert all(bar is None for _, _, bar, *_ in rows.differences.marks) and rows.differences.kinds == ()
        assert "no bar: 2 shared seeds, no interval" in rows.note
        assert "interval" not in rows.note.replace("no interval", ""), rows.note
