"""Training speed and memory of a bert-base-shaped encoder by batch size, on one GPU (or, slowly, the CPU).

    python bench/gpu_batches.py [--batches 64,128,256,512] [--methods simcse,mocose] [--precisions bf16,fp32]
                                [--steps 20] [--budget 240] [--json OUT]

Each run is `sweep doctor --bench`'s (sweep.commands.gpu_bench: a random-weight encoder of bert-base-uncased's
shape, the trainer's own loop, evaluations excluded from the timing) at one batch size, method and precision.
Per run it prints the steady steps/s and sentences/s (steps 2 to steps - 1), the peak memory the CUDA caching
allocator handed out (torch.cuda.max_memory_allocated), the projected time of one epoch of wiki1m (1,000,000
sentences) at that rate, and for SimCSE the model FLOPs utilisation against `--peak-tflops` (the bf16 dense peak of
an H100 SXM, about 790 TFLOP/s measured here; an fp32 run's is far lower, so its MFU is against the same bf16 figure
and says how far it is from what the card can do).

The FLOPs of a SimCSE step are counted from the batches the trainer actually built (dynamic padding: each batch is
as wide as its longest sentence, at most 32 tokens): two views of B sentences of width w through L layers of
hidden size h and feed-forward size f, forward 2 x B x L x (8 w h^2 + 4 w h f + 4 w^2 h), and backward twice the
forward (no activation recomputation), so a step is 3 x the forward. The [CLS] head, the loss and the optimiser
are left out (below 1%).
Runs stop being started once the next would end past `--budget` seconds (the longest so far as the guide).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import table  # bench/table.py, beside this script

WIKI1M = 1_000_000  # sentences in one epoch of the papers' corpus


def simcse_step_flops(widths: list[int], batch: int, shape: dict) -> float:
    """Training FLOPs of one SimCSE step, averaged over the batches' widths (module docstring)."""
    h, f, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    forward = [2 * batch * layers * (8 * w * h * h + 4 * w * h * f + 4 * w * w * h) for w in widths]
    return 3 * sum(forward) / len(forward)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="64,128,256,512")
    parser.add_argument("--methods", default="simcse,mocose")
    parser.add_argument("--precisions", default="bf16,fp32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--budget", type=float, default=240.0)
    parser.add_argument("--peak-tflops", type=float, default=790.0)
    parser.add_argument("--json", default=None)
    table.add_record_argument(parser)
    args = parser.parse_args(argv)

    import torch

    import trainer.corpus as corpus_module
    from sweep.commands.gpu_bench import BERT_BASE, bench_run_config, measure_at_precision, write_encoder
    from trainer.data import data_dir

    started = time.monotonic()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    widths: list[int] = []
    batch_of = corpus_module.TokenizedCorpus.batch

    def recording_batch(self, indices, pad_id):  # the width of every batch the trainer builds
        ids, mask = batch_of(self, indices, pad_id)
        widths.append(int(ids.shape[1]))
        return ids, mask

    corpus_module.TokenizedCorpus.batch = recording_batch
    report = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
              "encoder": "bert-base (random weights)", "steps": args.steps, "peak_tflops": args.peak_tflops,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": [], "skipped": []}
    root = str(data_dir(None))
    longest = 0.0
    with tempfile.TemporaryDirectory(prefix="gpu-batches-") as tmp:
        model = write_encoder(Path(tmp) / "encoder", BERT_BASE)
        for batch in (int(b) for b in args.batches.split(",")):
            for method in args.methods.split(","):
                for precision in args.precisions.split(","):
                    name = f"{method} {precision} batch {batch}"
                    if time.monotonic() - started + longest > args.budget:
                        report["skipped"].append(name)
                        continue
                    run_started = time.monotonic()
                    config = bench_run_config(model, method, precision, args.steps, batch, device, root,
                                              Path(tmp) / "cache")
                    widths.clear()
                    try:
                        run = measure_at_precision(config, cuda)  # MoCoSE's half-precision rows: no FGSM
                    except torch.OutOfMemoryError:
                        report["runs"].append({"method": method, "precision": precision, "batch": batch,
                                               "error": "out of memory"})
                        continue
                    timed = widths[1:args.steps - 1]  # the steps the clock timed: 2 .. steps - 1
                    row = {"method": method, "precision": precision, "batch": batch, "status": run.status,
                           "steps_per_s": run.steps_per_s, "sentences_per_s": run.sentences_per_s,
                           "peak_memory_mib": run.peak_memory_mib,
                           "mean_width": round(sum(timed) / len(timed), 2) if timed else None,
                           "wiki1m_epoch_min": (round(WIKI1M / run.sentences_per_s / 60, 1)
                                                if run.sentences_per_s else None)}
                    if method == "simcse" and timed and run.steps_per_s:
                        tflops = simcse_step_flops(timed, batch, BERT_BASE) * run.steps_per_s / 1e12
                        row["model_tflops"] = round(tflops, 1)
                        row["mfu_vs_bf16_peak"] = round(tflops / args.peak_tflops, 4)
                    report["runs"].append(row)
                    print(json.dumps(row), flush=True)
                    longest = max(longest, time.monotonic() - run_started)
    corpus_module.TokenizedCorpus.batch = batch_of
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    if report["skipped"]:
        print(f"skipped (past the {args.budget:g} s budget): {', '.join(report['skipped'])}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    table.record(__file__, report["runs"], args.record, gpu=report["device"] if cuda else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
