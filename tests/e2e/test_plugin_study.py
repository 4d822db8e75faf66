"""A method of one's own, end to end, as the docs ship it (docs/examples/dcl/): the DCL plugin's study, SimCSE
against DCL over its knob with 3 seeds, runs through Ray Tune with the real trainer on the embedded model (4
steps each), analyses (the paired table and figure), exports, and after an edit of the plugin's loss its
finished trials are named as another code state. No file of the tool is changed for it."""

from __future__ import annotations

import csv
import os
import re
import shutil

import pytest

from tests.deadlines import scaled
from tests.helpers import REPO, query_dashboard, run_sweep

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "docs" / "examples" / "dcl"


# 12 real trials, then analyze, export and a dry run: about 480 s on a loaded 2-core machine, near the default
# 600 s limit; its own limit leaves room for its subprocesses' deadlines (run 1200 s, analyze and export 300 s each)
@pytest.mark.timeout(scaled(1800))
def test_the_dcl_plugin_study_runs_analyses_and_exports(tmp_path, shared_data_dir):
    for name in ("dcl.py", "dcl_vs_simcse.yaml"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    env = {**os.environ, "SWEEP_DATA_DIR": str(shared_data_dir), "PYTHONPATH": str(REPO)}
    env.pop("SWEEP_TRAIN_FN", None)  # the real trainer: the plugin's loss runs
    run = run_sweep(["run", "dcl_vs_simcse.yaml", "--max-concurrent", "2"], tmp_path, timeout=1200, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    folder = tmp_path / "results" / "dcl_vs_simcse"
    rows = list(csv.DictReader((folder / "trials.csv").open()))
    assert len(rows) == 12 and {row["state"] for row in rows} == {"COMPLETE"}
    simcse = [row for row in rows if row["method"] == "simcse"]
    assert sorted(row["seed"] for row in simcse) == ["1", "2", "3"]  # once per seed: it reads no dcl.sigma
    assert {row["dcl.sigma"] for row in simcse} == {""}
    assert sorted(row["dcl.sigma"] for row in rows if row["method"] == "dcl") == ["", "", "", *["0.5"] * 3,
                                                                                  *["1.0"] * 3]
    assert all("+" in row["commit"] for row in rows)  # the plugin's source is part of every trial's code state

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="dcl_vs_simcse", storage=f"sqlite:///{folder / 'optuna.db'}")
    params = {row["key"]: t.params for row in rows for t in study.trials if t.user_attrs.get("key") == row["key"]}
    assert all(params[row["key"]] == {"method": "simcse"} for row in simcse)
    # the dashboard (optuna-dashboard's own API on the study's storage) shows all 12, the knob on DCL's alone
    studies, dashboard = query_dashboard(f"sqlite:///{folder / 'optuna.db'}")
    assert [s["study_name"] for s in studies["study_summaries"]] == ["dcl_vs_simcse"]
    shown = [{p["name"]: p["param_external_value"] for p in trial["params"]} for trial in dashboard["trials"]]
    assert len(shown) == 12 and all(trial["state"] == "Complete" for trial in dashboard["trials"])
    assert sorted(trial["method"] for trial in shown) == ["dcl"] * 9 + ["simcse"] * 3
    assert all("dcl.sigma" not in trial for trial in shown if trial["method"] == "simcse")
    assert any("dcl.sigma" in trial for trial in shown)

    analyze = run_sweep(["analyze", "dcl_vs_simcse.yaml"], tmp_path, timeout=300, env=env)
    assert analyze.returncode == 0, analyze.stdout + analyze.stderr
    figures = folder / "figures"
    paired = list(csv.DictReader((figures / "paired.csv").open()))
    assert sorted(row["method"] for row in paired) == ["dcl", "dcl", "dcl"]  # each against SimCSE, seed by seed
    assert (figures / "paired_differences.png").is_file() and (figures / "scores.csv").is_file()
    knob = list(csv.DictReader((figures / "knob.csv").open()))  # the figure for the plugin's knob: DCL's trials
    scores = [row for row in knob if row["panel"] == "score"]
    assert sorted((row["x_label"], row["n"]) for row in scores) == [("0.5", "3"), ("1", "3"), ("default", "3")]
    # beneath them each value against SimCSE, the study's reference: the paired table's rows, on the knob's axis
    differences = {row["x_label"]: row for row in knob if row["panel"] == "paired difference"}
    assert sorted(differences) == ["0.5", "1", "default"]
    for row in paired:
        drawn = differences[f"{float(row['dcl.sigma']):g}" if row["dcl.sigma"] else "default"]
        assert [float(drawn[key]) for key in ("mean", "ci_low", "ci_high")] == pytest.approx(
            [float(row[key]) for key in ("mean_difference", "ci_low", "ci_high")])
        assert (drawn["n"], drawn["interval"]) == (row["n"], "paired t")

    export = run_sweep(["export", str(folder), "--best", str(tmp_path / "model")], tmp_path, timeout=300, env=env)
    assert export.returncode == 0, export.stdout + export.stderr
    assert (tmp_path / "model" / "model.safetensors").is_file()

    plugin = tmp_path / "dcl.py"  # the loss edited: every finished trial ran on another code state
    plugin.write_text(plugin.read_text().replace("return (negatives - positive).mean()",
                                                 "return (negatives - positive).mean() * 1.0"))
    dry = run_sweep(["run", "dcl_vs_simcse.yaml", "--dry-run"], tmp_path, timeout=120, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "12 finished trials ran on another code state" in dry.stdout, dry.stdout
    table = [line for line in dry.stdout.splitlines() if re.match(r"[0-9a-f]{12} ", line)]
    assert len(table) == 12 and all(line.endswith("COMPLETE (other code)") for line in table), dry.stdout
