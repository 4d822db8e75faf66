"""A study's device-hour limit (the study file's `cost_limit`) during a run: what the study has spent, measured,
and whether the next trial still fits. The estimate before the run, the dry run's lines and the refusal of a
study whose estimate passes the limit are sweep.commands.cost_limit's.

    limit = CostLimit(spec, estimate)      # on the ledger (sweep.run.ledger.Ledger); estimate: a StudyEstimate
    limit.started(key); limit.ended(key, seconds, with_result)   # told by the trial events
    limit.allows(key)                      # False once the next trial would pass the limit

Spent device time is measured, never estimated: each attempt's wall time from the moment Tune started it to its
end, as the driver saw it, times the devices it held (`devices_per_trial`: resources.gpu, or 1 for a CPU trial),
recorded on the attempt's Optuna trial as the user attribute `device_seconds`. Every attempt counts, a failed or
interrupted one too (the device was held). An attempt whose driver died with it has no measurement and counts
nothing.

A trial's estimate is the dry run's (sweep.commands.cost, from the device's bench record) times its devices;
without a bench record, the mean device time the study's trials with a result have measured so far; before
any trial has, nothing (the limit then holds on measured time alone).

During the run the feed hands out the next trial only when

    spent + sum over running trials of max(their time so far, their estimate) + the next trial's estimate <= limit

so that the trials in flight are counted at what they will probably cost. When it does not, the feed hands out
nothing more, the trials in flight finish, and `sweep run` ends with exit code 4 and one line: the study is
resumable, and raising the limit and running the same command again goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sweep.spec.schema import StudySpec

DEVICE_SECONDS = "device_seconds"  # the Optuna user attribute of an attempt's measured device time
EXIT_COST_LIMIT = 4


def devices_per_trial(spec: StudySpec) -> float:
    """How many devices one trial holds: its GPUs (resources.gpu, 0.5 for half of one), or 1 on the CPU."""
    gpu = float(spec.resources.gpu)
    return gpu if gpu > 0 else 1.0


@dataclass
class StudyEstimate:
    """Spent device-seconds (measured) and the estimate of the trials still to run."""

    spent: float
    to_run: int
    to_run_seconds: float  # of the `to_run - unestimated` trials with an estimate
    unestimated: int = 0  # trials to run without an estimate (no bench record, nothing measured yet)
    caveat: str | None = None  # what the estimate assumes (an early-stopping scheduler's upper bound, tpe's values)
    per_trial: dict[str, float | None] = field(default_factory=dict)  # key -> device-seconds (None: unknown)
    fallback: float | None = None  # the measured mean device-seconds of a trial, when there is one
    planning: float | None = None  # tpe: the estimate of any trial it asks (at each parameter's first value)

    @property
    def total(self) -> float:
        return self.spent + self.to_run_seconds


def spent_seconds(attempts: dict[str, list[Any]] | None) -> tuple[float, list[float]]:
    """(device-seconds recorded on every attempt, those of the attempts that ended with a result): read from the
    Optuna attempts (key -> FrozenTrials) that sweep.records.resume.optuna_attempts gives."""
    from sweep.records.store import sweep_state
    from trainer.vocabulary import RESULT_STATUSES, TrialState

    total, with_result = 0.0, []
    for tries in (attempts or {}).values():
        for attempt in tries:
            seconds = attempt.user_attrs.get(DEVICE_SECONDS)
            if isinstance(seconds, (int, float)) and seconds >= 0:
                total += float(seconds)
                complete = sweep_state(attempt.state) is TrialState.COMPLETE
                if complete or attempt.user_attrs.get("status") in RESULT_STATUSES:
                    with_result.append(float(seconds))
    return total, with_result


def measured_only(spec: StudySpec) -> StudyEstimate:
    """What the study has spent (its Optuna attempts' device_seconds) with no estimate of what is left: a run
    started without one keeps its limit on measured time alone."""
    from sweep.records.resume import optuna_attempts

    spent, measured = spent_seconds(optuna_attempts(spec.name, spec.storage_url))
    fallback = sum(measured) / len(measured) if measured else None
    return StudyEstimate(spent, 0, 0.0, fallback=fallback)


class CostLimit:
    """The limit during a run: measured device time of the attempts, and whether the next trial fits."""

    def __init__(self, spec: StudySpec, estimate: StudyEstimate):
        self.spec = spec
        self.limit = float(spec.cost_limit or 0.0) * 3600
        self.devices = devices_per_trial(spec)
        self.spent = estimate.spent  # device-seconds of attempts ended before this run and in it
        self.estimates = dict(estimate.per_trial)
        self.planning = estimate.planning  # tpe: the estimate of any trial it asks
        self.measured = [] if estimate.fallback is None else [estimate.fallback]
        self.running: dict[str, float] = {}  # key -> time.monotonic() when Tune started it
        self.stopped: tuple[float, float] | None = None  # (committed, next estimate) when the limit stopped the feed

    def estimate(self, key: str) -> float:
        """The trial's estimated device-seconds: the bench's, else the mean measured so far, else 0."""
        seconds = self.estimates.get(key)
        if seconds is None:
            seconds = self.planning
        if seconds is None and self.measured:
            seconds = sum(self.measured) / len(self.measured)
        return seconds or 0.0

    def started(self, key: str) -> None:
        self.running.setdefault(key, time.monotonic())

    def ended(self, key: str, seconds: float, with_result: bool = False) -> None:
        """The attempt of `key` ended, having spent `seconds` device-seconds (as measured by the trial events)."""
        self.running.pop(key, None)
        self.spent += seconds
        if with_result:
            self.measured.append(seconds)

    def committed(self) -> float:
        """Spent device-seconds plus the running trials at max(their time so far, their estimate)."""
        now = time.monotonic()
        return self.spent + sum(max((now - began) * self.devices, self.estimate(key))
                                for key, began in self.running.items())

    def allows(self, key: str | None) -> bool:
        """Whether the trial `key` (None: a tpe trial not asked yet) may start; the first refusal is kept in
        `stopped`."""
        if self.stopped is not None:
            return False
        committed = self.committed()
        following = self.estimate(key) if key is not None else (self.planning or self.estimate(""))
        if committed + following <= self.limit:
            return True
        self.stopped = (committed, following)
        return False

    def stop_line(self, not_started: int) -> str:
        """The run's last line when the limit stopped it."""
        following = self.stopped[1] if self.stopped else 0.0
        where = self.spec.path or "the study file"
        spent, next_one = f"{self.spent / 3600:.3g} device-hours ({self.spent:.0f} s)", f"{following / 3600:.3g}"
        return (f"stopped on the cost limit: {spent} spent of the {self.spec.cost_limit:.3g} allowed, and the next "
                f"trial ({next_one} device-hours estimated) would pass it; {not_started} trials not started: raise "
                f"cost_limit in {where} and run the same command to finish them")
