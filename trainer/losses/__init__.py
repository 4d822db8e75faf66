"""Contrastive objectives, one per file, each a pure function of embeddings.

Every objective is `info_nce` (infonce.py) with extra negative blocks:
SimCSE (none), GS-InfoNCE (Gaussian noise), MixCSE (mixed hard negatives), MoCoSE (a key queue).
"""

from trainer.losses.gaussian import gaussian_logits, gs_infonce_loss, sample_gaussian_negatives
from trainer.losses.infonce import cosine_logits, info_nce
from trainer.losses.mix import mix_logits, mixcse_loss, mixed_negatives
from trainer.losses.mocose import mocose_loss, queue_logits
from trainer.losses.simcse import simcse_loss

__all__ = [
    "cosine_logits",
    "info_nce",
    "simcse_loss",
    "sample_gaussian_negatives",
    "gaussian_logits",
    "gs_infonce_loss",
    "mixed_negatives",
    "mix_logits",
    "mixcse_loss",
    "queue_logits",
    "mocose_loss",
]
