"""STS evaluation exactly as SimCSE's fork of SentEval computes it (methods.md section 6).

Protocol, reproduced line by line from SentEval's `STSEval` / `STSBenchmarkEval` / `SICKRelatednessEval`:
- STS12-16: `STS.input.<subset>.txt` holds two tab-separated sentences a line, `STS.gs.<subset>.txt` one
  gold score a line; both are read with `str.splitlines()`, pairs whose gold line is empty are dropped.
  The reported figure is the "all" setting: ONE Spearman over the concatenated subsets of the year.
  Per-subset Pearson/Spearman and their mean and sample-weighted mean (wmean) are kept in the details.
- STS-B: `sts-{split}.csv`, tab-separated, no header, score/s1/s2 in columns 5/6/7 (1-based); only the
  test split is reported (dev is for model selection during training).
- SICK-R: `SICK_test_annotated.txt`, tab-separated with a header; sentence_A, sentence_B, relatedness.
- Every sentence is split on whitespace and re-joined with single spaces before tokenising (no
  truncation below the model's maximum length, no lowercasing in code); similarity is the cosine of the two
  embeddings with NaN -> 0.
- Scores are x100 with 2 decimals; Avg = mean of the 2-decimal figures, itself printed with 2 decimals.
  Avg exists only when all seven tasks were evaluated (trainer.sts_average): a subset has no average.

What differs from SentEval is only how the work is done: each distinct sentence is encoded once, in
length-sorted batches, and only the splits that are reported are encoded (SentEval also encodes the
STS-B and SICK train/dev splits it does not report). The numbers are the same.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

from trainer.data import data_dir as resolve_data_dir
from trainer.data import verified_path
from trainer.embedding_cache import EmbeddingCache, EncodeFn
from trainer.errors import UserError
from trainer.sts_average import AVG, STS_TASKS, covers_seven_tasks

STS_YEARS: dict[str, tuple[str, list[str]]] = {
    "STS12": ("STS12-en-test", ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"]),
    "STS13": ("STS13-en-test", ["FNWN", "headlines", "OnWN"]),
    "STS14": ("STS14-en-test", ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"]),
    "STS15": ("STS15-en-test", ["answers-forums", "answers-students", "belief", "headlines", "images"]),
    "STS16": ("STS16-en-test", ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"]),
}
TASKS = list(STS_TASKS)
POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")
NO_POOLER = "pooler 'cls' needs a model with a pooler layer (or a trained MLP); use cls_before_pooler"



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
    if task == "STSBenchmark":
        return [read_stsb(verified_path(root, f"senteval/STS/STSBenchmark/sts-{split}.csv"))]
    if task == "SICKRelatedness":
        name = {"train": "SICK_train", "dev": "SICK_trial", "test": "SICK_test_annotated"}[split]
        return [read_sick(verified_path(root, f"senteval/SICK/{name}.txt"))]
    raise UserError(f"unknown task '{task}': choose from {', '.join(TASKS)}")


# ---- scoring (pure functions of embeddings) --------------------------------------------------------
def cosine_scores(emb1: np.ndarray, emb2: np.ndarray) -> np.ndarray:
    """Per-pair cosine computed as SentEval does: in the embeddings' float32, one `np.dot` per term,
    `dot(u,v) / (sqrt(dot(u,u)) * sqrt(dot(v,v)))`, with nan_to_num on the inputs and on the result.

    The float32 arithmetic matters: pairs of identical sentences get cosines a few ulps from 1.0, and
    how those ties break moves Spearman by ~1e-5. A loop of np.dot over ~20k pairs costs ~50 ms.
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


def headline(task: str, details: dict) -> float:
    """The reported Spearman (fraction): 'all' for STS12-16, the split's single Spearman otherwise."""
    return details["spearman"]["all"]


def format_score(value: float) -> float:
    """x100 and 2 decimals, as SimCSE prints them ("%.2f")."""
    return float("%.2f" % (value * 100))


def average(scores_x100: Sequence[float]) -> float:
    """SimCSE's Avg.: the mean of the already-rounded x100 2-decimal figures, printed with 2 decimals."""
    return float("%.2f" % (sum(float("%.2f" % s) for s in scores_x100) / len(scores_x100)))


# ---- alignment and uniformity (Wang & Isola 2020; methods.md section 7) --------------------------
def alignment_uniformity(pairs: PairSet, lookup: Callable[[Sequence[str]], np.ndarray]) -> tuple[float, float]:
    """align = E_pos ||f(x)-f(y)||^2 over pairs with gold > 4; uniform = log E exp(-2||f(x)-f(y)||^2) over
    all pairs of distinct sentences of the split. Embeddings are L2-normalised first."""
    def unit(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.nan_to_num(x)).double()
        return torch.nn.functional.normalize(t, dim=-1)

    positive = pairs.gold > 4.0
    s1 = [s for s, keep in zip(pairs.sent1, positive) if keep]
    s2 = [s for s, keep in zip(pairs.sent2, positive) if keep]
    align = (unit(lookup(s1)) - unit(lookup(s2))).norm(dim=1).pow(2).mean().item()
    distinct = list(dict.fromkeys(pairs.sent1 + pairs.sent2))
    uniform = torch.pdist(unit(lookup(distinct)), p=2).pow(2).mul(-2).exp().mean().log().item()
    return align, uniform


# ---- encoding -------------------------------------------------------------------------------------
class SentenceEncoder:
    """Encodes sentences with a HF encoder and one of SimCSE's poolers, in length-sorted batches.

    `cls` applies `mlp` (the trained MLP) to [CLS] when given, else the model's own pooler output.
    `avg_first_last` averages the first transformer layer's output (hidden_states[1]) and the last one.
    On CPU, BERT-family float32 models run through `trainer.fast_forward` (same function, fewer FLOPs;
    `fast=False` forces the transformers forward); anything else runs the model's own forward.
    `augments` (trainer.augment.EvaluationAugments, `released.eval_cutoff` only) wraps each batch's forward
    with the training's cutoffs and token shuffle; they act through hooks, so the transformers forward runs.
    """

    def __init__(self, model, tokenizer, pooler: str = "cls_before_pooler", device: torch.device | str = "cpu",
                 batch_size: int = 64, mlp: torch.nn.Module | None = None, fast: bool = True, augments=None):
        if pooler not in POOLERS:
            raise UserError(f"unknown pooler '{pooler}': choose from {', '.join(POOLERS)}")
        self.model, self.tokenizer, self.pooler = model, tokenizer, pooler
        self.device, self.batch_size, self.mlp, self.fast = torch.device(device), batch_size, mlp, fast
        self.augments = augments
        # BERT takes token_type_ids (all zeros here, as the tokenizer gives for single sentences);
        # DistilBERT-like models do not accept the argument at all.
        self._takes_token_types = "token_type_ids" in inspect.signature(model.forward).parameters

    def uses_fast_forward(self) -> bool:
        from trainer.fast_forward import unsupported_reason

        return (self.fast and self.augments is None and self.device.type == "cpu"
                and unsupported_reason(self.model) is None)

    @torch.inference_mode()
    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Embeddings (float32, one row per input sentence, input order); each distinct sentence once."""
        distinct = list(dict.fromkeys(sentences))
        if not distinct:
            return np.zeros((0, self.model.config.hidden_size), dtype=np.float32)
        # SimCSE's batcher does not truncate; we truncate only at the model's own maximum length, which no
        # SentEval sentence reaches (the longest is 93 tokens), so that an over-long input cannot crash.
        limit = getattr(self.model.config, "max_position_embeddings", 512)
        encoded = self.tokenizer(distinct, add_special_tokens=True, truncation=True, max_length=limit,
                                 return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        order = sorted(range(len(distinct)), key=lambda i: len(encoded[i]))
        was_training = self.model.training
        self.model.eval()
        if self.mlp is not None:
            self.mlp.eval()
        out = np.empty((len(distinct), self.model.config.hidden_size), dtype=np.float32)
        pad_id = self.tokenizer.pad_token_id or 0

        def run_batch(start: int) -> None:
            idx = order[start:start + self.batch_size]
            width = max(len(encoded[i]) for i in idx)
            ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                ids[row, : len(encoded[i])] = torch.tensor(encoded[i])
                mask[row, : len(encoded[i])] = 1
            with torch.inference_mode():
                out[idx] = forward(ids.to(self.device), mask.to(self.device)).float().cpu().numpy()

        # longest batches first, so that the workers finish together on short ones
        starts = range((len(order) - 1) // self.batch_size * self.batch_size, -1, -self.batch_size)
        threads = torch.get_num_threads()
        try:
            forward = self._hf_batch
            if not self.uses_fast_forward():
                for start in starts:
                    run_batch(start)
            else:
                from trainer.fast_forward import FastEncoderForward

                fast = FastEncoderForward(self.model)  # packs the current weights, once per call
                forward = lambda ids, mask: self._fast_batch(fast, ids, mask)  # noqa: E731
                # One batch per core, each op single-threaded: STS sentences are short (~15 tokens), and
                # OpenMP's fork/join on every small op costs more than it gains; measured 5-11% faster
                # on 2 cores (bench/RESULTS.md). Disjoint rows of `out`; the thread count is restored.
                torch.set_num_threads(1)
                with ThreadPoolExecutor(max_workers=threads) as pool:
                    list(pool.map(run_batch, starts))
        finally:
            torch.set_num_threads(threads)
            self.model.train(was_training)
            if self.mlp is not None:
                self.mlp.train(was_training)
        index = {s: i for i, s in enumerate(distinct)}
        return out[[index[s] for s in sentences]]

    def _hf_batch(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        extra = {"token_type_ids": torch.zeros_like(ids)} if self._takes_token_types else {}
        augmented = self.augments.around(ids, mask) if self.augments is not None else contextlib.nullcontext()
        with augmented as position_ids:
            if position_ids is not None:
                extra["position_ids"] = position_ids
            outputs = self.model(input_ids=ids, attention_mask=mask, return_dict=True,
                                 output_hidden_states=self.pooler in ("avg_first_last", "avg_top2"), **extra)
        return self.pool(outputs, mask)

    def _fast_batch(self, fast, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.pooler in ("cls", "cls_before_pooler"):
            cls = fast(ids, mask, cls_only=True)
            if self.pooler == "cls_before_pooler":
                return cls
            if self.mlp is not None:
                return self.mlp(cls)
            if getattr(self.model, "pooler", None) is None:
                raise UserError(NO_POOLER)
            return self.model.pooler(cls[:, None])  # BertPooler: dense + tanh on position 0
        last, hidden = fast(ids, mask, all_hidden=self.pooler != "avg")
        return self.pool_hidden(last, hidden, mask)

    def pool(self, outputs, mask: torch.Tensor) -> torch.Tensor:
        """Pool a transformers model output (last_hidden_state, pooler_output, hidden_states)."""
        last = outputs.last_hidden_state
        if self.pooler == "cls_before_pooler":
            return last[:, 0]
        if self.pooler == "cls":
            if self.mlp is not None:
                return self.mlp(last[:, 0])
            if getattr(outputs, "pooler_output", None) is None:
                raise UserError(NO_POOLER)
            return outputs.pooler_output
        return self.pool_hidden(last, outputs.hidden_states, mask)

    def pool_hidden(self, last: torch.Tensor, hidden, mask: torch.Tensor) -> torch.Tensor:
        """The averaging poolers over real tokens: avg, avg_first_last, avg_top2."""
        m = mask.unsqueeze(-1).to(last.dtype)
        if self.pooler == "avg":
            return (last * m).sum(1) / m.sum(1)
        if self.pooler == "avg_first_last":
            return ((hidden[1] + hidden[-1]) / 2.0 * m).sum(1) / m.sum(1)
        return ((hidden[-1] + hidden[-2]) / 2.0 * m).sum(1) / m.sum(1)  # avg_top2


# ---- the evaluation entry points ------------------------------------------------------------------
@dataclass
class STSResult:
    scores: dict[str, float]  # task -> Spearman x100, 2 decimals
    avg: float | None  # the seven-task average; None when fewer tasks were evaluated
    details: dict  # task -> SentEval-style details (fractions, not x100)
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
    tasks = list(tasks or TASKS)
    for task in tasks:
        if task not in TASKS:
            raise UserError(f"unknown task '{task}': choose from {', '.join(TASKS)}")
    loaded = {task: load_task(root, task, "test") for task in tasks}
    au_pairs = load_task(root, "STSBenchmark", align_uniform_split)[0] if align_uniform_split else None
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
        scores[task] = format_score(headline(task, details[task]))
    avg = average([scores[t] for t in tasks]) if covers_seven_tasks(tasks) else None
    result = STSResult(scores=scores, avg=avg, details=details)
    if au_pairs is not None:
        result.align, result.uniform = alignment_uniformity(au_pairs, cache)
        result.align_uniform_split = f"stsb-{align_uniform_split}"
    result.seconds = time.perf_counter() - started
    return result


def stsb_dev_spearman(encode: EncodeFn, data_root: str | Path | None = None) -> float:
    """STS-B dev Spearman (fraction), the model-selection score during training."""
    pairs = load_task(resolve_data_dir(data_root), "STSBenchmark", "dev")[0]
    cache = EmbeddingCache(encode, pairs.sent1 + pairs.sent2)
    return float(spearmanr(cosine_scores(cache(pairs.sent1), cache(pairs.sent2)), pairs.gold)[0])


def format_table(result: STSResult) -> str:
    """The paper-style table SimCSE prints: one header row of task names, one row of scores; the "Avg."
    column only when the scores are the seven tasks."""
    average_column = [] if result.avg is None else ["%.2f" % result.avg]
    names = list(result.scores) + ["Avg."] * len(average_column)
    values = ["%.2f" % v for v in result.scores.values()] + average_column
    widths = [max(len(n), len(v)) + 2 for n, v in zip(names, values)]
    rule = "+" + "+".join("-" * w for w in widths) + "+"

    def row(cells):
        return "|" + "|".join(c.center(w) for c, w in zip(cells, widths)) + "|"

    return "\n".join([rule, row(names), rule, row(values), rule])


def split_tasks(tasks: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(STS tasks, transfer tasks) of a `--tasks` list; `transfer` stands for the seven transfer tasks.

    None -> the seven STS tasks only. An unknown name is a UserError listing both families.
    """
    from trainer.transfer import TRANSFER_TASKS

    if not tasks:
        return list(TASKS), []
    sts, transfer = [], []
    for task in tasks:
        if task in TASKS:
            sts.append(task)
        elif task == "transfer":
            transfer += TRANSFER_TASKS
        elif task in TRANSFER_TASKS:
            transfer.append(task)
        else:
            raise UserError(f"unknown task '{task}': choose from {', '.join(TASKS)}, "
                            f"{', '.join(TRANSFER_TASKS)} or `transfer` (all seven transfer tasks)")
    return list(dict.fromkeys(sts)), list(dict.fromkeys(transfer))


def eval_command(model: str, pooler: str = "cls_before_pooler", data_dir: str | None = None,
                 tasks: Sequence[str] | None = None, as_json: bool = False, batch_size: int = 64,
                 device: str = "auto", fast: bool = True, transfer_mode: str = "test") -> int:
    """`sweep eval`: evaluate any HF id, local path or `embedded` and print the tables or one JSON object.

    `tasks` mixes STS and transfer task names (`transfer` = all seven transfer tasks); transfer tasks run
    in `transfer_mode` (test or fasttest). `fast=False` (`--hf-forward`) runs the transformers forward
    instead of trainer.fast_forward, to check that both give the same figures."""
    from trainer import transfer as transfer_eval
    from trainer.models import load_encoder, pick_device

    if pooler not in POOLERS:
        raise UserError(f"unknown pooler '{pooler}': choose from {', '.join(POOLERS)}")
    sts_tasks, transfer_tasks = split_tasks(tasks)
    if transfer_mode not in transfer_eval.MODES:
        raise UserError(f"unknown --transfer-mode '{transfer_mode}': choose test (the papers' tables) or fasttest")
    root = resolve_data_dir(data_dir)
    for task in sts_tasks:  # fail on missing/altered data before the model loads
        load_task(root, task, "test")
    if sts_tasks:
        load_task(root, "STSBenchmark", "dev")
    transfer_eval.load_transfer_tasks(root, transfer_tasks)
    torch_device = pick_device(device)
    encoder_model, tokenizer = load_encoder(model)
    encoder = SentenceEncoder(encoder_model.to(torch_device), tokenizer, pooler, torch_device, batch_size, fast=fast)
    forward = "fast" if encoder.uses_fast_forward() else "transformers"
    result = evaluate_sts(encoder.encode, root, sts_tasks) if sts_tasks else None
    transfer = None
    if transfer_tasks:
        transfer = transfer_eval.evaluate_transfer(encoder.encode, root, transfer_tasks, transfer_mode,
                                                   device=torch_device, progress=not as_json)
    seconds = (result.seconds if result else 0.0) + (transfer.seconds if transfer else 0.0)
    if as_json:
        out = {"model": model, "pooler": pooler, **(result.to_json() if result else {}),
               **(transfer.to_json() if transfer else {}), "forward": forward, "seconds": round(seconds, 1)}
        print(json.dumps(out))
        return 0
    print(f"model: {model}   pooler: {pooler}   data: {root}   forward: {forward}   ({seconds:.1f} s)")
    if result:
        print(format_table(result))
        if result.align is not None:
            print(f"alignment {result.align:.4f}   uniformity {result.uniform:.4f}   "
                  f"(STS-B {align_uniform_label(result)})")
    if transfer:
        print(f"transfer tasks ({transfer.mode} mode, test accuracy; {transfer.seconds:.1f} s)")
        print(transfer_eval.format_transfer_table(transfer))
    return 0


def align_uniform_label(result: STSResult) -> str:
    return (result.align_uniform_split or "").replace("stsb-", "") + " split"
