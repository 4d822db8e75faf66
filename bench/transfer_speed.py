"""Transfer tasks: trainer.evaluation.transfer vs SentEval's procedure run as SentEval runs it, in one run.

The reference below is SentEval's classifier and protocols (SimCSE's copy: tools/classifier.py MLP with
nhid 0, tools/validation.py InnerKFold/KFold/Split classifiers) re-written from reading them: one
`nn.Sequential(nn.Linear)` per fit created right after np.random.seed/torch.manual_seed(1111),
CrossEntropyLoss, torch.optim Adam()/RMSprop() with weight_decay set on the param group, autograd,
`copy.deepcopy` of the best model, every fit one after another, device CPU (SentEval hard-codes CUDA; on
a CPU-only machine its procedure runs with the device set to the CPU), one torch thread.

Both sides get the same embeddings (the embedded model, pooler cls_before_pooler, encoded once, not
timed), so the timings compare the classifier work, which is what differs. Each task is timed ours
then the reference, back to back, so that load from other processes hits both alike.

    PYTHONPATH=$PWD python bench/transfer_speed.py --mode fasttest            # ours and the reference
    PYTHONPATH=$PWD python bench/transfer_speed.py --mode test --no-reference # ours only
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import table  # bench/table.py, beside this script
import torch
from sklearn.model_selection import StratifiedKFold
from torch import nn

from trainer.data import data_dir
from trainer.evaluation import transfer, transfer_data
from trainer.evaluation.cache import EmbeddingCache
from trainer.evaluation.encoder import SentenceEncoder
from trainer.models import load_encoder


# ---- the reference: SentEval's procedure, sequential --------------------------------------------
class ReferenceMLP:
    """SentEval's PyTorchClassifier + MLP(nhid=0) on the CPU."""

    def __init__(self, settings, inputdim, nclasses, l2reg, seed=1111):
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.s, self.l2reg = settings, l2reg
        self.model = nn.Sequential(nn.Linear(inputdim, nclasses))
        self.loss_fn = nn.CrossEntropyLoss()
        self.loss_fn.size_average = False  # as SentEval; PyTorch >= 1.0 ignores the attribute (mean)
        optim_fn = torch.optim.Adam if settings.optim == "adam" else torch.optim.RMSprop
        self.optimizer = optim_fn(self.model.parameters())
        self.optimizer.param_groups[0]["weight_decay"] = l2reg

    def fit(self, X, y, validation_data=None, validation_split=None):
        if validation_data is not None:
            trainX, trainy, (devX, devy) = X, y, validation_data
        else:
            permutation = np.random.permutation(len(X))
            trainidx = permutation[int(validation_split * len(X)):]
            devidx = permutation[0:int(validation_split * len(X))]
            trainX, trainy, devX, devy = X[trainidx], y[trainidx], X[devidx], y[devidx]
        trainX, trainy = torch.FloatTensor(trainX), torch.LongTensor(trainy)
        devX, devy = torch.FloatTensor(devX), torch.LongTensor(devy)
        nepoch, best, stop, count, bestmodel = 0, -1, False, 0, None
        while not stop and nepoch <= self.s.max_epoch:
            self.model.train()
            for _ in range(nepoch, nepoch + self.s.epoch_size):
                permutation = np.random.permutation(len(trainX))
                for i in range(0, len(trainX), self.s.batch_size):
                    idx = torch.LongTensor(permutation[i:i + self.s.batch_size])
                    output = self.model(trainX.index_select(0, idx))
                    loss = self.loss_fn(output, trainy.index_select(0, idx))
                    loss.item()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            nepoch += self.s.epoch_size
            acc = self.score(devX, devy)
            if acc > best:
                best, bestmodel = acc, copy.deepcopy(self.model)
            else:
                if count >= self.s.tenacity:
                    stop = True
                count += 1
        self.model = bestmodel
        return best

    def score(self, devX, devy):
        self.model.eval()
        devX, devy = torch.as_tensor(devX, dtype=torch.float32), torch.as_tensor(devy, dtype=torch.int64)
        correct = 0
        with torch.no_grad():
            for i in range(0, len(devX), self.s.batch_size):
                pred = self.model(devX[i:i + self.s.batch_size]).data.max(1)[1]
                correct += pred.long().eq(devy[i:i + self.s.batch_size].long()).sum().item()
        return 1.0 * correct / len(devX)


REGS = [10 ** t for t in range(-5, -1)]


def reference_reg_scan(X, y, folds, nclasses, s):
    """Mean fold accuracy (x100, 2 decimals) of each L2 weight in REGS, one fit per weight and fold, as
    SentEval's InnerKFoldClassifier and KFoldClassifier both scan."""
    scores = []
    for reg in REGS:
        fold_scores = []
        for a, b in folds.split(X, y):
            clf = ReferenceMLP(s, X.shape[1], nclasses, reg)
            clf.fit(X[a], y[a], validation_data=(X[b], y[b]))
            fold_scores.append(clf.score(X[b], y[b]))
        scores.append(round(100 * np.mean(fold_scores), 2))
    return scores


def reference_inner_kfold(X, y, nclasses, s):
    skf = StratifiedKFold(n_splits=s.kfold, shuffle=True, random_state=1111)
    inner = StratifiedKFold(n_splits=s.kfold, shuffle=True, random_state=1111)
    dev, test = [], []
    for train_idx, test_idx in skf.split(X, y):
        X_train, X_test, y_train, y_test = X[train_idx], X[test_idx], y[train_idx], y[test_idx]
        scores = reference_reg_scan(X_train, y_train, inner, nclasses, s)
        optreg = REGS[np.argmax(scores)]
        dev.append(np.max(scores))
        clf = ReferenceMLP(s, X.shape[1], nclasses, optreg)
        clf.fit(X_train, y_train, validation_split=0.05)
        test.append(round(100 * clf.score(X_test, y_test), 2))
    return round(np.mean(dev), 2), round(np.mean(test), 2)


def reference_kfold(Xtr, ytr, Xte, yte, nclasses, s):
    skf = StratifiedKFold(n_splits=s.kfold, shuffle=True, random_state=1111)
    scores = reference_reg_scan(Xtr, ytr, skf, nclasses, s)
    clf = ReferenceMLP(s, Xtr.shape[1], nclasses, REGS[np.argmax(scores)])
    clf.fit(Xtr, ytr, validation_split=0.05)
    return np.max(scores), round(100 * clf.score(Xte, yte), 2)


def reference_split(Xtr, ytr, Xdv, ydv, Xte, yte, nclasses, s):
    scores = []
    for reg in REGS:
        clf = ReferenceMLP(s, Xtr.shape[1], nclasses, reg)
        clf.fit(Xtr, ytr, validation_data=(Xdv, ydv))
        scores.append(round(100 * clf.score(Xdv, ydv), 2))
    clf = ReferenceMLP(s, Xtr.shape[1], nclasses, REGS[np.argmax(scores)])
    clf.fit(Xtr, ytr, validation_data=(Xdv, ydv))
    return np.max(scores), round(100 * clf.score(Xte, yte), 2)


def reference_task(task, X, y, rows, nclasses, s):
    """(devacc, acc) of `task` by the reference procedure."""
    if task == "SST2":
        parts = [(X[rows[k]], y[rows[k]]) for k in ("train", "dev", "test")]
        return reference_split(*parts[0], *parts[1], *parts[2], nclasses, s)
    if task in ("TREC", "MRPC"):
        return reference_kfold(X[rows["train"]], y[rows["train"]], X[rows["test"]], y[rows["test"]], nclasses, s)
    return reference_inner_kfold(X, y, nclasses, s)


# ---- the run ----------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="fasttest", choices=sorted(transfer.MODES))
    parser.add_argument("--tasks", nargs="+", default=transfer_data.TRANSFER_TASKS)
    parser.add_argument("--no-reference", action="store_true", help="time ours only")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--embeddings", default=None, help="npz file: reuse these embeddings, or save them there")
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    table.add_record_argument(parser)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tokenizer = load_encoder("embedded")
    encoder = SentenceEncoder(model, tokenizer, "cls_before_pooler", "cpu")
    loaded = transfer_data.load_transfer_tasks(data_dir(), args.tasks)
    started = time.perf_counter()
    sentences = [s for d in loaded.values() for s in transfer_data.task_sentences(d)]
    if args.embeddings and Path(args.embeddings).is_file():  # a previous run's embeddings (same model)
        saved = np.load(args.embeddings, allow_pickle=False)
        known = dict(zip(saved["sentences"].tolist(), saved["emb"]))
        cache = EmbeddingCache(lambda ss: np.stack([known[s] for s in ss]), sentences)
    else:
        cache = EmbeddingCache(encoder.encode, sentences)
        if args.embeddings:
            np.savez(args.embeddings, sentences=np.array(cache.sentences), emb=cache.emb)
    print(f"encoded {len(cache.sentences)} distinct sentences in {time.perf_counter() - started:.1f} s", flush=True)
    settings = transfer.MODES[args.mode]
    rows_out = []
    for task, data in loaded.items():
        X, y, rows = transfer_data.features(data, cache)
        t0 = time.perf_counter()
        ours = transfer.run_protocols({task: (X, y, rows, data.nclasses)}, settings, args.workers)[task]
        t_ours = time.perf_counter() - t0
        row = {"task": task, "ours_acc": ours["acc"], "ours_dev": ours["devacc"], "ours_s": round(t_ours, 1)}
        if not args.no_reference:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            t0 = time.perf_counter()
            dev, acc = reference_task(task, X, y, rows, data.nclasses, settings)
            row.update(ref_acc=float(acc), ref_dev=float(dev), ref_s=round(time.perf_counter() - t0, 1))
            torch.set_num_threads(threads)
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    total_ours = sum(r["ours_s"] for r in rows_out)
    summary = {"mode": args.mode, "ours_s": round(total_ours, 1),
               "ours_avg": round(float(np.mean([r["ours_acc"] for r in rows_out])), 2)}
    if not args.no_reference:
        total_ref = sum(r["ref_s"] for r in rows_out)
        summary.update(ref_s=round(total_ref, 1), speedup=round(total_ref / total_ours, 2),
                       identical=all(r["ours_acc"] == r["ref_acc"] and r["ours_dev"] == r["ref_dev"] for r in rows_out))
    print(json.dumps(summary), flush=True)
    table.record(__file__, [summary], args.record)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"tasks": rows_out, "summary": summary}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
