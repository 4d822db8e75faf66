"""A study's device-hour limit (the study file's `cost_limit`) before it runs: the estimate of what it has left
(sweep.commands.cost, from the device's bench record) on top of what it has spent (measured:
sweep.run.cost_limit), the dry run's `limit:` lines, and the refusal of a study whose estimate passes its limit.

    estimate = study_estimate(spec)        # a sweep.run.cost_limit.StudyEstimate
    limit_lines(spec, estimate)            # the dry run's lines: the limit, whether the estimate fits and by how much
    check_cost_limit(spec, estimate)       # a UserError (exit 2) when the estimate passes the limit

A trial's estimate is the dry run's times the devices it holds; without a bench record, the mean device time the
study's trials with a result have measured so far; before any has, none (the run then keeps the limit on measured
time alone).
"""

from __future__ import annotations

import math
from typing import Any

from sweep.commands.cost import study_cost_lines
from sweep.records.store import sweep_state
from sweep.run.cost_limit import StudyEstimate, devices_per_trial, spent_seconds
from sweep.spec.schema import StudySpec, Trial
from trainer.errors import UserError
from trainer.vocabulary import TrialState


def trial_estimates(spec: StudySpec, configs: list[dict[str, Any]]) -> list[float | None]:
    """Each config's estimated device-seconds from the device's bench record (sweep.commands.cost), None where
    there is none."""
    _, costs = study_cost_lines(spec, configs)
    devices = devices_per_trial(spec)
    return [None if cost.seconds is None else cost.seconds * devices for cost in costs]


def study_estimate(spec: StudySpec) -> StudyEstimate:
    """What the study has spent and what the trials `sweep run` would run now are estimated to cost."""
    from sweep.records.resume import is_done, optuna_attempts, trial_states
    from sweep.spec.expand import expansion, planning_config

    attempts = optuna_attempts(spec.name, spec.storage_url)
    spent, measured = spent_seconds(attempts)
    fallback = sum(measured) / len(measured) if measured else None
    if not spec.search.expands:  # tpe: its trials are asked during the run, each estimated at the first values
        done = sum(1 for tries in (attempts or {}).values()
                   if any(is_done(_state(a)) for a in tries))
        left = max(0, spec.search.total_trials(0, spec.budget, len(spec.seeds)) - done)
        (one,) = trial_estimates(spec, [planning_config(spec)])
        one = one if one is not None else fallback
        per_trial: dict[str, float | None] = {}
        estimated = 0.0 if one is None else one * left
        bound = "at each parameter's first value (TPE chooses the values during the run)"
        return StudyEstimate(spent, left, estimated, left if one is None else 0, bound, per_trial, fallback, one)
    states = trial_states(spec, by_key=attempts) or {}
    trials: list[Trial] = [t for t in expansion(spec).trials if not is_done(states.get(t.key))]
    seconds = trial_estimates(spec, [t.config for t in trials]) if trials else []
    per_trial = {t.key: (s if s is not None else fallback) for t, s in zip(trials, seconds)}
    known = [s for s in per_trial.values() if s is not None]
    bound = f"an upper bound: the {spec.scheduler.type} scheduler stops trials early" if spec.scheduler else None
    return StudyEstimate(spent, len(trials), sum(known), len(trials) - len(known), bound, per_trial, fallback)


def _state(attempt: Any) -> str:
    status, state = attempt.user_attrs.get("status"), sweep_state(attempt.state)
    return state if state is not TrialState.FAIL else f"{state}/{status}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g}"


def _estimate_text(estimate: StudyEstimate) -> str:
    parts = f"{_hours(estimate.to_run_seconds)} for the {estimate.to_run} trials to run"
    if estimate.spent:
        parts += f" + {_hours(estimate.spent)} spent"
    text = f"{_hours(estimate.total)} device-hours ({parts})"
    if estimate.caveat:
        text += f", {estimate.caveat}"
    return text


def limit_lines(spec: StudySpec, estimate: StudyEstimate) -> list[str]:
    """The dry run's `limit:` lines: the limit, whether the estimate fits it and by how much."""
    limit = spec.cost_limit * 3600
    if estimate.unestimated == estimate.to_run and estimate.to_run and not estimate.spent:
        return [f"cost_limit {spec.cost_limit:.3g} device-hours; nothing spent yet", unestimated_line(estimate)]
    lines = [f"cost_limit {spec.cost_limit:.3g} device-hours; estimated {_estimate_text(estimate)}"]
    if estimate.unestimated:
        lines.append(unestimated_line(estimate))
    what = "the estimated part" if estimate.unestimated else "the study"
    if estimate.total <= limit:
        lines.append(f"{what} fits, with {_hours(limit - estimate.total)} device-hours to spare")
    else:
        lines.append(f"passes it by {_hours(estimate.total - limit)} device-hours: `sweep run` refuses to start; "
                     f"raise cost_limit to {_round_up(estimate.total / 3600)} or more, or run fewer trials")
    return lines


def unestimated_line(estimate: StudyEstimate) -> str:
    return (f"{estimate.unestimated} of the {estimate.to_run} trials to run have no estimate (no bench record: "
            "`sweep doctor --bench`): the run keeps the limit on measured time alone")


def check_cost_limit(spec: StudySpec, estimate: StudyEstimate) -> None:
    """Refuse (a UserError, exit 2) a study whose estimate passes its cost_limit, before anything is written."""
    if spec.cost_limit is None or estimate.to_run == 0 or estimate.total <= spec.cost_limit * 3600:
        return
    where = spec.path or f"study '{spec.name}'"
    raise UserError(f"study '{spec.name}' is estimated at {_estimate_text(estimate)}, more than its cost_limit "
                    f"of {spec.cost_limit:.3g} device-hours: raise cost_limit in {where} to "
                    f"{_round_up(estimate.total / 3600)} or more, or run fewer trials (seeds, values, budget); "
                    "`sweep run --dry-run` shows the estimate")


def _round_up(hours: float) -> str:
    """`hours` rounded up at its third significant digit: a limit that holds the estimate as written."""
    scale = 10.0 ** (2 - math.floor(math.log10(hours))) if hours > 0 else 1.0
    return f"{math.ceil(hours * scale - 1e-9) / scale:g}"
