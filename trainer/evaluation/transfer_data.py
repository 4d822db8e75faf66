"""Reading SentEval's transfer task files (MR, CR, SUBJ, MPQA, SST2, TREC, MRPC) as SentEval reads them, and the
feature matrix a task's classifier trains on (trainer.evaluation.transfer runs the tasks;
docs/science/evaluation.md#transfer-tasks).

- Loaders: MR/CR/SUBJ/MPQA read latin-1 with `splitlines()` (label 1 = the first file: pos, or
  objective for SUBJ); SST2 utf-8 `sentence<TAB>label`; TREC latin-1 `LABEL:fine words`; MRPC utf-8
  tab-separated with a header (label, id, id, A, B). Each task's rows are sorted as SentEval sorts them
  before encoding ((length in tokens, label); MRPC (len A, len B, label)): the fold assignment depends on
  that order. Sentences are split on whitespace and joined with single spaces (SimCSE's batcher).
- Every file is checked against the data manifest before it is read (missing/altered -> UserError).
- Features: all splits stacked in one float32 matrix; MRPC's pair feature `[|u-v|, u*v]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from trainer.data import verified_path
from trainer.errors import UserError
from trainer.evaluation.cache import EncodeFn
from trainer.vocabulary import TRANSFER_TASKS as TRANSFER_TASK_NAMES

TRANSFER_TASKS = list(TRANSFER_TASK_NAMES)
# SentEval's two classifier protocols (settings: trainer.evaluation.transfer.MODES): the papers' tables, and
# SimCSE's quick one
TRANSFER_MODES = ("test", "fasttest")
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


def load_transfer_tasks(root: Path, tasks: Sequence[str]) -> dict[str, TransferData]:
    return {task: load_transfer_task(root, task) for task in tasks}


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

