"""`sweep doctor`: the checklist, `--bench --tiny` on the CPU, which must say that no GPU was measured, where the
bench's record is written, and the verdicts that make the command fail (the bench itself: test_gpu_bench.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.commands.bench_record import BenchRecord, Sharing
from tests.deadlines import scaled
from tests.helpers import BENCH_SHARING_STAND_IN as SHARING
from tests.helpers import REPO, stand_in_sync_debug_mode


def doctor(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}  # no GPU, also on a GPU machine
    return subprocess.run([sys.executable, "-m", "sweep", "doctor", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=scaled(300))


@pytest.mark.slow  # the checklist starts and stops a local Ray head (its Ray start-up check)
def test_the_checklist_names_each_part_of_the_environment(tmp_path, shared_data_dir):
    result = doctor("--data-dir", str(shared_data_dir), "--json", str(tmp_path / "checks.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    import optuna
    import ray
    import torch

    out = result.stdout
    assert f"torch {torch.__version__}" in out and f"ray {ray.__version__}" in out
    assert f"optuna {optuna.__version__}" in out
    assert "no GPU: trials run on the CPU" in out
    assert f"data directory {shared_data_dir}: the" in out and "evaluation files verified" in out
    assert "model cache" in out and "no problems found" in out
    written = json.loads((tmp_path / "checks.json").read_text())
    assert written["problems"] == 0 and "bench" not in written


@pytest.mark.slow  # `sweep doctor` imports torch, Ray and Optuna to name their versions
def test_a_missing_data_directory_is_one_problem_with_its_fix(tmp_path):
    result = doctor("--data-dir", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    problems = [line for line in result.stdout.splitlines() if line.strip().startswith("PROBLEM")]
    assert len(problems) == 1 and "nowhere does not exist; fix: run `sweep data fetch`" in problems[0]
    assert "1 problem(s)" in result.stdout


def test_an_unknown_method_is_one_line_and_exit_2(tmp_path):
    result = doctor("--bench", "--methods", "simcse,moco", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "sweep: error: --methods: unknown moco; expected a comma-separated list of simcse, mocose, gs, mix"]


@pytest.mark.slow
def test_the_tiny_cpu_bench_measures_and_says_no_gpu_was_measured(tmp_path, shared_data_dir):
    path = tmp_path / "bench.json"
    # without the size probe (its MiniLM-sized runs were most of this test's time; tested on its own below)
    result = doctor("--bench", "--tiny", "--methods", "simcse,mocose", "--precisions", "fp32,bf16", "--steps", "10",
                    "--no-probe", "--data-dir", str(shared_data_dir), "--json", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NOTE: no GPU was measured" in result.stdout
    assert "| method | precision asked -> ran | steps/s | sentences/s | peak memory |" in result.stdout
    bench = json.loads(path.read_text())["bench"]
    assert bench["device"] == "cpu" and bench["gpu"] is None and bench["gpu_measured"] is False
    assert bench["note"].startswith("no GPU was measured")
    assert bench["encoder"]["shape"] == "tiny" and bench["steps"] == 10 and bench["skipped"] == []
    assert bench["size_probe"] is None and bench["sharing"]["encoder"] == "tiny"
    runs = {(r["method"], r["precision_asked"]): r for r in bench["runs"]}
    assert set(runs) == {("simcse", "fp32"), ("simcse", "bf16"), ("mocose", "fp32"), ("mocose", "bf16")}
    for (method, asked), run in runs.items():
        # the precision the trainer's summary says it used: the one asked, or fp32 where the CPU does not honour it
        assert run["precision_ran"] in ("fp32", asked) and run["device"] == "cpu" and run["steps"] == 10
        assert run["sentences_per_s"] > 0 and run["peak_memory_mib"] is None
        assert run["steps_per_s"] == pytest.approx(run["sentences_per_s"] / bench["batch_size"], abs=1e-3)
        assert run["sync"]["sync_free"] is None and "no GPU" in run["sync"]["first_sync"]
        if asked != "fp32":
            fp32 = runs[(method, "fp32")]["loss"]
            assert run["loss_vs_fp32"] == pytest.approx(abs(run["loss"] - fp32) / abs(fp32), abs=1e-5)
            if run["precision_ran"] == "fp32":  # same seed, same batches, same precision: the same loss
                assert run["loss"] == fp32
    # the timed steps fit in the bench's own wall time (measured by a different clock)
    assert sum(r["steps"] / r["steps_per_s"] for r in bench["runs"]) < bench["elapsed_s"]
    share = bench["sharing"]
    assert len(share["shared_sentences_per_s"]) == 2 and share["alone_sentences_per_s"] > 0
    assert share["aggregate_sentences_per_s"] == pytest.approx(sum(share["shared_sentences_per_s"]), abs=0.01)
    assert "two trials sharing one CPU" in result.stdout


def test_the_bench_is_kept_as_the_devices_record_not_in_the_current_folder(tmp_path, monkeypatch, capsys):
    from sweep.commands import doctor as doctor_module

    report = BenchRecord(runs=[], gpu="NVIDIA H100 80GB HBM3", device="cuda", encoder={"shape": "bert-base"},
                         batch_size=64, max_length=32, steps=20, elapsed_s=1, sharing=None, skipped=[], note=None)
    monkeypatch.setattr(doctor_module, "run_bench", lambda **kwargs: report)
    monkeypatch.setattr(doctor_module, "environment_checks", lambda data_dir: [])  # no Ray head in the fast tier
    monkeypatch.setenv("SWEEP_BENCH_DIR", str(tmp_path / "records"))
    monkeypatch.chdir(tmp_path)
    doctor_module.doctor_command(bench=True, data_dir=str(tmp_path / "nowhere"))
    record = tmp_path / "records" / "nvidia-h100-80gb-hbm3.json"
    assert BenchRecord.read(record).to_json() == report.to_json() and BenchRecord.read(record).path == record
    assert f"written: {record}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records"]  # nothing in the current folder


@pytest.mark.slow
@pytest.mark.parametrize("fault", [None, "autocast ignored", "loss perturbed"])
def test_the_bench_fails_on_a_provoked_fault_and_passes_the_clean_run(tmp_path, shared_data_dir, monkeypatch,
                                                                      capsys, fault):
    """`sweep doctor --bench` is a check: 0 on the clean run; 1 and one FAILED line naming the verdict when a
    precision request is ignored by autocast (the trainer measures what the step computed in) or when a half-
    precision loss strays from fp32's. (A host sync inside the step is CUDA's sync check: the device check
    provokes it on a GPU; failed_verdicts' reading of it is below.)"""
    import contextlib

    import torch

    import sweep.commands.doctor as doctor_module
    import sweep.commands.gpu_bench as gpu_bench
    import trainer.methods.simcse as simcse

    # two more processes that bear on no verdict: a stand-in's figures
    monkeypatch.setattr(gpu_bench, "sharing_check", lambda config, encoder: Sharing(**SHARING, encoder=encoder))
    if fault == "autocast ignored":
        monkeypatch.setattr("trainer.train.torch.autocast", lambda *a, **k: contextlib.nullcontext())
    if fault == "loss perturbed":
        real = simcse.simcse_loss
        monkeypatch.setattr(simcse, "simcse_loss", lambda *a, **k: real(*a, **k) * (
            1.5 if torch.is_autocast_enabled("cpu") else 1.0))
    code = doctor_module.doctor_command(bench=True, tiny=True, json_path=str(tmp_path / "bench.json"),
                                        data_dir=str(shared_data_dir), methods="simcse", precisions="fp32,bf16",
                                        steps=4, probe=False)
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAILED")]
    written = json.loads((tmp_path / "bench.json").read_text())
    if fault is None:
        assert (code, failed, written["failed_verdicts"]) == (0, [], [])
    elif fault == "autocast ignored":
        assert code == 1 and failed == ["FAILED precision: simcse bf16: asked for bf16, the step computed in fp32"]
    else:
        assert code == 1 and len(failed) == 1 and failed[0].startswith(
            "FAILED loss: simcse bf16: the mean training loss is ") and failed[0].endswith(" (tolerance 5%)")
    assert written["failed_verdicts"] == [line.removeprefix("FAILED ") for line in failed]


def test_the_device_checks_report_fails_and_names_a_failed_bench_verdict(tmp_path):
    """device_check.sh's report (scripts/device_agreement.py report): a bench part whose verdict failed makes the
    check fail (exit 1) and its table names the verdict."""
    parts = tmp_path / "parts"
    parts.mkdir()
    verdict = "precision: simcse bf16: asked for bf16, the step computed in fp32"
    (parts / "bench.json").write_text(json.dumps({"failed_verdicts": [verdict]}))
    (parts / "status.tsv").write_text("bench\tran\t1\t30\toutside the tolerance\n")
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "device_agreement.py"), "report", "--parts",
                             str(parts), "--out-dir", str(tmp_path / "out"), "--budget", "480", "--elapsed", "100"],
                            capture_output=True, text=True, timeout=scaled(120), env={**os.environ,
                                                                                      "PYTHONPATH": str(REPO)})
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / "device_check.json").read_text())
    assert "bench" in report["failed"] and report["parts"]["bench"]["state"] == "verdict failed"
    assert f"| (a) sweep doctor --bench | verdict failed | 30.0 | {verdict} |" in result.stdout




@pytest.mark.slow  # a training window of 12 steps under the stand-in sync mode
def test_an_item_inside_the_step_fails_the_sync_verdict_and_the_doctor(tmp_path, tiny_model_dir, shared_data_dir,
                                                                      monkeypatch, capsys):
    """The third provoked fault, a `.item()` inside the training step, on the CPU: CUDA's sync debug mode is stood
    in for (a read-back from trainer/ code, or from the provoked loss, raises as CUDA's would once the mode is on),
    the bench's sync check runs a real training window and finds the read inside the step, and `sweep doctor
    --bench` given that run exits 1 with one FAILED line naming it. (On a GPU the device check provokes it for
    real.)"""

    import sweep.commands.doctor as doctor_module
    import trainer.methods.simcse as simcse
    from sweep.commands import gpu_bench

    real_loss = simcse.simcse_loss

    def loss_read_inside_the_step(*args, **kwargs):
        loss = real_loss(*args, **kwargs)
        loss.item()  # the provoked fault: a host read in every step
        return loss

    stand_in_sync_debug_mode(monkeypatch, also=("loss_read_inside_the_step",))
    monkeypatch.setattr(simcse, "simcse_loss", loss_read_inside_the_step)
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                        tmp_path / "cache")
    sync = gpu_bench.sync_check(config, steps=6)
    assert sync.sync_free is False and sync.at_step == 7, sync  # the first step of the window
    assert sync.first_sync.startswith("trainer/train.py:") and "_step(run, ids, mask)" in sync.first_sync

    record = BenchRecord(device="cuda", gpu="stand-in GPU", encoder={"shape": "tiny"}, batch_size=8, max_length=32,
                         steps=6, elapsed_s=1.0, runs=[{"method": "simcse", "precision_asked": "fp32",
                                                        "precision_ran": "fp32", "status": "ok", "sync": sync}])
    monkeypatch.setattr(doctor_module, "run_bench", lambda **kwargs: record)
    monkeypatch.setattr(doctor_module, "environment_checks", lambda data_dir: [])
    code = doctor_module.doctor_command(bench=True, json_path=str(tmp_path / "bench.json"))
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAILED")]
    assert code == 1 and len(failed) == 1 and failed[0].startswith(
        "FAILED sync: simcse fp32: the training step synchronised with the host at "), failed


def test_the_model_check_says_when_the_paper_model_cannot_be_downloaded_here(tmp_path, monkeypatch):
    """bert-base-uncased not cached: a trial would download it, unless HF_HUB_OFFLINE is set or the hub's host
    cannot be reached (a compute node without network), where the checklist says so and how to bring it in."""
    import socket

    from sweep.commands.doctor import environment_checks
    from tests.helpers import free_port
    from trainer import models

    for name in models.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)

    def model_line() -> str:
        models.hub_reachable.cache_clear()
        checks = environment_checks(str(tmp_path / "data"), ray_start=False)
        return next(check for check in checks if "bert-base-uncased" in check.what).line()

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
        assert "not cached yet (downloaded by the first trial" in model_line()
    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", closed)
    line = model_line()
    assert f"(the hub at {closed} cannot be reached from this machine: no downloads)" in line, line
    assert "is not cached and cannot be downloaded here" in line and "hf download bert-base-uncased" in line, line
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    line = model_line()
    assert "(HF_HUB_OFFLINE: no downloads)" in line and "cannot be downloaded here" in line, line
    models.hub_reachable.cache_clear()
