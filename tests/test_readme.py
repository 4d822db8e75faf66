"""What the README tells a newcomer to type works as typed: its commands name a program the quickstart put
on the PATH (the quickstart's virtual environment is activated first), and the quickstart says how."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.deadlines import scaled
from tests.helpers import REPO

README = (REPO / "README.md").read_text()


def test_the_commands_section_activates_the_environment_before_its_first_bare_sweep():
    section = README.split("## Commands", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    first_sweep = next(i for i, line in enumerate(lines) if re.match(r"^sweep\b", line))
    assert ". .venv/bin/activate" in lines[:first_sweep], lines[: first_sweep + 1]


def test_the_quickstart_ends_by_saying_how_to_get_sweep_on_the_path(tmp_path):
    """The quickstart's last line names the command that puts `sweep` on the PATH, and that command, run in
    a shell with only the system PATH, does."""
    last = (REPO / "scripts" / "quickstart.sh").read_text().strip().splitlines()[-1]
    assert ". .venv/bin/activate" in last, last
    if not (REPO / ".venv" / "bin" / "activate").is_file():
        pytest.skip("no .venv here (scripts/setup.sh makes it; CI and the README's commands use it)")
    shell = subprocess.run(["bash", "-c", ". .venv/bin/activate && command -v sweep"], cwd=REPO, capture_output=True,
                           text=True, timeout=scaled(30), env={"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"]})
    assert shell.returncode == 0 and shell.stdout.strip() == str(REPO / ".venv" / "bin" / "sweep"), shell
