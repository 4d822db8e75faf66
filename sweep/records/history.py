"""One study per results folder: compare a spec with the study.yaml recorded in results/<name>/.

    check_same_study(spec, extend=False) -> StudyChange | None   (raises UserError when refused)
    record_change(folder, change)        appends to results/<name>/study_history.yaml

A run whose spec differs from the recorded one only by added parameter values, added seeds or a larger
budget extends the study (finished trials stay finished). Any other difference (base, method, metric,
search space, storage, scheduler, constraints) would mix two studies in one folder and one Optuna
study: refused with exit 2 before anything is written, naming the changed fields and the fixes (a new
`name:`, or `--extend` to add the trials to this study deliberately). Extensions and `--extend` runs
are recorded in study_history.yaml with the previous study.yaml.

The comparison is on the specs (StudySpec.to_dict, defaults filled in), not on trial keys.

`keep_weights` is a run field like the trainer's save_model: which trials keep their weights changes no
trial's result, so a new value is neither another study nor an extension; `keep_weights_changed` tells the
run's plan (sweep.run.plan), which then runs again the finished trials the study now keeps without weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sweep.records.store import StudyFolder
from sweep.spec import StudySpec
from trainer.errors import UserError

# Fields that do not change what a trial computes: a change is neither an extension nor a new study.
NEUTRAL_FIELDS = ("description", "resources", "results_dir", "analysis", "loggers", "tracking", "reuse_workers",
                  "keep_weights", "reference", "cost_limit")
HISTORY_FILE = "study_history.yaml"


@dataclass
class StudyChange:
    """How a spec differs from the one recorded in its results folder."""

    added: list[str] = field(default_factory=list)  # "seeds +[3]", "parameters.ema.decay +[0.99]", ...
    changed: list[str] = field(default_factory=list)  # fields that make it another study
    previous_text: str = ""

    @property
    def any(self) -> bool:
        return bool(self.added or self.changed)


def compare_specs(old: dict[str, Any], new: dict[str, Any]) -> StudyChange:
    """How `new` differs from `old` (both StudySpec.to_dict()).

    >>> old = {"name": "s", "seeds": [1], "parameters": {"lr": [1, 2]}, "method": "grid", "base": {"a": 1}}
    >>> c = compare_specs(old, {**old, "seeds": [1, 2], "parameters": {"lr": [1, 2, 3]}})
    >>> c.added, c.changed
    (['seeds +[2]', 'parameters.lr +[3]'], [])
    >>> compare_specs(old, {**old, "base": {"a": 2}, "method": "random"}).changed
    ['method', 'base.a']
    """
    change = StudyChange()
    for key in dict.fromkeys([*old, *new]):
        if key in NEUTRAL_FIELDS:
            continue
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if key == "seeds" and isinstance(before, list) and isinstance(after, list) and set(before) <= set(after):
            change.added.append(f"seeds +{[s for s in after if s not in before]}")
        elif key == "budget" and isinstance(before, int) and isinstance(after, int) and after > before:
            change.added.append(f"budget {before} -> {after}")
        elif key == "parameters" and isinstance(before, dict) and isinstance(after, dict):
            _compare_parameters(before, after, change)
        elif key == "base" and isinstance(before, dict) and isinstance(after, dict):
            change.changed.extend(f"base.{name}" for name in _dotted_differences(before, after))
        else:
            change.changed.append(key)
    return change


def _compare_parameters(before: dict[str, Any], after: dict[str, Any], change: StudyChange) -> None:
    for name in dict.fromkeys([*before, *after]):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list) and all(v in new for v in old):
            change.added.append(f"parameters.{name} +{[v for v in new if v not in old]}")
        else:
            change.changed.append(f"parameters.{name}")


def _dotted_differences(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in dict.fromkeys([*before, *after]):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if isinstance(a, dict) or isinstance(b, dict):  # a section added or removed: name its keys
            a = a if isinstance(a, dict) else {}
            b = b if isinstance(b, dict) else {}
        if isinstance(a, dict) and isinstance(b, dict) and (a or b):
            out.extend(_dotted_differences(a, b, f"{prefix}{key}."))
        else:
            out.append(f"{prefix}{key}")
    return out


def recorded_spec(folder: StudyFolder, plugin_folder: Path | None = None) -> tuple[dict[str, Any], str] | None:
    """The spec recorded in the results folder (to_dict form) and its text; None when there is none.
    `plugin_folder`: where the study's plugin files are (the study file's folder)."""
    if not folder.study_yaml.is_file():
        return None
    text = folder.study_yaml.read_text()
    from sweep.spec import load_study

    try:
        return (load_study(folder.study_yaml, trials=False, plugin_folder=plugin_folder).to_dict(),  # no trials built
                text)
    except UserError:
        data = yaml.safe_load(text)  # recorded by another version: compare what it says
        return (data if isinstance(data, dict) else {}), text


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


def check_same_study(spec: StudySpec, extend: bool = False) -> StudyChange | None:
    """None when the folder holds no study yet or the same spec; the change when the spec extends it
    (or `extend` accepts any change); a UserError (exit 2, nothing written) otherwise."""
    folder = StudyFolder(spec.study_dir)
    if spec.source_text and _read(folder.study_yaml) == spec.source_text:
        return None  # the very file recorded: the same spec (validating it again costs seconds at 10,000 trials)
    recorded = recorded_spec(folder, spec.plugin_folder)
    if recorded is None:
        return None
    old, text = recorded
    change = compare_specs(old, spec.to_dict())
    change.previous_text = text
    if not change.any:
        return None
    if change.changed and not extend:
        where = spec.path or "the spec"
        raise UserError(
            f"{where}: results/{spec.name} holds another study (recorded in {folder.study_yaml}); changed: "
            f"{', '.join(change.changed)}. Give this study a new `name:`, or run with --extend to add its "
            "trials to the same study on purpose (recorded in its study_history.yaml)")
    return change


def keep_weights_changed(spec: StudySpec) -> bool:
    """Whether `spec` keeps other weights than the study recorded in its results folder (False when the folder
    holds no study yet). Read before the run records the new spec."""
    folder = StudyFolder(spec.study_dir)
    text = _read(folder.study_yaml)
    if text is None or (spec.source_text and text == spec.source_text):
        return False
    recorded = recorded_spec(folder, spec.plugin_folder)
    before = (recorded[0] if recorded else {}).get("keep_weights", 1)
    return before != spec.to_dict()["keep_weights"]


def record_change(folder: StudyFolder, change: StudyChange, extend: bool) -> None:
    """Append the change and the previous study.yaml to results/<name>/study_history.yaml."""
    from trainer.files import write_text_atomic

    path = folder.path / HISTORY_FILE
    history: list[Any] = []
    if path.is_file():
        loaded = yaml.safe_load(path.read_text())
        history = loaded if isinstance(loaded, list) else []
    history.append({
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "kind": "extended with --extend" if change.changed else "extended",
        "added": change.added, "changed": change.changed, "previous_study_yaml": change.previous_text,
    })
    write_text_atomic(path, yaml.safe_dump(history, sort_keys=False))
