"""The analysis never pools configurations: tables group by every key the study sweeps,
derived values never become groupings or figures, and single-seed points say they are single runs.

Expected numbers are recomputed here with numpy from the trials written, not read back from the code.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from analysis import figures
from analysis.load import load_results
from analysis.report import analyze
from tests import synthetic_results as fx
from tests.helpers import first_fast

TRANSFER = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
# What each method's and variant's defaults make differ between trials (a side effect, not a knob).
DEFAULTS = {
    ("simcse", "paper"): {"fgsm": {"eps": 0.0}},
    ("simcse", "released"): {"fgsm": {"eps": 0.0}},
    ("mocose", "paper"): {"fgsm": {"eps": 5e-9}},
    ("mocose", "released"): {"fgsm": {"eps": 5e-9}, "ema": {"decay_end": 1.0}},
    ("gs", "paper"): {"fgsm": {"eps": 0.0}, "gaussian": {"count_per_batch": 3.0}},
    ("gs", "released"): {"fgsm": {"eps": 0.0}, "gaussian": {"count_per_batch": 3.0}, "dropout": 0.2},
    ("mix", "paper"): {"fgsm": {"eps": 0.0}},
    ("mix", "released"): {"fgsm": {"eps": 0.0}, "mix": {"lam": 0.2}},
}
SEEDS = (42, 43, 44, 45, 46)


def methods_study(folder, seeds=SEEDS):
    """studies/methods.yaml's grid: method x variant, 5 seeds, STS and transfer scores."""
    rng = np.random.default_rng(5)
    trials = []
    for i, ((method, variant), sections) in enumerate(DEFAULTS.items()):
        config = fx.base_config(method=method, **sections)
        config["variant"] = variant
        for seed in seeds:
            avg = 75.0 + i + rng.normal(0, 0.3)
            transfer = {task: 80.0 + i + j + rng.normal(0, 0.5) for j, task in enumerate(TRANSFER)}
            transfer["avg"] = float(np.mean(list(transfer.values())))
            trials.append(fx.make_trial(config, seed, avg, variant=variant, transfer=transfer, transfer_mode="test"))
    return fx.write_results(folder, trials, ["method", "variant"]), trials


def test_methods_table_has_one_row_per_method_and_variant_with_n_5(tmp_path):
    folder, trials = methods_study(tmp_path / "methods")
    written = {p.name for p in analyze(folder, formats=["png"])}
    for name, column, summary_key in (("scores.csv", "avg", "test"), ("transfer.csv", "transfer_avg", "transfer")):
        rows = pd.read_csv(folder / "figures" / name)
        assert list(rows.columns[:2]) == ["method", "variant"]
        assert sorted(zip(rows["method"], rows["variant"])) == sorted(DEFAULTS)
        assert (rows["n"] == 5).all()
        for _, row in rows.iterrows():
            values = [t[summary_key]["avg"] for t in trials
                      if (t["config"]["method"], t["variant"]) == (row["method"], row["variant"])]
            assert row[f"{column}_mean"] == pytest.approx(np.mean(values))
            assert row[f"{column}_std"] == pytest.approx(np.std(values, ddof=1))
    lines = (folder / "figures" / "scores.md").read_text().splitlines()
    assert lines[0].startswith("| method | variant | STS12 |")
    assert sum(line.startswith(("| gs | paper |", "| gs | released |")) for line in lines) == 2
    assert "mean ± std over 5 seeds" in "\n".join(lines)
    # fgsm.eps, gaussian M, dropout differ only through the methods' defaults: no figure of theirs, no grouping;
    # the one figure states each method against the reference, seed by seed
    assert {n for n in written if n.endswith(".png")} == {"paired_differences.png"}, sorted(written)


def test_a_derived_value_is_never_a_grouping_of_its_own(tmp_path):
    trials = []
    for method, eps in (("mocose", 5e-9), ("gs", 0.0)):
        config = fx.base_config(method=method, fgsm={"eps": eps})
        trials += [fx.make_trial(config, seed, 75.0 + seed) for seed in (0, 1)]
    folder = fx.write_results(tmp_path / "m", trials, ["method"])
    written = {p.name for p in analyze(folder, formats=["png"])}
    rows = pd.read_csv(folder / "figures" / "scores.csv")
    assert list(rows.columns[:1]) == ["method"] and "fgsm.eps" not in rows.columns
    assert sorted(rows["method"]) == ["gs", "mocose"] and (rows["n"] == 2).all()
    assert "fgsm_eps.png" not in written and "gaussian_m.png" not in written


def test_a_knob_the_study_names_for_analysis_is_drawn(tmp_path):
    folder = fx.mtd_study(tmp_path / "mtd")
    (folder / "study.yaml").write_text("name: mtd\nparameters: {optim.lr: {expr: '1e-5'}}\n"
                                       "analysis: {knobs: [mtd]}\n")
    names = {p.name for p in analyze(folder, formats=["png"])}
    assert {"score_vs_mtd.png", "align_uniform_vs_mtd.png"} <= names
    assert "ema_decay.png" not in names  # ema.decay is not swept here and not named


def _errorbars(ax) -> list[ErrorbarContainer]:
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_single_seed_points_have_no_error_bars_and_say_so(tmp_path):
    trials = [fx.make_trial(fx.base_config(ema={"decay": eta}), 0, 75.0 + eta) for eta in (0.5, 0.8, 0.9)]
    table = load_results(fx.write_results(tmp_path / "one", trials, ["ema.decay"]))
    fig, data = figures.figure_ema_decay(table)
    ax = fig.axes[0]
    assert not _errorbars(ax)
    assert ax.get_legend().get_title().get_text() == "single runs (one seed each, no error bars)"
    assert "std over seeds" not in " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert data.loc[data["series"] == "this study", "n"].tolist() == [1, 1, 1]
    assert not [t for t in ax.texts if t.get_text().startswith("n=")]  # n is the same everywhere

    fig, _ = figures.figure_score_vs_mtd(table.assign(mtd=[4.0, 7.0, 12.0]))
    assert not [c for c in _errorbars(fig.axes[0]) if c.has_yerr]  # the best-MTD star has an x interval only
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("single runs" in label for label in labels)


def test_mixed_seed_counts_label_n_and_draw_bars_only_where_n_exceeds_one(tmp_path):
    trials = [fx.make_trial(fx.base_config(ema={"decay": 0.5}), 0, 75.0)]
    trials += [fx.make_trial(fx.base_config(ema={"decay": 0.9}), seed, 76.0 + seed) for seed in (0, 1, 2)]
    table = load_results(fx.write_results(tmp_path / "mixed", trials, ["ema.decay"]))
    fig, data = figures.figure_ema_decay(table)
    ax = fig.axes[0]
    bars = _errorbars(ax)
    assert len(bars) == 1
    (segments,) = bars[0].lines[2]
    assert len(segments.get_segments()) == 1  # one bar: the three-seed point
    (x, low), (_, high) = segments.get_segments()[0]
    scores = [76.0 + seed for seed in (0, 1, 2)]
    assert (high - low) / 2 == pytest.approx(np.std(table.loc[table["ema.decay"] == 0.9, "avg"], ddof=1))
    assert np.mean(scores) - 1 < (high + low) / 2 < np.mean(scores) + 1
    assert sorted(t.get_text() for t in ax.texts if t.get_text().startswith("n=")) == ["n=1", "n=3"]
    assert "single run" in ax.get_legend().get_title().get_text()


def test_trials_of_an_older_reading_are_analysed_apart_never_pooled(tmp_path):
    """A MoCoSE paper-reading study resumed across the correction of its reading: the trials an older reading
    made (summaries of reading 1) and the current ones share every swept value, yet no table pools them. The
    current trials fill figures/, the older ones figures/older_reading/, and one line says which and why."""
    def config(eta):
        return fx.base_config(method="mocose", variant="paper", ema={"decay": eta})

    new = [fx.make_trial(config(eta), seed, 70.0 + 10 * eta + seed) for eta in (0.5, 0.9) for seed in (0, 1, 2)]
    old = [fx.make_trial(config(eta), seed, 60.0 + eta, reading=1) for eta in (0.5, 0.9) for seed in (3, 4)]
    folder = fx.write_results(tmp_path / "mtd", new + old, ["ema.decay"])
    notes: list[str] = []
    written = analyze(folder, notes=notes, formats=["png"])
    current = pd.read_csv(folder / "figures" / "scores.csv")
    older = pd.read_csv(folder / "figures" / "older_reading" / "scores.csv")
    assert current["n"].tolist() == [3, 3] and older["n"].tolist() == [2, 2]
    for rows, trials in ((current, new), (older, old)):
        for _, row in rows.iterrows():
            values = [t["test"]["avg"] for t in trials if t["config"]["ema"]["decay"] == row["ema.decay"]]
            assert row["avg_mean"] == pytest.approx(np.mean(values))
    assert {p.parent.name for p in written} == {"figures", "older_reading"}
    [note] = notes
    assert note.startswith("4 of 10 trials ran under an older reading of the papers (MoCoSE's negatives are the "
                           "queue only (eq. 3)")
    assert note.endswith("analysed apart in older_reading/, never pooled with the others")


@pytest.mark.parametrize("key, values, folder", first_fast(
    ("pooler", ("cls_before_pooler", "avg"), "protocol_pooler-avg"),
    ("eval", ({"final_tasks": None}, {"final_tasks": ["STSBenchmark"]}), "protocol_final_tasks-STSBenchmark"),
    ("eval", ({"selection": "dev"}, {"selection": "test_avg"}), "protocol_selection-test_avg")))
def test_trials_evaluated_under_two_protocols_are_never_compared(tmp_path, key, values, folder):
    """Two poolers, two final-task lists or two selection rules: scores that the same weights would not give
    alike. The larger group fills figures/, the other a folder named after what differs, one line says so."""
    trials = []
    for index, value in enumerate(values):
        config = fx.base_config(method="mocose", ema={"decay": 0.5}, **{key: value})
        trials += [fx.make_trial(config, seed, 70.0 + 5 * index + seed) for seed in range(3 - index)]
    study = fx.write_results(tmp_path / "p", trials, ["ema.decay"])
    notes: list[str] = []
    analyze(study, notes=notes, formats=["png"])
    main = pd.read_csv(study / "figures" / "scores.csv")
    other = pd.read_csv(study / "figures" / folder / "scores.csv")
    assert main["n"].tolist() == [3] and other["n"].tolist() == [2]
    assert main["STSBenchmark_mean"].tolist() == pytest.approx([np.mean([t["test"]["STSBenchmark"]
                                                                          for t in trials[:3]])])
    [note] = notes
    assert note.startswith("2 of 5 trials were evaluated under another protocol (")
    assert note.endswith(f"analysed apart in {folder}/, never compared with the others")


def test_trials_differing_only_in_their_packages_are_drawn_together_with_a_warning(tmp_path):
    def made_with(torch: str) -> dict:
        return {"code": {"commit": "a" * 40, "dirty": False}, "packages": {"torch": torch, "transformers": "5.24.0"},
                "device": {"name": "AMD EPYC"}}

    trials = [fx.make_trial(fx.base_config(ema={"decay": eta}), seed, 70.0 + eta + seed,
                            provenance=made_with("2.13.0" if seed < 2 else "2.9.1"))
              for eta in (0.5, 0.8, 0.9) for seed in range(3)]
    study = fx.write_results(tmp_path / "w", trials, ["ema.decay"])
    notes: list[str] = []
    written = analyze(study, notes=notes, formats=["png"])
    assert {p.parent.name for p in written} == {"figures"}  # one group
    assert pd.read_csv(study / "figures" / "scores.csv")["n"].tolist() == [3, 3, 3]
    warning = ("these trials ran on 2 package sets (torch 2.13.0, transformers 5.24.0: 6 trials; torch 2.9.1, "
               "transformers 5.24.0: 3 trials): differences between them may come from that")
    assert notes == [f"figures: {warning}"]
    assert (study / "figures" / "scores.md").read_text().rstrip().endswith(f"Warning: {warning}.")
    fig, _ = figures.figure_ema_decay(load_results(study))
    assert fig.axes[0].get_legend().get_title().get_text().endswith(  # drawn outside analyze: no footnote
        "no error bars)") or "warning" not in fig.axes[0].get_legend().get_title().get_text()
    from analysis.figure_style import footnote

    with footnote(warning):
        fig, _ = figures.figure_ema_decay(load_results(study))
    assert fig.axes[0].get_legend().get_title().get_text().replace("\n", " ").endswith(
        "warning: " + warning.replace("\n", " "))
