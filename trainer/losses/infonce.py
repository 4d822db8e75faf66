"""InfoNCE with cosine logits: the composable core of every objective in this package.

Every method here is "InfoNCE plus extra negative blocks":

    logits_i = [ cos(a_i, p_1)/tau ... cos(a_i, p_N)/tau | extra block 1, row i | extra block 2, row i | ... ]
    loss     = mean_i  -log softmax(logits_i)[i]

The positive of anchor a_i is p_i (column i of the first block); every other column of every block is a
negative. Extra blocks are (N x X) logit matrices built by the method: Gaussian noise (GS-InfoNCE),
mixed hard negatives (MixCSE), a queue of old keys (MoCoSE). A block may carry an additive constant
per column (e.g. log(lambda) for weighted noise): exp(logit + log w) = w * exp(logit), so the constant
scales that term's share of the denominator.

One direction only (anchor -> positive), as in SimCSE and MoCoSE; MixCSE's paper reading averages two.
`paired_nce` is the form without in-batch negatives (MoCo's, MoCoSE eq. 3): each row holds its own positive
and the extra blocks only.
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
    labels = torch.arange(anchor.shape[0], device=anchor.device)
    return _cross_entropy([cosine_logits(anchor, positive, temperature), *extra_logits], labels)


def paired_cosine_logits(a: Tensor, b: Tensor, temperature: float) -> Tensor:
    """cos(a_i, b_i)/tau for each row, as an (N, 1) block.

    >>> paired_cosine_logits(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[2.0, 0.0], [1.0, 1.0]]), 1.0)
    tensor([[1.0000],
            [0.7071]])
    """
    if a.dtype != b.dtype:
        common = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)
    a = F.normalize(a, dim=-1, eps=NORM_EPS)
    b = F.normalize(b, dim=-1, eps=NORM_EPS)
    return (a * b).sum(dim=-1, keepdim=True) / temperature


def paired_nce(anchor: Tensor, positive: Tensor, temperature: float, extra_logits: Sequence[Tensor] = ()) -> Tensor:
    """InfoNCE without in-batch negatives: row i is [cos(a_i, p_i) | extra blocks, row i] / tau, label 0 (the
    positive column). With no extra blocks every row holds only its positive, and the loss is exactly 0.

    >>> z = torch.eye(3)
    >>> paired_nce(z, z, temperature=1.0).item()
    0.0
    >>> round(paired_nce(z, z, 1.0, [cosine_logits(z, z[:1], 1.0)]).item(), 4)  # rows 2, 3: -log(e / (e + 1))
    0.2089
    """
    labels = torch.zeros(anchor.shape[0], dtype=torch.long, device=anchor.device)
    return _cross_entropy([paired_cosine_logits(anchor, positive, temperature), *extra_logits], labels)


def _cross_entropy(blocks: Sequence[Tensor], labels: Tensor) -> Tensor:
    """The mean cross-entropy of the concatenated logit blocks against `labels`, in at least float32:
    half-precision logits of size 1/tau = 20 lose the small differences that matter."""
    dtype = torch.promote_types(torch.float32, blocks[0].dtype)
    for block in blocks[1:]:
        dtype = torch.promote_types(dtype, block.dtype)
    blocks = [block.to(dtype) for block in blocks]
    logits = torch.cat(blocks, dim=1) if len(blocks) > 1 else blocks[0]
    return F.cross_entropy(logits, labels)
