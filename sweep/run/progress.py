"""Live progress of a sweep in the terminal: one compact line per change.

    [00:01:12] done 3f2a9c1b7e20 ok dev_stsb=71.20 | 3/8 ended (1 failed), 2 running \
        | best dev_stsb 71.20 (3f2a9c1b7e20) | ETA 00:02:30

(one line on the terminal; wrapped here)

The ETA is the work left shared by the trials that run at once: each trial not started yet costs the mean
duration of the ended trials (start to end), each running trial what it has left of that mean, and the sum
is shared by as many slots as the run has had trials running at once; never less than one trial's mean
while a trial waits, nor than what a running trial has left. The time before the first trial started
(Ray's start, the node checks) is no trial's duration and does not count.

A score is shown with two decimals, or with as many more as it takes to tell it from the score it is
compared with (the best it replaced, or the best it did not beat): two different values never print alike.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Callable, TextIO

from sweep.text import shorten
from trainer.vocabulary import TrialState

MOST_DECIMALS = 6  # beyond this two scores count as equal on the terminal


def clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "--:--:--"
    seconds = int(round(max(0.0, seconds)))
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def distinct(value: float, other: float | None, least: int = 2) -> str:
    """`value` with `least` decimals, or with the fewest more (up to MOST_DECIMALS) that make its text
    differ from `other`'s at the same decimals; `other` None or equal: `least` decimals.

    >>> distinct(79.8213, 79.8207), distinct(79.8213, 70.0), distinct(79.82, None)
    ('79.8213', '79.82', '79.82')
    """
    decimals = least
    if other is not None and math.isfinite(other) and other != value:
        while decimals < MOST_DECIMALS and f"{value:.{decimals}f}" == f"{other:.{decimals}f}":
            decimals += 1
    return f"{value:.{decimals}f}"


def stdout_to_devnull() -> None:
    """Point file descriptor 1 at /dev/null once stdout's reader has gone away (a closed pipe), so that
    later writes, the driver's other prints and the interpreter's final flush included, cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class Progress:
    """Counts trials and prints one line for each trial that starts or ends.

    `clock` gives the time in seconds (default time.monotonic); every duration and the ETA are read from it.
    """

    def __init__(self, total: int, metric: str, goal: str, skipped: int = 0, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.total = total  # trials this run has to end (skipped ones not included)
        self.metric = metric
        self.goal = goal
        self.skipped = skipped
        self.stream = stream or sys.stdout
        self.clock = clock
        self.started_at = clock()
        self.running: dict[str, float] = {}  # key -> when it started
        self.ended = 0
        self.failed = 0
        self.timed = 0  # ended trials whose start this run saw, and their durations' sum
        self.timed_seconds = 0.0
        self.most_at_once = 0  # the most trials running at once so far
        self.best: tuple[float, str] | None = None
        self.replaced: float | None = None  # the best value that the current best replaced

    def offer_best(self, key: str, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        if self.best is None or (value > self.best[0] if self.goal == "maximize" else value < self.best[0]):
            self.replaced = None if self.best is None else self.best[0]
            self.best = (value, key)

    def trial_started(self, key: str, detail: str = "") -> None:
        self.running[key] = self.clock()
        self.most_at_once = max(self.most_at_once, len(self.running))
        self._line(f"start {key}{' ' + detail if detail else ''}")

    def trial_ended(self, key: str, state: str, status: str | None, value: float | None,
                    reason: str | None = None) -> None:
        started = self.running.pop(key, None)
        if started is not None:
            self.timed += 1
            self.timed_seconds += max(0.0, self.clock() - started)
        self.ended += 1
        if state != TrialState.COMPLETE:
            self.failed += state == TrialState.FAIL
        self.offer_best(key, value)
        if state == TrialState.COMPLETE:
            what = f"done  {key} {status}"
            if value is not None:
                what += f" {self.metric}={self._score_text(key, value)}"
        else:
            what = f"{state.lower():5s} {key} {status or ''}".rstrip()
            if reason:
                what += f": {shorten(reason, 160)}"
        self._line(what)

    def trial_interrupted(self, key: str) -> None:
        self.running.pop(key, None)

    def elapsed(self) -> float:
        return self.clock() - self.started_at

    def eta(self) -> float | None:
        """Seconds until the last trial ends (module docstring); None before a trial has ended."""
        remaining = self.total - self.ended
        if remaining <= 0:
            return 0.0
        if self.timed == 0:
            return None
        mean = self.timed_seconds / self.timed
        now = self.clock()
        waiting = max(0, remaining - len(self.running))
        left = [max(0.0, mean - (now - started)) for started in self.running.values()]
        shared = (waiting * mean + sum(left)) / max(1, self.most_at_once)
        return max(shared, mean if waiting else 0.0, max(left, default=0.0))

    def status_text(self) -> str:
        failed = f" ({self.failed} failed)" if self.failed else ""
        text = f"{self.ended}/{self.total} ended{failed}, {len(self.running)} running"
        if self.best is not None:
            text += f" | best {self.metric} {distinct(self.best[0], self.replaced)} ({self.best[1]})"
        return text + f" | ETA {clock(self.eta())}"

    def _score_text(self, key: str, value: float) -> str:
        """An ended trial's score: told apart from the best it replaced, or from the best it did not beat."""
        if self.best is not None and self.best[1] == key:
            return distinct(value, self.replaced)
        return distinct(value, None if self.best is None else self.best[0])

    def _line(self, what: str) -> None:
        self.say(f"[{clock(self.elapsed())}] {what} | {self.status_text()}")

    def say(self, text: str) -> None:
        try:
            print(text, file=self.stream, flush=True)
        except BrokenPipeError:
            # The reader went away (`sweep run ... | head`). The sweep goes on without its terminal lines:
            # the results go to disk and Optuna as before, and `sweep status` shows them.
            if self.stream is not sys.stdout:
                raise
            stdout_to_devnull()
