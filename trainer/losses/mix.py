"""MixCSE: SimCSE plus mixed hard negatives (Zhang et al., AAAI 2022; docs/science/mixcse.md).

Math. For anchor h_i = z1_i with positive h'_i = z2_i, the features l2-normalised ("Note that these feature
vectors are l2 normalized"), mix the positive with another positive h'_j:

    m'_{i,j} = (lam * h'_i + (1 - lam) * h'_j) / ||lam * h'_i + (1 - lam) * h'_j||

and add exp(cos(h_i, SG(m'_{i,j}))/tau) to SimCSE's denominator (SG = stop-gradient). "Both
directions": h'_i also gets a mixed negative m_{i,j} built the same way from the anchors h_i, h_j.
A small lam (0.2) keeps the mix mostly "other sentence", so it stays a negative. The released code mixes the
raw MLP outputs and normalises only the mix (`raw_features`, `released.mix_raw_features`): the share of h'_i
in the mix's direction is then lam * r / (lam * r + 1 - lam), r = ||z_i|| / ||z_j||, not lam.

Two anchors (the paper: "both h_i and h'_i may serve as the anchor ... So we also construct h~_{i,j} for h'_i
by mixing h_i and h_j in the same way"). `mixcse_symmetric_loss`, the paper reading (`mix.anchors:
symmetric`): h'_i is the anchor of a second InfoNCE, over the h_j with the mix m_{i,j}; the two losses are
averaged (`mix.anchor_losses: sum` adds them). `mix.anchors: one_loss`: m_{i,j}'s logit cos(h'_i, m_{i,j}) is
one more column of h_i's row in one loss (the release's single-loss layout cut to its diagonals:
`layout="paper"`, directions both).

MixCSE_single (Table 3: "we only construct a hard negative for h_i"), `directions="single"`: h'_i gets no mixed
negative and nothing else changes. Under `symmetric` h'_i keeps its own loss, without a mix; under `one_loss` h_i's
row loses the column cos(h'_i, m_{i,j}), which leaves h_i's loss alone: h'_i neither an anchor nor mixed.

Layout, following the authors' released code (j = the next sample of the shuffled batch, so
mix(z)_k = normalize(lam*z_k + (1-lam)*z_{(k+1) mod N})), with m2 = mix(z2) and m1 = mix(z1):

    logits (N x 3N) = [ cos(z1, z2) | B = cos(z1, m2) | C = cos(m1, z2) ] / tau      (directions "both")
    logits (N x 2N) = [ cos(z1, z2) | B = cos(z1, m2) ]                            (directions "single")

    B[i, k] = cos(z1_i, m2_k)/tau. Column k = i is the paper's negative m'_{i,i+1}. Column k = i-1
        (m2_{i-1} holds (1-lam) of z2_i, row i's own positive) is set to logit 0, not removed.
    C[i, j] = cos(m1_i, z2_j)/tau  (layout="released", the default; docs/science/mixcse.md#logit-layout).
        Row i compares the anchor mix m1_i with every positive; its diagonal C[i, i] =
        cos(m_{i,i+1}, h'_i) is the paper's negative for h'_i. Column j = i+1 (m1_i holds (1-lam) of
        z1_{i+1}, the anchor of z2_{i+1}) is set to logit 0.
    C[i, k] = cos(z2_i, m1_k)/tau  (layout="transposed"): row i compares its own positive z2_i with every
        anchor mix; same diagonal, different off-diagonal terms. Column k = i-1 (m1_{i-1} holds (1-lam)
        of z1_i, row i's own anchor) is set to logit 0.

    (layout="paper") The paper adds ONE mixed negative per anchor and direction: only the diagonals,
        logits (N x (N+2)) = [ cos(z1, z2) | cos(z1_i, m2_i) | cos(z2_i, m1_i) ] / tau, (N x (N+1)) single.

Paper versus released code (docs/science/paper-vs-released.md#mixcse-negatives): the paper adds one mixed negative
per anchor, the code adds all N mixes of the batch (the paper's one is the diagonal); the code does not remove the
(1-lam)-self mix but sets its logit to 0 (so it still adds exp(0) = 1 to the denominator); the code mixes the
unnormalised rows, which moves the effective lam (above; `released.mix_raw_features`). The code adds
`hard_negative_weight` (a logit offset, 0 by default) to the diagonals of B and C, the paper's mixed negatives; it
is applied to them in every layout here.

Inputs: z1, z2 (N, d) with gradient. Recommended (paper): lam 0.2, tau 0.05, N 64, both directions,
stop-gradient on. Ablations (Table 3): MixCSE_single 76.43, without stop-gradient 75.74 (vs 77.66).
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from trainer.losses.infonce import NORM_EPS, cosine_logits, info_nce, paired_cosine_logits

Directions = Literal["both", "single"]
Layout = Literal["released", "paper", "transposed"]
LAYOUTS = ("released", "paper", "transposed")
AnchorLosses = Literal["mean", "sum"]


def mixed_negatives(z: Tensor, lam: float, stop_grad: bool = True, raw_features: bool = False) -> Tensor:
    """m_k = normalize(lam * u_k + (1 - lam) * u_{(k+1) mod N}) with u = normalize(z) (the paper), or u = z
    (`raw_features`: the release); detached when `stop_grad`.

    >>> z = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    >>> mixed_negatives(z, lam=0.5)
    tensor([[0.7071, 0.7071],
            [0.7071, 0.7071]])
    >>> mixed_negatives(z, lam=0.5, raw_features=True)[0]  # the longer row pulls the mix its way
    tensor([0.8944, 0.4472])
    """
    u = z if raw_features else F.normalize(z, dim=-1, eps=NORM_EPS)
    mixed = F.normalize(lam * u + (1.0 - lam) * u.roll(-1, dims=0), dim=-1, eps=NORM_EPS)
    return mixed.detach() if stop_grad else mixed


def _zero_entries(logits: Tensor, column_of_row: Tensor) -> Tensor:
    """Set logits[i, column_of_row[i]] to 0 (a constant: no gradient flows through it)."""
    n = logits.shape[0]
    mask = torch.zeros(n, logits.shape[1], dtype=torch.bool, device=logits.device)
    mask[torch.arange(n, device=logits.device), column_of_row] = True
    return logits.masked_fill(mask, 0.0)


def _add_to_diagonal(logits: Tensor, weight: float) -> Tensor:
    if weight == 0.0:
        return logits
    return logits + weight * torch.eye(logits.shape[0], logits.shape[1], device=logits.device, dtype=logits.dtype)


def mix_logits(
    z1: Tensor,
    z2: Tensor,
    lam: float = 0.2,
    temperature: float = 0.05,
    directions: Directions = "both",
    stop_grad: bool = True,
    layout: Layout = "released",
    hard_negative_weight: float = 0.0,
    raw_features: bool = False,
) -> list[Tensor]:
    """The mixed-negative blocks to append to SimCSE's logits in one loss: [B] (single) or [B, C] (both).

    See the module docstring for the exact layouts and which entry is set to logit 0; `raw_features` mixes the
    unnormalised rows (`mixed_negatives`).

    >>> z = torch.randn(4, 8)
    >>> [block.shape for block in mix_logits(z, z)]
    [torch.Size([4, 4]), torch.Size([4, 4])]
    >>> [block.shape for block in mix_logits(z, z, layout="paper")]
    [torch.Size([4, 1]), torch.Size([4, 1])]
    """
    if directions not in ("both", "single"):
        raise ValueError(f"directions must be 'both' or 'single', got {directions!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    n = z1.shape[0]
    mixed_positives = mixed_negatives(z2, lam, stop_grad, raw_features)
    mixed_anchors = mixed_negatives(z1, lam, stop_grad, raw_features) if directions == "both" else None
    if layout == "paper":
        blocks = [paired_cosine_logits(z1, mixed_positives, temperature)]
        if mixed_anchors is not None:
            blocks.append(paired_cosine_logits(z2, mixed_anchors, temperature))
        return [block + hard_negative_weight for block in blocks] if hard_negative_weight else blocks

    rows = torch.arange(n, device=z1.device)
    previous = (rows - 1) % n  # k with (k+1) mod N == i: the mix holding (1-lam) of row i's own sample
    following = (rows + 1) % n
    block_b = _zero_entries(cosine_logits(z1, mixed_positives, temperature), previous)
    blocks = [block_b]
    if mixed_anchors is not None:
        if layout == "released":
            blocks.append(_zero_entries(cosine_logits(mixed_anchors, z2, temperature), following))
        else:
            blocks.append(_zero_entries(cosine_logits(z2, mixed_anchors, temperature), previous))
    return [_add_to_diagonal(block, hard_negative_weight) for block in blocks]


def mixcse_loss(
    z1: Tensor,
    z2: Tensor,
    lam: float = 0.2,
    temperature: float = 0.05,
    directions: Directions = "both",
    stop_grad: bool = True,
    layout: Layout = "released",
    hard_negative_weight: float = 0.0,
    extra_logits: Sequence[Tensor] = (),
    raw_features: bool = False,
) -> Tensor:
    """MixCSE in one loss: InfoNCE over [cos(z1, z2) | mixed-negative blocks | extra blocks] / tau, label i.

    >>> z = torch.randn(6, 8)
    >>> bool(mixcse_loss(z, z) > mixcse_loss(z, z, directions="single"))  # more negatives, larger loss
    True
    """
    blocks = mix_logits(z1, z2, lam, temperature, directions, stop_grad, layout, hard_negative_weight, raw_features)
    return info_nce(z1, z2, temperature, [*blocks, *extra_logits])


def mixed_negative_logits(anchor: Tensor, source: Tensor, lam: float, temperature: float = 0.05,
                          stop_grad: bool = True, hard_negative_weight: float = 0.0,
                          raw_features: bool = False) -> Tensor:
    """The paper's one mixed negative per anchor, as an (N, 1) block: cos(anchor_i, mix(source)_i)/tau
    (+ `hard_negative_weight`), mix(source)_i mixing source_i with source_{(i+1) mod N}.

    >>> z = torch.eye(3)
    >>> mixed_negative_logits(z, z, lam=0.2, temperature=1.0).squeeze(1)  # lam / sqrt(lam^2 + (1-lam)^2)
    tensor([0.2425, 0.2425, 0.2425])
    """
    return paired_cosine_logits(anchor, mixed_negatives(source, lam, stop_grad, raw_features),
                                temperature) + hard_negative_weight


def combined_anchor_losses(first: Tensor, second: Tensor, anchor_losses: AnchorLosses = "mean") -> Tensor:
    """The two anchors' losses as one (`mix.anchor_losses`): their mean, or their sum.

    >>> combined_anchor_losses(torch.tensor(1.0), torch.tensor(3.0)).item()
    2.0
    >>> combined_anchor_losses(torch.tensor(1.0), torch.tensor(3.0), "sum").item()
    4.0
    """
    if anchor_losses == "mean":
        return (first + second) / 2
    if anchor_losses == "sum":
        return first + second
    raise ValueError(f"anchor_losses must be 'mean' or 'sum', got {anchor_losses!r}")


def mixcse_symmetric_loss(
    z1: Tensor,
    z2: Tensor,
    lam: float = 0.2,
    temperature: float = 0.05,
    stop_grad: bool = True,
    hard_negative_weight: float = 0.0,
    raw_features: bool = False,
    extra_logits: Sequence[Tensor] = (),
    directions: Directions = "both",
    anchor_losses: AnchorLosses = "mean",
) -> Tensor:
    """MixCSE with both anchors, the paper's reading (`mix.anchors: symmetric`):

        L = 1/2 [ InfoNCE(h -> h', extra | cos(h_i, m'_i)) + InfoNCE(h' -> h, cos(h'_i, m_i)) ]

    with m' = mixes of the positives h' (z2), m = mixes of the anchors h (z1). `directions="single"`
    (MixCSE_single) leaves out the second loss's mix m_i, not the loss. `anchor_losses="sum"` adds the two
    instead of averaging them. `extra_logits` (Gaussian noise) join the first loss, whose anchors are
    GS-InfoNCE's.

    >>> z = torch.randn(6, 8)
    >>> first = mixcse_loss(z, z, directions="single", layout="paper")
    >>> torch.allclose(mixcse_symmetric_loss(z, z), first)  # one view: the two halves are the same loss
    True
    """
    if directions not in ("both", "single"):
        raise ValueError(f"directions must be 'both' or 'single', got {directions!r}")
    first = info_nce(z1, z2, temperature, [*extra_logits, mixed_negative_logits(
        z1, z2, lam, temperature, stop_grad, hard_negative_weight, raw_features)])
    second_mix = [] if directions == "single" else [mixed_negative_logits(
        z2, z1, lam, temperature, stop_grad, hard_negative_weight, raw_features)]
    second = info_nce(z2, z1, temperature, second_mix)
    return combined_anchor_losses(first, second, anchor_losses)
