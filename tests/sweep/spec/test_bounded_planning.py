"""Planning a study costs memory and time bounded by the size of its file, not by the numbers in it.

Each case runs `sweep run` (with and without --dry-run) in a subprocess under a 1 GB address-space limit
(RLIMIT_AS; a dry run needs ~0.5 GB) and a time limit. Before the fix: a billion planned steps built a
billion floats (MemoryError at 3 GB after 36 s), a 1 KB alias bomb ran 60 s and wrote 358 MB to stderr,
a random budget of a billion over two values and a grid of 10^6 combinations ran past 60 s in silence.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.deadlines import scaled
from tests.helpers import REPO, study_file

MEMORY_LIMIT = 1 << 30
TIME_LIMIT_S = 30

HEAD = "name: t\nbase:\n  model: embedded\n  max_steps: 30\n"
ALIASES = "\n".join(["  a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
                    + [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)])
GRID_10_6 = "parameters:\n" + "".join(
    f"  {key}: [{', '.join(str(start + i) for i in range(100))}]\n"
    for key, start in (("optim.warmup_steps", 0), ("eval.batch_size", 1), ("data.max_length", 4)))

# name -> (study text, expected exit status, a fragment of the output)
CASES = {
    "a billion planned steps (cosine EMA)": (
        "name: t\nbase:\n  model: embedded\n  max_steps: 1000000000\nparameters:\n  ema.decay: [0.5, 0.9]\n",
        0, "MTD:       11.64 to 21.33"),
    "an alias bomb in name": ("name:\n" + ALIASES + "\nbase:\n  model: embedded\n", 2,
                              "key 'name.a4[7]': the aliases expand the file by more than 100,000 values"),
    "an alias bomb in base": ("name: t\nbase:\n  model: embedded\n" + ALIASES + "\n", 2,
                              "key 'base.a4[7]': the aliases expand"),
    "an alias bomb in a value list": (
        HEAD + "parameters:\n  eval.final_tasks:\n" + "\n".join(
            ["    - &a0 [x, x, x, x, x, x, x, x, x, x]"]
            + [f"    - &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]) + "\n",
        2, "key 'parameters.eval.final_tasks[4][7]': the aliases expand"),
    "a random budget of a billion over 2 values": (
        HEAD + "parameters:\n  ema.decay: [0.5, 0.9]\nmethod: random\nbudget: 1000000000\n", 2,
        "key 'budget': 1,000,000,000 is more than the 2 configurations"),
    "a tpe budget of a billion over 4 values": (
        HEAD + "parameters:\n  ema.decay: [0.5, 0.9]\n  queue.size: {distribution: int, low: 64, high: 65}\n"
        "method: tpe\nbudget: 1000000000\n", 2, "is more than the 4 configurations"),
    "a random budget of a billion over a continuous space": (
        HEAD + "parameters:\n  ema.decay: {distribution: uniform, low: 0.5, high: 0.9}\nmethod: random\n"
        "budget: 1000000000\n", 2, "budget 1,000,000,000 x 1 seed = 1,000,000,000 trials, more than the 100,000"),
    "a grid of 10^6 combinations": (HEAD + GRID_10_6, 2, "pass --many-trials to plan them all"),
    "a grid of 10^24 combinations": (HEAD + "parameters:\n" + "".join(
        f"  {key}: [{', '.join(str(v) for v in range(1, 101))}]\n"
        for key in ("optim.warmup_steps", "eval.batch_size", "heads.embedding_dim", "heads.predictor_hidden_dim",
                    "heads.projection_layers", "heads.predictor_layers", "eval.eval_steps", "max_steps",
                    "data.max_sentences", "gaussian.count", "queue.initial_size", "queue.size")),
        2, "the grid has about 10^24 combinations"),
    "nesting 900 deep": ("name: t\nbase:\n  model: embedded\nseeds: " + "[" * 900 + "]" * 900 + "\n", 2,
                         "nested more than 20 levels deep"),
    "1e308 epochs": ("name: t\nbase:\n  model: embedded\n  epochs: 1.0e308\n", 2, "key 'base.epochs'"),
    "a name of 900 KB": ("name: " + "n" * 900_000 + "\nbase:\n  model: embedded\n", 2, "key 'name': expected a slug"),
}


# (name, dry run) of each case; an accepted study's real run starts Ray: test_a_billion_planned_steps_run
JOBS = [(name, dry_run) for name, (_, code, _) in CASES.items() for dry_run in (True, False) if code or dry_run]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_limited(path: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWEEP_TRAIN_FN": "tests.fake_train:train",
           "FAKE_TRAIN_STEPS": "1", "FAKE_TRAIN_STEP_S": "0"}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(path), *args], cwd=path.parent, env=env,
                            capture_output=True, text=True, timeout=scaled(TIME_LIMIT_S), preexec_fn=_limit_memory)
    return result, time.monotonic() - started


@pytest.fixture(scope="module")
def limited_runs(tmp_path_factory) -> dict[tuple[str, bool], tuple[subprocess.CompletedProcess, float, Path]]:
    jobs = {}
    for index, (name, dry_run) in enumerate(JOBS):  # an accepted study's real run starts Ray: not under 1 GB
        folder = tmp_path_factory.mktemp(f"case{index}")
        (folder / "study.yaml").write_text(CASES[name][0])
        jobs[(name, dry_run)] = folder

    def run(job):
        name, dry_run = job
        return run_limited(jobs[job] / "study.yaml", *(["--dry-run"] if dry_run else []))

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(jobs, pool.map(run, jobs)))
    return {job: (*results[job], jobs[job]) for job in jobs}


@pytest.mark.slow  # a scale measurement: each case a subprocess under its memory and time limits
@pytest.mark.parametrize("name, dry_run", JOBS, ids=[f"{n}-{'dry-run' if d else 'run'}" for n, d in JOBS])
def test_planning_stays_within_memory_and_time(limited_runs, name, dry_run):
    _, code, fragment = CASES[name]
    result, took, folder = limited_runs[(name, dry_run)]
    output = result.stdout + result.stderr
    assert result.returncode == code, output[-3000:]
    assert "Traceback" not in output and "MemoryError" not in output
    assert fragment in output, output[-3000:]
    assert took < scaled(TIME_LIMIT_S) / 2, took
    if code == 2:
        assert result.stdout == "" and result.stderr.count("\n") == 1 and len(result.stderr) < 2100
    assert sorted(p.name for p in folder.iterdir()) == ["study.yaml"]  # nothing written


def test_the_many_trials_flag_plans_a_study_over_the_limit(tmp_path, monkeypatch, capsys):
    """Over MAX_TRIALS the study is named with its count and refused; --many-trials plans it."""
    from sweep import cli
    from sweep.spec import limits

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(limits, "MAX_TRIALS", 3)
    (tmp_path / "s.yaml").write_text(HEAD + "parameters:\n  ema.decay: [0.5, 0.6, 0.7, 0.8]\n")
    assert cli.main(["run", "s.yaml", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "the grid has 4 combinations x 1 seed = 4 trials, more than the 3 a study plans unasked" in err
    assert cli.main(["run", "s.yaml", "--dry-run", "--many-trials"]) == 0
    assert "trials:    4 (4 configurations" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.slow
def test_a_billion_planned_steps_run(tmp_path, shared_data_dir):
    """The real run plans a billion-step study like its dry run does (the trials are the fake trainer's)."""
    spec = yaml.safe_load(CASES["a billion planned steps (cosine EMA)"][0])
    spec["base"]["data"] = {"corpus": str(shared_data_dir / "corpus" / "wiki1m_sample.txt"),
                            "data_dir": str(shared_data_dir)}
    path = study_file(tmp_path, spec, "study.yaml")
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWEEP_TRAIN_FN": "tests.fake_train:train",
           "FAKE_TRAIN_STEPS": "1", "FAKE_TRAIN_STEP_S": "0"}
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(path)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=scaled(180), start_new_session=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 trials: 2 COMPLETE" in result.stdout
