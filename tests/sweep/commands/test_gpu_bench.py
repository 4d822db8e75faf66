"""sweep.commands.gpu_bench, the bench `sweep doctor --bench` runs: its runs within the budget, the CPU's size
probe and sharing check, the step clock, and the CUDA sync check, whose sync debug mode is stood in for on the CPU
(a flagged read-back raises as CUDA's would)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep.commands.bench_record import BenchRun, Sharing, SizeProbe
from tests.helpers import BENCH_SHARING_STAND_IN as SHARING
from tests.helpers import stand_in_sync_debug_mode


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
    assert probe.encoder == {"shape": "MiniLM-L6-sized", **PROBE} and probe.steps == 2
    assert probe.skipped == [] and [r.method for r in probe.runs] == ["simcse"]
    run = probe.runs[0]
    assert run.precision_asked == "fp32" and run.status == "ok" and run.steps == 2
    # the timings the dry run's estimate reads (sweep.commands.cost.size_factors)
    assert all(getattr(run, key) > 0 for key in ("step_seconds", "dev_eval_seconds", "final_eval_seconds",
                                                 "setup_seconds"))
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
    monkeypatch.setattr(gpu_bench, "measure_run", lambda config, cuda: BenchRun(
        method=config["method"], precision_asked=config["precision"], loss=1.0, precision_ran="fp32"))
    monkeypatch.setattr(gpu_bench, "size_probe", lambda tmp, methods, steps, *rest: SizeProbe(
        encoder={"shape": "MiniLM-L6-sized"}, steps=steps,
        runs=[BenchRun(method="simcse", precision_asked="fp32")] if probed else [], skipped=[]))
    monkeypatch.setattr(gpu_bench, "sharing_check",
                        lambda config, encoder: shared.update(config) or Sharing(**SHARING, encoder=encoder))
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
    assert step == 25 and loop.startswith("tests/sweep/commands/test_gpu_bench.py:")
    assert loop.endswith("mean_loss = sync()")
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
    from sweep.commands import gpu_bench

    mode = stand_in_sync_debug_mode(monkeypatch, every_caller=True, blocking_copies=True)
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                   tmp_path / "cache")
    result = gpu_bench.sync_check(config, steps=6)
    assert mode["now"] == 0  # left off
    warm = 6  # the window: the 6 steps after the first evaluation
    assert result.first_sync.startswith("trainer/train.py:"), result
    if result.sync_free:
        assert result.at_step == warm + 6 and result.steps_per_s > 0
    else:  # on the CPU transformers' own .to(device) calls look like blocking copies to this stand-in
        assert warm < result.at_step <= warm + 6 and result.steps_per_s is None


def test_the_sync_check_window_ends_at_the_next_evaluation(tmp_path, tiny_model_dir, shared_data_dir, monkeypatch):
    """The trainer's own read-backs (.item(), bool() called from trainer/ code) flagged, nothing else (on the
    CPU torch's Adam reads its step count with .item(), which on CUDA stays on the host): the first one after
    the window opens must be the evaluation at its end, so a loop that reads nothing else back is sync-free.
    With an evaluation every 5 steps the check stopped at step 10 of 25 and could never say sync-free."""

    from sweep.commands import gpu_bench

    stand_in_sync_debug_mode(monkeypatch)
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                        tmp_path / "cache")
    result = gpu_bench.sync_check(config, steps=6)
    assert "mean_loss" in result.first_sync.split(" (via ")[0], result
    assert result.sync_free is True and result.at_step == 12 and result.steps_per_s > 0, result


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
    assert result.sync_free is None and result.at_step is None and mode["now"] == 0, result
    assert result.first_sync.startswith("not checked: the run ended at step 6 (collapsed: embeddings collapsed "
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


def test_the_sync_verdict_comes_from_the_trainers_marked_read_not_from_source_text(tmp_path, tiny_model_dir,
                                                                                    shared_data_dir, monkeypatch):
    """The same flagged read-back at the same step is sync-free only while the trainer marks it as its deliberate
    read (trainer.train.deliberate_host_read); with the mark gone the line still reads `mean_loss = ...` and the
    run is not called sync-free."""
    import contextlib

    import trainer.train as train_mod
    from sweep.commands import gpu_bench

    stand_in_sync_debug_mode(monkeypatch)
    config = gpu_bench.bench_run_config(tiny_model_dir, "simcse", "fp32", 6, 8, "cpu", str(shared_data_dir),
                                        tmp_path / "cache")
    marked = gpu_bench.sync_check(config, steps=6)
    monkeypatch.setattr(train_mod, "deliberate_host_read", lambda what: contextlib.nullcontext())
    unmarked = gpu_bench.sync_check(config, steps=6)
    assert marked.sync_free is True and marked.at_step == 12, marked
    assert unmarked.sync_free is False and unmarked.at_step == 12, unmarked
    assert "mean_loss" in unmarked.first_sync, unmarked  # the same line: only the mark differs


def test_a_half_precision_row_runs_without_the_fgsm_its_precision_refuses_and_says_so(monkeypatch):
    """The bench's fallback follows the trainer's typed refusal (PrecisionFloorError), not the words of a message:
    another refusal that names fgsm.eps is raised, and the refused row reruns with eps 0 and a note."""
    from sweep.commands import gpu_bench
    from trainer.errors import ConfigError, PrecisionFloorError

    runs = []

    def refusing(config, cuda):
        runs.append(dict(config["fgsm"]))
        if config["fgsm"]["eps"] == 5e-9:
            raise PrecisionFloorError(5e-9, "bf16", 2.4e-4)
        return BenchRun(method="mocose", precision_asked="bf16", loss=1.0)

    monkeypatch.setattr(gpu_bench, "measure_run", refusing)
    config = {"fgsm": {"eps": 5e-9, "mode": "lagged"}}
    row = gpu_bench.measure_at_precision(config, cuda=False)
    assert runs == [{"eps": 5e-9, "mode": "lagged"}, {"eps": 0.0, "mode": "lagged"}]
    assert config["fgsm"] == {"eps": 0.0, "mode": "lagged"}  # what the row's sync check and compiled run reuse
    assert row == BenchRun(method="mocose", precision_asked="bf16", loss=1.0,
                           note="fgsm.eps 0 (5e-09 is refused in bf16: below its resolution)")

    def other_refusal(config, cuda):
        raise ConfigError("fgsm.eps", ": expected a number >= 0, got -1")

    monkeypatch.setattr(gpu_bench, "measure_run", other_refusal)
    with pytest.raises(ConfigError, match="fgsm.eps"):
        gpu_bench.measure_at_precision({"fgsm": {"eps": -1}}, cuda=False)
