"""The trial's side of a sweep: what runs inside the Ray worker process for one trial.

Owns: the Tune trainable (`run_trial`), which runs the train function ("module:function", by default
trainer.train:train) on the trial's config, sends the trainer's evaluation reports and its summary to
the driver through Tune, and writes the trial's log.txt and summary.json (with `resources`: what the
trial asked for and the GPU ids Ray gave it; the trainer does not import Ray). Also the report keys the
driver reads (STEP_KEY, CURVE_KEY, SUMMARY_KEY, ERROR_KEY).

A worker process may run several trials one after another (Ray Tune's actor reuse): everything a trial
changes in the process (working directory, output redirection) is set again at its start, and the
trainer sets its process-wide state (seeds, grad mode) at the start of every run and undoes its own
thread-count changes (trainer.train._set_up).
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ray import tune

from sweep.spec.text import shorten
from sweep.store import write_json_atomic
from trainer.files import json_safe

# Tune reports results; the trainer's report() keys that become Optuna intermediate values.
STEP_KEY, CURVE_KEY = "step", "dev_stsb"
# The worker's last report: the trial's summary, or the error that ended it.
SUMMARY_KEY, ERROR_KEY = "sweep_summary", "sweep_error"


def run_trial(job: dict[str, Any]) -> None:
    """The Tune trainable: one trainer run in this worker process (fresh, or reused after earlier trials).

    summary.json gains `resources`: what the trial asked for and the GPU ids Ray gave it (the trainer
    does not import Ray). Out of GPU memory ends the trial `failed`, with a reason naming batch_size
    and resources.gpu; any other exception ends it `error`.
    """
    try:
        _run_one(job)
    finally:
        _release_memory()  # outside the trial's frames: a caught exception's traceback holds its model


def _run_one(job: dict[str, Any]) -> None:
    trial_dir = Path(job["trial_dir"])
    trial_dir.mkdir(parents=True, exist_ok=True)
    if os.path.isdir(job["cwd"]):
        os.chdir(job["cwd"])  # relative paths in the spec mean what they meant where `sweep run` ran
    redirect_output(trial_dir / "log.txt")
    entered = time.time()
    resources = trial_resources(job.get("resources") or {})
    print(f"=== trial {job['key']} pid {os.getpid()} host {socket.gethostname()} "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')} t={entered:.3f} gpu_ids={resources['gpu_ids']}", flush=True)

    def report(metrics: dict[str, Any]) -> None:
        tune.report(json_safe(metrics))

    try:
        from trainer.config import RunConfig

        train = import_function(job["train_fn"])
        config = RunConfig.from_dict(job["config"])
        started = time.time()
        print(f"=== train function imported in {started - entered:.2f}s t={started:.3f}", flush=True)
        summary = train(config, report=report)
        ended = time.time()
        print(f"=== train returned after {ended - started:.2f}s t={ended:.3f}", flush=True)
    except Exception as exc:
        traceback.print_exc()
        oom = out_of_memory(exc)
        if oom is not None:
            summary = {"status": "failed", "reason": oom_reason(oom, job), "config": job["config"],
                       "resources": resources}
            write_json_atomic(trial_dir / "summary.json", summary)
            tune.report({SUMMARY_KEY: json_safe(summary)})  # a verdict of its own: `failed`, not `error`
            return
        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        write_json_atomic(trial_dir / "summary.json", {"status": "error", "reason": reason, "config": job["config"],
                                                       "resources": resources})
        tune.report({ERROR_KEY: reason})
        return
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    summary = {**summary, "resources": resources}
    summary.setdefault("config", job["config"])
    write_json_atomic(trial_dir / "summary.json", summary)  # the trainer's own, plus `resources`
    tune.report({SUMMARY_KEY: json_safe(summary)})


def _release_memory() -> None:
    """After a trial: give its tensors back before the worker (when reused) runs the next trial. A failed
    trial's traceback can hold its model; the CUDA caching allocator keeps freed blocks otherwise."""
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def trial_resources(asked: dict[str, Any]) -> dict[str, Any]:
    """What the trial asked for and what Ray gave it: the GPU ids (ray.get_gpu_ids()) and the
    CUDA_VISIBLE_DEVICES Ray set for this worker, and the node's host name."""
    import ray

    try:
        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
    except Exception:  # not inside a Ray worker (e.g. called directly in a test)
        gpu_ids = []
    return {"cpu": asked.get("cpu"), "gpu": asked.get("gpu"), "gpu_ids": gpu_ids,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "host": socket.gethostname()}


def out_of_memory(exc: BaseException) -> BaseException | None:
    """The out-of-GPU-memory error in `exc` or what it was raised from (torch.OutOfMemoryError, which
    torch.cuda.OutOfMemoryError is, or an older torch's RuntimeError "CUDA out of memory"), or None."""
    import torch

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, torch.OutOfMemoryError) or "CUDA out of memory" in str(exc):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def oom_reason(exc: BaseException, job: dict[str, Any]) -> str:
    """One line: out of GPU memory at this batch size and GPU share, and what to change."""
    batch = (job.get("config") or {}).get("batch_size")
    gpu = (job.get("resources") or {}).get("gpu")
    detail = shorten(str(exc).split(". ")[0] if str(exc) else type(exc).__name__, 120)
    share = f"resources.gpu={gpu:g}" if isinstance(gpu, (int, float)) else "resources.gpu unknown"
    return (f"out of GPU memory at batch_size={batch} with {share} ({detail}); lower batch_size, or give each "
            "trial more of a GPU (a larger resources.gpu: fewer trials share one)")


def redirect_output(path: Path) -> None:
    """Send this process's stdout and stderr (Python and C level) to the trial's log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def import_function(path: str) -> Callable[..., Any]:
    module_name, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name or "train")
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"cannot import the train function {path!r}: {exc}") from None
