"""The Ray session of one `sweep run`: start a local Ray (or join a cluster), route Ray's own log lines
to results/<study>/ray.log, size how many trials Tune may have pending, and shut Ray down. The private
Ray names it relies on are sweep.run.ray_private's.

Ray is started with `address="local"` (a new instance of our own, even when another Ray runs on this
machine) or joins `--address`; the environment a trial needs (FORWARDED_ENV) reaches the workers through
the runtime_env. Ray's and Tune's messages (resource warnings, "Resume experiment with:
Tuner.restore(...)", which contradicts the resume rule: run the same command again) go to ray.log, not
the terminal.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep.run.ray_private import route_cluster_errors_to_log
from sweep.run.ray_start import RayStartError, ray_start_failure, ray_start_precheck
from sweep.run.reaper import name as process_name
from sweep.run.stopping import (
    StopSignals,
    descendants_of_driver,
    kill_leftovers,
    raised_by_stop,
    reassert_handlers,
)

if TYPE_CHECKING:  # annotations only
    from sweep.spec.search import SearchMethod

# Environment variables a trial needs where it runs (forwarded to the workers through runtime_env).
FORWARDED_ENV = ("SWEEP_DATA_DIR", "SWEEP_STAGING_DIR", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                 "HF_HUB_CACHE")
# Trials a grid keeps pending on an existing cluster beyond what fits now (an autoscaler scales to the demand).
PENDING_CAP = 64


def start_ray(address: str | None, stop: StopSignals, folder_path: Path) -> bool:
    """ray.init for a sweep; True when this call started or joined Ray (False: already initialised).
    A stop signal while Ray starts is recorded in `stop`; our signal handlers are put back afterwards."""
    import ray

    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")  # summary/error reports lack dev_stsb
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # metrics.jsonl is the record
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: Tune prints nothing; Progress does
    # With the auto loggers off, Tune's end-of-run analysis warns that it found no result files.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    env_vars = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
    kwargs: dict[str, Any] = dict(log_to_driver=False, logging_level=logging.WARNING,
                                  configure_logging=False)  # see ray_log_handler
    if env_vars:
        kwargs["runtime_env"] = {"env_vars": env_vars}
    if ray.is_initialized():
        return False
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")  # ours stops the run (no Tuner.restore hint)
    # ray.init(configure_logging=False) starts by clearing the "ray" logger's handlers, so what it logs
    # itself (e.g. "Token authentication is enabled ...") would reach stderr through logging.lastResort.
    problem = ray_start_precheck(address)
    if problem is not None:
        raise RayStartError(problem.line(address))
    handler = ray_log_handler(folder_path)
    saved_last_resort, logging.lastResort = logging.lastResort, handler
    saved_stderr = os.dup(2)
    try:
        # Ray's C++ core logs to the process's stderr (file descriptor 2) while it starts or fails ("Failed to
        # connect to GCS ..."): into ray.log with the rest of Ray's lines; the terminal gets our one line.
        os.dup2(handler.stream.fileno(), 2)
        if address:
            ray.init(address=address, **kwargs)
        else:
            # Worker processes start at most half the cores at a time (the rest for the driver and the trials
            # already running), not all at once (Ray's default): each imports Ray Tune, and started together on
            # few cores they would all be ready late together; staggered, the first trial starts sooner. The
            # raylet reads this from the environment it inherits; yours wins.
            os.environ.setdefault("RAY_worker_maximum_startup_concurrency", str(max(1, (os.cpu_count() or 1) // 2)))
            # No idle workers for the driver's own tasks (Ray starts one per CPU when the driver connects): a
            # sweep has none, and a trial never lands on them (Tune gives each trial actor its own runtime_env),
            # so they would only take CPU from the first trial's start. Ray's setting, read from the environment.
            os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
            # "local": a new instance of our own, even when another Ray runs on this machine
            ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, **kwargs)
    except SystemExit:
        # ray.init's own SIGTERM handlers (installed while it starts) end in sys.exit
        stop.signum = stop.signum or signal.SIGTERM
        return True
    except Exception as exc:  # every way ray.init fails ends in one line naming what is known of the cause
        if raised_by_stop(exc):
            raise
        raise RayStartError(ray_start_failure(exc, address).line(address)) from None
    finally:
        handler.flush()
        os.dup2(saved_stderr, 2)
        os.close(saved_stderr)
        logging.lastResort = saved_last_resort
        stop.install()  # replaces ray.init's SIGTERM handlers and the core worker's crash dump
    ray_logger = logging.getLogger("ray")
    ray_logger.handlers = [handler]
    ray_logger.propagate = False
    route_cluster_errors_to_log(ray_logger)
    stop.ray_processes = {pid: start for pid, start in descendants_of_driver().items()
                          if process_name(pid) in ("gcs_server", "raylet")}
    return True


def ray_log_handler(folder_path: Path) -> logging.Handler:
    """Ray's and Tune's own messages (resource warnings, "Resume experiment with: Tuner.restore(...)",
    which contradicts the resume rule: run the same command again) go to results/<study>/ray.log."""
    handler = logging.FileHandler(folder_path / "ray.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return handler


def shutdown_ray(local: bool, keep: set[int]) -> None:
    """ray.shutdown(), then (for a Ray started here) kill what Ray left, except the pids in `keep`.

    ray.shutdown destroys the driver's core worker first, and its destructor resets SIGTERM to the default
    action at the C level (Ray installs a failure-signal handler for drivers, hard-coded); the rest of
    ray.shutdown (stopping GCS, raylet and agents) then ran with a SIGTERM killing the driver without
    a word (143) where a SIGINT at the same moment was noted (130 and the one line). The handlers are put
    back before each call ray.shutdown's own body makes (a profile hook that looks at the caller only: at
    every call of the whole shutdown the handlers' system calls doubled its time), so the window is only
    what is left of that destructor after the reset (tests/e2e/test_stop.py signals inside ray.shutdown).
    """
    import inspect

    import ray

    if ray.is_initialized():
        shutdown_body = inspect.unwrap(ray.shutdown).__code__

        def reassert_on_call(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_back is not None and frame.f_back.f_code is shutdown_body:
                reassert_handlers()

        previous = sys.getprofile()
        sys.setprofile(reassert_on_call)
        try:
            ray.shutdown()
        finally:
            sys.setprofile(previous)
            reassert_handlers()
    if local:
        kill_leftovers(keep=keep)


def trial_room(resources: dict[str, float], address: str | None, method: str | SearchMethod, remaining: int) -> int:
    """How many trials Tune may have pending or running at once: as many as the cluster's CPUs and GPUs
    hold. Without a limit Tune lets a custom searcher have one trial pending at a time, so trials would
    start one after another however much room there is (and an autoscaler would see one trial's demand).
    On an existing cluster (`--address`) a grid asks for its remaining trials, up to PENDING_CAP, so an
    autoscaler sees the study's demand; tpe asks only for what fits (each ask is a sampler decision): the search
    method's `pending_cap` (sweep.spec.search; `method` the object or its word)."""
    import ray

    from sweep.spec.search import search_method

    total = ray.cluster_resources()
    fits = [int(total.get("CPU", 1.0) // max(resources["cpu"], 1e-9))]
    if resources["gpu"] > 0:
        fits.append(int(total.get("GPU", 0.0) // resources["gpu"]))
    room = max(1, min(fits))
    if address:
        room = max(room, search_method(method).pending_cap(remaining, PENDING_CAP))
    return room
