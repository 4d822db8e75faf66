"""Bookkeeping stays O(1) per trial: counted, not timed, so it cannot flake on a busy machine.

For studies of 10, 20 and 40 finished trials (written with the project's own writers, as
bench/bookkeeping_scale.py does at 100-10,000), three steps are watched: the first `sweep run` planning
(every trial recorded into an empty Optuna storage), `sweep status`, and the next planning (every trial
done). Each step's SQL statements, whole-study Optuna reads and the files it opens inside the study
folder must be a fixed cost plus the same cost per trial at every size (a count that grows faster than
the trials breaks the line). A whole-study read costs O(trials) itself, so it must never happen per
trial (recording used to read every trial back after each one: O(n^2)); status and the all-done
planning must not query Optuna per trial at all.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import optuna
import pytest
import sqlalchemy

import sweep.records.mirror
import sweep.records.optuna_reads
from sweep.commands.status import show_status
from sweep.records.store import StudyFolder
from sweep.run.runner import StudyRun
from sweep.spec import expand, load_study
from tests.helpers import study_file
from trainer.summary import Summary

SIZES = (10, 20, 40)
_WATCHED: list[Path] = []  # the audit hook below counts opens under these folders
_OPENED: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _WATCHED and isinstance(args[0], (str, Path)):
        path = str(args[0])
        if any(path.startswith(str(folder)) for folder in _WATCHED):
            _OPENED.append(path)


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one does nothing outside `counted`


@contextlib.contextmanager
def counted(folder: Path):
    """{'sql': statements executed, 'study_reads': reads of all of a study's trials, 'files': files opened
    under `folder`} while the block runs."""
    counts = {"sql": 0, "files": 0, "study_reads": 0}

    def on_execute(*args, **kwargs) -> None:
        counts["sql"] += 1

    def counting(function):
        def wrapper(*args, **kwargs):
            counts["study_reads"] += 1
            return function(*args, **kwargs)
        return wrapper

    # every way to read all of a study's trials: Optuna's (cached or not) and sweep.records.optuna_reads.read_trials
    readers = [(optuna.storages._cached_storage._CachedStorage, "get_all_trials"),
               (optuna.storages.RDBStorage, "get_all_trials"), (sweep.records.mirror, "read_trials")]
    originals = [getattr(owner, name) for owner, name in readers]
    for (owner, name), original in zip(readers, originals):
        setattr(owner, name, counting(original))
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", on_execute)
    _WATCHED.append(folder)
    del _OPENED[:]
    try:
        yield counts
    finally:
        _WATCHED.remove(folder)
        counts["files"] = len(_OPENED)
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", on_execute)
        for (owner, name), original in zip(readers, originals):
            setattr(owner, name, original)


def finished_study(root: Path, size: int) -> Path:
    """A grid of `size` learning rates whose trials all ended ok, as the trainer and driver leave them
    (config.yaml, metrics.jsonl, summary.json); no Optuna storage yet."""
    spec = {"name": f"scale{size}", "base": {"model": "embedded", "method": "mocose", "batch_size": 8,
                                             "max_steps": 6, "queue": {"size": 16, "initial_size": 8}},
            "parameters": {"optim.lr": [round(1e-7 * (i + 1), 12) for i in range(size)]},
            "seeds": [1], "results_dir": str(root / "results")}
    path = study_file(root, spec)
    study = load_study(path)
    store = StudyFolder(study.study_dir)
    store.write_study_yaml(study)
    for i, trial in enumerate(expand(study)):
        store.write_trial_config(trial)
        store.write_metrics(trial.key, [{"step": 3, "dev_stsb": 70.0 + i % 7}, {"step": 6, "dev_stsb": 71.0}])
        store.write_summary(trial.key, Summary.from_json({"status": "ok", "reason": None, "steps": 6, "best_step": 6,
                                                          "best_dev_stsb": 71.0 + i % 5, "config": trial.config}))
    return path


def plan(path: Path) -> int:
    """What `sweep run` does before Ray starts (no trial runs: Ray never starts); how many trials it would run."""
    run = StudyRun(load_study(path), "unused:train")
    to_run = run.prepare()
    run.ledger.mirror.wait_for_note()  # the dashboard note is written by a thread: counted here, not by chance
    return to_run


def per_trial(counts: dict[int, int]) -> int:
    """The cost per trial, after checking the counts lie on one line a + b * n over SIZES."""
    small, middle, large = SIZES
    step = (counts[middle] - counts[small]) // (middle - small)
    line = {n: counts[small] + step * (n - small) for n in SIZES}
    assert counts == line, f"not a fixed cost plus the same cost per trial: {counts}"
    return step


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, dict[str, dict[int, int]]]:
    out: dict[str, dict[str, dict[int, int]]] = {}
    for size in SIZES:
        root = tmp_path_factory.mktemp(f"scale{size}")
        path = finished_study(root, size)
        folder = root / "results" / f"scale{size}"
        with counted(folder) as record:
            assert plan(path) == 0  # every trial recorded from its summary.json, none to run
        with counted(folder) as status, contextlib.redirect_stdout(None):
            assert show_status(str(path)) == 0
        with counted(folder) as resume:
            assert plan(path) == 0
        for step, counts in (("record", record), ("status", status), ("resume", resume)):
            for what, n in counts.items():
                out.setdefault(step, {}).setdefault(what, {})[size] = n
    return out


@pytest.mark.slow  # a scale measurement: three finished studies of 10 to 40 trials
def test_status_and_the_all_done_plan_query_optuna_a_fixed_number_of_times(measured):
    for step in ("status", "resume"):
        assert per_trial(measured[step]["sql"]) == 0, (step, measured[step]["sql"])


@pytest.mark.slow  # a scale measurement: three finished studies of 10 to 40 trials
def test_no_step_reads_the_whole_study_per_trial(measured):
    for step in ("record", "status", "resume"):
        reads = measured[step]["study_reads"]
        assert per_trial(reads) == 0 and reads[SIZES[0]] <= 3, (step, reads)


@pytest.mark.slow  # a scale measurement: three finished studies of 10 to 40 trials
def test_files_opened_per_trial_are_a_few_at_every_size(measured):
    # status: summary.json twice (the next run's decision, and the damaged-summary report); the all-done
    # plan: summary.json once (it holds the config the "would resolve differently" check compares; parsing
    # config.yaml too was most of a 10,000-trial resume); recording adds metrics.jsonl and config.yaml
    limits = {"record": 4, "status": 2, "resume": 1}
    for step, limit in limits.items():
        cost = per_trial(measured[step]["files"])
        assert 1 <= cost <= limit, (step, measured[step]["files"])


@pytest.mark.slow  # a scale measurement: three finished studies of 10 to 40 trials
def test_recording_costs_the_same_statements_per_trial_at_every_size(measured):
    assert per_trial(measured["record"]["sql"]) > 0  # each record is written (a line, not a curve)


def test_read_trials_gives_what_optunas_own_read_gives(tmp_path):
    """sweep.records.optuna_reads.read_trials (plain SELECTs) against RDBStorage.get_all_trials, field by field,
    on a study with every state, infinite and NaN values, log/int/categorical parameters, and a second study
    beside it."""
    import math

    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    optuna.create_study(study_name="other", storage=storage).optimize(lambda t: t.suggest_float("x", 0, 1), 2)
    study = optuna.create_study(study_name="mixed", storage=storage)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 1e-5, 1, log=True)
        trial.suggest_categorical("slices", ["0-256", "0-256+768-1024", None])
        trial.suggest_int("k", 1, 9, step=2)
        trial.set_user_attr("key", f"k{trial.number}")
        trial.set_user_attr("mtd", {"formula": 1.5, "ages": [1, 2]})
        for step, value in ((1, float("nan")), (2, float("inf")), (3, 0.5)):
            trial.report(value, step)
        if trial.number % 4 == 1:
            raise optuna.TrialPruned()
        if trial.number % 4 == 2:
            raise ValueError("a failing trial")
        return float("inf") if trial.number == 3 else x

    study.optimize(objective, n_trials=8, catch=(ValueError,))
    study.ask()  # RUNNING
    study.enqueue_trial({"x": 0.5}, user_attrs={"key": "queued"})  # WAITING
    study_id = storage.get_study_id_from_name("mixed")

    def fields(trial: optuna.trial.FrozenTrial) -> tuple:
        steps = {s: "nan" if math.isnan(v) else v for s, v in trial.intermediate_values.items()}
        return (trial.number, trial.state, trial.values, trial.datetime_start, trial.datetime_complete,
                trial.params, trial.distributions, trial.user_attrs, trial.system_attrs, steps, trial._trial_id)

    optunas = sorted(storage.get_all_trials(study_id, deepcopy=False), key=lambda t: t.number)
    assert {t.state for t in optunas} == {TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
                                         TrialState.RUNNING, TrialState.WAITING}
    read = sweep.records.optuna_reads.read_trials(storage, study_id)
    assert [fields(t) for t in read] == [fields(t) for t in optunas]
    live = (TrialState.RUNNING, TrialState.WAITING)
    assert ([fields(t) for t in sweep.records.optuna_reads.read_trials(storage, study_id, states=live)]
            == [fields(t) for t in optunas if t.state in live])
    # only some user attributes (what planning reads): the same trials, those attributes alone
    some = sweep.records.optuna_reads.read_trials(storage, study_id, user_attrs={"key", "absent"})
    assert [t.user_attrs for t in some] == [{k: v for k, v in t.user_attrs.items() if k == "key"} for t in optunas]
    assert ([fields(t)[:7] + fields(t)[8:] for t in some] == [fields(t)[:7] + fields(t)[8:] for t in optunas])
    assert any(len(t.user_attrs) > 1 for t in optunas)
