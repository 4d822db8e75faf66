"""Each writer's summary.json, read back as the sweep reads it, goes through every view of trainer.summary with the
values its file holds: a real trainer run (the trainer's command line writes it), a failure the driver writes for a
trial lost with its node, and the record restored from a real Optuna study's attributes. The expectations are the
file's own numbers (json.load), not the views' output. A record is read by attribute: no view can treat it as a
dict (`.get` and `[...]` raise), so these tests also guard the readers."""

from __future__ import annotations

import json

import optuna
import pytest

from sweep.records.store import StudyFolder, weights_state
from trainer.__main__ import main as trainer_main
from trainer.readings import READING
from trainer.summary import (
    SUMMARY_VERSION,
    analysis_row,
    ended_summary,
    evaluation_protocol,
    metric_value,
    metrics_lines,
    optuna_attrs,
    provenance_columns,
    read_summary_file,
    summary_from_attrs,
    trials_csv_row,
)
from trainer.vocabulary import ERROR, STS_TASKS


@pytest.fixture(scope="module")
def trained(tiny_model_dir, shared_data_dir, tmp_path_factory):
    """(summary.json's data as json.load reads it, the record as the sweep reads it) of a real two-step run."""
    import yaml

    out = tmp_path_factory.mktemp("run")
    config = {"model": str(tiny_model_dir), "method": "mocose", "batch_size": 8, "max_steps": 2, "device": "cpu",
              "data": {"data_dir": str(shared_data_dir), "cache_dir": str(out / "cache"), "max_sentences": 32},
              "eval": {"eval_steps": 1, "final_tasks": ["STSBenchmark", "MR"], "transfer_mode": "fasttest"},
              "queue": {"size": 16, "initial_size": 8}, "fgsm": {"eps": 0.0}, "output_dir": str(out / "trial")}
    (out / "run.yaml").write_text(yaml.safe_dump(config))
    trainer_main([str(out / "run.yaml")])
    path = out / "trial" / "summary.json"
    raw = json.loads(path.read_text())
    record, problem = read_summary_file(path)
    assert problem is None
    return raw, record


def test_the_trainers_record_gives_its_files_numbers_in_every_view(trained):
    raw, record = trained
    assert record.to_json() == raw  # the file, whole: no field added, dropped or changed on the way in
    assert (raw["version"], raw["reading"], raw["status"]) == (SUMMARY_VERSION, READING, "ok")
    row = trials_csv_row(record)
    assert (row["status"], row["steps"], row["dev_stsb"], row["best_step"]) == (
        raw["status"], raw["steps"], raw["best_dev_stsb"], raw["best_step"])
    assert row["STSBenchmark"] == raw["test"]["STSBenchmark"] and row["avg"] is None  # one STS task: no average
    assert row["MR"] == raw["transfer"]["MR"] and row["transfer_avg"] == raw["transfer"]["avg"]
    assert (row["mtd"], row["mtd_measured"]) == (raw["mtd"]["formula"], raw["mtd"]["measured"])
    assert row["precision"] == raw["precision"] == "fp32"
    assert row["commit"].startswith(raw["provenance"]["code"]["commit"][:12])
    analysed = analysis_row(record)
    assert analysed["queue.size"] == raw["config"]["queue"]["size"] == 16 and analysed["method"] == "mocose"
    assert analysed["reading"] == READING and analysed["transfer_mode"] == raw["transfer_mode"] == "fasttest"
    assert json.loads(analysed["protocol"]) == evaluation_protocol(record)
    assert evaluation_protocol(record)["eval.final_tasks"] == ["STSBenchmark", "MR"]
    assert provenance_columns(record)["device_name"] == raw["provenance"]["device"]["name"]
    assert metric_value(record, "dev_stsb") == raw["best_dev_stsb"]
    assert metric_value(record, "STSBenchmark") == raw["test"]["STSBenchmark"] and metric_value(record, "avg") is None
    assert metrics_lines(record) == raw["history"] and len(raw["history"]) == 2
    with pytest.raises(AttributeError):
        record.get("status")
    with pytest.raises(TypeError):
        record["status"]


def test_the_record_restored_from_a_real_optuna_study_is_the_files_but_its_curve(trained):
    raw, record = trained
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    trial = study.ask()
    for name, value in optuna_attrs(record).items():
        trial.set_user_attr(name, value)
    study.tell(trial, metric_value(record, "dev_stsb"))
    attrs = study.trials[0].user_attrs
    assert attrs["best_dev_stsb"] == raw["best_dev_stsb"] and attrs["MR"] == raw["transfer"]["MR"]  # flat columns
    restored = summary_from_attrs(attrs)
    assert restored.restored_from == "optuna" and restored.history is None
    assert {k: v for k, v in restored.to_json().items() if k != "restored_from"} == {
        k: v for k, v in raw.items() if k != "history"}
    assert trials_csv_row(restored) == trials_csv_row(record)
    # the same packages; Optuna's flat torch and transformers attributes come back after the others
    packages = [{**row, "packages": set(row["packages"].split(", "))} for row in map(analysis_row, (restored, record))]
    assert packages[0] == packages[1]
    assert optuna_attrs(restored) == {**optuna_attrs(record), "summary_other": {
        **optuna_attrs(record)["summary_other"], "restored_from": "optuna"}}
    assert metrics_lines(restored) == []  # Optuna keeps the curve as intermediate values, not the record


def test_a_failure_the_driver_writes_reads_back_with_its_own_fields(tmp_path):
    """on_trial_error's record on a cluster: the trial lost with its node, its files never arrived."""
    place = {"host": "gpu2", "node_ip": "10.0.0.2"}
    written = ended_summary(ERROR, "RayActorError: the actor died (on node gpu2 (10.0.0.2); 1 attempt(s))",
                            resources={**place, "cpu": 1.0, "gpu": 0.5},
                            files={"arrived": False, "from": "gpu2", "lost": True},
                            config={"method": "simcse", "seed": 3, "save_model": True})
    folder = StudyFolder(tmp_path)
    folder.write_summary("k1", written)
    raw = json.loads(folder.summary_path("k1").read_text())
    assert list(raw) == ["version", "status", "reason", "resources", "files", "config", "reading"]
    record = folder.read_summary("k1")
    assert record == written and record.to_json() == raw
    row = trials_csv_row(record)
    assert (row["status"], row["reason"]) == (raw["status"], raw["reason"]) == ("error", raw["reason"])
    assert all(row[task] is None for task in STS_TASKS) and row["dev_stsb"] is None and row["commit"] is None
    analysed = analysis_row(record)
    assert analysed["seed"] == raw["config"]["seed"] == 3 and analysed["method"] == "simcse"
    assert metric_value(record, "dev_stsb") is None and metrics_lines(record) == []
    assert weights_state(folder, "k1", record) == "lost with node gpu2"
    back = summary_from_attrs(optuna_attrs(record))
    assert {k: v for k, v in back.to_json().items() if k != "restored_from"} == raw


def test_no_reader_reads_a_record_as_a_dict():
    """Outside the records' own modules (trainer.summary, sweep.commands.bench_record), no code reads a summary or a
    bench record by key (`x.get("...")`, `x["..."]`) under the names records go by; a record is read by attribute
    (and refuses both at run time: the tests above). The upgrade's own reading of plain data
    (trainer.readings.summary_reading, called by Summary.from_json) is the one exception."""
    import ast

    from tests.helpers import REPO

    names = {"summary", "record", "run", "probe", "sync", "sharing"}
    owners = {"trainer/summary.py", "sweep/commands/bench_record.py"}
    files = [p for root in ("trainer", "sweep", "bench", "scripts") for p in (REPO / root).rglob("*.py")]
    found = []
    for path in [*files, REPO / "analysis" / "load.py"]:
        relative = path.relative_to(REPO).as_posix()
        if relative in owners:
            continue
        tree = ast.parse(path.read_text())
        exempt = {id(node) for function in ast.walk(tree) if isinstance(function, ast.FunctionDef)
                  and (relative, function.name) == ("trainer/readings.py", "summary_reading")
                  for node in ast.walk(function)}
        for node in ast.walk(tree):
            if id(node) in exempt:
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                target = node.func.value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                target = node.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id in names:
                found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
