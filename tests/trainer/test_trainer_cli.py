"""`python -m trainer RUN.yaml key=value ...`: progress on stdout and exit 0; user errors exit 2 with one
line on stderr and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO


def run_trainer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # one torch thread: on a busy 2-core machine more threads make the tiny model far slower
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def run_yaml(tmp_path, tiny_model_dir, shared_data_dir) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "model": str(tiny_model_dir), "method": "mocose", "batch_size": 8, "max_steps": 4, "device": "cpu",
        "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 200},
        "eval": {"eval_steps": 100, "final_tasks": ["STSBenchmark"]},
        "queue": {"size": 64, "initial_size": 16},
    }))
    return path


@pytest.mark.slow  # a whole run with its evaluations, in a subprocess
def test_run_prints_progress_and_exits_0(run_yaml, tmp_path):
    out = tmp_path / "out"
    result = run_trainer(str(run_yaml), "eval.eval_steps=2", "queue.size=32", "ema.schedule=constant",
                         "ema.decay=0.5", f"output_dir={out}")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("training mocose on ")
    # one progress line per evaluation (every 2 steps: the override took effect), with the MoCoSE fields
    progress = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == ["2", "4"]
    for line in progress:
        assert "loss " in line and "STS-B dev " in line and "eta 0.5000" in line and "queue 32" in line
    assert "status: ok" in lines
    assert any(line.startswith("test: STSBenchmark ") for line in lines)
    brief = json.loads(lines[-1])
    assert brief["mtd"]["formula"] == pytest.approx(1 / (1 - 0.5) + 32 / 8)  # queue.size=32 applied
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["config"]["queue"]["size"] == 32
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("args, fragment", [
    (["queue.sizes=1024"], "queue.sizes"),
    (["batch_size=lots"], "batch_size"),
    (["queue.initial_size=100"], "queue.initial_size"),  # > queue.size (64)
    (["queue.size"], "key=value"),
])
def test_bad_override_exits_2_with_one_line(run_yaml, args, fragment):
    result = run_trainer(str(run_yaml), *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainer: error:") and fragment in err[0], result.stderr
    assert "training" not in result.stdout  # nothing started


def test_missing_config_file_exits_2_with_one_line(tmp_path):
    result = run_trainer(str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "missing.yaml" in err[0] and "not found" in err[0], result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_key_in_the_yaml_exits_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("method: mocose\nqueue:\n  size: 512\n  sise: 3\n")
    result = run_trainer(str(path))
    assert result.returncode == 2
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "queue.sise" in err[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, line", [
    ([], "trainer: error: the following arguments are required: config (see `python -m trainer --help`)"),
    (["-", "--bogus"], "trainer: error: unrecognized arguments: --bogus (see `python -m trainer --help`)"),
    (["method=simcse", "max_steps=2"], "trainer: error: 'method=simcse' is an override, not a run config: name the "
                                       "config first, or - for the defaults: python -m trainer - method=simcse "
                                       "max_steps=2"),
])
def test_a_usage_mistake_is_one_line_and_exit_2(args, line, capsys):
    """In process (argparse's and the config's errors come before torch is imported): the same lines as a
    subprocess prints, which the cases above check end to end."""
    from trainer.__main__ import main

    try:
        code = main(args)
    except SystemExit as stopped:  # argparse's own exit
        code = stopped.code
    assert code == 2 and capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize("args, batch", [([], "64"), (["batch_size=16"], "16")])
def test_the_first_line_names_the_batch_size_the_run_trains_with(args, batch, tmp_path, capsys):
    """batch_size left null is the method's default for the model (trainer.method_rules), named as such, not
    as null."""
    from trainer.__main__ import main

    code = main(["-", "method=simcse", f"model={tmp_path / 'no-model'}", f"data.data_dir={tmp_path / 'no-data'}",
                 *args])
    out = capsys.readouterr().out.splitlines()
    assert code == 2 and out[0] == f"training simcse on {tmp_path / 'no-model'} (batch {batch})", out
