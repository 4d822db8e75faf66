"""`sweep run`: run (or resume) a study through Ray Tune, mirrored live to Optuna and results/<study>/.

    run_study(spec, address=None, max_concurrent=None) -> exit code (README "Exit codes"):
        0 every trial ended with a result (ok, diverged, collapsed, pruned); 1 a trial ended in an
        error or was interrupted; 130/143/129 stopped by SIGINT (Ctrl-C) / SIGTERM / SIGHUP.

One Tune trial = one trainer run in a fresh worker process (`reuse_actors=False`: a new Ray actor,
hence a new process, per trial). The driver is the only writer of the Optuna study and of
trials.csv; workers write only their own trials/<key>/ folder (the trainer's metrics.jsonl and
summary.json, and log.txt with the trial's stdout/stderr).

Resume (no Ray restore; the same command again after Ctrl-C, kill -9 or a crashed node):
- Optuna trials left RUNNING/WAITING by a dead driver become FAIL with reason "interrupted".
- A key is done, and skipped, when Optuna holds a final attempt for it: COMPLETE, PRUNED, or FAIL with
  status diverged/collapsed (a deterministic verdict that a re-run would repeat).
- A key whose summary.json holds a final verdict (ok, diverged, collapsed, pruned) that never reached
  Optuna (the driver died between the two) is recorded from disk, not re-run.
- Every other key (never run, interrupted, or failed with an error) runs (again) as a new Optuna trial;
  the stale attempt stays FAIL. So each key ends final exactly once.
A lock file (flock on results/<study>/.driver.lock) stops two drivers from running one study at once.

Weights (study key `keep_weights`): unless it is `none`, every trial's job asks the trainer to save its
best-dev encoder and tokenizer to trials/<key>/model/; as trials end, the driver deletes the weights of
the trials outside the top k by the study metric and records kept | deleted | none in the trials.csv
column `weights` (summary.json stays as the trainer wrote it).
Curves and trackers (study key `loggers`): Ray Tune's own logger callbacks (TensorBoard, MLflow, W&B),
fed the trainer's evaluation reports and the trial's final scores; see sweep/trackers.py.
Stopping (SIGTERM from Slurm's time limit or `scancel`, SIGINT from Ctrl-C, SIGHUP from a closed
terminal): the driver stops launching trials, asks Tune to stop the running ones (a Tune Stopper), and
after STOP_GRACE_S (or at a second signal) stops waiting; running trials become FAIL "interrupted",
Ray is shut down, leftover Ray processes of a local instance are killed, and the driver prints one
line and exits 128 + the signal number. Ray installs its own SIGTERM handlers in ray.init (sys.exit,
plus the C++ core worker's crash dump); ours are installed again after ray.init, and Tune's SIGINT
handler (which prints a `Tuner.restore` hint) is turned off with TUNE_DISABLE_SIGINT_HANDLER.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ray import tune
from ray.tune.search import Searcher

from sweep.progress import Progress
from sweep.resume import decide, is_final
from sweep.spec import StudySpec, Trial
from sweep.spec.text import shorten
from sweep.store import StudyFolder, TrialsTable, metric_value, weights_state
from sweep.trackers import check_loggers, logger_callbacks
from trainer.errors import UserError
from trainer.files import json_safe

DEFAULT_TRAIN_FN = "trainer.train:train"
# Environment variables a trial needs where it runs (forwarded to the workers through runtime_env).
FORWARDED_ENV = ("SWEEP_DATA_DIR", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE")
# Tune reports results; the trainer's report() keys that become Optuna intermediate values.
STEP_KEY, CURVE_KEY = "step", "dev_stsb"
SUMMARY_KEY, ERROR_KEY = "sweep_summary", "sweep_error"
_MAX_DROPPED_ASKS = 100


# Signals that stop a sweep cleanly; the exit status is 128 + the signal number (the shell's convention).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Seconds the running trials get to stop after the first signal before the driver stops waiting for them.
STOP_GRACE_S = float(os.environ.get("SWEEP_STOP_GRACE_S", "15"))
# Seconds after the grace period before a watchdog thread finishes the stop itself, when the main thread is
# stuck inside Ray (a SIGTERM to the whole process group also kills Ray's GCS, and the driver's core worker
# then blocks for a minute before it aborts).
STUCK_AFTER_S = 10.0
# Trials a grid keeps pending on an existing cluster beyond what fits now (an autoscaler scales to the demand).
PENDING_CAP = 64
# Trainer statuses that are results, not errors: a study with only these exits 0.
RESULT_STATUSES = ("ok", "diverged", "collapsed", "pruned", "dropped", "duplicate")


def run_study(spec: StudySpec, address: str | None = None, max_concurrent: int | None = None,
              *, extend: bool = False, rerun_changed: bool = False, rebuild_storage: bool = False,
              _train_fn: str | None = None) -> int:
    """Run every trial of `spec` that has not ended yet; return 0, or 130 when interrupted (Ctrl-C).

    `address`: an existing Ray cluster ("host:port" or "auto"); None starts Ray on this machine.
    `extend`: accept a spec that differs from the one recorded in results/<name>/ by more than added
    values or seeds (sweep.history); the change is recorded in the study's history.
    `rerun_changed`: also re-run finished trials whose config now resolves differently (a default changed).
    `rebuild_storage`: an unreadable SQLite storage is kept aside and rebuilt from the trials' records.
    `_train_fn` ("module:function", also $SWEEP_TRAIN_FN) replaces trainer.train, for development.
    """
    if max_concurrent is not None and max_concurrent < 1:
        raise UserError("--max-concurrent: expected a positive integer")
    train_fn = _train_fn or os.environ.get("SWEEP_TRAIN_FN") or DEFAULT_TRAIN_FN
    from sweep.history import check_same_study

    change = check_same_study(spec, extend=extend)  # before anything is written
    check_loggers(spec.loggers)  # before Ray starts
    run = _StudyRun(spec, train_fn, rerun_changed=rerun_changed, rebuild_storage=rebuild_storage)
    run.change = change
    if not run.folder.study_yaml.exists():
        # A new study: check every model and data path before its folder exists. A folder left by a
        # refused spec would claim the name, and the corrected spec would be refused as another study.
        from sweep.preflight import preflight_inputs

        preflight_inputs(run.configs_planned())
        run.inputs_checked = True
    try:
        with run.stop.installed(), run.locked():
            return run.execute(address, max_concurrent)
    except Exception as exc:
        problem = _storage_problem(exc, run)
        if problem is None:
            raise
        raise UserError(f"{problem}; what could be written was written: free space or make it writable, then "
                        "run the same command to go on") from None


# errnos of a results folder that cannot take more data: no space, quota, read-only, no permission
_NO_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
_NO_WRITE_DB = ("database or disk is full", "readonly database", "unable to open database file", "disk i/o error")


def _storage_problem(exc: BaseException, run: "_StudyRun") -> str | None:
    """One line naming the path when `exc` (or what it was raised from) is a full disk or a read-only
    folder / database; None for anything else."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _NO_WRITE_ERRNOS:
            path = exc.filename or run.folder.path
            return f"cannot write {path}: {exc.strerror}"
        text = str(exc).lower()
        for needle in _NO_WRITE_DB:
            if needle in text:
                return f"cannot write the Optuna storage {_display_url(run.storage_url)}: {needle}"
        exc = exc.__cause__ or exc.__context__
    return None


# ---- stopping on a signal ----------------------------------------------------------------------------
class _StopNow(BaseException):
    """Raised in the driver's main thread to stop waiting for the trials (second signal, grace over)."""


def _raised_by_stop(exc: BaseException | None) -> bool:
    """Whether `exc` comes from a _StopNow raised by our signal handler inside other code."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, _StopNow):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class _StopSignals:
    """The driver's SIGTERM/SIGINT/SIGHUP handling: the first signal asks for a clean stop (and arms a
    SIGALRM after STOP_GRACE_S), a second one, or the alarm, raises _StopNow.

        stop = _StopSignals()
        with stop.installed():
            ...                      # stop.signum is set once a signal arrived
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._seen = 0  # signals the main thread's handler has seen
        self.on_stuck: Callable[[], None] | None = None  # called by the watchdog when the main thread hangs
        self.done = None  # threading.Event: set when the driver no longer needs the watchdog
        self.ray_processes: dict[int, str] = {}  # pid -> start time of a local Ray's GCS and raylet

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or 0)

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be set from the main thread (e.g. run_study in a thread)
            return
        for sig in (*STOP_SIGNALS, signal.SIGALRM):
            self._previous.setdefault(sig, signal.getsignal(sig))
        self.install()
        # Python's C-level handler writes each signal number to the wakeup fd even while the main thread
        # is blocked in C++ (where no Python handler can run): the watchdog thread reads it there.
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self.done = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(read_fd,), name="sweep-stop-watchdog", daemon=True)
        watchdog.start()
        try:
            yield
        finally:
            self.done.set()
            signal.alarm(0)
            signal.set_wakeup_fd(previous_fd)
            os.close(write_fd)  # ends the watchdog's read
            watchdog.join(timeout=5)
            os.close(read_fd)
            for sig, handler in self._previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _watch(self, read_fd: int) -> None:
        """Wait for a stop signal; if the driver has not finished STOP_GRACE_S + STUCK_AFTER_S later, the
        main thread is stuck in Ray: call on_stuck (which ends the process)."""
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data or self.done.is_set():
                return
            stops = [b for b in data if b in STOP_SIGNALS]
            if stops:
                break
        if self.signum is None:
            self.signum = stops[0]
        from sweep.reaper import alive

        deadline = time.monotonic() + STOP_GRACE_S + STUCK_AFTER_S
        dead_since = None
        while not self.done.wait(0.5):
            # With its GCS or raylet gone (the signal went to the whole process group), the local Ray
            # cannot stop anything any more: do not wait out the grace period.
            if self.ray_processes and not all(alive(pid, start) for pid, start in self.ray_processes.items()):
                dead_since = dead_since or time.monotonic()
            if time.monotonic() > deadline or (dead_since and time.monotonic() - dead_since > 2):
                if self.on_stuck is not None:
                    self.on_stuck()
                return

    def install(self) -> None:
        """(Re)install the handlers: ray.init replaces the SIGTERM handler with its own."""
        if not self._previous:
            return
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGALRM, self._on_alarm)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._seen += 1
        if self._seen > 1:
            raise _StopNow()
        if self.signum is None:
            self.signum = signum
        signal.alarm(max(1, math.ceil(STOP_GRACE_S)))

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise _StopNow()


class _StopOnSignal(tune.Stopper):
    """Tune stops every trial (and asks for no new one) once a stop signal arrived."""

    def __init__(self, stop: _StopSignals):
        self.stop = stop

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.stop.requested

    def __getstate__(self) -> dict[str, Any]:
        return {}  # Tune pickles its config (see _TrialFeed.__getstate__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.stop = _StopSignals()


def _descendants() -> dict[int, str]:
    """pid -> start time of every process below the driver (from /proc)."""
    from sweep.reaper import descendants

    return descendants(os.getpid())


def _kill_leftovers(grace: float = 3.0, keep: set[int] | frozenset[int] = frozenset()) -> None:
    """SIGTERM, then SIGKILL, every process still below the driver after ray.shutdown (a Ray agent the
    raylet left behind, e.g. when a signal came while Ray was starting), except the pids in `keep`
    (children the caller had before Ray started). Only for a Ray we started."""
    from sweep.reaper import kill_all

    kill_all({pid: start for pid, start in _descendants().items() if pid not in keep}, grace=grace)


@contextlib.contextmanager
def _reaper():
    """sweep.reaper watching this driver: kills the Ray agents a local Ray would leave if the driver is
    killed with SIGKILL (no handler runs then). Ended when the driver ends normally."""
    try:
        proc = subprocess.Popen([sys.executable, "-m", "sweep.reaper", str(os.getpid())], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        proc = None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _child_subreaper():
    """Make the driver the reaper of orphaned descendants (Linux), so that Ray agents whose raylet died
    are re-parented to it, found by _kill_leftovers, and not left running under init."""
    libc = None
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError):
            libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
    before = None
    if libc is not None:
        import ctypes

        value = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0:
            before = value.value
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        yield
    finally:
        if libc is not None and before is not None:
            libc.prctl(PR_SET_CHILD_SUBREAPER, before, 0, 0, 0)


# ---- the trial process ------------------------------------------------------------------------------
def _run_trial(job: dict[str, Any]) -> None:
    """The Tune trainable: one trainer run in this (fresh) worker process.

    summary.json gains `resources`: what the trial asked for and the GPU ids Ray gave it (the trainer
    does not import Ray). Out of GPU memory ends the trial `failed`, with a reason naming batch_size
    and resources.gpu; any other exception ends it `error`.
    """
    trial_dir = Path(job["trial_dir"])
    trial_dir.mkdir(parents=True, exist_ok=True)
    if os.path.isdir(job["cwd"]):
        os.chdir(job["cwd"])  # relative paths in the spec mean what they meant where `sweep run` ran
    _redirect_output(trial_dir / "log.txt")
    entered = time.time()
    resources = _trial_resources(job.get("resources") or {})
    print(f"=== trial {job['key']} pid {os.getpid()} host {socket.gethostname()} "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')} t={entered:.3f} gpu_ids={resources['gpu_ids']}", flush=True)

    def report(metrics: dict[str, Any]) -> None:
        tune.report(json_safe(metrics))

    from sweep.store import write_json_atomic

    try:
        from trainer.config import RunConfig

        train = _import_function(job["train_fn"])
        config = RunConfig.from_dict(job["config"])
        started = time.time()
        print(f"=== train function imported in {started - entered:.2f}s t={started:.3f}", flush=True)
        summary = train(config, report=report)
        ended = time.time()
        print(f"=== train returned after {ended - started:.2f}s t={ended:.3f}", flush=True)
    except Exception as exc:
        traceback.print_exc()
        oom = _out_of_memory(exc)
        if oom is not None:
            summary = {"status": "failed", "reason": _oom_reason(oom, job), "config": job["config"],
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


def _trial_resources(asked: dict[str, Any]) -> dict[str, Any]:
    """What the trial asked for and what Ray gave it: the GPU ids (ray.get_gpu_ids()) and the
    CUDA_VISIBLE_DEVICES Ray set for this worker, and the node's host name."""
    import ray

    try:
        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
    except Exception:  # not inside a Ray worker (e.g. called directly in a test)
        gpu_ids = []
    return {"cpu": asked.get("cpu"), "gpu": asked.get("gpu"), "gpu_ids": gpu_ids,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "host": socket.gethostname()}


def _out_of_memory(exc: BaseException) -> BaseException | None:
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


def _oom_reason(exc: BaseException, job: dict[str, Any]) -> str:
    """One line: out of GPU memory at this batch size and GPU share, and what to change."""
    batch = (job.get("config") or {}).get("batch_size")
    gpu = (job.get("resources") or {}).get("gpu")
    detail = _short(str(exc).split(". ")[0] if str(exc) else type(exc).__name__, 120)
    share = f"resources.gpu={gpu:g}" if isinstance(gpu, (int, float)) else "resources.gpu unknown"
    return (f"out of GPU memory at batch_size={batch} with {share} ({detail}); lower batch_size, or give each "
            "trial more of a GPU (a larger resources.gpu: fewer trials share one)")


def _redirect_output(path: Path) -> None:
    """Send this process's stdout and stderr (Python and C level) to the trial's log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _import_function(path: str) -> Callable[..., Any]:
    module_name, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name or "train")
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"cannot import the train function {path!r}: {exc}") from None


# ---- the driver -------------------------------------------------------------------------------------
class _StudyRun:
    """Everything one `sweep run` does: plan, resume, run under Tune, mirror, finish."""

    def __init__(self, spec: StudySpec, train_fn: str, rerun_changed: bool = False, rebuild_storage: bool = False):
        self.spec = spec
        self.train_fn = train_fn
        self.rerun_changed = rerun_changed
        self.changed: dict[str, list[str]] = {}  # finished key -> fields its config now resolves differently
        self.folder = StudyFolder(spec.study_dir)
        self.storage_url = spec.storage or self.folder.default_storage()
        self.param_names = list(spec.parameters)
        self.trials: dict[str, Trial] = {}  # key -> trial, every trial of this run (known so far)
        self.to_run: list[Trial] = []
        self.asks_left = 0  # tpe: Optuna asks still to make (each runs once per seed)
        self.asked: dict[str, int] = {}  # tpe: key -> number of the asked Optuna trial it starts as
        self.handed_out: set[str] = set()  # keys given to Tune and not ended yet
        self.mirror: Any = None
        self.table: TrialsTable | None = None
        self.progress: Progress | None = None
        self.interrupted = False
        self.stop = _StopSignals()
        self.change: Any = None  # sweep.history.StudyChange when this run extends the recorded study
        self.children_before: set[int] = set()  # processes below the driver before Ray started (not Ray's)
        self.progress_note = ""
        self.inputs_checked = False  # preflight_inputs already passed for every planned config
        self.rebuild_storage = rebuild_storage  # an unreadable SQLite storage is rebuilt from the records

    # ---- lock -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self):
        """Hold an exclusive flock on results/<study>/.driver.lock (released by the OS if we die)."""
        self.folder.path.mkdir(parents=True, exist_ok=True)
        with open(self.folder.lock_file, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.seek(0)
                owner = handle.read().strip() or "another process"
                raise UserError(f"study '{self.spec.name}' is already running ({owner}); "
                                "wait for it or stop it first") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
            handle.flush()
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # ---- plan -----------------------------------------------------------------------------------
    def prepare(self) -> int:
        """Write study.yaml, open the Optuna study, sort the trials into done and to run, write
        trials.csv; return how many trials this run will run."""
        from sweep.mirror import OptunaMirror, rebuild_storage

        rebuild_storage(self.storage_url, self.rebuild_storage, self.spec.path or "STUDY", self.spec.method,
                        self.folder.set_aside)
        if self.change is not None:
            from sweep.history import record_change

            record_change(self.folder, self.change, extend=bool(self.change.changed))
            grown = ", ".join(self.change.added + self.change.changed)
            self.progress_note = f"study {self.spec.name} extended: {grown}"
        self.folder.write_study_yaml(self.spec)
        planned = self._planned_trials()
        distributions = self._distributions(planned)
        commit = _git_commit()
        self.mirror = OptunaMirror(self.spec, self.storage_url, distributions,
                                   common_attrs={"git_commit": commit} if commit else {})
        stale = self.mirror.fail_interrupted()
        self.table = TrialsTable(self.folder, self.param_names)
        skipped = self._resume(planned)
        self.keep_weights()
        self.table.write()

        total = len(self.to_run) + self.asks_left * len(self.spec.seeds)
        self.progress = Progress(total, self.spec.metric.name, self.spec.metric.goal, skipped=skipped)
        self._print_plan(skipped, len(stale))
        for key, row in self.table.rows.items():
            if row["state"] == "COMPLETE":
                self.progress.offer_best(key, _number(row.get(self.spec.metric.name)))
        return total

    def execute(self, address: str | None, max_concurrent: int | None) -> int:
        if self.prepare() == 0 or self.stop.requested:
            return self._finish()
        from sweep.preflight import cluster_nodes, preflight_inputs, preflight_resources

        cpu, gpu = self.spec.resources.cpu, self.spec.resources.gpu
        if not address:
            preflight_resources(cpu, gpu)  # before Ray starts: seconds, not a 60 s Ray warning and a hang
        if not self.inputs_checked:
            preflight_inputs(self._configs_to_run())
        self.stop.on_stuck = lambda: self._abandon(local=not address)
        with contextlib.ExitStack() as stack:
            if not address:
                stack.enter_context(_child_subreaper())
                self.children_before = set(_descendants())
                stack.enter_context(_reaper())
            started_ray = False
            try:
                try:
                    started_ray = self._init_ray(address)
                    if address and not self.stop.requested:
                        preflight_resources(cpu, gpu, cluster_nodes(), f"the Ray cluster at {address}")
                    if not self.stop.requested:
                        self._fit(max_concurrent, address)
                except _StopNow:
                    pass
                except KeyboardInterrupt:  # a SIGINT before our handler was (re)installed
                    self.stop.signum = self.stop.signum or signal.SIGINT
                except Exception as exc:
                    if not _raised_by_stop(exc):  # Ray's C code wraps _StopNow (SystemError), Tune re-raises
                        self._hold_signals()
                        with contextlib.suppress(Exception):
                            self._finish_interrupted()
                        raise
                except BaseException:
                    self._hold_signals()
                    with contextlib.suppress(Exception):  # best effort: the first error is the one to report
                        self._finish_interrupted()
                    raise
                self._hold_signals()
                self._finish_interrupted()
                # The summary comes before ray.shutdown: Ray's shutdown resets SIGTERM to its default
                # action for a moment, so a second SIGTERM then ends the driver at once (status 143).
                code = self._finish()
            finally:
                self._hold_signals()
                try:
                    self._shutdown_ray(started_ray or not address)
                finally:
                    self.stop.install()
        return code

    def _finish(self) -> int:
        """Print the summary; the exit code (module docstring)."""
        if self.stop.requested:
            self.interrupted = True
        self._print_summary()
        if self.stop.requested:
            return self.stop.exit_code
        errors = [r for r in self.table.rows.values()
                  if r["state"] == "FAIL" and (r.get("status") or "error") not in RESULT_STATUSES]
        return 1 if errors or self.interrupted else 0

    def _abandon(self, local: bool) -> None:
        """Called by the stop watchdog when the main thread is stuck inside Ray after a stop signal: record
        the running trials as interrupted, print the summary, kill what Ray left, and exit."""
        for step in (self._finish_interrupted, self._finish):
            try:
                step()
            except Exception as exc:  # best effort: the process ends right after
                print(f"sweep: while stopping: {type(exc).__name__}: {exc}", file=sys.stderr)
        if local:
            with contextlib.suppress(Exception):
                _kill_leftovers(grace=1.0, keep=self.children_before)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self.stop.exit_code)

    def _hold_signals(self) -> None:
        """From here on the driver is stopping anyway: a further signal must not cut the clean-up short
        (it only records which signal came, when none had)."""
        signal.alarm(0)
        if not self.stop._previous:
            return

        def note(signum: int, frame: Any) -> None:
            self.stop.signum = self.stop.signum or signum

        for sig in STOP_SIGNALS:
            signal.signal(sig, note)

    def _shutdown_ray(self, local: bool) -> None:
        """ray.shutdown(), then (for a Ray started here) kill what Ray left."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if local:
            _kill_leftovers(keep=self.children_before)

    def configs_planned(self) -> list[dict[str, Any]]:
        """Every config the study plans, before anything is resumed (tpe: as _configs_to_run)."""
        if self.spec.method != "tpe":
            return [t.config for t in self._planned_trials()]
        return self._configs_to_run()

    def _configs_to_run(self) -> list[dict[str, Any]]:
        """The configs this run will start (tpe: the base with each model the study may choose)."""
        if self.spec.method != "tpe":
            return [t.config for t in self.to_run]
        from trainer.config import RunConfig

        values = self.spec.parameters.get("model", [])
        models = values.get("choices", []) if isinstance(values, dict) else [v for v in values if isinstance(v, str)]
        base = RunConfig.from_dict(self.spec.base).resolved().to_dict()
        return [base] + [{**base, "model": model} for model in models]

    def _planned_trials(self) -> list[Trial]:
        if self.spec.method == "tpe":
            return []
        from sweep.spec import expand

        return list(expand(self.spec))

    def _distributions(self, planned: list[Trial]) -> dict[str, Any]:
        """Optuna distributions of the swept parameters: the spec's search space (random, tpe), and
        for grid values and derived (expr) values, ranges/choices inferred from the expanded trials."""
        from sweep.mirror import infer_distributions
        from sweep.spec import search_space

        space = dict(search_space(self.spec)) if self.spec.method in ("tpe", "random") else {}
        rest = [name for name in self.param_names if name not in space]
        space.update(infer_distributions(planned, rest))
        return space

    def _resume(self, planned: list[Trial]) -> int:
        """Sort planned trials into done (skipped) and to run; return how many were skipped."""
        by_key = self.mirror.trials_by_key()
        skipped = 0
        if self.spec.method == "tpe":
            planned = self._tpe_known_trials(by_key)
        for trial in planned:
            self.trials[trial.key] = trial
            row = self.table.add(trial)
            attempts = by_key.get(trial.key, [])
            final = [a for a in attempts if is_final(a)]
            summary, problem = self.folder.read_summary_checked(trial.key)  # one read of summary.json
            if problem:
                self._damaged_summary(trial.key, problem, final[-1] if final else None)
                summary = self.folder.read_summary(trial.key)  # restored from Optuna, or set aside
            action = decide(attempts, summary)  # the one decision, shared with --dry-run and status
            changed = self._changed_fields(trial) if action in ("skip", "record") else []
            if changed:
                self.changed[trial.key] = changed
            if changed and self.rerun_changed:
                self.to_run.append(trial)
            elif action == "skip":
                last = final[-1]
                row.update(state=last.state.name, optuna_trial=last.number)
                if summary is not None:
                    self.table.set_summary(trial.key, summary)
                else:
                    row.update(status=last.user_attrs.get("status"), reason=last.user_attrs.get("reason"))
                skipped += 1
            elif action == "record":
                number, state = self.mirror.add_finished(trial, summary, self.folder.read_metrics(trial.key))
                row.update(state=state, optuna_trial=number)
                self.table.set_summary(trial.key, summary)
                skipped += 1
            else:
                self.to_run.append(trial)
        if self.spec.method == "tpe":
            asked = {t.number for ts in by_key.values() for t in ts if t.user_attrs.get("asked")}
            self.asks_left = max(0, (self.spec.budget or 1) - len(asked))
        return skipped

    def _changed_fields(self, trial: Trial) -> list[str]:
        """Fields whose value in the config the trial ran with differs from how it resolves now.

        A field the stored config lacks (added by a later release, with a default) does not count.
        """
        from sweep.spec.text import flatten

        stored = self.folder.read_config(trial.key)
        if stored is None:
            return []
        before, now = flatten(stored), flatten(trial.config)
        return sorted(k for k in now if k in before and k != "output_dir" and before[k] != now[k])

    def _damaged_summary(self, key: str, problem: str, final: Any) -> None:
        """A summary.json that does not parse: never read as "no result". When Optuna holds the trial's
        final attempt, the file is set aside and rebuilt from that attempt's user attributes (the key stays
        done); otherwise the trial's folder is set aside and the trial runs again."""
        from sweep.mirror import summary_from_attrs

        path = self.folder.summary_path(key)
        if final is not None:
            aside = self.folder.set_aside(path)
            self.folder.write_summary(key, summary_from_attrs(dict(final.user_attrs)))
            print(f"trial {key}: {path} {problem}; kept as {aside.name}, results restored from Optuna trial "
                  f"{final.number}", flush=True)
        else:
            aside = self.folder.set_aside(self.folder.trial_dir(key))
            print(f"trial {key}: {path} {problem}; its folder kept as {aside}, the trial runs again", flush=True)

    def _tpe_known_trials(self, by_key: dict[str, list[Any]]) -> list[Trial]:
        """tpe: every seed of the parameter sets asked in earlier runs, rebuilt from Optuna."""
        known: dict[str, Trial] = {}
        for attempts in by_key.values():
            first = attempts[0]
            if not first.user_attrs.get("asked"):
                continue
            params = {name: first.params[name] for name in self.param_names if name in first.params}
            for seed in self.spec.seeds:
                trial = _make_trial(self.spec, params, seed)
                if trial is not None:
                    known.setdefault(trial.key, trial)
        return list(known.values())

    def _print_plan(self, skipped: int, stale: int) -> None:
        spec = self.spec
        parts = [f"study {spec.name}: {len(self.trials) + self.asks_left * len(spec.seeds)} trials"]
        if skipped:
            parts.append(f"{skipped} already ended (skipped)")
        if stale:
            parts.append(f"{stale} left running by an earlier driver marked FAIL (interrupted)")
        parts.append(f"{self.progress.total} to run")
        self.progress.say(", ".join(parts))
        if self.changed:
            fields = ", ".join(sorted({f for fs in self.changed.values() for f in fs}))
            what = ("re-running them (--rerun-changed)" if self.rerun_changed else
                    "their results are kept; add --rerun-changed to re-run them")
            self.progress.say(f"study {spec.name}: {len(self.changed)} finished trials would now resolve "
                              f"differently ({fields}); {what}")
        if self.progress_note:
            self.progress.say(self.progress_note + " (see study_history.yaml)")
        self.progress.say(f"results: {self.folder.path}  optuna: {_display_url(self.storage_url)}")

    # ---- Ray ------------------------------------------------------------------------------------
    def _init_ray(self, address: str | None) -> bool:
        import ray

        os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")  # summary/error reports lack dev_stsb
        os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # metrics.jsonl is the record
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: Tune prints nothing; Progress does
        # With the auto loggers off, Tune's end-of-run analysis warns that it found no result files.
        logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
        env_vars = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        kwargs: dict[str, Any] = dict(log_to_driver=False, logging_level=logging.WARNING,
                                      configure_logging=False)  # see _ray_log_handler
        if env_vars:
            kwargs["runtime_env"] = {"env_vars": env_vars}
        if ray.is_initialized():
            return False
        os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")  # ours stops the run (no Tuner.restore hint)
        # ray.init(configure_logging=False) starts by clearing the "ray" logger's handlers, so what it logs
        # itself (e.g. "Token authentication is enabled ...") would reach stderr through logging.lastResort.
        handler = self._ray_log_handler()
        saved_last_resort, logging.lastResort = logging.lastResort, handler
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                # "local": a new instance of our own, even when another Ray runs on this machine
                ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, **kwargs)
        except SystemExit:
            # ray.init's own SIGTERM handlers (installed while it starts) end in sys.exit
            self.stop.signum = self.stop.signum or signal.SIGTERM
            return True
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            hint = ""
            if address and "RAY_AUTH_MODE" not in os.environ:
                hint = ("; if the cluster uses token authentication (Ray's default for `ray start`), set "
                        "RAY_AUTH_MODE=token (the token is read from $RAY_AUTH_TOKEN or ~/.ray/auth_token)")
            raise UserError(f"cannot start or reach {where}: {' '.join(str(exc).split())[:300]}{hint}") from None
        finally:
            logging.lastResort = saved_last_resort
            self.stop.install()  # replaces ray.init's SIGTERM handlers and the core worker's crash dump
        ray_logger = logging.getLogger("ray")
        ray_logger.handlers = [handler]
        ray_logger.propagate = False
        from sweep.reaper import name

        self.stop.ray_processes = {pid: start for pid, start in _descendants().items()
                                   if name(pid) in ("gcs_server", "raylet")}
        return True

    def _ray_log_handler(self) -> logging.Handler:
        """Ray's and Tune's own messages (resource warnings, "Resume experiment with: Tuner.restore(...)",
        which contradicts the resume rule: run the same command again) go to results/<study>/ray.log."""
        handler = logging.FileHandler(self.folder.path / "ray.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        return handler

    def _fit(self, max_concurrent: int | None, address: str | None = None) -> None:
        resources = {"cpu": float(self.spec.resources.cpu), "gpu": float(self.spec.resources.gpu)}
        if max_concurrent is None:
            max_concurrent = self._room(resources, address)
        searcher = _TrialFeed(self)
        callback = _Mirroring(self)
        tuner = tune.Tuner(
            tune.with_resources(_run_trial, resources),
            tune_config=tune.TuneConfig(
                search_alg=searcher, scheduler=self._scheduler(), num_samples=-1,
                max_concurrent_trials=max_concurrent, reuse_actors=False,
                trial_name_creator=lambda t: f"{t.config['key']}",
                trial_dirname_creator=lambda t: f"{t.config['key']}-{t.trial_id}",
            ),
            run_config=tune.RunConfig(
                name=time.strftime("run-%Y%m%d-%H%M%S"), storage_path=str(self.folder.ray_dir),
                verbose=0, callbacks=[callback, *logger_callbacks(self.spec)],
                failure_config=tune.FailureConfig(max_failures=0), stop=_StopOnSignal(self.stop),
            ),
        )
        tuner.fit()
        # Tune ends fit() quietly when its stopper stops it: trials still running were interrupted.
        if self.mirror.running or self.handed_out or searcher.has_more():
            self.interrupted = True

    def _room(self, resources: dict[str, float], address: str | None) -> int:
        """How many trials Tune may have pending or running at once: as many as the cluster's CPUs and GPUs
        hold. Without a limit Tune lets a custom searcher have one trial pending at a time, so trials would
        start one after another however much room there is (and an autoscaler would see one trial's demand).
        On an existing cluster (`--address`) a grid asks for its remaining trials, up to PENDING_CAP, so an
        autoscaler sees the study's demand; tpe asks only for what fits (each ask is a sampler decision)."""
        import ray

        total = ray.cluster_resources()
        fits = [int(total.get("CPU", 1.0) // max(resources["cpu"], 1e-9))]
        if resources["gpu"] > 0:
            fits.append(int(total.get("GPU", 0.0) // resources["gpu"]))
        room = max(1, min(fits))
        if address and self.spec.method != "tpe":
            room = max(room, min(len(self.to_run), PENDING_CAP))
        return room

    def _scheduler(self) -> Any:
        sched = self.spec.scheduler
        if sched is None:
            return None
        if sched.type != "asha":
            raise UserError(f"scheduler.type '{sched.type}': expected asha")
        from ray.tune.schedulers import ASHAScheduler

        configs = [t.config for t in self.trials.values()]
        if not configs:  # tpe before its first ask: the base config tells the run length
            from trainer.config import RunConfig

            configs = [RunConfig.from_dict(self.spec.base).resolved().to_dict()]
        max_t = sched.max_t or max(_evaluations(c) for c in configs)
        return ASHAScheduler(
            time_attr="training_iteration", metric=CURVE_KEY, mode="max", max_t=max(max_t, sched.grace_period),
            grace_period=sched.grace_period, reduction_factor=sched.reduction_factor,
            stop_last_trials=False,  # the trainer must reach its final test evaluation
        )

    # ---- trial events (called from the Tune driver loop) -----------------------------------------
    def next_job(self) -> dict[str, Any] | None:
        if self.stop.requested:
            return None  # stopping: launch nothing new
        if not self.to_run and self.asks_left > 0:
            self._ask_tpe()
        if not self.to_run:
            return None
        trial = self.to_run.pop(0)
        self.handed_out.add(trial.key)
        self.folder.clear_attempt(trial.key)
        self.folder.write_trial_config(trial)
        trial_dir = self.folder.trial_dir(trial.key)
        config = dict(trial.config)
        config["output_dir"] = str(trial_dir)
        if self.spec.keep_weights != 0:  # set here, not in trial.config: the trial key stays the same
            config["save_model"] = True
        return {
            "key": trial.key, "seed": trial.seed, "params": dict(trial.params), "config": config,
            "trial_dir": str(trial_dir),
            "cwd": os.getcwd(), "train_fn": self.train_fn,
            "resources": {"cpu": float(self.spec.resources.cpu), "gpu": float(self.spec.resources.gpu)},
        }

    def _ask_tpe(self) -> None:
        """tpe: ask Optuna for a parameter set; it becomes one trial per seed (the first seed's trial is
        the asked Optuna trial). A set the constraints drop, or one already run, is told FAIL (status
        "dropped" / "duplicate") and asked again; after many in a row the search space is exhausted."""
        for _ in range(_MAX_DROPPED_ASKS):
            number, params = self.mirror.ask({"asked": True})
            first = _make_trial(self.spec, params, self.spec.seeds[0])
            if first is None:
                self.mirror.fail(number, "dropped by the study's constraints", status="dropped")
            elif first.key in self.trials:
                self.mirror.fail(number, f"same configuration as trial {first.key}", status="duplicate")
            else:
                break
        else:
            self.progress.say(f"tpe: no new configuration in {_MAX_DROPPED_ASKS} asks; the search space "
                              "looks exhausted, stopping early")
            self.progress.total -= self.asks_left * len(self.spec.seeds)
            self.asks_left = 0
            return
        self.asks_left -= 1
        self.asked[first.key] = number
        self.mirror.set_attrs(number, {"key": first.key, "seed": first.seed})
        for seed in self.spec.seeds:
            trial = first if seed == first.seed else _make_trial(self.spec, params, seed)
            if trial is None or trial.key in self.trials:
                self.progress.total -= 1
                continue
            self.trials[trial.key] = trial
            self.table.add(trial)
            self.to_run.append(trial)

    def trial_started(self, key: str, tune_trial_id: str) -> int:
        trial = self.trials[key]
        number = self.asked.pop(key, None)
        if number is None:
            number = self.mirror.start(trial, {"tune_trial_id": tune_trial_id})
        else:
            self.mirror.set_attrs(number, {"tune_trial_id": tune_trial_id})
        self.table.update(key, state="RUNNING", status=None, reason=None, optuna_trial=number,
                          steps=None, best_step=None, dev_stsb=None, weights=None)
        self.table.write()
        self.progress.trial_started(key, " ".join(f"{k}={_fmt(v)}" for k, v in trial.params.items()))
        return number

    def trial_result(self, key: str, number: int, result: dict[str, Any]) -> None:
        step, value = result.get(STEP_KEY), result.get(CURVE_KEY)
        if not isinstance(step, (int, float)) or not isinstance(value, (int, float)):
            return
        self.mirror.report(number, int(step), float(value))
        row = self.table.rows[key]
        best = _number(row.get("dev_stsb"))
        row["steps"] = int(step)
        if math.isfinite(value) and (best is None or value > best):
            row.update(dev_stsb=float(value), best_step=int(step))
        self.table.write()

    def trial_ended(self, key: str, number: int, summary: dict[str, Any]) -> None:
        self.handed_out.discard(key)
        state = self.mirror.finish(number, summary)
        self.table.set_summary(key, summary)
        self.table.update(key, state=state)
        self.keep_weights()
        self.table.write()
        value = metric_value(summary, self.spec.metric.name) if state == "COMPLETE" else None
        self.progress.trial_ended(key, state, summary.get("status"), value, summary.get("reason"))

    def keep_weights(self) -> None:
        """Delete the saved weights (trials/<key>/model/) of every ended trial outside the top
        `keep_weights` COMPLETE trials by the study metric (none of them: keep all), and set each ended
        trial's `weights` column in trials.csv: kept, deleted or none. summary.json is left as the
        trainer wrote it (a finished trial's files do not change when a better trial ends)."""
        ended = {key: self.folder.read_summary(key) for key, row in self.table.rows.items()
                 if key not in self.handed_out and row["state"] not in ("PENDING", "RUNNING")}
        ended = {key: summary for key, summary in ended.items() if summary is not None}
        saved = [key for key in ended if self.folder.model_dir(key).is_dir()]
        keep = self.spec.keep_weights
        if keep is None:
            keepers = set(saved)
        else:
            scored = [(metric_value(ended[key], self.spec.metric.name), key) for key in saved
                      if self.table.rows[key]["state"] == "COMPLETE"]
            scored = [(value, key) for value, key in scored if value is not None]
            sign = -1.0 if self.spec.metric.goal == "maximize" else 1.0
            scored.sort(key=lambda item: sign * item[0])  # stable: on a tie the earlier trial stays
            keepers = {key for _, key in scored[:keep]}
        for key in saved:
            if key not in keepers:
                shutil.rmtree(self.folder.model_dir(key), ignore_errors=True)
        for key, summary in ended.items():
            self.table.update(key, weights=weights_state(self.folder, key, summary))

    def _finish_interrupted(self) -> None:
        """Trials still running when the driver stops: FAIL (interrupted) in Optuna and trials.csv."""
        from sweep.mirror import INTERRUPTED

        if self.mirror is None:
            return
        for number in list(self.mirror.running):
            key = self.mirror.running[number].user_attrs.get("key")
            self.mirror.fail(number, INTERRUPTED, status=INTERRUPTED)
            if key in self.table.rows:
                self.table.update(key, state="FAIL", status=INTERRUPTED, reason=INTERRUPTED)
                self.progress.trial_interrupted(key)
        self.table.write()

    def _print_summary(self) -> None:
        rows = list(self.table.rows.values())
        counts: dict[str, int] = {}
        for row in rows:
            label = row["state"] if row["state"] != "FAIL" else f"FAIL/{row.get('status') or 'error'}"
            counts[label] = counts.get(label, 0) + 1
        text = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
        head = "interrupted" if self.interrupted else "finished"
        self.progress.say(f"study {self.spec.name} {head} after {self.progress.elapsed():.0f}s: "
                          f"{len(rows)} trials: {text}")
        if self.progress.best is not None:
            value, key = self.progress.best
            self.progress.say(f"best {self.spec.metric.name}: {value:.2f} (trial {key})")
        for row in rows:
            if row["state"] == "FAIL" and row.get("reason"):
                self.progress.say(f"  {row['key']} {row.get('status')}: {_short(row['reason'])}  "
                                  f"(log: {self.folder.log_path(row['key'])})")
        self.progress.say(f"trials.csv: {self.folder.trials_csv}")
        if self.stop.requested:
            done = sum(1 for r in rows if _is_done(r))
            self.progress.say(f"interrupted by {self.stop.name}: {done} of {len(rows)} trials done; "
                              "run the same command to go on")
        elif self.interrupted:
            self.progress.say("run the same command again to resume")


class _TrialFeed(Searcher):
    """A Tune searcher that hands out the study's trials (grid/random list, or Optuna asks for tpe)."""

    def __init__(self, run: _StudyRun):
        super().__init__()
        self.run = run

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        job = self.run.next_job()
        return job if job is not None else self.FINISHED

    def has_more(self) -> bool:
        return bool(self.run.to_run) or self.run.asks_left > 0

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its config into ray/<run>/tuner.pkl for Tuner.restore, which resume does not use;
        # the run (open storage, terminal stream) stays out of it.
        return {k: v for k, v in self.__dict__.items() if k != "run"}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass  # the Optuna study is told by _Mirroring

    def save(self, checkpoint_path: str) -> None:
        pass  # resume does not use Tune's restore

    def restore(self, checkpoint_path: str) -> None:
        pass


class _Mirroring(tune.Callback):
    """Tune callback: trial start/result/end -> Optuna, trials.csv, summary.json, terminal."""

    def __init__(self, run: _StudyRun):
        self.run = run
        self.live: dict[str, dict[str, Any]] = {}  # Tune trial id -> {key, number, metrics, summary}

    def __getstate__(self) -> dict[str, Any]:
        return {"live": {}}  # see _TrialFeed.__getstate__

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        key = trial.config["key"]
        number = self.run.trial_started(key, trial.trial_id)
        self.live[trial.trial_id] = {"key": key, "number": number, "metrics": [], "summary": None, "error": None}

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        live = self.live.get(trial.trial_id)
        if live is None:
            return
        if SUMMARY_KEY in result:
            live["summary"] = result[SUMMARY_KEY]
        elif ERROR_KEY in result:
            live["error"] = result[ERROR_KEY]
        elif STEP_KEY in result:
            live["metrics"].append({k: result[k] for k in ("step", "loss", "dev_stsb", "lr", "eta", "queue_fill")
                                    if k in result})
            self.run.trial_result(live["key"], live["number"], result)

    def _stopped_by_signal(self, trial: Any) -> bool:
        """A trial that Tune ended because the driver is stopping, with no verdict of its own: it stays
        RUNNING in Optuna until _finish_interrupted records it FAIL (interrupted)."""
        live = self.live.get(trial.trial_id)
        return live is not None and self.run.stop.requested and live["summary"] is None and live["error"] is None

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if self._stopped_by_signal(trial):
            return
        live = self.live.pop(trial.trial_id, None)
        if live is None:
            return
        if live["summary"] is not None:
            summary = live["summary"]
        elif live["error"] is not None:
            summary = {"status": "error", "reason": live["error"]}
        elif self.run.spec.scheduler is not None:
            summary = self._pruned_summary(live, trial)
        else:
            summary = {"status": "error", "reason": "the trial ended without a summary"}
        self._ensure_files(live, trial, summary)
        self.run.trial_ended(live["key"], live["number"], summary)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if self._stopped_by_signal(trial):
            return
        live = self.live.pop(trial.trial_id, None)
        if live is None:
            return
        summary = {"status": "error", "reason": _trial_error(trial)}
        self._ensure_files(live, trial, summary, overwrite=True)
        self.run.trial_ended(live["key"], live["number"], summary)

    def _pruned_summary(self, live: dict[str, Any], trial: Any) -> dict[str, Any]:
        curve = [m for m in live["metrics"] if isinstance(m.get("dev_stsb"), (int, float))]
        best = max(curve, key=lambda m: m["dev_stsb"]) if curve else {}
        last_step = live["metrics"][-1].get("step") if live["metrics"] else 0
        return {
            "status": "pruned",
            "reason": f"stopped by the {self.run.spec.scheduler.type} scheduler at step {last_step}",
            "steps": last_step, "best_step": best.get("step"), "best_dev_stsb": best.get("dev_stsb"),
            "config": trial.config.get("config"),
        }

    def _ensure_files(self, live: dict[str, Any], trial: Any, summary: dict[str, Any], overwrite: bool = False) -> None:
        """summary.json and metrics.jsonl exist for every ended trial (the worker may be on another node,
        or killed before writing them)."""
        folder = self.run.folder
        key = live["key"]
        if overwrite or folder.read_summary(key) is None:
            if "config" not in summary:
                summary = {**summary, "config": trial.config.get("config")}
            folder.write_summary(key, summary)
        if not folder.metrics_path(key).exists() and live["metrics"]:
            folder.write_metrics(key, live["metrics"])


def _is_done(row: dict[str, Any]) -> bool:
    """A trials.csv row whose trial has ended for good (skipped by the next run)."""
    if row["state"] in ("COMPLETE", "PRUNED"):
        return True
    return row["state"] == "FAIL" and row.get("status") in ("diverged", "collapsed")


def _trial_error(trial: Any) -> str:
    """One line saying why Tune marked the trial ERROR (the worker died, ran out of memory, ...)."""
    text = None
    try:
        text = trial.get_error()
    except Exception:
        pass
    if not text and getattr(trial, "error_file", None):
        try:
            text = Path(trial.error_file).read_text()
        except OSError:
            text = None
    if not text:
        return "the trial's worker process failed (see the Ray logs)"
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "Killed" in line:
            return _short(line, 300)
    return _short(lines[-1], 300)


def _make_trial(spec: StudySpec, params: dict[str, Any], seed: int) -> Trial | None:
    """The Trial for sampled parameter values (tpe); None when the study's constraints drop it."""
    from sweep.spec import trial_from_params

    return trial_from_params(spec, params, seed)


def _evaluations(config: dict[str, Any]) -> int:
    steps = config.get("max_steps")
    every = (config.get("eval") or {}).get("eval_steps") or 100
    return max(1, math.ceil(steps / every)) if steps else 100


_GIT_COMMIT: list[str | None] = []


def _git_commit() -> str | None:
    """The project's git commit (with "-dirty" for uncommitted changes), or None outside a checkout."""
    if not _GIT_COMMIT:
        repo = Path(__file__).resolve().parents[1]
        try:
            out = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=40"],
                                 capture_output=True, text=True, timeout=10)
            _GIT_COMMIT.append(out.stdout.strip() or None if out.returncode == 0 else None)
        except (OSError, subprocess.SubprocessError):
            _GIT_COMMIT.append(None)
    return _GIT_COMMIT[0]


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _short(text: Any, limit: int = 200) -> str:
    return shorten(text, limit)


def _display_url(url: str) -> str:
    from sweep.mirror import _hide_password

    return _hide_password(url)
