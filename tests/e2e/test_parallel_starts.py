"""Trials start in parallel, as many as fit, read from the trials' own clocks.

Without a limit, Ray Tune lets a custom searcher have one trial pending at a time, so a grid started its
trials one after another however many fit; the driver now sets max_concurrent_trials from the room the
cluster has (sweep.run.ray_session.trial_room).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.deadlines import scaled, wait_until
from tests.helpers import Driver, fake_env, fake_study, kill_session

pytestmark = pytest.mark.slow


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of [start, end) intervals that overlap at one moment."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def test_most_at_once_counts_overlaps():
    assert most_at_once([(0, 2), (1, 3), (2, 4)]) == 2  # an end and a start at the same moment do not overlap
    assert most_at_once([(0, 10)] + [(i, i + 0.5) for i in range(1, 9)]) == 2


def test_a_grid_at_a_quarter_cpu_runs_eight_trials_at_once(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "parallel", shared_data_dir, decays=[0.1 * i for i in range(1, 9)],
                      resources={"cpu": 0.25})
    fits = min(8, int((os.cpu_count() or 1) / 0.25))
    # Every trial waits until `fits` trials run at once (tests/fake_train.py's barrier) and fails when that
    # never happens: on a loaded machine worker starts spread over tens of seconds, so fixed-length trials
    # proved nothing either way. Before the fix, Tune's one pending trial started them one after another.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = fake_env(steps=1, step_s=1.0, FAKE_TRAIN_BARRIER=str(barrier), FAKE_TRAIN_BARRIER_N=str(fits),
                   FAKE_TRAIN_BARRIER_S=str(scaled(120)))
    done = subprocess.run([sys.executable, "-m", "sweep", "run", str(path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=scaled(400), env=env, start_new_session=True)
    assert done.returncode == 0, done.stdout + done.stderr
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "results" / "parallel").glob("trials/*/summary.json")]
    assert len(summaries) == 8 and all(s["status"] == "ok" for s in summaries)
    assert most_at_once([(s["started_at"], s["ended_at"]) for s in summaries]) == fits


@pytest.mark.parametrize("cpu, gpu, cluster, address, method, to_run, room", [
    (0.25, 0.0, {"CPU": 2.0}, None, "grid", 100, 8),        # this machine: 2 cores / 0.25
    (1.0, 0.5, {"CPU": 16.0, "GPU": 2.0}, None, "grid", 100, 4),  # GPUs bind first: 2 / 0.5
    (4.0, 1.0, {"CPU": 2.0, "GPU": 1.0}, None, "grid", 100, 1),   # nothing fits yet: one pending, as before
    (1.0, 0.0, {"CPU": 4.0}, "head:6379", "grid", 30, 30),    # a cluster: the grid's remaining demand
    (1.0, 0.0, {"CPU": 4.0}, "head:6379", "grid", 1000, 64),  # ... up to the cap
    (1.0, 0.0, {"CPU": 4.0}, "head:6379", "tpe", 1000, 4),    # tpe asks only for what fits
])
def test_room_is_what_the_cluster_holds(monkeypatch, cpu, gpu, cluster, address, method, to_run, room):
    import ray

    from sweep.run.ray_session import PENDING_CAP, trial_room

    assert PENDING_CAP == 64
    monkeypatch.setattr(ray, "cluster_resources", lambda: cluster)
    assert trial_room({"cpu": cpu, "gpu": gpu}, address, method, to_run) == room


def worker_pid(trial_dir) -> str:
    return (trial_dir / "log.txt").read_text().split()[4]  # "=== trial KEY pid PID ..."


def worker_pids(trials: Path) -> set[str]:
    """The worker pid of every trial that has started (its log.txt's first line), read while the study runs."""
    pids = set()
    for log in trials.glob("*/log.txt"):
        words = log.read_text().split()
        if len(words) > 4:
            pids.add(words[4])
    return pids


def test_short_trials_keep_every_worker_that_is_starting(tmp_path, shared_data_dir):
    # Worker processes start a few at a time (sweep.run.ray_session), so some trials end while others' workers
    # are still starting. Tune's own FIFO order then handed a freed worker to a trial whose worker was
    # starting and killed that one: 1 s trials ran on 2 workers, 2 at once. sweep.run.schedulers keeps them.
    # The first 56 of the 64 trials run as they come, ending while workers start. The last 8 wait at a gate until
    # eight workers have run trials, so the study cannot run out of trials before the last worker is up (at the end
    # of a study Tune's own fallback does give a free worker to a waiting trial, by design): on a loaded machine a
    # worker takes 2-3 s to start, and when the study had 32 trials the first seven workers had run nearly all of
    # them by the time the eighth came up; 64 only widened the margin.
    fits = min(8, int((os.cpu_count() or 1) / 0.25))
    decays = [round(0.01 * i, 2) for i in range(1, 65)]
    path = fake_study(tmp_path, "short", shared_data_dir, decays=decays, resources={"cpu": 0.25})
    trials = tmp_path / "results" / "short" / "trials"
    gate = tmp_path / "gate"
    gate.touch()
    # Ray's session folder of this run alone (short: its unix sockets live there), to list its workers
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = fake_env(steps=1, step_s=1.0, RAY_TMPDIR=ray_tmp, FAKE_TRAIN_GATE=str(gate),
                   FAKE_TRAIN_GATED_DECAYS=",".join(str(d) for d in decays[-fits:]))
    driver = Driver(["run", str(path)], tmp_path, env)
    try:
        # lifted once every worker has run a trial, or at the deadline (then the pid count below says how many)
        wait_until(lambda: len(worker_pids(trials)) >= fits, 200,
                   still_worth_waiting=lambda: driver.proc.poll() is None)
        gate.unlink()
        code = driver.finish(timeout=400)
        # one core-worker log per Ray worker process, named ..._PID.log
        logs = Path(ray_tmp).glob("ray/session_*/logs/python-core-worker-*.log")
        ray_workers = {log.stem.rsplit("_", 1)[1] for log in logs}
    finally:
        kill_session(driver.proc.pid)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert code == 0, driver.out
    trial_dirs = sorted(trials.iterdir())
    summaries = [json.loads((d / "summary.json").read_text()) for d in trial_dirs]
    assert len(summaries) == 64 and all(s["status"] == "ok" for s in summaries)
    assert len({worker_pid(d) for d in trial_dirs}) == fits  # every worker that started ran trials
    # including the workers Ray starts for the driver when it connects (sweep.run.ray_session): none now
    assert ray_workers == {worker_pid(d) for d in trial_dirs}
    # No count of trials at once: the gated eight run together by construction. The fault shows in the pid count
    # above (with Tune's own choice of the next trial put back, four workers ran trials, not eight).


def test_asha_stops_the_trials_below_its_rung_cutoff(tmp_path, shared_data_dir):
    # The fake trainer reports dev_stsb = (50 + 10 * ema.decay) * step / steps: the grid's order (highest
    # decay first) and two at a time make the later, lower curves fall below ASHA's cutoff at rung 1.
    import optuna

    decays = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    path = fake_study(tmp_path, "asha", shared_data_dir, decays=decays, resources={"cpu": 1},
                      scheduler={"type": "asha", "grace_period": 1, "reduction_factor": 2})
    done = subprocess.run([sys.executable, "-m", "sweep", "run", str(path), "--max-concurrent", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=scaled(400), env=fake_env(steps=4, step_s=0.5),
                          start_new_session=True)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / "results" / "asha"
    study = optuna.load_study(study_name="asha", storage=f"sqlite:///{folder / 'optuna.db'}")
    states = {t.params["ema.decay"]: t.state.name for t in study.trials}
    assert states[0.9] == "COMPLETE" and "PRUNED" in states.values(), states
    for trial in study.trials:  # a pruned trial reported fewer evaluations than the 4 a finished one did
        steps = sorted(trial.intermediate_values)
        assert steps == [1, 2, 3, 4] if trial.state.name == "COMPLETE" else len(steps) < 4, (trial.params, steps)


def test_tune_does_not_import_wandb_or_mlflow_for_its_usage_tag_unless_a_study_uses_them():
    """Ray Tune's callback usage tag imports its tracker integrations (and so wandb and mlflow, installed by
    the README's set-up) before the first trial: ~2 s of a study's start. sweep.run.ray_private skips the tag
    while that would import them, and lets Ray record it once they are imported (a study logging to them)."""
    code = """
import sys
from ray.air._internal import usage
from ray.tune import Callback
from sweep.run.ray_private import skip_tracker_imports_in_tune_usage_tag
tagged = []
usage.record_extra_usage_tag = lambda key, value, *a, **k: tagged.append(value)
original = usage.tag_callbacks
skip_tracker_imports_in_tune_usage_tag()
skip_tracker_imports_in_tune_usage_tag()  # twice: still one wrapper
assert usage.tag_callbacks.__wrapped__ is original
callbacks = [Callback()]
usage.tag_callbacks(callbacks)
print('skipped', 'wandb' in sys.modules, 'mlflow' in sys.modules, tagged)
original(callbacks)  # Ray's own tag: the reason for the skip
print('ray', 'wandb' in sys.modules, 'mlflow' in sys.modules, len(tagged))
usage.tag_callbacks(callbacks)  # the trackers are imported now: Ray's tag runs
print('tagged', len(tagged), tagged[-1])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(120))
    assert out.returncode == 0, out.stderr
    lines = [line.split(maxsplit=3) for line in out.stdout.splitlines()]
    assert lines[0] == ["skipped", "False", "False", "[]"]
    # If this fails, Ray no longer imports the trackers for its tag: the skip can go.
    assert lines[1] == ["ray", "True", "True", "1"]
    assert lines[2][:2] == ["tagged", "2"] and "CustomCallback" in lines[2][2]

