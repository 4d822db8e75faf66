"""Time the full seven-task STS evaluation of the embedded model, ours vs SentEval's procedure.

    python bench/eval_speed.py [--data-dir DIR] [--poolers cls_before_pooler avg] [--repeat N]
                               [--batch-size 64] [--compare-hf] [--skip-reference]

Ours: `trainer.evaluation.sts.evaluate_sts` (each distinct sentence once, length-sorted batches, only the
reported splits), with the default CPU forward (`trainer.evaluation.fast_forward`); `--compare-hf` also times it
with the transformers forward (`SentenceEncoder(fast=False)`). `--repeat` runs ours N times and reports
every time and the median (this machine's speed drifts by +-10-15% between minutes).
Reference: SentEval's procedure as SimCSE runs it, re-implemented here for timing and
for a second opinion on the numbers: per task, every split is loaded (STS-B and SICK train/dev/test),
pairs sorted by (len s1, len s2, score), batches of 128 pairs, each side encoded separately (padding
within the batch, no truncation), cosine per pair, Spearman. Both print the seven figures and Avg.
Results go to stdout as JSON lines; `--record` adds them to bench/tables/eval_speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import table  # bench/table.py, beside this script
import torch
from scipy.stats import spearmanr

from trainer.data import data_dir
from trainer.evaluation.encoder import SentenceEncoder
from trainer.evaluation.sts import average, evaluate_sts, format_score, load_task
from trainer.models import load_encoder
from trainer.vocabulary import STS_TASKS


def senteval_procedure(model, tokenizer, pooler: str, root) -> dict[str, float]:
    """SentEval's STSEval.run over all splits, with SimCSE's batcher; returns the reported figures."""
    encoder = SentenceEncoder(model, tokenizer, pooler, "cpu", batch_size=10**9)  # pooling only

    def batcher(sentences):
        batch = tokenizer(list(sentences), return_tensors="pt", padding=True)
        with torch.inference_mode():
            out = model(**batch, output_hidden_states=pooler in ("avg_first_last", "avg_top2"), return_dict=True)
            return encoder.pool(out, batch["attention_mask"]).numpy()

    scores = {}
    for task in STS_TASKS:
        splits = ["test"] if task.startswith("STS1") else ["train", "dev", "test"]
        reported = None
        for split in splits:
            all_sys, all_gold = [], []
            for pairs in load_task(root, task, split):
                rows = sorted(zip(pairs.sent1, pairs.sent2, pairs.gold),
                              key=lambda z: (len(z[0].split()), len(z[1].split()), z[2]))
                for i in range(0, len(rows), 128):
                    chunk = rows[i:i + 128]
                    e1 = batcher([r[0] for r in chunk])
                    e2 = batcher([r[1] for r in chunk])
                    for a, b, r in zip(e1, e2, chunk):
                        a, b = np.nan_to_num(a), np.nan_to_num(b)
                        all_sys.append(np.nan_to_num(np.dot(a, b) / (np.sqrt(np.dot(a, a)) * np.sqrt(np.dot(b, b)))))
                        all_gold.append(r[2])
            if split == "test":
                reported = spearmanr(all_sys, all_gold)[0]
        scores[task] = format_score(reported)
    scores["avg"] = average([scores[t] for t in STS_TASKS])
    return scores


def workload(tokenizer, root) -> dict[str, int]:
    """What the seven tasks cost: distinct sentences and their tokens ([CLS] and [SEP] included)."""
    sentences = [s for task in STS_TASKS for pairs in load_task(root, task, "test") for s in pairs.sent1 + pairs.sent2]
    distinct = list(dict.fromkeys(sentences))
    ids = tokenizer(distinct, return_attention_mask=False, return_token_type_ids=False)["input_ids"]
    return {"sentences": len(sentences), "distinct_sentences": len(distinct), "tokens": sum(map(len, ids))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir")
    parser.add_argument("--poolers", nargs="+", default=["cls_before_pooler", "avg"])
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--compare-hf", action="store_true", help="also time ours with the transformers forward")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    table.add_record_argument(parser)
    args = parser.parse_args()
    root = data_dir(args.data_dir)
    model, tokenizer = load_encoder("embedded")
    model.eval()
    env = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
           "cpu": platform.processor() or platform.machine(), **workload(tokenizer, root)}
    recorded = []
    for pooler in args.poolers:
        line = {"pooler": pooler, "batch_size": args.batch_size, **env}
        for label, fast in [("ours", True)] + ([("ours_hf_forward", False)] if args.compare_hf else []):
            encoder = SentenceEncoder(model, tokenizer, pooler, "cpu", args.batch_size, fast=fast)
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                result = evaluate_sts(encoder.encode, root, align_uniform_split=None)
                times.append(round(time.perf_counter() - t0, 1))
            line[label] = {**result.scores, "avg": result.avg}
            line[f"{label}_seconds"] = float(np.median(times))
            line[f"{label}_all_seconds"] = times
        if args.compare_hf:
            line["hf_forward_max_abs_diff"] = max(
                abs(line["ours"][k] - line["ours_hf_forward"][k]) for k in line["ours"])
        if not args.skip_reference:
            t0 = time.perf_counter()
            ref = senteval_procedure(model, tokenizer, pooler, root)
            line.update(reference_seconds=round(time.perf_counter() - t0, 1), reference=ref,
                        max_abs_diff=max(abs(ref[k] - line["ours"][k]) for k in ref))
        print(json.dumps(line), flush=True)
        recorded.append({"pooler": pooler, "batch_size": args.batch_size, "threads": env["threads"],
                         "avg": line["ours"]["avg"], "seconds": line["ours_seconds"],
                         "reference_seconds": line.get("reference_seconds"),
                         "max_abs_diff": line.get("max_abs_diff")})
    table.record(__file__, recorded, args.record)


if __name__ == "__main__":
    main()
