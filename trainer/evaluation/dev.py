"""STS-B dev during training: the score a run selects its best state by, and the collapse check (trainer.train)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from trainer.evaluation.cache import EmbeddingCache
from trainer.evaluation.sts import cosine_scores, load_task
from trainer.vocabulary import STS_BENCHMARK


class DevEvaluator:
    """STS-B dev Spearman (model selection) and the collapse check, on one set of dev embeddings."""

    def __init__(self, root: Path):
        self.pairs = load_task(root, STS_BENCHMARK, "dev")[0]

    def __call__(self, encode) -> tuple[float, float]:
        cache = EmbeddingCache(encode, self.pairs.sent1 + self.pairs.sent2)
        sims = cosine_scores(cache(self.pairs.sent1), cache(self.pairs.sent2))
        emb = torch.nn.functional.normalize(torch.from_numpy(np.nan_to_num(cache.emb)).double(), dim=-1)
        n = emb.shape[0]
        mean_cos = ((emb.sum(0).pow(2).sum() - n) / (n * (n - 1))).item()  # mean off-diagonal cosine
        rho = float(spearmanr(sims, self.pairs.gold)[0]) if np.ptp(sims) > 0 else float("nan")
        return rho, mean_cos
