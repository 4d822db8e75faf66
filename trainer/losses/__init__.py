"""Contrastive objectives, one per file, each a pure function of embeddings.

Every objective is `info_nce` (infonce.py) with extra negative blocks: SimCSE (none), GS-InfoNCE (Gaussian
noise), MixCSE (mixed hard negatives; its paper reading averages two such losses, one per anchor), and MoCoSE
(a key queue; its paper reading `paired_nce`, without the other in-batch keys).
"""

from trainer.losses.gaussian import gaussian_logits, gs_infonce_loss, sample_gaussian_negatives
from trainer.losses.infonce import cosine_logits, info_nce, paired_cosine_logits, paired_nce
from trainer.losses.mix import (
    mix_logits,
    mixcse_loss,
    mixcse_symmetric_loss,
    mixed_negative_logits,
    mixed_negatives,
)
from trainer.losses.mocose import mocose_loss, queue_logits
from trainer.losses.simcse import simcse_loss

__all__ = [
    "cosine_logits",
    "info_nce",
    "paired_cosine_logits",
    "paired_nce",
    "simcse_loss",
    "sample_gaussian_negatives",
    "gaussian_logits",
    "gs_infonce_loss",
    "mixed_negatives",
    "mix_logits",
    "mixcse_loss",
    "mixcse_symmetric_loss",
    "mixed_negative_logits",
    "queue_logits",
    "mocose_loss",
]
