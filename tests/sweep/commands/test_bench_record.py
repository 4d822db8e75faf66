"""A real bench's record (sweep.commands.bench_record), as `sweep doctor --bench` writes it, read back through every
view: the record type's own reading of the file, a run's timings for the cost estimate, the report's table and
verdicts, and the record written again. The expectations are the file's own numbers (json.load); the bench's runs
are real (a tiny encoder on the CPU), its size probe is left out and its sharing check is a stand-in (two more
processes that bear on nothing read here)."""

from __future__ import annotations

import json

import pytest

from sweep.commands.bench_record import RUN_TIMINGS, BenchRecord, BenchRun, Sharing, SyncVerdict
from sweep.commands.bench_report import bench_table, failed_verdicts


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory, shared_data_dir):
    from sweep.commands import doctor, gpu_bench

    path = tmp_path_factory.mktemp("bench") / "bench.json"
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(doctor, "environment_checks", lambda data_dir: [])
        patch.setattr(gpu_bench, "sharing_check", lambda config, encoder: Sharing(
            method=config["method"], precision=config["precision"], steps_timed=config["max_steps"] - 2,
            alone_sentences_per_s=4.0, shared_sentences_per_s=[2.5, 2.5], aggregate_sentences_per_s=5.0,
            aggregate_vs_alone=1.25, encoder=encoder))
        assert doctor.doctor_command(bench=True, tiny=True, json_path=str(path), data_dir=str(shared_data_dir),
                                     methods="simcse,mocose", precisions="fp32,bf16", steps=4, probe=False) == 0
    finally:
        patch.undo()
    return path


def test_a_real_bench_reads_back_as_written(bench_file):
    raw = json.loads(bench_file.read_text())["bench"]
    record = BenchRecord.read(bench_file)
    assert record.to_json() == raw  # every field the writer wrote, and only those
    assert [(run["method"], run["precision_asked"]) for run in raw["runs"]] == [
        ("simcse", "fp32"), ("simcse", "bf16"), ("mocose", "fp32"), ("mocose", "bf16")]
    assert all(isinstance(run, BenchRun) and isinstance(run.sync, SyncVerdict) for run in record.runs)
    for written in raw["runs"]:
        run = record.run(written["method"], written["precision_asked"])
        assert run is not None and run.timed()  # what the cost estimate reads, with the file's numbers
        assert [getattr(run, key) for key in RUN_TIMINGS] == [written[key] for key in RUN_TIMINGS]
        assert run.status == written["status"] == "ok" and run.steps == written["steps"] == 4
        assert run.precision_ran == written["precision_ran"] and run.device == written["device"] == "cpu"
        # steady steps/s is the inverse of the steady step's seconds (rounded as written)
        assert written["steps_per_s"] == pytest.approx(1 / written["step_seconds"], rel=1e-2)
    bf16 = [run for run in raw["runs"] if run["precision_asked"] == "bf16"]
    fp32 = {run["method"]: run["loss"] for run in raw["runs"] if run["precision_asked"] == "fp32"}
    for run in bf16:  # each half-precision row's loss against its method's fp32 row
        assert run["loss_vs_fp32"] == pytest.approx(abs(run["loss"] - fp32[run["method"]]) / abs(fp32[run["method"]]),
                                                     abs=1e-5)
    assert raw["sharing"]["encoder"] == "tiny" and raw["sharing"]["steps_timed"] == max(4, 3) - 2
    assert raw["size_probe"] is None and raw["gpu_measured"] is False and raw["threads"] == 1


def test_every_view_of_the_bench_gives_the_files_numbers(bench_file):
    raw = json.loads(bench_file.read_text())["bench"]
    record = BenchRecord.read(bench_file)
    assert failed_verdicts(record) == []
    table = bench_table(record)
    for run in raw["runs"]:  # a row's note (MoCoSE's FGSM refused in bf16) beside the precision it ran
        ran = run["precision_ran"] + (f" ({run['note']})" if run["note"] else "")
        assert (f"| {run['method']} | {run['precision_asked']} -> {ran} | {run['steps_per_s']:g} | "
                f"{run['sentences_per_s']:g} |") in table
    assert f"{raw['sharing']['aggregate_sentences_per_s']:g} sentences/s together" in table
    again = BenchRecord.model_validate(record.to_json())  # written again, read again: the same record
    assert again.runs == record.runs and again.to_json() == raw
    with pytest.raises(AttributeError):
        record.get("runs")
