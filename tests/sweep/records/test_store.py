"""The results folder, the Optuna mirror and the resume rules, without Ray (fast)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweep.commands.status import show_status
from sweep.records.history import check_same_study
from sweep.records.mirror import OptunaMirror, infer_distributions, optuna_value
from sweep.records.store import StudyFolder, TrialsTable, is_final, locate_study, sweep_state
from sweep.run.feed import TrialFeed
from sweep.run.runner import StudyRun
from sweep.run.trial_events import TrialEvents
from sweep.spec import Metric, Resources, StudySpec, Trial, load_study
from tests.deadlines import scaled
from tests.helpers import REPO, study_file
from trainer.errors import UserError
from trainer.files import write_text_atomic
from trainer.summary import Summary, metric_value
from trainer.vocabulary import STS_TASKS
from trainer.vocabulary import TrialState as SweepState


def make_spec(tmp_path: Path, name: str = "unit", storage: str | None = None) -> StudySpec:
    return StudySpec(
        name=name, description="unit test study", base={"model": "embedded"},
        parameters={"ema.decay": [0.5, 0.9], "queue.slices": [["0-256"], ["0-128", "256-512"]]},
        seeds=[1], method="grid", metric=Metric(), budget=None, resources=Resources(), scheduler=None,
        storage=storage, results_dir=str(tmp_path / "results"), source_text=f"name: {name}\n",
    )


def make_trial(key: str, decay: float, slices: list[str], seed: int = 1) -> Trial:
    config = {"model": "embedded", "method": "mocose", "batch_size": 64, "seed": seed,
              "ema": {"schedule": "cosine", "decay": decay, "decay_end": 0.95},
              "queue": {"size": 512, "initial_size": 128, "slices": slices}}
    return Trial(key=key, seed=seed, params={"ema.decay": decay, "queue.slices": slices}, config=config, mtd=12.5)


def summary(status: str = "ok", dev: float | None = 70.0) -> Summary:
    reason = None if status == "ok" else f"{status}: loss became nan by step 3"
    return Summary.from_json({"status": status, "reason": reason,
            "steps": 6, "best_step": 3, "best_dev_stsb": dev,
            "test": {**{t: 60.0 for t in STS_TASKS}, "avg": 60.0}, "align": 0.2, "uniform": -2.1,
            "mtd": {"formula": 12.5, "queue_age_mean": 3.0, "queue_age_max": 8.0, "measured": 13.0},
            "sentences_per_s": 10.0,
            "wall_time_s": 1.5, "config": {"seed": 1}})


TRIALS = [make_trial("a" * 12, 0.5, ["0-256"]), make_trial("b" * 12, 0.9, ["0-128", "256-512"])]


# ---- files ------------------------------------------------------------------------------------------
def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "file.txt"
    write_text_atomic(target, "one")
    write_text_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]


def test_trials_csv_columns_and_cells(tmp_path):
    folder = StudyFolder(tmp_path)
    table = TrialsTable(folder, ["ema.decay", "queue.slices"])
    for trial in TRIALS:
        table.add(trial)
    table.update("a" * 12, state="COMPLETE", optuna_trial=0)
    table.set_summary("a" * 12, summary())
    table.update("b" * 12, state="FAIL", dev_stsb=math.nan)
    table.write()
    with open(folder.trials_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0].keys())
    assert header[:8] == ["key", "seed", "state", "status", "reason", "optuna_trial", "ema.decay", "queue.slices"]
    assert header.count("ema.decay") == 1  # a swept column is not repeated among the config columns
    for column in ("method", "batch_size", "mtd", "mtd_measured", "queue_age_mean", "queue_age_max", "best_step",
                   "dev_stsb", *STS_TASKS, "avg", "align", "uniform", "sentences_per_s", "wall_time_s"):
        assert column in header
    a, b = rows
    got = (a["state"], a["status"], a["optuna_trial"], a["dev_stsb"], a["avg"])
    assert got == ("COMPLETE", "ok", "0", "70.0", "60.0")
    assert json.loads(a["queue.slices"]) == ["0-256"]
    assert (b["state"], b["dev_stsb"], b["mtd"]) == ("FAIL", "", "12.5")


def test_metric_value_reads_the_summary_field_of_each_metric():
    s = summary()
    assert metric_value(s, "dev_stsb") == 70.0
    assert metric_value(s, "avg") == 60.0 and metric_value(s, "STS12") == 60.0
    assert metric_value(s, "uniform") == -2.1
    assert metric_value(s.replace(best_dev_stsb=math.nan), "dev_stsb") is None


def test_locate_study_from_results_folder_and_unknown_path(tmp_path):
    folder = tmp_path / "results" / "x"
    folder.mkdir(parents=True)
    (folder / "study.yaml").write_text("name: x\nstorage: postgresql://u:secret@h/db\n")
    location = locate_study(folder)
    assert (location.name, location.storage) == ("x", "postgresql://u:secret@h/db")
    (folder / "study.yaml").write_text("name: x\n")
    assert locate_study(folder).storage == f"sqlite:///{folder.resolve() / 'optuna.db'}"
    with pytest.raises(UserError, match="no such study"):
        locate_study(tmp_path / "nope")
    with pytest.raises(UserError, match="not a study results folder"):
        locate_study(tmp_path)


# ---- the Optuna mirror ------------------------------------------------------------------------------
def test_each_optuna_state_is_read_as_the_sweeps_state_of_its_name_and_back():
    for state in TrialState:
        assert sweep_state(state) is SweepState[state.name] and TrialState[sweep_state(state)] is state


def test_infer_distributions_numeric_ranges_and_categorical_slices():
    dists = infer_distributions(TRIALS, ["ema.decay", "queue.slices"])
    assert isinstance(dists["ema.decay"], optuna.distributions.FloatDistribution)
    assert (dists["ema.decay"].low, dists["ema.decay"].high) == (0.5, 0.9)
    assert dists["queue.slices"].choices == ("0-256", "0-128+256-512")
    assert optuna_value(["0-128", "256-512"]) == "0-128+256-512"


def test_mirror_records_running_curves_states_and_attrs(tmp_path):
    spec = make_spec(tmp_path)
    Path(spec.study_dir).mkdir(parents=True)
    mirror = OptunaMirror(spec, StudyFolder(spec.study_dir).default_storage(),
                          infer_distributions(TRIALS, list(spec.parameters)), common_attrs={"git_commit": "abc"})
    ok = mirror.start(TRIALS[0])
    frozen = mirror.study.trials[ok]
    assert frozen.state == TrialState.RUNNING
    assert frozen.params == {"ema.decay": 0.5, "queue.slices": "0-256"}
    assert frozen.user_attrs["key"] == "a" * 12 and frozen.user_attrs["git_commit"] == "abc"
    mirror.report(ok, 3, 55.0)
    mirror.report(ok, 3, 55.0)  # a repeated step is ignored
    mirror.report(ok, 6, 70.0)
    assert mirror.finish(ok, summary()) == "COMPLETE"
    diverged = mirror.start(TRIALS[1])
    assert mirror.finish(diverged, summary("diverged", dev=None)) == "FAIL"

    trials = mirror.study.trials
    assert trials[ok].value == 70.0 and trials[ok].intermediate_values == {3: 55.0, 6: 70.0}
    attrs = trials[ok].user_attrs
    assert attrs["status"] == "ok" and attrs["mtd"] == 12.5
    assert attrs["mtd_queue_age_mean"] == 3.0 and attrs["mtd_measured"] == 13.0
    assert all(attrs[t] == 60.0 for t in (*STS_TASKS, "avg")) and attrs["align"] == 0.2 and attrs["uniform"] == -2.1
    assert trials[diverged].state == TrialState.FAIL
    assert trials[diverged].user_attrs["status"] == "diverged"
    assert trials[diverged].user_attrs["reason"].startswith("diverged")
    assert is_final(trials[ok]) and is_final(trials[diverged])
    assert mirror.study.metric_names == ["dev_stsb"]

    from optuna_dashboard import get_note

    mirror.wait_for_note()  # written by a thread while the driver starts Ray
    assert "name: unit" in get_note(mirror.study)


@pytest.mark.slow  # a subprocess importing Optuna, the mirror and optuna-dashboard
def test_the_dashboard_note_is_written_without_the_dashboards_web_app(tmp_path):
    """The mirror writes the study's note with optuna-dashboard's own functions, without importing its web app
    (nor scikit-learn, which the app brings in through optuna.importance and no driver needs);
    the dashboard reads the note back."""
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from tests.sweep.records.test_store import TRIALS, make_spec\n"
            "from sweep.records.mirror import OptunaMirror, infer_distributions\n"
            "from sweep.records.store import StudyFolder\n"
            f"spec = make_spec(Path({str(tmp_path)!r}))\n"
            "Path(spec.study_dir).mkdir(parents=True)\n"
            "mirror = OptunaMirror(spec, StudyFolder(spec.study_dir).default_storage(),\n"
            "                      infer_distributions(TRIALS, list(spec.parameters)))\n"
            "mirror.wait_for_note()\n"
            "print(sorted(m for m in ('optuna_dashboard', 'sklearn') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                            timeout=scaled(120))
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
    assert "warning" not in result.stderr, result.stderr  # wait_for_note's line when the note was not written

    from optuna_dashboard import get_note

    spec = make_spec(tmp_path)
    study = optuna.load_study(study_name="unit", storage=StudyFolder(spec.study_dir).default_storage())
    assert get_note(study) == "## unit\n\nunit test study\n\n```yaml\nname: unit\n```\n"


# ---- resume rules -----------------------------------------------------------------------------------
def write_study_file(tmp_path: Path) -> Path:
    return study_file(
        tmp_path,
        "name: resume_unit\n"
        "base: {model: embedded, method: mocose, queue: {size: 64, initial_size: 8}}\n"
        "parameters:\n  ema.decay: [0.5, 0.7, 0.8, 0.9]\n"
        f"results_dir: {tmp_path / 'results'}\n",
    )


def test_resume_plan_skips_finished_recovers_from_disk_and_reruns_the_rest(tmp_path, capsys):
    spec = load_study(write_study_file(tmp_path))
    first_run = StudyRun(spec, "unused:train")
    assert first_run.prepare() == 4
    first = first_run.ledger
    done, stale, on_disk, never = (t.key for t in first.to_run)
    # 1) finished in Optuna and on disk; 2) left RUNNING by a driver that died; 3) finished on disk
    #    only (the driver died before telling Optuna); 4) never started.
    number = first.mirror.start(first.trials[done])
    first.folder.write_summary(done, summary())
    first.mirror.finish(number, summary())
    first.mirror.start(first.trials[stale])
    first.folder.write_summary(on_disk, summary("diverged", dev=None))
    first.folder.write_metrics(on_disk, [{"step": 3, "dev_stsb": 40.0}])
    mtime = os.stat(first.folder.summary_path(done)).st_mtime_ns

    second_run = StudyRun(spec, "unused:train")
    assert second_run.prepare() == 2
    second = second_run.ledger
    assert [t.key for t in second.to_run] == [stale, never]
    by_key = second.mirror.trials_by_key()
    assert [t.state for t in by_key[stale]] == [TrialState.FAIL]
    assert by_key[stale][0].user_attrs["reason"] == "interrupted"
    assert [(t.state, t.user_attrs["status"]) for t in by_key[on_disk]] == [(TrialState.FAIL, "diverged")]
    assert by_key[on_disk][0].intermediate_values == {3: 40.0}
    assert [t.state for t in by_key[done]] == [TrialState.COMPLETE]
    rows = {r["key"]: r for r in second.folder.read_trials_csv()}
    assert rows[done]["state"] == "COMPLETE" and rows[on_disk]["status"] == "diverged"
    assert rows[stale]["state"] == "PENDING" and rows[never]["state"] == "PENDING"
    assert os.stat(first.folder.summary_path(done)).st_mtime_ns == mtime

    third_run = StudyRun(spec, "unused:train")  # nothing new: the same plan, no new Optuna trials
    assert third_run.prepare() == 2
    third = third_run.ledger
    assert len(third.mirror.study.trials) == len(second.mirror.study.trials)

    capsys.readouterr()
    assert show_status(str(tmp_path / "study.yaml")) == 0
    out = capsys.readouterr().out
    assert "4 trials: 1 COMPLETE, 1 FAIL, 2 PENDING" in out
    assert done in out and "ema.decay" in out


def test_a_second_driver_on_the_same_study_is_refused(tmp_path):
    spec = load_study(write_study_file(tmp_path))
    run = StudyRun(spec, "unused:train")
    with run.locked():
        with pytest.raises(UserError, match="already running"):
            with StudyRun(spec, "unused:train").locked():
                pass
    with StudyRun(spec, "unused:train").locked():  # released on exit
        pass


# ---- the driver's trial events, without Ray -------------------------------------------------------------
class StubTuneTrial:
    """What the Tune callback reads from a Tune trial."""

    def __init__(self, trial_id: str, config: dict, error: str | None = None):
        self.trial_id, self.config, self._error = trial_id, config, error
        self.error_file = None

    def get_error(self):
        return self._error


def test_tpe_asks_optuna_per_configuration_runs_every_seed_and_resumes(tmp_path):
    path = tmp_path / "tpe.yaml"
    path.write_text(
        "name: tpe_unit\nmethod: tpe\nbudget: 2\nseeds: [1, 2]\n"
        "base: {model: embedded, method: mocose, queue: {size: 64, initial_size: 8}}\n"
        "parameters:\n  ema.decay: {distribution: uniform, low: 0.5, high: 0.9}\n"
        f"results_dir: {tmp_path / 'results'}\n"
    )
    spec = load_study(path)
    driver = StudyRun(spec, "unused:train")
    assert driver.prepare() == 4  # two configurations x two seeds
    run = driver.ledger
    feed = TrialFeed(run)
    first = feed.suggest("tune-1")  # what Tune gets: the job as its trial config
    number = run.started(first["key"], "tune-1")
    seed_run = run.mirror.study.trials[number]  # each seed's run in the study's own Optuna study
    asked = run.seed_means.study.trials[seed_run.user_attrs["configuration"]]  # the configuration TPE asked for
    assert seed_run.state == TrialState.RUNNING and "asked" not in seed_run.user_attrs
    assert asked.state == TrialState.RUNNING and asked.user_attrs["keys"]["1"] == first["key"]
    assert 0.5 <= asked.params["ema.decay"] <= 0.9 and seed_run.params == asked.params
    assert first["config"]["output_dir"] == str(run.folder.trial_dir(first["key"]))
    run.evaluated(first["key"], number, 3, 50.0)
    run.ended(first["key"], number, summary())
    second = feed.suggest("tune-2")  # the same configuration with the second seed
    assert second["seed"] == 2 and second["config"]["ema"]["decay"] == first["config"]["ema"]["decay"]
    run.started(second["key"], "tune-2")
    # the driver dies here: second is left RUNNING, the second configuration was never asked

    again_run = StudyRun(spec, "unused:train")
    assert again_run.prepare() == 3  # second (again) + one new configuration x two seeds
    again = again_run.ledger
    assert [t.key for t in again.to_run] == [second["key"]] and again.asks_left == 1
    rows = {r["key"]: r["state"] for r in again.folder.read_trials_csv()}
    assert rows == {first["key"]: "COMPLETE", second["key"]: "PENDING"}
    # the configuration waits for its second seed: the sampler has not been told yet
    assert again.seed_means.study.trials[asked.number].state == TrialState.RUNNING
    assert again.seed_means.of == {first["key"]: asked.number, second["key"]: asked.number}


def test_callback_records_pruned_and_crashed_trials(tmp_path):
    from sweep.spec import Scheduler

    spec = load_study(write_study_file(tmp_path))
    spec.scheduler = Scheduler()
    driver = StudyRun(spec, "unused:train")
    driver.prepare()
    run = driver.ledger
    callback, feed = TrialEvents(run), TrialFeed(run)
    plan = (run.plan.to_run, dict(run.plan.trials), run.plan.done, dict(run.plan.ended), run.plan.asks_left)
    pruned = StubTuneTrial("t1", feed.suggest("t1"))
    callback.on_trial_start(0, [], pruned)
    callback.on_trial_result(0, [], pruned, {"step": 3, "dev_stsb": 40.0, "loss": 1.0})
    callback.on_trial_complete(0, [], pruned)  # no summary: the scheduler stopped it
    crashed = StubTuneTrial("t2", feed.suggest("t2"),
                            error="Traceback ...\nray.exceptions.RayActorError: The actor died")
    callback.on_trial_start(0, [], crashed)
    callback.on_trial_error(0, [], crashed)

    # the callbacks wrote to the ledger; the plan they started from is as it was
    assert (run.plan.to_run, dict(run.plan.trials), run.plan.done, dict(run.plan.ended), run.plan.asks_left) == plan
    assert len(run.to_run) == len(plan[0]) - 2 and run.handed_out == set()
    trials = {t.user_attrs["key"]: t for t in run.mirror.study.trials}
    p, c = trials[pruned.config["key"]], trials[crashed.config["key"]]
    assert p.state == TrialState.PRUNED and p.intermediate_values == {3: 40.0}
    assert c.state == TrialState.FAIL and "RayActorError" in c.user_attrs["reason"]
    on_disk = run.folder.read_summary(pruned.config["key"])
    assert on_disk.status == "pruned" and on_disk.best_dev_stsb == 40.0
    assert run.folder.read_metrics(pruned.config["key"]) == [{"step": 3, "dev_stsb": 40.0, "loss": 1.0}]
    run.table.write()  # while trials run, trials.csv is rewritten at most every few seconds (and at the end)
    rows = {r["key"]: r for r in run.folder.read_trials_csv()}
    assert rows[pruned.config["key"]]["state"] == "PRUNED" and rows[crashed.config["key"]]["status"] == "error"
    # a pruned trial is final: not run again
    again_run = StudyRun(spec, "unused:train")
    assert again_run.prepare() == 3
    again = again_run.ledger
    assert pruned.config["key"] not in {t.key for t in again.to_run}


def test_changed_categorical_choices_fail_before_anything_runs(tmp_path):
    spec = make_spec(tmp_path)
    Path(spec.study_dir).mkdir(parents=True)
    url = StudyFolder(spec.study_dir).default_storage()
    mirror = OptunaMirror(spec, url, infer_distributions(TRIALS, list(spec.parameters)))
    mirror.finish(mirror.start(TRIALS[0]), summary())
    grown = TRIALS + [make_trial("c" * 12, 0.7, ["0-64"])]
    with pytest.raises(UserError, match="parameter 'queue.slices'.*new name"):
        OptunaMirror(spec, url, infer_distributions(grown, list(spec.parameters)))
    wider = [make_trial("d" * 12, 0.99, ["0-256"])] + TRIALS  # numbers may leave the old range
    OptunaMirror(spec, url, infer_distributions(wider, list(spec.parameters)))


def test_a_study_optuna_refuses_leaves_study_yaml_and_its_history_as_they_were(tmp_path):
    """An added categorical value passes the same-study check (it extends the study) but Optuna cannot hold it:
    the refusal comes before study.yaml or study_history.yaml is written, so the recorded study still runs."""
    text = ("name: refused_unit\n"
            "base: {model: embedded, method: mocose, queue: {size: 64, initial_size: 8}}\n"
            "parameters:\n  queue.slices: [all, ['0-32']]\n"
            f"results_dir: {tmp_path / 'results'}\n")
    spec = load_study(study_file(tmp_path, text))
    first_run = StudyRun(spec, "unused:train", change=check_same_study(spec, extend=False))
    assert first_run.prepare() == 2
    first = first_run.ledger
    key = first.to_run[0].key
    first.folder.write_summary(key, summary())
    first.mirror.finish(first.mirror.start(first.trials[key]), summary())  # Optuna now holds the choices
    folder = StudyFolder(spec.study_dir)
    recorded = folder.study_yaml.read_bytes()

    grown = load_study(study_file(tmp_path, text.replace("['0-32']]", "['0-32'], ['32-64']]")))
    change = check_same_study(grown, extend=False)
    assert change is not None and change.added  # an extension, so only Optuna can refuse it
    with pytest.raises(UserError, match="cannot hold"):
        StudyRun(grown, "unused:train", change=change).prepare()
    assert folder.study_yaml.read_bytes() == recorded
    assert not (folder.path / "study_history.yaml").exists()
    again = load_study(study_file(tmp_path, text))
    assert StudyRun(again, "unused:train", change=check_same_study(again, extend=False)).prepare() == 1


def test_trials_csv_is_rewritten_at_most_once_per_interval_while_trials_run(tmp_path, monkeypatch):
    # One rewrite per trial event would cost O(study size) each, O(n^2) for a study of n trials.
    spec = load_study(write_study_file(tmp_path))
    driver = StudyRun(spec, "unused:train")
    driver.prepare()  # writes trials.csv: every trial PENDING
    run = driver.ledger
    feed, events = TrialFeed(run), TrialEvents(run)
    key = feed.next_job().key
    monkeypatch.setattr(TrialsTable, "REWRITE_EVERY_S", 3600.0)
    number = run.started(key, "tune-1")
    run.evaluated(key, number, 3, 50.0)
    states = {r["key"]: r["state"] for r in run.folder.read_trials_csv()}
    assert states[key] == "PENDING" and run.table.unwritten  # not rewritten within the interval
    monkeypatch.setattr(TrialsTable, "REWRITE_EVERY_S", 0.0)
    run.table.last_write_seconds = 0.0
    events.on_step_end(0, [])  # Tune's loop: the change is written once the interval has passed
    rows = {r["key"]: r for r in run.folder.read_trials_csv()}
    assert rows[key]["state"] == "RUNNING" and rows[key]["dev_stsb"] == "50.0" and not run.table.unwritten


def test_the_sqlite_mirror_commits_without_fsync(tmp_path):
    # Optuna commits once per user attribute; with an fsync each, recording a trial's scores cost ~0.2 s.
    import sqlalchemy

    from sweep.records.mirror import open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'optuna.db'}")
    with storage.engine.connect() as connection:
        assert connection.execute(sqlalchemy.text("PRAGMA synchronous")).scalar() == 0  # OFF


_WRITE_TRIALS_CSV = TrialsTable.write
_OPENED: list[str] | None = None  # files opened while a trial's events are counted (None: not counting)


def _count_opens(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, os.PathLike)):
        _OPENED.append(str(args[0]))


def _event_costs(folder: Path, trials: int, monkeypatch) -> list[tuple[int, int, int]]:
    """Run `trials` trials' events (start, two results, end) of a grid study; per trial: the SQL statements,
    the files opened and the trials.csv rewrites its events caused."""
    global _OPENED
    import sqlalchemy

    folder.mkdir()
    path = folder / "many.yaml"
    path.write_text("name: many\nbase: {model: embedded, method: simcse}\nkeep_weights: 2\n"
                    f"parameters:\n  optim.lr: {[round(1e-6 * (i + 1), 9) for i in range(trials)]}\n"
                    f"results_dir: {folder / 'results'}\n")
    driver = StudyRun(load_study(path), "unused:train")
    driver.prepare()
    run = driver.ledger
    monkeypatch.setattr(TrialsTable, "REWRITE_EVERY_S", 1e9)  # rewrites within the interval: the test above
    rewrites = []

    def counted_write(table: TrialsTable) -> None:
        rewrites.append(1)
        _WRITE_TRIALS_CSV(table)

    monkeypatch.setattr(TrialsTable, "write", counted_write)
    feed = TrialFeed(run)
    statements: list[str] = []
    sqlalchemy.event.listen(run.mirror.storage.engine, "before_cursor_execute",
                            lambda conn, cursor, sql, *rest: statements.append(sql))
    costs = []
    for index in range(trials):
        job = feed.next_job()  # the driver writes the trial's config.yaml here, before Tune starts it
        key = job.key
        run.folder.write_summary(key, summary(dev=50.0 + index % 7).replace(config=job.config))
        statements.clear()
        rewrites.clear()
        _OPENED = []
        number = run.started(key, f"tune-{index}")
        run.evaluated(key, number, 3, 40.0)
        run.evaluated(key, number, 6, 45.0)
        run.ended(key, number, summary(dev=50.0 + index % 7))
        costs.append((len(statements), len(_OPENED), len(rewrites)))
        _OPENED = None
    assert len(run.mirror.study.get_trials()) == trials
    return costs


@pytest.mark.slow  # a scale measurement: the same events in a small and a large study
def test_a_trials_events_cost_the_same_however_large_the_study(tmp_path, monkeypatch):
    # A trial's start, result and end must not rescan the study (Optuna, trials.csv, summary
    # files). Count the SQL statements, the files opened and the trials.csv rewrites of each trial's events:
    # the last trial of an 80-trial study costs exactly what the 10th of a 20-trial study did.
    sys.addaudithook(_count_opens)
    small = _event_costs(tmp_path / "small", 20, monkeypatch)
    large = _event_costs(tmp_path / "large", 80, monkeypatch)
    assert small[9] == large[-1] and small[9][0] > 0 and small[9][2] == 0, (small[9], large[-1])
