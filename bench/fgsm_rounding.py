"""What an FGSM step of eps = 5e-9 (MoCoSE Table 9's best) leaves of itself after rounding, per precision.

    python bench/fgsm_rounding.py [--model embedded] [--eps 5e-9]

Takes the word embeddings of a few sentences, adds eps * s for a random sign s per entry (what eq. 1 adds, the
sign being the gradient's), rounds the sum to float32, bf16 and fp16, and prints for each: the mean and range
of the perturbation received per entry in units of eps, the share of entries that received nothing, and the
embeddings' magnitude (the float spacing there decides it). `--record` adds them to bench/tables/fgsm_rounding.md.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import table  # bench/table.py, beside this script
import torch

from trainer.models import load_encoder

SENTENCES = ["a man is playing a guitar .", "two dogs run across the snow", "the stock market fell sharply today",
             "a woman is slicing an onion .", "children are playing in the park near the river"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--eps", type=float, default=5e-9)
    table.add_record_argument(parser)
    args = parser.parse_args()
    encoder, tokenizer = load_encoder(args.model, dropout=0.1)
    ids = tokenizer(SENTENCES, padding=True, return_tensors="pt")["input_ids"]
    x = encoder.get_input_embeddings()(ids).detach().float()
    sign = torch.randint(0, 2, x.shape, generator=torch.Generator().manual_seed(0)).float() * 2 - 1
    rms = float(x.pow(2).mean().sqrt())
    print(json.dumps({"model": args.model, "eps": args.eps, "entries": x.numel(),
                      "median_abs": round(float(x.abs().median()), 4), "rms": round(rms, 4),
                      "float32_spacing_at_rms": float(np.spacing(np.float32(rms)))}))
    rows = []
    for name, dtype in (("float32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        received = ((x + args.eps * sign).to(dtype).float() - x.to(dtype).float()) * sign / args.eps
        values = received.flatten().numpy()
        rows.append({"model": args.model, "eps": args.eps, "precision": name,
                     "received_mean_eps": round(float(values.mean()), 4),
                     "received_min_eps": round(float(values.min()), 3),
                     "received_max_eps": round(float(values.max()), 3),
                     "share_received_nothing": round(float((values == 0).mean()), 4)})
        print(json.dumps(rows[-1]))
    table.record(__file__, rows, args.record)


if __name__ == "__main__":
    main()
