"""Every figure `sweep analyze` draws for a study's knobs, declared once (paired_differences, drawn wherever
configurations share seeds, is analysis.figures.figure_paired_differences). A study calls for a figure when it varies
a key of each group of the entry's `knobs` (in its `parameters`, or named under `analysis: {knobs: [...]}`; a key
that differs only as a side effect, a method's default, calls for nothing); it is drawn where the results hold what
it needs (`applies`).
Light (no pandas, no matplotlib): the study schema reads KNOWN_KNOBS; a data step is imported only when drawn.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable

from analysis import paper_values
from trainer.config import method_of_key, number_kind
from trainer.method_rules import DISTANCE_METHODS
from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, SIMCSE

# Config keys whose change moves the maximum traceable distance d = 1/(1-eta) + K/B (trainer/mtd.py);
# "mtd" names the distance itself (for a study that varies it through a key not listed here).
MTD_KNOBS = (
    "mtd", "ema.decay", "ema.decay_end", "ema.schedule", "ema.schedule_steps", "queue.size", "queue.slices",
    "batch_size", "released.ema_schedule",
)
MIN_MTD_VALUES = 3  # distinct distances an MTD figure needs (a trend through fewer says nothing)


def _enough_distances(trials: Any, score: str, columns: tuple[str, ...] = (), batches: int = 1) -> bool:
    """An MTD figure's `needs`: MIN_MTD_VALUES distances among the trials with a value in every one of `columns`
    (none named: the score), over `batches` batch sizes."""
    wanted = list(columns or (score,))
    if any(column not in trials.columns for column in wanted):
        return False
    traced = trials.dropna(subset=["mtd", *wanted])
    enough = traced["mtd"].round(6).nunique() >= MIN_MTD_VALUES
    return enough and (batches < 2 or traced["batch_size"].nunique() >= batches)


@dataclass(frozen=True)
class Axis:
    """A figure of one knob on a categorical x axis (analysis.figure_data.axis_data): the results column (made of
    `parts`, keys with their defaults, as "p/q"), what the title names, the x label, how a value reads (`ticks`, a
    name in figure_data.TICKS) and in what order (`order`, in ORDERS; None: by value), the paper's values and their
    label, drawn only where every trial has `paper_where`'s (column, value) (else `other_label` names the x axis);
    `ordered`: a line joins the values (else a dot plot); `exclude`: keys that never set series apart; `note`: the
    title's."""

    column: str
    what: str
    label: str
    ticks: str = "number"
    order: str | None = None
    paper: dict[Any, float] | None = None
    paper_label: str = "paper"
    paper_where: tuple[str, Any] | None = None
    other_label: str = ""
    ordered: bool = True
    exclude: tuple[str, ...] = ()
    note: str = ""
    parts: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class FigureEntry:
    """One figure. `knobs`: groups of config keys the study must vary (a key of each); `methods`: the trials it
    draws (None: all); `present`: methods one of which must have trials (default `methods`); `needs(trials,
    score)`: what else its trials must hold; `step`: "module.function" of its data step, (entry, trials, score,
    by, size, ...) -> figure_data.Plot or Heatmap; `against_mtd`: its x is the traceable distance."""

    name: str
    source: str
    knobs: tuple[tuple[str, ...], ...]
    step: str = "analysis.figure_data.axis_data"
    methods: tuple[str, ...] | None = None
    present: tuple[str, ...] | None = None
    needs: Callable[[Any, str], bool] | None = None
    against_mtd: bool = False
    any_knob: bool = False  # called for by any swept number key no other figure is for (generic_knobs)
    axis: Axis | None = None

    def title(self, what: str, note: str = "") -> str:
        """What the figure shows, then its source (and a note): "EMA decay (MoCoSE Table 3 / Fig. 8)"."""
        return f"{what} ({self.source}{'; ' + note if note else ''})"

    def called_for(self, knobs: Iterable[str]) -> bool:
        if self.any_knob:
            return bool(generic_knobs(knobs))
        return all(set(knobs) & set(group) for group in self.knobs)

    def trials(self, table: Any) -> Any:
        """The rows of a results table this figure draws."""
        return table if self.methods is None else table[table["method"].isin(self.methods)]

    def applies(self, table: Any, score: str) -> bool:
        """Whether the results hold what the figure needs (its methods' trials, and `needs`)."""
        present = self.present if self.present is not None else self.methods
        if present is not None and not table["method"].isin(present).any():
            return False
        return self.needs is None or bool(self.needs(self.trials(table), score))

    def function(self) -> Callable[..., Any]:
        """The data step (`step`)."""
        module, name = self.step.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)


_SLICES = paper_values.MOCOSE_TABLE8_SETTING
_DEPTH_KEYS = ("heads.projection_layers", "heads.predictor_layers")
FIGURES: tuple[FigureEntry, ...] = (  # in the order `sweep analyze` draws them
    FigureEntry("score_vs_mtd", "MoCoSE Fig. 2", (MTD_KNOBS,), "analysis.mtd_figures.score_vs_mtd",
                methods=DISTANCE_METHODS, needs=_enough_distances, against_mtd=True),
    FigureEntry("score_vs_mtd_by_batch", "MoCoSE Fig. 3", (("batch_size",), MTD_KNOBS),
                "analysis.mtd_figures.score_vs_mtd_by_batch", methods=DISTANCE_METHODS,
                needs=partial(_enough_distances, batches=2), against_mtd=True),
    FigureEntry("align_uniform_vs_mtd", "MoCoSE Fig. 4", (MTD_KNOBS,), "analysis.mtd_figures.align_uniform_vs_mtd",
                methods=DISTANCE_METHODS, needs=partial(_enough_distances, columns=("align", "uniform")),
                against_mtd=True),
    FigureEntry("queue_slices", "MoCoSE Table 8", (("queue.slices",),), methods=(MOCOSE,), axis=Axis(
        "queue.slices", "Queue slices used by the loss", "queue positions used (0 = newest key)", "text", "slices",
        paper_values.MOCOSE_TABLE8_QUEUE_SLICES, ordered=False, paper_label=(
            f"paper (K={_SLICES['queue.size']}, K0={_SLICES['queue.initial_size']}, N={_SLICES['batch_size']})"))),
    FigureEntry("ema_decay", "MoCoSE Table 3 / Fig. 8", (("ema.decay",),), methods=(MOCOSE,), axis=Axis(
        "ema.decay", "EMA decay", "EMA decay eta", paper=paper_values.MOCOSE_TABLE3_EMA,
        paper_label="paper (fixed eta, K=512, B=64)", paper_where=("ema.schedule", "constant"),
        other_label="EMA decay eta (eta0 for cosine schedules)")),
    FigureEntry("queue_heatmap", "MoCoSE Table 7 / Fig. 12", (("queue.size",), ("queue.initial_size",)),
                "analysis.figure_data.heatmap_data", methods=(MOCOSE,)),
    FigureEntry("head_depth", "MoCoSE Table 4", (_DEPTH_KEYS,), methods=(MOCOSE,), axis=Axis(
        "heads.depth", "Projection / predictor depth", "projection layers P / predictor layers Q", "text", "depth",
        {f"{p}/{q}": value for (p, q), value in paper_values.MOCOSE_TABLE4_DEPTH.items()},
        "paper (MoCoSE Table 4)", ordered=False, exclude=_DEPTH_KEYS, parts=tuple(zip(_DEPTH_KEYS, (1, 2))))),
    FigureEntry("predictor_width", "MoCoSE Table 6a", (("heads.embedding_dim",),), methods=(MOCOSE,), axis=Axis(
        "heads.embedding_dim", "Predictor dimension", "predictor dimension heads.embedding_dim (units)", "width",
        paper=paper_values.MOCOSE_TABLE6A_PREDICTOR_WIDTH, paper_label="paper (MoCoSE Table 6a)")),
    FigureEntry("batch_size", "MoCoSE Table 6b", (("batch_size",),), axis=Axis(
        "batch_size", "Batch size", "batch size N (sentences)", paper=paper_values.MOCOSE_TABLE6B_BATCH_SIZE,
        paper_label="paper (MoCoSE, K=512)", paper_where=("method", MOCOSE))),
    FigureEntry("fgsm_eps", "MoCoSE Table 9", (("fgsm.eps",),), axis=Axis(
        "fgsm.eps", "FGSM perturbation size", "FGSM epsilon (0 = none)", "eps",
        paper=paper_values.MOCOSE_TABLE9_FGSM_EPS, paper_label="paper (MoCoSE Table 9)",
        paper_where=("method", MOCOSE))),
    FigureEntry("gaussian_m", "GS-InfoNCE Table 3", (("gaussian.count_per_batch", "gaussian.count"),),
                methods=(GS_INFONCE, SIMCSE), present=(GS_INFONCE,), axis=Axis(
        "gaussian.m_per_batch", "Gaussian negatives", "Gaussian negatives M (multiple of batch size N)", "multiple",
        paper=paper_values.GS_TABLE3_GAUSSIAN_M, paper_label="paper (N=64)",
        exclude=("method", "gaussian.count", "gaussian.count_per_batch"))),
    FigureEntry("mix_lambda", "MixCSE", (("mix.lam",),), methods=(MIXCSE,), axis=Axis(
        "mix.lam", "Mixing coefficient", "mixing lambda", note="paper default 0.2")),
    # any other swept number key, a plugin's own knob included: the score along it
    FigureEntry("knob", "this study's ablation", (), "analysis.knob_differences.knob_data", any_knob=True,
                needs=lambda trials, score: bool(varying_knobs(trials))),
)
FIGURE = {entry.name: entry for entry in FIGURES}
MTD_FIGURES = tuple(entry.name for entry in FIGURES if entry.against_mtd)
# Every key a study may name under `analysis: {knobs: [...]}`.
KNOWN_KNOBS = tuple(dict.fromkeys(key for entry in FIGURES for group in entry.knobs for key in group))


def generic_knobs(knobs: Iterable[str]) -> list[str]:
    """The swept keys no specific figure is for that hold numbers (RunConfig's or a method's own: `dcl.sigma`)."""
    return [key for key in knobs if key not in (*KNOWN_KNOBS, *MTD_KNOBS, "seed") and number_kind(key)]


def varying_knobs(table: Any) -> list[str]:
    """The generic_knobs among a results table's columns that take more than one value."""
    return generic_knobs([column for column in table.columns if table[column].nunique(dropna=False) > 1])


def knob_trials(table: Any, knob: str) -> Any:
    """The rows of a results table whose method reads `knob` (a method's own key: its trials; else every row)."""
    owner = method_of_key(knob)
    return table if owner is None or "method" not in table.columns else table[table["method"] == owner]


def figures_called_for(knobs: Iterable[str]) -> list[str]:
    """The figures that `knobs` (a study's swept keys and named analysis knobs) call for, before the data is read.

    >>> figures_called_for(["ema.decay", "queue.slices"])
    ['score_vs_mtd', 'align_uniform_vs_mtd', 'queue_slices', 'ema_decay']
    """
    knobs = set(knobs)
    return [entry.name for entry in FIGURES if entry.called_for(knobs)]
