"""sweep.commands.bench_report: the bench's table and its failed verdicts, from records built here."""

from __future__ import annotations

from sweep.commands.bench_record import BenchRecord


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


def test_a_compiled_row_is_named_with_its_compile_and_fails_when_its_loss_leaves_the_eager_runs():
    from sweep.commands.bench_report import bench_table, failed_verdicts

    eager = {"method": "simcse", "precision_asked": "fp32", "precision_ran": "fp32", "status": "ok", "loss": 2.0,
             "steps_per_s": 20.0, "sync": {"sync_free": True}}
    compiled = {**eager, "steps_per_s": 60.0, "compiled": True, "compile_seconds": 41.5, "compile_graphs": 1,
                "loss_vs_eager": 4e-7}
    record = BenchRecord(device="cuda", encoder={"shape": "tiny"}, batch_size=16, max_length=32, runs=[eager, compiled])
    table = bench_table(record)
    assert "| simcse compiled (41.5 s compile, 1 graphs) | fp32 -> fp32 | 60 |" in table
    assert "| 4e-07 vs eager |" in table
    assert failed_verdicts(record) == []
    apart = BenchRecord(device="cuda", encoder={"shape": "tiny"}, batch_size=16, max_length=32,
                        runs=[eager, {**compiled, "loss_vs_eager": 2e-4}])
    assert failed_verdicts(apart) == [
        "compiled: simcse fp32 compiled: the mean training loss is 2.00e-04 from the eager run's (tolerance 1e-05)"]
