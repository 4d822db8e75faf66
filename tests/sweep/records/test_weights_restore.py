"""keep_weights may change without a new study name, and `sweep run` then runs again the finished trials the
study now keeps but whose weights are gone (sweep.run.plan), and only those; `sweep export` names exactly
that way out. Trials are recorded the way the driver records them (config.yaml, summary.json, a COMPLETE
Optuna trial, model/ when kept), without Ray; tests/e2e/test_export_advice.py follows the advice for real."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sweep.commands.dry_run import print_dry_run
from sweep.records.history import check_same_study
from sweep.run.feed import TrialFeed
from sweep.run.ledger import Ledger
from sweep.run.runner import StudyRun
from sweep.spec import load_study
from tests.deadlines import scaled
from tests.helpers import REPO, hand_made_study
from trainer.readings import READING
from trainer.summary import Summary

STUDY = """\
name: restore
base: {model: embedded, method: simcse, batch_size: 8, max_steps: 6}
parameters:
  optim.lr: [1.0e-5, 2.0e-5, 3.0e-5, 4.0e-5]
"""
DEVS = [70.0, 74.0, 71.0, 72.0]  # the trials' dev_stsb, in trial order: the best is the second


def write_study(tmp_path: Path, keep: str | None = None) -> Path:
    path = tmp_path / "restore.yaml"
    path.write_text(STUDY + (f"keep_weights: {keep}\n" if keep else "") + f"results_dir: {tmp_path / 'results'}\n")
    return path


def end_trials(run: Ledger, devs: dict[str, float], kept: set[str]) -> None:
    """Run.to_run's trials end ok as the driver records them; those in `kept` leave their weights."""
    for trial in list(run.to_run):
        number = run.mirror.start(trial)
        run.folder.write_trial_config(trial)
        ran_with = {**trial.config, "save_model": True, "output_dir": str(run.folder.trial_dir(trial.key))}
        summary = Summary.from_json({"status": "ok", "steps": 6, "best_step": 6, "best_dev_stsb": devs[trial.key],
                                     "config": ran_with, "reading": READING})
        run.folder.write_summary(trial.key, summary)
        if trial.key in kept:
            (run.folder.model_dir(trial.key)).mkdir(parents=True, exist_ok=True)
            (run.folder.model_dir(trial.key) / "config.json").write_text("{}")
        run.mirror.finish(number, summary)
    run.to_run.clear()
    run.mirror = None


def finished_study(tmp_path: Path) -> tuple[Path, list[str], dict[str, float]]:
    """The study run to the end with keep_weights: best: only the best trial kept its weights."""
    path = write_study(tmp_path)
    driver = StudyRun(load_study(path), "unused:train")
    assert driver.prepare() == 4
    run = driver.ledger
    keys = [t.key for t in run.to_run]
    devs = dict(zip(keys, DEVS))
    end_trials(run, devs, kept={keys[1]})
    return path, keys, devs


def plan(path: Path) -> Ledger:
    spec = load_study(path)
    assert check_same_study(spec) is None  # keep_weights is no change of study: neither refused nor an extension
    driver = StudyRun(spec, "unused:train")
    driver.prepare()
    run = driver.ledger
    return run


def test_a_changed_keep_weights_runs_the_trials_it_now_keeps_again_and_only_those(tmp_path, capsys):
    path, keys, devs = finished_study(tmp_path)
    assert [t.key for t in plan(path).to_run] == []  # weights gone, keep_weights unchanged: nothing runs

    write_study(tmp_path, keep="2")  # the top 2: the second trial (kept) and the fourth (deleted)
    run = plan(path)
    assert [t.key for t in run.to_run] == [keys[3]] and run.plan.restoring == (keys[3],)
    assert "running 1 finished trial again to save the weights keep_weights: 2 keeps" in capsys.readouterr().out
    end_trials(run, devs, kept={keys[3]})

    write_study(tmp_path, keep="all")
    run = plan(path)
    assert sorted(t.key for t in run.to_run) == sorted([keys[0], keys[2]])
    assert all((run.folder.trial_dir(key) / "weights.wanted").is_file() for key in (keys[0], keys[2]))
    end_trials(run, devs, kept={keys[0], keys[2]})

    run = plan(path)  # every weight back: nothing runs, and no trial stays marked
    assert list(run.to_run) == [] and not list(run.folder.path.glob("trials/*/weights.wanted"))
    assert {row["weights"] for row in run.table.rows.values()} == {"kept"}


def test_a_run_stopped_before_the_weights_are_back_runs_the_rest_next_time(tmp_path, capsys):
    path, keys, devs = finished_study(tmp_path)
    write_study(tmp_path, keep="all")
    run = plan(path)
    assert sorted(t.key for t in run.to_run) == sorted([keys[0], keys[2], keys[3]])
    job = TrialFeed(run).suggest("tune-1")  # the first re-run starts (its summary.json is cleared) and is stopped
    assert job["config"]["save_model"] is True and not run.folder.summary_path(job["key"]).exists()
    run.mirror.start(run.trials[job["key"]])
    run.mirror = None

    capsys.readouterr()
    run = plan(path)  # the same file again: the marks, not a change of keep_weights, bring them back
    assert sorted(t.key for t in run.to_run) == sorted([keys[0], keys[2], keys[3]])
    assert f"trial {job['key']}: its re-run for its weights was stopped" in capsys.readouterr().out
    assert run.folder.read_summary(job["key"]).best_dev_stsb == devs[job["key"]]  # its record is kept


def test_from_none_to_best_runs_the_best_trial_again(tmp_path):
    path = write_study(tmp_path, keep="none")
    driver = StudyRun(load_study(path), "unused:train")
    driver.prepare()
    run = driver.ledger
    keys = [t.key for t in run.to_run]
    end_trials(run, dict(zip(keys, DEVS)), kept=set())
    write_study(tmp_path, keep="best")
    assert [t.key for t in plan(path).to_run] == [keys[1]]


def test_the_dry_run_shows_the_trials_that_run_again_for_their_weights(tmp_path, capsys):
    path, keys, _ = finished_study(tmp_path)
    write_study(tmp_path, keep="all")
    capsys.readouterr()
    print_dry_run(load_study(path))
    out = capsys.readouterr().out
    assert re.search(r"^weights: +`sweep run` runs 3 finished trials again to save the weights keep_weights: all "
                     r"keeps", out, re.M)
    assert "1 COMPLETE, 3 weights->rerun" in out
    assert not list((tmp_path / "results" / "restore").glob("trials/*/weights.wanted"))  # a dry run writes nothing


def export_refusal(study: Path, key: str, cwd: Path) -> str:
    env = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "sweep", "export", str(study), "--trial", key, "out"],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert not (cwd / "out").exists()
    return result.stderr


def test_export_names_the_study_file_and_the_command_that_brings_the_weights_back(tmp_path):
    path, keys, _ = finished_study(tmp_path)
    for study in (path, tmp_path / "results" / "restore"):  # the results folder: the file `sweep run` last ran
        text = export_refusal(study, keys[0], tmp_path)
        assert "kept no weights (deleted when better trials ended" in text
        assert f"set `keep_weights: all` in {path} and run `sweep run {path}`: it runs the finished trials" in text

    folder = hand_made_study(tmp_path / "other", {"k1": {"dev": 60.0, "state": "COMPLETE"},
                                                  "k2": {"dev": 70.0, "state": "COMPLETE", "weights": True}})
    text = export_refusal(folder, "k1", tmp_path)  # no record of the file it ran from (no Optuna study here)
    assert (f"set `keep_weights: all` in the study file `sweep run` ran it from (not its copy {folder / 'study.yaml'}"
            in text)
