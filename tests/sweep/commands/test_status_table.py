"""`sweep status`: the trial table shows no column that is empty for every trial (read from a results folder
written by hand; no Optuna storage, no Ray)."""

from __future__ import annotations

import csv

from sweep.commands.status import show_status
from tests.helpers import hand_made_study
from trainer.vocabulary import STS_TASKS


def rewrite_trials_csv(folder, rows: list[dict[str, str]]) -> None:
    columns = ["key", "seed", "state", "status", "reason", "optuna_trial", "ema.decay", "mtd", "dev_stsb",
               *STS_TASKS, "avg"]
    with open(folder / "trials.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def table_header(out: str) -> list[str]:
    lines = out.splitlines()
    return lines[1].split()  # line 0 names the study and its folder


def test_status_drops_the_avg_column_of_a_study_without_the_seven_task_average(tmp_path, capsys):
    folder = hand_made_study(tmp_path, {"aaa": {"dev": 79.8, "state": "COMPLETE"},
                                        "bbb": {"dev": 78.1, "state": "COMPLETE"}})
    rewrite_trials_csv(folder, [
        {"key": "aaa", "seed": "1", "state": "COMPLETE", "status": "ok", "dev_stsb": "79.82", "STSBenchmark": "76.1"},
        {"key": "bbb", "seed": "1", "state": "COMPLETE", "status": "ok", "dev_stsb": "78.1", "STSBenchmark": "75.0"},
    ])
    assert show_status(str(folder)) == 0
    header = table_header(capsys.readouterr().out)
    assert header == ["key", "seed", "state", "status", "dev_stsb"]  # no avg, mtd, reason or optuna column

    seven = {task: "70.0" for task in STS_TASKS}
    rewrite_trials_csv(folder, [
        {"key": "aaa", "seed": "1", "state": "COMPLETE", "status": "ok", "dev_stsb": "79.82", **seven, "avg": "70.0",
         "mtd": "12.5"},
        {"key": "bbb", "seed": "1", "state": "FAIL", "status": "error", "reason": "RuntimeError: boom"},
    ])
    assert show_status(str(folder)) == 0
    out = capsys.readouterr().out
    assert table_header(out) == ["key", "seed", "state", "status", "dev_stsb", "avg", "mtd", "reason"]
    assert "70.00" in out.splitlines()[2]


def test_status_says_when_the_finished_trials_ran_on_two_code_states(tmp_path, capsys):
    """One trial more after a comment was edited in trainer/: its summary.json records uncommitted changes, and
    `sweep status` names the two code states with their trial counts."""
    import json

    folder = hand_made_study(tmp_path, {key: {"dev": 70.0, "state": "COMPLETE"} for key in ("aaa", "bbb", "ccc")})
    for key, dirty in (("aaa", False), ("bbb", False), ("ccc", True)):
        path = folder / "trials" / key / "summary.json"
        summary = json.loads(path.read_text())
        summary["provenance"] = {"code": {"commit": "c" * 40, "dirty": dirty}, "packages": {"torch": "2.13.0"},
                                 "device": {"name": "AMD EPYC"}}
        path.write_text(json.dumps(summary))
    assert show_status(str(folder)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (f"the study's finished trials ran on 2 code states ({'c' * 12}: 2 trials; {'c' * 12}+dirty: 1 trial): "
            "`sweep analyze` warns where it compares them") in lines
