"""Every figure `sweep analyze` draws, rendered from stand-in results, to compare two versions of the drawing code.

    python scripts/figure_regression.py render OUT_DIR      # before a change (e.g. on a clean checkout of main)
    python scripts/figure_regression.py render NEW_DIR      # after it
    python scripts/figure_regression.py compare OUT_DIR NEW_DIR [--beside REVIEW_DIR]

`render` draws, for every study file in studies/, the figures of its stand-in results (tests.synthetic_results:
the configurations the study expands to, scored by a known function) at 1, 2 and 5 seeds and at both widths,
mtd_grid's also against the measured distance, plus the figures of tests/analysis/test_figure_images.py and the
knob figure (which no study in studies/ calls for) with its paired panel in each of its kinds (knob_cases); it
saves each as PNG at 100 dpi and prints any layout problem tests/analysis/test_figure_layout.py would report.
`compare` lists every figure whose pixels differ (RMS over 0-255 grey levels, or a different size) and exits 1
when one does; `--beside` writes each of them, old left and new right, into one image for review. The image
tests check seven figures against committed baselines; this covers all of them.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SEEDS = (1, 2, 5)
DPI = 100


def knob_cases() -> dict[str, tuple]:
    """The knob figure's cases, along RunConfig's `temperature`: name -> (methods, the reference, the seeds each
    (method, temperature) skips)."""
    from trainer.vocabulary import GS_INFONCE as GS
    from trainer.vocabulary import SIMCSE

    return {"named-two-series": ((SIMCSE, GS), {"method": SIMCSE, "temperature": 0.05}, {(GS, 0.2): {2}}),
            "best-two-series": ((SIMCSE, GS), None, {(GS, 0.2): {2}, (SIMCSE, 0.2): {1, 2}}),
            "named-one-series": ((SIMCSE,), {"method": SIMCSE, "temperature": 0.05}, {(SIMCSE, 0.2): {2}})}


def knob_table(methods: tuple[str, ...], skipped: dict[tuple[str, float], set[int]]):
    """Three seeds of each method at three temperatures, scored by a known function with seed-shared noise."""
    import numpy as np
    import pandas as pd

    from trainer.vocabulary import GS_INFONCE

    rng = np.random.default_rng(7)
    seed_effect = rng.normal(0.0, 1.0, 3)
    return pd.DataFrame([{"method": method, "temperature": tau, "seed": seed,
                          "avg": 76.0 + shift + 0.4 * (method == GS_INFONCE) + seed_effect[seed]
                          + rng.normal(0.0, 0.15)}
                         for method in methods for tau, shift in ((0.05, 0.0), (0.1, 0.5), (0.2, -0.6))
                         for seed in range(3) if seed not in skipped.get((method, tau), set())])


def render(out: Path) -> int:
    from analysis.figure_style import save_figure
    from analysis.figures import figure_knob
    from tests import synthetic_results as fx
    from tests.analysis import test_figure_images as images
    from tests.analysis.test_figure_layout import draw_study, layout_problems

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="figure-regression-"))
    cases = [(path, seeds, size, "formula") for path in sorted((REPO / "studies").glob("*.yaml"))
             for seeds in SEEDS for size in ("single", "double")]
    cases.append((REPO / "studies" / "mtd_grid.yaml", 2, "single", "measured"))
    problems, count = {}, 0
    for path, seeds, size, mtd_source in cases:
        folder = work / f"{path.stem}-{seeds}"
        if not folder.exists():
            fx.stand_in_study(path, folder, seeds)
        for name, fig in draw_study(folder, size=size, mtd_source=mtd_source):
            key = f"{path.stem}-{seeds}-{size}-{mtd_source}-{name}"
            save_figure(fig, out / f"{key}.png", "png", dpi=DPI)
            problems[key] = layout_problems(fig)
            count += 1
    for (name, (methods, reference, skipped)), size in itertools.product(knob_cases().items(), ("single", "double")):
        fig, _ = figure_knob(knob_table(methods, skipped), "avg", by=["method", "temperature"], size=size,
                             reference=reference)
        key = f"knob-{name}-{size}"
        save_figure(fig, out / f"{key}.png", "png", dpi=DPI)
        problems[key] = layout_problems(fig)
        count += 1
    for name, (results, draw, arguments) in images.FIGURES.items():
        fig, _ = draw(results(work / f"baseline-{name}"), **arguments)
        save_figure(fig, out / f"baseline-{name}.png", "png", dpi=DPI)
        count += 1
    broken = {key: found for key, found in problems.items() if found}
    print(f"{count} figures in {out}; layout problems in {len(broken)}")
    for key, found in broken.items():
        print(f"  {key}: {'; '.join(found)}")
    return 1 if broken else 0


def compare(before: Path, after: Path, beside: Path | None = None) -> int:
    """Name every figure whose pixels differ; with `beside`, write each changed figure there as one image, the old
    one left of the new, for review."""
    import numpy as np
    from matplotlib.image import imread
    from matplotlib.testing.compare import calculate_rms

    names = sorted({p.name for p in before.glob("*.png")} | {p.name for p in after.glob("*.png")})
    differ = []
    for name in names:
        if not (before / name).is_file() or not (after / name).is_file():
            differ.append(f"{name}: only in {before if (before / name).is_file() else after}")
            continue
        a = (imread(before / name) * 255).astype(np.int16)
        b = (imread(after / name) * 255).astype(np.int16)
        if a.shape != b.shape:
            differ.append(f"{name}: size {a.shape[1]}x{a.shape[0]} px, now {b.shape[1]}x{b.shape[0]} px")
        elif (rms := calculate_rms(a, b)) > 0:
            differ.append(f"{name}: RMS {rms:.3f}")
        else:
            continue
        if beside is not None:
            write_beside(imread(before / name)[..., :3], imread(after / name)[..., :3], beside / name)
    print(f"{len(names)} figures compared; {len(differ)} differ"
          + (f"; each changed figure beside its old one in {beside}" if beside is not None and differ else ""))
    for line in differ:
        print(f"  {line}")
    return 1 if differ else 0


def write_beside(old, new, path: Path, gutter: int = 8) -> None:
    """`old` and `new` (RGB arrays in 0-1) side by side on white, a red gutter between them, as one PNG at `path`."""
    import numpy as np
    from matplotlib.image import imsave

    height = max(old.shape[0], new.shape[0])
    canvas = np.ones((height, old.shape[1] + gutter + new.shape[1], 3))
    canvas[:, old.shape[1]:old.shape[1] + gutter] = (1.0, 0.0, 0.0)
    canvas[:old.shape[0], :old.shape[1]] = old
    canvas[:new.shape[0], old.shape[1] + gutter:] = new
    path.parent.mkdir(parents=True, exist_ok=True)
    imsave(path, canvas)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("render", help="draw every figure into OUT_DIR").add_argument("out", type=Path)
    pair = commands.add_parser("compare", help="list the figures whose pixels differ")
    pair.add_argument("before", type=Path)
    pair.add_argument("after", type=Path)
    pair.add_argument("--beside", type=Path, metavar="DIR", help="write each changed figure beside its old one here")
    args = parser.parse_args()
    return render(args.out) if args.command == "render" else compare(args.before, args.after, args.beside)


if __name__ == "__main__":
    sys.exit(main())
