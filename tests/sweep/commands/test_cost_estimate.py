"""`sweep run --dry-run`'s cost estimate from the bench record `sweep doctor --bench` keeps per device: a
stand-in record in a temporary SWEEP_BENCH_DIR, the dry run's figures against a hand computation."""

from __future__ import annotations

import json
import re

import pytest

from sweep.commands import cost
from sweep.commands.bench_record import BenchRecord, Sharing
from sweep.commands.dry_run import print_dry_run
from sweep.spec import load_study
from tests.helpers import study_file
from trainer.config import RunConfig
from trainer.provenance import device_description

MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536)  # the embedded model's shape (all-MiniLM-L6-v2)
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def timed_run(method: str, precision: str, step: float, dev: float, final: float, setup: float) -> dict:
    return {"method": method, "precision_asked": precision, "precision_ran": precision, "step_seconds": step,
            "dev_eval_seconds": dev, "final_eval_seconds": final, "setup_seconds": setup}


def write_record(folder, name: str, runs: list[dict], encoder: dict, batch: int = 16, gpu: str | None = None,
                 **fields):
    """A stand-in record, built through the record type the bench writes (an unknown field is refused)."""
    record = BenchRecord(device="cuda" if gpu else "cpu", gpu=gpu, encoder={"shape": "stand-in", **encoder},
                         batch_size=batch, max_length=32, date="2026-11-27T04:00:00Z", runs=runs, **fields)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"checks": [], "problems": 0, "bench": record.to_json()}))


def study(tmp_path, name: str, **top) -> object:
    evaluation = {"eval_steps": 15, "final_tasks": ["STSBenchmark"], "align_uniform_split": "test"}
    spec = {"name": name, "base": {"model": "embedded", "method": "simcse", "batch_size": 32, "max_steps": 40,
                                   "eval": {**top.pop("eval", evaluation)}},
            "parameters": {"optim.lr": [1e-5, 3e-5]}, "seeds": [1, 2], "results_dir": str(tmp_path / "results"),
            **top}
    return load_study(study_file(tmp_path, spec))


def dry_run_text(capsys, spec) -> tuple[list[str], list[str]]:
    """(the `cost:` lines without their label, the trial table's rows)."""
    print_dry_run(spec)
    out = capsys.readouterr().out
    lines = [line[len("cost:"):].strip() for line in out.splitlines() if line.startswith("cost:")]
    return lines, out.split("\n\n", 1)[1].splitlines()


@pytest.fixture
def records(tmp_path, monkeypatch):
    """The records folder (empty); no GPU and one CPU core here, so that no two trials run at once."""
    folder = tmp_path / "bench-records"
    monkeypatch.setenv("SWEEP_BENCH_DIR", str(folder))
    monkeypatch.setattr(cost, "local_gpu_name", lambda: None)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    device_description.cache_clear()  # the one-core machine is this test's alone: not cached for later tests
    yield folder
    device_description.cache_clear()


def test_the_estimate_is_the_steps_and_evaluations_times_the_records_seconds(tmp_path, records, capsys):
    # simcse at precision auto runs fp32 on the CPU: the fp32 run is read, not the fp16 one
    write_record(records, "cpu", [timed_run("simcse", "fp32", 0.5, 4.0, 3.0, 1.0),
                                  timed_run("simcse", "fp16", 9.0, 9.0, 9.0, 9.0)], MINILM)
    lines, table = dry_run_text(capsys, study(tmp_path, "hand"))
    # 40 steps x 0.5 s x (batch 32 / the bench's 16) + ceil(40 / 15) = 3 dev evaluations x 4 s + the final
    # evaluation (STS-B test, as the bench's) 3 s + set-up 1 s
    per_trial = 40 * 0.5 * (32 / 16) + 3 * 4.0 + 3.0 + 1.0
    assert lines[0].startswith(f"on the CPU, from the bench record {records / 'cpu.json'} (2026-11-27; ")
    assert lines[1] == ("per trial 0.0156 device-hours (56 s): 40 steps 40.0 s + 3 STS-B dev evaluations 12.0 s + "
                        "the final evaluation 3.0 s + set-up 1.0 s")
    assert lines[2] == f"study: 4 trials, {4 * per_trial / 3600:.3g} device-hours (3.7 min)"  # 2 lr x 2 seeds
    assert ("note: batch_size 32 against the bench's 16: step time taken as linear in batch size (a first-order "
            "estimate)") in lines
    assert not any("upper bound" in line for line in lines)
    assert re.split(r"\s{2,}", table[0])[-3:] == ["steps", "dev evals", "device-h"]
    assert all(row.split()[-3:] == ["40", "3", f"{per_trial / 3600:.3g}"] for row in table[1:])


def test_an_asha_study_says_its_estimate_is_an_upper_bound(tmp_path, records, capsys):
    write_record(records, "cpu", [timed_run("simcse", "fp32", 0.5, 4.0, 3.0, 1.0)], MINILM)
    lines, _ = dry_run_text(capsys, study(tmp_path, "asha", scheduler={"type": "asha", "grace_period": 1}))
    (total,) = [line for line in lines if line.startswith("study:")]
    assert total.endswith(": an upper bound (the asha scheduler stops trials early)")


def test_without_a_record_one_line_names_the_command_that_makes_one(tmp_path, records, capsys):
    lines, table = dry_run_text(capsys, study(tmp_path, "norecord"))
    assert lines == [f"not estimated: no bench record for the CPU ({records / 'cpu.json'}): `sweep doctor --bench` "
                     "makes one"]
    assert re.split(r"\s{2,}", table[0])[-2:] == ["steps", "dev evals"]  # the planned work, without a record too
    assert all(row.split()[-2:] == ["40", "3"] for row in table[1:])


def test_a_gpu_study_reads_the_local_gpus_record_at_the_precision_auto_resolves_to(tmp_path, records, capsys,
                                                                                   monkeypatch):
    monkeypatch.setattr(cost, "local_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    lines, _ = dry_run_text(capsys, study(tmp_path, "gpu", resources={"cpu": 2, "gpu": 1}))
    assert lines == [f"not estimated: no bench record for NVIDIA H100 80GB HBM3 "
                     f"({records / 'nvidia-h100-80gb-hbm3.json'}): `sweep doctor --bench` makes one"]
    # SimCSE's release trains in fp16 on CUDA: precision auto reads the fp16 run
    write_record(records, "nvidia-h100-80gb-hbm3", [timed_run("simcse", "fp32", 9.0, 9.0, 9.0, 9.0),
                                                    timed_run("simcse", "fp16", 0.1, 2.0, 1.0, 3.0)],
                 MINILM, batch=64, gpu="NVIDIA H100 80GB HBM3")
    lines, _ = dry_run_text(capsys, study(tmp_path, "gpu", resources={"cpu": 2, "gpu": 1}))
    per_trial = 40 * 0.1 * (32 / 64) + 3 * 2.0 + 1.0 + 3.0
    assert lines[0].startswith("on NVIDIA H100 80GB HBM3, from the bench record ")
    assert lines[1].startswith(f"per trial {per_trial / 3600:.3g} device-hours ({per_trial:.0f} s): ")


def test_a_gpu_study_planned_without_a_gpu_reads_the_gpu_records_in_the_folder(tmp_path, records, capsys):
    spec = study(tmp_path, "rented", resources={"cpu": 2, "gpu": 1})
    lines, _ = dry_run_text(capsys, spec)
    assert len(lines) == 1 and lines[0].startswith(f"not estimated: no GPU here and no GPU bench record in {records}")
    assert "run `sweep doctor --bench` on a machine with the GPU" in lines[0]
    write_record(records, "cpu", [timed_run("simcse", "fp32", 0.5, 4.0, 3.0, 1.0)], MINILM)  # not a GPU's
    write_record(records, "nvidia-a100", [timed_run("simcse", "fp16", 0.1, 2.0, 1.0, 3.0)], MINILM, batch=64,
                 gpu="NVIDIA A100")
    lines, _ = dry_run_text(capsys, spec)
    assert lines[0].startswith("on NVIDIA A100, from the bench record ") and len(
        [line for line in lines if line.startswith("on ")]) == 1


def test_a_record_of_another_encoder_scales_by_compute_per_token(tmp_path, records, capsys):
    write_record(records, "cpu", [timed_run("simcse", "fp32", 0.01, 0.1, 0.1, 1.0)], TINY, batch=32)
    lines, _ = dry_run_text(capsys, study(tmp_path, "scaled"))
    size = (6 * (4 * 384**2 + 2 * 384 * 1536)) / (2 * (4 * 32**2 + 2 * 32 * 64))
    per_trial = (40 * 0.01 + 3 * 0.1 + 0.1) * size + 1.0  # the set-up is not scaled
    assert lines[1].startswith(f"per trial {per_trial / 3600:.3g} device-hours")
    assert (f"note: model embedded (6 layers x 384) against the bench's stand-in encoder (2 layers x 32): times "
            f"scaled by compute per token, x{size:.3g}") in lines


def test_a_record_without_the_methods_run_says_which_and_the_command(tmp_path, records, capsys):
    write_record(records, "cpu", [timed_run("mocose", "fp32", 0.5, 4.0, 3.0, 1.0)], MINILM)
    lines, _ = dry_run_text(capsys, study(tmp_path, "missing"))
    assert lines[1] == (f"not estimated: the record {records / 'cpu.json'} has no simcse fp32 run with timings: "
                        "`sweep doctor --bench` measures every method x precision")


def test_the_bench_keeps_the_timings_the_estimate_reads():
    from sweep.commands.gpu_bench import run_timings
    from trainer.summary import Summary

    summary = Summary(status="ok", best_dev_stsb=1.0, sentences_per_s=64.0, train_seconds=5.0, eval_seconds=3.0,
                      final_eval_seconds=1.5, wall_time_s=11.0, history=[{}, {}], steps=20)
    assert run_timings(summary, batch=16) == {"step_seconds": 0.25, "dev_eval_seconds": 1.5,
                                              "final_eval_seconds": 1.5, "setup_seconds": 1.5}
    # with the steady step given (the first step paid first-use costs): 20 x 0.2 s of training, and the second
    # of the first step's excess counts as set-up: 11 - 4 - 3 - 1.5
    assert run_timings(summary, batch=16, step_seconds=0.2) == {"step_seconds": 0.2, "dev_eval_seconds": 1.5,
                                                                "final_eval_seconds": 1.5, "setup_seconds": 2.5}


def test_the_cpu_benchs_size_probe_scales_the_tiny_encoders_times_to_the_studys_model(tmp_path, records, capsys):
    # the study's model (embedded) has the probe's shape: each timing is the tiny run's x the probe's measured
    # ratio, i.e. the probe run's own timing
    probe = {"encoder": {"shape": "MiniLM-L6-sized", **MINILM}, "steps": 10,
             "runs": [timed_run("simcse", "fp32", 0.8, 12.0, 5.0, 1.5)], "skipped": []}
    write_record(records, "cpu", [timed_run("simcse", "fp32", 0.02, 0.5, 0.3, 0.5)], TINY, size_probe=probe)
    lines, table = dry_run_text(capsys, study(tmp_path, "probed"))
    per_trial = 40 * 0.8 * (32 / 16) + 3 * 12.0 + 5.0 + 1.5
    assert lines[1] == (f"per trial {per_trial / 3600:.3g} device-hours ({per_trial:.0f} s): 40 steps 64.0 s "
                        "+ 3 STS-B dev evaluations 36.0 s + the final evaluation 5.0 s + set-up 1.5 s")
    assert ("note: model embedded (6 layers x 384) against the bench's stand-in encoder (2 layers x 32): scaled by "
            "the bench's simcse fp32 run on a 6 layers x 384 encoder (a step x40, an evaluation x24)") in lines


def test_the_size_probe_starts_no_run_without_the_time_for_it(tmp_path):
    from sweep.commands.gpu_bench import size_probe

    probe = size_probe(tmp_path, ("simcse", "mocose"), 10, 16, str(tmp_path), lambda: 0.0, lambda text: None)
    assert probe.runs == [] and probe.skipped == ["simcse fp32", "mocose fp32"]
    assert list(tmp_path.iterdir()) == []  # no encoder written for nothing


def test_alignment_and_uniformity_on_stsb_dev_add_one_dev_encoding_to_the_final_evaluation(tmp_path, records,
                                                                                          capsys):
    write_record(records, "cpu", [timed_run("simcse", "fp32", 0.5, 4.0, 3.0, 1.0)], MINILM)
    evaluation = {"eval_steps": 15, "final_tasks": ["STSBenchmark"], "align_uniform_split": "dev"}
    lines, _ = dry_run_text(capsys, study(tmp_path, "audev", eval=evaluation))
    assert "the final evaluation 7.0 s" in lines[1]  # STS-B test 3 s + STS-B dev encoded again 4 s
    evaluation = {"eval_steps": 15, "final_tasks": ["STS12", "STSBenchmark"], "align_uniform_split": "test"}
    lines, _ = dry_run_text(capsys, study(tmp_path, "sts12", eval=evaluation))
    assert f"the final evaluation {3.0 * (3108 + 1379) / 1379:.1f} s" in lines[1]  # scaled by the STS test pairs


def test_trials_sharing_the_device_take_the_benchs_measured_slowdown(tmp_path, records, capsys, monkeypatch):
    # two trials per GPU (resources.gpu 0.5): the bench's two processes sharing the GPU ran 1.5 times one
    # alone's throughput together, so each trial takes 2 / 1.5 times as long
    sharing = {"method": "simcse", "precision": "auto", "steps_timed": 18, "alone_sentences_per_s": 100.0,
               "shared_sentences_per_s": [75.0, 75.0], "aggregate_sentences_per_s": 150.0, "aggregate_vs_alone": 1.5,
               "encoder": "stand-in"}
    write_record(records, "nvidia-a100", [timed_run("simcse", "fp16", 0.1, 2.0, 1.0, 3.0)], MINILM, batch=64,
                 gpu="NVIDIA A100", sharing=sharing)
    monkeypatch.setattr(cost, "local_gpu_name", lambda: "NVIDIA A100")
    lines, _ = dry_run_text(capsys, study(tmp_path, "halves", resources={"cpu": 2, "gpu": 0.5}))
    per_trial = (40 * 0.1 * (32 / 64) + 3 * 2.0 + 1.0 + 3.0) * 2 / 1.5
    assert lines[1].startswith(f"per trial {per_trial / 3600:.3g} device-hours ({per_trial:.0f} s): ")
    assert ("note: 2 trials at once share the GPU: each trial's times x1.33, as the bench's two trials sharing it "
            "ran (x1.5 one alone's throughput together)") in lines
    assert f"note: each trial holds 0.5 GPU (resources.gpu): the study holds {4 * per_trial * 0.5 / 3600:.3g} " \
           "GPU-hours" in lines


def test_a_real_bench_is_written_by_the_doctor_and_read_by_the_estimate(tmp_path, records, capsys, monkeypatch,
                                                                       shared_data_dir):
    """The writer and the reader of the record meet on a real bench: `sweep doctor --bench` (its checklist and the
    sharing check's extra processes left out) writes the CPU's record, and the dry run's estimate reads its
    simcse fp32 timings and shape from that file."""
    from sweep.commands import doctor, gpu_bench

    monkeypatch.setattr(doctor, "environment_checks", lambda data_dir: [])
    monkeypatch.setattr(gpu_bench, "sharing_check", lambda config, encoder: Sharing(
        method="simcse", precision="auto", steps_timed=2, alone_sentences_per_s=1.0,
        shared_sentences_per_s=[0.5, 0.5], aggregate_sentences_per_s=1.0, aggregate_vs_alone=1.0, encoder=encoder))
    assert doctor.doctor_command(bench=True, tiny=True, data_dir=str(shared_data_dir), methods="simcse",
                                 precisions="fp32", steps=4, probe=False) == 0
    written = records / "cpu.json"
    assert f"written: {written}" in capsys.readouterr().out
    found, advice = cost.find_records("cpu", None)
    assert advice is None and [record.path for record in found] == [written]
    run = found[0].run("simcse", "fp32")
    raw = json.loads(written.read_text())["bench"]["runs"][0]  # the file as written, read without the record type
    assert run is not None and [getattr(run, key) for key in cost.RUN_TIMINGS] == [raw[key] for key in cost.RUN_TIMINGS]

    lines, _ = dry_run_text(capsys, study(tmp_path, "real"))
    assert lines[0].startswith(f"on the CPU, from the bench record {written} (")
    assert "tiny encoder (2 layers x 32), batch 16, one thread)" in lines[0]

    def compute(shape):  # per token: layers x (4 h^2 + 2 h x intermediate)
        hidden = shape["hidden_size"]
        return shape["num_hidden_layers"] * (4 * hidden * hidden + 2 * hidden * shape["intermediate_size"])

    factor = compute(MINILM) / compute(raw_shape := json.loads(written.read_text())["bench"]["encoder"])
    assert raw_shape["hidden_size"] == 32 and factor == 648.0  # no size probe: scaled by compute per token
    per_trial = (40 * raw["step_seconds"] * 32 / 16 * factor + 3 * raw["dev_eval_seconds"] * factor
                 + raw["final_eval_seconds"] * factor + raw["setup_seconds"])
    assert lines[1].startswith(f"per trial {per_trial / 3600:.3g} device-hours")



def test_a_compiled_trial_reads_the_compiled_row_whose_set_up_holds_the_compile(records):
    """`compile: on`: the estimate reads the record's compiled row (its set-up includes the compile), not the eager
    one; a record without a compiled row says so and how to measure one."""
    eager = timed_run("simcse", "fp32", 0.5, 4.0, 3.0, 1.0)
    compiled = {**timed_run("simcse", "fp32", 0.25, 4.0, 3.0, 31.0), "compiled": True, "compile_seconds": 30.0}
    config = RunConfig.from_dict({"model": "embedded", "method": "simcse", "batch_size": 16, "max_steps": 40,
                                  "compile": "on", "eval": {"eval_steps": 40, "final_tasks": ["STSBenchmark"]}}
                                 ).resolved().to_dict()
    write_record(records, "cpu", [eager, compiled], MINILM)
    estimate = cost.trial_cost(config, "cpu", BenchRecord.read(records / "cpu.json"))
    assert estimate.parts["train"] == 40 * 0.25 and estimate.parts["setup"] == 31.0
    assert "the step runs compiled: set-up includes the bench's compile (30.0 s)" in estimate.notes
    write_record(records, "cpu", [eager], MINILM)
    estimate = cost.trial_cost(config, "cpu", BenchRecord.read(records / "cpu.json"))
    assert estimate.seconds is None and "no simcse fp32 compiled run" in estimate.why and "--compiled" in estimate.why


def test_a_plugins_method_is_priced_as_the_built_in_method_its_class_extends(tmp_path, records, capsys):
    """The bench measures the built-in methods; DCL (docs/examples/dcl, a SimCSE subclass) takes SimCSE's run."""
    from tests.helpers import REPO

    write_record(records, "cpu", [timed_run("simcse", "fp32", 0.5, 4.0, 3.0, 1.0),
                                  timed_run("mocose", "fp32", 9.0, 9.0, 9.0, 9.0)], MINILM)
    plugin = REPO / "docs" / "examples" / "dcl" / "dcl.py"
    lines, table = dry_run_text(capsys, study(tmp_path, "plugged", plugins=[str(plugin)],
                                              parameters={"method": ["dcl"], "optim.lr": [1e-5, 3e-5]}))
    per_trial = 40 * 0.5 * (32 / 16) + 3 * 4.0 + 3.0 + 1.0  # SimCSE's run, as in the first test
    assert lines[2] == f"study: 4 trials, {4 * per_trial / 3600:.3g} device-hours (3.7 min)"
    assert ("note: dcl is priced as the bench's simcse run, the built-in method its class extends (the bench "
            "measures the built-in methods)") in lines
    assert all(row.split()[-1] == f"{per_trial / 3600:.3g}" for row in table[1:])
