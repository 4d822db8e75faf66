"""sweep.signal_latch: a stop signal before `sweep run` has its own handling is raised, kept, and honoured
if the exception was swallowed (the end-to-end cases, with Ray's import, are in tests/e2e/test_stop.py)."""

from __future__ import annotations

import os
import signal

import pytest

from sweep import signal_latch


@pytest.fixture()
def latch():
    before = {sig: signal.getsignal(sig) for sig in signal_latch.STOP_SIGNALS}
    signal_latch.take()
    signal_latch.install()
    yield signal_latch
    signal_latch.take()
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_is_raised_and_kept_until_taken(latch, signame):
    signum = getattr(signal, signame)
    with pytest.raises(latch.Signalled) as raised:
        os.kill(os.getpid(), signum)
    assert raised.value.signum == signum and isinstance(raised.value, KeyboardInterrupt)
    # code that swallowed it (Cython's probe of an optional module) does not make it go away
    with pytest.raises(latch.Signalled):
        latch.honour()
    assert latch.take() == signum and latch.recorded() is None
    latch.honour()  # nothing left to honour


def test_the_first_signal_is_the_one_kept(latch):
    for signum in (signal.SIGTERM, signal.SIGINT):
        with pytest.raises(latch.Signalled):
            os.kill(os.getpid(), signum)
    assert latch.take() == signal.SIGTERM


def test_the_run_takes_a_signal_that_came_before_its_handlers(latch):
    from sweep.run.stopping import StopSignals

    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except latch.Signalled:
        pass  # swallowed, as `import ray._raylet` does
    stop = StopSignals()
    with stop.installed():
        assert stop.requested and stop.exit_code == 143
        assert latch.recorded() is None  # the run owns it now: it prints the line and exits 143
    assert signal.getsignal(signal.SIGTERM) == latch.record_and_raise  # the latch is back after the run


def test_the_cli_says_which_signal_stopped_it(latch, capsys, monkeypatch):
    from sweep import cli
    from sweep.commands import status

    def signalled_command(study):
        os.kill(os.getpid(), signal.SIGHUP)

    monkeypatch.setattr(status, "show_status", signalled_command)
    assert cli.main(["status", "x.yaml"]) == 128 + signal.SIGHUP
    assert capsys.readouterr().err == "sweep: interrupted by SIGHUP; run the same command to go on\n"
