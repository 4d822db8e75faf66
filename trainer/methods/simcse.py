"""SimCSE and the two methods that only add negatives to it: GS-InfoNCE and MixCSE (methods.md 1, 4, 5).

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
from trainer.heads import MLPHead
from trainer.losses.gaussian import gs_infonce_loss
from trainer.losses.mix import mixcse_loss
from trainer.losses.simcse import simcse_loss
from trainer.method_rules import GSInfoNCERules, MixCSERules, SimCSERules
from trainer.methods.base import Method, StepOutput

if TYPE_CHECKING:  # the config type only: trainer.config imports the methods to resolve defaults
    from trainer.config import RunConfig


class SimCSE(SimCSERules, Method):
    """Unsupervised SimCSE (Gao et al. 2021). Released code: fp16 on CUDA (`run_unsup_example.sh`)."""

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
        z1, z2 = self.two_views(ids, mask, position_ids)
        return StepOutput(simcse_loss(z1, z2, self.config.temperature, self.negatives(z1, z2)))

    def checkpoint_modules(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder, "mlp": self.mlp}

    def eval_mlp(self) -> nn.Module | None:
        return self.mlp


class GSInfoNCE(GSInfoNCERules, SimCSE):
    """GS-InfoNCE (Chen et al. 2022): SimCSE + M Gaussian negatives per step, M = 3N by default.
    Released code: M = 192, dropout 0.2 (BERT) or 0.1 (RoBERTa), lambda unused (weight 1), fp16."""

    def loss(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> StepOutput:
        z1, z2 = self.two_views(ids, mask, position_ids)
        g = self.config.gaussian
        noise = self.negatives.noise(z1)
        loss = gs_infonce_loss(z1, z2, noise, self.config.temperature, g.weight,
                               extra_logits=self.negatives(z1, z2, gaussian=False))
        return StepOutput(loss)


class MixCSE(MixCSERules, SimCSE):
    """MixCSE (Zhang et al. 2022): SimCSE + mixed hard negatives with stop-gradient. Released code: all N
    mixes per direction (`released.mix_negatives`), dev scored on MLP([CLS]) (`released.dev_on_mlp`), fp32."""

    def loss(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> StepOutput:
        z1, z2 = self.two_views(ids, mask, position_ids)
        m = self.config.mix
        if not m.enabled:  # mix.enabled: false turns a MixCSE run into SimCSE (an ablation)
            return StepOutput(simcse_loss(z1, z2, self.config.temperature, self.negatives(z1, z2)))
        loss = mixcse_loss(z1, z2, m.lam, self.config.temperature, m.directions, m.stop_grad,
                           self.negatives.mix_layout, m.hard_negative_weight,
                           extra_logits=self.negatives(z1, z2, mix=False))
        return StepOutput(loss)

    def dev_head(self) -> tuple[str | None, nn.Module | None]:
        # The release trains without --mlp_only_train: its dev evaluation runs [CLS] through the MLP.
        return ("cls", self.mlp) if self.config.released.dev_on_mlp else (None, None)
