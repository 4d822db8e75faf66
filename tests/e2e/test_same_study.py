"""One study per results folder, with the fast fake trainer."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import optuna
import pytest
import yaml

from tests.deadlines import scaled
from tests.helpers import fake_env, fake_study


def sweep(args, cwd):
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, env=fake_env(steps=2, step_s=0.05),
                          capture_output=True, text=True, timeout=scaled(240), start_new_session=True, check=False)


def test_compare_specs_tells_extensions_from_other_studies():
    from sweep.records.history import compare_specs

    old = {"name": "s", "method": "grid", "seeds": [1, 2], "budget": None, "storage": None,
           "metric": {"name": "dev_stsb", "goal": "maximize"}, "base": {"optim": {"lr": 3e-5}, "pooler": "cls"},
           "parameters": {"ema.decay": [0.9, 0.99]}, "description": "a", "resources": {"cpu": 1}}
    same = compare_specs(old, {**old, "description": "b", "resources": {"cpu": 4}})
    assert not same.any
    grown = compare_specs(old, {**old, "seeds": [1, 2, 3], "parameters": {"ema.decay": [0.99, 0.9, 0.999]}})
    assert grown.added == ["seeds +[3]", "parameters.ema.decay +[0.999]"] and grown.changed == []
    other = compare_specs(old, {**old, "base": {"optim": {"lr": 1e-5}, "pooler": "cls"}, "seeds": [1],
                                "metric": {"name": "avg", "goal": "maximize"}, "storage": "postgresql://h/db",
                                "parameters": {"ema.decay": [0.9]}, "method": "random"})
    assert sorted(other.changed) == sorted(["base.optim.lr", "seeds", "metric", "storage", "parameters.ema.decay",
                                            "method"])


@pytest.mark.slow
def test_a_second_study_under_the_same_name_is_refused_before_anything_is_written(tmp_path, shared_data_dir):
    first = fake_study(tmp_path, "tiny", shared_data_dir, decays=(0.1, 0.2))
    study_dir = tmp_path / "results" / "tiny"
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    assert sweep(["run", str(first)], tmp_path).returncode == 0
    recorded = (study_dir / "study.yaml").read_text()
    csv_before = (study_dir / "trials.csv").read_text()

    # another learning rate under the same name: exit 2, one line naming the field and the fixes
    data = yaml.safe_load(first.read_text())
    data["base"]["optim"] = {"lr": 1e-5}
    second = tmp_path / "tiny-other-lr.yaml"
    second.write_text(yaml.safe_dump(data, sort_keys=False))
    for args in (["run", str(second)], ["run", str(second), "--dry-run"]):
        result = sweep(args, tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        err = result.stderr.strip().splitlines()
        assert len(err) == 1 and "base.optim.lr" in err[0] and "name:" in err[0] and "--extend" in err[0]
    assert (study_dir / "study.yaml").read_text() == recorded  # nothing written
    assert (study_dir / "trials.csv").read_text() == csv_before
    assert len(optuna.load_study(study_name="tiny", storage=storage).get_trials()) == 2

    # the dry run shows what `sweep run` acts on (folders + Optuna), even with trials.csv gone
    (study_dir / "trials.csv").unlink()
    dry = sweep(["run", str(first), "--dry-run"], tmp_path)
    assert dry.returncode == 0 and "2 COMPLETE" in dry.stdout, dry.stdout + dry.stderr

    # added values and seeds extend the study: finished trials stay finished
    data = yaml.safe_load(first.read_text())
    data["parameters"]["ema.decay"].append(0.3)
    data["seeds"] = [1, 2]
    grown = tmp_path / "tiny-grown.yaml"
    grown.write_text(yaml.safe_dump(data, sort_keys=False))
    dry = sweep(["run", str(grown), "--dry-run"], tmp_path)
    assert dry.returncode == 0 and "2 COMPLETE, 4 not run" in dry.stdout and "would extend" in dry.stdout, dry.stdout
    result = sweep(["run", str(grown)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 already ended (skipped)" in result.stdout and "4 to run" in result.stdout
    history = yaml.safe_load((study_dir / "study_history.yaml").read_text())
    assert history[-1]["kind"] == "extended" and history[-1]["previous_study_yaml"] == recorded
    assert sorted(history[-1]["added"]) == ["parameters.ema.decay +[0.3]", "seeds +[2]"]
    status = sweep(["status", str(study_dir)], tmp_path)
    assert "next `sweep run`: 6 done (skipped), 0 to run" in status.stdout, status.stdout

    # --extend adds the other rate's trials on purpose, recorded in the history
    result = sweep(["run", str(second), "--extend"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    history = yaml.safe_load((study_dir / "study_history.yaml").read_text())
    assert history[-1]["kind"] == "extended with --extend" and "base.optim.lr" in history[-1]["changed"]
    trials = optuna.load_study(study_name="tiny", storage=storage).get_trials()
    assert all(n == 1 for n in Counter(t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE").values())
