"""`sweep run` stopped by SIGTERM / SIGINT / SIGHUP, with the fast fake trainer.

Each test starts a real driver (and Ray) in its own session, signals it, and checks: the exit status,
the one line saying how to go on, no Ray crash dump or Tuner.restore hint, running trials FAIL
"interrupted" in trials.csv and Optuna, and no process of the session left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest

from sweep.run.reaper import name as process_name
from tests.deadlines import scaled
from tests.helpers import (
    Driver,
    fake_env,
    fake_study,
    kill_session,
    reported_steps,
    rows,
    running,
    session_left,
    session_processes,
)
from trainer.models import resolve_model_path

pytestmark = pytest.mark.slow


def assert_clean_stop(driver: Driver, code: int, name: str, study_dir: Path, expected: int, signame: str) -> None:
    out = driver.out
    assert code == expected, out
    assert f"interrupted by {signame}: " in out and "trials done; run the same command to go on" in out, out
    assert "*** SIGTERM received" not in out and "PC: @" not in out, out  # no Ray crash dump
    assert "Tuner.restore" not in out, out
    assert session_left(driver.proc.pid) == []
    states = Counter(r["state"] for r in rows(study_dir))
    assert states["RUNNING"] == 0, rows(study_dir)
    trials = optuna.load_study(study_name=name, storage=f"sqlite:///{study_dir / 'optuna.db'}").get_trials()
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in trials)
    interrupted = [t for t in trials if t.state.name == "FAIL"]
    assert interrupted and all(t.user_attrs["reason"] == "interrupted" for t in interrupted)
    assert {r["key"] for r in rows(study_dir) if r["state"] == "FAIL"} == {t.user_attrs["key"] for t in interrupted}
    assert all(r["status"] == "interrupted" for r in rows(study_dir) if r["state"] == "FAIL")


# Every signal leaves the same state (assert_clean_stop checks it for each), so the study is resumed after
# one of them only: the time limit's.
@pytest.mark.parametrize("signame, expected, to_group, resume", [
    ("SIGTERM", 143, False, False),  # Slurm's --signal=B:TERM, forwarded by the batch script; `kill PID`
    ("SIGTERM", 143, True, True),  # scancel / the time limit: the whole process group, Ray's GCS included
    ("SIGINT", 130, True, False),  # Ctrl-C in a terminal
    ("SIGHUP", 129, False, False),  # the terminal closed
])
def test_a_stop_signal_interrupts_the_running_trial_and_exits_128_plus_n(tmp_path, shared_data_dir, signame,
                                                                         expected, to_group, resume):
    name = "stop"
    path = fake_study(tmp_path, name, shared_data_dir)
    study_dir = tmp_path / "results" / name
    driver = Driver(["run", str(path), "--max-concurrent", "1"], tmp_path, fake_env(steps=100, step_s=0.2))
    try:
        # the trial is under way: it has reported a dev evaluation to the driver
        driver.wait_for(lambda: running(study_dir) and max(reported_steps(study_dir, name), default=0) >= 1)
        sig = getattr(signal, signame)
        os.killpg(driver.proc.pid, sig) if to_group else os.kill(driver.proc.pid, sig)
        started = time.monotonic()
        code = driver.finish()
        took = time.monotonic() - started
        assert_clean_stop(driver, code, name, study_dir, expected, signame)
        assert took < scaled(30), took
    finally:
        kill_session(driver.proc.pid)

    if not resume:
        return
    # the same command goes on: the interrupted trial runs again, every trial ends COMPLETE once
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(path)], cwd=tmp_path,
                            env=fake_env(), capture_output=True, text=True, timeout=scaled(180), start_new_session=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(r["state"] == "COMPLETE" for r in rows(study_dir)) and len(rows(study_dir)) == 3
    trials = optuna.load_study(study_name=name, storage=f"sqlite:///{study_dir / 'optuna.db'}").get_trials()
    complete = Counter(t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE")
    assert sorted(complete.values()) == [1, 1, 1]


def test_a_signal_while_ray_starts_leaves_no_ray_process(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "early", shared_data_dir)
    gate = tmp_path / "gate"  # no trial can end before the signal, however long the test is held up
    gate.touch()
    driver = Driver(["run", str(path)], tmp_path, fake_env(FAKE_TRAIN_GATE=str(gate)))
    try:
        driver.wait_for(lambda: "results:" in driver.out)  # printed just before ray.init
        # Ray is starting: its GCS server is up in the driver's session
        driver.wait_for(lambda: "gcs_server" in {process_name(pid) for pid in session_processes(driver.proc.pid)})
        os.killpg(driver.proc.pid, signal.SIGINT)
        code = driver.finish()
        assert code == 130, driver.out
        assert "interrupted by SIGINT: 0 of 3 trials done; run the same command to go on" in driver.out
        assert session_left(driver.proc.pid) == []  # no ray::DashboardAgent / RuntimeEnvAgent orphan
    finally:
        kill_session(driver.proc.pid)


def test_a_second_signal_ends_the_driver_at_once(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "twice", shared_data_dir)
    study_dir = tmp_path / "results" / "twice"
    # Two signals to a driver whose trial never sees a stop (it waits at a gate that stays shut), with a long grace
    # period: the driver still ends quickly, with 143, no crash dump and nothing left. Tune's own stop of the trial
    # usually ends the run before the grace period would, so whether the second signal itself ends the wait
    # (StopNow) is checked in tests/sweep/run/test_stopping.py, where nothing else can.
    gate = tmp_path / "gate"
    gate.touch()
    env = fake_env(steps=100, step_s=0.2, SWEEP_STOP_GRACE_S="120", FAKE_TRAIN_GATE=str(gate))
    driver = Driver(["run", str(path)], tmp_path, env)
    try:
        driver.wait_for(lambda: running(study_dir))
        os.kill(driver.proc.pid, signal.SIGTERM)
        # the driver's handler has taken the first signal (a second one sent before then would merge with it)
        driver.wait_for(lambda: "stopping on SIGTERM: the running trials get up to 120 s to end; send SIGTERM "
                                "again to stop at once" in driver.out)
        os.kill(driver.proc.pid, signal.SIGTERM)
        started = time.monotonic()
        code = driver.finish()
        assert time.monotonic() - started < scaled(15)
        # 143: our exit; -15: the second SIGTERM came while ray.shutdown had reset SIGTERM (the shell
        # shows 143 for both)
        assert code in (143, -signal.SIGTERM), driver.out
        assert "Tuner.restore" not in driver.out and "*** SIGTERM received" not in driver.out
        assert session_left(driver.proc.pid) == []
        assert not running(study_dir)
    finally:
        kill_session(driver.proc.pid)


def test_exit_status_1_when_a_trial_raised_and_0_for_a_diverged_trial(tmp_path, shared_data_dir):
    # Run with its output read by nobody (`sweep run ... | head -0`): the sweep goes on without its terminal
    # lines, and its exit status is still the study's.
    diverged = fake_study(tmp_path, "diverged", shared_data_dir, parameters={"optim.lr": [3e-5, 2.0]})
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "run", str(diverged)], cwd=tmp_path, env=fake_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=scaled(180)) == 0 and "Traceback" not in err, err
    assert Counter(r["status"] for r in rows(tmp_path / "results" / "diverged")) == {"ok": 1, "diverged": 1}

    # The fake trainer raises for a model path containing "raise"; the preflight loads a model's config and
    # tokenizer only, so a copy of those (no weights) under such a name reaches the trial.
    raise_me = tmp_path / "raise-me"
    shutil.copytree(resolve_model_path("embedded"), raise_me, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    raising = fake_study(tmp_path, "raising", shared_data_dir, parameters={"model": ["embedded", str(raise_me)]})
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(raising)], cwd=tmp_path, env=fake_env(),
                            capture_output=True, text=True, timeout=scaled(180), start_new_session=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert Counter(r["status"] for r in rows(tmp_path / "results" / "raising")) == {"ok": 1, "error": 1}


def test_kill_9_of_the_driver_leaves_no_ray_agent_behind(tmp_path, shared_data_dir):
    """kill -9 runs no handler: sweep.run.reaper (started before Ray) kills the agents the raylet leaves."""
    path = fake_study(tmp_path, "killed", shared_data_dir)
    study_dir = tmp_path / "results" / "killed"
    driver = Driver(["run", str(path)], tmp_path, fake_env(steps=100, step_s=0.2))
    try:
        driver.wait_for(lambda: running(study_dir))
        os.kill(driver.proc.pid, signal.SIGKILL)
        driver.finish()
        left = session_left(driver.proc.pid, wait=60)
        assert left == [], left
    finally:
        kill_session(driver.proc.pid)


# ---- a stop signal is never lost (Ctrl-C at start-up) ----
def signalled_driver(tmp_path: Path, shared_data_dir: Path, setup: str) -> subprocess.CompletedProcess:
    """`sweep run` of a two-trial fake study in-process of a fresh interpreter, after `setup` (Python code
    that arranges for a signal at some moment)."""
    path = fake_study(tmp_path, "sig", shared_data_dir, decays=(0.1, 0.2))
    code = (f"import os, signal, sys, time\n{setup}\n"
            f"from sweep.cli import main\nsys.exit(main(['run', {str(path)!r}]))\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fake_env(steps=1, step_s=0),
                          capture_output=True, text=True, timeout=scaled(180), start_new_session=True)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_during_the_start_up_import_is_not_lost(tmp_path, shared_data_dir, signame):
    # optuna is imported at start-up, before the run's own signal handling (Ray Tune only once trials are to run)
    setup = f"import tests.signal_at_import as hook; hook.arm('optuna', signal.{signame})"
    result = signalled_driver(tmp_path, shared_data_dir, setup)
    signum = getattr(signal, signame)
    assert f"sending {int(signum)} while importing optuna" in result.stderr  # the hook did fire there
    assert result.returncode == 128 + signum, result.stdout + result.stderr
    assert result.stderr.splitlines()[-1] == f"sweep: interrupted by {signame}; run the same command to go on"
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "results").exists()  # stopped before anything was written, no trial trained


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_swallowed_before_the_run_stops_the_run(tmp_path, shared_data_dir, signame):
    # `import ray._raylet` probes backports_abc from Cython, which clears the exception of that import; Ray is
    # imported once the run has planned, under its own signal handling, which takes the signal (even without the
    # check after the start-up imports)
    setup = (f"import tests.signal_at_import as hook; hook.arm('backports_abc', signal.{signame})\n"
             "import sweep.signal_latch as latch; latch.honour = lambda: None")
    result = signalled_driver(tmp_path, shared_data_dir, setup)
    assert result.returncode == 128 + getattr(signal, signame), result.stdout + result.stderr
    assert f"interrupted by {signame}: 0 of 2 trials done; run the same command to go on" in result.stdout
    assert {r["state"] for r in rows(tmp_path / "results" / "sig")} == {"PENDING"}  # no trial ran


# A signal after the summary is printed: it was noted and then ignored (exit 0, the normal summary), or
# killed the driver without a word while Ray's shutdown had reset SIGTERM. Now: 128 + N and the one line,
# the same for SIGINT and SIGTERM at the same moment.
@pytest.mark.parametrize("moment, signame", [
    ("after_summary", "SIGINT"), ("after_summary", "SIGTERM"), ("after_ray_shutdown", "SIGTERM"),
    ("inside_ray_shutdown", "SIGINT"), ("inside_ray_shutdown", "SIGTERM"),
])
def test_a_signal_during_the_last_writes_is_honoured(tmp_path, shared_data_dir, moment, signame):
    hooks = {
        "after_summary": ("import sweep.run.runner as r\norig = r.StudyRun.print_summary\n"
                          "def hooked(self):\n    orig(self)\n    os.kill(os.getpid(), signal.{sig}); time.sleep(0.1)\n"
                          "r.StudyRun.print_summary = hooked"),
        # kill_leftovers runs right after ray.shutdown, which left SIGTERM at its default action
        "after_ray_shutdown": ("import sweep.run.stopping as st\norig = st.kill_all\n"
                               "def hooked(*a, **k):\n    os.kill(os.getpid(), signal.{sig}); time.sleep(0.1)\n"
                               "    return orig(*a, **k)\nst.kill_all = hooked"),
        # ray.shutdown stops the local GCS, raylet and agents (~1 s) after the driver's core worker is gone,
        # which reset SIGTERM to its default action: a SIGTERM there ended the driver with 143 and no line
        "inside_ray_shutdown": ("import ray._private.node as node\norig = node.Node.kill_all_processes\n"
                                "sent = []\n"
                                "def hooked(*a, **k):\n    if not sent:\n        sent.append(1)\n"
                                "        os.kill(os.getpid(), signal.{sig}); time.sleep(0.1)\n"
                                "    return orig(*a, **k)\nnode.Node.kill_all_processes = hooked"),
    }
    result = signalled_driver(tmp_path, shared_data_dir, hooks[moment].format(sig=signame))
    assert result.returncode == 128 + getattr(signal, signame), result.stdout + result.stderr
    last = result.stdout.splitlines()[-1]
    assert last == f"interrupted by {signame}: 2 of 2 trials done; run the same command to go on", result.stdout
    assert "Traceback" not in result.stderr
    assert {r["state"] for r in rows(tmp_path / "results" / "sig")} == {"COMPLETE"}
