"""The project's words, each written once: the STS and transfer task names, the poolers, the built-in methods'
names (every method with its label: trainer.methods.registry), the states a trial shows (TrialState), and the trial
statuses with what each one means to the sweep (final or not, a result or an error, the Optuna state it ends in).

Every layer takes these names from here (trainer, analysis, sweep, in that order of imports), so two
lists can no longer drift apart. Light on purpose: no torch, no Optuna and no other project module, so
any module may import it. A trial's state is a TrialState, a str enum named as Optuna names its states; the sweep
maps Optuna's to it by name where it reads Optuna's trials (sweep.records.store.sweep_state) and back with
`optuna.trial.TrialState[state]`.

    >>> TRIAL_STATUSES[DIVERGED].optuna_state, TRIAL_STATUSES[DIVERGED].final
    (<TrialState.FAIL: 'FAIL'>, True)
    >>> f"{optuna_state_name(None)}"  # a trial that ended without a known status; a state formats as its name
    'FAIL'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

# ---- STS tasks: SentEval's names, used as summary.json `test` keys, trials.csv columns, study metrics ----
STS12, STS13, STS14, STS15, STS16 = "STS12", "STS13", "STS14", "STS15", "STS16"
STS_BENCHMARK = "STSBenchmark"
SICK_RELATEDNESS = "SICKRelatedness"
STS_TASKS = (STS12, STS13, STS14, STS15, STS16, STS_BENCHMARK, SICK_RELATEDNESS)  # the papers' seven, in order
# The test pairs of each STS task in SentEval's data, as trainer.evaluation.sts scores them (empty gold lines
# dropped); tests/sweep/commands/test_dry_run_texts.py counts them in the data.
STS_TEST_PAIRS = dict(zip(STS_TASKS, (3108, 1500, 3750, 3000, 1186, 1379, 4927)))
STS_TASK_LABELS = {**{task: task for task in STS_TASKS}, STS_BENCHMARK: "STS-B", SICK_RELATEDNESS: "SICK-R"}

# ---- SentEval transfer tasks: summary.json `transfer` keys and trials.csv columns ----
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
TRANSFER_TASK_LABELS = {task: "SST-2" if task == "SST2" else task for task in TRANSFER_TASKS}

# ---- the sentence embedding read off the encoder (trainer.evaluation.encoder.SentenceEncoder) ----
POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")

# ---- the built-in methods' config names; every method, its label and rules: trainer.methods.registry ----
SIMCSE, MOCOSE, GS_INFONCE, MIXCSE = "simcse", "mocose", "gs", "mix"


# ---- trial states: trials.csv's `state` column, `sweep status` and the tables ----
class TrialState(enum.StrEnum):
    """The state a trial shows: PENDING and RUNNING while it runs, then the final state of its Optuna trial
    (COMPLETE, PRUNED or FAIL; WAITING where Optuna reports it). Named and spelled as `optuna.trial.TrialState`'s
    members (PENDING is the sweep's own: planned, not started), so a str enum: each member is the string it
    names, equal to it, and formats and serialises as it (trials.csv, JSON, pandas columns, printed tables).
    These are the only places the states are spelled out (tests/trainer/test_vocabulary.py): a trials.csv row's
    state compares with `TrialState.COMPLETE`, an Optuna trial's maps by name (sweep.records.store.sweep_state)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"


# ---- trial statuses: a summary's `status` (and the Optuna user attr `status`) ----
@dataclass(frozen=True)
class TrialStatus:
    """What one trial status means, decided here only (modelled on Optuna's TrialState).

    A trial's status is summary.json's `status` and the `status` column of trials.csv; `TRIAL_STATUSES`
    maps each name to its meaning.

    Attributes:
        name: the status as written: ok, diverged, collapsed, pruned, error, failed, interrupted, dropped,
            duplicate.
        optuna_state: the state the trial ends in, as its Optuna trial (COMPLETE, PRUNED or FAIL; ok without
            a metric value: FAIL).
        final: the key is done for good: running the same config again would give the same answer, so
            `sweep run` never runs it again (error, failed and interrupted are run again).
        result: a result, not an error: a study whose trials all end so exits 0.
        trained: the trainer reached its own verdict, so it may have saved a best-dev state.
        meaning: one line for people (`sweep status`, the docs).
    """

    name: str
    optuna_state: TrialState  # the state its Optuna trial ends in (ok without a metric value: FAIL)
    final: bool  # the key is done for good: running the same config again would give the same answer
    result: bool  # a result, not an error: a study whose trials all end so exits 0
    trained: bool  # the trainer reached its own verdict, so it may have saved a best-dev state
    meaning: str


OK, DIVERGED, COLLAPSED, PRUNED = "ok", "diverged", "collapsed", "pruned"
ERROR, FAILED, INTERRUPTED = "error", "failed", "interrupted"
DROPPED, DUPLICATE = "dropped", "duplicate"

TRIAL_STATUSES: dict[str, TrialStatus] = {status.name: status for status in (
    TrialStatus(OK, TrialState.COMPLETE, final=True, result=True, trained=True,
                meaning="the run finished; its value is the study metric from summary.json"),
    TrialStatus(DIVERGED, TrialState.FAIL, final=True, result=True, trained=True,
                meaning="the loss became NaN or infinite (reason says when)"),
    TrialStatus(COLLAPSED, TrialState.FAIL, final=True, result=True, trained=True,
                meaning="the dev embeddings collapsed (mean pairwise cosine above collapse_threshold)"),
    TrialStatus(PRUNED, TrialState.PRUNED, final=True, result=True, trained=False,
                meaning="stopped by the study's scheduler; its intermediate values are kept"),
    TrialStatus(ERROR, TrialState.FAIL, final=False, result=False, trained=False,
                meaning="an exception or a lost worker (reason names it); run again by the next `sweep run`"),
    TrialStatus(FAILED, TrialState.FAIL, final=False, result=False, trained=False,
                meaning="out of GPU memory (reason names batch_size and resources.gpu)"),
    TrialStatus(INTERRUPTED, TrialState.FAIL, final=False, result=False, trained=False,
                meaning="still running when the driver stopped or died"),
    TrialStatus(DROPPED, TrialState.FAIL, final=False, result=True, trained=False,
                meaning="a tpe ask that the study's constraints drop (no trial runs)"),
    TrialStatus(DUPLICATE, TrialState.FAIL, final=False, result=True, trained=False,
                meaning="a tpe ask repeating a configuration already in the study (no trial runs)"),
)}
"""Every trial status by its name, in the order `sweep status` counts them: `TRIAL_STATUSES["ok"].final`."""
FINAL_STATUSES = tuple(name for name, status in TRIAL_STATUSES.items() if status.final)
# final although their Optuna trial is not COMPLETE or PRUNED (re-running would not help)
FINAL_FAIL_STATUSES = tuple(name for name in FINAL_STATUSES if TRIAL_STATUSES[name].optuna_state == TrialState.FAIL)
RESULT_STATUSES = tuple(name for name, status in TRIAL_STATUSES.items() if status.result)
TRAINED_STATUSES = tuple(name for name, status in TRIAL_STATUSES.items() if status.trained)


def optuna_state_name(status: Any) -> TrialState:
    """The state (named as Optuna's) a trial with summary status `status` ends in (FAIL for an unknown one)."""
    known = TRIAL_STATUSES.get(status) if isinstance(status, str) else None
    return known.optuna_state if known is not None else TrialState.FAIL


def ends_for_good(state: str, status: Any) -> bool:
    """Whether a trial in Optuna state `state` (its name, as trials.csv holds it) with summary status `status`
    ended its key for good: COMPLETE, PRUNED, or FAIL with a final status (diverged, collapsed)."""
    if state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return state == TrialState.FAIL and status in FINAL_FAIL_STATUSES
