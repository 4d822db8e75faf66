"""MoCoSE loss: InfoNCE of online queries against target keys and a queue (Cao et al., ACL Findings 2022,
eq. 3; docs/science/mocose.md#loss-eq-3).

Math. q = online branch output (encoder -> pooler -> projection -> predictor), k = target (EMA) branch
output of the same sentences under another dropout mask, l = keys in the negative queue:

    logits_i = [ cos(q_i, k_1) ... cos(q_i, k_N) | cos(q_i, l_1) ... cos(q_i, l_K) ] / tau
    loss     = mean_i -log softmax(logits_i)[i]

One direction. Negatives: the other in-batch keys plus the queue.

Inputs: q (N, d) with gradient; k (N, d) from the target branch, detached by the caller; queue_keys
(K, d) detached, K may be 0 (empty queue at step 1 with initial size 0: in-batch keys only).
Recommended (paper, bert-base): tau 0.05, N 64, K 512 with 128 random initial keys, EMA eta 0.75 -> 0.95
(cosine), projection 1 layer, predictor 2 layers.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from trainer.losses.infonce import cosine_logits, info_nce


def queue_logits(q: Tensor, queue_keys: Tensor, temperature: float) -> Tensor:
    """cos(q_i, l_j)/tau for every queue key, shape (N, K); K = 0 gives (N, 0).

    >>> import torch
    >>> queue_logits(torch.ones(2, 4), torch.empty(0, 4), 0.05).shape
    torch.Size([2, 0])
    """
    return cosine_logits(q, queue_keys, temperature)


def mocose_loss(
    q: Tensor,
    k: Tensor,
    queue_keys: Tensor,
    temperature: float = 0.05,
    extra_logits: Sequence[Tensor] = (),
) -> Tensor:
    """MoCoSE eq. 3: InfoNCE over [cos(q, k) | cos(q, queue) | extra blocks] / tau, label i.

    >>> import torch
    >>> q = torch.eye(3)
    >>> round(mocose_loss(q, q, torch.empty(0, 3), temperature=1.0).item(), 4)  # -log(e / (e + 2))
    0.5514
    """
    return info_nce(q, k, temperature, [queue_logits(q, queue_keys, temperature), *extra_logits])
