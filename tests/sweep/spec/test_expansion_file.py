"""A study's expansion kept in its results folder (sweep.spec.expansion_file): read back by the next process only
when it was made from the same study, trainer defaults, code and methods; anything else builds the expansion
again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from sweep.spec import Trial, expansion_file, keep_expansion, load_study
from tests.helpers import REPO, fake_study

SENTINEL = 12345.0  # an mtd no expansion computes: seen only when the stored file was read


# Both run in a process of their own, as `sweep run` does: nothing cached in memory, and only the methods a study
# registers (a test process may hold others, which the digest counts).
_LOADED = """import json, sys
from pathlib import Path
from sweep.spec import expansion, keep_expansion, load_study
spec = load_study(sys.argv[1])
if sys.argv[2] == "keep":
    Path(spec.study_dir).mkdir(parents=True, exist_ok=True)
    keep_expansion(spec)
print(json.dumps([[t.key, t.mtd] for t in expansion(spec).trials]))
"""


def _loaded_in_a_new_process(path: Path, keep: bool = False) -> list:
    """Each trial's (key, mtd) of the study's expansion as a new process loads it (`keep`: and keeps it)."""
    done = subprocess.run([sys.executable, "-c", _LOADED, str(path), "keep" if keep else "load"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def _kept(path: Path) -> tuple[Path, list]:
    built = _loaded_in_a_new_process(path, keep=True)
    return Path(load_study(path).study_dir) / expansion_file.EXPANSION_FILE, built


def _marked(stored: Path) -> None:
    """The stored first trial's mtd set to SENTINEL, the digest kept."""
    data = json.loads(stored.read_text())
    data["trials"][0][4] = SENTINEL
    stored.write_text(json.dumps(data))


def test_a_kept_expansion_is_read_back_by_the_next_process(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "kept", shared_data_dir, decays=(0.1, 0.2, 0.3), seeds=[1, 2])
    spec = load_study(path)
    keep_expansion(spec)  # no results folder yet: nothing kept
    assert not (Path(spec.study_dir) / expansion_file.EXPANSION_FILE).exists()
    stored, built = _kept(path)
    assert len(built) == 6 and stored.is_file()
    data = json.loads(stored.read_text())
    assert [[t[0], t[4]] for t in data["trials"]] == built
    assert _loaded_in_a_new_process(path) == built

    _marked(stored)
    assert _loaded_in_a_new_process(path) == [[built[0][0], SENTINEL], *built[1:]]


def test_another_study_a_stale_digest_or_a_damaged_file_builds_it_again(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "changed", shared_data_dir, decays=(0.1, 0.2))
    stored, built = _kept(path)
    _marked(stored)

    # another study under the same results folder: its own trials
    fake_study(tmp_path, "changed", shared_data_dir, decays=(0.1, 0.2, 0.3))
    assert len(_loaded_in_a_new_process(path)) == 3

    # the same study, the file made under another digest: stale
    fake_study(tmp_path, "changed", shared_data_dir, decays=(0.1, 0.2))
    text = stored.read_text()
    stored.write_text(text.replace(expansion_file.read_digest(stored), "0" * 64, 1))
    assert _loaded_in_a_new_process(path) == built

    # a damaged file: built again, nothing raised
    stored.write_text(text[: len(text) // 2])
    assert _loaded_in_a_new_process(path) == built


def test_the_digest_covers_the_code_and_each_registered_methods_source(tmp_path, monkeypatch):
    before = expansion_file.digest("study")
    assert expansion_file.digest("another study") != before
    monkeypatch.setattr(expansion_file, "code_digest", lambda: "other code")
    assert expansion_file.digest("study") != before
    monkeypatch.undo()
    assert expansion_file.digest("study") == before

    from trainer import method_rules

    source = tmp_path / "my_method.py"  # a plugin file, an installed package's module
    source.write_text("class Mine: ...\n")
    entry = SimpleNamespace(origin=str(source), source_file=str(source))
    monkeypatch.setattr(method_rules, "registered", lambda: {"mine": entry})
    with_plugin = expansion_file.digest("study")
    assert with_plugin != before
    source.write_text("class Mine: ...\n# an edit\n")
    assert expansion_file.digest("study") != with_plugin


def test_values_json_would_not_give_back_are_not_kept(tmp_path):
    spec = SimpleNamespace(study_dir=str(tmp_path))
    stored = tmp_path / expansion_file.EXPANSION_FILE
    expansion_file.write(spec, "d" * 64, [Trial(key="k", seed=1, params={"x": (1, 2)}, config={}, mtd=None)], 1, 0, 0)
    assert not stored.exists()
    trial = Trial(key="k", seed=1, params={"x": [1, 2]}, config={"a": 1.5}, mtd=2.0)
    expansion_file.write(spec, "d" * 64, [trial], 1, 0, 0)
    assert json.loads(stored.read_text())["trials"] == [["k", 1, {"x": [1, 2]}, {"a": 1.5}, 2.0, {}]]
    assert expansion_file.read(spec, "d" * 64) == ([trial], 1, 0, 0)
    assert expansion_file.read(spec, "e" * 64) is None


def test_a_tpe_study_keeps_nothing(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "asks", shared_data_dir, method="tpe", budget=2,
                      parameters={"ema.decay": {"distribution": "uniform", "low": 0.1, "high": 0.9}})
    spec = load_study(path)
    Path(spec.study_dir).mkdir(parents=True)
    keep_expansion(spec)
    assert not (Path(spec.study_dir) / expansion_file.EXPANSION_FILE).exists()
