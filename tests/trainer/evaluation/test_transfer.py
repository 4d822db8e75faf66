"""Transfer tasks: trainer.evaluation.transfer against an independent, hand-written SentEval procedure.

The reference here is written from SentEval's tools/classifier.py and tools/validation.py: an
nn.Linear created after np.random.seed/torch.manual_seed(1111), CrossEntropyLoss, torch.optim with
autograd, a fresh np.random.permutation per pass, copy.deepcopy of the best model; the protocols with
sklearn's StratifiedKFold. trainer.evaluation.transfer must give the same models bit for bit and the same numbers.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from sklearn.model_selection import StratifiedKFold

from tests.deadlines import scaled
from tests.helpers import REPO
from trainer.errors import UserError
from trainer.evaluation import classifier, transfer, transfer_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")
REGS = [1e-5, 1e-4, 1e-3, 1e-2]


# ---- the independent reference ------------------------------------------------------------------
def senteval_fit(X, y, settings, nclasses, l2, dev=None):
    """SentEval's MLP(nhid=0).fit on the CPU; returns (best dev acc, epochs run, best nn.Linear)."""
    np.random.seed(1111)
    torch.manual_seed(1111)
    model = torch.nn.Linear(X.shape[1], nclasses)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = (torch.optim.Adam if settings.optim == "adam" else torch.optim.RMSprop)(model.parameters())
    optimizer.param_groups[0]["weight_decay"] = l2
    if dev is None:
        perm = np.random.permutation(len(X))
        cut = int(0.05 * len(X))
        X, y, dev = X[perm[cut:]], y[perm[cut:]], (X[perm[:cut]], y[perm[:cut]])
    X, y = torch.FloatTensor(X), torch.LongTensor(y)
    devX, devy = torch.FloatTensor(dev[0]), torch.LongTensor(dev[1])
    nepoch, best, stop, count, best_model = 0, -1, False, 0, None
    while not stop and nepoch <= settings.max_epoch:
        for _ in range(settings.epoch_size):
            perm = np.random.permutation(len(X))
            for i in range(0, len(X), settings.batch_size):
                idx = torch.LongTensor(perm[i:i + settings.batch_size])
                loss = loss_fn(model(X.index_select(0, idx)), y.index_select(0, idx))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        nepoch += settings.epoch_size
        acc = senteval_score(model, devX, devy, settings.batch_size)
        if acc > best:
            best, best_model = acc, copy.deepcopy(model)
        else:
            if count >= settings.tenacity:
                stop = True
            count += 1
    return best, nepoch, best_model


def senteval_score(model, X, y, batch_size):
    X, y = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    with torch.no_grad():
        correct = sum(model(X[i:i + batch_size]).max(1)[1].eq(y[i:i + batch_size]).sum().item()
                      for i in range(0, len(X), batch_size))
    return 1.0 * correct / len(X)


def senteval_inner_kfold(X, y, nclasses, s):
    skf = StratifiedKFold(n_splits=s.kfold, shuffle=True, random_state=1111)
    dev, test, chosen = [], [], []
    for train, held in skf.split(X, y):
        scores = []
        for reg in REGS:
            inner = StratifiedKFold(n_splits=s.kfold, shuffle=True, random_state=1111).split(X[train], y[train])
            regscores = [senteval_fit(X[train][a], y[train][a], s, nclasses, reg, (X[train][b], y[train][b]))[0]
                         for a, b in inner]
            scores.append(round(100 * np.mean(regscores), 2))
        reg = REGS[int(np.argmax(scores))]
        dev.append(np.max(scores))
        chosen.append(reg)
        model = senteval_fit(X[train], y[train], s, nclasses, reg)[2]
        test.append(round(100 * senteval_score(model, X[held], y[held], s.batch_size), 2))
    return round(np.mean(dev), 2), round(np.mean(test), 2), chosen


def senteval_kfold(Xtr, ytr, Xte, yte, nclasses, s):
    scores = []
    for reg in REGS:
        folds = StratifiedKFold(n_splits=s.kfold, shuffle=True, random_state=1111).split(Xtr, ytr)
        scores.append(round(100 * np.mean([senteval_fit(Xtr[a], ytr[a], s, nclasses, reg, (Xtr[b], ytr[b]))[0]
                                           for a, b in folds]), 2))
    reg = REGS[int(np.argmax(scores))]
    model = senteval_fit(Xtr, ytr, s, nclasses, reg)[2]
    return np.max(scores), round(100 * senteval_score(model, Xte, yte, s.batch_size), 2), reg


def synthetic(n, dim, nclasses, seed):
    """Separable-ish classes with noise, so that L2 weights and early stopping matter."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, nclasses, n)
    centres = rng.randn(nclasses, dim).astype(np.float32)
    X = (centres[y] * 0.4 + rng.randn(n, dim)).astype(np.float32)
    return X, y.astype(np.int64)


SMALL = {
    "fasttest": classifier.ClassifierSettings(kfold=3, optim="rmsprop", batch_size=32, tenacity=3, epoch_size=2,
                                            max_epoch=40),
    "test": classifier.ClassifierSettings(kfold=3, optim="adam", batch_size=32, tenacity=5, epoch_size=4,
                                        max_epoch=16),
}


# ---- the classifier ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,dim,nclasses,with_dev", [
    ("fasttest", 16, 2, True), ("test", 16, 2, True), ("fasttest", 16, 6, False), ("test", 5, 3, True)])
def test_classifier_is_senteval_bit_for_bit(mode, dim, nclasses, with_dev):
    # dim 16 x 2 or 6 classes: weights updated stacked; 5 x 3: one by one. with_dev False: the 5% split.
    s = SMALL[mode]
    X, y = synthetic(150, dim, nclasses, seed=dim + nclasses)
    dev = synthetic(40, dim, nclasses, seed=99) if with_dev else None
    ours = classifier.fit_candidates(X, y, REGS, s, nclasses, dev)
    for fit, reg in zip(ours, REGS):
        best, epochs, model = senteval_fit(X, y, s, nclasses, reg, dev)
        assert (fit["dev"], fit["epochs"]) == (best, epochs)
        assert torch.equal(fit["model"][0], model.weight.detach())
        assert torch.equal(fit["model"][1], model.bias.detach())
        # the torch.optim path used on CUDA, run here on the CPU: the same fit
        other = classifier.fit_torch(X, y, reg, s, nclasses, dev, "cpu")
        assert (other["dev"], other["epochs"]) == (best, epochs) and torch.equal(other["model"][0], fit["model"][0])
    if (mode, dim, nclasses) == ("fasttest", 16, 6):  # one weight stops early while the others go on
        assert [f["epochs"] for f in ours] == [12, 12, 12, 10]


def test_early_stopping_counts_failed_checks_without_reset():
    # A constant dev set that is never beaten after the first check: SentEval trains tenacity + 2 checks.
    s = classifier.ClassifierSettings(kfold=2, optim="rmsprop", batch_size=8, tenacity=3, epoch_size=2, max_epoch=200)
    X, y = synthetic(40, 4, 2, seed=3)
    dev = (np.zeros((4, 4), np.float32), np.array([0, 0, 1, 1]))  # every model scores 0.5 on it
    fit = classifier.fit_candidates(X, y, [1e-5], s, 2, dev)[0]
    assert fit["dev"] == 0.5 and fit["epochs"] == (3 + 2) * s.epoch_size


# ---- the protocols --------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [1, 2])
def test_inner_kfold_protocol_matches_reference(workers):
    s = SMALL["fasttest"]
    X, y = synthetic(120, 16, 2, seed=5)
    result = transfer.run_protocols({"MR": (X, y, {"all": np.arange(len(y))}, 2)}, s, workers)["MR"]
    dev, test, chosen = senteval_inner_kfold(X, y, 2, s)
    assert (result["devacc"], result["acc"], result["l2_by_fold"]) == (dev, test, chosen)
    # the fold assignment is sklearn's StratifiedKFold(shuffle, 1111) on SentEval's row order
    folds = transfer.stratified_folds(y, s.kfold)
    expected = StratifiedKFold(n_splits=3, shuffle=True, random_state=1111).split(X, y)
    assert all((a == c).all() and (b == d).all() for (a, b), (c, d) in zip(folds, expected))


def test_kfold_and_split_protocols_match_reference():
    s = SMALL["fasttest"]
    X, y = synthetic(150, 16, 6, seed=8)
    rows = {"train": np.arange(110), "test": np.arange(110, 150)}
    out = transfer.run_protocols({"TREC": (X, y, rows, 6)}, s, 1)["TREC"]
    dev, acc, reg = senteval_kfold(X[:110], y[:110], X[110:], y[110:], 6, s)
    assert (out["devacc"], out["acc"], out["l2"]) == (dev, acc, reg)
    # SST2: the L2 weight picked on dev; its test accuracy is a refit's with that weight
    rows = {"train": np.arange(90), "dev": np.arange(90, 120), "test": np.arange(120, 150)}
    out = transfer.run_protocols({"SST2": (X, y % 2, rows, 2)}, s, 1)["SST2"]
    dev_scores = [round(100 * senteval_fit(X[:90], y[:90] % 2, s, 2, reg, (X[90:120], y[90:120] % 2))[0], 2)
                  for reg in REGS]
    reg = REGS[int(np.argmax(dev_scores))]
    model = senteval_fit(X[:90], y[:90] % 2, s, 2, reg, (X[90:120], y[90:120] % 2))[2]
    assert out["dev_by_l2"] == dev_scores and out["l2"] == reg
    assert out["acc"] == round(100 * senteval_score(model, X[120:], y[120:] % 2, s.batch_size), 2)


def test_cuda_in_process_path_on_cpu_gives_the_process_pool_accuracies():
    # The path evaluate_transfer takes on CUDA (in-process jobs, torch.optim fits) run on the
    # CPU against the CPU's process pool (lockstep fits): three tasks, one per protocol, fasttest.
    s = SMALL["fasttest"]
    X, y = synthetic(150, 16, 6, seed=8)
    Xm, ym = synthetic(120, 16, 2, seed=5)
    shared = {"MR": (Xm, ym, {"all": np.arange(len(ym))}, 2),
              "TREC": (X, y, {"train": np.arange(110), "test": np.arange(110, 150)}, 6),
              "SST2": (X, y % 2, {"train": np.arange(90), "dev": np.arange(90, 120), "test": np.arange(120, 150)}, 2)}
    calls = []
    original = classifier.fit_torch
    try:
        classifier.fit_torch = lambda *args: calls.append(args[-1]) or original(*args)
        in_process = transfer.run_protocols_in_process(shared, s, "cpu", solver="torch_optim")
    finally:
        classifier.fit_torch = original
    assert calls and set(calls) == {"cpu"}  # the torch.optim fits ran, on the CPU
    pool = transfer.run_protocols(shared, s, workers=2)
    for task in shared:
        assert (in_process[task]["devacc"], in_process[task]["acc"]) == (pool[task]["devacc"], pool[task]["acc"])
    assert classifier.solver_for("cuda:0") == "torch_optim" and classifier.solver_for("cpu") == "lockstep"
    with pytest.raises(ValueError, match="solver"):
        classifier.fit_candidates(X, y, REGS, s, 6, solver="adamw")


# ---- the loaders and the MRPC feature ----------------------------------------------------------------
def test_loaders_sort_and_label_as_senteval(tmp_path):
    (tmp_path / "pos").write_bytes("a b  c\nsingle\ncaf\xe9 au lait\n".encode("latin-1"))
    (tmp_path / "neg").write_bytes(b"x\ny   z\n")
    data = transfer_data.read_binary(tmp_path / "pos", tmp_path / "neg", "MR")
    # sorted by (number of tokens, label), stable; tokens re-joined with single spaces
    assert data.splits["all"] == ["x", "single", "y z", "a b c", "caf\xe9 au lait"]
    assert data.labels["all"].tolist() == [0, 1, 0, 1, 1]
    (tmp_path / "trec").write_text("NUM:date When was it ?\nHUM:ind Who  ?\n", encoding="latin-1")
    trec = transfer_data.read_trec(tmp_path / "trec", tmp_path / "trec")
    assert trec.splits["train"] == ["Who ?", "When was it ?"] and trec.labels["train"].tolist() == [3, 5]


def test_mrpc_pairs_and_feature(tmp_path):
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    rows = "1\t1\t2\tthe cat sat\ta cat\n0\t3\t4\tdog\tthe big dog\n1\t5\t6\tdog\tthe dog\n"
    (tmp_path / "m.txt").write_text(header + rows, encoding="utf-8")
    data = transfer_data.read_mrpc(tmp_path / "m.txt", tmp_path / "m.txt")
    # sorted by (len A, len B, label)
    assert data.splits["train"] == ["dog", "dog", "the cat sat"]
    assert data.pairs["train"] == ["the dog", "the big dog", "a cat"]
    assert data.labels["train"].tolist() == [1, 0, 1]
    vectors = {s: np.random.RandomState(len(s)).randn(3).astype(np.float32)
               for s in data.splits["train"] + data.pairs["train"]}
    X, y, rows_ = transfer_data.features(data, lambda ss: np.stack([vectors[s] for s in ss]))
    a, b = vectors["dog"], vectors["the big dog"]
    assert np.array_equal(X[1], np.concatenate([np.abs(a - b), a * b]))
    assert X.shape == (6, 6) and rows_["test"].tolist() == [3, 4, 5]


# ---- bad input --------------------------------------------------------------------------------------
def test_missing_or_altered_file_is_a_user_error(tmp_path, shared_data_dir):
    shutil.copytree(shared_data_dir / "senteval" / "TREC", tmp_path / "senteval" / "TREC")
    (tmp_path / "senteval" / "TREC" / "TREC_10.label").unlink()
    with pytest.raises(UserError, match=r"TREC_10\.label is missing.*sweep data fetch"):
        transfer_data.load_transfer_task(tmp_path, "TREC")
    shutil.copytree(shared_data_dir / "senteval" / "CR", tmp_path / "senteval" / "CR")
    path = tmp_path / "senteval" / "CR" / "custrev.pos"
    text = path.read_bytes()
    path.write_bytes(text[:100] + (b"X" if text[100:101] != b"X" else b"Y") + text[101:])
    with pytest.raises(UserError, match=r"custrev\.pos is checksum mismatch.*sweep data fetch"):
        transfer_data.load_transfer_task(tmp_path, "CR")
    with pytest.raises(UserError, match="unknown transfer task 'SST5'"):
        transfer.check_tasks(["SST5"])


# ---- the command line -------------------------------------------------------------------------------
def _start_sweep(args, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SWEEP_DATA_DIR"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "sweep", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)


def _finish(process):
    stdout, stderr = process.communicate(timeout=scaled(300))
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _sweep(args, tmp_path):
    return _finish(_start_sweep(args, tmp_path))


@pytest.mark.slow
def test_eval_json_has_transfer_keys(tmp_path, shared_data_dir, tiny_model_dir):
    done = _sweep(["eval", "--model", str(tiny_model_dir), "--data-dir", str(shared_data_dir),
                   "--tasks", "STSBenchmark", "TREC", "--transfer-mode", "fasttest", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {"STSBenchmark", "TREC", "transfer_avg"} <= set(out) and out["transfer_mode"] == "fasttest"
    assert "avg" not in out  # one STS task: its score is STS-B's, not the seven-task average
    assert 0 < out["TREC"] <= 100 and out["transfer_avg"] == out["TREC"]
    assert "MR" not in out


def test_eval_bad_transfer_input_is_one_line_exit_2(tmp_path, shared_data_dir):
    # both at once: each pays the torch import
    missing = _start_sweep(["eval", "--model", "embedded", "--data-dir", str(tmp_path), "--tasks", "MR"], tmp_path)
    mode = _start_sweep(["eval", "--model", "embedded", "--tasks", "transfer", "--transfer-mode", "slow"], tmp_path)
    done = _finish(missing)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "rt-polarity.pos is missing" in done.stderr and "sweep data fetch" in done.stderr
    done = _finish(mode)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "unknown --transfer-mode 'slow'" in done.stderr


# ---- results plumbing: trials.csv columns, Optuna attributes, Table 2 --------------------------------
TRANSFER = {"MR": 80.1, "CR": 85.2, "SUBJ": 94.3, "MPQA": 88.4, "SST2": 85.5, "TREC": 89.6, "MRPC": 74.7, "avg": 85.4}


def test_summary_transfer_reaches_csv_columns_attrs_and_metric():
    from sweep.records.store import RESULT_COLUMNS
    from trainer.summary import Summary, optuna_attrs, trials_csv_row

    summary = Summary.from_json({"status": "ok", "best_dev_stsb": 80.0, "test": {"avg": 76.0}, "transfer": TRANSFER,
                                 "transfer_mode": "test"})
    columns = trials_csv_row(summary)
    wanted = [*transfer_data.TRANSFER_TASKS, "transfer_avg"]
    assert [c for c in RESULT_COLUMNS if c in wanted] == wanted
    tasks = transfer_data.TRANSFER_TASKS
    assert {t: columns[t] for t in tasks} == {t: TRANSFER[t] for t in tasks}
    assert columns["transfer_avg"] == 85.4
    attrs = optuna_attrs(summary)
    assert attrs["MRPC"] == 74.7 and attrs["transfer_avg"] == 85.4 and attrs["transfer_mode"] == "test"
    # a trial without transfer results: empty cells, no attributes
    bare = Summary(status="ok", best_dev_stsb=80.0)
    assert trials_csv_row(bare)["MR"] is None and "MR" not in optuna_attrs(bare)


def test_table2_mean_std_over_seeds(tmp_path):
    from analysis.load import load_results
    from analysis.report import analyze
    from analysis.tables import transfer_markdown_table
    from tests import synthetic_results as fx

    trials = [fx.make_trial(fx.base_config(batch_size=b), s, 76.0) for b in (32, 64) for s in (0, 1, 2)]
    study = fx.write_results(tmp_path / "t2", trials, ["batch_size"], csv_file=False)
    rng = np.random.RandomState(0)
    for path in sorted(study.glob("trials/*/summary.json")):
        summary = json.loads(path.read_text())
        summary["transfer"] = {t: round(80 + rng.rand() * 5, 2) for t in transfer_data.TRANSFER_TASKS}
        summary["transfer"]["avg"] = round(float(np.mean(list(summary["transfer"].values()))), 2)
        summary["transfer_mode"] = "test"
        path.write_text(json.dumps(summary))
    table = load_results(study)
    text = transfer_markdown_table(table, by=["batch_size"])
    header = text.splitlines()[0]
    assert header == "| batch_size | MR | CR | SUBJ | MPQA | SST-2 | TREC | MRPC | Avg | n |"
    group = table[table["batch_size"] == 64]
    row = next(line for line in text.splitlines() if line.startswith("| 64 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == f"{np.mean(group['MR']):.2f} ± {np.std(group['MR'], ddof=1):.2f}"
    assert cells[-2] == f"{np.mean(group['transfer_avg']):.2f} ± {np.std(group['transfer_avg'], ddof=1):.2f}"
    assert cells[-1] == "3"
    written = {p.name for p in analyze(study)}
    assert {"transfer.md", "transfer.tex", "transfer.csv", "scores.md"} <= written
