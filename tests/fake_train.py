"""A fast stand-in for trainer.train (`SWEEP_TRAIN_FN=tests.fake_train:train`): no model, no data.

Each trial "trains" for $FAKE_TRAIN_STEPS steps of $FAKE_TRAIN_STEP_S seconds, reporting dev_stsb after
each step, and returns a summary (a trainer.summary.Summary, as the trainer does) whose score is a function of the
config (so results can be checked).
A config with optim.lr >= 1 "diverges"; a model path containing "raise" raises; a batch_size of at least
$FAKE_TRAIN_OOM_BATCH (when set) raises torch.OutOfMemoryError, as CUDA does when a batch does not fit.
While the file $FAKE_TRAIN_GATE exists (when set), every trial waits before its first step, so a test can
hold the study in a known state (a trial running, others pending) until it has set the scene. With
$FAKE_TRAIN_GATED_DECAYS set (ema.decay values, comma-separated), the gate holds only the trials of those values.
With $FAKE_TRAIN_BARRIER set to a folder and $FAKE_TRAIN_BARRIER_N to a count, every trial waits before its
first step until that many trials are running at once (each holds a file in the folder while it runs), and
raises when $FAKE_TRAIN_BARRIER_S seconds (default 120) pass first: a test of concurrency that waits for the
condition instead of hoping that fixed-length trials overlap.
The summary records when the trial started and ended (`started_at`, `ended_at`: time.time()), so tests
can read concurrency from the trials themselves, the current `reading` (trainer.readings) and a `provenance`
block (trainer.provenance, its data part empty: no corpus is read), as the trainer's.

    >>> train(RunConfig.from_dict({...}), report=print)   # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from trainer.provenance import provenance
from trainer.readings import READING
from trainer.summary import Summary
from trainer.vocabulary import STS_TASKS, TRANSFER_TASKS


def train(config: Any, report: Any = None) -> Summary:
    steps = int(os.environ.get("FAKE_TRAIN_STEPS", "3"))
    step_s = float(os.environ.get("FAKE_TRAIN_STEP_S", "0.2"))
    started_at = time.time()
    gate = os.environ.get("FAKE_TRAIN_GATE")
    gated = os.environ.get("FAKE_TRAIN_GATED_DECAYS")
    if gated and float((config.to_dict().get("ema") or {}).get("decay") or 0.0) not in map(float, gated.split(",")):
        gate = None
    while gate and os.path.exists(gate):
        time.sleep(0.1)
    barrier = os.environ.get("FAKE_TRAIN_BARRIER")
    marker = Path(barrier) / f"running-{os.getpid()}-{uuid.uuid4().hex}" if barrier else None
    try:
        if marker is not None:
            marker.touch()
            _wait_at_barrier(Path(barrier), int(os.environ["FAKE_TRAIN_BARRIER_N"]),
                             float(os.environ.get("FAKE_TRAIN_BARRIER_S", "120")))
        return Summary.from_json(_train(config, report, steps, step_s, started_at))
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)


def _wait_at_barrier(folder: Path, count: int, timeout_s: float) -> None:
    """Until `count` trials hold a file in `folder` at once (the first to see it leaves a `met` file that lets
    the others through); a RuntimeError naming how many were running when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    met = folder / "met"
    while not met.exists():
        running = len(list(folder.glob("running-*")))
        if running >= count:
            met.touch()
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"fake trainer barrier: {running} of {count} trials were running at once "
                               f"after {timeout_s:.0f} s")
        time.sleep(0.05)


def _train(config: Any, report: Any, steps: int, step_s: float, started_at: float) -> dict[str, Any]:
    data = config.to_dict()
    if "raise" in str(data.get("model")):
        raise RuntimeError("the fake trainer was asked to raise")
    oom_batch = os.environ.get("FAKE_TRAIN_OOM_BATCH")
    if oom_batch and int(data.get("batch_size") or 0) >= int(oom_batch):
        import torch

        time.sleep(step_s)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.79 GiB total "
                                     "capacity; 6.10 GiB already allocated) [fake_train stand-in]")
    lr = float((data.get("optim") or {}).get("lr") or 0.0)
    score = 50.0 + 10.0 * float((data.get("ema") or {}).get("decay") or 0.0) + int(data.get("seed") or 0) / 100
    for step in range(1, steps + 1):
        time.sleep(step_s)
        if report is not None:
            report({"step": step, "loss": 1.0 / step, "dev_stsb": score * step / steps})
    times = {"started_at": started_at, "ended_at": time.time()}
    if lr >= 1.0:
        return {"status": "diverged", "reason": "diverged: loss became nan", "steps": steps, "reading": READING,
                **times}
    # The same fields as the real trainer's summary: the STS tasks eval.final_tasks lists (all seven when it
    # lists none; avg, kept at score - 1, only with all seven, as the trainer), the transfer tasks it lists,
    # alignment and uniformity.
    final_tasks = (data.get("eval") or {}).get("final_tasks") or list(STS_TASKS)
    offsets = dict(zip(STS_TASKS, (-6.0, 5.0, -2.5, 5.5, 2.0, 0.0, -4.0)))
    test = {task: score - 1 + offsets[task] for task in STS_TASKS if task in final_tasks}
    if len(test) == len(STS_TASKS):
        test["avg"] = score - 1
    summary = {"status": "ok", "reason": None, "steps": steps, "reading": READING, "best_step": steps,
               "provenance": provenance("cpu", "fp32", None, None), "best_dev_stsb": score,
               "test": test or None, "test_label": _test_label(test),
               "align": 0.2 + score / 1000, "uniform": -2.0 - score / 1000, "align_uniform_split": "dev", **times}
    transfer = [t for t in final_tasks if t in TRANSFER_TASKS]
    if transfer:
        summary["transfer"] = {task: 80.0 + score / 10 + i for i, task in enumerate(transfer)}
        summary["transfer"]["avg"] = sum(summary["transfer"].values()) / len(transfer)
        summary["transfer_mode"] = (data.get("eval") or {}).get("transfer_mode")
    return summary


def _test_label(test: dict[str, Any]) -> str | None:
    from trainer.evaluation.sts_average import sts_test_label

    return sts_test_label(test)
