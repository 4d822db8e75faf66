"""Preflight: a study that cannot run exits 2 with one line before Ray starts a trial."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweep.run.preflight import preflight_resources
from sweep.run.runner import run_study
from sweep.spec import load_study
from tests.deadlines import scaled
from tests.helpers import REPO, study_file
from trainer.errors import UserError


def write_study(tmp_path: Path, base: str, extra: str = "") -> Path:
    return study_file(tmp_path, f"name: pre\nbase: {base}\nresults_dir: {tmp_path / 'results'}\n{extra}")


def test_a_gpu_study_on_a_machine_without_gpu_exits_2_in_seconds(tmp_path):
    path = write_study(tmp_path, "{model: embedded, method: simcse, max_steps: 2}", "resources: {gpu: 1}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}  # no GPU, also on a GPU machine
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(path)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=scaled(120))
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert elapsed < scaled(20), elapsed
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "asks for 1 GPU but this machine has no GPU" in lines[0]
    assert "resources: {gpu: 0}" in lines[0]  # how to fix it
    assert not (tmp_path / "results").exists()  # nothing written, Ray never started


@pytest.mark.parametrize("nodes, cpu, gpu, fragment", [
    ([{"CPU": 16.0}], 1, 1, "no GPU"),
    ([{"CPU": 4.0, "GPU": 1.0}, {"CPU": 4.0, "GPU": 1.0}], 1, 2, "at most 1 GPU(s) on one node"),
    ([{"CPU": 2.0}], 4, 0, "asks for 4 CPUs"),
])
def test_a_trial_must_fit_on_one_node(nodes, cpu, gpu, fragment):
    with pytest.raises(UserError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        preflight_resources(cpu, gpu, nodes, "the Ray cluster at head:6379")
    preflight_resources(0.5, 0.5, [{"CPU": 1.0, "GPU": 1.0}])  # fractions fit


@pytest.mark.parametrize("base, fragment", [
    ("{model: /no/such/model-folder, method: simcse}", "model folder /no/such/model-folder does not exist"),
    ("{model: no-such-org/no-such-model, method: simcse}", "cannot load model 'no-such-org/no-such-model'"),
    ("{model: embedded, method: simcse, data: {data_dir: /no/such/data}}",
     "data directory /no/such/data does not exist"),
    ("{model: embedded, method: simcse, data: {corpus: /no/such/corpus.txt}}", "training corpus /no/such/corpus.txt"),
])
def test_a_model_or_data_that_is_not_there_stops_the_study_before_any_trial(tmp_path, monkeypatch, shared_data_dir,
                                                                           base, fragment):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub id that is not in the cache cannot be fetched here
    monkeypatch.setenv("SWEEP_DATA_DIR", str(shared_data_dir))  # the data is there unless the case says otherwise
    spec = load_study(write_study(tmp_path, base))
    with pytest.raises(UserError) as info:
        run_study(spec, _train_fn="unused:train")
    assert fragment in str(info.value) and "\n" not in str(info.value)
    # A new study refused here leaves no folder: one would claim the name, and the corrected spec (another
    # base) would then be refused as a different study.
    assert not Path(spec.study_dir).exists()


def test_a_model_folder_that_loaded_before_is_not_loaded_again_until_its_files_change(tmp_path, monkeypatch,
                                                                                      tiny_model_dir):
    """The driver's model check imports transformers (a second or more of each start); a folder that
    passed with the same files and versions is remembered. Any change to its files checks it again."""
    import shutil

    import transformers

    from trainer import models

    monkeypatch.setattr(models, "MODEL_CHECKS", tmp_path / "cache" / "model_checks.json")
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    loads = []
    real = transformers.AutoConfig.from_pretrained

    def counting(path, *args, **kwargs):
        loads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", counting)
    models.check_model(str(folder))
    first = len(loads)  # AutoTokenizer reads the config too
    models.check_model(str(folder))
    assert first >= 1 and len(loads) == first
    (folder / "config.json").write_text("{not json")  # a damaged config: same folder, changed file
    with pytest.raises(UserError, match="cannot load model"):
        models.check_model(str(folder))
    assert len(loads) > first


def test_a_sweep_driver_resolves_every_method_without_importing_torch():
    """The method rules live apart from the nn.Modules (trainer.method_rules) so that `sweep run` loads a
    study, fills each method's defaults and checks them without torch (~2 s of its start)."""
    code = ("import sys\n"
            "from trainer.config import RunConfig\n"
            "for method in ('simcse', 'gs', 'mix', 'mocose'):\n"
            "    for variant in ('paper', 'released'):\n"
            "        RunConfig.from_dict({'method': method, 'variant': variant}).resolved()\n"
            "from sweep.spec import load_study\n"
            "load_study(sys.argv[1])\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)\n")
    study = REPO / "studies" / "quickstart.yaml"
    out = subprocess.run([sys.executable, "-c", code, str(study)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
