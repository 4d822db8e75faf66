"""Faults a run meets (an unreadable storage, a damaged summary, a full disk, a missing model folder), each with
one line and nothing lost.

The driver tests use the fast fake trainer (tests/fake_train.py) and helpers from tests/helpers.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pytest

from tests.deadlines import scaled
from tests.helpers import Driver, fake_env, fake_study, kill_session, rows
from trainer.errors import UserError
from trainer.files import write_text_atomic


def sweep(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, env=fake_env(**env), capture_output=True,
                          text=True, timeout=scaled(240), start_new_session=True)


# ---- fast ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_atomically_written_files_get_the_users_umask(tmp_path, umask, mode):
    before = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "summary.json", "{}\n")
        (tmp_path / "plain.txt").write_text("x")  # what open() gives: the reference
    finally:
        os.umask(before)
    assert os.stat(tmp_path / "summary.json").st_mode & 0o777 == mode
    assert os.stat(tmp_path / "plain.txt").st_mode & 0o777 == mode


@pytest.mark.parametrize("name", ["./no-such-model", "../no/such-model", "/no/such/model", "models/bert/base"])
def test_a_local_model_path_that_does_not_exist_is_reported_as_a_missing_folder(name):
    from trainer.models import load_encoder

    with pytest.raises(UserError, match=f"model folder {name} does not exist"):
        load_encoder(name)


def test_status_says_when_the_optuna_storage_cannot_be_read(tmp_path):
    folder = tmp_path / "results" / "broken"
    folder.mkdir(parents=True)
    (folder / "study.yaml").write_text("name: broken\n")
    (folder / "trials.csv").write_text("key,seed,state\nabc,1,COMPLETE\n")
    (folder / "optuna.db").write_bytes(os.urandom(100))
    result = subprocess.run([sys.executable, "-m", "sweep", "status", str(folder)], capture_output=True, text=True,
                            timeout=scaled(120), env=fake_env())
    assert result.returncode == 2, result.stdout + result.stderr
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "Optuna storage" in err[0] and "optuna.db" in err[0] and "not a database" in err[0]
    assert "Traceback" not in result.stderr


# ---- with a driver -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_damaged_summary_is_reported_and_never_silently_dropped(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "damaged", shared_data_dir)
    study_dir = tmp_path / "results" / "damaged"
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    assert sweep(["run", str(path)], tmp_path).returncode == 0
    before = {r["key"]: r for r in rows(study_dir)}
    key = sorted(before)[0]
    summary = study_dir / "trials" / key / "summary.json"
    text = summary.read_text()
    summary.write_text(text[: len(text) // 2])  # cut in half

    status = sweep(["status", str(study_dir)], tmp_path)
    assert status.returncode == 0
    assert f"trial {key}: {summary} does not parse" in status.stdout, status.stdout

    # Optuna holds the trial's final attempt: the file is set aside, the results come back from Optuna
    result = sweep(["run", str(path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"trial {key}: {summary} does not parse" in result.stdout and "restored from Optuna trial" in result.stdout
    assert "3 already ended (skipped)" in result.stdout
    after = {r["key"]: r for r in rows(study_dir)}
    assert after[key]["dev_stsb"] == before[key]["dev_stsb"] != ""
    assert after[key]["STSBenchmark"] == before[key]["STSBenchmark"] != ""
    restored = json.loads(summary.read_text())
    assert restored["restored_from"] == "optuna" and restored["status"] == "ok"
    assert [p.read_text() for p in summary.parent.glob("summary.json.damaged-*")] == [text[: len(text) // 2]]
    assert len(optuna.load_study(study_name="damaged", storage=storage).get_trials()) == 3  # nothing re-run

    # no Optuna record (the storage was lost): the trial's folder is set aside and the trial runs again
    other = sorted(before)[1]
    other_summary = study_dir / "trials" / other / "summary.json"
    other_summary.write_text("{ not json")
    (study_dir / "optuna.db").unlink()
    result = sweep(["run", str(path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"trial {other}: {other_summary} does not parse" in result.stdout and "runs again" in result.stdout
    aside = [p for p in (study_dir / "trials").iterdir() if p.name.startswith(f"{other}.damaged-")]
    assert len(aside) == 1 and (aside[0] / "summary.json").read_text() == "{ not json"
    assert json.loads(other_summary.read_text())["status"] == "ok"
    assert all(r["state"] == "COMPLETE" for r in rows(study_dir))


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MB tmpfs (root only; skipped otherwise)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the file system of `folder` to the last byte."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (b"\0" * 65536, b"\0"):
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_a_full_disk_or_a_read_only_folder_ends_the_run_with_one_line(tmp_path, shared_data_dir, small_tmpfs):
    path = fake_study(tmp_path, "full", shared_data_dir, results_dir=str(small_tmpfs))
    study_dir = small_tmpfs / "full"

    # started on a full disk
    filler = fill(small_tmpfs)
    result = sweep(["run", str(path)], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and str(small_tmpfs) in err[0], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    filler.unlink()

    # the disk fills while the study runs (after the first trial's results were written): each trial takes 6 s,
    # so the two after it cannot both end in the seconds trials.csv may lag behind the run
    driver = Driver(["run", str(path), "--max-concurrent", "1"], tmp_path, fake_env(steps=4, step_s=1.5))
    try:
        driver.wait_for(lambda: any(r["state"] == "COMPLETE" for r in rows(study_dir)), timeout=200)
        filler = fill(small_tmpfs)
        code = driver.finish(timeout=120)
    finally:
        kill_session(driver.proc.pid)
    lines = driver.out.strip().splitlines()
    assert code == 2, driver.out
    assert "Traceback" not in driver.out and lines[-1].startswith("sweep: error: cannot write "), driver.out
    assert str(small_tmpfs) in lines[-1] and ("No space left on device" in lines[-1] or "full" in lines[-1])
    filler.unlink()
    completed = [r["key"] for r in rows(study_dir) if r["state"] == "COMPLETE"]
    assert completed

    # a read-only results folder
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    result = sweep(["run", str(path)], tmp_path)
    assert result.returncode == 2 and "Read-only file system" in result.stderr, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stdout + result.stderr
    subprocess.run(["mount", "-o", "remount,rw", str(small_tmpfs)], check=True)

    # nothing was lost: once there is space the same command finishes the study
    result = sweep(["run", str(path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(r["state"] == "COMPLETE" for r in rows(study_dir)) and len(rows(study_dir)) == 3
    trials = optuna.load_study(study_name="full", storage=f"sqlite:///{study_dir / 'optuna.db'}").get_trials()
    assert sorted(Counter(t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE").values()) == [1, 1, 1]
    assert set(completed) <= {r["key"] for r in rows(study_dir)}


@pytest.mark.slow
def test_an_unreadable_optuna_storage_is_rebuilt_from_the_records_on_request(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "rebuilt", shared_data_dir, decays=(0.1, 0.2, 0.3), seeds=[1, 2])
    study_dir = tmp_path / "results" / "rebuilt"
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    assert sweep(["run", str(path)], tmp_path).returncode == 0

    def optuna_view() -> list[tuple]:
        study = optuna.load_study(study_name="rebuilt", storage=storage)
        return sorted((t.user_attrs["key"], t.user_attrs["seed"], t.state.name, t.value, t.params["ema.decay"],
                       dict(t.intermediate_values)) for t in study.get_trials())

    before = optuna_view()
    assert len(before) == 6 and {t[2] for t in before} == {"COMPLETE"}
    damaged = os.urandom(4096)
    (study_dir / "optuna.db").write_bytes(damaged)

    refused = sweep(["run", str(path)], tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    err = refused.stderr.strip().splitlines()
    assert len(err) == 1 and "not a database" in err[0] and "--rebuild-storage" in err[0], refused.stderr
    assert (study_dir / "optuna.db").read_bytes() == damaged  # nothing touched without the flag

    rebuilt = sweep(["run", str(path), "--rebuild-storage"], tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "6 already ended (skipped)" in rebuilt.stdout and "rebuilding it from" in rebuilt.stdout
    assert optuna_view() == before  # same trials, states, values, params and curves
    aside = list(study_dir.glob("optuna.db.damaged-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged
    assert all(r["state"] == "COMPLETE" for r in rows(study_dir))
