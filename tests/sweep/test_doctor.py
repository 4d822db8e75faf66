"""`sweep doctor`: the checklist, and `--bench --tiny` on the CPU, which must say that no
GPU was measured. The bench's CUDA-only part (sync debug mode) cannot run here; the function that reads where
the first synchronising call came from is checked on a traceback made here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.commands.bench_record import BenchRecord
from tests.deadlines import scaled
from tests.helpers import REPO

# a stand-in for the sharing check's two extra processes, which bear on no verdict
SHARING = {"method": "simcse", "precision": "auto", "steps_timed": 5, "alone_sentences_per_s": 1.0,
           "shared_sentences_per_s": [0.5, 0.5], "aggregate_sentences_per_s": 1.0, "aggregate_vs_alone": 1.0}


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


@pytest.mark.slow
def test_the_size_probe_times_a_minilm_sized_encoder_as_the_main_runs(tmp_path, shared_data_dir):
    import torch

    from sweep.commands.gpu_bench import PROBE, PROBE_FOLDER, size_probe

    said = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as run_bench on the CPU
    try:
        probe = size_probe(tmp_path, ("simcse",), 2, 16, str(shared_data_dir), lambda: 1e9, said.append)
    finally:
        torch.set_num_threads(threads)
    assert probe["encoder"] == {"shape": "MiniLM-L6-sized", **PROBE} and probe["steps"] == 2
    assert probe["skipped"] == [] and [r["method"] for r in probe["runs"]] == ["simcse"]
    run = probe["runs"][0]
    assert run["precision_asked"] == "fp32" and run["status"] == "ok" and run["steps"] == 2
    # the timings the dry run's estimate reads (sweep.commands.cost.size_factors)
    assert all(run[key] > 0 for key in ("step_seconds", "dev_eval_seconds", "final_eval_seconds", "setup_seconds"))
    written = json.loads((tmp_path / PROBE_FOLDER / "config.json").read_text())
    assert (written["hidden_size"], written["num_hidden_layers"]) == (PROBE["hidden_size"], PROBE["num_hidden_layers"])
    assert said == ["bench: simcse fp32 on a MiniLM-L6-sized encoder (size probe) ..."]


@pytest.mark.parametrize("probed", [True, False])
def test_the_cpu_benchs_sharing_check_runs_on_the_probe_encoder_when_there_is_one(monkeypatch, probed,
                                                                                  shared_data_dir):
    """Trials share a CPU as real encoders do, not as the tiny one's per-step overhead does: with a probe run,
    the sharing check trains the probe's encoder for the probe's steps. The timed runs, the probe and the
    sharing check are stand-ins here (the warm-up run is real: a tiny encoder, 2 steps)."""
    from sweep.commands import gpu_bench

    shared = {}
    monkeypatch.setattr(gpu_bench, "measure_run", lambda config, cuda: {"loss": 1.0, "precision_ran": "fp32"})
    monkeypatch.setattr(gpu_bench, "size_probe", lambda tmp, methods, steps, *rest: {
        "encoder": {"shape": "MiniLM-L6-sized"}, "steps": steps,
        "runs": [{"method": "simcse", "precision_asked": "fp32"}] if probed else [], "skipped": []})
    monkeypatch.setattr(gpu_bench, "sharing_check", lambda config: shared.update(config) or SHARING)
    report = gpu_bench.run_bench(tiny=True, methods=("simcse",), precisions=("fp32",), steps=7,
                                 data_dir=str(shared_data_dir), say=lambda text: None)
    model = Path(shared["model"])
    if probed:
        assert model.name == gpu_bench.PROBE_FOLDER and shared["max_steps"] == 7
        assert report.sharing.encoder == "MiniLM-L6-sized"
    else:
        assert model.name != gpu_bench.PROBE_FOLDER and report.sharing.encoder == "tiny"


def test_the_sync_check_names_the_loop_line_that_synchronised():
    from sweep.commands.gpu_bench import SyncWindow

    def sync():
        raise RuntimeError("called a synchronizing CUDA operation")

    def train(sync_at_eval: bool, on_step):  # stands for trainer.train.train: the function it calls is the loop
        return _train_loop(sync_at_eval, on_step)

    def _train_loop(sync_at_eval: bool, on_step):  # the loop: step 24 done (on_step), then a sync in step 25
        on_step(24)
        if sync_at_eval:
            mean_loss = sync()
        else:
            check = sync()  # noqa: F841
        return mean_loss

    sites = {}
    for at_eval in (True, False):
        window = SyncWindow(warm=5, entry=train)
        with pytest.raises(RuntimeError) as raised:
            train(at_eval, window.on_step)
        sites[at_eval] = window.site(raised.value.__traceback__)
    (loop, via), step = sites[True][0].split(" (via "), sites[True][1]
    assert step == 25 and loop.startswith("tests/sweep/test_doctor.py:") and loop.endswith("mean_loss = sync()")
    assert "raise RuntimeError" in via  # the innermost project line, where the call was
    assert sites[False][0].split(" (via ")[0].endswith("check = sync()  # noqa: F841")


def test_the_bench_starts_no_run_that_would_end_past_its_budget(tmp_path):
    from sweep.commands.bench_report import bench_table
    from sweep.commands.gpu_bench import run_bench

    report = run_bench(tiny=True, budget_s=0.0, say=lambda text: None)
    assert report.runs == [] and report.sharing is None
    assert report.skipped == [f"{m} {p}" for m in ("simcse", "mocose", "gs", "mix")
                              for p in ("fp32", "bf16", "fp16")] + ["sharing"]
    assert "skipped (they would have ended past the 0 s budget): simcse fp32" in bench_table(report)
    assert report.size_probe.skipped == [f"{m} fp32" for m in ("simcse", "mocose", "gs", "mix")]


def test_the_bench_without_the_probe_has_no_size_probe_on_the_cpu():
    """scripts/device_check.sh's CPU mode leaves the probe out (the GPU path has none)."""
    from sweep.commands.gpu_bench import run_bench

    report = run_bench(tiny=True, budget_s=0.0, say=lambda text: None, probe=False)
    assert report.device == "cpu" and report.size_probe is None and report.skipped[-1] == "sharing"


def test_the_sync_check_runs_the_trainer_and_stops_at_the_first_flagged_read_back(tmp_path, tiny_model_dir,
                                                                                  shared_data_dir, monkeypatch):
    """The CUDA sync check, on the CPU: a stand-in for sync debug mode "error" flags every read-back of a
    tensor to Python (.item(), bool()) and every blocking copy to the host, which is what synchronises on
    CUDA. The check must run the trainer, stop at the first flagged call after the first evaluation and say
    where it was."""
    import torch

    from sweep.commands import gpu_bench

    mode = {"now": 0}

    def flagged(original):
        def call(self, *args):
            if mode["now"] == "error":
                raise RuntimeError("called a synchronizing CUDA operation")
            return original(self, *args)
        return call

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda value: mode.update(now=value))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.Tensor, "item", flagged(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "__bool__", flagged(torch.Tensor.__bool__))
    to = torch.Tensor.to

    def to_host(self, *args, **kwargs):  # a blocking copy to the host (the best-state snapshot) syncs too
        if mode["now"] == "error" and "cpu" in [str(a) for a in args] and not kwargs.get("non_blocking"):
            raise RuntimeError("called a synchronizing CUDA operation")
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to_host)
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                   tmp_path / "cache")
    result = gpu_bench.sync_check(config, steps=6)
    assert mode["now"] == 0  # left off
    warm = 6  # the window: the 6 steps after the first evaluation
    assert result["first_sync"].startswith("trainer/train.py:"), result
    if result["sync_free"]:
        assert result["at_step"] == warm + 6 and result["steps_per_s"] > 0
    else:  # on the CPU transformers' own .to(device) calls look like blocking copies to this stand-in
        assert warm < result["at_step"] <= warm + 6 and result["steps_per_s"] is None


def test_the_sync_check_window_ends_at_the_next_evaluation(tmp_path, tiny_model_dir, shared_data_dir, monkeypatch):
    """The trainer's own read-backs (.item(), bool() called from trainer/ code) flagged, nothing else (on the
    CPU torch's Adam reads its step count with .item(), which on CUDA stays on the host): the first one after
    the window opens must be the evaluation at its end, so a loop that reads nothing else back is sync-free.
    With an evaluation every 5 steps the check stopped at step 10 of 25 and could never say sync-free."""
    import torch

    from sweep.commands import gpu_bench

    mode = {"now": 0}
    trainer_dir = str(Path(gpu_bench.__file__).resolve().parents[2] / "trainer")

    def flagged(original):
        def call(self, *args):
            if mode["now"] == "error" and sys._getframe(1).f_code.co_filename.startswith(trainer_dir):
                raise RuntimeError("called a synchronizing CUDA operation")
            return original(self, *args)
        return call

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda value: mode.update(now=value))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.Tensor, "item", flagged(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "__bool__", flagged(torch.Tensor.__bool__))
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                        tmp_path / "cache")
    result = gpu_bench.sync_check(config, steps=6)
    assert "mean_loss" in result["first_sync"].split(" (via ")[0], result
    assert result["sync_free"] is True and result["at_step"] == 12 and result["steps_per_s"] > 0, result


def test_a_run_that_ends_at_its_first_evaluation_is_not_called_sync_free_or_flagged(tmp_path, tiny_model_dir,
                                                                                       shared_data_dir, monkeypatch):
    """On an H100 every MoCoSE run of a random bert-base collapsed at its first evaluation: the window never
    opened, and the check said nothing was flagged, as if the evaluation's read-back had gone unseen."""
    import torch

    from sweep.commands import gpu_bench

    mode = {"now": 0}
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda value: mode.update(now=value))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                        tmp_path / "cache")
    config["collapse_threshold"] = 1e-6  # any embedding space counts as collapsed
    result = gpu_bench.sync_check(config, steps=6)
    assert result["sync_free"] is None and result["at_step"] is None and mode["now"] == 0, result
    assert result["first_sync"].startswith("not checked: the run ended at step 6 (collapsed: embeddings collapsed "
                                           "at step 6"), result


def test_the_step_clock_times_the_steps_after_the_first_and_stops_the_run_only_when_asked(monkeypatch):
    from sweep.commands import gpu_bench

    now = iter([10.0, 10.9])  # perf_counter at step 1, then at step 4
    monkeypatch.setattr(gpu_bench.time, "perf_counter", lambda: next(now))
    clock = gpu_bench.StepClock(4, cuda=False, stop=False)
    for step in range(1, 6):  # steps past `last` are not timed
        clock.on_step(step)
    assert clock.seconds == pytest.approx(0.9) and clock.step_seconds == pytest.approx(0.3)  # steps 2, 3, 4
    now = iter([0.0, 2.0])
    stopping = gpu_bench.StepClock(3, cuda=False)
    stopping.on_step(1)
    stopping.on_step(2)
    with pytest.raises(gpu_bench.StepsTimed):
        stopping.on_step(3)
    assert stopping.step_seconds == pytest.approx(1.0)
    assert gpu_bench.StepClock(3, cuda=False).step_seconds is None  # nothing timed yet


def test_the_bench_table_says_an_unchecked_sync_once_not_on_every_row():
    from sweep.commands.bench_report import bench_table

    unchecked = {"sync_free": None, "first_sync": "not checked: no GPU (sync debug mode is CUDA's)"}
    run = {"method": "simcse", "precision_asked": "fp32", "precision_ran": "fp32", "steps_per_s": 1.5,
           "sentences_per_s": 96.0, "peak_memory_mib": None, "sync": unchecked}
    report = {"runs": [run, {**run, "method": "mocose"}], "device": "cpu", "gpu": None, "encoder": {"shape": "tiny"},
              "batch_size": 64, "max_length": 32, "steps": 10, "elapsed_s": 3, "sharing": None, "skipped": [],
              "note": None}
    table = bench_table(BenchRecord.model_validate(report))
    assert table.count("not checked: no GPU") == 1 and "sync-free steps: not checked: no GPU" in table
    assert "| method | precision asked -> ran | steps/s | sentences/s | peak memory | loss vs fp32 |" in table
    checked = [{**run, "sync": {"sync_free": True, "first_sync": None}}, {**run, "sync": unchecked}]
    assert "| sync-free steps |" in bench_table(BenchRecord.model_validate({**report, "runs": checked}))


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
    monkeypatch.setattr(gpu_bench, "sharing_check", lambda config: SHARING)
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


def test_failed_verdicts_read_a_sync_inside_the_step_and_a_failed_run():
    from sweep.commands.bench_report import failed_verdicts

    run = {"method": "mocose", "precision_asked": "bf16", "precision_ran": "bf16", "status": "ok", "loss_vs_fp32": 0.01,
           "sync": {"sync_free": True}}
    def record(*runs):
        return BenchRecord(device="cuda", encoder={"shape": "tiny"}, batch_size=16, max_length=32, runs=runs)

    assert failed_verdicts(record(run)) == []
    synced = {**run, "sync": {"sync_free": False, "first_sync": "trainer/train.py:400: loss.item()", "at_step": 21}}
    assert failed_verdicts(record(synced, {**run, "status": "diverged"})) == [
        "sync: mocose bf16: the training step synchronised with the host at trainer/train.py:400: loss.item() "
        "(step 21)", "run: mocose bf16 ended diverged"]


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


def test_the_sync_verdict_comes_from_the_trainers_marked_read_not_from_source_text(tmp_path, tiny_model_dir,
                                                                                    shared_data_dir, monkeypatch):
    """The same flagged read-back at the same step is sync-free only while the trainer marks it as its deliberate
    read (trainer.train.deliberate_host_read); with the mark gone the line still reads `mean_loss = ...` and the
    run is not called sync-free."""
    import contextlib

    import torch

    import trainer.train as train_mod
    from sweep.commands import gpu_bench

    mode = {"now": 0}
    trainer_dir = str(Path(gpu_bench.__file__).resolve().parents[2] / "trainer")

    def flagged(original):
        def call(self, *args):
            if mode["now"] == "error" and sys._getframe(1).f_code.co_filename.startswith(trainer_dir):
                raise RuntimeError("called a synchronizing CUDA operation")
            return original(self, *args)
        return call

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda value: mode.update(now=value))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.Tensor, "item", flagged(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "__bool__", flagged(torch.Tensor.__bool__))
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                        tmp_path / "cache")
    marked = gpu_bench.sync_check(config, steps=6)
    monkeypatch.setattr(train_mod, "deliberate_host_read", lambda what: contextlib.nullcontext())
    unmarked = gpu_bench.sync_check(config, steps=6)
    assert marked["sync_free"] is True and marked["at_step"] == 12, marked
    assert unmarked["sync_free"] is False and unmarked["at_step"] == 12, unmarked
    assert "mean_loss" in unmarked["first_sync"], unmarked  # the same line: only the mark differs
