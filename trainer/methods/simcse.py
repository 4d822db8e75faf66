"""SimCSE and the two methods that only add negatives to it: GS-InfoNCE and MixCSE (docs/science/simcse.md,
gs-infonce.md, mixcse.md).

All three encode the batch twice in ONE forward of 2N rows (dropout is the augmentation), take [CLS]
through a train-only MLP (Linear + Tanh), and minimise one-direction InfoNCE; they differ only in the
extra negative blocks (`NegativeBlocks`), which compose: a SimCSE run may turn on `gaussian.*` or
`mix.enabled`, and so may MoCoSE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from trainer.augment import EmbeddingCutoff
from trainer.losses.simcse import simcse_loss
from trainer.methods.base import Method, StepOutput
from trainer.methods.heads import MLPHead
from trainer.vocabulary import GS_INFONCE, MIXCSE, SIMCSE

if TYPE_CHECKING:  # the config type for annotations only
    from trainer.config import RunConfig


class SimCSE(Method):
    """Unsupervised SimCSE (Gao et al. 2021). Defaults, refusals, precision: trainer.method_rules.SIMCSE_RULES."""

    name = SIMCSE

    def __init__(self, encoder: nn.Module, config: RunConfig, generator: torch.Generator,
                 device_generator: torch.Generator):
        super().__init__(encoder, config, generator, device_generator)
        self.mlp = MLPHead(encoder.config.hidden_size)  # SimCSE's train-only MLP over [CLS]
        self.cutoff = EmbeddingCutoff(encoder, config.augment, device_generator, released=False)

    def two_views(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The batch twice in one forward of 2N rows; two dropout views of [CLS] through the MLP (float32)."""
        n = ids.shape[0]
        positions = None if position_ids is None else torch.cat([position_ids, position_ids])
        rows_mask = torch.cat([mask, mask])
        with self.cutoff.on(rows_mask):
            z = self.mlp(self.cls(self.encoder, torch.cat([ids, ids]), rows_mask, positions)).float()
        return z[:n], z[n:]

    def loss(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> StepOutput:
        """One-direction InfoNCE of z1 against z2 with the extra blocks; with MixCSE's two anchors
        (`mix.anchors: symmetric`) that loss and z2's own against z1 combined by `mix.anchor_losses`
        (`mixcse_symmetric_loss`)."""
        z1, z2 = self.two_views(ids, mask, position_ids)
        second = self.negatives.second_anchor(z1, z2)
        loss = simcse_loss(z1, z2, self.config.temperature, self.negatives(z1, z2, two_losses=second is not None))
        if second is not None:
            loss = self.negatives.combined(loss, simcse_loss(z2, z1, self.config.temperature, second))
        return StepOutput(loss)

    def checkpoint_modules(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder, "mlp": self.mlp}

    def eval_mlp(self) -> nn.Module | None:
        return self.mlp


class GSInfoNCE(SimCSE):
    """GS-InfoNCE (Wu et al. 2022): SimCSE + M Gaussian negatives per step (the Gaussian block of
    `NegativeBlocks`, which SimCSE's loss appends). Its defaults (M = 3N; the release's M = 192 and dropout)
    and refusals: trainer.method_rules.GS_INFONCE_RULES."""

    name = GS_INFONCE


class MixCSE(SimCSE):
    """MixCSE (Zhang et al. 2022): SimCSE + mixed hard negatives with stop-gradient (the mix blocks of
    `NegativeBlocks`, on while `mix.enabled`; false makes the run SimCSE, an ablation). Released code: all N
    mixes per direction (`released.mix_negatives`), dev scored on MLP([CLS]) (`released.dev_on_mlp`).
    Defaults and precision: trainer.method_rules.MIXCSE_RULES."""

    name = MIXCSE

    def dev_head(self) -> tuple[str | None, nn.Module | None]:
        # The release trains without --mlp_only_train: its dev evaluation runs [CLS] through the MLP.
        return ("cls", self.mlp) if self.config.released.dev_on_mlp else (None, None)
