"""The Tune trial schedulers a sweep runs under: FIFO (no `scheduler:` in the study) and ASHA.

Owns: `trial_scheduler(spec, configs)`, which builds the scheduler, and the one change we make to Tune's
own schedulers. Tune's FIFOScheduler (ASHA inherits it) picks "the first PENDING trial" to run next.
With worker reuse (`reuse_workers`, Tune's actor reuse), when a trial ends and its worker is free, Tune
gives that worker to the trial the scheduler picked and kills the worker process that was still
starting for it (TuneController._maybe_reuse_cached_actor). The next trial then starts a new worker,
which the next free worker pre-empts in turn. Where a worker takes longer to start than a trial runs, a
study of short trials keeps few workers and the machine busy with processes started and killed
(bench/trial_overhead.py measures the driver's cost per trial with and without worker reuse).

The scheduler below never picks a trial itself (`choose_trial_to_run` returns None). Tune then serves the
pending trials in their order, and a trial whose worker is starting keeps it. A free worker goes to a
trial that has none yet: the next trial the feed hands out. Only when no such trial comes does Tune's
own fallback give the free worker to a waiting trial, as at the end of a study.
"""

from __future__ import annotations

from typing import Any, Callable

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from trainer.errors import UserError


class _KeepStartingWorkers:
    """Mixed into a Tune scheduler: leave the choice of the next trial to Tune's pending-trial order."""

    def choose_trial_to_run(self, tune_controller: Any) -> None:
        return None


class FifoKeepingStartingWorkers(_KeepStartingWorkers, FIFOScheduler):
    """Tune's FIFO order; a trial whose worker is starting keeps it (module docstring)."""


class AshaKeepingStartingWorkers(_KeepStartingWorkers, ASHAScheduler):
    """Tune's ASHA (its stopping rule unchanged); a trial whose worker is starting keeps it."""


def trial_scheduler(sched: Any, configs: Callable[[], list[dict[str, Any]]], metric: str) -> FIFOScheduler:
    """The scheduler of a study: ASHA on `metric` as its `scheduler:` section (`sched`) says, else FIFO.

    `configs()`: the planned trials' configs, read for ASHA only (its max_t is the most evaluations one of
    them makes).
    """
    if sched is None:
        return FifoKeepingStartingWorkers()
    if sched.type != "asha":
        raise UserError(f"scheduler.type '{sched.type}': expected asha")
    max_t = sched.max_t or max(evaluations(c) for c in configs())
    return AshaKeepingStartingWorkers(
        time_attr="training_iteration", metric=metric, mode="max", max_t=max(max_t, sched.grace_period),
        grace_period=sched.grace_period, reduction_factor=sched.reduction_factor,
        stop_last_trials=False,  # the trainer must reach its final test evaluation
    )


def evaluations(config: dict[str, Any]) -> int:
    """How many dev evaluations a trial of `config` reports (ASHA's time unit): its plan's (trainer.run_plan), or
    UNKNOWN_EVALUATIONS when the run's length cannot be told here (no corpus installed)."""
    from trainer.run_plan import RunPlan

    return RunPlan.of(config).evaluations or UNKNOWN_EVALUATIONS


UNKNOWN_EVALUATIONS = 100  # ASHA's max_t for runs of unknown length
