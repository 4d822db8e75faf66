"""SentEval's seven transfer tasks (MR, CR, SUBJ, MPQA, SST2, TREC, MRPC) as SimCSE runs them
(docs/science/evaluation.md#transfer-tasks): the task protocols and the entry point, `evaluate_transfer`.

What is computed is SentEval's, step for step:
- Loaders and features: trainer.evaluation.transfer_data. Classifier and its fits: trainer.evaluation.classifier.
- Protocols: MR/CR/SUBJ/MPQA `InnerKFoldClassifier` (outer and inner StratifiedKFold(kfold, shuffle,
  1111), inner mean accuracy rounded to 2 decimals picks the L2 weight, refit on the outer training part
  with a 5% validation split, test = mean of the 2-decimal outer-fold accuracies); SST2 `SplitClassifier`
  (L2 weight picked on dev); TREC and MRPC `KFoldClassifier` (StratifiedKFold(kfold, shuffle, 1111) on
  train picks the L2 weight, refit on all of train with a 5% validation split); MRPC's pair feature
  `[|u-v|, u*v]`. L2 weights `10**t, t in -5..-2`; modes `test` and `fasttest` as in SimCSE's evaluation.py.

How it is done differs, never what: each distinct sentence is encoded once; the classifier's fits are
SentEval's, done faster (trainer.evaluation.classifier); all fits are independent, so they run in parallel
processes with one torch thread each; SST2's refit with the chosen weight is the chosen candidate itself
(same seed, same data, same kernels: the same model). tests/trainer/evaluation/test_transfer.py checks the
classifier bit for bit against a hand-written SentEval loop; bench/transfer_speed.py compares all seven with
SentEval's procedure.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from trainer.data import data_dir as resolve_data_dir
from trainer.errors import UserError
from trainer.evaluation.cache import EmbeddingCache, EncodeFn
from trainer.evaluation.classifier import (
    SEED,
    SHARED,
    ClassifierSettings,
    FitJob,
    init_worker,
    run_job,
    solver_for,
)
from trainer.evaluation.transfer_data import (
    TRANSFER_MODES,
    TRANSFER_TASKS,
    features,
    load_transfer_tasks,
    task_sentences,
)

L2_WEIGHTS = [10 ** t for t in range(-5, -1)]  # SentEval's `regs` with usepytorch
MODES = dict(zip(TRANSFER_MODES, (  # test, fasttest
    ClassifierSettings(kfold=10, optim="adam", batch_size=64, tenacity=5, epoch_size=4),
    ClassifierSettings(kfold=5, optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2),
)))


# ---- the protocols, their fits as independent jobs ----------------------------------------------
def stratified_folds(y: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    # scikit-learn loads here, not with the module: a run that evaluates no transfer task (every trial by default)
    # does not pay for it. SentEval passes X too; StratifiedKFold only uses its length.
    from sklearn.model_selection import StratifiedKFold

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
                    for f, (a, b) in enumerate(stratified_folds(self.y[train], k))]
        jobs = []  # InnerKFoldClassifier
        self.outer = stratified_folds(self.y, k)
        for o, (train, _) in enumerate(self.outer):
            for f, (a, b) in enumerate(stratified_folds(self.y[train], k)):
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
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            return run_protocols_in_process(shared, settings, "cpu", solver="lockstep")
        finally:
            torch.set_num_threads(threads)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                             initializer=init_worker, initargs=(payload,)) as pool:
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
    SHARED.update({task: (v[0], v[1], v[3], settings, device, solver) for task, v in shared.items()})
    try:
        pending = [job for p in protocols.values() for job in p.first()]
        while pending:
            job = pending.pop(0)
            pending += protocols[job.task].add(run_job(job))
    finally:
        SHARED.clear()  # this process may run the next trial (sweep's reuse_workers): drop the features
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
