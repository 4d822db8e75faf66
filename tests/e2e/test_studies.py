"""Every study in studies/ runs and analyses as a new user would run it, and its tables and figures say
what the study file asks for.

Each YAML is shrunk (the embedded model, the corpus sample, the fake trainer, at most two values per
swept key and one or two seeds) and run through `sweep run` and `sweep analyze`. The expected
configurations are computed here, independently of sweep/spec and analysis/: the cartesian product of
the (shrunk) parameter lists, `{expr}` values and `constraints` evaluated by Python against the trial's
config, and the study's seeds. The expected figures come from this file's own reading of which paper
figure each swept knob is for. A study file added later is covered without editing this test.
"""

from __future__ import annotations

import copy
import itertools
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import yaml

from tests.deadlines import scaled
from tests.helpers import REPO

STUDIES = sorted((REPO / "studies").glob("*.yaml"))
pytestmark = pytest.mark.slow

TRANSFER_TASKS = {"MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"}
# Which paper figure each swept key is for (MoCoSE Tables 3, 4, 6a, 6b, 7, 8, 9; GS-InfoNCE Table 3; MixCSE).
FIGURE_OF_KNOB = {
    "queue.slices": "queue_slices", "ema.decay": "ema_decay", "batch_size": "batch_size", "fgsm.eps": "fgsm_eps",
    "heads.projection_layers": "head_depth", "heads.predictor_layers": "head_depth",
    "heads.embedding_dim": "predictor_width", "mix.lam": "mix_lambda",
    "gaussian.count_per_batch": "gaussian_m", "gaussian.count": "gaussian_m",
}
MOCOSE_FIGURES = {"queue_slices", "ema_decay", "head_depth", "predictor_width", "queue_heatmap"}
# Keys that move d = 1/(1-eta) + K/B (MoCoSE eq. 4): sweeping one of them calls for the MTD figures.
MTD_INPUTS = {"ema.decay", "ema.decay_end", "ema.schedule", "ema.schedule_steps", "queue.size", "queue.slices",
              "batch_size"}


def test_every_study_file_is_covered():
    assert len(STUDIES) >= 13 and (REPO / "studies" / "methods.yaml") in STUDIES


@pytest.mark.parametrize("study_file", STUDIES, ids=lambda path: path.stem)
def test_study_runs_and_its_analysis_has_one_row_per_configuration(study_file, tmp_path, shared_data_dir,
                                                                   monkeypatch):
    from sweep.commands.analyze import analyze_command

    spec = shrink(yaml.safe_load(study_file.read_text()), tmp_path, shared_data_dir)
    path = tmp_path / study_file.name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**_env(), "FAKE_TRAIN_STEPS": "1", "FAKE_TRAIN_STEP_S": "0"}
    run = subprocess.run([sys.executable, "-m", "sweep", "run", str(path), "--max-concurrent", "2"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=scaled(300))
    assert run.returncode == 0, run.stdout + run.stderr
    monkeypatch.chdir(tmp_path)
    assert analyze_command(str(path)) == 0  # in this process: the same code as `sweep analyze`, 4 s less
    folder = tmp_path / "results" / spec["name"]
    figures = folder / "figures"

    expected = configurations(spec)
    swept = swept_keys(spec)
    seeds = len(spec["seeds"])
    tables = ["scores.csv"] + (["transfer.csv"] if _runs_transfer(spec) else [])
    for name in tables:
        rows = pd.read_csv(figures / name)
        assert set(swept) <= set(rows.columns), f"{name} lacks a swept key: {rows.columns.tolist()}"
        got = sorted(tuple(_norm(row[key]) for key in swept) for _, row in rows.iterrows())
        want = sorted(tuple(_norm(config[key]) for key in swept) for config in expected)
        assert got == want, f"{name}: rows {got} != configurations {want}"
        assert (rows["n"] == seeds).all(), f"{name}: n {rows['n'].tolist()} != {seeds} seeds"
    assert not (figures / "transfer.csv").exists() or _runs_transfer(spec)

    drawn = {p.stem for p in figures.glob("*.png")}
    assert drawn == expected_figures(spec, folder), f"figures drawn {sorted(drawn)}"
    for name in drawn:  # every figure's points are configurations, each over the study's seeds
        data = pd.read_csv(figures / f"{name}.csv")
        marks = (~data["series"].isin(["paper", "paper best MTD", "fit", "best MTD"])  # not points of trials
                 if "series" in data.columns else pd.Series(True, index=data.index))  # paired: a row per configuration
        measured = data[marks & data["n"].notna()] if "n" in data.columns else data.iloc[:0]
        assert measured.empty or (measured["n"] == seeds).all(), f"{name}: n {measured['n'].tolist()}"


# ---- the study, shrunk ----------------------------------------------------------------------------
def shrink(spec: dict[str, Any], tmp_path: Path, data_dir: Path) -> dict[str, Any]:
    """The study at laptop size: embedded model, corpus sample, two values per swept list (the reference's value
    one of them), two seeds where that leaves at most two configurations (else one: n = 1 still shows any pooling,
    as n = 2)."""
    spec = copy.deepcopy(spec)
    base = spec["base"]
    base["model"] = "embedded"
    base.setdefault("data", {}).update(corpus=str(data_dir / "corpus" / "wiki1m_sample.txt"), data_dir=str(data_dir))
    spec["resources"] = {"cpu": 0.5, "gpu": 0}
    spec["results_dir"] = str(tmp_path / "results")
    reference = spec.get("reference") or {}
    for key, values in (spec.get("parameters") or {}).items():
        if isinstance(values, list):  # the first two values, the study's reference among them
            kept = values[:2]
            if key in reference and reference[key] in values and reference[key] not in kept:
                kept = [values[0], reference[key]]
            spec["parameters"][key] = kept
    if spec.get("budget"):
        spec["budget"] = min(int(spec["budget"]), 3)
    spec["seeds"] = spec["seeds"][:2] if len(configurations(spec)) <= 2 else spec["seeds"][:1]
    return spec


def swept_keys(spec: dict[str, Any]) -> list[str]:
    """The keys that tell configurations apart: the parameters, less lone {expr} (derived) values."""
    return [key for key, values in (spec.get("parameters") or {}).items()
            if not (isinstance(values, dict) and set(values) == {"expr"})]


def configurations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The grid's configurations after constraints, by dotted key (values as written; exprs evaluated)."""
    from trainer.config import RunConfig  # the trainer's defaults: constraints see the resolved config

    parameters = spec.get("parameters") or {}
    lists = {key: values for key, values in parameters.items() if isinstance(values, list)}
    out = []
    for combo in itertools.product(*lists.values()):
        values = dict(zip(lists, combo))
        config = copy.deepcopy(spec["base"])
        for key, value in values.items():
            if not _is_expr(value):
                _set(config, key, value)
        for key, value in list(values.items()) + [(k, v) for k, v in parameters.items() if k not in lists]:
            if _is_expr(value):
                values[key] = eval(value["expr"], {}, _namespace(config))  # noqa: S307 (the study's own text)
                _set(config, key, values[key])
        if (_get(config, "queue.initial_size") or 0) > (_get(config, "queue.size") or math.inf):
            continue  # the built-in constraint (sweep/spec: K0 > K is dropped)
        resolved = RunConfig.from_dict({**config, "seed": 0}).resolved().to_dict()
        if all(eval(c, {}, _namespace(resolved)) for c in spec.get("constraints") or []):  # noqa: S307
            if values not in out:
                out.append(values)
    return out


def expected_figures(spec: dict[str, Any], folder: Path) -> set[str]:
    """The figures this study's swept keys call for, and only those the finished trials can support."""
    swept = set(swept_keys(spec)) | set((spec.get("analysis") or {}).get("knobs") or [])
    trials = pd.read_csv(folder / "trials.csv")
    methods = set(trials["method"])
    names = {FIGURE_OF_KNOB[k] for k in swept if k in FIGURE_OF_KNOB}
    if {"queue.size", "queue.initial_size"} <= swept:
        names.add("queue_heatmap")
    if "mocose" not in methods:
        names -= MOCOSE_FIGURES
    if "gs" not in methods:
        names.discard("gaussian_m")
    if "mix" not in methods:
        names.discard("mix_lambda")
    if len(spec["seeds"]) >= 2 and len(configurations(spec)) >= 2:  # configurations sharing seeds: paired
        names.add("paired_differences")
    mocose = trials[trials["method"] == "mocose"]
    if swept & (MTD_INPUTS | {"mtd"}) and mocose["mtd"].round(6).nunique() >= 3:
        names |= {"score_vs_mtd", "align_uniform_vs_mtd"}  # the fake trainer reports align/uniform
        if "batch_size" in swept and mocose["batch_size"].nunique() >= 2:
            names.add("score_vs_mtd_by_batch")
    return names


def _runs_transfer(spec: dict[str, Any]) -> bool:
    return bool(TRANSFER_TASKS & set((spec["base"].get("eval") or {}).get("final_tasks") or []))


def _is_expr(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"expr"}


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    *sections, last = key.split(".")
    for section in sections:
        config = config.setdefault(section, {})
    config[last] = value


def _get(config: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def _namespace(config: dict[str, Any]) -> dict[str, Any]:
    def wrap(value: Any) -> Any:
        return SimpleNamespace(**{k: wrap(v) for k, v in value.items()}) if isinstance(value, dict) else value

    return {key: wrap(value) for key, value in config.items()}


def _norm(value: Any) -> Any:
    """One spelling for a table cell and a study value: slices as "a-b+c-d", numbers as floats."""
    if isinstance(value, list):
        return "+".join(str(v) for v in value)
    if isinstance(value, bool):
        return str(value)
    try:
        return round(float(value), 12)
    except (TypeError, ValueError):
        return str(value)


def _env() -> dict[str, str]:
    import os

    return dict(os.environ, PYTHONPATH=str(REPO), SWEEP_TRAIN_FN="tests.fake_train:train")
