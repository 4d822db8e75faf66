"""Whether this checkout works on the torch of the Python that runs this script: the fast tier, the compiled-step
tests and the quickstart study, each with its exit status, counts and wall time; one row each.

Run it with the Python of an environment holding the torch to check (the project installed there), from the
checkout to check:

    /path/to/venv/bin/python bench/torch_versions.py [--record]

The quickstart runs in a temporary folder (its results are not kept); `SWEEP_DATA_DIR` must hold the data.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table  # noqa: E402  (bench/table.py, beside this script)

from trainer.vocabulary import TrialState  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?)")


def pytest_row(step: str, args: list[str]) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=REPO,
                          capture_output=True, text=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in COUNTS.findall(summary)}
    failed = [line.split(" ")[1] for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return {"step": step, "exit": done.returncode, "passed": counts.get("passed", 0),
            "failed": counts.get("failed", 0) + counts.get("error", 0), "skipped": counts.get("skipped", 0),
            "seconds": round(time.perf_counter() - started, 1), "detail": "; ".join(failed)[:300]}


def quickstart_row() -> dict:
    started = time.perf_counter()
    study = REPO / "studies" / "quickstart.yaml"
    with tempfile.TemporaryDirectory() as folder:
        run = subprocess.run([sys.executable, "-m", "sweep", "run", str(study)], cwd=folder, capture_output=True,
                             text=True)
        analyze = subprocess.run([sys.executable, "-m", "sweep", "analyze", str(study)], cwd=folder,
                                 capture_output=True, text=True)
        trials = Path(folder) / "results" / "quickstart" / "trials.csv"
        rows = list(csv.DictReader(trials.open())) if trials.is_file() else []
        figures = sorted(p.name for p in (Path(folder) / "results" / "quickstart" / "figures").glob("*.png"))
    complete = [row for row in rows if row.get("state") == TrialState.COMPLETE]
    scores = sorted(float(row["STSBenchmark"]) for row in complete if row.get("STSBenchmark"))
    detail = (f"{len(complete)} of {len(rows)} trials COMPLETE; STS-B test {scores[0]:.2f}-{scores[-1]:.2f}; "
              f"figures {', '.join(figures)}" if scores else (run.stderr.strip().splitlines() or [""])[-1][:300])
    return {"step": "quickstart (sweep run, sweep analyze)", "exit": run.returncode or analyze.returncode,
            "passed": len(complete), "failed": len(rows) - len(complete), "skipped": 0,
            "seconds": round(time.perf_counter() - started, 1), "detail": detail}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    table.add_record_argument(parser)
    args = parser.parse_args()
    import torch

    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    rows = [pytest_row("fast tier", ["-m", "not slow"]),
            pytest_row("compiled-step tests", ["-m", "", "tests/trainer/test_compiled.py"]),
            quickstart_row()]
    rows = [{**versions, **row} for row in rows]
    for row in rows:
        print(json.dumps(row))
    table.record(__file__, rows, args.record)
    return 0 if all(row["exit"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
