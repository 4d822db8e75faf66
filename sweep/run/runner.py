"""`sweep run`: run (or resume) a study through Ray Tune, mirrored live to Optuna and results/<study>/.

    run_study(spec, address=None, max_concurrent=None) -> exit code (README "Exit codes"):
        0 every trial ended with a result (ok, diverged, collapsed, pruned); 1 a trial ended in an
        error or was interrupted; 4 stopped on the study's cost_limit (sweep.run.cost_limit), resumable;
        130/143/129 stopped by SIGINT (Ctrl-C) / SIGTERM / SIGHUP.

Owns: the study run that ties the other modules together, top to bottom: check the spec against the
recorded study, take the study's lock, plan and resume (sweep.run.plan), start Ray (sweep.run.ray_session), run
the trials under Tune with the trial feed (sweep.run.feed) and the trial events (sweep.run.trial_events), stop
cleanly on a signal (sweep.run.stopping), print the summary and return the exit code. A trial runs in a
Ray worker process (sweep.run.worker); the driver is the only writer of the Optuna study and of trials.csv.

Resume needs no Ray restore: the same command again after Ctrl-C, kill -9 or a crashed node plans the
study afresh from Optuna and the trials' summary.json files (sweep.run.plan). A lock file (flock on
results/<study>/.driver.lock) stops two drivers from running one study at once.

Stopping (SIGTERM from Slurm's time limit or `scancel`, SIGINT from Ctrl-C, SIGHUP from a closed
terminal): the driver stops launching trials, asks Tune to stop the running ones (a Tune Stopper), and
after STOP_GRACE_S (or at a second signal) stops waiting; running trials become FAIL "interrupted",
Ray is shut down, leftover Ray processes of a local instance are killed, and the driver prints one
line and exits 128 + the signal number. Tune's SIGINT handler (which prints a `Tuner.restore` hint) is
turned off with TUNE_DISABLE_SIGINT_HANDLER.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import sys
import time
from typing import Any

from sweep.records.history import check_same_study
from sweep.records.store import StudyFolder
from sweep.run.cost_limit import EXIT_COST_LIMIT, CostLimit, measured_only
from sweep.run.job import CURVE_KEY
from sweep.run.ledger import Ledger
from sweep.run.node_checks import check_nodes, software_versions
from sweep.run.opening import open_study
from sweep.run.plan import planned_configs
from sweep.run.preflight import cluster_nodes, preflight_inputs, preflight_resources
from sweep.run.ray_private import skip_tracker_imports_in_tune_usage_tag
from sweep.run.ray_session import shutdown_ray, start_ray, trial_room
from sweep.run.stopping import (
    StopNow,
    StopSignals,
    child_subreaper,
    descendants_of_driver,
    hold_signals,
    kill_leftovers,
    raised_by_stop,
    reaper_process,
)
from sweep.run.trackers import check_loggers, logger_callbacks
from sweep.run.trial_files import start_receiver
from sweep.spec import StudySpec, planning_config
from sweep.text import hide_password, shorten
from trainer.errors import UserError
from trainer.vocabulary import ERROR, RESULT_STATUSES, TrialState, ends_for_good

DEFAULT_TRAIN_FN = "trainer.train:train"
# RESULT_STATUSES: trainer statuses that are results, not errors: a study with only these exits 0.


def run_study(spec: StudySpec, address: str | None = None, max_concurrent: int | None = None,
              *, extend: bool = False, rerun_changed: bool = False, rebuild_storage: bool = False,
              cost_estimate: Any = None, _train_fn: str | None = None) -> int:
    """Run every trial of `spec` that has not ended yet; return the exit code (the module docstring): 0, 1, 4,
    or 128 + the number of the signal that stopped it.

    `address`: an existing Ray cluster ("host:port" or "auto"); None starts Ray on this machine.
    `extend`: accept a spec that differs from the one recorded in results/<name>/ by more than added
    values or seeds (sweep.records.history); the change is recorded in the study's history.
    `rerun_changed`: also re-run finished trials whose config now resolves differently (a default changed).
    `rebuild_storage`: an unreadable SQLite storage is kept aside and rebuilt from the trials' records.
    `cost_estimate`: with a cost_limit, the study's sweep.run.cost_limit.StudyEstimate (`sweep run` makes it with
    sweep.commands.cost_limit.study_estimate and refuses the study first when it passes the limit); None: the
    limit holds on measured time alone.
    `_train_fn` ("module:function", also $SWEEP_TRAIN_FN) replaces trainer.train, for development.
    """
    if max_concurrent is not None and max_concurrent < 1:
        raise UserError("--max-concurrent: expected a positive integer")
    train_fn = _train_fn or os.environ.get("SWEEP_TRAIN_FN") or DEFAULT_TRAIN_FN
    change = check_same_study(spec, extend=extend)  # before anything is written
    check_loggers(spec.loggers)  # before Ray starts
    limit = None
    if spec.cost_limit is not None:
        limit = CostLimit(spec, cost_estimate if cost_estimate is not None else measured_only(spec))
    run = StudyRun(spec, train_fn, rerun_changed=rerun_changed, rebuild_storage=rebuild_storage, change=change)
    run.cost_limit = limit
    run.check_inputs_of_a_new_study()
    try:
        with run.stop.installed(), run.locked():
            code = run.execute(address, max_concurrent)
        return run.late_stop(code)
    except Exception as exc:
        problem = _storage_problem(exc, run)
        if problem is None:
            raise
        raise UserError(f"{problem}; what could be written was written: free space or make it writable, then "
                        "run the same command to go on") from None


# errnos of a results folder that cannot take more data: no space, quota, read-only, no permission
_NO_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
_NO_WRITE_DB = ("database or disk is full", "readonly database", "unable to open database file", "disk i/o error")


def _storage_problem(exc: BaseException, run: "StudyRun") -> str | None:
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
                return f"cannot write the Optuna storage {hide_password(run.spec.storage_url)}: {needle}"
        exc = exc.__cause__ or exc.__context__
    return None


class StudyRun:
    """Everything one `sweep run` does: open and plan the study (its `ledger`), run under Tune, stop, finish.

        run = StudyRun(spec, train_fn)
        run.prepare()                     # plan only: run.ledger holds the plan and the study's records
        code = run.execute(address, max_concurrent)   # inside run.stop.installed() and run.locked()

    `rerun_changed`, `rebuild_storage` and `change` (the sweep.records.history.StudyChange when this run
    extends the recorded study, else None) go to sweep.run.opening.open_study.
    """

    def __init__(self, spec: StudySpec, train_fn: str, rerun_changed: bool = False, rebuild_storage: bool = False,
                 change: Any = None):
        self.spec, self.train_fn, self.change = spec, train_fn, change
        self.rerun_changed, self.rebuild_storage = rerun_changed, rebuild_storage
        self.folder = StudyFolder(spec.study_dir)
        self.ledger: Ledger | None = None  # prepare()
        self.cost_limit: Any = None  # sweep.run.cost_limit.CostLimit when the study has a cost_limit
        self.interrupted = False
        self.stop_said = False  # the summary's "interrupted by ..." line was printed
        self.stop = StopSignals()
        self.children_before: set[int] = set()  # processes below the driver before Ray started (not Ray's)
        self.inputs_checked = False  # preflight_inputs already passed for every planned config
        self.fences: list[Any] = []  # actors holding the nodes left out (sweep.run.node_checks)
        self.receiver: Any = None  # the receiver of trial files on a cluster (sweep.run.trial_files)

    def prepare(self) -> int:
        """Open and plan the study (sweep.run.opening.open_study, which writes the study's records); return how
        many trials the run will run."""
        self.ledger = open_study(self.spec, self.train_fn, rerun_changed=self.rerun_changed,
                                 rebuild=self.rebuild_storage, change=self.change)
        self.ledger.cost_limit = self.cost_limit
        return self.ledger.plan.total

    def check_inputs_of_a_new_study(self) -> None:
        """A new study (no study.yaml in its results folder yet): check every model and data path of every
        planned config now, before its folder exists (a folder left by a refused spec would claim the name,
        and the corrected spec would be refused as another study); execute() then does not check them again.
        A study that exists already: nothing (execute() checks the configs it will run)."""
        if self.folder.study_yaml.exists():
            return
        preflight_inputs(planned_configs(self.spec))
        self.inputs_checked = True

    # ---- lock -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self):
        """Hold an exclusive flock on results/<study>/.driver.lock (released by the OS if we die)."""
        folder = self.folder
        folder.path.mkdir(parents=True, exist_ok=True)
        with open(folder.lock_file, "a+") as handle:
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

    def execute(self, address: str | None, max_concurrent: int | None) -> int:
        """Plan, then run the trials under Tune (on the Ray cluster at `address`, else on a Ray started here)
        and print the summary; return the exit code (the module docstring)."""
        if self.prepare() == 0 or self.stop.requested:
            return self._finish()
        cpu, gpu = self.spec.resources.cpu, self.spec.resources.gpu
        if not address:
            preflight_resources(cpu, gpu)  # before Ray starts: seconds, not a 60 s Ray warning and a hang
        if not self.inputs_checked:
            preflight_inputs(self.ledger.configs_to_run())
        self.stop.on_stuck = lambda: self._abandon(local=not address)
        with contextlib.ExitStack() as stack:
            if not address:
                stack.enter_context(child_subreaper())
                self.children_before = set(descendants_of_driver())
                stack.enter_context(reaper_process())
            started_ray = False
            try:
                try:
                    started_ray = start_ray(address, self.stop, self.folder.path)
                    if address and not self.stop.requested:
                        preflight_resources(cpu, gpu, cluster_nodes(), f"the Ray cluster at {address}")
                        self._prepare_cluster(address)
                    if not self.stop.requested:
                        self._fit(max_concurrent, address)
                except StopNow:
                    pass
                except KeyboardInterrupt:  # a SIGINT before our handler was (re)installed
                    self.stop.signum = self.stop.signum or signal.SIGINT
                except Exception as exc:
                    if not raised_by_stop(exc):  # Ray's C code wraps _StopNow (SystemError), Tune re-raises
                        hold_signals(self.stop)
                        with contextlib.suppress(Exception):
                            self.ledger.interrupted()
                        raise
                except BaseException:
                    hold_signals(self.stop)
                    with contextlib.suppress(Exception):  # best effort: the first error is the one to report
                        self.ledger.interrupted()
                    raise
                hold_signals(self.stop)
                self.ledger.interrupted()
                # The summary comes before ray.shutdown: Ray's shutdown resets SIGTERM to its default
                # action for a moment, so a second SIGTERM then ends the driver at once (status 143).
                code = self._finish()
            finally:
                hold_signals(self.stop)
                try:
                    shutdown_ray(started_ray or not address, self.children_before)
                finally:
                    hold_signals(self.stop)  # Ray's shutdown resets SIGTERM; a signal now is noted (late_stop)
        return code

    def _finish(self) -> int:
        """Print the summary; the exit code (module docstring)."""
        if self.stop.requested:
            self.interrupted = True
        if self.ledger is not None:
            self.ledger.mirror.wait_for_note(timeout=5.0 if self.stop.requested else 60.0)
        self.print_summary()
        if self.stop.requested:
            return self.stop.exit_code
        if self._stopped_on_limit():
            return EXIT_COST_LIMIT
        errors = [r for r in self.ledger.table.rows.values()
                  if r["state"] == TrialState.FAIL and (r.get("status") or ERROR) not in RESULT_STATUSES]
        return 1 if errors or self.interrupted else 0

    def _abandon(self, local: bool) -> None:
        """Called by the stop watchdog when the main thread is stuck inside Ray after a stop signal: record
        the running trials as interrupted, print the summary, kill what Ray left, and exit."""
        for step in (self.ledger.interrupted, self._finish):
            try:
                step()
            except Exception as exc:  # best effort: the process ends right after
                print(f"sweep: while stopping: {type(exc).__name__}: {exc}", file=sys.stderr)
        if local:
            with contextlib.suppress(Exception):
                kill_leftovers(grace=1.0, keep=self.children_before)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self.stop.exit_code)

    # ---- a Ray cluster ----------------------------------------------------------------------------
    def _prepare_cluster(self, address: str) -> None:
        """Check every node from the node itself (bad ones are named and left out: sweep.run.node_checks), then
        start the receiver of trial files on this node (sweep.run.trial_files) and the node watch."""
        from sweep.run.node_watch import NodeWatch

        ledger = self.ledger
        cpu, gpu = float(self.spec.resources.cpu), float(self.spec.resources.gpu)
        verdicts, self.fences = check_nodes(ledger.configs_to_run(), cpu, gpu, ledger.progress.say,
                                            f"the Ray cluster at {address}")
        self.receiver, files = start_receiver(self.folder.path, software_versions(), verdicts)
        ledger.use_cluster(files, NodeWatch(ledger.progress.say, cpu, gpu))

    # ---- Tune -----------------------------------------------------------------------------------
    def _fit(self, max_concurrent: int | None, address: str | None = None) -> None:
        # Ray Tune is imported here, not with this module: a run with nothing to run never loads it
        from ray import tune

        from sweep.run.feed import StopOnSignal, TrialFeed
        from sweep.run.node_watch import LOST_NODE_RETRIES
        from sweep.run.trial_events import TrialEvents
        from sweep.run.worker import run_trial

        ledger, spec = self.ledger, self.spec
        resources = {"cpu": float(spec.resources.cpu), "gpu": float(spec.resources.gpu)}
        if max_concurrent is None:
            max_concurrent = trial_room(resources, address, spec.search, len(ledger.to_run))
        searcher = TrialFeed(ledger, self.stop)
        events = TrialEvents(ledger, self.stop)
        watch = [ledger.node_watch] if ledger.node_watch is not None else []
        tuner = tune.Tuner(
            tune.with_resources(run_trial, resources),
            tune_config=tune.TuneConfig(
                search_alg=searcher, scheduler=self._scheduler(), num_samples=-1,
                max_concurrent_trials=max_concurrent, reuse_actors=spec.reuse_workers,
                trial_name_creator=lambda t: f"{t.config['key']}",
                trial_dirname_creator=lambda t: f"{t.config['key']}-{t.trial_id}",
            ),
            run_config=tune.RunConfig(
                name=time.strftime("run-%Y%m%d-%H%M%S"), storage_path=str(self.folder.ray_dir),
                verbose=0, callbacks=[events, *watch, *logger_callbacks(spec)],
                # on a cluster a trial lost with its node runs again (sweep.run.node_watch); on one machine a
                # trial's worker that dies is an error of that trial
                failure_config=tune.FailureConfig(max_failures=LOST_NODE_RETRIES if watch else 0),
                stop=StopOnSignal(self.stop),
            ),
        )
        skip_tracker_imports_in_tune_usage_tag()  # no tracker imported for Tune's usage tag alone
        tuner.fit()
        # Tune ends fit() quietly when its stopper stops it: trials still running were interrupted.
        if ledger.mirror.running or ledger.handed_out or searcher.has_more():
            self.interrupted = True

    def _scheduler(self) -> Any:
        from sweep.run.schedulers import trial_scheduler

        ledger = self.ledger

        def configs() -> list[dict[str, Any]]:
            planned = [t.config for t in ledger.trials.values()]
            # tpe before its first ask: its planning config tells the run length
            return planned or [planning_config(self.spec)]

        return trial_scheduler(self.spec.scheduler, configs, CURVE_KEY)

    # ---- the end --------------------------------------------------------------------------------
    def print_summary(self) -> None:
        ledger, say = self.ledger, self.ledger.progress.say
        rows = list(ledger.table.rows.values())
        counts: dict[str, int] = {}
        for row in rows:
            label = row["state"] if row["state"] != TrialState.FAIL else f"{row['state']}/{row.get('status') or ERROR}"
            counts[label] = counts.get(label, 0) + 1
        text = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
        head = "interrupted" if self.interrupted else "finished"
        if self._stopped_on_limit():
            head = "stopped on its cost limit"
        say(f"study {self.spec.name} {head} after {ledger.progress.elapsed():.0f}s: {len(rows)} trials: {text}")
        if ledger.progress.best is not None:
            value, key = ledger.progress.best
            say(f"best {self.spec.metric.name}: {value:.2f} (trial {key})")
        for row in rows:
            if row["state"] == TrialState.FAIL and row.get("reason"):
                log = self.folder.log_path(row["key"])
                where = f"log: {log}" if log.is_file() else "no log here: it stayed on the trial's node"
                say(f"  {row['key']} {row.get('status')}: {shorten(row['reason'])}  ({where})")
        say(f"trials.csv: {self.folder.trials_csv}")
        if self.stop.requested:
            self._say_stopped()
        elif self._stopped_on_limit():
            say(self.cost_limit.stop_line(ledger.left()))
        elif self.interrupted:
            say("run the same command again to resume")

    def _stopped_on_limit(self) -> bool:
        """The feed stopped handing out trials on the study's cost_limit (and no signal stopped the run)."""
        limit = self.cost_limit
        return limit is not None and limit.stopped is not None and not self.stop.requested

    def _say_stopped(self) -> None:
        table = self.ledger.table
        done = sum(1 for r in table.rows.values() if _is_done(r))
        self.ledger.progress.say(f"interrupted by {self.stop.name}: {done} of {len(table.rows)} trials done; "
                               "run the same command to go on")
        self.stop_said = True

    def late_stop(self, code: int) -> int:
        """A stop signal after the summary (during the last writes, Ray's shutdown, the lock's release) is
        not lost: it gets the same line and exit status 128 + N as one a moment earlier."""
        if not self.stop.requested or self.stop_said:
            return code
        if self.ledger is not None:
            self._say_stopped()
        return self.stop.exit_code


def _is_done(row: dict[str, Any]) -> bool:
    """A trials.csv row whose trial has ended for good (skipped by the next run)."""
    return ends_for_good(row["state"], row.get("status"))
