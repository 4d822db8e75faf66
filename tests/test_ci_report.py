"""CI's map of the suite's time (.ci/run): every test carries its tier into pytest's JUnit XML (tests/conftest.py),
and .ci/durations_by_file.py sums the test time per tier and per file from it. Checked on a small pytest run
of its own whose tests sleep, so that each tier's sum is bounded from below by the clock, not by the script's
own arithmetic."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from tests.deadlines import scaled
from tests.helpers import REPO

CONFTEST = "from tests.conftest import pytest_collection_modifyitems  # noqa: F401  (the hook under test)\n"
TESTS = """
import time

import pytest


def test_quick():
    pass


def test_sleeps_in_the_fast_tier():
    time.sleep(0.3)


@pytest.mark.slow
def test_sleeps_in_the_slow_tier():
    time.sleep(0.6)
"""


def test_each_tiers_test_time_is_summed_from_the_junit_xml(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(TESTS))
    junit = tmp_path / "suite.xml"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:cov",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", f"--junitxml={junit}", "test_sample.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert run.returncode == 0, run.stdout + run.stderr
    report = subprocess.run([sys.executable, str(REPO / ".ci" / "durations_by_file.py"), str(junit)],
                            capture_output=True, text=True, timeout=scaled(60))
    assert report.returncode == 0, report.stderr
    tiers = {m["tier"]: (int(m["tests"]), float(m["seconds"])) for m in re.finditer(
        r"^tier (?P<tier>\w+): (?P<tests>\d+) tests, (?P<seconds>[\d.]+) s of test time", report.stdout, re.M)}
    assert list(tiers) == ["fast", "slow"], report.stdout
    assert tiers["fast"][0] == 2 and tiers["slow"][0] == 1, report.stdout
    assert tiers["fast"][1] >= 0.3 and tiers["slow"][1] >= 0.6, report.stdout  # each tier's sleeps, at least
    assert "test_sample.py" in report.stdout and "test_sleeps_in_the_slow_tier" in report.stdout, report.stdout
