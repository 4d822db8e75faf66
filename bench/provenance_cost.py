"""What a trial's provenance block (trainer/provenance.py) costs, in a fresh process as a trial's first one pays it.

    python bench/provenance_cost.py [--runs 5] [--data-dir DIR]

Each run is a new Python process that imports trainer.provenance (the import itself is timed apart: the trainer
imports torch anyway) and times each part once, cold, then the whole block once more, warm (what a reused worker
pays for its next trial: the per-process parts are cached). Prints one JSON line per run and the medians;
`--record` adds the medians to bench/tables/provenance_cost.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import table  # bench/table.py, beside this script

ONE_RUN = r"""
import json, sys, time
t0 = time.perf_counter()
import torch  # the trainer has it loaded before the block is built
t1 = time.perf_counter()
from trainer import provenance as p
from trainer.data import data_dir as resolve_data_dir

t2 = time.perf_counter()
data = resolve_data_dir(sys.argv[1] if len(sys.argv) > 1 else None)
corpus = data / "corpus" / "wiki1m_sample.txt"
parts = {}
for name, call in (("code", p.code_state), ("packages", p.package_versions),
                   ("device", lambda: p.device_description("cpu")),
                   ("corpus", lambda: p.corpus_digest(corpus, data, None)),
                   ("evaluation", p.evaluation_digest)):
    start = time.perf_counter(); call(); parts[name] = time.perf_counter() - start
start = time.perf_counter(); p.provenance(torch.device("cpu"), "fp32", corpus, data); warm = time.perf_counter() - start
print(json.dumps({"import_s": round(t2 - t1, 4), **{k: round(v, 4) for k, v in parts.items()},
                  "cold_total_s": round(sum(parts.values()), 4), "warm_block_s": round(warm, 5)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    table.add_record_argument(parser)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    rows = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", ONE_RUN, *([args.data_dir] if args.data_dir else [])],
                             cwd=root, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]))
    median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    print(json.dumps({"median": median, "runs": len(rows)}))
    table.record(__file__, [{"runs": len(rows), **{f"median {key}": value for key, value in median.items()}}],
                 args.record)


if __name__ == "__main__":
    main()
