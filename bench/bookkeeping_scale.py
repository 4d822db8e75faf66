"""What the orchestrator's bookkeeping costs at 100, 1,000 and 10,000 finished trials.

    python bench/bookkeeping_scale.py [--sizes 100 1000 10000] [--json] [--baseline REV [--repeats 3]] [--steps S ...]

For each size, a grid study of N `optim.lr` values (one seed, the embedded model, the corpus sample) gets
a results folder written with the project's own writers (sweep.records.store.StudyFolder: study.yaml, each
trial's config.yaml, summary.json and metrics.jsonl, as a finished trial leaves them; no Optuna storage
yet). Then, each as a fresh `sweep` process, timed wall-clock:

    dry-run    sweep run STUDY --dry-run
    record     sweep run STUDY      (Optuna is empty: every trial is recorded from its summary.json, as
                                     after --rebuild-storage or a lost optuna.db; no trial runs)
    status     sweep status STUDY
    resume     sweep run STUDY      (every trial already ended: the plan finds nothing to run)
    analyze    sweep analyze STUDY

No trial runs, so Ray never starts. The numbers include Python's start-up and imports (about 2-4 s on
this machine), printed with the load average, since other processes skew them: each step's wall-clock
seconds and, as `<step>_cpu`, the CPU seconds of its process (user + system), which a busy machine skews less.

`--baseline REV` times another revision of the code in the same run, on the same results folder: a temporary
git worktree of REV (removed at the end) is put on PYTHONPATH instead of this checkout. Each step but
`record` (which only the first run of a folder does) then runs `--repeats` times with each code, alternating
(baseline, this checkout, baseline, ...), and the row gives the medians: `<step>` and `<step>_cpu` for this
checkout, `<step>_base` and `<step>_base_cpu` for REV, and `<step>_x`, REV's CPU seconds over this
checkout's (2.0: this checkout takes half the CPU time). `record` is this checkout's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

import table  # bench/table.py, beside this script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
STEPS = {"dry-run": ["run", "--dry-run"], "record": ["run"], "status": ["status"], "resume": ["run"],
         "analyze": ["analyze"]}


def write_study(folder: Path, size: int, data_dir: Path) -> Path:
    from sweep.records.store import StudyFolder
    from sweep.spec import expand, load_study
    from tests.helpers import study_file
    from trainer.summary import Summary

    spec = {
        "name": f"scale{size}", "description": "bench/bookkeeping_scale.py",
        "base": {"model": "embedded", "method": "mocose", "batch_size": 8, "max_steps": 6,
                 "queue": {"size": 16, "initial_size": 8}, "eval": {"eval_steps": 3, "final_tasks": ["STSBenchmark"]},
                 "data": {"corpus": str(data_dir / "corpus" / "wiki1m_sample.txt"), "data_dir": str(data_dir),
                          "max_sentences": 200}},
        "parameters": {"optim.lr": [round(1e-7 * (i + 1), 12) for i in range(size)]},
        "seeds": [1], "resources": {"cpu": 1}, "results_dir": str(folder / "results"),
    }
    path = study_file(folder, spec)
    study = load_study(path)
    store = StudyFolder(study.study_dir)
    store.write_study_yaml(study)
    for i, trial in enumerate(expand(study)):
        store.write_trial_config(trial)
        score = 70.0 + (i % 97) / 10
        store.write_metrics(trial.key, [{"step": 3, "loss": 0.5, "dev_stsb": score - 1},
                                        {"step": 6, "loss": 0.4, "dev_stsb": score}])
        config = dict(trial.config, output_dir=str(store.trial_dir(trial.key)))
        store.write_summary(trial.key, Summary.from_json({
            "status": "ok", "reason": None, "steps": 6, "best_step": 6, "best_dev_stsb": score,
            "test": {"STSBenchmark": score - 1}, "align": 0.2, "uniform": -2.0,
            "variant": "paper", "precision": "fp32", "mtd": {"formula": trial.mtd}, "config": config,
        }))
    return path


def timed(args: list[str], cwd: Path, code: Path = REPO) -> tuple[float, float, str]:
    """Wall-clock and CPU seconds (user + system, of the `sweep` process) of one command, and its stdout.
    CPU seconds are what the step costs itself; wall-clock also holds the waits of a shared, busy machine.
    `code`: the checkout whose `sweep` runs (on PYTHONPATH)."""
    env = dict(os.environ, PYTHONPATH=str(code), HF_HUB_OFFLINE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        tail = done.stdout[-2000:] + done.stderr[-2000:]
        raise SystemExit(f"sweep {' '.join(args)} exited {done.returncode}:\n{tail}")
    return seconds, cpu, done.stdout


def step(name: str, path: Path, size: int, code: Path = REPO) -> tuple[float, float]:
    """One step (STEPS) of the study at `path` with the code of `code`: its wall-clock and CPU seconds."""
    verb = STEPS[name]
    seconds, cpu, out = timed([verb[0], str(path), *verb[1:]], path.parent, code)
    if name == "resume":
        assert f"{size} already ended" in out, out[-500:]
    return seconds, cpu


def compared(name: str, path: Path, size: int, baseline: Path, repeats: int) -> dict[str, float]:
    """The step timed `repeats` times with the baseline's code and with this checkout's, alternating: the medians
    and the baseline's CPU seconds over this checkout's (module docstring)."""
    runs: dict[Path, list[tuple[float, float]]] = {baseline: [], REPO: []}
    for _ in range(repeats):
        for code in runs:
            runs[code].append(step(name, path, size, code))
    base_s, base_cpu = (statistics.median(column) for column in zip(*runs[baseline]))
    new_s, new_cpu = (statistics.median(column) for column in zip(*runs[REPO]))
    return {name: round(new_s, 2), f"{name}_cpu": round(new_cpu, 2), f"{name}_base": round(base_s, 2),
            f"{name}_base_cpu": round(base_cpu, 2), f"{name}_x": round(base_cpu / new_cpu, 2)}


@contextmanager
def worktree(revision: str, folder: Path) -> Iterator[Path]:
    """A temporary git worktree of `revision` in `folder`, removed afterwards."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), revision], check=True,
                   capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    parser.add_argument("--baseline", metavar="REV", help="also time the git revision REV (module docstring)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each step per code with --baseline")
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS),
                        help="the steps to time (record always runs: the others read what it records)")
    table.add_record_argument(parser)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bookkeeping-") as tmp:
        with worktree(args.baseline, Path(tmp) / "baseline") if args.baseline else nullcontext() as baseline:
            for size in args.sizes:
                folder = Path(tmp) / str(size)
                folder.mkdir()
                start = time.perf_counter()
                path = write_study(folder, size, args.data_dir.resolve())
                row = {"write_s": round(time.perf_counter() - start, 1), "load": os.getloadavg()[0]}
                if baseline:
                    row["baseline"] = args.baseline
                for name in [n for n in STEPS if n in args.steps or n == "record"]:
                    if baseline and name != "record":
                        row.update(compared(name, path, size, baseline, args.repeats))
                    else:
                        seconds, cpu = step(name, path, size)
                        row.update({name: round(seconds, 2), f"{name}_cpu": round(cpu, 2)})
                results[size] = row
                print(f"{size:>6} trials: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    table.record(__file__, [{"trials": size, **row} for size, row in results.items()], args.record)


if __name__ == "__main__":
    main()
