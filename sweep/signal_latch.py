"""Stop signals that come before a command has its own handling: recorded, raised, and honoured later if lost.

`sweep` installs this first thing (sweep/cli.py `main`), before anything slow is imported. A SIGINT,
SIGTERM or SIGHUP is recorded here and raised in the main thread as a KeyboardInterrupt (`Signalled`),
which stops the command at once with "interrupted by SIG...; run the same command to go on" and 128 + N.

Some code swallows that exception, and the signal was lost: `import ray._raylet` (imported with
sweep.run.runner) probes the optional module `backports_abc` from Cython, which clears any error of the
import, KeyboardInterrupt included; a Ctrl-C there went unseen and every trial ran. So the record
stays until the command honours it: `sweep run` calls `honour()` after its imports (raising the signal
again), and sweep.run.stopping.StopSignals `take()`s it when it is installed (the run then stops as if the
signal had come to it).

    install()            # the handlers; the first stop signal is kept until taken
    honour()             # raise Signalled for a recorded signal (after code that may have swallowed it)
    take() -> int | None # the recorded signal, now handled by the caller
"""

from __future__ import annotations

import signal
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_recorded: int | None = None


class Signalled(KeyboardInterrupt):
    """A stop signal, raised where the main thread is (SIGINT as Python's own KeyboardInterrupt would be)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def record_and_raise(signum: int, frame: Any) -> None:
    """The latch's handler for every stop signal (what `install` puts in place)."""
    global _recorded
    if _recorded is None:
        _recorded = signum
    raise Signalled(signum)


def install() -> None:
    """Record and raise every stop signal from now on (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        signal.signal(sig, record_and_raise)


def recorded() -> int | None:
    """The first stop signal since the last `take()`, or None."""
    return _recorded


def take() -> int | None:
    """The recorded signal (None if none), cleared: whoever takes it stops the command for it."""
    global _recorded
    signum, _recorded = _recorded, None
    return signum


def honour() -> None:
    """Raise the recorded signal as Signalled: called after code that may have swallowed it (an import)."""
    if _recorded is not None:
        raise Signalled(_recorded)
