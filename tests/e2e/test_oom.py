"""Out of GPU memory is a trial's failure, not a crash: a stand-in trainer raises
torch.OutOfMemoryError (what CUDA raises when a batch does not fit) for the largest batch size; that trial
ends `failed` with a reason naming batch_size and resources.gpu, in summary.json, trials.csv and Optuna
(FAIL), and the other trials finish. Exit code 1, as for any trial that ended without a result."""

from __future__ import annotations

import json
import subprocess
import sys

import optuna
import pytest

from tests.deadlines import scaled
from tests.helpers import fake_env, fake_study, rows

pytestmark = pytest.mark.slow


def test_out_of_gpu_memory_fails_the_trial_and_the_study_goes_on(tmp_path, shared_data_dir):
    study = fake_study(tmp_path, "oom", shared_data_dir, parameters={"batch_size": [4, 8, 16]},
                       resources={"cpu": 1, "gpu": 0})
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(study)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=scaled(240), start_new_session=True,
                            env=fake_env(FAKE_TRAIN_OOM_BATCH="16"))
    assert result.returncode == 1, result.stdout + result.stderr  # a trial ended in an error: exit 1
    assert "Traceback" not in result.stdout + result.stderr
    study_dir = tmp_path / "results" / "oom"
    by_batch = {}
    for folder in (study_dir / "trials").iterdir():
        summary = json.loads((folder / "summary.json").read_text())
        by_batch[summary["config"]["batch_size"]] = (folder.name, summary)
    assert {b: s["status"] for b, (_, s) in by_batch.items()} == {4: "ok", 8: "ok", 16: "failed"}
    key, failed = by_batch[16]
    reason = failed["reason"]
    assert reason.startswith("out of GPU memory at batch_size=16 with resources.gpu=0"), reason
    assert "lower batch_size" in reason and "resources.gpu" in reason and "CUDA out of memory" in reason
    assert failed["resources"]["gpu"] == 0.0
    table = {r["key"]: r for r in rows(study_dir)}
    assert table[key]["state"] == "FAIL" and table[key]["status"] == "failed" and table[key]["reason"] == reason
    assert sum(r["state"] == "COMPLETE" for r in table.values()) == 2
    trials = optuna.load_study(study_name="oom", storage=f"sqlite:///{study_dir / 'optuna.db'}").get_trials()
    oom = [t for t in trials if t.user_attrs["key"] == key]
    assert len(oom) == 1 and oom[0].state.name == "FAIL"
    assert oom[0].user_attrs["status"] == "failed" and oom[0].user_attrs["reason"] == reason
    assert f"{key} failed: out of GPU memory at batch_size=16" in result.stdout  # the end-of-run summary
