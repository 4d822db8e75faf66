"""What a bench report of sweep.commands.gpu_bench says: its verdicts and the table `sweep doctor --bench` prints.

    failed_verdicts(report) -> [str]  # one line per verdict that failed; [] when every one holds
    bench_table(report) -> str        # the markdown table (with the sharing, size-probe and FAILED lines)
"""

from __future__ import annotations

from typing import Any

from sweep.commands.bench_record import BenchRecord

# A half-precision run's mean training loss this far (relative) from the fp32 run's, same seed and batches, fails
# its verdict (measured on an H100: 0.0006-0.0012 for SimCSE, 0.017 for MoCoSE against fp32 with FGSM on).
LOSS_TOLERANCE = 0.05
# A compiled run's mean loss this far (relative) from the eager run's, same seed and batches, fails its verdict: fp32
# as tests/trainer/test_compiled.py holds it; half precision by LOSS_TOLERANCE, the bound it keeps against fp32.
COMPILED_FP32_TOLERANCE = 1e-5


def failed_verdicts(report: BenchRecord) -> list[str]:
    """The bench's verdicts that failed, one line each: a run that did not end ok, a training step that synchronised
    with the host (CUDA's sync check), a requested precision the step did not compute in (the trainer measures
    it), a half-precision loss further than LOSS_TOLERANCE from fp32's. [] when every verdict holds."""
    failed = []
    for run in report.runs:
        name = f"{run.method} {run.precision_asked}" + (" compiled" if run.compiled else "")
        if run.status not in (None, "ok"):
            failed.append(f"run: {name} ended {run.status}")
        if run.sync is not None and run.sync.sync_free is False:
            failed.append(f"sync: {name}: the training step synchronised with the host at {run.sync.first_sync} "
                          f"(step {run.sync.at_step})")
        if run.precision_ran and run.precision_asked != "auto" and run.precision_ran != run.precision_asked:
            failed.append(f"precision: {name}: asked for {run.precision_asked}, the step computed in "
                          f"{run.precision_ran}")
        apart = run.loss_vs_fp32
        if apart is not None and apart > LOSS_TOLERANCE:
            failed.append(f"loss: {name}: the mean training loss is {apart:.1%} from fp32's (tolerance "
                          f"{LOSS_TOLERANCE:.0%})")
        bound = COMPILED_FP32_TOLERANCE if run.precision_ran == "fp32" else LOSS_TOLERANCE
        if run.compiled and run.loss_vs_eager is not None and run.loss_vs_eager > bound:
            failed.append(f"compiled: {name}: the mean training loss is {run.loss_vs_eager:.2e} from the eager "
                          f"run's (tolerance {bound:g})")
    return failed


def bench_table(report: BenchRecord) -> str:
    """The bench as a markdown table (and the sharing line)."""
    def fmt(value: Any, unit: str = "") -> str:
        return "n/a" if value is None else f"{value:g}{unit}" if isinstance(value, (int, float)) else str(value)

    header = ["method", "precision asked -> ran", "steps/s", "sentences/s", "peak memory", "sync-free steps",
              "loss vs fp32"]
    cells = []
    for run in report.runs:
        sync = run.sync
        free = ("not checked" if sync is None else
                {True: "yes", False: f"no: {sync.first_sync} (step {sync.at_step})", None: sync.first_sync}[
                    sync.sync_free])
        memory = fmt(run.peak_memory_mib, " MiB") if run.peak_memory_mib is not None else "n/a (CPU)"
        agree = "-" if run.precision_asked == "fp32" else fmt(run.loss_vs_fp32)
        name = run.method
        if run.compiled:  # the compiled step's row: its compile, and its loss against the eager row's
            name = f"{run.method} compiled ({fmt(run.compile_seconds, ' s')} compile, {fmt(run.compile_graphs)} graphs)"
            agree = f"{fmt(run.loss_vs_eager)} vs eager"
        ran = str(run.precision_ran) + (f" ({run.note})" if run.note else "")
        cells.append([name, f"{run.precision_asked} -> {ran}", fmt(run.steps_per_s),
                      fmt(run.sentences_per_s), memory, free, agree])
    # a sync column that says the same "not checked" on every row (no GPU) is said once, under the table
    said_once = [5] if cells and len({row[5] for row in cells}) == 1 and cells[0][5].startswith("not ") else []
    keep = [i for i in range(len(header)) if i not in said_once]
    rows = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + " --- |" * len(keep)]
    rows += ["| " + " | ".join(row[i] for i in keep) + " |" for row in cells]
    lines = [f"sweep doctor --bench on {report.gpu or 'the CPU'} ({report.encoder['shape']} encoder, batch "
             f"{report.batch_size}, {report.steps} steps per run, {report.elapsed_s} s)", "", *rows, ""]
    if any(run.all_steps_per_s is not None for run in report.runs):
        lines.append(f"steps/s and sentences/s: steady, steps 2 to {(report.steps or 0) - 1} (the first step, which "
                     "pays the run's first-use costs, counts as set-up)")
    lines += [f"{header[i]}: {cells[0][i]} (every run)" for i in said_once]
    timed = [run for run in report.runs if run.dev_eval_seconds is not None]
    if timed:
        def span(key: str) -> str:
            values = [getattr(run, key) for run in timed if getattr(run, key) is not None]
            low, high = min(values, default=0.0), max(values, default=0.0)
            return f"{low:.2f} s" if low == high else f"{low:.2f}-{high:.2f} s"

        lines.append(f"per run: an STS-B dev evaluation {span('dev_eval_seconds')}, the final evaluation (STS-B "
                     f"test) {span('final_eval_seconds')}, set-up {span('setup_seconds')} (kept in the record for "
                     "`sweep run STUDY --dry-run`'s cost estimate)")
    share = report.sharing
    if share:
        ratio = fmt(share.aggregate_vs_alone)
        lines.append(f"two trials sharing one {report.device.upper()} ({share.method}, precision auto, "
                     f"{share.encoder} encoder, steady steps): {share.aggregate_sentences_per_s:g} sentences/s "
                     f"together ({' + '.join(f'{s:g}' for s in share.shared_sentences_per_s)}) vs "
                     f"{share.alone_sentences_per_s:g} alone: x{ratio}")
    probe = report.size_probe
    if probe and probe.runs:
        steps = ", ".join(f"{run.method} {run.step_seconds:.3g} s" for run in probe.runs)
        first = probe.runs[0]
        lines.append(f"size probe ({probe.encoder['shape']} encoder, fp32, {probe.steps} steps): a step: "
                     f"{steps}; an STS-B dev evaluation {first.dev_eval_seconds:.2f} s, the final evaluation "
                     f"{first.final_eval_seconds:.2f} s ({first.method})")
    skipped = report.skipped + [f"{name} (size probe)" for name in (probe.skipped if probe else [])]
    if skipped:
        lines.append(f"skipped (they would have ended past the {report.budget_s:g} s budget): "
                     f"{', '.join(skipped)}")
    if report.note:
        lines.append(f"NOTE: {report.note}")
    lines += [f"FAILED {verdict}" for verdict in failed_verdicts(report)]
    return "\n".join(lines)
