"""Which figure a study's knobs call for: the one place that maps a swept config key to a paper figure.

`sweep analyze` draws a figure only for a knob the study varies in `parameters` (or names under
`analysis: {knobs: [...]}`); a key that differs between trials only as a side effect (a method's or a
variant's default, e.g. fgsm.eps under `method: [simcse, mocose]`) calls for nothing. This module is
light (no pandas, no matplotlib) so the study schema can check `analysis.knobs` against it.

    >>> figures_called_for(["ema.decay", "queue.slices"])
    ['score_vs_mtd', 'align_uniform_vs_mtd', 'queue_slices', 'ema_decay']
    >>> figures_called_for(["method", "variant"])
    []
"""

from __future__ import annotations

from typing import Iterable

# Config keys whose change moves the maximum traceable distance d = 1/(1-eta) + K/B (trainer/mtd.py);
# "mtd" names the distance itself (for a study that varies it through a key not listed here).
MTD_KNOBS = (
    "mtd", "ema.decay", "ema.decay_end", "ema.schedule", "ema.schedule_steps", "queue.size", "queue.slices",
    "batch_size", "released.ema_schedule",
)

# figure name -> the knobs that call for it (any one of them), in the order the figures are drawn.
# The MTD figures need, besides, >= 3 distinct MTD values among the scored MoCoSE trials (analysis.report);
# score_vs_mtd_by_batch needs batch_size itself among the knobs and queue_heatmap needs both of its axes.
FIGURE_KNOBS: dict[str, tuple[str, ...]] = {
    "score_vs_mtd": MTD_KNOBS,                                              # MoCoSE Fig. 2
    "score_vs_mtd_by_batch": ("batch_size",),                               # Fig. 3
    "align_uniform_vs_mtd": MTD_KNOBS,                                      # Fig. 4
    "queue_slices": ("queue.slices",),                                      # Table 8
    "ema_decay": ("ema.decay",),                                            # Table 3 / Fig. 8
    "queue_heatmap": ("queue.size", "queue.initial_size"),                  # Table 7 / Fig. 12 (both)
    "head_depth": ("heads.projection_layers", "heads.predictor_layers"),    # Table 4
    "predictor_width": ("heads.embedding_dim",),                            # Table 6a
    "batch_size": ("batch_size",),                                          # Table 6b
    "fgsm_eps": ("fgsm.eps",),                                              # Table 9
    "gaussian_m": ("gaussian.count_per_batch", "gaussian.count"),           # GS-InfoNCE Table 3
    "mix_lambda": ("mix.lam",),                                             # MixCSE
}
ALL_OF = {"queue_heatmap", "score_vs_mtd_by_batch"}  # figures that need every one of their knobs
MTD_FIGURES = ("score_vs_mtd", "score_vs_mtd_by_batch", "align_uniform_vs_mtd")
# Every key `analysis.knobs` accepts.
KNOWN_KNOBS = tuple(dict.fromkeys(k for knobs in FIGURE_KNOBS.values() for k in knobs))


def figures_called_for(knobs: Iterable[str]) -> list[str]:
    """The figures that `knobs` (a study's swept keys and named analysis knobs) call for, before the
    data-dependent checks (>= 3 MTD values, MoCoSE or GS-InfoNCE trials present)."""
    knobs = set(knobs)
    names = []
    for name, wanted in FIGURE_KNOBS.items():
        hit = set(wanted) <= knobs if name in ALL_OF else bool(knobs & set(wanted))
        if name == "score_vs_mtd_by_batch":
            hit = hit and bool(knobs & set(MTD_KNOBS))
        if hit:
            names.append(name)
    return names
