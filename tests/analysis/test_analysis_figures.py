"""Loading, statistics and figures on synthetic results folders whose answer is known.

The figures are checked through the data they return (what is drawn), never through pixels.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from analysis import figures, paper_values
from analysis.figure_data import DEFAULT_SIZE, SIZES
from analysis.load import ResultsError, load_results, slices_label
from analysis.report import analyze
from analysis.stats import fit_peak
from tests import synthetic_results as fx
from tests.helpers import REPO

SCIENCE_DOCS = REPO / "docs" / "science"

# Copied by hand from the papers' tables (MoCoSE Tables 3, 7, 8; GS-InfoNCE Table 3), as quoted in
# docs/science/mocose.md and docs/science/gs-infonce.md.
EXPECTED_TABLE3 = {0.5: 75.76, 0.8: 75.19, 0.85: 76.49, 0.9: 76.05, 0.95: 76.08, 0.99: 75.12}
EXPECTED_TABLE8 = {"0-512": 76.10, "256-768": 77.02, "512-1024": 75.71, "0-256+768-1024": 76.18, "all": 76.86}
EXPECTED_TABLE7_K512 = {0.0: 75.38, 0.25: 77.30, 0.5: 76.94, 1.0: 76.29}
EXPECTED_GS_TABLE3 = {0.5: 76.96, 1.0: 76.90, 3.0: 77.63}


@pytest.fixture(scope="module")
def mtd_dir(tmp_path_factory) -> Path:
    return fx.mtd_study(tmp_path_factory.mktemp("results") / "mtd")


@pytest.fixture(scope="module")
def mtd_table(mtd_dir) -> pd.DataFrame:
    return load_results(mtd_dir)


def expected_mtd(eta: float, size: int, batch: int = 64) -> float:
    return 1.0 / (1.0 - eta) + size / batch


# ---- loading ------------------------------------------------------------------------------------
def test_load_recomputes_mtd_and_keeps_measured_ages(mtd_table):
    assert len(mtd_table) == len(fx.MTD_GRID) * len(fx.SEEDS)
    want = [expected_mtd(eta, size) for eta, size in zip(mtd_table["ema.decay"], mtd_table["queue.size"])]
    np.testing.assert_allclose(mtd_table["mtd"], want)
    assert (mtd_table["mtd_recorded"] == 0.0).all()  # the CSV's (wrong) value is kept apart
    assert {"queue_age_mean", "queue_age_max", "mtd_measured"} <= set(mtd_table.columns)


def test_load_can_use_the_measured_distance(mtd_dir):
    measured = load_results(mtd_dir, mtd_source="measured")
    # the fixture's summaries record measured = 1/(1-eta) + the oldest queue age (8 steps): independent of K/B
    np.testing.assert_allclose(measured["mtd"], 1 / (1 - measured["ema.decay"]) + 8.0)
    with pytest.raises(ValueError, match="mtd_source"):
        load_results(mtd_dir, mtd_source="guess")


@pytest.mark.parametrize("source", ["csv_only", "summaries_only"])
def test_csv_and_summary_sources_agree(tmp_path, mtd_table, source):
    options = {"csv_file": source == "csv_only", "summaries": source == "summaries_only"}
    table = load_results(fx.mtd_study(tmp_path / "mtd", **options))
    left = mtd_table.sort_values("key").reset_index(drop=True)
    right = table.sort_values("key").reset_index(drop=True)
    assert list(left["key"]) == list(right["key"])
    for column in ("mtd", "avg", "STS12", "align", "seed", "ema.decay", "queue.size"):
        np.testing.assert_allclose(right[column].astype(float), left[column].astype(float), err_msg=column)


def test_eta_choice_and_k_choice_under_cosine_schedule_and_slices(tmp_path):
    config = fx.base_config(batch_size=256, ema={"schedule": "cosine", "decay": 0.75, "decay_end": 0.95},
                            queue={"size": 2048, "slices": ["0-512"]})
    folder = fx.write_results(tmp_path / "cos", [fx.make_trial(config, seed, 76.0, steps=200) for seed in (0, 1)],
                            ["ema.decay"], csv_file=True, summaries=False)
    t = np.arange(1, 201) / 200
    mean_eta = np.mean(0.95 - 0.2 * (np.cos(np.pi * t) + 1) / 2)
    cases = {("initial", "oldest"): 1 / 0.25 + 2.0, ("final", "oldest"): 1 / 0.05 + 2.0,
             ("mean", "oldest"): 1 / (1 - mean_eta) + 2.0, ("final", "size"): 1 / 0.05 + 8.0}
    for (eta_choice, k_choice), want in cases.items():
        table = load_results(folder, eta_choice=eta_choice, k_choice=k_choice)
        np.testing.assert_allclose(table["mtd"], want, err_msg=f"{eta_choice}/{k_choice}")
    with pytest.raises(ValueError):
        load_results(folder, eta_choice="median")


def test_failed_trials_are_left_out_unless_asked(tmp_path):
    config = fx.base_config()
    trials = [fx.make_trial(config, 0, 76.0), fx.make_trial(config, 1, 75.0, status="diverged"),
              fx.make_trial(config, 2, 74.0, state="FAIL", status="error")]
    folder = fx.write_results(tmp_path / "mixed", trials, ["ema.decay"])
    assert list(load_results(folder)["seed"]) == [0]
    assert sorted(load_results(folder, include_failed=True)["seed"]) == [0, 1, 2]


def test_folders_without_trials_raise_a_clear_error(tmp_path):
    with pytest.raises(ResultsError, match="no such results folder"):
        load_results(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="no trials found"):
        load_results(tmp_path / "empty")
    failed = fx.make_trial(fx.base_config(), 0, 70.0, state="FAIL", status="error")
    folder = fx.write_results(tmp_path / "failed", [failed], ["ema.decay"])
    with pytest.raises(ResultsError, match="no COMPLETE trials with status ok") as raised:
        load_results(folder)
    assert "\n" not in str(raised.value)


def test_slices_label_accepts_every_spelling():
    assert slices_label(None) == "all"
    assert slices_label("") == "all"
    assert slices_label(["0-1024"], 1024) == "all"
    assert slices_label(["0-256", "768-1024"]) == "0-256+768-1024"
    assert slices_label('["0-256", "768-1024"]') == "0-256+768-1024"
    assert slices_label("['0-256', '768-1024']") == "0-256+768-1024"
    assert slices_label("0-256+768-1024") == "0-256+768-1024"


# ---- statistics ---------------------------------------------------------------------------------
def test_fit_peak_finds_a_known_vertex_and_clips_to_the_range():
    x = np.array([5.0, 8.0, 12.0, 20.0, 30.0, 50.0])
    fit = fit_peak(x, [fx.mtd_score(v) for v in x])
    assert fit.best_x == pytest.approx(fx.PEAK_MTD, rel=1e-6)
    rising = fit_peak([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.5], log_x=False)
    assert rising.best_x == 4.0  # no interior optimum: the end of the observed range
    with pytest.raises(ValueError):
        fit_peak([1.0, 1.0, 2.0], [1.0, 2.0, 3.0])


# ---- MoCoSE Fig. 2 ------------------------------------------------------------------------------
def test_score_vs_mtd_points_fit_and_paper_overlay(mtd_table):
    fig, data = figures.figure_score_vs_mtd(mtd_table)
    assert fig.axes[0].get_xlabel().startswith("MTD (steps)")
    measured = data[data["series"] == "measured"].sort_values("x")
    # one point per distinct MTD; mean and error bar (sample std) recomputed with numpy
    grid = sorted({round(expected_mtd(eta, size), 6) for eta, size in fx.MTD_GRID})
    np.testing.assert_allclose(measured["x"], grid)
    for _, point in measured.iterrows():
        scores = mtd_table.loc[np.isclose(mtd_table["mtd"], point["x"]), "avg"].to_numpy()
        assert point["n"] == len(scores) == 3
        assert point["mean"] == pytest.approx(np.mean(scores))
        assert point["std"] == pytest.approx(np.std(scores, ddof=1))

    best = data[data["series"] == "best MTD"].iloc[0]
    assert best["x"] == pytest.approx(fx.PEAK_MTD, abs=0.3)
    assert best["lo"] <= best["x"] <= best["hi"]
    assert best["lo"] <= fx.PEAK_MTD <= best["hi"]
    stats = data.attrs["stats"]
    assert stats["best_mtd"] == best["x"]
    assert stats["spearman_rho"] == pytest.approx(scipy_stats.spearmanr(mtd_table["mtd"], mtd_table["avg"]).statistic)

    curve = data[data["series"] == "fit"]
    assert curve["x"].min() == pytest.approx(min(grid)) and curve["x"].max() == pytest.approx(max(grid))
    assert curve["mean"].max() == pytest.approx(best["mean"], abs=0.01)

    # paper: Table 3 placed on the MTD axis (K 512, B 64) within the plotted range, and the best MTD
    paper = data[data["series"] == "paper"]
    want = {expected_mtd(eta, 512): v for eta, v in EXPECTED_TABLE3.items()
            if expected_mtd(eta, 512) <= max(grid) * 1.5}
    assert sorted(paper["x"]) == pytest.approx(sorted(want))
    for _, row in paper.iterrows():
        assert row["mean"] == pytest.approx(want[min(want, key=lambda k: abs(k - row["x"]))])
    assert data.loc[data["series"] == "paper best MTD", "x"].tolist() == [14.67]


def test_score_vs_mtd_per_batch_size(tmp_path):
    trials = []
    for batch in (64, 128):
        for eta in (0.5, 0.8, 0.85, 0.9, 0.95):
            mtd = expected_mtd(eta, 512, batch)
            config = fx.base_config(batch_size=batch, ema={"decay": eta})
            trials += [fx.make_trial(config, seed, fx.mtd_score(mtd) + 0.01 * seed) for seed in (0, 1)]
    table = load_results(fx.write_results(tmp_path / "batch", trials, ["ema.decay", "batch_size"]))
    _, data = figures.figure_score_vs_mtd_by_batch(table)
    assert set(data.loc[data["series"] == "measured", "group"]) == {"B=64", "B=128"}
    assert set(data.loc[data["series"] == "best MTD", "group"]) == {"B=64", "B=128"}
    b128 = data[(data["series"] == "measured") & (data["group"] == "B=128")]
    expected = sorted(expected_mtd(e, 512, 128) for e in (0.5, 0.8, 0.85, 0.9, 0.95))
    np.testing.assert_allclose(sorted(b128["x"]), expected)


def test_align_uniform_vs_mtd(mtd_table):
    _, data = figures.figure_align_uniform_vs_mtd(mtd_table)
    for metric in ("align", "uniform"):
        rows = data[data["group"] == metric].sort_values("x")
        first = mtd_table.loc[np.isclose(mtd_table["mtd"], rows["x"].iloc[0]), metric]
        assert rows["mean"].iloc[0] == pytest.approx(first.mean())
        assert rows["std"].iloc[0] == pytest.approx(np.std(first, ddof=1))
    assert data.attrs["stats"]["align"]["spearman_rho"] > 0.9  # align grows with MTD by construction


# ---- ablation charts ----------------------------------------------------------------------------
def test_queue_slices_chart_order_error_bars_and_paper(tmp_path):
    table = load_results(fx.slices_study(tmp_path / "slices", slices_format="json"))
    fig, data = figures.figure_queue_slices(table)
    measured = data[data["series"] == "this study"]
    order = ["0-512", "256-768", "512-1024", "0-256+768-1024", "all"]
    assert list(measured["x_label"]) == order
    # at one column's width the long label is broken after its "+" to fit (analysis.figure_style)
    assert [t.get_text().replace("\n", "") for t in fig.axes[0].get_xticklabels()] == order
    for _, row in measured.iterrows():
        scores = table.loc[table["queue.slices"] == row["x"], "avg"].to_numpy()
        assert row["mean"] == pytest.approx(scores.mean())
        assert row["std"] == pytest.approx(np.std(scores, ddof=1))
        assert row["n"] == 2
    paper = data[data["series"] == "paper"]
    assert list(paper["x_label"]) == order
    assert dict(zip(paper["x"], paper["mean"])) == EXPECTED_TABLE8


def test_queue_heatmap_matrix_matches(tmp_path):
    table = load_results(fx.heatmap_study(tmp_path / "heat"))
    _, data = figures.figure_queue_heatmap(table)
    matrix = data.pivot(index="y", columns="x", values="mean")
    fractions = table["queue.initial_size"] / table["queue.size"]
    for fraction in (0.0, 0.25, 0.5, 1.0):
        for size in (256, 512, 1024):
            scores = table.loc[np.isclose(fractions, fraction) & (table["queue.size"] == size), "avg"].to_numpy()
            assert matrix.loc[fraction, size] == pytest.approx(scores.mean())
    assert list(matrix.index) == [0.0, 0.25, 0.5, 1.0] and list(matrix.columns) == [256, 512, 1024]
    assert list(data.drop_duplicates("y")["y_label"]) == ["w.o. init (0)", "K/4", "K/2", "all (K)"]
    paper = data[data["x"] == 512].set_index("y")["paper"].to_dict()
    assert paper == EXPECTED_TABLE7_K512


def test_ema_decay_keeps_other_parameters_apart_and_overlays_table3(mtd_table):
    _, data = figures.figure_ema_decay(mtd_table, by=["ema.decay", "queue.size"])
    assert set(data["series"]) == {"queue.size=256", "queue.size=512", "queue.size=1024", "paper"}
    k512 = data[data["series"] == "queue.size=512"]
    assert list(k512["x"]) == [0.5, 0.75, 0.8, 0.85, 0.9, 0.95]
    paper = data[data["series"] == "paper"]
    assert dict(zip(paper["x"], paper["mean"])) == {k: v for k, v in EXPECTED_TABLE3.items() if k != 0.99}


def test_gaussian_m_chart(tmp_path):
    table = load_results(fx.gaussian_study(tmp_path / "gs"))
    _, data = figures.figure_gaussian_m(table)
    assert list(data.loc[data["series"] == "this study", "x_label"]) == ["0.5x", "1x", "3x"]
    paper = data[data["series"] == "paper"]
    assert dict(zip(paper["x"], paper["mean"])) == EXPECTED_GS_TABLE3


def science_section(page: str, heading: str) -> str:
    """The text of docs/science/<page> under the heading that contains `heading`, up to the next heading of
    the same or a higher level."""
    lines = (SCIENCE_DOCS / page).read_text().splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("#") and heading in line)
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    end = next((n for n in range(start + 1, len(lines))
                if lines[n].startswith("#") and len(lines[n]) - len(lines[n].lstrip("#")) <= level), len(lines))
    return "\n".join(lines[start:end])


# Each paper figure the analysis draws, and where the science pages quote its table.
PAPER_TABLES = {
    "MOCOSE_TABLE3_EMA": ("mocose.md", "Table 3"),
    "MOCOSE_TABLE4_DEPTH": ("mocose.md", "Table 4"),
    "MOCOSE_TABLE6A_PREDICTOR_WIDTH": ("mocose.md", "Table 6a"),
    "MOCOSE_TABLE6B_BATCH_SIZE": ("mocose.md", "Table 6b"),
    "MOCOSE_TABLE7_QUEUE_INIT": ("mocose.md", "Table 7"),
    "MOCOSE_TABLE8_QUEUE_SLICES": ("mocose.md", "Table 8"),
    "MOCOSE_TABLE9_FGSM_EPS": ("mocose.md", "FGSM"),
    "GS_TABLE3_GAUSSIAN_M": ("gs-infonce.md", "Table 3"),
}
MAIN_RESULT_SECTIONS = {"simcse": ("simcse.md", "Reported numbers"), "mocose": ("mocose.md", "Main result"),
                        "gs": ("gs-infonce.md", "Table 2"), "mix": ("mixcse.md", "Table 1")}


def test_paper_values_match_the_science_pages():
    """Every paper figure the analysis draws is quoted, in its own table's section, on the science pages."""
    assert paper_values.MOCOSE_TABLE3_EMA == EXPECTED_TABLE3
    assert paper_values.MOCOSE_TABLE8_QUEUE_SLICES == EXPECTED_TABLE8
    assert paper_values.MOCOSE_TABLE4_DEPTH[(1, 2)] == 76.89
    assert paper_values.MAIN_RESULTS["mocose"]["avg"] == 77.27
    sections = {name: place for name, place in PAPER_TABLES.items()}
    sections.update({f"MAIN_RESULTS[{method}]": place for method, place in MAIN_RESULT_SECTIONS.items()})
    assert set(MAIN_RESULT_SECTIONS) == set(paper_values.MAIN_RESULTS)
    missing = {}
    for name, (page, heading) in sections.items():
        if name.startswith("MAIN_RESULTS["):
            table = paper_values.MAIN_RESULTS[name[len("MAIN_RESULTS["):-1]]
        else:
            table = getattr(paper_values, name)
        numbers = set(re.findall(r"\d+\.\d\d", science_section(page, heading)))
        absent = [value for value in table.values() if f"{value:.2f}" not in numbers]
        if absent:
            missing[f"{name} ({page}, {heading})"] = absent
    assert missing == {}


# ---- the report ---------------------------------------------------------------------------------
def test_analyze_writes_applicable_figures_only(tmp_path, mtd_dir):
    written = analyze(mtd_dir, out_dir=tmp_path / "mtd_figures", formats=["png"])
    names = {p.name for p in written}
    for figure in ("score_vs_mtd", "align_uniform_vs_mtd", "ema_decay"):
        assert {f"{figure}.png", f"{figure}.csv"} <= names and f"{figure}.pdf" not in names
    assert {"score_vs_mtd.json", "scores.md", "scores.tex", "scores.csv"} <= names
    for figure in ("queue_slices", "queue_heatmap", "score_vs_mtd_by_batch", "gaussian_m", "batch_size"):
        assert f"{figure}.png" not in names
    assert all(p.is_file() for p in written)
    assert not list((tmp_path / "mtd_figures").glob(".*tmp*"))  # no temporary files left behind
    png = (tmp_path / "mtd_figures" / "score_vs_mtd.png").read_bytes()
    width = int.from_bytes(png[16:20], "big")
    assert width >= SIZES[DEFAULT_SIZE] * 150  # at least 150 dpi

    gs_written = {p.name for p in analyze(fx.gaussian_study(tmp_path / "gs"))}
    assert {"gaussian_m.png", "gaussian_m.pdf"} <= gs_written  # both, unless told otherwise
    assert (tmp_path / "gs" / "figures" / "gaussian_m.pdf").read_bytes().startswith(b"%PDF")
    assert not any(name.startswith(("score_vs_mtd", "align_uniform", "queue_", "ema_")) for name in gs_written)
    assert (tmp_path / "gs" / "figures" / "gaussian_m.png").is_file()


def test_sweep_analyze_command_attaches_figures_once(tmp_path, monkeypatch, capsys):
    import optuna
    from optuna.artifacts import get_all_artifact_meta

    from sweep.commands.analyze import analyze_command
    from trainer.errors import UserError

    monkeypatch.chdir(tmp_path)
    study_dir = fx.gaussian_study(tmp_path / "results" / "gs_m")
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    optuna.create_study(study_name="gs_m", storage=storage)
    (tmp_path / "gs_m.yaml").write_text("name: gs_m\nresults_dir: results\n")

    assert analyze_command("gs_m.yaml", formats="png") == 0
    assert analyze_command(str(study_dir), formats="png") == 0  # unchanged figures are not uploaded twice
    output = capsys.readouterr().out
    assert "gaussian_m.png" in output and "attached 0 new figure(s)" in output
    metas = get_all_artifact_meta(optuna.load_study(study_name="gs_m", storage=storage))
    assert sorted(m.filename for m in metas) == ["gaussian_m.png", "paired_differences.png"]
    assert (study_dir / "artifacts").is_dir()

    with pytest.raises(UserError, match="not found"):
        analyze_command(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no trials found"):
        analyze_command(str(tmp_path / "empty"), attach=False)


def _ablation_study(folder: Path, section: str | None, key: str, values: list, method: str = "mocose") -> Path:
    trials = []
    for i, value in enumerate(values):
        config = fx.base_config(method=method)
        if section is None:
            config[key] = value
        else:
            config[section][key] = value
        trials += [fx.make_trial(config, seed, 75.0 + 0.3 * i + 0.05 * seed) for seed in (0, 1)]
    return fx.write_results(folder, trials, [key if section is None else f"{section}.{key}"])


ABLATIONS = {
    # name: (section, key, values, method, draw, tick labels in order, paper values by tick label)
    "predictor_width": ("heads", "embedding_dim", [768, None, 256], "mocose", figures.figure_predictor_width,
                        ["256", "768", "hidden size"], {"256": 73.91, "768": 77.04}),
    "batch_size": (None, "batch_size", [64, 32], "mocose", figures.figure_batch_size, ["32", "64"],
                   {"32": 73.86, "64": 77.25}),
    "fgsm_eps": ("fgsm", "eps", [5e-9, 0.0, 1e-9], "mocose", figures.figure_fgsm_eps, ["none", "1e-9", "5e-9"],
                 {"none": 76.26, "1e-9": 75.61, "5e-9": 76.64}),
    "mix_lambda": ("mix", "lam", [0.3, 0.1, 0.2], "mix", figures.figure_mix_lambda, ["0.1", "0.2", "0.3"], {}),
}


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_one_parameter_ablation_charts(tmp_path, name):
    section, key, values, method, draw, labels, paper = ABLATIONS[name]
    folder = _ablation_study(tmp_path / name, section, key, values, method)
    table = load_results(folder)
    fig, data = draw(table)
    measured = data[data["series"] == "this study"]
    assert list(measured["x_label"]) == labels
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == labels
    column = key if section is None else f"{section}.{key}"
    for _, row in measured.iterrows():
        same = table[column].isna() if pd.isna(row["x"]) else table[column].astype(float) == row["x"]
        scores = table.loc[same, "avg"].to_numpy()
        assert row["mean"] == pytest.approx(scores.mean()) and row["std"] == pytest.approx(np.std(scores, ddof=1))
    got = data[data["series"] == "paper"]
    assert dict(zip(got["x_label"], got["mean"])) == paper
    names = {p.name for p in analyze(folder, formats=["png"])}
    assert f"{name}.png" in names and f"{name}.pdf" not in names  # only the formats asked for


def test_head_depth_chart(tmp_path):
    trials = []
    for i, (p, q) in enumerate([(2, 2), (1, 2), (0, 2), (1, 1)]):
        config = fx.base_config(heads={"projection_layers": p, "predictor_layers": q})
        trials += [fx.make_trial(config, seed, 70.0 + i + 0.1 * seed) for seed in (0, 1)]
    folder = fx.write_results(tmp_path / "depth", trials, ["heads.projection_layers", "heads.predictor_layers"])
    _, data = figures.figure_head_depth(load_results(folder))
    assert list(data.loc[data["series"] == "this study", "x_label"]) == ["0/2", "1/1", "1/2", "2/2"]
    paper = data[data["series"] == "paper"]
    assert dict(zip(paper["x_label"], paper["mean"])) == {"0/2": 62.67, "1/1": 76.74, "1/2": 76.89, "2/2": 66.29}
    assert "head_depth.png" in {p.name for p in analyze(folder, formats=["png"])}


def test_analysis_imports_no_runtime_packages():
    import subprocess
    import sys

    code = ("import sys, analysis.report, analysis.figures, analysis.tables, analysis.stats, analysis.load; "
            "print([m for m in ('torch', 'ray', 'optuna') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert out.stdout.strip() == "[]"
