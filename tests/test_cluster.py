"""`sweep run --address` on an existing Ray cluster: a head node started by the test on loopback (slow)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from test_runner import assert_complete_study, kill_session, write_study

pytestmark = pytest.mark.slow


def free_port() -> int:
    """A free loopback port outside Ray's default worker port range (10002-19999)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 20000:
            return port


@contextlib.contextmanager
def ray_head_process(cwd: Path, *extra: str, env: dict[str, str] | None = None):
    """`ray start --head --block` (2 CPUs, plus `extra` options such as --num-gpus=2) on loopback, in its own
    session, with `env` (default: this process's; the trials' workers inherit it); yields (address, the env
    with its auth token). Torn down by stopping that session only (a bare
    `ray stop` would also stop any other Ray instance of this user on the machine)."""
    port = free_port()
    env = {**(os.environ if env is None else env), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
    ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen(
        [ray, "start", "--head", f"--port={port}", "--num-cpus=2", *extra, "--include-dashboard=false",
         "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def drain() -> None:
        for line in head.stdout:
            lines.append(line)
            if "Ray runtime started" in line:
                started.set()

    threading.Thread(target=drain, daemon=True).start()
    if not started.wait(120):
        kill_session(head.pid)
        pytest.fail("ray start --head did not start:\n" + "".join(lines[-30:]))
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        head.terminate()  # ray start --block stops the processes it started on SIGTERM
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        kill_session(head.pid)


@pytest.fixture
def ray_head(tmp_path):
    with ray_head_process(tmp_path) as head:
        yield head


def test_sweep_runs_on_an_existing_cluster(tmp_path, ray_head, tiny_model_dir, shared_data_dir):
    address, env = ray_head
    path = write_study(tmp_path, "cluster", tiny_model_dir, shared_data_dir)
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(path), "--address", address],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                            start_new_session=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4/4 ended" in result.stdout
    study_dir = tmp_path / "results" / "cluster"
    assert_complete_study(study_dir, "cluster", f"sqlite:///{study_dir / 'optuna.db'}", 4)
    # the trials ran in the cluster's workers, not in a Ray instance of the driver's own
    assert "Started a local Ray instance" not in result.stdout + result.stderr
