"""summary.json is one record (trainer.summary) and its Optuna attributes give it back whole: a damaged
summary.json restored from Optuna makes the same trials.csv row and weights value as the original did."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import optuna
import pytest

from sweep.records.store import HEAD_COLUMNS, RESULT_COLUMNS, StudyFolder, weights_state
from sweep.run.runner import StudyRun
from sweep.run.trial_events import reported_metrics
from sweep.spec import load_study
from tests.helpers import study_file
from trainer.readings import READING, reading_changes
from trainer.summary import (
    Summary,
    analysis_row,
    build_summary,
    metric_value,
    metrics_lines,
    older_reading,
    optuna_attrs,
    read_summary_file,
    summary_from_attrs,
    trials_csv_row,
    upgrade_summary,
)
from trainer.vocabulary import STS_TASKS, TRANSFER_TASKS


def full_summary(seed: int = 1) -> dict:
    """A MoCoSE summary with every block the trainer writes: seven STS and seven transfer tasks, the MTD block
    with the meter, the test-selected state, the evaluation cutoff, the per-subset details and the config."""
    test = {task: 70.0 + i for i, task in enumerate(STS_TASKS)}
    test["avg"] = round(sum(test.values()) / 7, 2)
    transfer = {task: 80.0 + i / 4 for i, task in enumerate(TRANSFER_TASKS)}
    transfer["avg"] = round(sum(transfer.values()) / 7, 2)
    config = {"model": "embedded", "method": "mocose", "variant": "released", "batch_size": 64, "seed": seed,
              "save_model": True, "ema": {"schedule": "cosine", "decay": 0.75, "decay_end": 1.0},
              "queue": {"size": 512, "initial_size": 128, "slices": None}, "released": {"test_selected": True}}
    return {
        "status": "ok", "reason": None, "steps": 250, "total_steps": 250, "variant": "released",
        "precision": "fp32", "released": {"test_selected": True, "eval_cutoff": True, "ema_schedule": True},
        "selection": "dev", "best_step": 125, "best_dev_stsb": 81.2345, "test": test,
        "test_label": "seven STS tasks", "sts_details": {"STS12": {"MSRpar": {"pearson": 0.5, "spearman": 0.49,
                                                                              "nsamples": 750}}},
        "transfer": transfer, "transfer_mode": "fasttest", "align": 0.21, "uniform": -2.3,
        "align_uniform_split": "dev",
        "mtd": {"formula": 12.04, "eta": 0.7509, "eta_choice": "mean", "queue_k": 512, "batch_size": 64,
                "measured": 11.7, "ema_age": 3.9, "queue_age_mean": 4.1, "queue_age_max": 8.0},
        "test_selected": {"label": "test-selected (released code)", "step": 250, "test": {"avg": 74.1}},
        "eval_cutoff": "cutoff at evaluation (released code)",
        "sentences_per_s": 410.5, "train_seconds": 39.0, "eval_seconds": 3.5, "final_eval_seconds": 20.1,
        "wall_time_s": 70.2, "device": "cpu", "corpus_sentences": 16000,
        "history": [{"step": 125, "loss": 1.2, "dev_stsb": 81.2345, "ema_age": 3.9}],
        "config": config, "resources": {"host": "here", "cpu": 1.0, "gpu": 0.0}, "reading": READING,
        "provenance": {"code": {"version": "0.1.0", "commit": "0" * 40, "dirty": True, "diff_sha256": "1" * 64,
                                "source": "git checkout"},
                       "packages": {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0"},
                       "device": {"type": "cpu", "name": "AMD EPYC", "cpu": "AMD EPYC", "cpu_cores": 2},
                       "precision": "fp32", "node": {"hostname": "node-1", "ray_node_id": "ab" * 28},
                       "data": {"corpus": {"file": "wiki1m_sample.txt", "sha256": "2" * 64, "from": "manifest"},
                                "evaluation": {"sha256": "3" * 64, "files": 78}}},
    }


def test_a_full_summary_round_trips_through_the_optuna_attributes(tmp_path):
    summary = full_summary()
    record = Summary.from_json(summary)
    # through real Optuna storage, as the mirror records it (JSON in the database)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    study = optuna.create_study(storage=storage, study_name="record")
    trial = study.ask()
    for name, value in optuna_attrs(record).items():
        trial.set_user_attr(name, value)
    study.tell(trial, 1.0)
    attrs = optuna.load_study(study_name="record", storage=storage).trials[0].user_attrs
    restored = summary_from_attrs(attrs).to_json()
    assert restored.pop("restored_from") == "optuna"
    assert restored == {k: v for k, v in summary.items() if k != "history"}
    # the dashboard's columns are there, flat
    assert all(attrs[task] == summary["test"][task] for task in STS_TASKS) and attrs["avg"] == summary["test"]["avg"]
    assert all(attrs[task] == summary["transfer"][task] for task in TRANSFER_TASKS)
    assert attrs["transfer_avg"] == summary["transfer"]["avg"] and attrs["mtd"] == 12.04
    assert attrs["mtd_measured"] == 11.7 and attrs["transfer_mode"] == "fasttest"
    # ... and what made the numbers (the rest of the provenance block rides in summary_other)
    assert (attrs["commit"], attrs["code_dirty"], attrs["torch"], attrs["device_name"], attrs["hostname"]) == (
        "0" * 40, True, "2.13.0+cpu", "AMD EPYC", "node-1")


def test_none_fields_and_a_method_without_mtd_come_back_as_they_were():
    summary = {**full_summary(), "mtd": None, "transfer": None, "transfer_mode": None, "align": None}
    # the mirror sets the planned MTD when the trial starts; a summary without one must not take it
    attrs = {"mtd": 9.5, **optuna_attrs(Summary.from_json(summary))}
    restored = summary_from_attrs(attrs).to_json()
    restored.pop("restored_from")
    assert restored == {k: v for k, v in summary.items() if k != "history"}
    early = {**full_summary(), "mtd": {**full_summary()["mtd"], "formula": None}}
    restored = summary_from_attrs({"mtd": 9.5, **optuna_attrs(Summary.from_json(early))})
    assert restored.mtd["formula"] is None


def test_records_from_before_summary_other_still_give_their_flat_fields():
    attrs = {k: v for k, v in optuna_attrs(Summary.from_json(full_summary())).items() if k != "summary_other"}
    restored = summary_from_attrs(attrs)
    assert restored.test == full_summary()["test"] and restored.transfer["MR"] == 80.0
    assert restored.mtd["formula"] == 12.04 and "config" not in restored.to_json()


def test_a_damaged_summary_restored_from_optuna_keeps_its_trials_csv_row_and_weights(tmp_path):
    path = study_file(tmp_path, "name: record\nbase: {model: embedded, method: mocose, save_model: true}\n"
                      f"parameters: {{ema.decay: [0.75]}}\nseeds: [1]\nmethod: grid\nresults_dir: {tmp_path}\n")
    spec = load_study(path)
    driver = StudyRun(spec, "unused:train")
    driver.prepare()
    plan = driver.ledger
    trial = plan.to_run[0]
    summary = Summary.from_json({**full_summary(), "config": {**copy.deepcopy(trial.config), "save_model": True}})
    number = plan.mirror.start(trial)
    plan.folder.write_summary(trial.key, summary)
    plan.mirror.finish(number, summary)
    folder = StudyFolder(spec.study_dir)
    before_row, before_weights = trials_csv_row(summary), weights_state(folder, trial.key, summary)
    assert before_weights == "deleted"  # saved by the trainer, no model folder left

    folder.summary_path(trial.key).write_text('{"status": "ok", "test": {')  # damaged
    again_run = StudyRun(spec, "unused:train")
    again_run.prepare()
    again = again_run.ledger
    restored = folder.read_summary(trial.key)
    assert restored.restored_from == "optuna"
    assert trials_csv_row(restored) == before_row
    assert weights_state(folder, trial.key, restored) == before_weights
    assert [p.name for p in Path(folder.trial_dir(trial.key)).iterdir() if "summary.json." in p.name]  # set aside
    assert trial.key not in {t.key for t in again.to_run}


def test_the_driver_keeps_every_field_of_the_trainers_metrics_line():
    line = {"step": 4, "loss": 0.7, "dev_stsb": 71.5, "lr": 3e-5, "eta": 0.8, "queue_fill": 256,
            "mean_cosine": 0.41, "fgsm_norm": None, "test_avg": 72.0, "ema_age": 4.2, "queue_age_mean": 3.0,
            "queue_age_max": 6.0, "measured": 10.1}
    tune_keys = {"checkpoint_dir_name": None, "config": {"key": "k"}, "date": "2026-11-27", "done": False,
                 "hostname": "h", "iterations_since_restore": 1, "node_ip": "127.0.0.1", "pid": 1,
                 "time_since_restore": 1.0, "time_this_iter_s": 1.0, "time_total_s": 1.0, "timestamp": 1,
                 "training_iteration": 1, "trial_id": "t"}
    assert reported_metrics({**line, **tune_keys}) == line
    assert json.loads(json.dumps(reported_metrics({**line, **tune_keys}))) == line


def test_the_mirror_records_the_same_attributes(tmp_path):
    spec = load_study(study_file(tmp_path, "name: attrs\nbase: {model: embedded, method: mocose}\n"
                                 "parameters: {ema.decay: [0.75]}\nseeds: [1]\nmethod: grid\n"
                                 f"results_dir: {tmp_path}\n"))
    driver = StudyRun(spec, "unused:train")
    driver.prepare()
    plan = driver.ledger
    summary = full_summary()
    plan.mirror.finish(plan.mirror.start(plan.to_run[0]), Summary.from_json(summary))
    frozen = optuna.load_study(study_name="attrs", storage=StudyFolder(spec.study_dir).default_storage()).trials[0]
    restored = summary_from_attrs(frozen.user_attrs).to_json()
    restored.pop("restored_from")
    assert restored == {k: v for k, v in summary.items() if k != "history"}


def test_the_builder_derives_its_fields_and_refuses_a_field_summary_json_does_not_have():
    facts = dict(status="ok", reason=None, total_steps=10, best_step=5, test={"STSBenchmark": 70.0},
                 transfer=None, transfer_mode="fasttest", align=float("nan"), history=[{"step": 5}])
    summary = build_summary(steps=10, batch_size=64, train_seconds=2.0, eval_seconds=1.23456,
                            final_eval_seconds=0.0, wall_time_s=3.333, best_dev=0.712345678, **facts)
    assert summary.best_dev_stsb == 71.2346 and summary.sentences_per_s == 320.0
    assert summary.transfer_mode is None  # only beside transfer scores
    assert summary.align is None and summary.eval_seconds == 1.23 and summary.wall_time_s == 3.33
    assert summary.test_label.startswith("STS-B test Spearman x100 only")
    assert metrics_lines(summary) == [{"step": 5}]
    with pytest.raises(TypeError, match="best_dev_stsbb"):
        build_summary(steps=1, batch_size=1, train_seconds=0.0, eval_seconds=0.0, final_eval_seconds=0.0,
                      wall_time_s=0.0, best_dev=None, best_dev_stsbb=1.0)


def test_every_writers_record_goes_through_every_view(tiny_model_dir, shared_data_dir, tmp_path):
    """The three kinds of summary.json, each built by trainer.summary: the trainer's own (a real run), one the
    driver writes for a trial that ended without it (an error, a scheduler's stop), and one restored from Optuna.
    Each holds only SummaryFields' fields, carries this code's version and reading, and gives every view: the
    trials.csv row (the same columns for all), the analysis row, the Optuna attributes and back, the curve."""
    from trainer.config import RunConfig
    from trainer.summary import SUMMARY_VERSION, ended_summary
    from trainer.train import train

    config = RunConfig.from_dict({
        "model": str(tiny_model_dir), "method": "mocose", "batch_size": 8, "max_steps": 2, "device": "cpu",
        "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 32},
        "eval": {"eval_steps": 1, "final_tasks": ["STSBenchmark"]}, "queue": {"size": 16, "initial_size": 8},
        "fgsm": {"eps": 0.0}})
    trained = train(config)
    resolved = config.resolved().to_dict()
    failed = ended_summary("error", "RuntimeError: boom", config=resolved)
    pruned = ended_summary("pruned", "stopped by the asha scheduler at step 1", steps=1, best_step=1,
                           best_dev_stsb=41.5, config=resolved)
    restored = summary_from_attrs(optuna_attrs(trained))
    records = {"trainer": trained, "error": failed, "pruned": pruned, "restored": restored}
    declared = set(Summary.model_fields)
    for name, record in records.items():
        assert set(record.to_json()) <= declared, (name, set(record.to_json()) - declared)
        assert (record.version, record.reading) == (SUMMARY_VERSION, READING), name
        row = trials_csv_row(record)
        assert set(row) <= {*HEAD_COLUMNS, *RESULT_COLUMNS}, (name, set(row) - {*HEAD_COLUMNS, *RESULT_COLUMNS})
        analysis = analysis_row(record)
        assert analysis["status"] == record.status and analysis["reading"] == READING
        assert analysis["method"] == "mocose" and analysis["dev_stsb"] == record.best_dev_stsb
        back = summary_from_attrs(optuna_attrs(record)).to_json()
        assert back.pop("restored_from") == "optuna"
        assert back == {k: v for k, v in record.to_json().items() if k not in ("history", "restored_from")}, name
        assert metrics_lines(record) == (record.history or [])
    assert trials_csv_row(restored) == trials_csv_row(trained)
    assert json.loads(json.dumps(failed.to_json())) == failed.to_json()  # JSON as written
    with pytest.raises(TypeError, match="reasons"):
        ended_summary("error", "x", reasons="typo")


def _version_one_record() -> dict:
    """A summary.json as written before `version` and `reading` were stamped and before the average needed all
    seven tasks: a one-task run whose `avg` is its STS-B score, of a MoCoSE config the current reading reads
    differently (trainer.readings)."""
    record = copy.deepcopy(full_summary())
    for name in ("reading", "transfer", "transfer_mode", "test_selected"):
        record.pop(name)
    record["test"] = {"STSBenchmark": 76.5, "avg": 76.5}
    record["config"] = {**record["config"], "variant": "paper"}
    return record


def test_an_older_record_is_read_through_one_upgrade_by_every_view(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_version_one_record()))
    record, problem = read_summary_file(path)
    assert problem is None
    assert record.reading == 1 and record.test == {"STSBenchmark": 76.5}  # its one score, not an average
    raw = json.loads(path.read_text())  # the file's own data, read by Summary.from_json as the reader does
    again = Summary.from_json(raw)
    for view in (trials_csv_row, analysis_row):
        assert view(again) == view(record)
        assert view(again)["STSBenchmark"] == 76.5 and view(again).get("avg") is None
    assert optuna_attrs(again) == optuna_attrs(record) and "avg" not in optuna_attrs(again)
    assert metric_value(again, "avg") is None and metric_value(again, "STSBenchmark") == 76.5
    assert analysis_row(again)["reading"] == 1
    assert older_reading(again) == older_reading(record) == reading_changes(raw["config"], 1) != []
    assert summary_from_attrs(optuna_attrs(again)).test == {"STSBenchmark": 76.5}


def test_a_current_record_comes_back_from_the_upgrade_equal():
    record = full_summary()
    assert upgrade_summary(record) == record and upgrade_summary(record) is not record
    assert older_reading(Summary.from_json(record)) == []


@pytest.mark.parametrize("text, problem", [
    (None, None), ("{not json", "does not parse"), ("[1, 2]", "does not hold a JSON object"),
])
def test_the_summary_reader_tells_a_missing_file_from_a_damaged_one(tmp_path, text, problem):
    path = tmp_path / "summary.json"
    if text is not None:
        path.write_text(text)
    record, found = read_summary_file(path)
    assert record is None
    assert (found is None) if problem is None else found.startswith(problem)


def test_a_record_refuses_every_change_and_replace_gives_a_checked_copy():
    import pickle

    from pydantic import ValidationError

    from trainer.summary import ended_summary

    record = ended_summary("error", "RuntimeError: boom", steps=3)
    restored = summary_from_attrs(optuna_attrs(Summary.from_json(full_summary())))
    for summary in (record, restored, Summary.from_json(full_summary())):
        assert isinstance(summary, Summary)
        with pytest.raises(ValidationError, match="frozen"):
            summary.status = "ok"
        assert not hasattr(summary, "get")  # read by attribute, not as a dict
    changed = record.replace(status="diverged", steps=4)
    assert (changed.status, changed.steps, record.status, record.steps) == ("diverged", 4, "error", 3)
    with pytest.raises(TypeError, match="not summary.json fields: \\['colour'\\]"):
        record.replace(colour="red")
    back = pickle.loads(pickle.dumps(record))
    assert isinstance(back, Summary) and back == record and back.to_json() == record.to_json()


@pytest.mark.parametrize("fields, problem", [
    ({"status": "ok", "steps": 3}, "status ok without best_dev_stsb"),
    ({"status": "ok", "best_dev_stsb": 70.0, "steps": 5, "total_steps": 4}, "steps 5 beyond total_steps 4"),
    ({"status": "error", "colour": "red"}, "colour"),
])
def test_a_record_is_checked_across_its_fields(fields, problem, tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=problem):
        Summary.from_json(fields)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(fields))
    record, found = read_summary_file(path)  # a file that holds no record is damaged, never "no result"
    assert record is None and found.startswith("is not a record this code reads") and problem.split()[0] in found
