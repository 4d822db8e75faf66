"""A study's expansion kept in its results folder (sweep.spec.expansion_file): read back only when it was made from
the same study, trainer defaults, code and methods; anything else builds the expansion again."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace

from sweep.spec import expansion, expansion_file, keep_expansion, load_study
from tests.helpers import fake_study

expand_module = importlib.import_module("sweep.spec.expand")  # the package's `expand` is the function


def _fresh(path: Path):
    """The study loaded as a new process would: nothing in the in-memory cache."""
    expand_module._EXPANSIONS.clear()
    return load_study(path)


def _building_refused(monkeypatch) -> None:
    def refuse(spec):
        raise AssertionError("the expansion was built, not read back")

    monkeypatch.setattr(expand_module, "_expand_uncached", refuse)


def _as_rows(spec) -> list:
    built = expansion(spec)
    return [[t.key, t.seed, t.params, t.config, t.mtd, t.requested] for t in built.trials] + [
        [built.configurations, built.dropped, built.duplicates]]


def test_a_kept_expansion_is_read_back_equal_to_the_built_one(tmp_path, shared_data_dir, monkeypatch):
    path = fake_study(tmp_path, "kept", shared_data_dir, decays=(0.1, 0.2, 0.3), seeds=[1, 2])
    spec = _fresh(path)
    built = _as_rows(spec)
    keep_expansion(spec)  # no results folder yet: nothing kept
    assert not (Path(spec.study_dir) / expansion_file.EXPANSION_FILE).exists()
    Path(spec.study_dir).mkdir(parents=True)
    keep_expansion(spec)
    assert (Path(spec.study_dir) / expansion_file.EXPANSION_FILE).is_file()

    _building_refused(monkeypatch)
    again = _fresh(path)
    assert _as_rows(again) == built
    assert len(built) == 7  # 3 decays x 2 seeds, and the counts


def test_another_study_content_or_code_builds_it_again(tmp_path, shared_data_dir, monkeypatch):
    path = fake_study(tmp_path, "changed", shared_data_dir, decays=(0.1, 0.2))
    spec = _fresh(path)
    Path(spec.study_dir).mkdir(parents=True)
    keep_expansion(spec)
    stored = Path(spec.study_dir) / expansion_file.EXPANSION_FILE

    # another study content (a value added) under the same results folder
    assert len(expansion(_fresh(fake_study(tmp_path, "changed", shared_data_dir, decays=(0.1, 0.2, 0.3)))).trials) == 3

    # the same study, the file made under another code digest: stale, built again
    path = fake_study(tmp_path, "changed", shared_data_dir, decays=(0.1, 0.2))
    spec = _fresh(path)
    keep_expansion(spec)
    text = stored.read_text()
    digest = expansion_file.read_digest(stored)
    stored.write_text(text.replace(digest, "0" * 64, 1))
    calls = []
    original = expand_module._expand_uncached
    monkeypatch.setattr(expand_module, "_expand_uncached", lambda s: calls.append(1) or original(s))
    assert len(expansion(_fresh(path)).trials) == 2 and calls == [1]

    # a damaged file: built again, nothing raised
    stored.write_text(text[: len(text) // 2])
    assert len(expansion(_fresh(path)).trials) == 2 and calls == [1, 1]


def test_the_digest_covers_the_trainer_code_and_a_plugin_source(tmp_path, monkeypatch):
    before = expansion_file.digest("study")
    assert expansion_file.digest("another study") != before
    monkeypatch.setattr(expansion_file, "_code_digest", lambda: "other code")
    assert expansion_file.digest("study") != before
    monkeypatch.undo()

    # a registered method's source (a plugin file, an installed package's module)
    from trainer import method_rules

    source = tmp_path / "my_method.py"
    source.write_text("class Mine: ...\n")
    entry = SimpleNamespace(origin=str(source), source_file=str(source))
    monkeypatch.setattr(method_rules, "registered", lambda: {"mine": entry})
    with_plugin = expansion_file.digest("study")
    assert with_plugin != before
    source.write_text("class Mine: ...\n# an edit\n")
    assert expansion_file.digest("study") != with_plugin


def test_values_json_would_not_give_back_are_not_kept(tmp_path):
    spec_dir = tmp_path / "results" / "s"
    spec_dir.mkdir(parents=True)

    class Spec:
        study_dir = str(spec_dir)

    from sweep.spec import Trial

    trial = Trial(key="k", seed=1, params={"x": (1, 2)}, config={}, mtd=None)
    expansion_file.write(Spec(), "d" * 64, [trial], 1, 0, 0)
    assert not (spec_dir / expansion_file.EXPANSION_FILE).exists()
    trial = Trial(key="k", seed=1, params={"x": [1, 2]}, config={"a": 1.5}, mtd=2.0)
    expansion_file.write(Spec(), "d" * 64, [trial], 1, 0, 0)
    assert json.loads((spec_dir / expansion_file.EXPANSION_FILE).read_text())["trials"] == [
        ["k", 1, {"x": [1, 2]}, {"a": 1.5}, 2.0, {}]]
    assert expansion_file.read(Spec(), "d" * 64) == ([trial], 1, 0, 0)
    assert expansion_file.read(Spec(), "e" * 64) is None


def test_a_tpe_study_keeps_nothing(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "asks", shared_data_dir,
                      parameters={"ema.decay": {"distribution": "uniform", "low": 0.1, "high": 0.9}},
                      method="tpe", budget=2)
    spec = _fresh(path)
    Path(spec.study_dir).mkdir(parents=True)
    keep_expansion(spec)
    assert not (Path(spec.study_dir) / expansion_file.EXPANSION_FILE).exists()
