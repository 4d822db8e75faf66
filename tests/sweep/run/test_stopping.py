"""sweep.run.stopping.StopSignals in this process: the first stop signal asks for a clean stop and says how to stop
at once; a second one ends the wait (StopNow). The end-to-end cases, with Ray and Tune, are in tests/e2e/test_stop.py:
there Tune's own stop usually ends the run before a long grace period would, so the second signal's effect is
checked here, where nothing else can end the wait."""

from __future__ import annotations

import math
import os
import signal

import pytest


@pytest.mark.parametrize("signame, again", [
    ("SIGTERM", "send SIGTERM again"),  # `kill PID`, Slurm's time limit
    ("SIGINT", "press Ctrl-C again"),  # Ctrl-C in a terminal
    ("SIGHUP", "send SIGHUP again"),
])
def test_the_first_signal_asks_to_stop_and_the_second_stops_at_once(signame, again, capfd):
    from sweep.run.stopping import STOP_GRACE_S, StopNow, StopSignals

    signum = getattr(signal, signame)
    stop = StopSignals()
    with stop.installed():
        os.kill(os.getpid(), signum)  # handled here: the first asks for a clean stop, and raises nothing
        assert stop.requested and stop.exit_code == 128 + signum
        assert 0 < signal.alarm(0) <= math.ceil(STOP_GRACE_S)  # the grace period's alarm was armed
        with pytest.raises(StopNow):
            os.kill(os.getpid(), signum)
    assert capfd.readouterr().out == (f"stopping on {signame}: the running trials get up to {STOP_GRACE_S:.0f} s "
                                      f"to end; {again} to stop at once\n")


def test_without_a_stdout_the_stop_goes_on_without_its_line(monkeypatch):
    import sys

    from sweep.run.stopping import StopSignals

    monkeypatch.setattr(sys, "stdout", None)  # pythonw, or a closed stream: no fileno
    stop = StopSignals()
    with stop.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
