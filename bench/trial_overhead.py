"""What the orchestrator adds on top of the trials: 200 fake trials at `resources: {cpu: 0.25}`.

    python bench/trial_overhead.py [--trials 200] [--step-s 1.0] [--reuse on|off|both] [--json]

A grid study of `--trials` learning rates runs through `sweep run` (a fresh process, local Ray, as a user
runs it) with the fake trainer (`SWEEP_TRAIN_FN=tests.fake_train:train`: one step of `--step-s` seconds,
no model), each trial asking for a quarter CPU, so 4 x the machine's cores run at once. Read from the
trials' own records (summary.json's started_at / ended_at, written by the fake trainer) and the clock:

    wall         `sweep run` start to its exit (imports, Ray start, every trial, the summary, Ray shutdown)
    work         the trials' own seconds, sum of (ended_at - started_at)
    at once      the most trials running at the same moment
    overhead     per trial: (wall - work / at once) / trials
    first trial  `sweep run` start to the first trial's started_at

`--reuse` runs the study with worker reuse on (the default: `reuse_workers: true`), off (a fresh worker
process per trial), or both, one after the other. `--bare` adds, after each of those, the same trials in plain
Ray Tune (a script with no sweep code: `ray.init`, a function trainable that records its start and sleeps
`--step-s`, Ray's defaults): the machine's own Ray start-up, against which the first trial is read, since
a 2-core machine's speed drifts by a third from hour to hour. `--runs` repeats all of it, with `--rest`
seconds of idle before each run. Targets on a quiet 2-core machine: overhead <= 0.25 s per
trial, first trial <= 10 s. The load average is printed: other processes skew every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import table  # bench/table.py, beside this script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.helpers

from trainer.summary import read_summary_file  # noqa: E402  (after the path set-up above)


def write_study(folder: Path, name: str, trials: int, reuse: bool, data_dir: Path) -> Path:
    from tests.helpers import study_file

    spec = {
        "name": name, "description": "bench/trial_overhead.py",
        "base": {"model": "embedded", "method": "simcse", "batch_size": 8, "max_steps": 1,
                 "eval": {"eval_steps": 1, "final_tasks": ["STSBenchmark"]},
                 "data": {"corpus": str(data_dir / "corpus" / "wiki1m_sample.txt"), "data_dir": str(data_dir),
                          "max_sentences": 200}},
        "parameters": {"optim.lr": [round(1e-6 * (i + 1), 12) for i in range(trials)]},
        "seeds": [1], "resources": {"cpu": 0.25}, "reuse_workers": reuse, "keep_weights": "none",
        "results_dir": str(folder / "results"),
    }
    return study_file(folder, spec)


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = best = 0
    for _, change in events:
        running += change
        best = max(best, running)
    return best


BARE_TUNE = """
import json, os, sys, time
import ray
from ray import tune


trials, step_s, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]

def trainable(config):
    started = time.time()
    time.sleep(step_s)
    with open(os.path.join(out, f"{config['lr']!r}.json"), "w") as f:
        json.dump([started, time.time(), os.getpid()], f)

ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
tune.Tuner(tune.with_resources(trainable, {"cpu": 0.25}),
           param_space={"lr": tune.grid_search([1e-6 * (i + 1) for i in range(trials)])},
           tune_config=tune.TuneConfig(reuse_actors=True),
           run_config=tune.RunConfig(storage_path=os.path.join(out, "tune"), verbose=0)).fit()
"""


def run_bare_tune(folder: Path, trials: int, step_s: float) -> dict:
    """The same trials in plain Ray Tune, no sweep code: what Ray itself costs on this machine right now."""
    out = Path(tempfile.mkdtemp(prefix="bare-tune-", dir=folder))
    load_before = os.getloadavg()
    started = time.time()
    done = subprocess.run([sys.executable, "-c", BARE_TUNE, str(trials), str(step_s), str(out)], cwd=folder,
                          capture_output=True, text=True, check=False)
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"bare Ray Tune exited {done.returncode}:\n{done.stderr[-2000:]}")
    records = [json.loads(p.read_text()) for p in out.glob("*.json")]
    intervals = [(start, end) for start, end, _ in records]
    work = sum(end - start for start, end in intervals)
    at_once = most_at_once(intervals)
    return {
        "reuse_workers": "bare Ray Tune", "trials": len(intervals), "step_s": step_s, "wall_s": round(wall, 1),
        "work_s": round(work, 1), "at_once": at_once, "worker_processes": len({pid for *_, pid in records}),
        "overhead_per_trial_s": round((wall - work / at_once) / len(intervals), 3),
        "first_trial_after_s": round(min(start for start, _ in intervals) - started, 1),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def run_once(folder: Path, trials: int, step_s: float, reuse: bool, data_dir: Path) -> dict:
    name = f"overhead_{'reuse' if reuse else 'fresh'}"
    path = write_study(folder, name, trials, reuse, data_dir)
    env = dict(os.environ, PYTHONPATH=str(REPO), SWEEP_TRAIN_FN="tests.fake_train:train", FAKE_TRAIN_STEPS="1",
               FAKE_TRAIN_STEP_S=str(step_s), SWEEP_DATA_DIR=str(data_dir))
    load_before = os.getloadavg()
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "sweep", "run", str(path)], cwd=folder, env=env,
                          capture_output=True, text=True, check=False)
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"sweep run exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    intervals, pids = [], set()
    for trial_dir in (folder / "results" / name / "trials").iterdir():
        summary, _ = read_summary_file(trial_dir / "summary.json")
        intervals.append((summary.started_at, summary.ended_at))
        pids.add((trial_dir / "log.txt").read_text().split()[4])  # "=== trial KEY pid PID ..."
    work = sum(end - start for start, end in intervals)
    at_once = most_at_once(intervals)
    return {
        "reuse_workers": reuse, "trials": len(intervals), "step_s": step_s, "wall_s": round(wall, 1),
        "work_s": round(work, 1), "at_once": at_once, "worker_processes": len(pids),
        "overhead_per_trial_s": round((wall - work / at_once) / len(intervals), 3),
        "first_trial_after_s": round(min(start for start, _ in intervals) - started, 1),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--step-s", type=float, default=1.0, help="seconds of the fake trainer's one step")
    parser.add_argument("--reuse", choices=("on", "off", "both"), default="both")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--bare", action="store_true", help="also run the same trials in plain Ray Tune")
    parser.add_argument("--runs", type=int, default=1, help="repeat everything this many times")
    parser.add_argument("--rest", type=float, default=0.0, help="seconds of idle before each run")
    parser.add_argument("--json", action="store_true")
    table.add_record_argument(parser)
    args = parser.parse_args()
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.reuse] + (["bare"] if args.bare else [])
    rows = []
    for _ in range(args.runs):
        for mode in modes:
            time.sleep(args.rest)
            with tempfile.TemporaryDirectory(prefix="trial-overhead-") as tmp:
                if mode == "bare":
                    rows.append(run_bare_tune(Path(tmp), args.trials, args.step_s))
                else:
                    rows.append(run_once(Path(tmp), args.trials, args.step_s, mode, args.data_dir.resolve()))
            print(json.dumps(rows[-1]) if args.json else rows[-1], flush=True)
    table.record(__file__, [{key: row.get(key) for key in (
        "reuse_workers", "trials", "wall_s", "work_s", "at_once", "worker_processes", "overhead_per_trial_s",
        "first_trial_after_s")} for row in rows], args.record)
    if not args.json:
        print("\n| worker reuse | trials | wall (s) | work (s) | at once | worker processes | overhead per trial (s) "
              "| first trial after (s) |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            mode = r["reuse_workers"] if isinstance(r["reuse_workers"], str) else "on" if r["reuse_workers"] else "off"
            cells = [mode, r["trials"], r["wall_s"], r["work_s"], r["at_once"],
                     r["worker_processes"], r["overhead_per_trial_s"], r["first_trial_after_s"]]
            print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
