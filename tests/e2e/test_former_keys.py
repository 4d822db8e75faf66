"""A study that ended before a method's own keys were scoped to its trials resumes without running anything again.

Before scoping, a SimCSE trial of `method: [simcse, dcl] x dcl.sigma: [...]` held the dcl.sigma it never read: it
ran, and was keyed, once per value (the fork of the plugin's issue, or the driver patched to accept the knob). The
study is written here as that code wrote it: trial folders, config.yaml and summary.json holding a `dcl` section,
and Optuna trials keyed and parametrised by dcl.sigma, all through the driver's own writer (OptunaMirror). Today's
`sweep run` finds each of those runs under the key it now has, runs nothing, records each once, sets its repeats
aside, and `sweep analyze` reads SimCSE once per seed with no dcl.sigma.
"""

from __future__ import annotations

import csv
import json
import shutil

import optuna
import pytest
import yaml

from sweep.records.mirror import OptunaMirror, infer_distributions
from sweep.records.store import StudyFolder
from sweep.spec import load_study
from sweep.spec.expand import expansion
from sweep.spec.keys import key_of_requested, run_signature
from tests.helpers import REPO, fake_env, run_sweep, write_study

pytestmark = pytest.mark.slow
SIGMAS = [0.5, 1.0]


def _as_written_before_scoping(study_path, folder: StudyFolder) -> dict[str, list[str]]:
    """Rewrite the finished study as the code before scoping wrote it: each SimCSE trial once per dcl.sigma, keyed
    with it, its config holding it; Optuna rebuilt from the trial folders by the driver's writer. Returns the
    planned SimCSE key -> the former keys that ran it."""
    spec = load_study(study_path)
    planned = expansion(spec).trials
    old_params = {"method": "simcse", "dcl.sigma": SIGMAS[0]}  # the distributions the old driver inferred
    summaries, written, former = {}, [], {}
    for trial in planned:
        summary = folder.read_summary(trial.key)
        summaries[trial.key] = summary
        if trial.params["method"] != "simcse":
            written.append((trial, summary))
            continue
        for sigma in SIGMAS:
            old_key = key_of_requested({**trial.requested, "dcl.sigma": sigma}, trial.seed)
            config = {**trial.config, "dcl": {"sigma": sigma}}
            old_dir = folder.trial_dir(old_key)
            shutil.copytree(folder.trial_dir(trial.key), old_dir)
            (old_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            (old_dir / "summary.json").write_text(json.dumps({**summary.to_json(), "config": config}))
            old = type(trial)(key=old_key, seed=trial.seed, params={**trial.params, "dcl.sigma": sigma},
                              config=config, mtd=None, requested={**trial.requested, "dcl.sigma": sigma})
            written.append((old, summary.replace(config=config)))
            former.setdefault(trial.key, []).append(old_key)
        shutil.rmtree(folder.trial_dir(trial.key))
    storage = f"sqlite:///{folder.path / 'optuna.db'}"
    (folder.path / "optuna.db").unlink()
    probe = type(planned[0])(key="x", seed=1, params=old_params, config={}, mtd=None, requested={})
    distributions = infer_distributions([probe, *[t for t, _ in written]], ["method", "dcl.sigma"])
    mirror = OptunaMirror(spec, storage, distributions)
    for trial, summary in written:
        mirror.add_finished(trial, summary, folder.read_metrics(trial.key) if folder.trial_dir(trial.key).is_dir()
                            else [])
    return former


def test_a_study_keyed_before_scoping_resumes_without_running_again(tmp_path, shared_data_dir):
    shutil.copy(REPO / "docs" / "examples" / "dcl" / "dcl.py", tmp_path / "dcl.py")
    study_path = write_study(tmp_path, "scoped", "embedded", shared_data_dir,
                             {"method": ["simcse", "dcl"], "dcl.sigma": SIGMAS}, description=None, token_cache=False,
                             plugins=["dcl.py"], seeds=[1, 2])
    env = fake_env(steps=2, step_s=0.05)
    first = run_sweep(["run", str(study_path)], tmp_path, env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    folder = StudyFolder(tmp_path / "results" / "scoped")
    former = _as_written_before_scoping(study_path, folder)
    assert len(former) == 2 and all(len(keys) == 2 for keys in former.values())
    started = {path.parent.name: json.loads(path.read_text())["started_at"]
               for path in folder.path.glob("trials/*/summary.json")}
    assert len(started) == 8  # 4 DCL trials and SimCSE's 2 seeds x 2 values of a knob it never read

    dry = run_sweep(["run", str(study_path), "--dry-run"], tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "2 finished trials ended under a key that also named a knob" in dry.stdout, dry.stdout
    assert "status:    4 COMPLETE, 2 COMPLETE (former key) (from the trial folders" in dry.stdout, dry.stdout

    again = run_sweep(["run", str(study_path)], tmp_path, env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "6 trials, 6 already ended (skipped), 0 to run" in again.stdout, again.stdout
    assert "2 finished trials recorded under the keys of the runs they are, no longer named by dcl.sigma" \
        in again.stdout
    for new, olds in former.items():  # the first former key in key order is the record; the other a repeat
        kept, repeat = sorted(olds)
        assert (folder.trial_dir(new) / "former_key").read_text().split() == [kept]
        assert json.loads(folder.summary_path(new).read_text())["started_at"] == started[kept]  # not run again
        assert (folder.path / "superseded" / repeat / "summary.json").is_file()
        assert not folder.trial_dir(kept).exists() and not folder.trial_dir(repeat).exists()
    spec = load_study(study_path)
    for trial in expansion(spec).trials:
        assert run_signature(folder.read_config(trial.key), trial.seed) == run_signature(trial.config, trial.seed)

    rows = list(csv.DictReader((folder.path / "trials.csv").open()))
    assert len(rows) == 6 and {row["state"] for row in rows} == {"COMPLETE"}
    assert {row["dcl.sigma"] for row in rows if row["method"] == "simcse"} == {""}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="scoped", storage=f"sqlite:///{folder.path / 'optuna.db'}")
    recorded = [t for t in study.trials if t.user_attrs["key"] in former]
    assert len(recorded) == 2 and all(t.params == {"method": "simcse"} for t in recorded)
    assert all(t.state.name == "COMPLETE" for t in recorded)

    from analysis.load import load_results

    table = load_results(folder.path)
    simcse = table[table["method"] == "simcse"]
    assert sorted(simcse["seed"]) == [1, 2] and simcse["dcl.sigma"].isna().all()
    for target in (study_path, folder.path):  # the results folder alone imports the plugin beside its study file
        status = run_sweep(["status", str(target)], tmp_path, env=env)
        assert status.returncode == 0, status.stderr
        assert "next `sweep run`: 6 done (skipped), 0 to run" in status.stdout, status.stdout
