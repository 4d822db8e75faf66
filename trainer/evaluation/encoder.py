"""Sentences -> embeddings: a HF encoder and one of SimCSE's poolers, in length-sorted batches.

The encoder every evaluation uses (STS in trainer.evaluation.sts, the transfer tasks in
trainer.evaluation.transfer, STS-B dev during training) and the reference `sweep export` checks an exported
folder against. SentEval's protocol is kept: no truncation below the model's maximum length, each distinct
sentence encoded once.
"""

from __future__ import annotations

import contextlib
import inspect
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np
import torch

from trainer.errors import UserError
from trainer.models import tokenizer_digest
from trainer.vocabulary import POOLERS

NO_POOLER = "pooler 'cls' needs a model with a pooler layer (or a trained MLP); use cls_before_pooler"
# Token ids of the sentences this process has tokenised, per (tokenizer_digest, length limit): each evaluation of
# a run, and each run of a process, reads STS-B dev and the test sets again, and their ids do not change. Bounded:
# past MAX_CACHED_SENTENCES (all tokenizers together) it starts over.
TOKEN_IDS: dict[tuple[str, int], dict[str, np.ndarray]] = {}
MAX_CACHED_SENTENCES = 300_000


def token_ids(tokenizer, sentences: Sequence[str], limit: int) -> list[np.ndarray]:
    """The ids `tokenizer` gives each sentence ([CLS] ... [SEP], truncated at `limit` tokens), as int32 arrays;
    a sentence this process tokenised before with the same tokenizer (by tokenizer_digest) is not tokenised again."""
    key = (tokenizer_digest(tokenizer), limit)
    seen = TOKEN_IDS.setdefault(key, {})  # this call's table: still whole if another thread starts the cache over
    new = list(dict.fromkeys(s for s in sentences if s not in seen))
    if new and sum(map(len, TOKEN_IDS.values())) + len(new) > MAX_CACHED_SENTENCES:
        TOKEN_IDS.clear()
        seen = TOKEN_IDS.setdefault(key, {})
        new = list(dict.fromkeys(sentences))
    if new:
        ids = tokenizer(new, add_special_tokens=True, truncation=True, max_length=limit,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        seen.update(zip(new, (np.asarray(row, dtype=np.int32) for row in ids)))
    return [seen[s] for s in sentences]


class SentenceEncoder:
    """Encodes sentences with a HF encoder and one of SimCSE's poolers, in length-sorted batches.

    `cls` applies `mlp` (the trained MLP) to [CLS] when given, else the model's own pooler output.
    `avg_first_last` averages the first transformer layer's output (hidden_states[1]) and the last one.
    On CPU, BERT-family float32 models run through `trainer.evaluation.fast_forward` (same function, fewer FLOPs;
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
        from trainer.evaluation.fast_forward import unsupported_reason

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
        encoded = token_ids(self.tokenizer, distinct, limit)
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
                ids[row, : len(encoded[i])] = torch.from_numpy(encoded[i])
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
                from trainer.evaluation.fast_forward import FastEncoderForward

                fast = FastEncoderForward(self.model)  # packs the current weights, once per call
                forward = lambda ids, mask: self._fast_batch(fast, ids, mask)  # noqa: E731
                # One batch per core, each op single-threaded (STS sentences are short, and OpenMP's fork/join
                # on every small op costs more than it gains on few cores). Each thread writes its own rows of
                # `out`; the thread count is restored.
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
