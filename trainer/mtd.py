"""Maximum traceable distance (MoCoSE section 5.7, eq. 4), by formula and as measured
(docs/science/traceable-distance.md).

    d_trace = 1 / (1 - eta) + K / B

The first term is the mean age, in optimiser steps, of the online weights inside the EMA target
(Appendix A.12): with theta_t <- eta*theta_t + (1-eta)*theta_o, the weight of the online state from
s steps ago is (1-eta)*eta^s, whose mean s is eta/(1-eta); the paper counts 1/(1-eta) (s + 1). The second
term is the age in steps of the oldest key in the negative queue: B keys enter per step, so the key at
position K-1 was pushed K/B steps ago.

Two choices the paper leaves open are explicit here:
- `eta_choice` under a cosine EMA schedule: "initial" (eta0), "final" (eta1), or "mean" (the mean of
  eta over the run's steps, the default everywhere: the trainer, the dry run and the analysis).
  A constant schedule gives the same eta for all three.
- `k_choice` under queue slicing: "oldest" (K = the oldest position used, i.e. the largest slice end;
  the default, matching "age of the oldest key") or "size" (the whole queue size, ignoring slices).

`TraceableDistanceMeter` measures both terms during a run instead
(docs/science/traceable-distance.md#as-measured-during-a-run).

>>> round(traceable_distance(0.85, 512, 64), 2)
14.67
>>> traceable_distance(0.85, 1024, 256, slices=[(0, 256), (768, 1024)])  # oldest used position 1024
10.666666666666666
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from trainer.data import planned_steps
from trainer.method_rules import traces_distance
from trainer.schedules import RELEASED_SCHEDULE_STEPS, ema_schedule_step, mean_cosine_eta
from trainer.slices import parse_slices

if TYPE_CHECKING:  # numpy loads with the meter's first observation: planning a study needs none
    import numpy as np

ETA_CHOICES = ("initial", "final", "mean")
K_CHOICES = ("oldest", "size")


def traceable_distance(
    ema_decay: float,
    queue_size: int,
    batch_size: int,
    slices: Sequence[tuple[int, int]] | None = None,
    k_choice: str = "oldest",
) -> float:
    """d_trace = 1/(1-eta) + K/B, with K the oldest queue position the loss uses (see module doc)."""
    if not 0 <= ema_decay < 1:
        raise ValueError(f"ema_decay must be in [0, 1), got {ema_decay}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if k_choice not in K_CHOICES:
        raise ValueError(f"k_choice must be one of {K_CHOICES}, got {k_choice!r}")
    k = queue_size
    if slices and k_choice == "oldest":
        k = max(end for _, end in slices)
    return 1.0 / (1.0 - ema_decay) + k / batch_size


def effective_eta(
    schedule: str,
    decay: float,
    decay_end: float,
    total_steps: int | None = None,
    schedule_steps: int | None = None,
    eta_choice: str = "mean",
    hold: bool = True,
    released_counter: bool = False,
) -> float:
    """The eta that enters d_trace for a constant or cosine schedule (see module doc); `released_counter`:
    the mean runs over the etas the released code's updates use (`trainer.schedules.ema_schedule_step`)."""
    if schedule == "constant":
        return decay
    if schedule != "cosine":
        raise ValueError(f"unknown EMA schedule {schedule!r}")
    if eta_choice == "initial":
        return decay
    if eta_choice == "final":
        return decay_end
    if eta_choice != "mean":
        raise ValueError(f"eta_choice must be one of {ETA_CHOICES}, got {eta_choice!r}")
    if not total_steps:
        raise ValueError("eta_choice='mean' under a cosine schedule needs the run's total steps")
    period = schedule_steps or total_steps
    # the mean over the updates after steps 1..total_steps, in closed form: planning never pays per step
    first, last = ema_schedule_step(1, released_counter), ema_schedule_step(total_steps, released_counter)
    return mean_cosine_eta(first, last, decay, decay_end, period, hold)


def config_traceable_distance(
    config: dict[str, Any],
    total_steps: int | None = None,
    eta_choice: str = "mean",
    k_choice: str = "oldest",
    steps_run: int | None = None,
) -> float | None:
    """d_trace of a resolved trainer config dict; None for methods without an EMA target and queue, and
    when the run length the mean needs is unknown (`total_steps` None and no `max_steps`).

    `total_steps` is the run's planned length: the cosine period T unless the config sets `schedule_steps`
    (or the released schedule's own T). `steps_run`, for a run that ended before its planned steps
    (diverged, collapsed, stopped by a scheduler), is how many it took: the mean then runs over the etas of
    those steps, each still on the planned period. Configs written before the `hold_after_schedule` key read
    as the paper's schedule (held at eta1).
    """
    if not traces_distance(config.get("method")):
        return None
    queue = config["queue"]
    slices = parse_slices(queue.get("slices"), queue["size"]) if queue.get("slices") else None
    eta = config_eta(config, total_steps, eta_choice, steps_run)
    if eta is None or eta >= 1.0:
        return None  # unknown, or eta1 = 1.0 (the released schedule's end): the first term is unbounded
    return traceable_distance(eta, queue["size"], config["batch_size"], slices, k_choice)


def config_eta(config: dict[str, Any], total_steps: int | None = None, eta_choice: str = "mean",
               steps_run: int | None = None) -> float | None:
    """The eta that enters d_trace for a resolved MoCoSE config dict (`config_traceable_distance`'s
    arguments); None when a cosine mean needs a length that is unknown or a run that took no step."""
    ema = config["ema"]
    total_steps = total_steps or config.get("max_steps")
    period = ema.get("schedule_steps")
    hold = ema.get("hold_after_schedule")
    released = (config.get("released") or {}).get("ema_schedule")
    if period is None and released:
        period = RELEASED_SCHEDULE_STEPS
    steps = total_steps if steps_run is None else min(steps_run, total_steps or steps_run)
    if ema["schedule"] == "cosine" and eta_choice == "mean" and (not steps or not (period or total_steps)):
        return None
    return effective_eta(ema["schedule"], ema["decay"], ema["decay_end"], steps, period or total_steps, eta_choice,
                         hold=True if hold is None else hold, released_counter=bool(released))


class TraceableDistanceMeter:
    """The traceable distance measured during a run, without host syncs
    (docs/science/traceable-distance.md#as-measured-during-a-run).

    EMA age: with a_t the mean age (steps) of the online weights inside the target after t updates,
    `a_t = eta_t * (a_{t-1} + 1)`, a_0 = 0 (the target starts as a copy). The target the loss sees at step
    t has had t-1 updates; in the paper's convention (1/(1-eta) for a constant eta) its age is a_{t-1} + 1.
    Queue age: for every real key the loss uses at step t, t minus the step it was pushed.
    Measured distance: EMA age + the oldest queue age used, averaged over the steps after the queue
    first fills (every position the loss reads holds a real key).

    >>> import numpy as np
    >>> meter = TraceableDistanceMeter()
    >>> for step in range(1, 201):
    ...     meter.observe(step, queue_ages=np.array([1.0, 2.0]), queue_full=True)
    ...     meter.ema_updated(0.5)
    >>> round(meter.summary()["measured"], 3)  # 1/(1-0.5) + 2, less the first steps' shorter EMA age
    3.99
    """

    def __init__(self) -> None:
        self.ema_age = 0.0  # a_t after the updates so far
        self.steps = 0  # steps counted (after the queue first filled)
        self.ema_sum = self.measured_sum = 0.0
        self.age_sum = 0.0
        self.age_count = 0
        self.age_max: float | None = None
        self.last_oldest: float | None = None

    def ema_updated(self, eta: float) -> None:
        """Call after each EMA update with the eta it used."""
        self.ema_age = eta * (self.ema_age + 1.0)

    def observe(self, step: int, queue_ages: np.ndarray | None, queue_full: bool) -> None:
        """Call at each step before the EMA update, with the ages of the queue keys the loss reads
        (NaN for random keys; None or empty for no queue) and whether every position it reads is real."""
        import numpy as np

        real = queue_ages[~np.isnan(queue_ages)] if queue_ages is not None and len(queue_ages) else np.empty(0)
        self.last_oldest = float(real.max()) if real.size else None
        if not queue_full:
            return
        ema_age = self.ema_age + 1.0  # paper convention
        oldest = self.last_oldest or 0.0
        self.steps += 1
        self.ema_sum += ema_age
        self.measured_sum += ema_age + oldest
        if real.size:
            self.age_sum += float(real.sum())
            self.age_count += int(real.size)
            self.age_max = oldest if self.age_max is None else max(self.age_max, oldest)

    def current(self) -> dict[str, float | None]:
        """Values for metrics.jsonl at an evaluation: the EMA age now, the last oldest age, the running mean."""
        return {"ema_age": round(self.ema_age + 1.0, 4),
                "queue_age_max": self.last_oldest,
                "mtd_measured": round(self.measured_sum / self.steps, 4) if self.steps else None}

    def summary(self) -> dict[str, float | None]:
        n = self.steps
        return {
            "ema_age": self.ema_sum / n if n else None,
            "queue_age_mean": self.age_sum / self.age_count if self.age_count else None,
            "queue_age_max": self.age_max,
            "measured": self.measured_sum / n if n else None,
            "measured_steps": n,
        }


def planned_traceable_distance(config: dict[str, Any]) -> float | None:
    """d_trace by formula of a resolved run config before it runs, exactly as the trainer will report it
    (eta averaged over the run's planned steps, read from the corpus; `trainer.data.planned_steps`).
    The dry run and the study expansion use it; None when undefined or the corpus is not installed."""
    if not traces_distance(config.get("method")):
        return None
    total_steps = None
    if config["ema"]["schedule"] == "cosine":
        total_steps = planned_steps(config)
    return config_traceable_distance(config, total_steps)
