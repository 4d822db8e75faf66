"""Advice the commands print works when followed literally: `sweep analyze`'s way to view the attached
figures, and `sweep doctor`'s way to get bert-base-uncased onto a machine without network."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import optuna
import yaml

from sweep import cli
from sweep.commands.analyze import attach_figures
from sweep.commands.doctor import environment_checks


def test_analyze_names_a_dashboard_command_that_serves_the_attached_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    study_dir = Path("results") / "viewed"
    study_dir.mkdir(parents=True)
    (study_dir / "study.yaml").write_text(yaml.safe_dump({"name": "viewed", "base": {"model": "embedded"}}))
    storage = f"sqlite:///{(study_dir / 'optuna.db').resolve()}"
    optuna.create_study(study_name="viewed", storage=storage)
    png = study_dir / "figure.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n not really an image")
    assert attach_figures([png], storage, "viewed", study_dir / "artifacts") == 1
    out = capsys.readouterr().out
    command = re.search(r"view them with: (sweep dashboard \S+)$", out.strip()).group(1)
    assert "optuna-dashboard" not in out

    served = {}

    def run_server(storage, host="localhost", port=8080, artifact_store=None, **kwargs):
        served.update(storage=storage, artifact_store=artifact_store)

    import optuna_dashboard

    monkeypatch.setattr(optuna_dashboard, "run_server", run_server)  # serve nothing: see what it would serve
    assert cli.main(command.split()[1:]) == 0
    study = optuna.load_study(study_name="viewed", storage=served["storage"])
    from optuna.artifacts import get_all_artifact_meta

    (meta,) = get_all_artifact_meta(study)
    with served["artifact_store"].open_reader(meta.artifact_id) as reader:
        assert reader.read() == png.read_bytes()


def test_doctor_says_where_to_copy_bert_base_uncased_and_it_then_finds_it(tmp_path, monkeypatch, tiny_model_dir):
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    checks = environment_checks(str(tmp_path / "no-data"), ray_start=False)  # no Ray head: the model advice alone
    (note,) = [c.what for c in checks if "bert-base-uncased" in c.what]
    match = re.search(r"run `hf download bert-base-uncased --cache-dir (\S+)`, then copy the folder (\S+) into "
                      r"(\S+) on this machine", note)
    assert match, note
    download_dir, folder, into = match.groups()
    assert into == str(cache)

    # what `hf download bert-base-uncased --cache-dir hub-copy` leaves on the other machine: the hub's layout
    hub_copy = tmp_path / "elsewhere" / download_dir
    snapshot = hub_copy / "models--bert-base-uncased" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_model_dir, snapshot)
    (hub_copy / "models--bert-base-uncased" / "refs").mkdir()
    (hub_copy / "models--bert-base-uncased" / "refs" / "main").write_text("0" * 40)
    copied = tmp_path / "elsewhere" / folder
    assert copied.is_dir()
    shutil.copytree(copied, Path(into) / copied.name)

    checks = environment_checks(str(tmp_path / "no-data"), ray_start=False)
    (found,) = [c for c in checks if "bert-base-uncased" in c.what]
    assert found.state == "ok" and "bert-base-uncased is cached" in found.what
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained("bert-base-uncased", cache_dir=into).hidden_size == 32

