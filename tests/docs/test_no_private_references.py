"""No file of the project points readers at material they do not have.

`shared/docs`, `shared/papers` and the methods note kept there travel beside the project for its developers
only: a reader of the site, the README or the code has none of them, so what the project says about its
science is in docs/science/ and a citation of those files would lead nowhere. Every tracked file (and every
new one git does not ignore) is searched, except this test, which has to name them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

FORBIDDEN = (b"shared/docs", b"shared/papers", b"methods" + b".md")


def project_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the project's files cannot be listed")
    done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                          capture_output=True, check=True, timeout=60)
    return sorted({name for name in done.stdout.decode().split("\0") if name})


def test_no_file_cites_the_developers_shared_material():
    this = Path(__file__).resolve()
    found: dict[str, list[str]] = {}
    for name in project_files():
        path = REPO / name
        if path.resolve() == this or not path.is_file():
            continue
        data = path.read_bytes()
        hits = [word.decode() for word in FORBIDDEN if word in data]
        if hits:
            lines = [f"{number}: {line.strip()[:120]}" for number, line in
                     enumerate(data.decode(errors="replace").splitlines(), 1)
                     if any(word.decode() in line for word in FORBIDDEN)]
            found[name] = lines
    assert not found, (f"{sum(map(len, found.values()))} citations of shared material in {len(found)} files; "
                       "point at docs/science/ instead:\n"
                       + "\n".join(f"{name}:{line}" for name, lines in found.items() for line in lines))
