"""`sweep run` end to end under Ray with the real trainer on a tiny random BERT (slow).

Its helpers shared with other test modules (write_study, read_csv, optuna_trials, query_dashboard,
run_sweep, kill_session_until_gone, ...) are in tests/helpers.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from sweep.run.runner import run_study
from sweep.spec import load_study
from tests.deadlines import scaled, wait_until
from tests.helpers import (
    REPO,
    assert_complete_study,
    kill_session_until_gone,
    optuna_trials,
    query_dashboard,
    read_csv,
    run_sweep,
    trial_progress,
    write_study,
)
from trainer.vocabulary import FINAL_STATUSES

pytestmark = pytest.mark.slow


# ---- helpers --------------------------------------------------------------------------------------------
def results_of(summary: dict) -> dict:
    """A trainer summary without what may differ between two runs of one config: timings, paths, resources."""
    timing = ("train_seconds", "eval_seconds", "final_eval_seconds", "wall_time_s", "sentences_per_s", "elapsed_s",
              "resources", "config")
    out = {k: v for k, v in summary.items() if k not in timing and "path" not in k and "dir" not in k}
    if "provenance" in out:  # where it ran (a Ray node, or none for the trainer's own CLI) is not a result
        out["provenance"] = {k: v for k, v in out["provenance"].items() if k != "node"}
    out["history"] = [{k: v for k, v in entry.items() if k not in timing} for entry in summary.get("history", [])]
    return out


def start_driver(study: Path, cwd: Path) -> subprocess.Popen:
    """`sweep run STUDY` one trial at a time, in the background, in its own session (to kill or interrupt)."""
    return subprocess.Popen([sys.executable, "-m", "sweep", "run", str(study), "--max-concurrent", "1"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def wait_while_running(condition, driver: subprocess.Popen, timeout: float = 180) -> bool:
    """Poll `condition` every 0.1 s; False on the (scaled) timeout or when the driver exits first."""
    return wait_until(condition, timeout, still_worth_waiting=lambda: driver.poll() is None)


# ---- tests ----------------------------------------------------------------------------------------------
def test_grid_runs_under_ray_and_is_mirrored_to_optuna_and_disk(tmp_path, tiny_model_dir, shared_data_dir, capsys):
    spec = load_study(write_study(tmp_path, "grid2x2", tiny_model_dir, shared_data_dir))
    assert run_study(spec, max_concurrent=2) == 0
    study_dir = Path(spec.study_dir)
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    trials = assert_complete_study(study_dir, "grid2x2", storage, 4)

    assert len(trials) == 4
    for t in trials:
        assert set(t.params) == {"ema.decay", "queue.size"}
        assert set(t.intermediate_values) == {3, 6}  # learning curve: one value per evaluation
        assert t.value == pytest.approx(t.user_attrs["best_dev_stsb"])
        for attr in ("key", "seed", "mtd", "STSBenchmark", "align", "uniform", "status", "mtd_queue_age_mean"):
            assert attr in t.user_attrs, attr
        assert "avg" not in t.user_attrs  # STS-B test alone: no seven-task average
    grid = {(t.params["ema.decay"], t.params["queue.size"]) for t in trials}
    assert grid == {(0.5, 16), (0.5, 32), (0.9, 16), (0.9, 32)}
    assert (study_dir / "study.yaml").read_text() == spec.source_text

    # Worker reuse (`reuse_workers: true`, the default): two workers ran the four trials, and a trial that ran
    # after another in the same worker has the summary of the same config run alone in a fresh process.
    runs = {}  # key -> (pid, start time) from the first line of its log.txt ("=== trial KEY pid PID ... t=T")
    for t in trials:
        words = (study_dir / "trials" / t.user_attrs["key"] / "log.txt").read_text().split()
        runs[t.user_attrs["key"]] = (words[4], float(next(w for w in words if w.startswith("t="))[2:]))
    assert len({pid for pid, _ in runs.values()}) < 4
    later = max(runs, key=lambda key: (sum(pid == runs[key][0] for pid, _ in runs.values()), runs[key][1]))
    assert any(pid == runs[later][0] and start < runs[later][1] for pid, start in runs.values())
    reused = json.loads((study_dir / "trials" / later / "summary.json").read_text())
    fresh_config = tmp_path / "fresh.yaml"
    fresh_config.write_text(yaml.safe_dump({**reused["config"], "output_dir": str(tmp_path / "fresh")}))
    alone = subprocess.run([sys.executable, "-m", "trainer", str(fresh_config)], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"),  # as in a 1-CPU trial
                           timeout=scaled(300), check=False)
    assert alone.returncode == 0, alone.stderr[-2000:]
    fresh = json.loads((tmp_path / "fresh" / "summary.json").read_text())
    assert results_of(reused) == results_of(fresh)

    out = capsys.readouterr().out
    assert "4/4 ended" in out and "best dev_stsb" in out and "ETA" in out

    studies, study = query_dashboard(storage)
    assert [s["study_name"] for s in studies["study_summaries"]] == ["grid2x2"]
    assert len(study["trials"]) == 4
    assert all(len(t["intermediate_values"]) == 2 and t["state"] == "Complete" for t in study["trials"])
    assert "name: grid2x2" in study["note"]["body"]

    # running it again skips everything, starts no Ray, adds no Optuna trial
    assert run_study(spec) == 0
    assert len(optuna_trials("grid2x2", storage)) == 4
    assert "4 already ended" in capsys.readouterr().out

    result = run_sweep(["status", str(study_dir)], cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "4 trials: 4 COMPLETE" in result.stdout and "optuna" in result.stdout


def test_a_raising_trial_and_a_diverging_trial_are_recorded_and_the_rest_complete(tmp_path, tiny_model_dir,
                                                                                      shared_data_dir):
    # A folder with the tokenizer and config but no weights passes the preflight (which loads only those)
    # and fails in the trial, like a checkpoint cut short.
    missing = tmp_path / "no-weights"
    shutil.copytree(tiny_model_dir, missing, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    path = write_study(tmp_path, "faults", tiny_model_dir, shared_data_dir,
                       parameters={"model": [str(tiny_model_dir), str(missing)], "optim.lr": [3e-5, 1.0e8]})
    spec = load_study(path)
    assert run_study(spec, max_concurrent=2) == 1  # a trial ended in an error: exit 1
    study_dir = Path(spec.study_dir)
    rows = {(r["model"], float(r["optim.lr"])): r for r in read_csv(study_dir)}
    ok = rows[(str(tiny_model_dir), 3e-5)]
    diverged = rows[(str(tiny_model_dir), 1e8)]
    assert (ok["state"], ok["status"]) == ("COMPLETE", "ok")
    assert (diverged["state"], diverged["status"]) == ("FAIL", "diverged")
    assert "loss became nan" in diverged["reason"]
    for lr in (3e-5, 1e8):
        raised = rows[(str(missing), lr)]
        assert (raised["state"], raised["status"]) == ("FAIL", "error")
        assert raised["reason"].startswith("UserError: cannot load model"), raised["reason"]
        summary = json.loads((study_dir / "trials" / raised["key"] / "summary.json").read_text())
        assert summary["status"] == "error" and summary["reason"] == raised["reason"]

    trials = {t.user_attrs["key"]: t for t in optuna_trials("faults", f"sqlite:///{study_dir / 'optuna.db'}")}
    assert trials[ok["key"]].state.name == "COMPLETE"
    assert trials[diverged["key"]].state.name == "FAIL"
    assert trials[diverged["key"]].user_attrs["status"] == "diverged"
    assert trials[rows[(str(missing), 1e8)]["key"]].user_attrs["reason"].startswith("UserError")


def test_resume_after_the_driver_is_killed(tmp_path, tiny_model_dir, shared_data_dir):
    path = write_study(tmp_path, "resume", tiny_model_dir, shared_data_dir, parameters={"ema.decay": [0.5, 0.7, 0.9]})
    study_dir = tmp_path / "results" / "resume"
    driver = start_driver(path, tmp_path)

    # Read from the live Optuna record (trials.csv lags by up to a few seconds): one trial COMPLETE, and one RUNNING
    # that has not reported its second (last) dev evaluation, so its last steps and its test evaluation are still
    # ahead of it when the kill comes.
    def one_complete_one_running() -> bool:
        progress = trial_progress(study_dir, "resume")
        return (any(state == "COMPLETE" for state, _ in progress)
                and any(state == "RUNNING" and count < 2 for state, count in progress))

    try:
        if not wait_while_running(one_complete_one_running, driver):
            assert driver.poll() is None, driver.stdout.read()
            raise AssertionError("the sweep never had a COMPLETE and a RUNNING trial")
    finally:
        kill_session_until_gone(driver.pid)
        driver.wait()
    driver.stdout.close()

    # The states after the kill, from the live Optuna mirror (written at each trial event); trials.csv is
    # rewritten at most every few seconds, so a trial that ended just before the kill may still read RUNNING there.
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    before = {t.user_attrs["key"]: t.state.name for t in optuna_trials("resume", storage)}
    completed = [k for k, s in before.items() if s == "COMPLETE"]
    assert completed and "RUNNING" in before.values()
    stamps = {k: (os.stat(study_dir / "trials" / k / "summary.json").st_mtime_ns,
                  os.stat(study_dir / "trials" / k / "metrics.jsonl").st_mtime_ns) for k in completed}

    # A trial whose worker wrote its final summary.json just before the kill, before Optuna heard of it, has
    # ended too: the resume records it from disk. So the skipped count is read from the folders.
    ended_on_disk = [d.name for d in (study_dir / "trials").iterdir() if (d / "summary.json").is_file()
                     and json.loads((d / "summary.json").read_text()).get("status") in FINAL_STATUSES]
    assert set(completed) <= set(ended_on_disk)

    result = run_sweep(["run", str(path), "--max-concurrent", "1"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(ended_on_disk)} already ended (skipped)" in result.stdout
    assert "marked FAIL (interrupted)" in result.stdout

    trials = assert_complete_study(study_dir, "resume", storage, 3)
    interrupted = [t for t in trials if t.state.name == "FAIL"]
    assert [t.user_attrs["reason"] for t in interrupted] == ["interrupted"]
    assert before[interrupted[0].user_attrs["key"]] == "RUNNING"
    for key, stamp in stamps.items():  # completed trials did not run again
        assert (os.stat(study_dir / "trials" / key / "summary.json").st_mtime_ns,
                os.stat(study_dir / "trials" / key / "metrics.jsonl").st_mtime_ns) == stamp


def test_ctrl_c_stops_the_sweep_with_exit_code_130(tmp_path, tiny_model_dir, shared_data_dir):
    path = write_study(tmp_path, "interrupt", tiny_model_dir, shared_data_dir)
    study_dir = tmp_path / "results" / "interrupt"
    driver = start_driver(path, tmp_path)
    try:
        def one_running():
            return (study_dir / "trials.csv").exists() and "RUNNING" in [r["state"] for r in read_csv(study_dir)]

        # a trial must be running when the signal comes (on a loaded machine Ray may take minutes to start one)
        assert wait_while_running(one_running, driver), "no trial was ever RUNNING"
        os.killpg(driver.pid, signal.SIGINT)  # what a terminal sends to the foreground process group
        out, _ = driver.communicate(timeout=scaled(120))
    finally:
        kill_session_until_gone(driver.pid)
    assert driver.returncode == 130, out
    assert "interrupted by SIGINT: " in out and "run the same command to go on" in out
    assert "Tuner.restore" not in out and "WARNING" not in out  # Ray's own lines stay in ray.log
    assert (study_dir / "ray.log").is_file()
    states = Counter(r["state"] for r in read_csv(study_dir))
    assert states["RUNNING"] == 0 and states["COMPLETE"] + states["FAIL"] + states["PENDING"] == 4
    trials = optuna_trials("interrupt", f"sqlite:///{study_dir / 'optuna.db'}")
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in trials)
