"""Stopping a sweep on a signal, and cleaning up the processes a local Ray leaves.

Owns: the driver's SIGTERM/SIGINT/SIGHUP handling (StopSignals: the first signal asks for a clean stop,
a second one or the grace period's end stops waiting; a watchdog thread finishes the stop when the main
thread is stuck inside Ray), and the
process clean-up of a Ray started here: a child subreaper, a reaper process for when the driver is
killed with SIGKILL, and kill_leftovers after ray.shutdown.

Ray installs its own SIGTERM handlers in ray.init (sys.exit, plus the C++ core worker's crash dump);
StopSignals.install() puts ours back after ray.init.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from sweep import signal_latch
from sweep.run.reaper import alive, descendants, kill_all

# Signals that stop a sweep cleanly; the exit status is 128 + the signal number (the shell's convention).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Seconds the running trials get to stop after the first signal before the driver stops waiting for them.
STOP_GRACE_S = float(os.environ.get("SWEEP_STOP_GRACE_S", "15"))
# Seconds after the grace period before a watchdog thread finishes the stop itself, when the main thread is
# stuck inside Ray (a SIGTERM to the whole process group also kills Ray's GCS, and the driver's core worker
# then blocks for a minute before it aborts).
STUCK_AFTER_S = 10.0


class StopNow(BaseException):
    """Raised in the driver's main thread to stop waiting for the trials (second signal, grace over)."""


def raised_by_stop(exc: BaseException | None) -> bool:
    """Whether `exc` comes from a StopNow raised by our signal handler inside other code."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, StopNow):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class StopSignals:
    """The driver's SIGTERM/SIGINT/SIGHUP handling: the first signal asks for a clean stop (and arms a
    SIGALRM after STOP_GRACE_S), a second one, or the alarm, raises StopNow.

        stop = StopSignals()
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
        early = signal_latch.take()
        if early is not None:  # came before these handlers, and some code swallowed its KeyboardInterrupt:
            self._seen += 1  # the run stops as for a signal now (nothing runs yet, so no grace period to arm)
            self.signum = self.signum or early
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
            raise StopNow()
        if self.signum is None:
            self.signum = signum
        signal.alarm(max(1, math.ceil(STOP_GRACE_S)))
        announce_stop(signum)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise StopNow()


def announce_stop(signum: int) -> None:
    """One line on stdout when the first stop signal has been handled: what happens now, and how to stop at once.
    Written with os.write: this runs inside the signal handler, which may have interrupted a print()."""
    name = signal.Signals(signum).name
    again = "press Ctrl-C again" if signum == signal.SIGINT else f"send {name} again"
    line = (f"stopping on {name}: the running trials get up to {STOP_GRACE_S:.0f} s to end; "
            f"{again} to stop at once\n")
    # stdout closed, gone (`sweep run ... | head`) or not a file: the stop goes on without the line
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.write(sys.stdout.fileno(), line.encode())


def descendants_of_driver() -> dict[int, str]:
    """pid -> start time of every process below the driver (from /proc)."""
    return descendants(os.getpid())


def kill_leftovers(grace: float = 3.0, keep: set[int] | frozenset[int] = frozenset()) -> None:
    """SIGTERM, then SIGKILL, every process still below the driver after ray.shutdown (a Ray agent the
    raylet left behind, e.g. when a signal came while Ray was starting), except the pids in `keep`
    (children the caller had before Ray started). Only for a Ray we started."""
    reassert_handlers()  # it runs right after ray.shutdown, which left SIGTERM at its default action
    kill_all({pid: start for pid, start in descendants_of_driver().items() if pid not in keep}, grace=grace)


@contextlib.contextmanager
def reaper_process():
    """sweep.run.reaper watching this driver: kills the Ray agents a local Ray would leave if the driver is
    killed with SIGKILL (no handler runs then). Ended when the driver ends normally."""
    try:
        proc = subprocess.Popen([sys.executable, "-m", "sweep.run.reaper", str(os.getpid())], stdin=subprocess.DEVNULL,
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
def child_subreaper():
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


def reassert_handlers() -> None:
    """Put the Python handler of each stop signal back at the C level. ray.shutdown's core worker resets
    SIGTERM to its default action without Python knowing (signal.getsignal still names our handler), so a
    SIGTERM during the clean-up after it killed the driver with no line (143) where SIGINT was noted."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not None:
            signal.signal(sig, handler)


def hold_signals(stop: StopSignals) -> None:
    """From here on the driver is stopping anyway: a further signal must not cut the clean-up short
    (it only records which signal came, when none had)."""
    signal.alarm(0)
    if not stop._previous:
        return

    def note(signum: int, frame: Any) -> None:
        stop.signum = stop.signum or signum

    for sig in STOP_SIGNALS:
        signal.signal(sig, note)
