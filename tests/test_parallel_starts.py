"""Trials start in parallel, as many as fit (issue 20, point 1), read from the trials' own clocks.

Without a limit, Ray Tune lets a custom searcher have one trial pending at a time, so a grid started its
trials one after another however many fit; the driver now sets max_concurrent_trials from the room the
cluster has (sweep.ray_session.trial_room).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_stop import fake_env, fake_study

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
    # one 15 s step: long enough for eight workers started together to overlap on a busy 2-core machine, too
    # short for eight started one after another (each waits for the previous worker to come up, ~2-4 s)
    done = subprocess.run([sys.executable, "-m", "sweep", "run", str(path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=400, env=fake_env(steps=1, step_s=15.0), start_new_session=True)
    assert done.returncode == 0, done.stdout + done.stderr
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "results" / "parallel").glob("trials/*/summary.json")]
    assert len(summaries) == 8 and all(s["status"] == "ok" for s in summaries)
    fits = int((os.cpu_count() or 1) / 0.25)
    assert most_at_once([(s["started_at"], s["ended_at"]) for s in summaries]) == min(8, fits)


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

    from sweep.ray_session import PENDING_CAP, trial_room

    assert PENDING_CAP == 64
    monkeypatch.setattr(ray, "cluster_resources", lambda: cluster)
    assert trial_room({"cpu": cpu, "gpu": gpu}, address, method, to_run) == room
