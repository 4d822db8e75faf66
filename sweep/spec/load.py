"""`load_study`: a study file -> a validated StudySpec (schema.py), its grid or random expansion checked
(expand.py), every mistake one UserError on the key's line.

    load_study(path) -> StudySpec    # raises trainer.errors.UserError: "FILE:LINE: key 'a.b': expected ..."

It sits above schema and expand, which both stay free of it (and of each other's way back).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from pydantic import ValidationError

from sweep.spec.expand import check_expansion
from sweep.spec.key_lines import KeyLines, parse_yaml, read_study_text
from sweep.spec.limits import MAX_TRIALS
from sweep.spec.schema import SECTION_MODELS, StudySpec, UserErrorAt
from sweep.text import suggestion, type_name
from trainer.errors import UserError, expected_text

_MISSING_HELP = {
    "name": "the study has no 'name'; expected e.g. name: queue_init (it names the results folder and the "
            "Optuna study)",
    "base": "the study has no 'base'; expected a trainer config mapping with at least 'model' (e.g. base: "
            "{model: bert-base-uncased, method: mocose})",
}


def load_study(path: str | Path, *, trials: bool = True, max_trials: int | None = MAX_TRIALS,
               plugin_folder: Path | None = None) -> StudySpec:
    """Read and validate a study file; every mistake is a one-line UserError naming file, key, line.

    Nothing is written. Grid and random studies are expanded once here, so a combination that is not
    a valid trainer config fails now rather than halfway through a sweep. `trials=False` skips that
    expansion (every key and value is still checked): for readers of a results folder (`sweep status`,
    `sweep dashboard`, `sweep export`) that need the study's name, folder and storage, not its trials,
    which cost seconds to build for a 10,000-trial study. A study of more than `max_trials` trials is
    refused before they are built (None: any number; `sweep run --many-trials`). `plugin_folder`: where its
    plugin files are (default: the file's own folder; a results folder's study.yaml is a copy of a study whose
    plugins lie beside the original).
    """
    text = read_study_text(Path(path))
    data, key_lines = parse_yaml(text, str(path))
    if data is None:
        raise UserError(f"{path}:1: the study file is empty; expected a mapping with at least name and base")
    keys = [name for name in StudySpec.model_fields if name not in ("source_text", "path", "key_lines")]
    if not isinstance(data, dict):
        raise UserError(f"{path}:1: expected a mapping of study keys ({', '.join(keys)}), got {type_name(data)}")
    for key in data:
        if key not in keys:
            raise key_lines.error((key,), f"is not a study key; expected one of {', '.join(keys)}"
                                  + suggestion(key, keys))
    _load_plugins(data.get("plugins"), plugin_folder or Path(path).parent, key_lines)
    try:
        spec = StudySpec.model_validate({**copy.deepcopy(data), "source_text": text, "path": str(path),
                                         "key_lines": key_lines},
                                        context={"max_trials": max_trials if trials else None,
                                                 "plugin_folder": plugin_folder})
    except ValidationError as exc:
        raise _located(exc, key_lines) from None
    if trials:
        check_expansion(spec)
    return spec


def _load_plugins(plugins: object, folder: Path, key_lines: KeyLines) -> None:
    """The study's plugins, imported before any key is checked (base, parameters, constraints and exprs name their
    methods' keys); a plugin that is not there is refused on its line. A `plugins:` that is no list of texts is
    left to the schema, which says so."""
    from trainer.methods.plugins import PluginNotFound, load_plugins

    if not isinstance(plugins, list) or not all(isinstance(item, str) and item for item in plugins):
        return
    for index, item in enumerate(plugins):
        try:
            load_plugins([item], folder)
        except PluginNotFound as exc:
            raise key_lines.error(("plugins", index), str(exc)) from None


def _located(exc: ValidationError, key_lines: KeyLines) -> UserError:
    """pydantic's first error as "FILE:LINE: key 'a.b': expected ..., got ..." on the key's line."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    if error["type"] == "missing" and len(loc) == 1 and loc[0] in _MISSING_HELP:
        return key_lines.error((), _MISSING_HELP[loc[0]], show_key=False)
    if isinstance((error.get("ctx") or {}).get("error"), UserErrorAt):
        return key_lines.error(error["ctx"]["error"].path, str(error["ctx"]["error"]))
    if error["type"] == "extra_forbidden":
        section = loc[0]
        known = list(type(SECTION_MODELS[section]()).model_fields)
        article = "an" if str(section)[:1] in "aeiou" else "a"
        return key_lines.error(loc, f"is not {article} {section} key; expected {', '.join(known)}"
                           + suggestion(loc[-1], known))
    loc = tuple(part for part in loc if not (isinstance(part, str) and "[" in part))  # pydantic's union branches
    message = expected_text(error)
    if error["type"] == "literal_error":
        message += suggestion(error.get("input"), re.findall(r"'([^']*)'", str(error["ctx"].get("expected"))))
    return key_lines.error(loc, message)
