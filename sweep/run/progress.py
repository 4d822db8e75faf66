"""Live progress of a sweep in the terminal: one compact line per change.

    [00:01:12] done 3f2a9c1b7e20 ok dev_stsb=71.20 | 3/8 ended (1 failed), 2 running \
        | best dev_stsb 71.20 (3f2a9c1b7e20) | ETA 00:02:30

(one line on the terminal; wrapped here)
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TextIO

from sweep.text import shorten


def clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "--:--:--"
    seconds = int(round(max(0.0, seconds)))
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def stdout_to_devnull() -> None:
    """Point file descriptor 1 at /dev/null once stdout's reader has gone away (a closed pipe), so that
    later writes, the driver's other prints and the interpreter's final flush included, cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class Progress:
    """Counts trials and prints one line for each trial that starts or ends."""

    def __init__(self, total: int, metric: str, goal: str, skipped: int = 0, stream: TextIO | None = None):
        self.total = total  # trials this run has to end (skipped ones not included)
        self.metric = metric
        self.goal = goal
        self.skipped = skipped
        self.stream = stream or sys.stdout
        self.started_at = time.monotonic()
        self.running: set[str] = set()
        self.ended = 0
        self.failed = 0
        self.best: tuple[float, str] | None = None

    def offer_best(self, key: str, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        if self.best is None or (value > self.best[0] if self.goal == "maximize" else value < self.best[0]):
            self.best = (value, key)

    def trial_started(self, key: str, detail: str = "") -> None:
        self.running.add(key)
        self._line(f"start {key}{' ' + detail if detail else ''}")

    def trial_ended(self, key: str, state: str, status: str | None, value: float | None,
                    reason: str | None = None) -> None:
        self.running.discard(key)
        self.ended += 1
        if state != "COMPLETE":
            self.failed += state == "FAIL"
        self.offer_best(key, value)
        if state == "COMPLETE":
            what = f"done  {key} {status} {self.metric}={value:.2f}" if value is not None else f"done  {key} {status}"
        else:
            what = f"{state.lower():5s} {key} {status or ''}".rstrip()
            if reason:
                what += f": {shorten(reason, 160)}"
        self._line(what)

    def trial_interrupted(self, key: str) -> None:
        self.running.discard(key)

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def eta(self) -> float | None:
        remaining = self.total - self.ended
        if remaining <= 0:
            return 0.0
        if self.ended == 0:
            return None
        return self.elapsed() / self.ended * remaining

    def status_text(self) -> str:
        failed = f" ({self.failed} failed)" if self.failed else ""
        text = f"{self.ended}/{self.total} ended{failed}, {len(self.running)} running"
        if self.best is not None:
            text += f" | best {self.metric} {self.best[0]:.2f} ({self.best[1]})"
        return text + f" | ETA {clock(self.eta())}"

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


