"""MoCoSE loss: InfoNCE of online queries against target keys and a queue (Cao et al., ACL Findings 2022,
eq. 3 and Algorithm 1 line 6; docs/science/mocose.md#loss-eq-3).

Math. q = online branch output (encoder -> pooler -> projection -> predictor), k = target (EMA) branch
output of the same sentences under another augmentation, l = keys in the negative queue:

    paper (eq. 3):   logits_i = [ cos(q_i, k_i) | cos(q_i, l_1) ... cos(q_i, l_K) ] / tau,    label 0
    in-batch keys:   logits_i = [ cos(q_i, k_1) ... cos(q_i, k_N) | cos(q_i, l_1) ... ] / tau, label i
    loss = mean_i -log softmax(logits_i)[label]

Eq. 3 puts only the query's own key and the queue in the denominator, as MoCo does; the released code also
takes the other in-batch keys as negatives (`in_batch_negatives`, `released.in_batch_negatives`). The paper
writes dot products q.k/tau; the code takes cosines, as MoCo (whose q and k are l2-normalised) and the release
(`InfoNCEWithQueue`, `nn.CosineSimilarity`) do. One direction. With an empty queue (K0 = 0, the first step)
and no in-batch negatives each row holds only its positive: the loss is exactly 0 and gives no gradient.

Inputs: q (N, d) with gradient; k (N, d) from the target branch, detached by the caller; queue_keys
(K, d) detached, K may be 0. Recommended (paper, bert-base): tau 0.05 (the release's; the paper states none),
N 64, K 512 with 128 random initial keys, EMA eta 0.75 -> 0.95 (cosine), projection 1 layer, predictor 2 layers.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from trainer.losses.infonce import cosine_logits, info_nce, paired_nce


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
    in_batch_negatives: bool = False,
    extra_logits: Sequence[Tensor] = (),
) -> Tensor:
    """MoCoSE eq. 3: InfoNCE over [cos(q_i, k_i) | cos(q_i, queue) | extra blocks] / tau; with
    `in_batch_negatives`, every key of the batch in the first block (label i), as the released code.

    >>> import torch
    >>> q = torch.eye(3)
    >>> mocose_loss(q, q, torch.empty(0, 3), temperature=1.0).item()  # eq. 3, empty queue: the positive alone
    0.0
    >>> round(mocose_loss(q, q, torch.empty(0, 3), 1.0, in_batch_negatives=True).item(), 4)  # -log(e / (e + 2))
    0.5514
    """
    blocks = [queue_logits(q, queue_keys, temperature), *extra_logits]
    if in_batch_negatives:
        return info_nce(q, k, temperature, blocks)
    return paired_nce(q, k, temperature, blocks)
