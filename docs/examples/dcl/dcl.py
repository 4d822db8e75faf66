"""DCL, the decoupled contrastive loss (Yeh et al., "Decoupled Contrastive Learning", ECCV 2022), as a method of
one's own: a plugin file beside its study (dcl_vs_simcse.yaml), registered by the study's `plugins:` key.

SimCSE's InfoNCE over the N x N cosine logits s_ij = cos(z1_i, z2_j) / tau, with the positive left out of the
denominator (the paper's eq. 6, on SimCSE's cross-view negatives):

    loss = mean_i [ -w_i * s_ii + log sum_{j != i} exp(s_ij) ]

w_i = 1 is DCL; with `dcl.sigma` set, DCLW's von Mises-Fisher weight (the paper's eq. 7):
w_i = 2 - exp(cos(z1_i, z2_i) / sigma) / mean_k exp(cos(z1_k, z2_k) / sigma), so that the weights average 1.
Everything else (the two dropout views in one forward, the train-only MLP over [CLS], the evaluation) is SimCSE's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from trainer.config import Float, Section
from trainer.method_rules import MethodRules, Refusal
from trainer.methods import SimCSE, StepOutput


def dcl_loss(z1: Tensor, z2: Tensor, temperature: float, sigma: float | None = None) -> Tensor:
    """The decoupled contrastive loss of anchors z1 (N, d) against positives z2 (N, d) (module docstring)."""
    z1, z2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    logits = z1 @ z2.T / temperature
    positive = logits.diagonal()
    if sigma is not None:
        cosine = (z1 * z2).sum(dim=-1)
        positive = positive * (2 - z1.shape[0] * torch.softmax(cosine / sigma, dim=0))
    off_diagonal = torch.eye(len(z1), dtype=torch.bool, device=z1.device)
    negatives = torch.logsumexp(logits.masked_fill(off_diagonal, float("-inf")), dim=1)
    return (negatives - positive).mean()


class DCLConfig(Section):
    """The method's own keys, under `dcl:` in a study or run config."""

    sigma: Float | None = Field(None, gt=0)  # DCLW's weight temperature; null: DCL, every positive weighted 1


class DCL(SimCSE):
    """SimCSE's encoder and views with the decoupled loss."""

    name = "dcl"
    label = "DCL"
    config = DCLConfig
    # the released code trains in fp16 (as SimCSE); the learning rate and batch size per model are SimCSE's
    rules = MethodRules(cuda_precision="fp16", refusals=(
        Refusal("mix.enabled", lambda config: bool(config.mix.enabled),
                ": DCL's loss takes no mixed negatives; leave mix.enabled null or false"),))

    def loss(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> StepOutput:
        z1, z2 = self.two_views(ids, mask, position_ids)
        return StepOutput(dcl_loss(z1, z2, self.config.temperature, self.config.dcl.sigma))
