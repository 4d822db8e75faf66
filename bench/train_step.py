"""Training-step speed, measured side by side in one process on the same batches.

    python bench/train_step.py [--steps 20] [--batch-size 64] [--model embedded] [--device cpu]
                               [--methods simcse ...] [--compile off|on|both] [--no-minimal]

1. minimal: a hand-written SimCSE loop (2N rows in one forward, [CLS] -> Linear+Tanh, InfoNCE,
   backward, grad clip, AdamW step) — the floor our loop is compared with;
2. our train() for simcse, mocose (lagged FGSM, K 512, K0 128), gs (M = 3N) and mix.
Each of ours runs `steps` optimiser steps; its time is the loop's own training time (evaluation
excluded); the minimal loop is timed the same way (all steps, batch building included). Prints one JSON line per
method with seconds per step and sentences per second; the ratios of interest are printed
at the end. `--compile both`: each method eager, then with the compiled step (`compile: on`, trainer.compiled):
its steps' time beside the eager one's, and the compile's seconds (at set-up, outside the steps' time).
`--record` adds them to bench/tables/train_step.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import table  # bench/table.py, beside this script
import torch
import torch.nn.functional as F

from trainer.config import RunConfig
from trainer.corpus import load_corpus
from trainer.data import corpus_path, data_dir
from trainer.method_rules import method_names
from trainer.models import load_encoder
from trainer.train import train


def minimal_simcse(model_name: str, steps: int, batch: int, warmup: int, device: str) -> float:
    """Seconds per step of the smallest correct SimCSE loop we could write."""
    torch.manual_seed(0)
    model, tokenizer = load_encoder(model_name, dropout=0.1)
    model.to(device).train()
    dim = model.config.hidden_size
    mlp = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.Tanh()).to(device)
    params = list(model.parameters()) + list(mlp.parameters())
    opt = torch.optim.AdamW(params, lr=3e-5, weight_decay=0.0)
    root = data_dir(None)
    corpus = load_corpus(corpus_path(root, "wiki1m_sample"), tokenizer, 32, None, root / "cache")
    order = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(42)).tolist()
    labels = torch.arange(batch, device=device)
    timed = 0.0
    for step in range(warmup + steps):
        t0 = time.perf_counter()  # batch building is timed, as it is inside train()
        ids, mask = corpus.batch(order[step * batch:(step + 1) * batch], tokenizer.pad_token_id)
        ids, mask = ids.to(device), mask.to(device)
        out = model(input_ids=torch.cat([ids, ids]), attention_mask=torch.cat([mask, mask]))
        z = mlp(out.last_hidden_state[:, 0])
        z = F.normalize(z, dim=-1)
        logits = z[:batch] @ z[batch:].T / 0.05
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if step >= warmup:
            timed += time.perf_counter() - t0
    return timed / steps


def ours(method: str, model_name: str, steps: int, batch: int, device: str, extra: dict, compile: str = "off"
         ) -> dict:
    cfg = {"model": model_name, "method": method, "batch_size": batch, "max_steps": steps, "device": device,
           "data": {"corpus": "wiki1m_sample"}, "compile": compile,
           "eval": {"eval_steps": 10**6, "final_tasks": ["STSBenchmark"], "align_uniform_split": "dev"}, **extra}
    summary = train(RunConfig.from_dict(cfg))
    return {"seconds_per_step": summary.train_seconds / summary.steps,
            "sentences_per_s": summary.sentences_per_s, "compiled": summary.compile["used"],
            "compile_seconds": summary.compile["seconds"], "graphs": summary.compile["graphs"],
            "loss": summary.history[-1]["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=0,
                        help="untimed first steps of the minimal loop (ours times all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--methods", nargs="+", default=list(method_names()),
                        help="registered method names (default: every one, the four built in first)")
    parser.add_argument("--compile", choices=("off", "on", "both"), default="off")
    parser.add_argument("--no-minimal", action="store_true", help="leave out the hand-written loop")
    table.add_record_argument(parser)
    args = parser.parse_args()
    env = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
           "device": args.device, "batch": args.batch_size, "steps": args.steps, "model": args.model}
    results = {}
    recorded = []  # the table's rows (bench/table.py)
    if not args.no_minimal:
        sec = minimal_simcse(args.model, args.steps, args.batch_size, args.warmup, args.device)
        results["minimal_simcse"] = {"seconds_per_step": sec, "sentences_per_s": args.batch_size / sec}
        print(json.dumps({"method": "minimal_simcse", **results["minimal_simcse"], **env}), flush=True)
        recorded.append({"method": "minimal_simcse", "compile": "off", **_table_fields(results["minimal_simcse"], env)})
    extras = {"mocose": {"queue": {"size": 512, "initial_size": 128}, "fgsm": {"eps": 5e-9, "mode": "lagged"},
                         "ema": {"schedule": "constant", "decay": 0.85}}}
    modes = ["off", "on"] if args.compile == "both" else [args.compile]
    for method in args.methods:
        for mode in modes:
            result = ours(method, args.model, args.steps, args.batch_size, args.device, extras.get(method, {}), mode)
            results[method if mode == modes[0] else f"{method} compiled"] = result
            print(json.dumps({"method": method, "compile": mode, **result, **env}), flush=True)
            recorded.append({"method": method, "compile": mode, **_table_fields(result, env)})
        if len(modes) == 2:
            eager, compiled = results[method], results[f"{method} compiled"]
            saved = eager["seconds_per_step"] - compiled["seconds_per_step"]
            even = f"{compiled['compile_seconds'] / saved:.0f} steps" if saved > 0 else "never (no gain per step)"
            ratio = compiled["seconds_per_step"] / eager["seconds_per_step"]
            print(f"{method}: compiled / eager step time {ratio:.3f}; compile {compiled['compile_seconds']} s; "
                  f"earned back after {even}")
    table.record(__file__, recorded, args.record, gpu=torch.cuda.get_device_name(0) if "cuda" in args.device else None)
    if "minimal_simcse" not in results:
        return
    base = results["minimal_simcse"]["seconds_per_step"]
    if "simcse" in results:
        print(f"simcse / minimal step time: {results['simcse']['seconds_per_step'] / base:.3f} (target <= 1.10)")
        if "mocose" in results:
            ratio = results["mocose"]["seconds_per_step"] / results["simcse"]["seconds_per_step"]
            print(f"mocose / simcse step time: {ratio:.3f} (target <= 0.80)")


def _table_fields(result: dict, env: dict) -> dict:
    return {"model": env["model"], "device": env["device"], "batch": env["batch"], "steps": env["steps"],
            "threads": env["threads"], "seconds_per_step": round(result["seconds_per_step"], 4),
            "compile_seconds": result.get("compile_seconds"), "loss": result.get("loss")}


if __name__ == "__main__":
    main()
