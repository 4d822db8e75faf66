"""A study whose plugin is wrong is refused by `sweep run` before anything is written or started: one line on
stderr, naming the file and line where one exists, exit 2 (the DCL example beside the study, or a broken copy)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.deadlines import scaled
from tests.helpers import REPO, first_fast

STUDY = """\
name: refused
plugins: [{plugin}]
base: {{model: embedded, method: simcse, max_steps: 4}}
parameters:
  method: [simcse, {method}]
  dcl.sigma: [{sigma}]
seeds: [1]
"""
BROKEN = {
    "import": ("dcl.py", "import not_a_module_anywhere\n", 1, "failed on import: ModuleNotFoundError"),
    "loss": ("dcl.py", "from trainer.methods import Method\n\n\nclass NoLoss(Method):\n    name = 'dcl'\n"
                       "    label = 'DCL'\n", 4, "has no loss: define loss"),
}


@pytest.mark.parametrize("case", first_fast("bad knob", "unknown name", "import", "loss", "missing file"))
def test_a_wrong_plugin_is_refused_on_one_line_before_anything_runs(tmp_path, case):
    shutil.copy(REPO / "docs" / "examples" / "dcl" / "dcl.py", tmp_path / "dcl.py")
    fields = {"plugin": "dcl.py", "method": "dcl", "sigma": "0.5"}
    if case == "bad knob":
        fields["sigma"] = "-1"
    elif case == "unknown name":
        fields["method"] = "dlc"
    elif case == "missing file":
        fields["plugin"] = "dcl_gone.py"
    else:
        name, body, _, _ = BROKEN[case]
        (tmp_path / name).write_text(body)
    study = tmp_path / "study.yaml"
    study.write_text(STUDY.format(**fields))
    done = subprocess.run([sys.executable, "-m", "sweep", "run", str(study)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=scaled(120), env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("sweep: error: "), lines
    line = lines[0][len("sweep: error: "):]
    if case == "bad knob":
        assert line.startswith(f"{study}:6: ") and "dcl.sigma" in line and "> 0" in line, line
    elif case == "unknown name":
        assert line.startswith(f"{study}:5: ") and "did you mean 'dcl'" in line, line
    elif case == "missing file":
        assert line.startswith(f"{study}:2: ") and "dcl_gone.py" in line, line
    else:
        _, _, number, says = BROKEN[case]
        assert line.startswith(f"{tmp_path / 'dcl.py'}:{number}: ") and says in line, line
    assert not (tmp_path / "results").exists()  # refused before the results folder or Optuna study is made
