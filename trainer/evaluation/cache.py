"""Encoding each distinct sentence once: the block both the STS evaluation (trainer.evaluation.sts) and the
transfer tasks (trainer.evaluation.transfer) look their embeddings up in.

    cache = EmbeddingCache(encoder.encode, sts_b.sent1 + sts_b.sent2)   # one pass over the distinct sentences
    left, right = cache(sts_b.sent1), cache(sts_b.sent2)                 # rows looked up by sentence
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

# sentences -> float32 embeddings, one row per sentence (e.g. trainer.evaluation.encoder.SentenceEncoder(...).encode)
EncodeFn = Callable[[Sequence[str]], np.ndarray]


class EmbeddingCache:
    """Encode the union of many sentence lists in one pass, then look rows up by sentence."""

    def __init__(self, encode: EncodeFn, sentences: Sequence[str]):
        self.sentences = list(dict.fromkeys(sentences))
        emb = encode(self.sentences)
        self.index = {s: i for i, s in enumerate(self.sentences)}
        self.emb = emb

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        return self.emb[[self.index[s] for s in sentences]]
