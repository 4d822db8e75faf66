"""Per-task score tables: numbers against numpy, mean ± std formatting, Markdown and LaTeX."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.load import load_results
from analysis.tables import format_mean_std, latex_table, markdown_table, score_table
from tests import synthetic_results as fx

TASK_HEADERS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg"]


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> pd.DataFrame:
    return load_results(fx.mtd_study(tmp_path_factory.mktemp("results") / "mtd"))


def test_format_mean_std():
    assert format_mean_std(76.254, 0.4149) == "76.25 ± 0.41"
    assert format_mean_std(76.0, 0.0) == "76.00 ± 0.00"
    assert format_mean_std(76.256, float("nan")) == "76.26"  # one seed: the mean alone
    assert format_mean_std(float("nan"), 1.0) == "-"
    assert format_mean_std(76.25, 0.41, latex=True) == "76.25 $\\pm$ 0.41"


def test_score_table_values_match_numpy(table):
    numbers = score_table(table, by=["ema.decay", "queue.size"])
    assert len(numbers) == len(fx.MTD_GRID)
    for _, row in numbers.iterrows():
        group = table[(table["ema.decay"] == row["ema.decay"]) & (table["queue.size"] == row["queue.size"])]
        assert row["n"] == len(group) == 3
        for task in ("STS12", "SICKRelatedness", "avg"):
            assert row[f"{task}_mean"] == pytest.approx(np.mean(group[task]))
            assert row[f"{task}_std"] == pytest.approx(np.std(group[task], ddof=1))


def test_score_table_infers_the_swept_parameters(table):
    assert list(score_table(table).columns[:2]) == ["ema.decay", "queue.size"]


def test_markdown_table(table):
    text = markdown_table(table, by=["ema.decay", "queue.size"])
    lines = text.splitlines()
    assert lines[0] == "| ema.decay | queue.size | " + " | ".join(TASK_HEADERS) + " | n |"
    group = table[(table["ema.decay"] == 0.85) & (table["queue.size"] == 512)]
    want = f"{np.mean(group['avg']):.2f} ± {np.std(group['avg'], ddof=1):.2f}"
    row = next(line for line in lines if line.startswith("| 0.85 | 512 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-2] == want and cells[-1] == "3"
    assert cells[2] == f"{np.mean(group['STS12']):.2f} ± {np.std(group['STS12'], ddof=1):.2f}"
    # the paper's main result as a reference row (the study's method is MoCoSE)
    assert any(line.startswith("| MoCoSE (paper, bert-base) |") and "77.27" in line for line in lines)


def test_single_seed_rows_show_the_mean_only(tmp_path):
    trial = fx.make_trial(fx.base_config(method="mix"), 0, 77.0)
    text = markdown_table(load_results(fx.write_results(tmp_path / "one", [trial], ["mix.lam"])), paper=True)
    row = [line for line in text.splitlines() if line.startswith("| this study |")][0]
    assert "±" not in row and f"{trial['test']['avg']:.2f}" in row
    assert "MixCSE (paper, bert-base)" in text and "77.66 ± 0.61" in text


def test_latex_table(tmp_path):
    trials = [fx.make_trial(fx.base_config(batch_size=b), s, 76.0 + s) for b in (32, 64) for s in (0, 1)]
    table = load_results(fx.write_results(tmp_path / "batch", trials, ["batch_size"]))
    text = latex_table(table)
    assert "\\begin{tabular}{l" in text and "\\toprule" in text and "\\bottomrule" in text
    assert "batch\\_size & STS12" in text  # underscores escaped
    group = table[table["batch_size"] == 32]
    assert f"{np.mean(group['avg']):.2f} $\\pm$ {np.std(group['avg'], ddof=1):.2f}" in text
    body = [line for line in text.splitlines() if line.startswith("32 &")]
    assert len(body) == 1 and body[0].endswith("\\\\") and body[0].count("&") == len(TASK_HEADERS) + 1


def test_summary_json_is_the_record_and_trials_csv_a_view(tmp_path):
    """The analysis reads each trial's summary.json (scores and the full config); trials.csv adds only the
    Optuna state and the trials without a summary."""
    done = fx.make_trial(fx.base_config(), 0, 70.0)
    pending = fx.make_trial(fx.base_config(ema={"decay": 0.9}), 0, 70.0, state="RUNNING", status="")
    folder = fx.write_results(tmp_path / "view", [done, pending], ["ema.decay"])
    view = pd.read_csv(folder / "trials.csv", dtype={"key": str})
    view.loc[view["state"] == "COMPLETE", "avg"] = 1.0  # a stale view: the summary must win
    view.drop(columns=["ema.decay_end"]).to_csv(folder / "trials.csv", index=False)

    table = load_results(folder, include_failed=True)
    assert len(table) == 2
    row = table[table["state"] == "COMPLETE"].iloc[0]
    assert row["avg"] == pytest.approx(done["test"]["avg"])
    assert row["ema.decay_end"] == done["config"]["ema"]["decay_end"]  # from the summary's config
    assert list(table.loc[table["state"] == "RUNNING", "ema.decay"]) == [0.9]  # from the view alone
