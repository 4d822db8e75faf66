"""The study's `cost_limit` in device-hours (sweep.run.cost_limit): the dry run says whether the study fits, `sweep
run` refuses one whose estimate passes it before anything is written, and a run whose measured time reaches it
stops handing out trials, ends with exit code 4 and one line, and finishes once the limit is raised.

The estimate comes from a stand-in bench record (a temporary SWEEP_BENCH_DIR); the trials run tests/fake_train.py
with a fixed time per step.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from tests.helpers import assert_complete_study, fake_env, fake_study, optuna_trials, read_csv, run_sweep

MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536)  # the embedded model's shape: the size factor is 1


def write_record(folder, step: float, dev: float, final: float, setup: float) -> None:
    """A CPU bench record whose mocose fp32 run has these timings (seconds), at the fake study's batch size."""
    run = {"method": "mocose", "precision_asked": "fp32", "precision_ran": "fp32", "step_seconds": step,
           "dev_eval_seconds": dev, "final_eval_seconds": final, "setup_seconds": setup}
    bench = {"device": "cpu", "gpu": None, "encoder": {"shape": "stand-in", **MINILM}, "batch_size": 8,
             "max_length": 32, "date": "2026-11-29T08:00:00Z", "runs": [run]}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cpu.json").write_text(json.dumps({"checks": [], "problems": 0, "bench": bench}))


def set_limit(path, hours: float | str) -> None:
    spec = yaml.safe_load(path.read_text())
    spec["cost_limit"] = float(hours)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def limit_lines(out: str) -> list[str]:
    return [line[len("limit:"):].strip() for line in out.splitlines() if line.startswith("limit:")]


def test_a_study_whose_estimate_passes_its_limit_is_refused_before_anything_is_written(tmp_path, shared_data_dir):
    records = tmp_path / "records"
    write_record(records, step=10.0, dev=5.0, final=5.0, setup=5.0)  # far more than the limit allows
    path = fake_study(tmp_path, "limited", shared_data_dir, cost_limit=0.01)
    env = fake_env(SWEEP_BENCH_DIR=str(records))

    dry = run_sweep(["run", str(path), "--dry-run"], cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    lines = limit_lines(dry.stdout)
    assert lines[0].startswith("cost_limit 0.01 device-hours; estimated ")
    assert re.fullmatch(r"passes it by [0-9.e-]+ device-hours: `sweep run` refuses to start; raise cost_limit to "
                        r"([0-9.e-]+) or more, or run fewer trials", lines[-1]), lines

    result = run_sweep(["run", str(path)], cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    advised = re.search(r"raise cost_limit in (\S+) to ([0-9.e-]+) or more", result.stderr)
    assert advised and advised.group(1) == str(path), result.stderr
    assert "more than its cost_limit of 0.01 device-hours" in result.stderr
    assert not (tmp_path / "results").exists()  # nothing written: the study's name is not claimed

    set_limit(path, advised.group(2))  # the advice, followed literally
    dry = run_sweep(["run", str(path), "--dry-run"], cwd=tmp_path, env=env)
    assert limit_lines(dry.stdout)[-1].startswith("the study fits, with "), dry.stdout


@pytest.mark.slow
def test_a_limit_reached_midway_stops_the_study_resumably_and_a_raised_limit_finishes_it(tmp_path, shared_data_dir):
    records = tmp_path / "records"
    write_record(records, step=0.001, dev=0.001, final=0.001, setup=0.001)  # the estimate: well under the limit
    path = fake_study(tmp_path, "midway", shared_data_dir, decays=(0.1, 0.2, 0.3, 0.4), cost_limit=4 / 3600)
    env = fake_env(steps=3, step_s=1.0, SWEEP_BENCH_DIR=str(records))  # each trial: at least 3 s measured
    study_dir = tmp_path / "results" / "midway"
    storage = f"sqlite:///{study_dir / 'optuna.db'}"

    first = run_sweep(["run", str(path), "--max-concurrent", "1"], cwd=tmp_path, env=env)
    assert first.returncode == 4, first.stdout + first.stderr
    stop = [line for line in first.stdout.splitlines() if line.startswith("stopped on the cost limit:")]
    assert len(stop) == 1, first.stdout
    assert stop[0].endswith(f"trials not started: raise cost_limit in {path} and run the same command to finish them")
    rows = read_csv(study_dir)
    ran = [r["key"] for r in rows if r["state"] == "COMPLETE"]
    assert 1 <= len(ran) <= 2 and {r["state"] for r in rows if r["key"] not in ran} == {"PENDING"}, rows
    assert f"{len(rows) - len(ran)} trials not started" in stop[0]
    attempts = optuna_trials("midway", storage)
    assert [t.state.name for t in attempts] == ["COMPLETE"] * len(ran)
    spent = [t.user_attrs["device_seconds"] for t in attempts]
    assert all(seconds >= 3.0 for seconds in spent)  # measured: three 1 s steps at least, never the estimate
    stamps = {key: os.stat(study_dir / "trials" / key / "summary.json").st_mtime_ns for key in ran}
    status = run_sweep(["status", str(path)], cwd=tmp_path, env=env, timeout=60)
    assert re.search(r"^device time spent: [0-9.e-]+ device-hours \((\d+) s, measured per attempt\) of the "
                     r"study's cost_limit 0\.00111$", status.stdout, re.M), status.stdout

    again = run_sweep(["run", str(path), "--max-concurrent", "1"], cwd=tmp_path, env=env)  # limit unchanged
    assert again.returncode == 2 and "raise cost_limit in" in again.stderr, again.stdout + again.stderr

    set_limit(path, 1.0)
    last = run_sweep(["run", str(path), "--max-concurrent", "1"], cwd=tmp_path, env=env)
    assert last.returncode == 0, last.stdout + last.stderr
    assert f"{len(ran)} already ended (skipped)" in last.stdout
    assert_complete_study(study_dir, "midway", storage, 4)  # each key COMPLETE once: nothing lost or run twice
    assert {key: os.stat(study_dir / "trials" / key / "summary.json").st_mtime_ns for key in ran} == stamps


def test_sweep_slurm_refuses_a_study_over_its_limit_before_it_submits(tmp_path, shared_data_dir, monkeypatch):
    """The job's `sweep run` would refuse the study after its wait in the queue; `sweep slurm` refuses it first, with
    the same words, before it looks for Slurm (none here: sbatch is not on PATH) or writes the job's script."""
    from sweep.commands.slurm import slurm_command
    from trainer.errors import UserError

    write_record(tmp_path / "records", step=10.0, dev=5.0, final=5.0, setup=5.0)
    path = fake_study(tmp_path, "limited", shared_data_dir, cost_limit=0.01)
    for name, value in fake_env(SWEEP_BENCH_DIR=str(tmp_path / "records"), PATH=str(tmp_path / "no-bin")).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="more than its cost_limit of 0.01 device-hours") as refused:
        slurm_command(str(path))
    assert f"raise cost_limit in {path} to " in str(refused.value)
    assert not (tmp_path / "results").exists()
