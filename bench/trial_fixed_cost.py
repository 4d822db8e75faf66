"""Fixed cost of one sweep trial, and its share of a 200-step embedded-model trial.

    python bench/trial_fixed_cost.py [--trials 3] [--probe-steps 10] [--data-dir ../shared/data] [--json]

On a 2-core CPU machine it takes about 15-25 minutes (the seven-task final evaluation of the probe
dominates); use --json to record the numbers.

Runs two studies through `sweep.run.runner.run_study` on a local Ray instance (one trial at a time, each
trial given every CPU, as a one-GPU-per-trial sweep would run them), with the embedded model
(all-MiniLM-L6-v2, RunConfig defaults: MoCoSE, batch 64, max length 32):

1. `--trials` minimal trials (1 optimiser step, 1 STS-B dev evaluation, STS-B test only). Per trial:
     schedule  previous trial's end (the driver's Optuna tell) -> the trainable runs in its fresh worker
               process (log.txt "t="): Tune stops the old actor and starts a new one, the process starts,
               imports Ray and sweep.run.runner (Tune calls on_trial_start only once the actor runs)
     imports   -> the train function is imported (torch, transformers, trainer)
     setup     train() start -> first evaluation minus that step and that evaluation: model load,
               corpus load/tokenise (cached), data checks, STS-B dev load
     report    train() end -> driver's tell (final report through Tune, mirror, trials.csv)
   fixed = schedule + imports + setup + report (the part that does not grow with the run; the first
   trial has no previous one, so its schedule time is left out of the median).
2. One probe trial of `--probe-steps` steps with one dev evaluation at the end and the full
   seven-task final evaluation: per-step time, dev-evaluation time, final-evaluation time.

The 200-step trial is estimated, not run: fixed + 200 x step + 2 dev evaluations (MoCoSE's eval_steps
is 100) + the seven-task final evaluation, each measured above. Timings are wall-clock on this
machine; the load average is printed because other processes skew them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import table  # noqa: E402  bench/table.py, beside this script

from trainer.summary import read_summary_file  # noqa: E402  (after the path set-up above)
from trainer.vocabulary import STS_TASKS  # noqa: E402


def study_yaml(folder: Path, name: str, data_dir: Path, seeds: list[int], max_steps: int, eval_steps: int,
               final_tasks: list[str], cpus: int) -> Path:
    from tests.helpers import study_file

    spec = {
        "name": name,
        "description": "bench/trial_fixed_cost.py",
        "base": {
            "model": "embedded", "method": "mocose", "max_steps": max_steps, "device": "cpu",
            "eval": {"eval_steps": eval_steps, "final_tasks": final_tasks},
            "data": {"corpus": str(data_dir / "corpus" / "wiki1m_sample.txt"), "data_dir": str(data_dir),
                     "cache_dir": str(folder / "token-cache")},
        },
        "parameters": {"dropout": [0.1]},
        "seeds": seeds,
        "resources": {"cpu": cpus, "gpu": 0},
        "results_dir": str(folder / "results"),
    }
    return study_file(folder, spec)


def run(path: Path) -> tuple[list, Path]:
    import optuna

    from sweep.run.runner import run_study
    from sweep.spec import load_study

    spec = load_study(path)
    code = run_study(spec, max_concurrent=1)
    if code != 0:
        raise SystemExit(f"the sweep ended with exit code {code}")
    study_dir = Path(spec.study_dir)
    trials = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{study_dir / 'optuna.db'}").get_trials()
    return sorted(trials, key=lambda t: t.datetime_start), study_dir


def log_times(log: Path) -> dict[str, float]:
    text = log.read_text()
    stamps = [float(x) for x in re.findall(r"t=(\d+\.\d+)", text)]
    return {"entered": stamps[-3], "train_start": stamps[-2], "train_end": stamps[-1]}


def epoch(moment: datetime) -> float:
    return moment.timestamp()  # Optuna stores naive local datetimes; timestamp() reads them as local


def measure_overhead(trials: list, study_dir: Path) -> list[dict[str, float]]:
    rows = []
    for i, trial in enumerate(trials):
        key = trial.user_attrs["key"]
        folder = study_dir / "trials" / key
        times = log_times(folder / "log.txt")
        summary, _ = read_summary_file(folder / "summary.json")
        first_eval = json.loads((folder / "metrics.jsonl").read_text().splitlines()[0])
        start, end = epoch(trial.datetime_start), epoch(trial.datetime_complete)
        row = {
            "schedule": times["entered"] - epoch(trials[i - 1].datetime_complete) if i else float("nan"),
            "imports": times["train_start"] - times["entered"],
            "setup": first_eval["elapsed_s"] - summary.train_seconds - summary.eval_seconds,
            "step": summary.train_seconds,
            "dev_eval": summary.eval_seconds,
            "final_eval": summary.wall_time_s - first_eval["elapsed_s"],
            "report": end - times["train_end"],
            "trial_total": end - start,
        }
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3, help="minimal trials to time (default 3)")
    parser.add_argument("--probe-steps", type=int, default=10, help="steps of the per-step probe trial (default 10)")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    table.add_record_argument(parser)
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="trial-overhead-") as tmp:
        folder = Path(tmp)
        began = time.monotonic()
        minimal, minimal_dir = run(study_yaml(folder, "overhead", args.data_dir, list(range(1, args.trials + 1)),
                                              1, 1, ["STSBenchmark"], cpus))
        probe, probe_dir = run(study_yaml(folder, "probe", args.data_dir, [1], args.probe_steps, args.probe_steps,
                                          list(STS_TASKS), cpus))
        elapsed = time.monotonic() - began
        rows = measure_overhead(minimal, minimal_dir)
        probe_row = measure_overhead(probe, probe_dir)[0]

    def median(name: str, data: list[dict[str, float]] = rows) -> float:
        values = [r[name] for r in data if r[name] == r[name]]  # drop NaN (the first trial has no gap)
        return statistics.median(values) if values else float("nan")

    parts = {name: median(name) for name in ("schedule", "imports", "setup", "report")}
    fixed = sum(parts.values())
    per_step = probe_row["step"] / args.probe_steps
    dev_eval = probe_row["dev_eval"]
    final_eval = probe_row["final_eval"]
    trial_200 = fixed + 200 * per_step + 2 * dev_eval + final_eval
    result = {
        "machine": {"cpus": cpus, "loadavg_before": [round(x, 2) for x in load_before],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
        "fixed_cost_s": round(fixed, 2),
        "fixed_cost_parts_s": {k: round(v, 2) for k, v in parts.items()},
        "per_step_s": round(per_step, 3),
        "dev_eval_s": round(dev_eval, 2),
        "final_eval_7_tasks_s": round(final_eval, 2),
        "trial_200_steps_estimate_s": round(trial_200, 1),
        "fixed_share_of_200_step_trial": round(fixed / trial_200, 3),
        "minimal_trials": [{k: round(v, 2) if v == v else None for k, v in r.items()} for r in rows],
        "bench_wall_s": round(elapsed, 1),
    }
    table.record(__file__, [{"load_before": round(load_before[0], 2), **{
        key: result[key] for key in ("fixed_cost_s", "per_step_s", "dev_eval_s", "final_eval_7_tasks_s",
                                     "trial_200_steps_estimate_s", "fixed_share_of_200_step_trial")}}], args.record)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"\nmachine: {cpus} CPUs, load average {result['machine']['loadavg_before']} before, "
          f"{result['machine']['loadavg_after']} after")
    print(f"fixed cost per trial: {fixed:.2f} s  (median of {len(rows)} minimal trials: "
          + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()) + ")")
    print(f"embedded model, batch 64: {per_step:.3f} s/step, STS-B dev evaluation {dev_eval:.2f} s, "
          f"seven-task final evaluation {final_eval:.2f} s (probe of {args.probe_steps} steps)")
    print(f"200-step trial (estimate: fixed + 200 steps + 2 dev evaluations + final evaluation): {trial_200:.1f} s; "
          f"fixed cost share {100 * fixed / trial_200:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
