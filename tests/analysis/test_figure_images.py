"""Each figure type, drawn from fixed synthetic results, matches its committed baseline image.

The figures are drawn as `sweep analyze` draws them (Agg, DejaVu Sans shipped with matplotlib, seeded data
and bootstrap) and saved at 100 dpi to keep the baselines small; matplotlib.testing.compare.compare_images
compares them by RMS difference. The baselines in figure_baselines/ were drawn with the matplotlib version
in figure_baselines/VERSION: under another minor version text rendering may move by a pixel, so the test
skips and says so. After a deliberate change to the figures, look at the new images and rewrite the
baselines with

    FIGURE_BASELINES=write python -m pytest -n 0 -p no:cacheprovider tests/analysis/test_figure_images.py

These are seven figures; scripts/figure_regression.py renders every figure of every study before and after a
change and names each one whose pixels moved.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

import matplotlib
import pytest
from matplotlib.testing.compare import compare_images

from analysis import figures
from analysis.figure_style import save_figure
from analysis.load import load_results
from tests import synthetic_results as fx

BASELINES = Path(__file__).parent / "figure_baselines"
VERSION = BASELINES / "VERSION"
TOLERANCE = 2.0  # RMS over 0-255 grey levels: well under one text glyph moved by a pixel
DPI = 100
WRITE = os.environ.get("FIGURE_BASELINES") == "write"


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _mtd(folder: Path):
    return load_results(fx.mtd_study(folder / "mtd"))


def _mixed_seeds(folder: Path):
    trials = [fx.make_trial(fx.base_config(ema={"decay": 0.5}), 0, 75.0)]
    for eta, score in ((0.8, 75.6), (0.9, 75.3)):
        trials += [fx.make_trial(fx.base_config(ema={"decay": eta}), seed, score + 0.2 * seed) for seed in (0, 1, 2)]
    return load_results(fx.write_results(folder / "mixed", trials, ["ema.decay"]))


FIGURES: dict[str, tuple[Callable[[Path], Any], Callable[..., Any], dict[str, Any]]] = {
    # baseline name: (results, figure function, its arguments)
    "score_vs_mtd": (_mtd, figures.figure_score_vs_mtd, {"by": ["ema.decay", "queue.size"]}),
    "align_uniform_vs_mtd": (_mtd, figures.figure_align_uniform_vs_mtd, {"by": ["ema.decay", "queue.size"]}),
    "ema_decay_series": (_mtd, figures.figure_ema_decay, {"by": ["ema.decay", "queue.size"]}),
    "ema_decay_mixed_seeds": (_mixed_seeds, figures.figure_ema_decay, {}),
    "queue_slices": (lambda f: load_results(fx.slices_study(f / "slices")), figures.figure_queue_slices, {}),
    "queue_heatmap": (lambda f: load_results(fx.heatmap_study(f / "heat")), figures.figure_queue_heatmap, {}),
    "score_vs_mtd_one_task_double": (lambda f: load_results(fx.one_task_study(f / "one")),
                                     figures.figure_score_vs_mtd,
                                     {"score": "STSBenchmark", "by": ["ema.decay", "queue.size"],
                                      "size": "double"}),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_matches_its_baseline(name, tmp_path):
    if not WRITE:
        if not VERSION.is_file():
            pytest.fail(f"no baselines in {BASELINES}: write them (see this module's docstring)")
        drawn_with = VERSION.read_text().strip()
        if _minor(drawn_with) != _minor(matplotlib.__version__):
            pytest.skip(f"baselines drawn with matplotlib {drawn_with}, this is {matplotlib.__version__}")
    results, draw, arguments = FIGURES[name]
    fig, _ = draw(results(tmp_path), **arguments)
    actual = tmp_path / f"{name}.png"
    save_figure(fig, actual, "png", dpi=DPI)
    expected = BASELINES / f"{name}.png"
    if WRITE:
        BASELINES.mkdir(exist_ok=True)
        shutil.copyfile(actual, expected)
        VERSION.write_text(matplotlib.__version__ + "\n")
        return
    assert expected.is_file(), f"no baseline {expected}: write it (see this module's docstring)"
    difference = compare_images(str(expected), str(actual), tol=TOLERANCE)
    assert difference is None, difference
