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
    vocab = tokenizer.get_vocab()
    vocab_digest = hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest()[:16]
    parts = [str(path.resolve()), stat.st_size, int(stat.st_mtime), type(tokenizer).__name__, vocab_digest,
             getattr(tokenizer, "do_lower_case", None), max_length, limit]
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


_counts: dict[tuple[str, int, int, int | None], int] = {}
# SimCSE's wiki1m_for_simcse.txt holds one million sentences (one epoch at batch 64 = 15,625 steps); a dry
# run on a machine where it is not installed yet still plans with that length.
KNOWN_SENTENCES = {"wiki1m": 1_000_000}


def count_sentences(path: Path, limit: int | None = None) -> int:
    """How many sentences `load_corpus` reads from `path` (non-empty lines, at most `limit`), without
    tokenising; cached per file state, so a dry run over many trials reads the corpus once."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, int(stat.st_mtime), limit)
    if key not in _counts:
        count = 0
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    count += 1
                    if limit is not None and count >= limit:
                        break
        _counts[key] = count
    return _counts[key]


def planned_steps(config: dict) -> int | None:
    """The optimiser steps a resolved run config will take (as `train` computes them): `max_steps`, else
    `epochs` passes of drop-last batches over the corpus; None when the corpus is not installed."""
    if config.get("max_steps"):
        return int(config["max_steps"])
    from trainer.data import corpus_path, data_dir

    data = config.get("data") or {}
    limit = data.get("max_sentences")
    try:
        sentences = count_sentences(corpus_path(data_dir(data.get("data_dir")), data.get("corpus"), note=False),
                                    limit)  # a lookup, not the run: no note
    except UserError:
        known = KNOWN_SENTENCES.get(data.get("corpus"))
        if known is None:
            return None
        sentences = min(known, limit) if limit else known
    return max(1, int(config.get("epochs", 1.0) * (sentences // config["batch_size"])))
