"""Turn a results folder into its figures and tables: `analyze(study_dir) -> [written paths]`.

Which figures apply is decided from what varies among the finished trials:

    score_vs_mtd           >= 3 distinct MTD values among MoCoSE trials        (MoCoSE Fig. 2)
    score_vs_mtd_by_batch  that, and >= 2 batch sizes among MoCoSE trials        (Fig. 3)
    align_uniform_vs_mtd   >= 3 distinct MTD values with align/uniform measured  (Fig. 4)
    queue_slices           queue.slices varies (MoCoSE trials)                   (Table 8)
    ema_decay              ema.decay varies (MoCoSE trials)                      (Table 3 / Fig. 8)
    queue_heatmap          queue.size and queue.initial_size both vary           (Table 7 / Fig. 12)
    head_depth             projection or predictor depth varies                  (Table 4)
    predictor_width        heads.predictor_dim varies                            (Table 6a)
    batch_size             batch_size varies                                     (Table 6b)
    fgsm_eps               fgsm.eps varies                                       (Table 9)
    gaussian_m             M / N varies among GS-InfoNCE (and SimCSE) trials     (GS-InfoNCE Table 3)
    mix_lambda             mix.lam varies among MixCSE trials                    (MixCSE)

Each figure is written as <name>.png (200 dpi), <name>.pdf and <name>.csv (the plotted data);
MTD figures add <name>.json (Spearman, fit, best MTD and its bootstrap interval). The per-task
table is written as scores.md, scores.tex and scores.csv; when trials ran the SentEval transfer tasks,
their Table 2 (MR ... MRPC, Avg) as transfer.md, transfer.tex and transfer.csv. Every file is written to a temporary
name in the same folder and moved into place with os.replace, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from analysis import figures, tables
from analysis.load import SCORES, TRANSFER_SCORES, ResultsError, load_results, read_study_spec, swept_parameters

PNG_DPI = 200


def analyze(
    study_dir: str | Path,
    out_dir: str | Path | None = None,
    eta_choice: str = "mean",
    k_choice: str = "oldest",
    score: str = "avg",
    n_boot: int = 1000,
    seed: int = 0,
    mtd_source: str = "formula",
) -> list[Path]:
    """Write every applicable figure and the score tables; return the written paths.

    `out_dir` defaults to <study_dir>/figures. `eta_choice` / `k_choice` pick the MTD definition
    (see trainer.mtd); `mtd_source="measured"` plots against the distance the trainer measured
    instead (methods.md section 9). `score` is the y of the figures ("avg" = STS test avg; falls back to
    "dev_stsb" when no test scores were recorded). Raises analysis.load.ResultsError when the folder
    has no finished trials.
    """
    study_dir = Path(study_dir)
    if out_dir is None:  # the measured-distance figures go beside the formula ones, never over them
        out_dir = study_dir / "figures" / ("measured_mtd" if mtd_source == "measured" else "")
    out_dir = Path(out_dir)
    table = load_results(study_dir, eta_choice=eta_choice, k_choice=k_choice, mtd_source=mtd_source)
    if score not in table.columns or table[score].isna().all():
        if score == "avg" and "dev_stsb" in table.columns and table["dev_stsb"].notna().any():
            score = "dev_stsb"
        else:
            raise ResultsError(f"{study_dir}: the trials have no {score!r} scores; pass another score (e.g. dev_stsb)")
    declared = (read_study_spec(study_dir).get("parameters") or {}).keys()
    params = swept_parameters(table, declared=list(declared) or None)

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, draw in applicable_figures(table, params, score, n_boot=n_boot, seed=seed):
        try:
            fig, data = draw()
        except ValueError as exc:  # degenerate data for this figure (e.g. no scores in a subset)
            warnings.warn(f"figure {name} skipped: {exc}", stacklevel=2)
            continue
        written += _write_figure(out_dir, name, fig, data)

    if any(column in table.columns for column in SCORES):  # runs without test evaluation have no table
        numbers = tables.score_table(table, by=params)
        from trainer.files import write_text_atomic  # here: importing analysis stays light

        written.append(write_text_atomic(out_dir / "scores.md", tables.markdown_table(table, by=params)))
        written.append(write_text_atomic(out_dir / "scores.tex", tables.latex_table(table, by=params)))
        written.append(write_text_atomic(out_dir / "scores.csv", numbers.to_csv(index=False)))
    if any(column in table.columns and table[column].notna().any() for column in TRANSFER_SCORES):
        numbers = tables.score_table(table, by=params, scores=TRANSFER_SCORES)
        written.append(write_text_atomic(out_dir / "transfer.md", tables.transfer_markdown_table(table, by=params)))
        written.append(write_text_atomic(out_dir / "transfer.tex", tables.transfer_latex_table(table, by=params)))
        written.append(write_text_atomic(out_dir / "transfer.csv", numbers.to_csv(index=False)))
    return written


def applicable_figures(
    table: pd.DataFrame, params: list[str], score: str = "avg", n_boot: int = 1000, seed: int = 0,
) -> list[tuple[str, Callable[[], tuple[Any, pd.DataFrame]]]]:
    """(name, draw) for every figure the trials support, in a fixed order."""
    mocose = table[table["method"] == "mocose"]
    scored = mocose[mocose["mtd"].notna() & mocose[score].notna()]
    distinct_mtd = scored["mtd"].round(6).nunique()
    plans: list[tuple[str, Callable]] = []

    def add(name: str, function: Callable, **kwargs: Any) -> None:
        plans.append((name, lambda: function(table, **kwargs)))

    if distinct_mtd >= 3:
        add("score_vs_mtd", figures.figure_score_vs_mtd, score=score, n_boot=n_boot, seed=seed)
        if scored["batch_size"].nunique() >= 2:
            add("score_vs_mtd_by_batch", figures.figure_score_vs_mtd_by_batch, score=score, n_boot=n_boot, seed=seed)
    if {"align", "uniform"} <= set(mocose.columns):
        measured = mocose[mocose["mtd"].notna() & mocose["align"].notna() & mocose["uniform"].notna()]
        if measured["mtd"].round(6).nunique() >= 3:
            add("align_uniform_vs_mtd", figures.figure_align_uniform_vs_mtd)
    if _varies(mocose, "queue.slices"):
        add("queue_slices", figures.figure_queue_slices, score=score, by=params)
    if _varies(mocose, "ema.decay"):
        add("ema_decay", figures.figure_ema_decay, score=score, by=params)
    if _varies(mocose, "queue.size") and _varies(mocose, "queue.initial_size"):
        add("queue_heatmap", figures.figure_queue_heatmap, score=score, by=params)
    if _varies(mocose, "heads.projection_layers") or _varies(mocose, "heads.predictor_layers"):
        add("head_depth", figures.figure_head_depth, score=score, by=params)
    if _varies(mocose, "heads.predictor_dim"):
        add("predictor_width", figures.figure_predictor_width, score=score, by=params)
    if _varies(table, "batch_size"):
        add("batch_size", figures.figure_batch_size, score=score, by=params)
    if _varies(table, "fgsm.eps"):
        add("fgsm_eps", figures.figure_fgsm_eps, score=score, by=params)
    gaussian = table[table["method"].isin(["gs", "simcse"])]
    if (gaussian["method"] == "gs").any() and _varies(gaussian, "gaussian.m_per_batch"):
        add("gaussian_m", figures.figure_gaussian_m, score=score, by=params)
    if _varies(table[table["method"] == "mix"], "mix.lam"):
        add("mix_lambda", figures.figure_mix_lambda, score=score, by=params)
    return plans


# ---- writing ------------------------------------------------------------------------------------
def _varies(table: pd.DataFrame, column: str) -> bool:
    return column in table.columns and table[column].nunique(dropna=False) > 1


def _write_figure(out_dir: Path, name: str, fig: Any, data: pd.DataFrame) -> list[Path]:
    from trainer.files import json_safe, write_atomic, write_text_atomic  # here: importing analysis stays light

    paths = [
        write_atomic(out_dir / f"{name}.png", lambda tmp: fig.savefig(tmp, format="png", dpi=PNG_DPI)),
        # no creation date in the PDF, so re-running on the same results gives the same file
        write_atomic(out_dir / f"{name}.pdf",
                     lambda tmp: fig.savefig(tmp, format="pdf", metadata={"CreationDate": None})),
        write_text_atomic(out_dir / f"{name}.csv", data.to_csv(index=False)),
    ]
    stats = data.attrs.get("stats")
    if stats:
        paths.append(write_text_atomic(out_dir / f"{name}.json", json.dumps(json_safe(stats), indent=2) + "\n"))
    return paths
