"""SentEval's classifier for the transfer tasks, and its fits as independent jobs
(docs/science/evaluation.md#transfer-tasks).

What is computed is SentEval's, step for step: SentEval's `MLP` with nhid 0 (one `nn.Linear`), seed 1111
re-set for every fit (numpy and torch), CrossEntropyLoss (mean; SentEval's `size_average = False` assignment
is ignored by PyTorch >= 1.0), optimiser Adam() / RMSprop() with defaults and `weight_decay` = the L2 weight,
batches in the order of a fresh `np.random.permutation` per pass, `epoch_size` passes between dev checks,
early stop after `tenacity` non-improving checks (the counter is never reset), `max_epoch` 200, the best dev
model kept.

How it is done differs, never what: the classifier step is the exact sequence of ATen kernels that autograd
and `torch.optim`'s single-tensor Adam/RMSprop run (same floats, about half the Python overhead); the L2
candidates that share a data split train in lockstep (one permutation and one batch gather for all); on CUDA
torch.optim itself runs (`solver_for`). A `FitJob` is one `fit_candidates` call on rows of a task's feature
matrix; `run_job` runs it on the features `init_worker` put in `SHARED`, in a worker process with one torch
thread (trainer.evaluation.transfer's protocols make the jobs and run them).
tests/trainer/evaluation/test_transfer.py checks the classifier bit for bit against a hand-written SentEval loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

SEED = 1111
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
        return [fit_torch(X, y, l2, settings, nclasses, dev, device) for l2 in l2_weights]
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


def fit_torch(X: np.ndarray, y: np.ndarray, l2: float, settings: ClassifierSettings, nclasses: int,
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


SHARED: dict = {}  # task -> (X, y, nclasses, settings, device, solver); inherited by forked workers


def init_worker(shared: dict) -> None:
    torch.set_num_threads(1)  # many small fits: one thread each, one process per core
    SHARED.update(shared)


def run_job(job: FitJob) -> dict:
    X, y, nclasses, settings, device, solver = SHARED[job.task]
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

