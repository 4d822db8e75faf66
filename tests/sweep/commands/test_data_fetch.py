"""`sweep data fetch`: installs every manifest file verified, idempotently, atomically, with one-line errors.

The CLI runs in a subprocess (real exit code and stderr). Damaged mirrors are symlink farms onto
../shared/data with one file replaced by a damaged copy, so nothing is copied into the repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deadlines import scaled
from tests.helpers import REPO
from trainer.data import manifest

DAMAGED = "senteval/STS/STS14-en-test/STS.input.images.txt"
MANIFEST = manifest()  # checked against ../shared/data/SHA256SUMS by a test below


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sweep_cmd() -> list[str]:
    script = Path(sys.executable).with_name("sweep")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sweep"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SWEEP_DATA_DIR",) and not k.lower().endswith("_proxy")}
    env["no_proxy"] = "*"
    env.update(extra)
    return env


def run_sweep(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_cmd() + list(args), capture_output=True, text=True, timeout=scaled(300),
                          env=env or clean_env(), cwd=cwd or REPO)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("sweep: error") or "Error" in line]


def assert_one_line_error(proc: subprocess.CompletedProcess, *must_contain: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    line = errors[0]
    assert line.startswith("sweep: error: ") and proc.stderr.rstrip("\n").endswith(line), proc.stderr
    for text in must_contain:
        assert text in line, (text, line)
    return line


def part_files(root: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".part")]


def all_files(root: Path) -> list[str]:
    return [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for rel in all_files(root):
        st = (root / rel).stat()
        out[rel] = (st.st_mtime_ns, st.st_ino)
    return out


def assert_installed(root: Path):
    for rel, (size, sha) in MANIFEST.items():
        path = root / rel
        assert path.is_file(), rel
        assert path.stat().st_size == size, rel
        assert sha256(path) == sha, rel
    assert not part_files(root)


def make_mirror(shared: Path, dest: Path, damage: str | None = None) -> Path:
    """A mirror of `shared` made of symlinks; `damage` = 'truncated' or 'altered' replaces DAMAGED."""
    for rel in all_files(shared):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(shared / rel)
    if damage:
        good = (shared / DAMAGED).read_bytes()
        bad = good[:-57] if damage == "truncated" else good[:100] + bytes([good[100] ^ 0x20]) + good[101:]
        assert bad != good and (damage == "truncated" or len(bad) == len(good))
        (dest / DAMAGED).unlink()
        (dest / DAMAGED).write_bytes(bad)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory, shared_data_dir) -> Path:
    """A data dir installed once (in-process) to copy from in tests that need a prior install."""
    from sweep.commands.fetch import fetch_data

    root = tmp_path_factory.mktemp("installed") / "data"
    fetch_data(source=str(shared_data_dir), dest=str(root), corpus="sample")
    return root


def test_manifest_agrees_with_the_mirror_checksums(shared_data_dir):
    sums = {}
    for line in (shared_data_dir / "SHA256SUMS").read_text().splitlines():
        sha, path = line.split(maxsplit=1)
        sums[path.removeprefix("./")] = sha
    assert {rel: sha for rel, (_, sha) in MANIFEST.items()} == sums


def test_fetch_from_mirror_installs_every_manifest_file_verified(tmp_path, shared_data_dir):
    dest = tmp_path / "dest"
    proc = run_sweep("data", "fetch", "--from", str(shared_data_dir), "--dest", str(dest))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert_installed(dest)
    assert sorted(all_files(dest)) == sorted(MANIFEST)


def test_second_fetch_is_idempotent(tmp_path, shared_data_dir):
    dest = tmp_path / "dest"
    assert run_sweep("data", "fetch", "--from", str(shared_data_dir), "--dest", str(dest)).returncode == 0
    before = snapshot(dest)
    proc = run_sweep("data", "fetch", "--from", str(shared_data_dir), "--dest", str(dest))
    assert proc.returncode == 0, proc.stderr
    assert snapshot(dest) == before  # no file rewritten (same mtime, same inode), none added
    assert_installed(dest)


def test_sweep_data_dir_is_used_without_dest(tmp_path, shared_data_dir):
    target = tmp_path / "from-env"
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(SWEEP_DATA_DIR=str(target), HOME=str(home))
    proc = run_sweep("data", "fetch", "--from", str(shared_data_dir), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_installed(target)
    assert not (home / ".cache").exists()


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_damaged_mirror_file_fails_without_leaving_it_installed(tmp_path, shared_data_dir, damage):
    mirror = make_mirror(shared_data_dir, tmp_path / "mirror", damage)
    dest = tmp_path / "dest"
    proc = run_sweep("data", "fetch", "--from", str(mirror), "--dest", str(dest))
    assert_one_line_error(proc, "STS.input.images.txt")
    assert not (dest / DAMAGED).exists()
    assert not part_files(dest)
    installed_now = [rel for rel in all_files(dest)]
    assert installed_now, "files before the damaged one were installed"
    for rel in installed_now:  # whatever was installed is the verified, good file
        assert sha256(dest / rel) == MANIFEST[rel][1], rel


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_damaged_mirror_never_replaces_an_installed_file(tmp_path, shared_data_dir, installed, damage):
    mirror = make_mirror(shared_data_dir, tmp_path / "mirror", damage)
    dest = tmp_path / "dest"
    shutil.copytree(installed, dest)
    good = (dest / DAMAGED).read_bytes()
    mtime = (dest / DAMAGED).stat().st_mtime_ns

    # a verified install is left alone
    proc = run_sweep("data", "fetch", "--from", str(mirror), "--dest", str(dest))
    assert proc.returncode == 0, proc.stderr
    assert (dest / DAMAGED).read_bytes() == good and (dest / DAMAGED).stat().st_mtime_ns == mtime

    # a stale copy at dest is not overwritten by the damaged mirror file
    stale = good[:-10]
    (dest / DAMAGED).write_bytes(stale)
    proc = run_sweep("data", "fetch", "--from", str(mirror), "--dest", str(dest))
    assert_one_line_error(proc, "STS.input.images.txt")
    assert (dest / DAMAGED).read_bytes() == stale
    assert not part_files(dest)


def test_install_file_keeps_the_good_file_when_the_source_is_bad(tmp_path, shared_data_dir, installed):
    from sweep.commands.fetch import install_file
    from trainer.errors import UserError

    mirror = make_mirror(shared_data_dir, tmp_path / "mirror", "altered")
    dest = tmp_path / "dest"
    shutil.copytree(installed, dest)
    before = (dest / DAMAGED).stat().st_mtime_ns
    with pytest.raises(UserError, match="sha256"):
        install_file(mirror / DAMAGED, dest, DAMAGED)
    assert sha256(dest / DAMAGED) == MANIFEST[DAMAGED][1]
    assert (dest / DAMAGED).stat().st_mtime_ns == before
    assert not part_files(dest)


def _closed_port_url() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/x"


def _offline_fetch(dest: Path, *extra: str) -> subprocess.CompletedProcess:
    """`sweep data fetch --dest DEST` with both download URLs pointed at a closed local port."""
    url = _closed_port_url()
    code = (
        "import sys, sweep.commands.fetch as f\n"
        f"f.SENTEVAL_URL = f.WIKI1M_URL = {url!r}\n"
        "from sweep.cli import main\n"
        f"sys.exit(main(['data', 'fetch', '--dest', {str(dest)!r}] + {list(extra)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(120),
                          env=clean_env(), cwd=REPO)


def test_offline_download_fails_cleanly(tmp_path):
    dest = tmp_path / "dest"
    proc = _offline_fetch(dest)
    line = assert_one_line_error(proc, "127.0.0.1", "--from")
    assert line.count("\n") == 0
    assert all_files(dest) == []  # nothing half-written
    assert not any(p.is_dir() and p.name != "dest" for p in dest.iterdir())  # temp folder removed


def test_offline_corpus_download_fails_cleanly(tmp_path, installed):
    dest = tmp_path / "dest"
    shutil.copytree(installed, dest)
    shutil.rmtree(dest / "corpus")
    before = snapshot(dest)
    proc = _offline_fetch(dest, "--corpus", "full")
    assert_one_line_error(proc, "127.0.0.1")
    assert not (dest / "corpus" / "wiki1m_for_simcse.txt").exists()
    assert not part_files(dest)
    assert snapshot(dest) == before


def test_a_folder_that_is_no_mirror_is_refused_and_a_data_directory_serves_as_one(tmp_path, installed):
    """The refusal describes the layout in the user's own terms (a data directory), and following it literally
    works: a data directory `sweep data fetch` wrote is itself a mirror for another machine."""
    (tmp_path / "not-a-mirror").mkdir()
    proc = run_sweep("data", "fetch", "--from", str(tmp_path / "not-a-mirror"), "--dest", str(tmp_path / "x"))
    assert_one_line_error(proc, "no senteval/ folder there", "laid out as a data directory (senteval/, corpus/)",
                          "another machine's data directory")
    assert not (tmp_path / "x").exists()  # nothing written: a later command still says the data is not there
    dest = tmp_path / "dest"
    proc = run_sweep("data", "fetch", "--from", str(installed), "--dest", str(dest), "--corpus", "sample")
    assert proc.returncode == 0, proc.stderr
    assert_installed(dest)
    assert (dest / "corpus" / "wiki1m_sample.txt").read_bytes() == (installed / "corpus" / "wiki1m_sample.txt"
                                                                    ).read_bytes()


@pytest.mark.parametrize("from_mirror, corpus, fragment", [
    (True, "full", "no corpus/wiki1m_for_simcse.txt there; choose --corpus with one the mirror has"),
    (False, "sample", "--corpus sample comes from a mirror only (corpus/wiki1m_sample.txt)"),
])
def test_a_corpus_that_cannot_come_from_the_source_is_refused_before_anything_is_written(tmp_path, shared_data_dir,
                                                                                        from_mirror, corpus,
                                                                                        fragment):
    """Before, the SentEval files were copied (or downloaded) first and the refusal came after them."""
    source = ["--from", str(make_mirror(shared_data_dir, tmp_path / "mirror"))] if from_mirror else []
    dest = tmp_path / "dest"
    proc = run_sweep("data", "fetch", *source, "--dest", str(dest), "--corpus", corpus)
    assert_one_line_error(proc, fragment)
    assert not dest.exists()
