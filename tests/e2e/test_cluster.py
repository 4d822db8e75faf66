"""`sweep run --address` on an existing Ray cluster: a head node started by the test on loopback (slow)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.deadlines import scaled
from tests.helpers import assert_complete_study, ray_head_process, write_study

pytestmark = pytest.mark.slow


@pytest.fixture
def ray_head(tmp_path):
    with ray_head_process(tmp_path) as head:
        yield head


def test_sweep_runs_on_an_existing_cluster(tmp_path, ray_head, tiny_model_dir, shared_data_dir):
    address, env = ray_head
    path = write_study(tmp_path, "cluster", tiny_model_dir, shared_data_dir)
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(path), "--address", address],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(240),
                            start_new_session=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4/4 ended" in result.stdout
    study_dir = tmp_path / "results" / "cluster"
    assert_complete_study(study_dir, "cluster", f"sqlite:///{study_dir / 'optuna.db'}", 4)
    # the trials ran in the cluster's workers, not in a Ray instance of the driver's own
    assert "Started a local Ray instance" not in result.stdout + result.stderr
