"""`sweep analyze TARGET`: draw a study's figures and tables, and attach them to its Optuna study.

TARGET is a results folder (results/<study>) or a study YAML, from which `name` and `results_dir`
(default "results", relative to the working directory as for `sweep run`) give the folder.

`--figure-width single` (the default) draws every figure one journal column wide (3.5 in), `double` the
full page width (7.2 in); `--mtd measured` plots the MTD figures against the measured distance, written and
attached as <name>_measured.png beside the formula's <name>.png (analysis.report); `--formats` picks the files
each figure is written as (png, pdf, svg; default png,pdf), its data always as .csv beside them.

Attaching: when the study's Optuna storage exists (the `storage` key of <study_dir>/study.yaml, else
sqlite:///<study_dir>/optuna.db), every PNG written is uploaded as a study-level artifact into a
FileSystemArtifactStore at <study_dir>/artifacts, so that `sweep dashboard <study_dir>` (optuna-dashboard on
that storage with that artifact store) shows them. A figure already attached with the same file name and the
same bytes is not uploaded again, so re-running analyze on unchanged results adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from trainer.errors import UserError


def analyze_command(target: str, attach: bool = True, mtd_source: str = "formula", size: str = "single",
                    formats: str = "png,pdf") -> int:
    from analysis.load import OLDER_READING_FOLDER, ResultsError, read_study_spec
    from analysis.report import analyze, check_formats

    try:
        kinds = check_formats([kind.strip().lower() for kind in formats.split(",") if kind.strip()])
    except ValueError as exc:
        raise UserError(f"--formats: {exc} (e.g. --formats png,pdf)") from None
    study_dir, spec = _study_dir(target)
    _load_plugins(target, spec, study_dir)
    notes: list[str] = []
    try:
        written = analyze(study_dir, mtd_source=mtd_source, size=size, notes=notes, formats=kinds)
    except ResultsError as exc:
        raise UserError(str(exc)) from None
    for note in notes:
        print(note)
    print(f"wrote {len(written)} files to {written[0].parent if written else study_dir}:")
    for path in written:
        print(f"  {path.relative_to(written[0].parent) if path.is_relative_to(written[0].parent) else path}")

    if attach:
        study_spec = read_study_spec(study_dir) or spec
        storage = study_spec.get("storage") or f"sqlite:///{(study_dir / 'optuna.db').resolve()}"
        name = study_spec.get("name") or study_dir.name
        # the current reading's figures only: an older reading's are analysed apart and not shown as the study's
        pngs = [p for p in written if p.suffix == ".png" and OLDER_READING_FOLDER not in p.parts]
        attach_figures(pngs, storage, name, study_dir / "artifacts")
    return 0


def attach_figures(pngs: list[Path], storage: str, study_name: str, artifact_dir: Path) -> int:
    """Upload PNGs to the Optuna study as study artifacts; returns how many were uploaded."""
    if not pngs:
        return 0
    if storage.startswith("sqlite:///") and not Path(storage[len("sqlite:///"):]).is_file():
        print(f"no Optuna storage at {storage}; figures not attached (the files above are complete)")
        return 0
    import optuna
    from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta, upload_artifact

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        print(f"no Optuna study {study_name!r} in {storage}; figures not attached")
        return 0
    except Exception as exc:  # an unreachable database must not hide the figures already written
        print(f"could not open Optuna storage {storage} ({' '.join(str(exc).split())[:200]}); figures not attached",
              file=sys.stderr)
        return 0

    artifact_dir.mkdir(parents=True, exist_ok=True)
    store = FileSystemArtifactStore(base_path=str(artifact_dir))
    attached = _attached_digests(store, get_all_artifact_meta(study))
    uploaded = 0
    for png in pngs:
        if _digest(png.read_bytes()) in attached.get(png.name, set()):
            continue
        upload_artifact(artifact_store=store, file_path=str(png), study_or_trial=study, mimetype="image/png")
        uploaded += 1
    print(f"attached {uploaded} new figure(s) to Optuna study {study_name!r} "
          f"({len(pngs) - uploaded} unchanged); view them with: sweep dashboard {artifact_dir.parent}")
    return uploaded


def _study_dir(target: str) -> tuple[Path, dict[str, Any]]:
    """The results folder of a target (folder or study YAML) and the YAML's keys, if any."""
    path = Path(target)
    if path.is_dir():
        return path, {}
    if not path.is_file():
        raise UserError(f"{target} not found: pass a results folder (results/<study>) or a study YAML file")
    if path.suffix not in (".yaml", ".yml"):
        raise UserError(f"{target}: expected a results folder or a study YAML file (.yaml)")
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{target}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(spec, dict) or not spec.get("name"):
        raise UserError(f"{target}: a study YAML needs a 'name' key (the results go to <results_dir>/<name>)")
    study_dir = Path(str(spec.get("results_dir") or "results")) / str(spec["name"])
    if not study_dir.is_dir():
        raise UserError(f"{study_dir}: no results yet for study {spec['name']!r}; run `sweep run {target}` first")
    return study_dir, spec


def _load_plugins(target: str, spec: dict[str, Any], study_dir: Path) -> None:
    """Register the study's methods of one's own, so that their knobs are read as the trials ran them (a figure for
    a plugin's number key): from the study file's `plugins` (relative to its folder), or, given a results folder,
    the plugin files the trials' provenance names that are still there."""
    from trainer.methods.plugins import load_plugins

    if spec.get("plugins") and Path(target).is_file():
        load_plugins([str(item) for item in spec["plugins"]], Path(target).parent)
        return
    recorded: set[str] = set()
    for path in sorted(study_dir.glob("trials/*/summary.json")):
        try:
            code = json.loads(path.read_text()).get("provenance", {}).get("code", {})
        except (OSError, ValueError, AttributeError):
            continue
        recorded.update(code.get("plugins") or {})
    load_plugins(sorted(item for item in recorded if Path(item).is_file()))


def _attached_digests(store: Any, metas: list[Any]) -> dict[str, set[str]]:
    """File name -> digests of the artifacts already attached under that name."""
    digests: dict[str, set[str]] = {}
    for meta in metas:
        try:
            with store.open_reader(meta.artifact_id) as reader:
                digests.setdefault(meta.filename, set()).add(_digest(reader.read()))
        except Exception:  # an artifact whose file was removed by hand: upload again
            continue
    return digests


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
