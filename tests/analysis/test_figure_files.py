"""What `sweep analyze` writes for a figure: PNG at 300 dpi, PDF with its fonts embedded as TrueType (Type 42),
one or two journal columns wide as `--figure-width` asks, and measured-MTD figures under names of their own,
on disk and in Optuna."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from analysis import figure_style
from analysis.load import load_results
from analysis.report import analyze
from tests import synthetic_results as fx


def png_size_and_dpi(path: Path) -> tuple[int, int, float]:
    """(width px, height px, dots per inch) from the PNG's IHDR and pHYs chunks."""
    data = path.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    at = data.index(b"pHYs")
    per_metre, _, unit = struct.unpack(">IIB", data[at + 4:at + 13])
    assert unit == 1  # metres
    return width, height, per_metre * 0.0254


@pytest.fixture(scope="module")
def slices_dir(tmp_path_factory) -> Path:
    return fx.slices_study(tmp_path_factory.mktemp("results") / "slices")


@pytest.mark.parametrize("size, inches", [("single", 3.5), ("double", 7.2)])
def test_png_is_300_dpi_at_the_column_width_asked_for(slices_dir, tmp_path, size, inches):
    analyze(slices_dir, out_dir=tmp_path, size=size, formats=["png"])
    width, height, dpi = png_size_and_dpi(tmp_path / "queue_slices.png")
    assert round(dpi) == 300 and width == round(inches * 300)
    assert height > width / 3  # a panel of its own height, not squeezed under the legend


@pytest.mark.slow  # two analyses writing PDFs (font subsetting is most of a PDF's time)
def test_pdf_embeds_its_fonts_as_truetype(slices_dir, tmp_path):
    analyze(slices_dir, out_dir=tmp_path, formats=["pdf"])
    pdf = (tmp_path / "queue_slices.pdf").read_bytes()
    assert b"/FontFile2" in pdf  # an embedded TrueType font program (Type 42)
    assert not re.search(rb"/Subtype\s*/Type3", pdf)  # no Type 3 (bitmap-like) fonts
    assert b"DejaVuSans" in pdf
    second = tmp_path / "again"
    analyze(slices_dir, out_dir=second, formats=["pdf"])
    assert (second / "queue_slices.pdf").read_bytes() == pdf  # no date in it: the same results, the same file


def test_each_figure_is_written_in_the_formats_asked_for_with_its_data(tmp_path):
    study = fx.gaussian_study(tmp_path / "gs")
    written = {p.name for p in analyze(study, out_dir=tmp_path / "svg", formats=["svg", "svg"])}
    assert "gaussian_m.svg" in written and "gaussian_m.csv" in written
    assert not {name for name in written if name.endswith((".png", ".pdf"))}
    svg = (tmp_path / "svg" / "gaussian_m.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    analyze(study, out_dir=tmp_path / "again", formats=["svg"])
    assert (tmp_path / "again" / "gaussian_m.svg").read_text() == svg  # no date, fixed ids: the same file
    with pytest.raises(ValueError, match="'gif'"):
        analyze(study, out_dir=tmp_path / "no", formats=["png", "gif"])
    assert not (tmp_path / "no").exists()


def test_an_unknown_format_on_the_command_line_is_one_line_and_exit_2(slices_dir, capsys):
    from sweep import cli

    assert cli.main(["analyze", str(slices_dir), "--no-attach", "--formats", "png,tiff"]) == 2
    assert capsys.readouterr().err.splitlines() == ["sweep: error: --formats: figure formats must be one or more "
                                                    "of png, pdf, svg; got 'tiff' (e.g. --formats png,pdf)"]
    assert not (slices_dir / "figures").exists()


def test_a_size_outside_the_two_columns_is_refused(slices_dir, tmp_path):
    with pytest.raises(ValueError, match="single"):
        analyze(slices_dir, out_dir=tmp_path, size="wide")


def test_the_command_line_picks_the_width():
    from sweep.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["analyze", "results/x"]).figure_width == "single"
    assert parser.parse_args(["analyze", "results/x", "--figure-width", "double"]).figure_width == "double"
    with pytest.raises(SystemExit):
        parser.parse_args(["analyze", "results/x", "--figure-width", "poster"])


def test_the_palette_is_okabe_ito():
    assert {c.lower() for c in figure_style.PALETTE} == {
        "#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#000000"}
    styles = {(s["color"], s["marker"]) for s in map(figure_style.series_style, range(40))}
    assert len(styles) == 40  # every series of a figure differs from the others in colour or marker


@pytest.mark.slow  # two full analyses of a study, attached to its Optuna study
def test_measured_mtd_figures_are_named_and_attached_apart_from_the_formula_ones(tmp_path, monkeypatch, capsys):
    import optuna
    from optuna.artifacts import get_all_artifact_meta

    from sweep.commands.analyze import analyze_command

    monkeypatch.chdir(tmp_path)
    study_dir = fx.mtd_study(tmp_path / "results" / "mtd")
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    optuna.create_study(study_name="mtd", storage=storage)
    assert analyze_command(str(study_dir), formats="png") == 0
    assert analyze_command(str(study_dir), mtd_source="measured", formats="png") == 0
    capsys.readouterr()

    formula = {p.name for p in (study_dir / "figures").glob("*.png")}
    measured = {p.name for p in (study_dir / "figures" / "measured_mtd").glob("*.png")}
    assert formula == {"score_vs_mtd.png", "align_uniform_vs_mtd.png", "ema_decay.png", "paired_differences.png"}
    assert measured == {"score_vs_mtd_measured.png", "align_uniform_vs_mtd_measured.png", "ema_decay.png",
                        "paired_differences.png"}
    assert {"score_vs_mtd_measured.json", "score_vs_mtd_measured.csv"} <= {
        p.name for p in (study_dir / "figures" / "measured_mtd").iterdir()}
    names = [m.filename for m in get_all_artifact_meta(optuna.load_study(study_name="mtd", storage=storage))]
    # ema_decay.png does not depend on the distance: the same bytes, attached once
    assert sorted(names) == sorted(formula | measured)


def test_measured_mtd_figures_say_measured_in_title_and_axis(tmp_path):
    from analysis import figures

    table = load_results(fx.mtd_study(tmp_path / "mtd"), mtd_source="measured")
    fig, _ = figures.figure_score_vs_mtd(table, mtd_source="measured")
    assert "vs measured MTD" in fig.axes[0].get_title().replace("\n", " ")
    assert fig.axes[0].get_xlabel() == "measured MTD (steps), log scale"
    legend = " ".join(t.get_text() for t in fig.axes[0].get_legend().get_texts()).replace("\n", " ")
    assert "paper best MTD 14.67 (bert-base, by eq. 4)" in legend  # the paper's mark is eq. 4's distance
    fig, _ = figures.figure_align_uniform_vs_mtd(table, mtd_source="measured")
    assert "measured MTD" in fig.get_suptitle().replace("\n", " ")
    assert [ax.get_xlabel() for ax in fig.axes] == ["measured MTD (steps), log scale"] * 2
    with pytest.raises(ValueError, match="mtd_source"):
        figures.figure_score_vs_mtd(table, mtd_source="guessed")
