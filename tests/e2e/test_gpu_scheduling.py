"""Ray's GPU scheduling with declared GPUs: a Ray head started with `--num-gpus 2` on
this GPU-less machine, `sweep run --address`, the fake trainer. Ray hands out GPU ids it was told exist;
what the trials do with them is the trainer's business, what is checked here is the scheduling: how many
trials ran at once, which ids each saw, that summary.json records them, and that the preflight asks the
cluster (the driver's machine has no GPU) and refuses a trial no node can hold (exit 2, one line)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.deadlines import scaled
from tests.helpers import fake_env, fake_study, ray_head_process

pytestmark = pytest.mark.slow


def sweep_run(study: Path, address: str, cwd: Path, head_env: dict[str, str]):
    # CUDA_VISIBLE_DEVICES="": the driver's machine has no GPU even on a GPU machine (a login node)
    env = {**head_env, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "sweep", "run", str(study), "--address", address], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=scaled(240), start_new_session=True)


def test_half_gpu_trials_pack_two_per_declared_gpu_and_record_their_gpu(tmp_path, shared_data_dir):
    # the trials run in the head's workers, which inherit its environment: the fake trainer, each trial held
    # until all four run at once (tests/fake_train.py's barrier; a trial fails when that never happens)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = fake_env(steps=2, step_s=1.0, FAKE_TRAIN_BARRIER=str(barrier), FAKE_TRAIN_BARRIER_N="4",
                   FAKE_TRAIN_BARRIER_S=str(scaled(120)))
    with ray_head_process(tmp_path, "--num-gpus=2", env=env) as (address, head_env):
        too_big = fake_study(tmp_path, "three_gpus", shared_data_dir, decays=(0.1,), resources={"cpu": 0.5, "gpu": 3})
        refused = sweep_run(too_big, address, tmp_path, head_env)
        study = fake_study(tmp_path, "half_gpus", shared_data_dir, decays=(0.1, 0.2, 0.3, 0.4),
                           resources={"cpu": 0.5, "gpu": 0.5})
        result = sweep_run(study, address, tmp_path, head_env)

    # no node holds 3 GPUs: refused before any trial is scheduled, on one line, naming the cluster's nodes
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert f"the Ray cluster at {address} has at most 2 GPU(s) on one node" in lines[0]

    # gpu 0.5 passes the preflight although the driver's machine has no GPU: it asked the cluster
    assert result.returncode == 0, result.stdout + result.stderr
    trials = sorted((tmp_path / "results" / "half_gpus" / "trials").iterdir())
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in trials]
    assert len(summaries) == 4 and all(s["status"] == "ok" for s in summaries)
    # all four ran at the same time: each started before any of them ended (the trials' own clocks)
    starts, ends = [s["started_at"] for s in summaries], [s["ended_at"] for s in summaries]
    assert max(starts) < min(ends), (starts, ends)
    # each saw exactly one of the two declared GPUs, two trials per GPU, and summary.json says which
    for s in summaries:
        assert s["resources"]["gpu"] == 0.5 and s["resources"]["cpu"] == 0.5
        assert len(s["resources"]["gpu_ids"]) == 1, s["resources"]
        assert s["resources"]["cuda_visible_devices"] == s["resources"]["gpu_ids"][0]
    assert Counter(s["resources"]["gpu_ids"][0] for s in summaries) == {"0": 2, "1": 2}
