"""The trial's side of a sweep: what runs inside the Ray worker process for one trial.

Owns: the Tune trainable (`run_trial`), which runs the train function ("module:function", by default
trainer.train:train) on the trial's config (the trial's sweep.run.job.TrialJob comes as its Tune trial
config), sends the trainer's evaluation reports and its summary to the driver through Tune, and writes
the trial's log.txt and summary.json (with `resources`: what the trial asked for, the GPU ids Ray gave it,
the node's host and address; the trainer does not import Ray). What it reports is keyed as sweep.run.job says.

On a Ray cluster (`sweep run --address`) a trial first has its node checked (sweep.run.node_checks), and a
node that does not see the driver's results folder gets the trial's files through Ray before the verdict
is reported (sweep.run.trial_files): a trial ends only once its files are on the driver.

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
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ray import tune

from sweep.run.job import ERROR_KEY, SUMMARY_KEY, TrialJob
from sweep.run.node_checks import check_this_node
from sweep.run.trial_files import output_place, send_trial_folder
from sweep.text import shorten
from trainer.files import json_safe
from trainer.summary import Summary, ended_summary, write_summary_file
from trainer.vocabulary import ERROR, FAILED, OK


def run_trial(config: dict[str, Any]) -> None:
    """The Tune trainable: one trainer run in this worker process (fresh, or reused after earlier trials).
    `config`: the trial's job as its Tune trial config (sweep.run.job.TrialJob.tune_config).

    summary.json gains `resources`: what the trial asked for and the GPU ids Ray gave it (the trainer
    does not import Ray). Out of GPU memory ends the trial `failed`, with a reason naming batch_size
    and resources.gpu; any other exception ends it `error`.
    """
    try:
        _run_one(TrialJob.from_tune_config(config))
    finally:
        _release_memory()  # outside the trial's frames: a caught exception's traceback holds its model


def _run_one(job: TrialJob) -> None:
    if job.files:
        check_this_node(job)  # a node that joined after the driver's check: checked before its first trial
    out_dir, staged = output_place(job)  # staged: this node does not see the driver's results folder
    out_dir.mkdir(parents=True, exist_ok=True)
    if staged:
        job = replace(job, config={**job.config, "output_dir": str(out_dir)})
    if os.path.isdir(job.cwd):
        os.chdir(job.cwd)  # relative paths in the spec mean what they meant where `sweep run` ran
    redirect_output(out_dir / "log.txt")
    entered = time.time()
    resources = trial_resources(job.cpu, job.gpu)
    print(f"=== trial {job.key} pid {os.getpid()} host {socket.gethostname()} "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')} t={entered:.3f} gpu_ids={resources['gpu_ids']}"
          + (f" staging={out_dir}" if staged else ""), flush=True)
    finish = _TrialVerdict(job, out_dir, staged, resources)

    def report(metrics: dict[str, Any]) -> None:
        tune.report(json_safe(metrics))

    try:
        from trainer.config import RunConfig
        from trainer.methods.plugins import load_checked_plugins

        load_checked_plugins(job.plugins, job.plugin_texts)  # the driver's plugins, before a config names them
        train = import_function(job.train_fn)
        config = RunConfig.from_dict(job.config)
        started = time.time()
        print(f"=== train function imported in {started - entered:.2f}s t={started:.3f}", flush=True)
        summary = train(config, report=report)
        ended = time.time()
        print(f"=== train returned after {ended - started:.2f}s t={ended:.3f}", flush=True)
    except Exception as exc:
        traceback.print_exc()
        oom = out_of_memory(exc)
        if oom is not None:
            summary = ended_summary(FAILED, oom_reason(oom, job), config=job.config)
            finish.report(summary, SUMMARY_KEY)  # a verdict of its own: `failed`, not `error`
            return
        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        finish.report(ended_summary(ERROR, reason, config=job.config), ERROR_KEY)
        return
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if not isinstance(summary, Summary):  # a train function that returns the record's plain data
        summary = Summary.from_json(summary)
    finish.report(summary, SUMMARY_KEY)  # the trainer's own, plus where it ran


class _TrialVerdict:
    """The trial's last step: summary.json written once on this node (`placed`: the record with where it ran),
    the files sent to the driver when the trial wrote to a staging folder (sweep.run.trial_files; the driver
    then writes summary.json with how they travelled), then the verdict reported to the driver. Files that did not
    reach the driver make the verdict an error naming the node: a result whose files live only on a worker node
    does not count (the next `sweep run` runs it again)."""

    def __init__(self, job: TrialJob, out_dir: Path, staged: bool, resources: dict[str, Any]):
        self.job, self.out_dir, self.staged, self.resources = job, out_dir, staged, resources

    def placed(self, summary: Summary) -> Summary:
        """The record with where it ran, in one change: the job's config when the train function recorded none
        (the driver's folder as its output_dir when staged), the Ray node beside the trainer's host name, the
        resources, a failure's reason naming the node (on a cluster), and where the files come from (staged)."""
        changes: dict[str, Any] = {}
        config = summary.config if summary.config is not None else self.job.config
        if config is not None:
            changes["config"] = {**config, "output_dir": self.job.trial_dir} if self.staged else config
        if isinstance(summary.provenance, Mapping):
            node = {**(summary.provenance.get("node") or {}), "ray_node_id": ray_node_id()}
            changes["provenance"] = {**summary.provenance, "node": node}
        changes["resources"] = self.resources
        if self.job.files and summary.status != OK and summary.reason:  # on a cluster a failure says where
            changes["reason"] = f"{summary.reason} (on node {self.resources['host']} ({self.resources.get('node_ip')}))"
        if self.staged:
            changes["files"] = {"from": self.resources["host"], "node_ip": self.resources.get("node_ip")}
        return summary.replace(**changes)

    def report(self, summary: Summary, key: str) -> None:
        summary = self.placed(summary)
        write_summary_file(self.out_dir / "summary.json", summary)
        sys.stdout.flush()
        sys.stderr.flush()
        if self.staged:
            outcome = send_trial_folder(self.job.files, self.job.key, self.out_dir)
            arrived = {"files": {**summary.files, **outcome}}
            if not outcome["arrived"]:
                host = self.resources["host"]
                arrived.update(status=ERROR, reason=f"the trial's files did not reach the driver from {host}: "
                               f"{outcome['problem']}; run the same command to run it again")
                key = SUMMARY_KEY
            summary = summary.replace(**arrived)
        if key == ERROR_KEY:
            tune.report({ERROR_KEY: summary.reason})
        else:
            tune.report({SUMMARY_KEY: summary.to_json()})


def _release_memory() -> None:
    """After a trial: give its tensors back before the worker (when reused) runs the next trial. A failed
    trial's traceback can hold its model; the CUDA caching allocator keeps freed blocks otherwise."""
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def trial_resources(cpu: float, gpu: float) -> dict[str, Any]:
    """What the trial asked for (`cpu`, `gpu`) and what Ray gave it: the GPU ids (ray.get_gpu_ids()) and the
    CUDA_VISIBLE_DEVICES Ray set for this worker, and the node's host name and address."""
    import ray

    try:
        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
    except Exception:  # not inside a Ray worker (e.g. called directly in a test)
        gpu_ids = []
    try:
        node_ip = ray.util.get_node_ip_address()
    except Exception:
        node_ip = None
    return {"cpu": cpu, "gpu": gpu, "gpu_ids": gpu_ids,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "host": socket.gethostname(),
            "node_ip": node_ip}


def ray_node_id() -> str | None:
    """The Ray node this worker runs on (None outside a Ray worker)."""
    import ray

    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # not inside a Ray worker (e.g. called directly in a test)
        return None


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


def oom_reason(exc: BaseException, job: TrialJob) -> str:
    """One line: out of GPU memory at this batch size and GPU share, and what to change."""
    batch = job.config.get("batch_size")
    detail = shorten(str(exc).split(". ")[0] if str(exc) else type(exc).__name__, 120)
    return (f"out of GPU memory at batch_size={batch} with resources.gpu={job.gpu:g} ({detail}); lower batch_size, "
            "or give each trial more of a GPU (a larger resources.gpu: fewer trials share one)")


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
