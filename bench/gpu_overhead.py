"""The trainer's SimCSE step against the smallest correct SimCSE loop, steady steps/s, on one GPU.

    python bench/gpu_overhead.py [--shape bert-base] [--batch 64] [--steps 30] [--precisions bf16,fp32]

At the papers' batch (64 sentences of at most 32 tokens) a bert-base step on an H100 is bound by the host: the
GPU waits for Python to issue the next kernel. This separates what the trainer's loop adds (its batching, the
method object, the FGSM and evaluation hooks, the scheduler, the NaN check) from what eager PyTorch and the
transformers BERT cost anyway. Both sides: a random-weight encoder of the same shape, the same tokenised corpus,
[CLS] -> Linear + Tanh, InfoNCE at temperature 0.05, backward, gradient clipping at 1.0, AdamW (fused on CUDA, as
the trainer's), autocast for bf16/fp16; the minimal loop issues every step without reading anything back and
synchronises only at the ends of its timed window (steps 2 to steps - 1), as StepClock times the trainer's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path

import table  # bench/table.py, beside this script


def minimal_steps_per_s(model_dir: Path, steps: int, batch: int, precision: str, device: str, root: str,
                        cache: Path) -> float:
    import torch
    import torch.nn.functional as F

    from trainer.corpus import load_corpus
    from trainer.data import corpus_path
    from trainer.models import load_encoder

    torch.manual_seed(0)
    model, tokenizer = load_encoder(str(model_dir), dropout=0.1)
    model.to(device).train()
    dim = model.config.hidden_size
    mlp = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.Tanh()).to(device)
    params = list(model.parameters()) + list(mlp.parameters())
    opt = torch.optim.AdamW(params, lr=3e-5, fused=device == "cuda" or None)
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = (lambda: torch.autocast(device, dtype=dtype)) if dtype else contextlib.nullcontext
    corpus = load_corpus(corpus_path(Path(root), "wiki1m_sample"), tokenizer, 32, batch * steps, cache)
    order = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(1)).tolist()
    labels = torch.arange(batch, device=device)
    start = None
    for step in range(1, steps):
        ids, mask = corpus.batch(order[(step - 1) * batch: step * batch], tokenizer.pad_token_id)
        ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
        with autocast():
            out = model(input_ids=torch.cat([ids, ids]), attention_mask=torch.cat([mask, mask]))
            z = F.normalize(mlp(out.last_hidden_state[:, 0]).float(), dim=-1)
            loss = F.cross_entropy(z[:batch] @ z[batch:].T / 0.05, labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 1:  # step 1 pays the first-use costs: the window starts after it
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
    if device == "cuda":
        torch.cuda.synchronize()
    return (steps - 2) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("bert-base", "tiny"), default="bert-base")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--precisions", default="bf16,fp32")
    parser.add_argument("--json", default=None)
    table.add_record_argument(parser)
    args = parser.parse_args(argv)

    import torch

    from sweep.commands.gpu_bench import BERT_BASE, TINY, bench_run_config, measure_run, write_encoder
    from trainer.data import data_dir

    device = "cuda" if torch.cuda.is_available() else "cpu"
    root = str(data_dir(None))
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-overhead-") as tmp:
        model = write_encoder(Path(tmp) / "encoder", BERT_BASE if args.shape == "bert-base" else TINY)
        cache = Path(tmp) / "cache"
        minimal_steps_per_s(model, 4, args.batch, "fp32", device, root, cache)  # the process's first use, untimed
        for precision in args.precisions.split(","):
            minimal = minimal_steps_per_s(model, args.steps, args.batch, precision, device, root, cache)
            ours = measure_run(bench_run_config(model, "simcse", precision, args.steps, args.batch, device, root,
                                             cache), cuda=device == "cuda")
            row = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "shape": args.shape,
                   "batch": args.batch, "precision": precision, "minimal_steps_per_s": round(minimal, 3),
                   "trainer_steps_per_s": ours.steps_per_s,
                   "trainer_vs_minimal_step_time": round(minimal / ours.steps_per_s, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    table.record(__file__, rows, args.record, gpu=rows[0]["device"] if device == "cuda" and rows else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
