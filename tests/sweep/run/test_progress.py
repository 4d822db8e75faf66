"""The progress lines of `sweep run` (sweep.run.progress.Progress), fed synthetic trial starts and ends and
clock values: no Ray, no trainer, no real time."""

from __future__ import annotations

import io
import re

import pytest

from sweep.run.progress import Progress


class FakeClock:
    """A clock the test sets: Progress reads the time only through it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def seconds(text: str) -> int:
    hours, minutes, secs = (int(part) for part in text.split(":"))
    return hours * 3600 + minutes * 60 + secs


def equal_trials_run(trials: int, slots: int, duration: float, first_start: float) -> list[tuple[float, str, int]]:
    """The events of a run of equal trials, `slots` at a time, as Tune orders them: (time, start|end, trial),
    an end before the start it makes room for."""
    events = []
    for trial in range(trials):
        start = first_start + (trial // slots) * duration
        events += [(start, "start", trial), (start + duration, "end", trial)]
    return sorted(events, key=lambda event: (event[0], event[1] == "start", event[2]))


@pytest.mark.parametrize("trials, slots, duration, first_start", [
    (8, 2, 100.0, 40.0),  # two one-CPU trials at once on two cores; Ray took 40 s to start
    (10, 2, 60.3, 20.0),  # the reported study: 10 trials of ~60 s two at a time
    (8, 1, 100.0, 40.0),
    (12, 4, 30.0, 90.0),
    (3, 2, 100.0, 5.0),  # fewer trials left than slots
])
def test_the_first_eta_of_a_study_of_equal_trials_is_near_the_time_left(trials, slots, duration, first_start):
    clock = FakeClock()
    stream = io.StringIO()
    progress = Progress(trials, "dev_stsb", "maximize", stream=stream, clock=clock)  # made before Ray starts
    events = equal_trials_run(trials, slots, duration, first_start)
    last_end = max(time for time, _, _ in events)
    first_eta = None
    for time, kind, trial in events:
        clock.now = time
        if kind == "start":
            progress.trial_started(f"t{trial}")
            continue
        progress.trial_ended(f"t{trial}", "COMPLETE", "ok", 70.0)
        if first_eta is None:
            line = stream.getvalue().splitlines()[-1]
            first_eta = seconds(re.search(r"ETA (\d\d:\d\d:\d\d)$", line).group(1))
            time_left = last_end - time
    assert time_left / 1.5 <= first_eta <= time_left * 1.5, (first_eta, time_left)
    assert progress.eta() == 0.0


def test_no_eta_before_a_trial_ends_and_an_interrupted_trial_counts_no_duration():
    clock = FakeClock()
    stream = io.StringIO()
    progress = Progress(4, "dev_stsb", "maximize", stream=stream, clock=clock)
    clock.now = 10.0
    progress.trial_started("a")
    assert stream.getvalue().rstrip().endswith("ETA --:--:--")
    clock.now = 110.0
    progress.trial_ended("a", "COMPLETE", "ok", 70.0)
    assert progress.eta() == pytest.approx(300.0)  # three trials of 100 s left, one at a time
    progress.trial_started("b")
    clock.now = 115.0
    progress.trial_interrupted("b")  # never ends: no duration from it
    assert progress.eta() == pytest.approx(300.0)


def test_a_changed_best_is_shown_with_the_decimals_that_tell_it_from_the_one_it_replaced():
    clock = FakeClock()
    stream = io.StringIO()
    progress = Progress(3, "dev_stsb", "maximize", stream=stream, clock=clock)
    for key, value in (("a", 79.8207), ("b", 79.8213), ("c", 79.8209)):
        progress.trial_started(key)
        progress.trial_ended(key, "COMPLETE", "ok", value)
    lines = stream.getvalue().splitlines()
    ended = [line for line in lines if "] done" in line]
    bests = [re.search(r"best dev_stsb (\S+) \((\w)\)", line).groups() for line in ended]
    assert bests == [("79.82", "a"), ("79.8213", "b"), ("79.8213", "b")]
    assert len({text for text, _ in bests[:2]}) == 2  # a change of best never reads as the same number
    assert "done  b ok dev_stsb=79.8213" in ended[1]
    assert "done  c ok dev_stsb=79.8209" in ended[2]  # below the best, and told apart from it
    progress = Progress(2, "dev_stsb", "maximize", stream=io.StringIO(), clock=clock)
    progress.trial_ended("x", "COMPLETE", "ok", 71.2)
    progress.trial_ended("y", "COMPLETE", "ok", 75.0)
    assert "best dev_stsb 75.00 (y)" in progress.status_text()  # two decimals when they tell the values apart
