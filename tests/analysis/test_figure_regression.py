"""scripts/figure_regression.py's comparison: equal renders pass, a changed pixel or size is named and fails."""

from __future__ import annotations

import runpy

import numpy as np
import pytest
from matplotlib.image import imread, imsave

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


def test_each_changed_figure_is_written_beside_its_old_one(tmp_path, capsys):
    before, after, review = tmp_path / "before", tmp_path / "after", tmp_path / "review"
    before.mkdir(), after.mkdir()
    _image(before / "same.png"), _image(after / "same.png")
    _image(before / "taller.png", value=0.0)
    _image(after / "taller.png", shape=(25, 30), value=0.5)
    assert compare(before, after, review) == 1
    assert f"each changed figure beside its old one in {review}" in capsys.readouterr().out
    assert sorted(p.name for p in review.iterdir()) == ["taller.png"]  # the unchanged one is not written
    pixels = imread(review / "taller.png")[..., :3]
    gutter = 8
    assert pixels.shape == (25, 30 + gutter + 30, 3)
    assert pixels[7, 7] == pytest.approx([0.0, 0.0, 0.0])  # the old figure's dark square, on the left
    assert pixels[7, 30 + gutter + 7] == pytest.approx([0.5, 0.5, 0.5], abs=0.01)  # the new one's, on the right
    assert pixels[22, 7] == pytest.approx([1.0, 1.0, 1.0])  # white under the shorter old figure
    assert pixels[0, 30] == pytest.approx([1.0, 0.0, 0.0])  # the gutter between them
