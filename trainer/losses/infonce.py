"""InfoNCE with cosine logits: the composable core of every objective in this package.

Every method here is "InfoNCE plus extra negative blocks":

    logits_i = [ cos(a_i, p_1)/tau ... cos(a_i, p_N)/tau | extra block 1, row i | extra block 2, row i | ... ]
    loss     = mean_i  -log softmax(logits_i)[i]

The positive of anchor a_i is p_i (column i of the first block); every other column of every block is a
negative. Extra blocks are (N x X) logit matrices built by the method: Gaussian noise (GS-InfoNCE),
mixed hard negatives (MixCSE), a queue of old keys (MoCoSE). A block may carry an additive constant
per column (e.g. log(lambda) for weighted noise): exp(logit + log w) = w * exp(logit), so the constant
scales that term's share of the denominator.

One direction only (anchor -> positive), as in SimCSE, MixCSE and MoCoSE.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

NORM_EPS = 1e-8  # a zero vector gets cosine 0 with everything instead of NaN


def cosine_logits(a: Tensor, b: Tensor, temperature: float) -> Tensor:
    """Pairwise cosine similarities divided by the temperature: out[i, j] = cos(a_i, b_j) / tau.

    a: (N, d), b: (M, d) -> (N, M). M (or N) may be 0.

    >>> a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    >>> cosine_logits(a, a, temperature=0.5)
    tensor([[2., 0.],
            [0., 2.]])
    """
    if a.dtype != b.dtype:
        # a float32 queue against bf16 queries outside autocast: compute in the wider type
        common = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)
    a = F.normalize(a, dim=-1, eps=NORM_EPS)
    b = F.normalize(b, dim=-1, eps=NORM_EPS)
    return a @ b.transpose(0, 1) / temperature


def info_nce(
    anchor: Tensor,
    positive: Tensor,
    temperature: float,
    extra_logits: Sequence[Tensor] = (),
) -> Tensor:
    """InfoNCE over [in-batch cosine logits | extra negative blocks], label i for row i.

    anchor, positive: (N, d); row i of `positive` is the positive of row i of `anchor`, every other
    row an in-batch negative. extra_logits: (N, X_b) blocks of already-scaled logits appended as
    more negatives. Returns the mean cross-entropy, computed in float32 or wider.

    >>> z = torch.eye(3)
    >>> round(info_nce(z, z, temperature=1.0).item(), 4)  # -log(e / (e + 2))
    0.5514
    """
    blocks = [cosine_logits(anchor, positive, temperature), *extra_logits]
    # cross-entropy in at least float32: half-precision logits of size 1/tau = 20 lose the small
    # differences that matter
    dtype = torch.promote_types(torch.float32, blocks[0].dtype)
    for block in blocks[1:]:
        dtype = torch.promote_types(dtype, block.dtype)
    blocks = [block.to(dtype) for block in blocks]
    logits = torch.cat(blocks, dim=1) if len(blocks) > 1 else blocks[0]
    labels = torch.arange(anchor.shape[0], device=anchor.device)
    return F.cross_entropy(logits, labels)
