"""Trial keys survive upgrades: a new config field or a changed default keeps finished trials finished.

The upgrade is played by swapping trainer.config.RunConfig for a subclass (a new field with a default,
or another default) between a finished run and the re-run. The finished run is recorded the way the
driver records it (config.yaml, summary.json, a COMPLETE Optuna trial), without Ray; the re-run is
`run_study` itself, which plans, finds nothing to run and never starts Ray.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pydantic import Field

import trainer.config
from sweep.run.feed import TrialFeed
from sweep.run.runner import StudyRun, run_study
from sweep.spec import expand, load_study, trial_key
from tests.helpers import study_file
from trainer.config import Bool, Float, RunConfig
from trainer.errors import UserError
from trainer.readings import READING
from trainer.summary import Summary

STUDY = """\
name: keys
base: {model: embedded, method: mocose, batch_size: 16, queue: {size: 64, initial_size: 8}}
parameters:
  ema.decay: [0.5, 0.9]
  queue.size: [32, 64]
seeds: [1, 2]
"""


class WithNewField(RunConfig):
    """A later release: one more field, whose default keeps the old behaviour."""

    released_flag: Bool = False


class WithOtherDefault(RunConfig):
    """A later release: a default the study does not set changed (0.99 -> 0.98)."""

    collapse_threshold: Float = Field(0.98, gt=0, le=1)


def write_study(tmp_path: Path) -> Path:
    return study_file(tmp_path, STUDY + f"results_dir: {tmp_path / 'results'}\n", "keys.yaml")


def finish_every_trial(path: Path, config_in_summary: bool = True, reading: int | None = READING) -> list[str]:
    """Run the study's plan and record every trial as the driver does when a trial ends ok (a summary
    without its config when `config_in_summary` is False, as a stand-in trainer might write; of an older
    reading of the papers when `reading` is None, as every summary written before readings were numbered)."""
    driver = StudyRun(load_study(path), "unused:train")
    assert driver.prepare() == 8
    run = driver.ledger
    for trial in list(run.to_run):
        number = run.mirror.start(trial)
        run.folder.write_trial_config(trial)
        summary = {"status": "ok", "steps": 6, "best_step": 3, "best_dev_stsb": 70.0}
        if reading is not None:
            summary["reading"] = reading
        if config_in_summary:
            summary["config"] = trial.config
        summary = Summary.from_json(summary)
        run.folder.write_summary(trial.key, summary)
        run.mirror.finish(number, summary)
    run.mirror = None
    return sorted(t.key for t in run.to_run)


def rerun(path: Path, capsys, **options) -> tuple[int, str]:
    capsys.readouterr()
    code = run_study(load_study(path), _train_fn="unused:train", **options)
    return code, capsys.readouterr().out


@pytest.mark.parametrize("upgrade", [WithNewField, WithOtherDefault], ids=["new-field", "changed-default"])
def test_an_upgrade_keeps_finished_trials_finished(tmp_path, monkeypatch, capsys, upgrade):
    path = write_study(tmp_path)
    keys = finish_every_trial(path)
    monkeypatch.setattr(trainer.config, "RunConfig", upgrade)

    assert sorted(t.key for t in expand(load_study(path))) == keys  # the same keys after the upgrade
    code, out = rerun(path, capsys)
    assert code == 0
    assert "8 already ended (skipped), 0 to run" in out
    changed = [line for line in out.splitlines() if "resolve differently" in line]
    if upgrade is WithNewField:
        assert changed == []  # a new field whose default keeps the old behaviour is no change
    else:
        assert changed == ["study keys: 8 finished trials would now resolve differently (collapse_threshold); "
                           "their results are kept; add --rerun-changed to re-run them"]
    assert (tmp_path / "results" / "keys" / "trials" / keys[0] / "summary.json").is_file()  # results kept


def test_a_study_of_an_older_reading_is_named_kept_and_rerun_only_when_asked(tmp_path, capsys):
    """MoCoSE trials finished before the paper reading was corrected (summaries without `reading`): `sweep run`
    names them and what changed, keeps them (sweep analyze keeps them apart), and with --rerun-changed runs
    them again with their old summary.json kept beside the new one."""
    path = write_study(tmp_path)
    keys = finish_every_trial(path, reading=None)
    code, out = rerun(path, capsys)
    assert code == 0 and "8 already ended (skipped), 0 to run" in out
    [line] = [line for line in out.splitlines() if "older reading" in line]
    assert line.startswith("study keys: 8 finished trials ran under an older reading of the papers (MoCoSE's "
                           "negatives are the queue only (eq. 3)")
    assert line.endswith("their results are kept and sweep analyze analyses them apart; add --rerun-changed to "
                         "re-run them")
    driver = StudyRun(load_study(path), "unused:train", rerun_changed=True)
    assert driver.prepare() == 8
    run = driver.ledger
    assert sorted(run.plan.older_reading) == keys == sorted(run.plan.replacing)
    job = TrialFeed(run).next_job()  # handing the trial out sets its old record aside
    trial_dir = tmp_path / "results" / "keys" / "trials" / job.key
    assert not (trial_dir / "summary.json").exists()
    [kept] = trial_dir.glob("summary.json.replaced-*")
    assert json.loads(kept.read_text())["best_dev_stsb"] == 70.0  # the old result, whole
    run.mirror = None
    # the driver stops before the re-run ends: the next run restores the record from Optuna, still named older
    code, out = rerun(path, capsys)
    assert f"trial {job.key}: its re-run (--rerun-changed) was stopped; results restored" in out
    assert json.loads((trial_dir / "summary.json").read_text())["best_dev_stsb"] == 70.0
    assert "8 finished trials ran under an older reading" in out


@pytest.mark.parametrize("config_in_summary", [True, False], ids=["summary-config", "config-yaml"])
def test_rerun_changed_plans_exactly_the_changed_trials(tmp_path, monkeypatch, config_in_summary):
    # the config a trial ran with is read from its summary.json, or from config.yaml when the summary lacks it
    path = write_study(tmp_path)
    finish_every_trial(path, config_in_summary)
    monkeypatch.setattr(trainer.config, "RunConfig", WithOtherDefault)
    assert StudyRun(load_study(path), "unused:train").prepare() == 0
    driver = StudyRun(load_study(path), "unused:train", rerun_changed=True)
    assert driver.prepare() == 8
    run = driver.ledger
    assert all(fields == ("collapse_threshold",) for fields in run.plan.changed.values())


def test_the_key_is_what_the_study_sets_not_how_it_resolves(tmp_path):
    trials = expand(load_study(write_study(tmp_path)))
    trial = trials[0]
    assert trial.requested == {"batch_size": 16, "queue.size": 32, "queue.initial_size": 8, "ema.decay": 0.5}
    assert trial.key == trial_key(trial.requested, trial.seed)
    # Writing a default out, or resolving, gives the same key: both ask for the same run.
    assert trial_key({**trial.requested, "temperature": 0.05}, 1) == trial.key
    assert trial_key(trial.config, 1) != trial.key  # the resolved config holds method defaults (fgsm.eps ...)
    assert trial_key(trial.requested, 2) != trial.key


# The keys of STUDY's trials as released: a change to how keys are computed (the hash, the canonical JSON, which
# fields count) would make every finished trial of every user's study run again, so it must fail here first.
PINNED_KEYS = [  # in the expansion's order: seed, then the grid's rows
    ("11b6970e9036", 1), ("8b5e7b603ca5", 1), ("61e5f8ff187e", 1), ("0f2002c7f3d2", 1),
    ("0bda9dc589af", 2), ("9913a401aaba", 2), ("fed3d8d8ceb9", 2), ("bd024665cd5e", 2),
]


def test_the_trial_keys_of_a_fixed_study_are_pinned(tmp_path):
    trials = expand(load_study(write_study(tmp_path)))
    assert [(t.key, t.seed) for t in trials] == PINNED_KEYS
    # the first key, recomputed from the documented form (sha256 of the canonical JSON of the fields the
    # study sets and the seed, first 12 hex digits) without the project's code
    asked = {"batch_size": 16, "ema.decay": 0.5, "queue.initial_size": 8, "queue.size": 32}
    canonical = json.dumps({"asked": asked, "seed": 1}, sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12] == PINNED_KEYS[0][0]


@pytest.mark.parametrize("keep", ["all", "best"])
def test_a_finished_study_that_keeps_weights_resolves_the_same(tmp_path, capsys, keep):
    # The feed adds save_model (and output_dir) to the job of a study that keeps weights; the trial records
    # that config. Neither is a change of what the trial computes: the re-run skips every trial silently,
    # and --rerun-changed re-runs none.
    path = tmp_path / "keys.yaml"
    path.write_text(STUDY + f"keep_weights: {keep}\nresults_dir: {tmp_path / 'results'}\n")
    driver = StudyRun(load_study(path), "unused:train")
    assert driver.prepare() == 8
    run = driver.ledger
    for trial in list(run.to_run):
        number = run.mirror.start(trial)
        run.folder.write_trial_config(trial)
        ran_with = {**trial.config, "save_model": True, "output_dir": str(run.folder.trial_dir(trial.key))}
        summary = Summary.from_json({"status": "ok", "steps": 6, "best_step": 3, "best_dev_stsb": 70.0,
                                     "config": ran_with, "reading": READING})
        run.folder.write_summary(trial.key, summary)
        run.mirror.finish(number, summary)
    run.mirror = None

    code, out = rerun(path, capsys)
    assert code == 0
    assert "8 already ended (skipped), 0 to run" in out
    assert "resolve differently" not in out
    assert StudyRun(load_study(path), "unused:train", rerun_changed=True).prepare() == 0


def test_a_former_default_written_out_keeps_its_key_and_a_clash_is_refused(tmp_path):
    """batch_size and optim.lr became per-model rules (null: the paper's value): writing out the former
    defaults (64, 3e-5) asks for nothing, as before, so a bert-base study keeps its keys. For a model whose paper
    value differs, null and the written-out former default resolve differently: one study holding both is
    refused on the key's line instead of giving two trials one folder."""
    head = "name: k\nbase: {model: bert-base-uncased, method: mocose, queue: {size: 32, initial_size: 8}}\n"
    unset = expand(load_study(study_file(tmp_path, head + "parameters: {ema.decay: [0.5]}\nseeds: [1]\n")))
    written = expand(load_study(study_file(
        tmp_path, head.replace("method: mocose", "method: mocose, batch_size: 64, optim: {lr: 3.0e-5}")
        + "parameters: {ema.decay: [0.5]}\nseeds: [1]\n")))
    assert [t.key for t in unset] == [t.key for t in written]
    assert unset[0].requested == {"model": "bert-base-uncased", "ema.decay": 0.5, "queue.size": 32,
                                  "queue.initial_size": 8}
    assert (unset[0].config["batch_size"], unset[0].config["optim"]["lr"]) == (64, 3e-5)  # section 4.1
    large = head.replace("bert-base-uncased", "bert-large-uncased") + "parameters:\n  batch_size: [null, 64]\n"
    with pytest.raises(UserError, match=r"k.yaml:4: .*two trials would share the key \w{12}: batch_size is null "
                                        r"\(the paper's value for the model\) in one and 64 in the other"):
        load_study(study_file(tmp_path, large + "seeds: [1]\n", "k.yaml"))


def test_a_run_signature_leaves_out_a_knob_its_method_does_not_read():
    """The signature sweep.records.resume.former_keys matches ended trials by: a SimCSE config that still holds the
    DCL plugin's section (written before keys were scoped) is the run of the config without it, and of no other."""
    from sweep.spec.keys import run_signature
    from trainer.methods.plugins import load_plugins

    load_plugins(["dcl.py"], Path(__file__).resolve().parents[3] / "docs" / "examples" / "dcl")
    simcse = RunConfig.from_dict({"model": "embedded", "method": "simcse", "batch_size": 16}).to_dict()
    dcl = RunConfig.from_dict({"model": "embedded", "method": "dcl", "batch_size": 16,
                               "dcl": {"sigma": 0.5}}).to_dict()
    assert run_signature({**simcse, "dcl": {"sigma": 0.5}}, 1) == run_signature(simcse, 1)
    assert run_signature({**simcse, "dcl": {"sigma": 0.5}}, 2) != run_signature(simcse, 1)
    assert run_signature({**simcse, "batch_size": 32}, 1) != run_signature(simcse, 1)
    assert run_signature(dcl, 1) != run_signature({**dcl, "dcl": {"sigma": 1.0}}, 1)  # DCL reads its own knob
