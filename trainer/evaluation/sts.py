"""STS evaluation exactly as SimCSE's fork of SentEval computes it (docs/science/evaluation.md#the-seven-sts-tasks).

Protocol, reproduced line by line from SentEval's `STSEval` / `STSBenchmarkEval` / `SICKRelatednessEval`:
- STS12-16: `STS.input.<subset>.txt` holds two tab-separated sentences a line, `STS.gs.<subset>.txt` one
  gold score a line; both are read with `str.splitlines()`, pairs whose gold line is empty are dropped.
  The reported figure is the "all" setting: ONE Spearman over the concatenated subsets of the year.
  Per-subset Pearson/Spearman and their mean and sample-weighted mean (wmean) are kept in the details
  (`STSResult.details`, fractions, not x100), which a trial's summary.json holds as `sts_details` and
  `sweep eval --json` prints as `sts_details`.
- STS-B: `sts-{split}.csv`, tab-separated, no header, score/s1/s2 in columns 5/6/7 (1-based); only the
  test split is reported (dev is for model selection during training).
- SICK-R: `SICK_test_annotated.txt`, tab-separated with a header; sentence_A, sentence_B, relatedness.
- Every sentence is split on whitespace and re-joined with single spaces before tokenising (no
  truncation below the model's maximum length, no lowercasing in code); similarity is the cosine of the two
  embeddings with NaN -> 0.
- Scores are x100 with 2 decimals; Avg = mean of the 2-decimal figures, itself printed with 2 decimals.
  Avg exists only when all seven tasks were evaluated (trainer.evaluation.sts_average): a subset has no average.

What differs from SentEval is only how the work is done: each distinct sentence is encoded once, in
length-sorted batches, and only the splits that are reported are encoded (SentEval also encodes the
STS-B and SICK train/dev splits it does not report). The numbers are the same.

The encoder is trainer.evaluation.encoder's; the `sweep eval` command is sweep.commands.eval.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from trainer.data import data_dir as resolve_data_dir
from trainer.data import verified_path
from trainer.errors import UserError
from trainer.evaluation.cache import EmbeddingCache, EncodeFn
from trainer.evaluation.sts_average import AVG, covers_seven_tasks
from trainer.vocabulary import SICK_RELATEDNESS, STS12, STS13, STS14, STS15, STS16, STS_BENCHMARK, STS_TASKS

if TYPE_CHECKING:
    import torch

STS_YEARS: dict[str, tuple[str, list[str]]] = {
    STS12: ("STS12-en-test", ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"]),
    STS13: ("STS13-en-test", ["FNWN", "headlines", "OnWN"]),
    STS14: ("STS14-en-test", ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"]),
    STS15: ("STS15-en-test", ["answers-forums", "answers-students", "belief", "headlines", "images"]),
    STS16: ("STS16-en-test", ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"]),
}



# ---- reading the SentEval files -----------------------------------------------------------------
@dataclass
class PairSet:
    """One scored subset: sentence pairs (whitespace-normalised) and their gold scores."""

    name: str
    sent1: list[str]
    sent2: list[str]
    gold: np.ndarray


def _normalise(sentence: str) -> str:
    # SentEval splits on whitespace into tokens and the batcher joins them with single spaces.
    return " ".join(sentence.split())


def read_sts_subset(folder: Path, subset: str, name: str | None = None) -> PairSet:
    """An STS12-16 subset; pairs with an empty gold line are dropped (SentEval's `not_empty_idx`)."""
    inputs = folder / f"STS.input.{subset}.txt"
    golds = folder / f"STS.gs.{subset}.txt"
    lines = inputs.read_text(encoding="utf8").splitlines()
    raw_scores = golds.read_text(encoding="utf8").splitlines()
    if len(lines) != len(raw_scores):
        raise UserError(f"{inputs} has {len(lines)} lines but {golds} has {len(raw_scores)}: re-fetch the data")
    sent1, sent2, gold = [], [], []
    for line, raw in zip(lines, raw_scores):
        if raw == "":
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise UserError(f"{inputs}: a line without two tab-separated sentences; re-fetch the data")
        sent1.append(_normalise(fields[0]))
        sent2.append(_normalise(fields[1]))
        gold.append(float(raw))
    return PairSet(name or subset, sent1, sent2, np.asarray(gold, dtype=np.float64))


def read_stsb(path: Path) -> PairSet:
    """STS-B csv: tab-separated, no header; score, s1, s2 in (0-based) columns 4, 5, 6."""
    sent1, sent2, gold = [], [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.strip().split("\t")
            sent1.append(_normalise(fields[5]))
            sent2.append(_normalise(fields[6]))
            gold.append(float(fields[4]))
    return PairSet(path.stem, sent1, sent2, np.asarray(gold, dtype=np.float64))


def read_sick(path: Path) -> PairSet:
    """SICK: tab-separated with a header line; sentence_A, sentence_B, relatedness_score in columns 1, 2, 3."""
    sent1, sent2, gold = [], [], []
    with open(path, encoding="utf-8") as handle:
        next(handle, None)  # header
        for line in handle:
            fields = line.strip().split("\t")
            sent1.append(_normalise(fields[1]))
            sent2.append(_normalise(fields[2]))
            gold.append(float(fields[3]))
    return PairSet(path.stem, sent1, sent2, np.asarray(gold, dtype=np.float64))


def load_task(root: Path, task: str, split: str = "test") -> list[PairSet]:
    """The scored subsets of one task from a data directory, each file verified against the manifest."""
    if task in STS_YEARS:
        folder, subsets = STS_YEARS[task]
        sets = []
        for subset in subsets:
            for kind in ("input", "gs"):
                verified_path(root, f"senteval/STS/{folder}/STS.{kind}.{subset}.txt")
            sets.append(read_sts_subset(root / "senteval" / "STS" / folder, subset))
        return sets
    if task == STS_BENCHMARK:
        return [read_stsb(verified_path(root, f"senteval/STS/STSBenchmark/sts-{split}.csv"))]
    if task == SICK_RELATEDNESS:
        name = {"train": "SICK_train", "dev": "SICK_trial", "test": "SICK_test_annotated"}[split]
        return [read_sick(verified_path(root, f"senteval/SICK/{name}.txt"))]
    raise UserError(f"unknown task '{task}': choose from {', '.join(STS_TASKS)}")


# ---- scoring (pure functions of embeddings) --------------------------------------------------------
def cosine_scores(emb1: np.ndarray, emb2: np.ndarray) -> np.ndarray:
    """Per-pair cosine computed as SentEval does: in the embeddings' float32, one `np.dot` per term,
    `dot(u,v) / (sqrt(dot(u,u)) * sqrt(dot(v,v)))`, with nan_to_num on the inputs and on the result.

    The float32 arithmetic matters: pairs of identical sentences get cosines a few ulps from 1.0, and
    how those ties break moves Spearman in the fifth decimal. A loop of np.dot over the pairs is cheap.
    """
    a = np.nan_to_num(np.asarray(emb1, dtype=np.float32))
    b = np.nan_to_num(np.asarray(emb2, dtype=np.float32))
    sims = np.empty(len(a), dtype=np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        for i, (u, v) in enumerate(zip(a, b)):
            sims[i] = np.dot(u, v) / (np.sqrt(np.dot(u, u)) * np.sqrt(np.dot(v, v)))
    return np.nan_to_num(sims)


def score_subsets(sets: Sequence[PairSet], sims: Sequence[np.ndarray]) -> dict:
    """SentEval's STSEval result: per subset pearson/spearman/n, and 'all' (concatenated), mean, wmean."""
    from scipy.stats import pearsonr, spearmanr  # here: checking data and tasks needs no scipy
    details: dict = {"subsets": {}}
    for pairs, sim in zip(sets, sims):
        details["subsets"][pairs.name] = {
            "pearson": float(pearsonr(sim, pairs.gold)[0]),
            "spearman": float(spearmanr(sim, pairs.gold)[0]),
            "n": int(len(sim)),
        }
    weights = np.array([d["n"] for d in details["subsets"].values()], dtype=np.float64)
    all_sim = np.concatenate(list(sims))
    all_gold = np.concatenate([p.gold for p in sets])
    for metric, fn in (("pearson", pearsonr), ("spearman", spearmanr)):
        values = np.array([d[metric] for d in details["subsets"].values()])
        details[metric] = {
            "all": float(fn(all_sim, all_gold)[0]),
            "mean": float(values.mean()),
            "wmean": float(np.average(values, weights=weights)),
        }
    details["n"] = int(len(all_sim))
    return details


def headline(details: dict) -> float:
    """The reported Spearman (fraction) of a task's details: 'all' for STS12-16, the split's single Spearman
    otherwise (score_subsets files it under 'all' as well)."""
    return details["spearman"]["all"]


def format_score(value: float) -> float:
    """x100 and 2 decimals, as SimCSE prints them ("%.2f")."""
    return float("%.2f" % (value * 100))


def average(scores_x100: Sequence[float]) -> float:
    """SimCSE's Avg.: the mean of the already-rounded x100 2-decimal figures, printed with 2 decimals."""
    return float("%.2f" % (sum(float("%.2f" % s) for s in scores_x100) / len(scores_x100)))


# ---- alignment and uniformity (Wang & Isola 2020; docs/science/evaluation.md#alignment-and-uniformity) -------
def alignment_uniformity(pairs: PairSet, lookup: Callable[[Sequence[str]], np.ndarray]) -> tuple[float, float]:
    """align = E_pos ||f(x)-f(y)||^2 over pairs with gold > 4; uniform = log E exp(-2||f(x)-f(y)||^2) over
    all pairs of distinct sentences of the split. Embeddings are L2-normalised first."""
    import torch  # here, not at the top: checking data and tasks (sweep eval's bad input) needs no torch

    def unit(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.nan_to_num(x)).double()
        return torch.nn.functional.normalize(t, dim=-1)

    positive = pairs.gold > 4.0
    s1 = [s for s, keep in zip(pairs.sent1, positive) if keep]
    s2 = [s for s, keep in zip(pairs.sent2, positive) if keep]
    align = (unit(lookup(s1)) - unit(lookup(s2))).norm(dim=1).pow(2).mean().item()
    distinct = list(dict.fromkeys(pairs.sent1 + pairs.sent2))
    return align, math.log(mean_gaussian_potential(unit(lookup(distinct))))


def mean_gaussian_potential(x, rows: int = 1024) -> float:
    """mean over the pairs i < j of exp(-2 ||x_i - x_j||^2), in float64: what torch.pdist(x).pow(2).mul(-2).exp()
    .mean() gives, from matrix products over blocks of `rows` rows (||a-b||^2 = |a|^2 + |b|^2 - 2 a.b) instead of
    one distance at a time, and without the n(n-1)/2 distances in memory at once."""
    n = x.shape[0]
    norms = x.pow(2).sum(dim=1)
    total = 0.0
    for start in range(0, n, rows):
        block = x[start:start + rows]
        sq = (norms[start:start + rows, None] + norms[None, :] - 2.0 * block @ x.T).clamp_min(0.0)
        potential = sq.mul(-2.0).exp()
        total += potential.sum().item() - potential.diagonal(offset=start).sum().item()  # i = j left out
    return total / (n * (n - 1))  # each unordered pair counted twice over twice as many ordered pairs


# ---- the evaluation entry points ------------------------------------------------------------------
@dataclass
class STSResult:
    scores: dict[str, float]  # task -> Spearman x100, 2 decimals
    avg: float | None  # the seven-task average; None when fewer tasks were evaluated
    details: dict  # task -> SentEval-style details (score_subsets; fractions, not x100): summary.json `sts_details`
    align: float | None = None
    uniform: float | None = None
    align_uniform_split: str | None = None
    seconds: float = 0.0

    def test_scores(self) -> dict[str, float]:
        """The task scores, and `avg` beside them only when they are the seven tasks."""
        return dict(self.scores) if self.avg is None else {**self.scores, AVG: self.avg}

    def to_json(self) -> dict:
        out = self.test_scores()
        if self.align is not None:
            out.update(align=round(self.align, 4), uniform=round(self.uniform, 4),
                       align_uniform_split=self.align_uniform_split)
        return out


def evaluate_sts(encode: EncodeFn, data_root: str | Path | None = None, tasks: Sequence[str] | None = None,
                 align_uniform_split: str | None = "dev") -> STSResult:
    """The seven STS tasks (or `tasks`), plus alignment/uniformity on STS-B `align_uniform_split` (None: skip)."""
    started = time.perf_counter()
    root = resolve_data_dir(data_root)
    tasks = list(tasks or STS_TASKS)
    for task in tasks:
        if task not in STS_TASKS:
            raise UserError(f"unknown task '{task}': choose from {', '.join(STS_TASKS)}")
    loaded = {task: load_task(root, task, "test") for task in tasks}
    au_pairs = load_task(root, STS_BENCHMARK, align_uniform_split)[0] if align_uniform_split else None
    everything: list[str] = []
    for sets in loaded.values():
        for pairs in sets:
            everything += pairs.sent1 + pairs.sent2
    if au_pairs is not None:
        everything += au_pairs.sent1 + au_pairs.sent2
    cache = EmbeddingCache(encode, everything)
    details, scores = {}, {}
    for task, sets in loaded.items():
        sims = [cosine_scores(cache(p.sent1), cache(p.sent2)) for p in sets]
        details[task] = score_subsets(sets, sims)
        scores[task] = format_score(headline(details[task]))
    avg = average([scores[t] for t in tasks]) if covers_seven_tasks(tasks) else None
    result = STSResult(scores=scores, avg=avg, details=details)
    if au_pairs is not None:
        result.align, result.uniform = alignment_uniformity(au_pairs, cache)
        result.align_uniform_split = f"stsb-{align_uniform_split}"
    result.seconds = time.perf_counter() - started
    return result


def split_tasks(tasks: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(STS tasks, transfer tasks) of a `--tasks` list; `transfer` stands for the seven transfer tasks.

    None -> the seven STS tasks only. An unknown name is a UserError listing both families.
    """
    from trainer.evaluation.transfer_data import TRANSFER_TASKS

    if not tasks:
        return list(STS_TASKS), []
    sts, transfer = [], []
    for task in tasks:
        if task in STS_TASKS:
            sts.append(task)
        elif task == "transfer":
            transfer += TRANSFER_TASKS
        elif task in TRANSFER_TASKS:
            transfer.append(task)
        else:
            raise UserError(f"unknown task '{task}': choose from {', '.join(STS_TASKS)}, "
                            f"{', '.join(TRANSFER_TASKS)} or `transfer` (all seven transfer tasks)")
    return list(dict.fromkeys(sts)), list(dict.fromkeys(transfer))
