"""The documentation site: `mkdocs build --strict` passes (no broken link or anchor, no page left out of the
navigation, every API entry found), and the API page documents the whole public API of `sweep`.

The build needs the docs extra (`pip install -e '.[docs]'`); without it the build test is skipped, as .ci/run
installs it before running the tests. It takes a few seconds.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

import sweep
from tests.helpers import REPO

API_PAGE = REPO / "docs" / "reference" / "api.md"


@pytest.mark.slow  # the whole site built (CI also builds it on its own, before the tests)
def test_the_site_builds_in_strict_mode(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("the docs extra is not installed: pip install -e '.[docs]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    problems = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems or [done.stderr[-4000:]])
    for page in ("index.html", "science/mocose/index.html", "reference/api/index.html", "reference/cli/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert (tmp_path / "site" / "assets" / "katex" / "katex.min.js").is_file()  # math renders with no network


def test_the_api_page_documents_every_public_name_of_sweep():
    documented = {target.rsplit(".", 1)[-1] for target in
                  re.findall(r"^::: ([\w.]+)", API_PAGE.read_text(encoding="utf-8"), re.M)}
    assert set(sweep.__all__) <= documented, f"not on {API_PAGE.name}: {sorted(set(sweep.__all__) - documented)}"
