"""A study with `eval.mteb` runs MTEB after each trial's final tasks through the real mteb package: mteb's own
result files land in the trial folder, the scores in summary.json (what made them in its provenance block), and
`sweep analyze` tables them beside the STS tasks; a task whose data is out of reach is refused before any trial
starts."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.helpers import needs_mteb, run_sweep, write_study

pytestmark = [pytest.mark.slow, needs_mteb]


def test_a_study_with_an_mteb_task_writes_its_files_scores_and_table(tmp_path, shared_data_dir):
    study = write_study(tmp_path, "mteb_study", "embedded", shared_data_dir, {"ema.decay": [0.5]})
    spec = yaml.safe_load(study.read_text())
    spec["base"].update(max_steps=2, eval={"eval_steps": 2, "final_tasks": ["STSBenchmark"],
                                           "mteb": ["local:STSBenchmark"]})
    study.write_text(yaml.safe_dump(spec))
    done = run_sweep(["run", str(study)], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "results" / "mteb_study"
    (trial,) = (folder / "trials").iterdir()
    summary = json.loads((trial / "summary.json").read_text())
    assert set(summary["mteb"]) == {"local:STSBenchmark"}
    # the same state, pooler and split: MTEB's STSBenchmark equals SentEval's STS-B to the 2 decimals both keep
    assert summary["mteb"]["local:STSBenchmark"] == summary["test"]["STSBenchmark"]
    assert summary["provenance"]["mteb"]["revisions"] == {"local:STSBenchmark": "senteval-verified"}
    assert summary["provenance"]["mteb"]["main_scores"] == {"local:STSBenchmark": "cosine_spearman"}
    saved = list((trial / "mteb").rglob("STSBenchmark.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["task_name"] == "STSBenchmark"

    done = run_sweep(["analyze", str(study)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (folder / "figures" / "mteb.md").read_text()
    assert "| local:STSBenchmark |" in table.splitlines()[0] and f"{summary['mteb']['local:STSBenchmark']:.2f}" in table


def test_an_mteb_task_whose_data_is_out_of_reach_is_refused_before_any_trial(tmp_path, shared_data_dir):
    study = write_study(tmp_path, "mteb_offline", "embedded", shared_data_dir, {"ema.decay": [0.5]})
    spec = yaml.safe_load(study.read_text())
    spec["base"]["eval"]["mteb"] = ["BIOSSES"]
    study.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    done = run_sweep(["run", str(study)], tmp_path, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "BIOSSES" in lines[0] and "not in the local Hugging Face cache" in lines[0]
    assert not (tmp_path / "results" / "mteb_offline" / "trials").exists()
