"""SentEval's seven transfer tasks (MR, CR, SUBJ, MPQA, SST2, TREC, MRPC) as SimCSE runs them (methods.md 10).

What is computed is SentEval's, step for step:
- Loaders: MR/CR/SUBJ/MPQA read latin-1 with `splitlines()` (label 1 = the first file: pos, or
  objective for SUBJ); SST2 utf-8 `sentence<TAB>label`; TREC latin-1 `LABEL:fine words`; MRPC utf-8
  tab-separated with a header (label, id, id, A, B). Each task's rows are sorted as SentEval sorts them
  before encoding ((length in tokens, label); MRPC (len A, len B, label)): the fold assignment depends on
  that order. Sentences are split on whitespace and joined with single spaces (SimCSE's batcher).
- Classifier: SentEval's `MLP` with nhid 0 (one `nn.Linear`), seed 1111 re-set for every fit (numpy and
  torch), CrossEntropyLoss (mean; SentEval's `size_average = False` assignment is ignored by PyTorch >= 1.0),
  optimiser Adam() / RMSprop() with defaults and `weight_decay` = the L2 weight, batches in the order of a
  fresh `np.random.permutation` per pass, `epoch_size` passes between dev checks, early stop after
  `tenacity` non-improving checks (the counter is never reset), `max_epoch` 200, the best dev model kept.
- Protocols: MR/CR/SUBJ/MPQA `InnerKFoldClassifier` (outer and inner StratifiedKFold(kfold, shuffle,
  1111), inner mean accuracy rounded to 2 decimals picks the L2 weight, refit on the outer training part
  with a 5% validation split, test = mean of the 2-decimal outer-fold accuracies); SST2 `SplitClassifier`
  (L2 weight picked on dev); TREC and MRPC `KFoldClassifier` (StratifiedKFold(kfold, shuffle, 1111) on
  train picks the L2 weight, refit on all of train with a 5% validation split); MRPC's pair feature
  `[|u-v|, u*v]`. L2 weights `10**t, t in -5..-2`; modes `test` and `fasttest` as in SimCSE's evaluation.py.

How it is done differs, never what: each distinct sentence is encoded once; the classifier step is the
exact sequence of ATen kernels that autograd and `torch.optim`'s single-tensor Adam/RMSprop run (same
floats, about half the Python overhead); the L2 candidates that share a data split train in lockstep (one
permutation and one batch gather for all); all fits are independent, so they run in parallel processes
with one torch thread each; SST2's refit with the chosen weight is the chosen candidate itself (same seed,
same data, same kernels: the same model). tests/test_transfer.py checks the classifier bit for bit
against a hand-written SentEval loop; bench/transfer_speed.py compares all seven with SentEval's procedure.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold

from trainer.data import data_dir as resolve_data_dir
from trainer.data import verified_path
from trainer.embedding_cache import EmbeddingCache, EncodeFn
from trainer.errors import UserError

TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]
SEED = 1111
L2_WEIGHTS = [10 ** t for t in range(-5, -1)]  # SentEval's `regs` with usepytorch
VALIDATION_SPLIT = 0.05  # the refit's held-out share (SentEval's `validation_split`)



@dataclass(frozen=True)
class ClassifierSettings:
    """SentEval's `params['classifier']` plus `kfold` (SimCSE's evaluation.py modes)."""

    kfold: int
    optim: str
    batch_size: int
    tenacity: int
    epoch_size: int
    max_epoch: int = 200


MODES = {
    "test": ClassifierSettings(kfold=10, optim="adam", batch_size=64, tenacity=5, epoch_size=4),
    "fasttest": ClassifierSettings(kfold=5, optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2),
}

_FILES = {
    "MR": ["senteval/MR/rt-polarity.pos", "senteval/MR/rt-polarity.neg"],
    "CR": ["senteval/CR/custrev.pos", "senteval/CR/custrev.neg"],
    "SUBJ": ["senteval/SUBJ/subj.objective", "senteval/SUBJ/subj.subjective"],
    "MPQA": ["senteval/MPQA/mpqa.pos", "senteval/MPQA/mpqa.neg"],
    "SST2": ["senteval/SST/binary/sentiment-train", "senteval/SST/binary/sentiment-dev",
             "senteval/SST/binary/sentiment-test"],
    "TREC": ["senteval/TREC/train_5500.label", "senteval/TREC/TREC_10.label"],
    "MRPC": ["senteval/MRPC/msr_paraphrase_train.txt", "senteval/MRPC/msr_paraphrase_test.txt"],
}
TREC_LABELS = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}


# ---- reading the SentEval files -----------------------------------------------------------------
@dataclass
class TransferData:
    """One task as SentEval holds it after sorting: sentences per split (A/B for MRPC) and labels."""

    name: str
    nclasses: int
    splits: dict[str, list[str]]  # split -> sentences ("train", "dev", "test"; "all" for the k-fold tasks)
    labels: dict[str, np.ndarray]
    pairs: dict[str, list[str]] = field(default_factory=dict)  # MRPC: split -> second sentences


def _join(tokens: list[str]) -> str:
    return " ".join(tokens)  # SimCSE's batcher: ' '.join(s) over SentEval's whitespace tokens


def _sorted_by_length(tokens: list[list[str]], labels: list[int]) -> tuple[list[str], np.ndarray]:
    # SentEval: sorted(zip(samples, labels), key=lambda z: (len(z[0]), z[1])) -- a stable sort
    order = sorted(zip(tokens, labels), key=lambda z: (len(z[0]), z[1]))
    return [_join(x) for x, _ in order], np.array([y for _, y in order])


def read_binary(first: Path, second: Path, name: str) -> TransferData:
    """MR/CR/SUBJ/MPQA: lines of `first` are label 1, of `second` label 0 (SentEval's pos, neg order)."""
    def lines(path: Path) -> list[list[str]]:
        with open(path, encoding="latin-1") as handle:
            return [line.split() for line in handle.read().splitlines()]

    pos, neg = lines(first), lines(second)
    sentences, labels = _sorted_by_length(pos + neg, [1] * len(pos) + [0] * len(neg))
    return TransferData(name, 2, {"all": sentences}, {"all": labels})


def read_sst2(train: Path, dev: Path, test: Path) -> TransferData:
    data = TransferData("SST2", 2, {}, {})
    for split, path in (("train", train), ("dev", dev), ("test", test)):
        tokens, labels = [], []
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                sample = line.strip().split("\t")
                labels.append(int(sample[1]))
                tokens.append(sample[0].split())
        data.splits[split], data.labels[split] = _sorted_by_length(tokens, labels)
    return data


def read_trec(train: Path, test: Path) -> TransferData:
    data = TransferData("TREC", 6, {}, {})
    for split, path in (("train", train), ("test", test)):
        tokens, labels = [], []
        with open(path, encoding="latin-1") as handle:
            for line in handle:
                target, sample = line.strip().split(":", 1)
                if target not in TREC_LABELS:
                    raise UserError(f"data file {path} has an unknown TREC label '{target}': "
                                    "re-install it with `sweep data fetch`")
                tokens.append(sample.split(" ", 1)[1].split())
                labels.append(TREC_LABELS[target])
        data.splits[split], data.labels[split] = _sorted_by_length(tokens, labels)
    return data


def read_mrpc(train: Path, test: Path) -> TransferData:
    data = TransferData("MRPC", 2, {}, {})
    for split, path in (("train", train), ("test", test)):
        rows = []
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                text = line.strip().split("\t")
                rows.append((text[3].split(), text[4].split(), text[0]))
        rows = [(a, b, int(y)) for a, b, y in rows[1:]]  # the first line is the header
        rows.sort(key=lambda z: (len(z[0]), len(z[1]), z[2]))
        data.splits[split] = [_join(a) for a, _, _ in rows]
        data.pairs[split] = [_join(b) for _, b, _ in rows]
        data.labels[split] = np.array([y for _, _, y in rows])
    return data


def load_transfer_task(root: Path, task: str) -> TransferData:
    """Read one task, every file checked against the manifest first (missing/altered -> UserError)."""
    if task not in _FILES:
        raise UserError(f"unknown transfer task '{task}': choose from {', '.join(TRANSFER_TASKS)}")
    paths = [verified_path(root, relative) for relative in _FILES[task]]
    if task == "SST2":
        return read_sst2(*paths)
    if task == "TREC":
        return read_trec(*paths)
    if task == "MRPC":
        return read_mrpc(*paths)
    return read_binary(paths[0], paths[1], task)


def task_sentences(data: TransferData) -> list[str]:
    out = []
    for split in data.splits:
        out += data.splits[split] + data.pairs.get(split, [])
    return out


def features(data: TransferData, lookup: EncodeFn) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(X, y, rows): all splits stacked in one float32 matrix; rows[split] = that split's row indices.

    MRPC's row is SentEval's pair feature np.c_[|A-B|, A*B] on float32 embeddings.
    """
    blocks, labels, rows, start = [], [], {}, 0
    for split, sentences in data.splits.items():
        emb = lookup(sentences).astype(np.float32, copy=False)
        if data.name == "MRPC":
            other = lookup(data.pairs[split]).astype(np.float32, copy=False)
            emb = np.c_[np.abs(emb - other), emb * other]
        blocks.append(emb)
        labels.append(data.labels[split])
        rows[split] = np.arange(start, start + len(sentences))
        start += len(sentences)
    return np.vstack(blocks), np.concatenate(labels).astype(np.int64), rows


# ---- SentEval's classifier, step for step -------------------------------------------------------
def initial_linear(inputdim: int, nclasses: int) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.Linear(inputdim, nclasses) as created right after torch.manual_seed(1111) (SentEval's MLP init).

    The global torch RNG is restored afterwards, so evaluation never shifts a caller's random stream.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        layer = torch.nn.Linear(inputdim, nclasses)
    return layer.weight.detach().clone(), layer.bias.detach().clone()


def accuracy(weight: torch.Tensor, bias: torch.Tensor, X: torch.Tensor, y: torch.Tensor, batch_size: int) -> float:
    """SentEval's `score`: argmax of the logits in batches of `batch_size`, correct / n."""
    correct = 0
    for i in range(0, len(X), batch_size):
        pred = torch.addmm(bias, X[i:i + batch_size], weight.t()).max(1)[1]
        correct += pred.long().eq(y[i:i + batch_size].long()).sum().item()
    return 1.0 * correct / len(X)


def predict(weight: torch.Tensor, bias: torch.Tensor, X: torch.Tensor, batch_size: int) -> np.ndarray:
    return np.concatenate([torch.addmm(bias, X[i:i + batch_size], weight.t()).max(1)[1].cpu().numpy()
                           for i in range(0, len(X), batch_size)])


class _Candidates:
    """The L2 candidates of one fit: model and optimiser state as torch.optim keeps them, updated with its
    kernels (`_single_tensor_adam` / `_single_tensor_rmsprop`, the CPU default) and the defaults of Adam()
    (lr 1e-3, betas .9/.999, eps 1e-8) and RMSprop() (lr 1e-2, alpha .99, eps 1e-8), weight_decay = l2.

    The weights of all candidates live in one (R, C, D) tensor so that the update's elementwise kernels run
    once for all of them; this is the same arithmetic element for element only when every element takes
    the vectorised path in both layouts (C*D a multiple of 32 floats, true of every SentEval task), so
    other shapes update each candidate on its own. Biases (C floats) always update one by one.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, l2_weights: Sequence[float], optim: str):
        self.l2, self.optim, self.step = list(l2_weights), optim, 0
        n = len(self.l2)
        self.weight = weight.unsqueeze(0).repeat(n, 1, 1).contiguous()
        self.bias = [bias.clone() for _ in range(n)]
        self.stacked = weight.numel() % 32 == 0
        self.w_grad = torch.zeros_like(self.weight)
        self.w_sq, self.w_avg = torch.zeros_like(self.weight), torch.zeros_like(self.weight)
        self.b_sq = [torch.zeros_like(bias) for _ in range(n)]
        self.b_avg = [torch.zeros_like(bias) for _ in range(n)]
        self.best = [-1.0] * n
        self.best_model: list = [None] * n
        self.bad_checks, self.stopped, self.epochs = [0] * n, [False] * n, [0] * n

    def _update(self, param, grad, sq, avg) -> None:
        if self.optim == "adam":
            avg.lerp_(grad, 1 - 0.9)
            sq.mul_(0.999).addcmul_(grad, grad, value=1 - 0.999)
            step = float(self.step)
            bias_correction1 = 1 - 0.9 ** step
            bias_correction2 = 1 - 0.999 ** step
            denom = (sq.sqrt() / bias_correction2 ** 0.5).add_(1e-8)
            param.addcdiv_(avg, denom, value=-(0.001 / bias_correction1))
        else:
            sq.mul_(0.99).addcmul_(grad, grad, value=1 - 0.99)
            param.addcdiv_(grad, sq.sqrt().add_(1e-8), value=-0.01)

    def train_step(self, xb: torch.Tensor, yb: torch.Tensor, one: torch.Tensor, total: torch.Tensor) -> None:
        """One optimiser step of every active candidate on the batch (xb, yb)."""
        self.step += 1  # stopped candidates are never read again, so they may step along
        for r, l2 in enumerate(self.l2):
            if self.stopped[r]:
                continue
            g_weight, g_bias = _gradients(self.weight[r], self.bias[r], xb, yb, one, total)
            # weight decay: grad.add(param, alpha=weight_decay), as torch.optim does (skipped when 0)
            if l2 != 0:
                torch.add(g_weight, self.weight[r], alpha=l2, out=self.w_grad[r])
                g_bias = g_bias.add(self.bias[r], alpha=l2)
            else:
                self.w_grad[r].copy_(g_weight)
            self._update(self.bias[r], g_bias, self.b_sq[r], self.b_avg[r])
            if not self.stacked:
                self._update(self.weight[r], self.w_grad[r], self.w_sq[r], self.w_avg[r])
        if self.stacked:
            self._update(self.weight, self.w_grad, self.w_sq, self.w_avg)

    def check(self, r: int, score: float, nepoch: int, tenacity: int) -> None:
        """SentEval's early stopping after a dev check: keep the best model; stop once `tenacity` checks
        have failed to improve (the counter is never reset)."""
        self.epochs[r] = nepoch
        if score > self.best[r]:
            self.best[r], self.best_model[r] = score, (self.weight[r].clone(), self.bias[r].clone())
        else:
            if self.bad_checks[r] >= tenacity:
                self.stopped[r] = True
            self.bad_checks[r] += 1


def _gradients(weight, bias, xb, yb, one, total) -> list[torch.Tensor]:
    """Gradients of CrossEntropyLoss(mean)(xb @ W.T + b, yb), with the kernels autograd runs for them."""
    logits = torch.addmm(bias, xb, weight.t())
    log_probs = torch.log_softmax(logits, 1)
    grad = torch.ops.aten.nll_loss_backward(one, log_probs, yb, None, 1, -100, total)
    grad = torch.ops.aten._log_softmax_backward_data(grad, log_probs, 1, torch.float32)
    return [grad.t().mm(xb), grad.sum(0)]


def solver_for(device: str | torch.device) -> str:
    """The fit code path a device uses: "torch_optim" (SentEval's own nn.Linear + torch.optim, one fit per
    weight) on CUDA, where torch.optim's multi-tensor kernels set the floats; "lockstep" (every weight in
    one pass, hand-written updates with the same kernels as the CPU's torch.optim) elsewhere."""
    return "torch_optim" if torch.device(device).type == "cuda" else "lockstep"


def fit_candidates(X: np.ndarray, y: np.ndarray, l2_weights: Sequence[float], settings: ClassifierSettings,
                   nclasses: int, dev: tuple[np.ndarray, np.ndarray] | None = None,
                   device: str = "cpu", solver: str | None = None) -> list[dict]:
    """SentEval's `MLP(...).fit(X, y, validation_data=dev or validation_split=0.05)` for each L2 weight.

    The weights train in lockstep: every SentEval fit re-seeds numpy with 1111 and draws the same
    permutations (same length), so one draw and one gather serve all; each candidate keeps its own
    early stopping. Returns per weight: best dev accuracy, epochs run, and the best model (weight, bias).
    `solver`: "lockstep" or "torch_optim" (see `solver_for`, the default for `device`).
    """
    solver = solver or solver_for(device)
    if solver not in ("lockstep", "torch_optim"):
        raise ValueError(f"solver must be 'lockstep' or 'torch_optim', got {solver!r}")
    if solver == "torch_optim":
        return [_fit_torch(X, y, l2, settings, nclasses, dev, device) for l2 in l2_weights]
    rng = np.random.RandomState(SEED)  # == np.random.seed(1111) then np.random.* (the legacy MT19937 stream)
    if dev is None:  # prepare_split with validation_split
        permutation = rng.permutation(len(X))
        cut = int(VALIDATION_SPLIT * len(X))
        X, y, dev = X[permutation[cut:]], y[permutation[cut:]], (X[permutation[:cut]], y[permutation[:cut]])
    Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)).to(device)
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)).to(device)
    Xd = torch.from_numpy(np.ascontiguousarray(dev[0], dtype=np.float32)).to(device)
    yd = torch.from_numpy(np.ascontiguousarray(dev[1], dtype=np.int64)).to(device)
    weight, bias = initial_linear(X.shape[1], nclasses)
    fits = _Candidates(weight.to(device), bias.to(device), l2_weights, settings.optim)
    one = torch.tensor(1.0, device=device)
    totals = {}
    nepoch, size = 0, settings.batch_size
    with torch.inference_mode():
        while nepoch <= settings.max_epoch and not all(fits.stopped):
            for _ in range(settings.epoch_size):
                permutation = torch.from_numpy(rng.permutation(len(Xt))).to(device)
                # one gather per pass; each batch is then a row slice, the same values SentEval's
                # per-batch index_select gives, in the same contiguous layout
                Xp, yp = Xt.index_select(0, permutation), yt.index_select(0, permutation)
                for i in range(0, len(Xt), size):
                    xb, yb = Xp[i:i + size], yp[i:i + size]
                    total = totals.get(len(xb))
                    if total is None:
                        total = totals[len(xb)] = torch.tensor(float(len(xb)), device=device)
                    fits.train_step(xb, yb, one, total)
            nepoch += settings.epoch_size
            for r in range(len(fits.l2)):
                if not fits.stopped[r]:
                    score = accuracy(fits.weight[r], fits.bias[r], Xd, yd, size)
                    fits.check(r, score, nepoch, settings.tenacity)
    return [{"l2": fits.l2[r], "dev": fits.best[r], "epochs": fits.epochs[r], "model": fits.best_model[r]}
            for r in range(len(fits.l2))]


def _fit_torch(X: np.ndarray, y: np.ndarray, l2: float, settings: ClassifierSettings, nclasses: int,
               dev: tuple[np.ndarray, np.ndarray] | None, device: str) -> dict:
    """One fit with nn.Linear, autograd and torch.optim on `device`, the code path SentEval itself runs.

    Used on CUDA, where torch.optim picks its multi-tensor kernels: running torch.optim itself keeps the
    floats SentEval's on the same GPU. The model is created on the CPU and moved, as SentEval does.
    """
    rng = np.random.RandomState(SEED)
    if dev is None:
        permutation = rng.permutation(len(X))
        cut = int(VALIDATION_SPLIT * len(X))
        X, y, dev = X[permutation[cut:]], y[permutation[cut:]], (X[permutation[:cut]], y[permutation[:cut]])
    def on_device(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    Xt, yt, Xd, yd = on_device(X), on_device(y), on_device(dev[0]), on_device(dev[1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = torch.nn.Linear(X.shape[1], nclasses).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = (torch.optim.Adam if settings.optim == "adam" else torch.optim.RMSprop)(model.parameters())
    optimizer.param_groups[0]["weight_decay"] = l2
    nepoch, best, bad_checks, best_model = 0, -1.0, 0, None
    while nepoch <= settings.max_epoch:
        for _ in range(settings.epoch_size):
            permutation = torch.from_numpy(rng.permutation(len(Xt))).to(device)
            for i in range(0, len(Xt), settings.batch_size):
                idx = permutation[i:i + settings.batch_size]
                loss = loss_fn(model(Xt.index_select(0, idx)), yt.index_select(0, idx))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        nepoch += settings.epoch_size
        with torch.no_grad():
            score = accuracy(model.weight, model.bias, Xd, yd, settings.batch_size)
        if score > best:
            best, best_model = score, (model.weight.detach().clone(), model.bias.detach().clone())
        else:
            if bad_checks >= settings.tenacity:
                break
            bad_checks += 1
    return {"l2": l2, "dev": best, "epochs": nepoch, "model": best_model}


# ---- the fits of one evaluation, as independent jobs --------------------------------------------
@dataclass
class FitJob:
    """One `fit_candidates` call: rows of a task's feature matrix; `score` rows are scored afterwards."""

    key: tuple
    task: str
    train: np.ndarray
    l2_weights: tuple
    dev: np.ndarray | None = None  # None: SentEval's validation_split
    score: np.ndarray | None = None


_SHARED: dict = {}  # task -> (X, y, nclasses, settings, device, solver); inherited by forked workers


def _init_worker(shared: dict) -> None:
    torch.set_num_threads(1)  # many small fits: one thread each, one process per core
    _SHARED.update(shared)


def run_job(job: FitJob) -> dict:
    X, y, nclasses, settings, device, solver = _SHARED[job.task]
    dev = None if job.dev is None else (X[job.dev], y[job.dev])
    fits = fit_candidates(X[job.train], y[job.train], job.l2_weights, settings, nclasses, dev, device, solver)
    for fit in fits:
        if job.score is not None:
            Xs = torch.from_numpy(X[job.score]).to(device)
            ys = torch.from_numpy(y[job.score]).to(device)
            fit["test"] = accuracy(*fit["model"], Xs, ys, settings.batch_size)
            if nclasses == 2:
                fit["predictions"] = predict(*fit["model"], Xs, settings.batch_size)
        del fit["model"]
    return {"key": job.key, "fits": fits}


def _folds(y: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    # SentEval passes X too; StratifiedKFold only uses its length
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=SEED).split(np.zeros(len(y)), y))


class _Protocol:
    """A task's SentEval classifier protocol as jobs: `first()` jobs, then `then(results)` jobs, then `result()`."""

    def __init__(self, task: str, y: np.ndarray, rows: dict[str, np.ndarray], settings: ClassifierSettings):
        self.task, self.y, self.rows, self.settings = task, y, rows, settings
        self.done: dict[tuple, list[dict]] = {}

    def first(self) -> list[FitJob]:
        k, regs = self.settings.kfold, tuple(L2_WEIGHTS)
        if self.task == "SST2":  # SplitClassifier: fits chosen on dev, scored on test; two jobs of two
            # weights: the largest fits of all, so they are split across processes but still share batches
            return [FitJob((self.task, "regs", g), self.task, self.rows["train"], regs[g:g + 2], self.rows["dev"],
                           self.rows["test"]) for g in range(0, len(regs), 2)]
        if self.task in ("TREC", "MRPC"):  # KFoldClassifier on train
            train = self.rows["train"]
            return [FitJob((self.task, "fold", f), self.task, train[a], regs, train[b])
                    for f, (a, b) in enumerate(_folds(self.y[train], k))]
        jobs = []  # InnerKFoldClassifier
        self.outer = _folds(self.y, k)
        for o, (train, _) in enumerate(self.outer):
            for f, (a, b) in enumerate(_folds(self.y[train], k)):
                jobs.append(FitJob((self.task, "inner", o, f), self.task, train[a], regs, train[b]))
        return jobs

    def add(self, result: dict) -> list[FitJob]:
        """Record a finished job; return the jobs it unlocks (the refit once a selection is complete)."""
        key = result["key"]
        self.done[key] = result["fits"]
        k = self.settings.kfold
        if key[1] == "inner":
            o = key[2]
            inner = [self.done.get((self.task, "inner", o, f)) for f in range(k)]
            if all(inner):
                train, test = self.outer[o]
                reg = L2_WEIGHTS[int(np.argmax(self._cv_scores(inner)))]
                return [FitJob((self.task, "refit", o), self.task, train, (reg,), None, test)]
        elif key[1] == "fold":
            folds = [self.done.get((self.task, "fold", f)) for f in range(k)]
            if all(folds):
                reg = L2_WEIGHTS[int(np.argmax(self._cv_scores(folds)))]
                return [FitJob((self.task, "refit"), self.task, self.rows["train"], (reg,), None, self.rows["test"])]
        return []

    @staticmethod
    def _cv_scores(per_fold: list[list[dict]]) -> list[float]:
        # scores.append(round(100 * np.mean(regscores), 2)); clf.score on the held-out fold == best dev acc
        return [round(100 * np.mean([fold[r]["dev"] for fold in per_fold]), 2) for r in range(len(L2_WEIGHTS))]

    def result(self) -> dict:
        k = self.settings.kfold
        if self.task == "SST2":
            fits = [fit for g in range(0, len(L2_WEIGHTS), 2) for fit in self.done[(self.task, "regs", g)]]
            scores = [round(100 * f["dev"], 2) for f in fits]
            best = int(np.argmax(scores))
            return {"devacc": float(np.max(scores)), "acc": round(100 * fits[best]["test"], 2),
                    "l2": L2_WEIGHTS[best], "dev_by_l2": scores,
                    "ndev": len(self.rows["dev"]), "ntest": len(self.rows["test"])}
        if self.task in ("TREC", "MRPC"):
            scores = self._cv_scores([self.done[(self.task, "fold", f)] for f in range(k)])
            refit = self.done[(self.task, "refit")][0]
            out = {"devacc": float(np.max(scores)), "acc": round(100 * refit["test"], 2),
                   "l2": L2_WEIGHTS[int(np.argmax(scores))], "dev_by_l2": scores,
                   "ndev": len(self.rows["train"]), "ntest": len(self.rows["test"])}
            if self.task == "MRPC":
                from sklearn.metrics import f1_score

                out["f1"] = round(100 * f1_score(self.y[self.rows["test"]], refit["predictions"]), 2)
            return out
        dev, test, regs = [], [], []
        for o in range(k):
            scores = self._cv_scores([self.done[(self.task, "inner", o, f)] for f in range(k)])
            dev.append(np.max(scores))
            regs.append(L2_WEIGHTS[int(np.argmax(scores))])
            test.append(round(100 * self.done[(self.task, "refit", o)][0]["test"], 2))
        return {"devacc": round(float(np.mean(dev)), 2), "acc": round(float(np.mean(test)), 2),
                "l2_by_fold": regs, "test_by_fold": test, "ndev": len(self.y), "ntest": len(self.y)}


def run_protocols(shared: dict, settings: ClassifierSettings, workers: int | None = None) -> dict[str, dict]:
    """Run every task's jobs (largest first) on `workers` processes; task -> SentEval's result dict."""
    protocols = {task: _Protocol(task, y, rows, settings) for task, (X, y, rows, _) in shared.items()}
    payload = {task: (X, y, nclasses, settings, "cpu", "lockstep") for task, (X, y, _, nclasses) in shared.items()}
    jobs = [job for p in protocols.values() for job in p.first()]
    jobs.sort(key=lambda job: -len(job.train) * len(job.l2_weights))
    if not workers:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if workers <= 1:
        _init_worker(payload)
        pending = list(jobs)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            while pending:
                pending += protocols[pending[0].task].add(run_job(pending.pop(0)))
        finally:
            torch.set_num_threads(threads)
            _SHARED.clear()  # this process may run the next trial (sweep's reuse_workers): drop the features
        return {task: p.result() for task, p in protocols.items()}
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                             initializer=_init_worker, initargs=(payload,)) as pool:
        running: set[Future] = {pool.submit(run_job, job) for job in jobs}
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                result = future.result()
                for job in protocols[result["key"][0]].add(result):
                    running.add(pool.submit(run_job, job))
    return {task: p.result() for task, p in protocols.items()}


def run_protocols_in_process(shared: dict, settings: ClassifierSettings, device: str,
                             solver: str | None = None) -> dict[str, dict]:
    """Same jobs, one after another in this process, with the tensors on `device` and `solver`'s fits
    (default: the device's, `solver_for`). CUDA runs this; on the CPU it runs CUDA's code path in tests."""
    protocols = {task: _Protocol(task, v[1], v[2], settings) for task, v in shared.items()}
    solver = solver or solver_for(device)
    _SHARED.update({task: (v[0], v[1], v[3], settings, device, solver) for task, v in shared.items()})
    try:
        pending = [job for p in protocols.values() for job in p.first()]
        while pending:
            job = pending.pop(0)
            pending += protocols[job.task].add(run_job(job))
    finally:
        _SHARED.clear()  # this process may run the next trial (sweep's reuse_workers): drop the features
    return {task: p.result() for task, p in protocols.items()}


# ---- the entry point ------------------------------------------------------------------------------
@dataclass
class TransferResult:
    scores: dict[str, float]  # task -> test accuracy x100, 2 decimals (SentEval's 'acc')
    avg: float
    mode: str
    details: dict  # task -> SentEval's result dict (devacc, acc, ndev, ntest, chosen L2 weights, ...)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {**self.scores, "transfer_avg": self.avg, "transfer_mode": self.mode}


def check_tasks(tasks: Sequence[str] | None, mode: str = "test") -> list[str]:
    tasks = list(tasks or TRANSFER_TASKS)
    for task in tasks:
        if task not in TRANSFER_TASKS:
            raise UserError(f"unknown transfer task '{task}': choose from {', '.join(TRANSFER_TASKS)}")
    if mode not in MODES:
        raise UserError(f"unknown transfer mode '{mode}': choose test (the papers' tables) or fasttest")
    return tasks


def load_transfer_tasks(root: Path, tasks: Sequence[str]) -> dict[str, TransferData]:
    return {task: load_transfer_task(root, task) for task in tasks}


def evaluate_transfer(encode: EncodeFn, data_root: str | Path | None = None, tasks: Sequence[str] | None = None,
                      mode: str = "test", workers: int | None = None, device: str | torch.device = "cpu",
                      progress: bool = False) -> TransferResult:
    """The seven SentEval transfer tasks (or `tasks`) in SimCSE's `test` or `fasttest` mode.

    `encode` maps sentences to float32 embeddings (e.g. SentenceEncoder(...).encode); every distinct
    sentence of all the tasks is encoded once. `device`: the classifier's device; a CUDA device runs the
    fits there one after another, else they run on `workers` processes (default: every core).

    >>> result = evaluate_transfer(encoder.encode, tasks=["MR"], mode="fasttest")  # doctest: +SKIP
    >>> result.scores["MR"], result.avg  # doctest: +SKIP
    """
    started = time.perf_counter()
    tasks = check_tasks(tasks, mode)
    settings = MODES[mode]
    loaded = load_transfer_tasks(resolve_data_dir(data_root), tasks)
    cache = EmbeddingCache(encode, [s for data in loaded.values() for s in task_sentences(data)])
    shared = {}
    for task, data in loaded.items():
        X, y, rows = features(data, cache)
        shared[task] = (X, y, rows, data.nclasses)
    if progress:
        print(f"transfer: {len(cache.sentences)} sentences encoded in {time.perf_counter() - started:.1f} s; "
              f"training the classifiers ({mode})", file=sys.stderr)
    device = torch.device(device)
    if device.type == "cuda":
        details = run_protocols_in_process(shared, settings, str(device))
    else:
        details = run_protocols(shared, settings, workers)
    scores = {task: details[task]["acc"] for task in tasks}
    avg = round(float(np.mean(list(scores.values()))), 2)
    return TransferResult(scores=scores, avg=avg, mode=mode, details={t: details[t] for t in tasks},
                          seconds=time.perf_counter() - started)


def format_transfer_table(result: TransferResult) -> str:
    """The paper-style table (SimCSE's print_table): task names, then accuracies, then Avg."""
    names = list(result.scores) + ["Avg."]
    values = ["%.2f" % v for v in result.scores.values()] + ["%.2f" % result.avg]
    widths = [max(len(n), len(v)) + 2 for n, v in zip(names, values)]
    rule = "+" + "+".join("-" * w for w in widths) + "+"
    row = lambda cells: "|" + "|".join(c.center(w) for c, w in zip(cells, widths)) + "|"  # noqa: E731
    return "\n".join([rule, row(names), rule, row(values), rule])
