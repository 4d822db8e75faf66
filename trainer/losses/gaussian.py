"""GS-InfoNCE: SimCSE plus Gaussian-noise negatives (Wu et al., COLING 2022; docs/science/gs-infonce.md).

Math (paper eq. 2), with M noise vectors g_k ~ N(mu, sigma^2 I) of dimension d, drawn fresh each step:

    loss = mean_i -log  exp(cos(h_i, h'_i)/tau)
                       / [ sum_j exp(cos(h_i, h'_j)/tau) + lambda * sum_k exp(cos(h_i, g_k)/tau) ]

lambda enters as an additive log(lambda) on the noise logits, so the same cross-entropy code applies.

Inputs: z1, z2 (N, d) as in SimCSE; noise (M, d) without gradient (see `sample_gaussian_negatives`).
Recommended (paper): mu 0, sigma 1, lambda 1, M = 3 x N with N = 64, tau 0.05.
Released code: lambda is parsed but unused (weight 1), the noise is not normalised (irrelevant under
cosine), and run.sh sets M = 192 for every model and batch size, dropout 0.2 for BERT and 0.1 for RoBERTa.
This implementation uses lambda as a real weight, with 1 as the default; the released variant (`variant:
released`) refuses a weight other than 1 and follows run.sh (`released.gaussian_count`, `released.dropout`).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from trainer.losses.infonce import cosine_logits, info_nce


def sample_gaussian_negatives(
    count: int,
    dim: int,
    mu: float = 0.0,
    sigma: float = 1.0,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """M = `count` noise vectors g_k ~ N(mu, sigma^2 I) of dimension `dim`; draw fresh every step.

    >>> sample_gaussian_negatives(5, 8, generator=torch.Generator().manual_seed(0)).shape
    torch.Size([5, 8])
    """
    noise = torch.randn(count, dim, generator=generator, device=device, dtype=dtype)
    return noise * sigma + mu


def gaussian_logits(anchor: Tensor, noise: Tensor, temperature: float, weight: float = 1.0) -> Tensor:
    """The noise block: cos(anchor_i, g_k)/tau + log(weight), shape (N, M); M = 0 gives (N, 0).

    Adding log(weight) makes each noise term contribute weight * exp(cos/tau) to the denominator.

    >>> gaussian_logits(torch.ones(2, 3), torch.empty(0, 3), 0.05).shape
    torch.Size([2, 0])
    """
    if weight <= 0:
        raise ValueError(f"weight (lambda) must be positive, got {weight}")
    logits = cosine_logits(anchor, noise, temperature)
    if weight != 1.0:
        logits = logits + math.log(weight)
    return logits


def gs_infonce_loss(
    z1: Tensor, z2: Tensor, noise: Tensor, temperature: float = 0.05, weight: float = 1.0,
    extra_logits: Sequence[Tensor] = (),
) -> Tensor:
    """GS-InfoNCE: SimCSE's logits plus the weighted Gaussian block. With M = 0 it is SimCSE exactly.

    >>> z = torch.eye(4)
    >>> bool(gs_infonce_loss(z, z, torch.empty(0, 4)) == gs_infonce_loss(z, z, torch.empty(0, 4), weight=3.0))
    True
    """
    return info_nce(z1, z2, temperature, [gaussian_logits(z1, noise, temperature, weight), *extra_logits])
