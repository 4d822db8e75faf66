"""A trial writes its summary.json once on each node that holds it (sweep.run.worker): the worker writes the
trainer's record with where it ran, once, where the trial runs; on a node that stages its files, the transfer leaves
summary.json out, so the driver's one write (with how the files travelled) is the only one on the driver's disk.

Writes are counted where every atomic write ends (os.replace onto the file), so a write by any code (the trainer,
the worker, the transfer's receiver) counts."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from sweep.run import trial_files, worker
from sweep.run.job import SUMMARY_KEY, TrialJob
from trainer.summary import Summary


@pytest.fixture
def counted_writes(monkeypatch):
    """Every os.replace onto a summary.json, by its folder."""
    writes: Counter = Counter()
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == "summary.json":
            writes[str(Path(dst).parent)] += 1
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return writes


@pytest.fixture
def reported(monkeypatch, tmp_path):
    """What the worker reports to the driver through Tune; its log stays on the terminal (no redirection), and
    the working directory the worker moves to is the test's again afterwards."""
    reports: list[dict] = []
    monkeypatch.setattr(worker.tune, "report", reports.append)
    monkeypatch.setattr(worker, "redirect_output", lambda path: path.touch())
    monkeypatch.chdir(tmp_path)
    return reports


def job_for(trial_dir: Path, config: dict, train_fn: str, files: dict | None = None) -> TrialJob:
    return TrialJob(key=trial_dir.name, seed=1, params={}, config={**config, "output_dir": str(trial_dir)},
                    trial_dir=str(trial_dir), cwd=str(trial_dir.parent), train_fn=train_fn, files=files, cpu=1.0,
                    gpu=0.0)


def test_a_real_trainer_run_writes_summary_json_once(tiny_model_dir, shared_data_dir, tmp_path, monkeypatch,
                                                     counted_writes, reported):
    trial_dir = tmp_path / "results" / "trials" / "k1"
    config = {"model": str(tiny_model_dir), "method": "simcse", "batch_size": 8, "max_steps": 2, "device": "cpu",
              "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 32},
              "eval": {"eval_steps": 1, "final_tasks": ["STSBenchmark"]}}
    # outside a Ray worker: where Ray placed it, stated (asking Ray would connect to whatever cluster runs here)
    place = {"cpu": 1.0, "gpu": 0.0, "gpu_ids": [], "cuda_visible_devices": None, "host": "node-1", "node_ip": None}
    monkeypatch.setattr(worker, "trial_resources", lambda cpu, gpu: place)
    monkeypatch.setattr(worker, "ray_node_id", lambda: "ab" * 28)
    worker.run_trial(job_for(trial_dir, config, "trainer.train:train").tune_config())
    assert counted_writes == {str(trial_dir): 1}
    written = json.loads((trial_dir / "summary.json").read_text())
    last = reported[-1][SUMMARY_KEY]
    assert written == last  # what the driver was told is what the node holds
    assert written["status"] == "ok" and written["resources"] == place  # the trainer's, with where it ran
    assert written["provenance"]["node"]["ray_node_id"] == "ab" * 28  # beside the trainer's host name
    assert written["config"]["output_dir"] == str(trial_dir)
    assert Summary.from_json(written).to_json() == written


def test_a_staged_trial_writes_summary_json_once_on_its_node_and_leaves_the_drivers_to_the_driver(
        tmp_path, monkeypatch, counted_writes, reported):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("FAKE_TRAIN_STEPS", "1")
    monkeypatch.setenv("FAKE_TRAIN_STEP_S", "0")
    monkeypatch.setenv(trial_files.STAGING_ENV, str(tmp_path / "staging"))
    monkeypatch.setattr(worker, "check_this_node", lambda job: None)
    study = tmp_path / "results"
    trial_dir = study / "trials" / "k1"
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        _, files = trial_files.start_receiver(study, {}, {})
        # another token than the driver's folder holds: this "node" does not see it, so it stages its files
        job = job_for(trial_dir, {"model": "embedded", "ema": {"decay": 0.5}}, "tests.fake_train:train",
                      files={**files, "token": "0" * 32})
        worker.run_trial(job.tune_config())
    finally:
        ray.shutdown()
    staged = [folder for folder in counted_writes if folder != str(trial_dir)]
    assert len(staged) == 1 and counted_writes[staged[0]] == 1  # once on the node, in its staging folder
    assert str(trial_dir) not in counted_writes and not (trial_dir / "summary.json").exists()
    assert (trial_dir / "log.txt").exists()  # the rest of the folder arrived
    summary = Summary.from_json(reported[-1][SUMMARY_KEY])
    assert summary.files["arrived"] is True and summary.config["output_dir"] == str(trial_dir)
    assert summary.status == "ok" and summary.resources["host"] == summary.files["from"]
