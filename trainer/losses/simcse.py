"""Unsupervised SimCSE loss (Gao, Yao and Chen 2021; docs/science/simcse.md).

Math: z1, z2 are two encodings of the same N sentences under different dropout masks.

    loss = mean_i -log [ exp(cos(z1_i, z2_i)/tau) / sum_j exp(cos(z1_i, z2_j)/tau) ]

Inputs: z1 (N, d) anchors and z2 (N, d) positives, both with gradient (one forward of 2N rows).
Recommended: tau = 0.05, N = 64, lr 3e-5 (bert-base), the train-only MLP head on [CLS].
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from trainer.losses.infonce import info_nce


def simcse_loss(z1: Tensor, z2: Tensor, temperature: float = 0.05, extra_logits: Sequence[Tensor] = ()) -> Tensor:
    """SimCSE's one-direction InfoNCE over the N x N cosine logits (plus any extra negative blocks, e.g.
    MixCSE's mixed negatives when a SimCSE-family run composes them).

    >>> import torch
    >>> z = torch.eye(4)
    >>> simcse_loss(z, z, temperature=0.05).item() < 1e-6  # perfectly aligned, orthogonal negatives
    True
    """
    return info_nce(z1, z2, temperature, extra_logits)
