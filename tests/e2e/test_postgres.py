"""A study with `storage: postgresql://...` against a real PostgreSQL server started by the tests (slow).

The session fixture runs initdb into a temporary folder and pg_ctl start on a free loopback port, as
the `postgres` OS user when the tests run as root (PostgreSQL refuses to run as root). Without the
PostgreSQL binaries the test is skipped, except under CI (CI=true), where it fails.
Binaries are looked up in $SWEEP_PG_BIN, on PATH, then in /usr/lib/postgresql/<version>/bin.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from sweep.run.runner import run_study
from sweep.spec import load_study
from tests.deadlines import scaled
from tests.helpers import assert_complete_study, free_port, query_dashboard, run_sweep, write_study

pytestmark = pytest.mark.slow


def postgres_bin() -> Path | None:
    candidates = [os.environ.get("SWEEP_PG_BIN")]
    on_path = shutil.which("pg_ctl")
    candidates.append(str(Path(on_path).parent) if on_path else None)
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                         if Path(p).parent.name.isdigit() else 0, reverse=True)
    for folder in filter(None, candidates):
        if all((Path(folder) / tool).is_file() for tool in ("initdb", "pg_ctl", "createdb")):
            return Path(folder)
    return None


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL server on 127.0.0.1 with an empty database; its URL."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        message = ("PostgreSQL binaries (initdb, pg_ctl, createdb) not found: install them "
                   "(apt-get install postgresql) or set SWEEP_PG_BIN")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="sweep-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL will not run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data = root / "data"
    port = free_port()

    def run(*args: str) -> None:
        result = subprocess.run([*as_user, *args], capture_output=True, text=True, timeout=scaled(120))
        if result.returncode != 0:
            log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
            pytest.fail(f"{' '.join(args)} failed:\n{result.stdout}{result.stderr}{log}")

    run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-o", options, "-w", "start")
    try:
        run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "sweep")
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/sweep"
    finally:
        subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=scaled(60))
        shutil.rmtree(root, ignore_errors=True)


def test_parallel_trials_mirrored_to_postgresql(tmp_path, postgres_url, tiny_model_dir, shared_data_dir):
    spec = load_study(write_study(tmp_path, "pg_grid", tiny_model_dir, shared_data_dir, storage=postgres_url))
    assert run_study(spec, max_concurrent=2) == 0
    study_dir = Path(spec.study_dir)
    assert not (study_dir / "optuna.db").exists()  # everything went to PostgreSQL
    trials = assert_complete_study(study_dir, "pg_grid", postgres_url, 4)
    for t in trials:
        assert set(t.intermediate_values) == {3, 6}
        assert {"key", "seed", "mtd", "STSBenchmark", "align", "uniform"} <= set(t.user_attrs)
    # two trials overlapped in time (max-concurrent 2 on two cores)
    spans = sorted((t.datetime_start, t.datetime_complete) for t in trials)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))

    studies, study = query_dashboard(postgres_url)
    assert [s["study_name"] for s in studies["study_summaries"]] == ["pg_grid"]
    assert len(study["trials"]) == 4

    result = run_sweep(["status", str(study_dir)], cwd=tmp_path, timeout=60)  # storage read from study.yaml
    assert result.returncode == 0, result.stderr
    assert "optuna (postgresql+psycopg2://postgres@127.0.0.1" in result.stdout
    assert "4 trials: 4 COMPLETE" in result.stdout
