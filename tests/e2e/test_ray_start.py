"""When Ray cannot start: each cause provoked for real (a virtual-memory cap, Ray's temp folder full or read-only,
a port taken, an address where nothing or something else answers) ends `sweep run` with exit code 3 and one
stderr line naming the cause and its fix, no traceback and no process left; the same study then runs without
the cause, every trial once. `sweep doctor` flags the cap and the failed start. The causes' diagnosis alone
(sweep.run.ray_start) is checked in the fast tier below."""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.run import ray_start
from tests.deadlines import scaled
from tests.helpers import assert_complete_study, fake_env, fake_study, free_port, session_left

CAP_KB = 3_000_000  # ulimit -v takes KiB: 2.9 GiB


def sweep_run(args: list[str], cwd: Path, env: dict[str, str], cap: bool = False) -> tuple[subprocess.CompletedProcess,
                                                                                          list[str]]:
    """`sweep run ARGS` in its own session (under `ulimit -v` when `cap`); (its result, what is left in its
    session once it ended)."""
    command = [sys.executable, "-m", "sweep", "run", *args]
    if cap:
        command = ["bash", "-c", f'ulimit -v {CAP_KB} && exec "$@"', "_", *command]
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    out, err = process.communicate(timeout=scaled(300))
    return subprocess.CompletedProcess(command, process.returncode, out, err), session_left(process.pid, wait=10)


@contextlib.contextmanager
def listening_socket():
    """A plain TCP listener on a free port that never answers (not Ray); yields the port."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        yield sock.getsockname()[1]


@contextlib.contextmanager
def tmpfs(folder: Path, options: str):
    """A tmpfs mounted on `folder` with `options` (root only; the test skips with the reason otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'not root'})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@contextlib.contextmanager
def cause(kind: str, tmp_path: Path):
    """(sweep run's extra arguments, extra environment, under ulimit -v?, what the line must say) while the
    cause holds."""
    if kind == "vm_cap":
        yield [], {}, True, "a virtual-memory limit of 2.9 GiB is set (ulimit -v); Ray's raylet and object store"
    elif kind == "temp_read_only":
        with tmpfs(tmp_path / "ro", "ro,size=1m") as folder:
            yield [], {"RAY_TMPDIR": str(folder)}, False, f"Ray's temp folder {folder}/ray is not writable"
    elif kind == "temp_full":
        with tmpfs(tmp_path / "full", "size=64k") as folder:
            subprocess.run(["dd", "if=/dev/zero", f"of={folder / 'fill'}", "bs=4k"], capture_output=True)
            yield [], {"RAY_TMPDIR": str(folder)}, False, f"Ray's temp folder {folder}/ray has 0 MiB free"
    elif kind == "port_taken":
        with listening_socket() as port:
            yield [], {"RAY_GCS_SERVER_PORT": str(port)}, False, f"port {port} (RAY_GCS_SERVER_PORT) is taken"
    elif kind == "nothing_at_address":
        port = free_port()
        yield ["--address", f"127.0.0.1:{port}"], {}, False, "nothing answers there"
    elif kind == "not_ray_at_address":
        with listening_socket() as port:
            yield ["--address", f"127.0.0.1:{port}"], {}, False, f"something answers on port {port} but it is not"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["vm_cap", "temp_read_only", "temp_full", "port_taken", "nothing_at_address",
                                  "not_ray_at_address"])
def test_a_ray_that_cannot_start_ends_the_run_in_one_line_and_a_later_run_finishes(tmp_path, shared_data_dir, kind):
    path = fake_study(tmp_path, "ray_start", shared_data_dir)
    study_dir = tmp_path / "results" / "ray_start"
    with cause(kind, tmp_path) as (args, env, cap, says):
        result, left = sweep_run([str(path), *args], tmp_path, fake_env(**env), cap=cap)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    where = "reach the Ray cluster at" if args else "start a local Ray instance"
    assert line.startswith(f"sweep: error: cannot {where}") and says in line, line
    assert left == [], left
    # without the cause the same command finishes the study: every trial once, nothing lost or duplicated
    result, left = sweep_run([str(path)], tmp_path, fake_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert_complete_study(study_dir, "ray_start", f"sqlite:///{study_dir / 'optuna.db'}", 3)
    assert left == []


@pytest.mark.slow
def test_doctor_flags_the_cap_and_the_failed_start_each_with_its_fix(tmp_path):
    command = ["bash", "-c", f'ulimit -v {CAP_KB} && exec "$@"', "_", sys.executable, "-m", "sweep", "doctor"]
    result = subprocess.run(command, cwd=tmp_path, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                            capture_output=True, text=True, timeout=scaled(300))
    assert result.returncode == 1, result.stdout + result.stderr
    problems = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("PROBLEM")]
    assert problems == [
        "PROBLEM  a virtual-memory limit of 2.9 GiB is set (ulimit -v); fix: Ray's raylet and object store need "
        "more: raise or remove it (ulimit -v unlimited), or run where it is not set",
        "PROBLEM  a local Ray head does not start: a virtual-memory limit of 2.9 GiB is set (ulimit -v); fix: Ray's "
        "raylet and object store need more: raise or remove it (ulimit -v unlimited), or run where it is not set"]


# ---- fast: the diagnosis alone ------------------------------------------------------------------------------
def test_an_address_is_told_apart_by_what_answers_there():
    with listening_socket() as port:
        assert ray_start.http2_reply("127.0.0.1", port, timeout=0.5) is False  # accepts, says nothing
        assert "not a Ray head" in ray_start.ray_start_precheck(f"127.0.0.1:{port}").cause
    port = free_port()
    assert ray_start.http2_reply("127.0.0.1", port, timeout=0.5) is None  # refused
    assert ray_start.ray_start_precheck(f"127.0.0.1:{port}").cause.startswith("nothing answers there")
    assert ray_start.ray_start_precheck("auto") is None  # Ray resolves it


def test_a_failed_start_names_the_cap_the_temp_folder_or_rays_log(tmp_path, monkeypatch):
    failure = Exception("The current node timed out during startup.")
    monkeypatch.setattr(ray_start, "address_limit_text", lambda: "2.9 GiB")
    line = ray_start.ray_start_failure(failure, None).line(None)
    assert line == ("cannot start a local Ray instance: a virtual-memory limit of 2.9 GiB is set (ulimit -v); Ray's "
                    "raylet and object store need more: raise or remove it (ulimit -v unlimited), or run where it is "
                    "not set")
    monkeypatch.setattr(ray_start, "address_limit_text", lambda: None)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    logs = tmp_path / "ray" / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "gcs_server.err").write_text("first\n\nsecond\nthird: mmap failed\n")
    cause_ = ray_start.ray_start_failure(failure, None)
    assert cause_.cause == (f"The current node timed out during startup.; Ray's log {logs / 'gcs_server.err'} ends: "
                            "first | second | third: mmap failed")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(ray_start.shutil, "disk_usage", lambda path: usage(2**30, 2**30 - 1024, 1024))
    assert "has 0 MiB free, under the 64 MiB a local Ray head needs" in ray_start.ray_start_failure(failure, None).cause
