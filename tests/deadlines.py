"""How long a test may wait: every deadline in the suite is a base figure times one factor.

The base figures are sized for a quiet 2-core machine with room to spare. On a slower or loaded machine set

    SWEEP_TEST_TIME_FACTOR=3 python -m pytest

and every deadline, every subprocess time-out and the per-test time limit (tests/conftest.py) grow by that
factor together. A deadline bounds a hang or a runaway; it is never a measurement: tests wait on a condition
until a deadline, never for a fixed time, and no test asserts how long something took beyond such a bound.
"""

from __future__ import annotations

import os
import time
from typing import Callable

FACTOR_VARIABLE = "SWEEP_TEST_TIME_FACTOR"


def time_factor() -> float:
    """The factor every deadline is multiplied by: $SWEEP_TEST_TIME_FACTOR, default 1; a clear error when it
    is not a positive number."""
    text = os.environ.get(FACTOR_VARIABLE, "1")
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not factor > 0 or factor == float("inf"):
        raise ValueError(f"{FACTOR_VARIABLE}={text!r} is not a positive number; set it to 1, 2, 3 ... or unset it")
    return factor


def scaled(seconds: float) -> float:
    """A deadline of `seconds` on a quiet machine, scaled for this one."""
    return seconds * time_factor()


def wait_until(condition: Callable[[], object], timeout: float, *,
               still_worth_waiting: Callable[[], bool] | None = None, interval: float = 0.1) -> bool:
    """Poll `condition` every `interval` seconds until it holds (True) or the scaled `timeout` passes (False).
    `still_worth_waiting` (e.g. "the driver is still running") ends the wait early with False when it turns
    false; the condition is checked once more then, so a process that met it and exited still counts."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        if condition():
            return True
        if still_worth_waiting is not None and not still_worth_waiting():
            return bool(condition())
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
