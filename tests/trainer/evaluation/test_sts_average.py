"""The average is the seven-task STS average and nothing else (trainer.evaluation.sts_average).

A study that evaluates STS-B test alone (the quickstart, `eval.final_tasks: [STSBenchmark]`) shows that score
under its own name: no summary field, trials.csv column, Optuna attribute, table column or figure label
calls it the average, and no paper value (all of them seven-task averages) is drawn beside it. Summaries
written before the rule (`avg` = the STS-B score) read the same way. The seven-task case keeps its avg
everywhere.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis import figure_data, figures, report, tables
from analysis.load import load_results
from sweep.commands.status import seven_task_average
from tests import fake_train
from tests import synthetic_results as fx
from tests.helpers import first_fast
from trainer.config import RunConfig
from trainer.evaluation.sts_average import SEVEN_TASK_LABEL
from trainer.summary import Summary, metric_value, optuna_attrs, summary_from_attrs, trials_csv_row

NAMES_THE_AVERAGE = re.compile(r"\bavg\b|\baverage\b", re.IGNORECASE)
PARAMS = ["ema.decay", "queue.size"]


def fake_summary(final_tasks: list[str] | None) -> dict[str, Any]:
    config = RunConfig.from_dict({"ema": {"decay": 0.9}, "eval": {"final_tasks": final_tasks}})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAKE_TRAIN_STEPS", "1")
        patch.setenv("FAKE_TRAIN_STEP_S", "0")
        return fake_train.train(config).to_json()  # as summary.json holds it


def legacy(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary as the trainer wrote it before the rule: `avg` = the mean of the tasks that ran."""
    test = summary["test"]
    return {**summary, "test": {**test, "avg": sum(test.values()) / len(test)}}


def fields_naming_the_average(data: Any, path: str = "") -> list[str]:
    """Every key (nested) of a summary whose name says avg/average."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            if NAMES_THE_AVERAGE.search(str(key)):
                found.append(f"{path}{key}")
            found += fields_naming_the_average(value, f"{path}{key}.")
    return found


# ---- summary, trials.csv, Optuna ------------------------------------------------------------------------
@pytest.mark.parametrize("written", ["now", "before the rule"])
def test_one_task_trials_csv_row_and_optuna_attributes_name_the_task(written):
    summary = fake_summary(["STSBenchmark"])
    assert fields_naming_the_average(summary) == [] and set(summary["test"]) == {"STSBenchmark"}
    assert summary["test_label"].startswith("STS-B test Spearman x100 only")
    if written == "before the rule":
        summary = legacy(summary)
    stsb = summary["test"]["STSBenchmark"]

    record = Summary.from_json(summary)  # read as the sweep reads summary.json
    row = trials_csv_row(record)
    assert row["STSBenchmark"] == stsb and row["avg"] is None
    assert metric_value(record, "avg") is None and metric_value(record, "STSBenchmark") == stsb

    attrs = optuna_attrs(record)
    assert attrs["STSBenchmark"] == stsb
    assert [name for name in attrs if NAMES_THE_AVERAGE.search(name)] == []
    assert "avg" not in summary_from_attrs({**attrs, "avg": stsb}).test  # an Optuna record from before
    assert seven_task_average({"STSBenchmark": str(stsb), "avg": str(stsb)}) == ""  # sweep status


def test_seven_task_summary_keeps_its_average_everywhere():
    summary = fake_summary(None)
    assert set(summary["test"]) == {*fx.STS_TASKS, "avg"} and summary["test_label"] == SEVEN_TASK_LABEL
    avg = summary["test"]["avg"]
    record = Summary.from_json(summary)
    assert trials_csv_row(record)["avg"] == avg and metric_value(record, "avg") == avg
    assert optuna_attrs(record)["avg"] == avg
    assert summary_from_attrs(optuna_attrs(record)).test["avg"] == avg
    assert seven_task_average({**{t: "1.0" for t in fx.STS_TASKS}, "avg": "2.0"}) == "2.0"


def test_a_subset_of_tasks_has_no_average():
    summary = fake_summary(["STSBenchmark", "SICKRelatedness", "TREC"])
    assert set(summary["test"]) == {"STSBenchmark", "SICKRelatedness"} and "transfer" in summary
    assert "STS-B, SICK-R test" in summary["test_label"]
    before = Summary.from_json(legacy(summary))
    assert trials_csv_row(before)["avg"] is None and "avg" not in optuna_attrs(before)


# ---- tables and figures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module",
                params=first_fast("summaries", "summaries before the rule", "trials.csv before the rule"))
def one_task_dir(request, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("results") / "one_task"
    legacy_avg = request.param != "summaries"
    return fx.one_task_study(folder, legacy_avg=legacy_avg, summaries=request.param != "trials.csv before the rule")


def test_one_task_tables_have_no_average_column(one_task_dir):
    table = load_results(one_task_dir)
    assert "avg" not in table.columns or table["avg"].isna().all()
    header = tables.markdown_table(table, by=PARAMS).splitlines()[0]
    assert header == "| ema.decay | queue.size | STS-B | n |"
    assert "no Avg: it is the mean of the seven STS tasks" in tables.markdown_table(table, by=PARAMS)
    latex_header = tables.latex_table(table, by=PARAMS).splitlines()[5]
    assert latex_header == "ema.decay & queue.size & STS-B & n \\\\"
    assert [c for c in tables.score_table(table, by=PARAMS).columns if NAMES_THE_AVERAGE.search(c)] == []


def figure_texts(fig) -> dict[str, list[str]]:
    """The words on a figure, from matplotlib's objects: what labels the score, and the legends."""
    labels, legends = [fig.get_suptitle()], []
    for ax in fig.axes:
        labels += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]  # a colorbar is an axes: its label too
        legend = ax.get_legend()
        if legend is not None:
            legends += [legend.get_title().get_text(), *(t.get_text() for t in legend.get_texts())]
    return {"labels": [t for t in labels if t], "legends": legends}


def one_task_figures(folder: Path) -> list[tuple[str, Any, pd.DataFrame]]:
    table = load_results(folder)
    score = report.fallback_score(table)
    assert score == "STSBenchmark"
    knobs = [*PARAMS, "queue.initial_size"]  # calls for the queue heat map too (MoCoSE Table 7)
    drawn = [(name, *draw()) for name, draw in report.applicable_figures(table, PARAMS, score, knobs=knobs)]
    assert {name for name, _, _ in drawn} == {"score_vs_mtd", "align_uniform_vs_mtd", "ema_decay", "queue_heatmap",
                                              "paired_differences"}
    return drawn


def test_one_task_figures_name_the_score_and_draw_no_paper_average(one_task_dir):
    for name, fig, data in one_task_figures(one_task_dir):
        texts = figure_texts(fig)
        assert [t for t in texts["labels"] if NAMES_THE_AVERAGE.search(t)] == [], name
        if name == "paired_differences":  # differences between configurations: no paper value to draw
            assert fig.axes[0].get_xlabel() == "\u0394 STS-B test Spearman x100"
            continue
        # no paper score is drawn; the paper's best MTD (an x position) says what it is best by
        assert "paper" not in set(data["series"]), name
        legend_average = [t for t in texts["legends"] if NAMES_THE_AVERAGE.search(t)]
        assert legend_average in ([], ["paper best MTD 14.67 (bert-base, by the seven-task average)"]), name
        if name == "align_uniform_vs_mtd":
            continue  # alignment and uniformity: no score, no paper values
        score_axis = fig.axes[-1] if name == "queue_heatmap" else fig.axes[0]  # the heat map's colour bar
        assert score_axis.get_ylabel() == "STS-B test Spearman x100", name
        assert any(figure_data.PAPER_LEFT_OUT in t for t in texts["labels"] + texts["legends"]), name
        if name == "queue_heatmap":
            assert data["paper"].isna().all() and not any("paper" in t.get_text() for t in fig.axes[0].texts)


def test_seven_task_figures_keep_the_average_and_the_paper_values(tmp_path):
    table = load_results(fx.mtd_study(tmp_path / "seven"))
    for fig, data in (figures.figure_score_vs_mtd(table, by=PARAMS), figures.figure_ema_decay(table)):
        assert fig.axes[0].get_ylabel() == "STS avg Spearman x100" and "paper" in set(data["series"])
        assert figure_data.PAPER_LEFT_OUT not in str(figure_texts(fig))


def test_analyze_writes_the_one_task_study_under_the_task_name(one_task_dir, tmp_path):
    out = tmp_path / "figures"
    report.analyze(one_task_dir, out_dir=out, formats=["png"])
    assert "Avg" not in (out / "scores.md").read_text().splitlines()[0]
    assert not [c for c in pd.read_csv(out / "scores.csv").columns if NAMES_THE_AVERAGE.search(c)]
    drawn = pd.read_csv(out / "score_vs_mtd.csv")
    assert "paper" not in set(drawn["series"]) and drawn.loc[drawn["series"] == "measured", "mean"].notna().all()
