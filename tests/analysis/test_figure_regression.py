"""scripts/figure_regression.py's comparison: equal renders pass, a changed pixel or size is named and fails."""

from __future__ import annotations

import runpy

import numpy as np
from matplotlib.image import imsave

from tests.helpers import REPO

compare = runpy.run_path(str(REPO / "scripts" / "figure_regression.py"))["compare"]


def _image(path, shape=(20, 30), value=1.0):
    pixels = np.full((*shape, 3), 1.0)
    pixels[5:10, 5:10] = value
    imsave(path, pixels)


def test_equal_renders_pass_and_every_difference_is_named(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir(), after.mkdir()
    for folder in (before, after):
        _image(folder / "same.png")
    assert compare(before, after) == 0
    assert "1 figures compared; 0 differ" in capsys.readouterr().out

    _image(before / "moved.png", value=1.0)
    _image(after / "moved.png", value=0.0)
    _image(before / "taller.png")
    _image(after / "taller.png", shape=(25, 30))
    _image(before / "gone.png")
    assert compare(before, after) == 1
    out = capsys.readouterr().out
    assert "4 figures compared; 3 differ" in out
    assert "moved.png: RMS" in out and "taller.png: size 30x20 px, now 30x25 px" in out and "gone.png: only in" in out
