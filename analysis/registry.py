"""Every figure `sweep analyze` draws for a study's knobs, in one place: its name, what in the papers it reproduces,
the knobs that call for it, the methods whose trials it draws, the data it needs and the function that draws it.
(The one figure no knob calls for, paired_differences, is drawn wherever configurations share seeds:
analysis.paired.)

A study calls for a figure when it varies, for every group of the entry's `knobs`, one key of that group (in its
`parameters`, or named under `analysis: {knobs: [...]}`); a key that differs between trials only as a side effect
(a method's or a variant's default, e.g. fgsm.eps under `method: [simcse, mocose]`) calls for nothing. A figure
called for is drawn when the results hold what it needs (`FigureEntry.applies`). This module is light (no pandas,
no matplotlib): the study schema checks a study's `analysis: {knobs: [...]}` against KNOWN_KNOBS, and a drawing
function is imported only when its figure is drawn.

    >>> figures_called_for(["ema.decay", "queue.slices"])
    ['score_vs_mtd', 'align_uniform_vs_mtd', 'queue_slices', 'ema_decay']
    >>> figures_called_for(["method", "variant"])
    []
"""

from __future__ import annotations

import importlib
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from trainer.config import RunConfig, method_of_key, section_model
from trainer.method_rules import distance_methods
from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, SIMCSE

DISTANCE_METHODS = distance_methods()  # the built-in methods' (MoCoSE): the papers' MTD figures

# Config keys whose change moves the maximum traceable distance d = 1/(1-eta) + K/B (trainer/mtd.py);
# "mtd" names the distance itself (for a study that varies it through a key not listed here).
MTD_KNOBS = (
    "mtd", "ema.decay", "ema.decay_end", "ema.schedule", "ema.schedule_steps", "queue.size", "queue.slices",
    "batch_size", "released.ema_schedule",
)
MIN_MTD_VALUES = 3  # distinct distances an MTD figure needs (a trend through fewer says nothing)


def _distances(trials: Any, *columns: str) -> Any:
    """The trials with a maximum traceable distance and a value in every one of `columns`."""
    if any(column not in trials.columns for column in columns):
        return trials.iloc[0:0]
    traced = trials[trials["mtd"].notna()]
    for column in columns:
        traced = traced[traced[column].notna()]
    return traced


def _enough_distances(trials: Any, score: str) -> bool:
    return _distances(trials, score)["mtd"].round(6).nunique() >= MIN_MTD_VALUES


def _enough_distances_and_batches(trials: Any, score: str) -> bool:
    traced = _distances(trials, score)
    return traced["mtd"].round(6).nunique() >= MIN_MTD_VALUES and traced["batch_size"].nunique() >= 2


def _enough_measures(trials: Any, score: str) -> bool:
    return _distances(trials, "align", "uniform")["mtd"].round(6).nunique() >= MIN_MTD_VALUES


@dataclass(frozen=True)
class FigureEntry:
    """One figure. `knobs`: groups of config keys, every group of which the study must vary (one key of it);
    `methods`: the trials it draws (None: every trial); `present`: the methods one of which must have trials
    for it to be drawn (default `methods`; None: none needed); `needs(trials, score)`: what else its trials
    (`trials(table)`) must hold; `draw`: "module.function" of the drawing function; `against_mtd`: its x is the
    traceable distance."""

    name: str
    source: str
    knobs: tuple[tuple[str, ...], ...]
    draw: str
    methods: tuple[str, ...] | None = None
    present: tuple[str, ...] | None = None
    needs: Callable[[Any, str], bool] | None = None
    against_mtd: bool = False
    any_knob: bool = False  # called for by any swept number key no other figure is for (generic_knobs)

    def title(self, what: str, note: str = "") -> str:
        """The figure's title: what it shows, then its source in the papers (and a note), e.g.
        "EMA decay (MoCoSE Table 3 / Fig. 8)"."""
        return f"{what} ({self.source}{'; ' + note if note else ''})"

    def called_for(self, knobs: Iterable[str]) -> bool:
        knobs = set(knobs)
        if self.any_knob:
            return bool(generic_knobs(knobs))
        return all(knobs & set(group) for group in self.knobs)

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
        module, name = self.draw.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)


FIGURES: tuple[FigureEntry, ...] = (  # in the order `sweep analyze` draws them
    FigureEntry("score_vs_mtd", "MoCoSE Fig. 2", (MTD_KNOBS,), "analysis.mtd_figures.figure_score_vs_mtd",
                methods=DISTANCE_METHODS, needs=_enough_distances, against_mtd=True),
    FigureEntry("score_vs_mtd_by_batch", "MoCoSE Fig. 3", (("batch_size",), MTD_KNOBS),
                "analysis.mtd_figures.figure_score_vs_mtd_by_batch", methods=DISTANCE_METHODS,
                needs=_enough_distances_and_batches, against_mtd=True),
    FigureEntry("align_uniform_vs_mtd", "MoCoSE Fig. 4", (MTD_KNOBS,),
                "analysis.mtd_figures.figure_align_uniform_vs_mtd", methods=DISTANCE_METHODS,
                needs=_enough_measures, against_mtd=True),
    FigureEntry("queue_slices", "MoCoSE Table 8", (("queue.slices",),), "analysis.figures.figure_queue_slices",
                methods=(MOCOSE,)),
    FigureEntry("ema_decay", "MoCoSE Table 3 / Fig. 8", (("ema.decay",),), "analysis.figures.figure_ema_decay",
                methods=(MOCOSE,)),
    FigureEntry("queue_heatmap", "MoCoSE Table 7 / Fig. 12", (("queue.size",), ("queue.initial_size",)),
                "analysis.figures.figure_queue_heatmap", methods=(MOCOSE,)),
    FigureEntry("head_depth", "MoCoSE Table 4", (("heads.projection_layers", "heads.predictor_layers"),),
                "analysis.figures.figure_head_depth", methods=(MOCOSE,)),
    FigureEntry("predictor_width", "MoCoSE Table 6a", (("heads.embedding_dim",),),
                "analysis.figures.figure_predictor_width", methods=(MOCOSE,)),
    FigureEntry("batch_size", "MoCoSE Table 6b", (("batch_size",),), "analysis.figures.figure_batch_size"),
    FigureEntry("fgsm_eps", "MoCoSE Table 9", (("fgsm.eps",),), "analysis.figures.figure_fgsm_eps"),
    FigureEntry("gaussian_m", "GS-InfoNCE Table 3", (("gaussian.count_per_batch", "gaussian.count"),),
                "analysis.figures.figure_gaussian_m", methods=(GS_INFONCE, SIMCSE), present=(GS_INFONCE,)),
    FigureEntry("mix_lambda", "MixCSE", (("mix.lam",),), "analysis.figures.figure_mix_lambda", methods=(MIXCSE,)),
    # any other swept number key, a plugin's own knob included: the score along it (analysis.figures.figure_knob)
    FigureEntry("knob", "this study's ablation", (), "analysis.figures.figure_knob", any_knob=True,
                needs=lambda trials, score: bool(varying_knobs(trials))),
)
FIGURE = {entry.name: entry for entry in FIGURES}
MTD_FIGURES = tuple(entry.name for entry in FIGURES if entry.against_mtd)
# Every key a study may name under `analysis: {knobs: [...]}`.
KNOWN_KNOBS = tuple(dict.fromkeys(key for entry in FIGURES for group in entry.knobs for key in group))


def generic_knobs(knobs: Iterable[str]) -> list[str]:
    """The swept keys no specific figure is for whose values are numbers (number_key): RunConfig's
    or a registered method's own (`dcl.sigma`), in the order given."""
    return [key for key in knobs if key not in (*KNOWN_KNOBS, *MTD_KNOBS, "seed") and number_key(key)]


def number_key(key: str) -> bool:
    """Whether a dotted config key (RunConfig's or a registered method's own) holds a number (int or float, nullable
    or not): what the analysis draws a knob's figure along."""
    *section, last = key.split(".")
    model = section_model(section[0]) if section else RunConfig
    if model is None or last not in model.model_fields or len(section) > 1:
        return False
    hint = model.model_fields[last].annotation
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if typing.get_origin(option) is typing.Annotated:
            option = typing.get_args(option)[0]
        if option in (int, float):
            return True
    return False


def varying_knobs(table: Any) -> list[str]:
    """The generic_knobs among a results table's columns that take more than one value."""
    return generic_knobs([column for column in table.columns if table[column].nunique(dropna=False) > 1])


def knob_trials(table: Any, knob: str) -> Any:
    """The rows of a results table whose method reads `knob` (a method's own key: its trials; else every row)."""
    owner = method_of_key(knob)
    return table if owner is None or "method" not in table.columns else table[table["method"] == owner]


def figures_called_for(knobs: Iterable[str]) -> list[str]:
    """The figures that `knobs` (a study's swept keys and named analysis knobs) call for, before the data is
    looked at (FigureEntry.applies)."""
    knobs = set(knobs)
    return [entry.name for entry in FIGURES if entry.called_for(knobs)]
