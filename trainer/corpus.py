"""The training corpus: one sentence a line, tokenised once and cached.

Tokenising wiki1m takes minutes; every trial of a sweep on the same corpus and tokenizer reuses the
cache. The cache key covers the corpus file (path, size, mtime), the tokenizer (its vocabulary and
class), the max length and the sentence limit, so a changed input never reuses a stale cache. The cache
is written under a temporary name and renamed, so concurrent trials can race to build it safely.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.errors import UserError
from trainer.files import write_atomic
from trainer.models import tokenizer_digest


@dataclass
class TokenizedCorpus:
    """Token ids of every sentence, stored flat: sentence i is ids[offsets[i]:offsets[i+1]]."""

    ids: np.ndarray  # int32
    offsets: np.ndarray  # int64, len = n + 1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def batch(self, indices, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dynamically padded (input_ids, attention_mask) for the given sentence indices."""
        lengths = [int(self.offsets[i + 1] - self.offsets[i]) for i in indices]
        width = max(lengths)
        ids = np.full((len(indices), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(indices), width), dtype=np.int64)
        for row, (i, n) in enumerate(zip(indices, lengths)):
            ids[row, :n] = self.ids[self.offsets[i]:self.offsets[i] + n]
            mask[row, :n] = 1
        return torch.from_numpy(ids), torch.from_numpy(mask)


def read_sentences(path: Path, limit: int | None = None) -> list[str]:
    sentences = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line:
                sentences.append(line)
                if limit is not None and len(sentences) >= limit:
                    break
    if not sentences:
        raise UserError(f"training corpus {path} is empty: one sentence a line is expected")
    return sentences


def _cache_key(path: Path, tokenizer, max_length: int, limit: int | None) -> str:
    stat = path.stat()
    parts = [str(path.resolve()), stat.st_size, int(stat.st_mtime), tokenizer_digest(tokenizer), max_length, limit]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


def load_corpus(path: Path, tokenizer, max_length: int = 32, limit: int | None = None,
                cache_dir: Path | None = None) -> TokenizedCorpus:
    """Tokenise `path` (truncating to `max_length` tokens with [CLS]/[SEP]) or load it from the cache."""
    cache_file = None
    if cache_dir is not None:
        cache_file = Path(cache_dir) / f"corpus-{_cache_key(path, tokenizer, max_length, limit)}.npz"
        if cache_file.is_file():
            try:
                with np.load(cache_file) as data:
                    return TokenizedCorpus(ids=data["ids"], offsets=data["offsets"])
            except (OSError, ValueError, KeyError):
                pass  # unreadable cache: rebuild it below
    sentences = read_sentences(path, limit)
    encoded = tokenizer(sentences, truncation=True, max_length=max_length, add_special_tokens=True)["input_ids"]
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter((t for e in encoded for t in e), dtype=np.int32, count=int(offsets[-1]))
    corpus = TokenizedCorpus(ids=ids, offsets=offsets)
    if cache_file is not None:
        def save(tmp: Path) -> None:
            with open(tmp, "wb") as handle:  # a handle: np.savez would add ".npz" to a bare path
                np.savez(handle, ids=ids, offsets=offsets)

        try:
            write_atomic(cache_file, save, fsync=False)  # a cache: a lost write costs only time
        except OSError:
            pass  # a read-only cache location only costs speed
    return corpus
