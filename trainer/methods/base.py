"""What every method object provides, and the composable extra negatives (Gaussian noise, mixes).

A method is an `nn.Module` holding the encoder and its own heads. The loop calls, per step:

    out = method.loss(ids, mask, position_ids)       # under autocast; out.loss is the scalar to minimise
    ...backward, clip, optimiser step...
    method.after_step(step, out)                      # EMA update, queue push (MoCoSE); nothing (SimCSE)

and at evaluations `method.log_values()` (metrics.jsonl) and `method.checkpoint_modules()` (what the
best-dev state keeps); at the end `method.summary_fields(steps_run)` (e.g. the MTD block).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from trainer.augment import shuffled_positions
from trainer.losses.gaussian import gaussian_logits, sample_gaussian_negatives
from trainer.losses.mix import combined_anchor_losses, mix_logits, mixed_negative_logits
from trainer.method_rules import MethodDefinition, MethodEntry, method_entry

if TYPE_CHECKING:  # types for annotations only
    from trainer.augment import EvaluationAugments
    from trainer.config import RunConfig


@dataclass
class StepOutput:
    """One step's loss and what `after_step` needs (MoCoSE: the target keys to push)."""

    loss: Tensor
    keys: Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class NegativeBlocks:
    """The extra negative blocks a method appends to its InfoNCE logits, each built by a pure function of
    trainer.losses: GS-InfoNCE's Gaussian noise (`gaussian.*`, `gaussian_logits`) and MixCSE's mixed
    negatives (`mix.*`, `mix_logits`), in the paper's or the released layout. Every method gets the blocks
    its config turns on, in the order [Gaussian | mixed] after its own logits.

    MixCSE's second anchor under `mix.anchors: symmetric` (the paper's layout) is a second loss, not a block: a
    method that combines two directions (the SimCSE family) asks `second_anchor` for that loss's blocks and calls
    with `two_losses=True`; MoCoSE, whose keys are never anchors, takes every mix in its one loss. With
    `mix.directions: single` (MixCSE_single) the second loss is still there, without a mixed negative."""

    def __init__(self, config: RunConfig, generator: torch.Generator):
        self.temperature = config.temperature
        self.gaussian_count = config.gaussian_count()
        self.gaussian = config.gaussian
        self.mix = config.mix if config.mix.enabled else None
        self.mix_layout = "released" if config.released.mix_negatives else "paper"
        self.raw_features = bool(config.released.mix_raw_features)
        self.symmetric = self.mix is not None and self.mix_layout == "paper" and self.mix.anchors == "symmetric"
        self.generator = generator

    def __call__(self, anchor: Tensor, positive: Tensor, two_losses: bool = False) -> list[Tensor]:
        """The enabled blocks of the anchor's loss for one batch (fresh Gaussian noise on every call);
        `two_losses`: the caller adds `second_anchor`'s loss, so the anchor's row takes its own mix only."""
        blocks = []
        if self.gaussian_count:
            blocks.append(gaussian_logits(anchor, self.noise(anchor), self.temperature, self.gaussian.weight))
        if self.mix is not None:
            mix = self.mix
            directions = "single" if two_losses and self.symmetric else mix.directions
            blocks += mix_logits(anchor, positive, mix.lam, self.temperature, directions, mix.stop_grad,
                                 self.mix_layout, mix.hard_negative_weight, self.raw_features)
        return blocks

    def second_anchor(self, anchor: Tensor, positive: Tensor) -> list[Tensor] | None:
        """The blocks of the positive's own loss (`positive` as the anchor against every `anchor`; MixCSE,
        `mix.anchors: symmetric`): its one mixed negative, a mix of the anchors, or none under `mix.directions:
        single`; None when there is no second loss."""
        if not self.symmetric:
            return None
        mix = self.mix
        if mix.directions == "single":
            return []
        return [mixed_negative_logits(positive, anchor, mix.lam, self.temperature, mix.stop_grad,
                                      mix.hard_negative_weight, self.raw_features)]

    def combined(self, first: Tensor, second: Tensor) -> Tensor:
        """The anchor's loss and the positive's own (`second_anchor`) as one: `mix.anchor_losses`."""
        return combined_anchor_losses(first, second, self.mix.anchor_losses)

    def noise(self, anchor: Tensor) -> Tensor:
        """M fresh Gaussian vectors of the anchor's size (GS-InfoNCE draws them every step)."""
        return sample_gaussian_negatives(self.gaussian_count, anchor.shape[-1], self.gaussian.mu, self.gaussian.sigma,
                                         generator=self.generator, device=anchor.device, dtype=anchor.dtype)


def prepared_attention_mask(encoder: nn.Module, mask: Tensor) -> Tensor:
    """The (B, L) padding mask as the (B, 1, 1, L) boolean mask SDPA attention takes, which transformers
    passes through as-is. Given the 2D mask, transformers first asks whether it may drop the mask by
    reading `mask.all()` back to the host, on every forward: a device sync inside the training step on a
    GPU. The same positions are attended either way. Other attention implementations get the 2D mask."""
    if getattr(encoder.config, "_attn_implementation", None) != "sdpa":
        return mask
    return mask.bool()[:, None, None, :]


class Method(MethodDefinition, nn.Module):
    """The base class of every method, built in or a plugin; see the module docstring for the contract. What a
    method declares (`name`, `label`, `config`, `rules`, `reading_changes`: MethodDefinition) is read through its
    registry entry (trainer.method_rules.method_entry(name)); a plugin subclass declares them here and
    overrides `loss`."""

    @classmethod
    def entry(cls) -> MethodEntry:
        """This method's registry entry: its rules, section and label as registered."""
        return method_entry(cls.name)

    @classmethod
    def precision_on(cls, device: torch.device, requested: str) -> str:
        """The precision a run of this method uses on `device` (`MethodRules.precision_on`)."""
        return cls.entry().rules.precision_on(device.type, requested)

    # ---- the run -------------------------------------------------------------------------------------
    def __init__(self, encoder: nn.Module, config: RunConfig, generator: torch.Generator,
                 device_generator: torch.Generator):
        super().__init__()
        self.encoder = encoder
        self.config = config
        self.generator, self.device_generator = generator, device_generator
        self.negatives = NegativeBlocks(config, device_generator)

    def cls(self, encoder: nn.Module, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> Tensor:
        """[CLS] of the last layer."""
        out = encoder(input_ids=ids, attention_mask=prepared_attention_mask(encoder, mask),
                      token_type_ids=torch.zeros_like(ids), position_ids=position_ids, return_dict=True)
        return out.last_hidden_state[:, 0]

    def token_positions(self, ids: Tensor, mask: Tensor, generator: torch.Generator) -> Tensor | None:
        """The position ids of one token-shuffled forward of the (B, L) batch: each sentence its own permutation
        of its real tokens, [CLS] first and pads last; None without `augment.token_shuffle`."""
        return shuffled_positions(ids, mask, generator) if self.config.augment.token_shuffle else None

    def start(self, total_steps: int) -> None:
        """Called once before the first step with the run's length."""

    def loss(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> StepOutput:
        """The method's loss on one batch (called under the run's autocast)."""
        raise NotImplementedError

    loss.placeholder = True  # a method must override it (trainer.method_rules.register_method checks)

    def after_step(self, step: int, out: StepOutput) -> None:
        """After the optimiser step (and its scheduler step)."""

    def log_values(self) -> dict[str, Any]:
        """Values for metrics.jsonl at an evaluation (beside step, loss, dev score, lr)."""
        return {}

    def summary_fields(self, steps_run: int) -> dict[str, Any]:
        """Fields this method adds to summary.json after `steps_run` optimiser steps (MoCoSE: the MTD block)."""
        return {}

    def checkpoint_modules(self) -> dict[str, nn.Module]:
        """The modules whose state the best-dev checkpoint keeps (what evaluation reads)."""
        return {"encoder": self.encoder}

    def step_encoders(self) -> list[nn.Module]:
        """The encoders a training step runs (what `compile` compiles, trainer.compiled)."""
        return [self.encoder]

    def dev_head(self) -> tuple[str | None, nn.Module | None]:
        """(pooler, MLP) for scoring STS-B dev; (None, None) = the run's pooler and head, as at test time."""
        return None, None

    def eval_mlp(self) -> nn.Module | None:
        """The trained MLP the `cls` pooler applies at evaluation, if the method has one."""
        return None

    def evaluation_augments(self, generator: torch.Generator) -> EvaluationAugments | None:
        """The training augmentations a released code leaves on when it evaluates (`released.eval_cutoff`:
        MoCoSE's), drawing from `generator`; None: evaluation is deterministic, as SentEval's."""
        return None

    def trainable_groups(self, weight_decay: float) -> list[dict]:
        """The optimiser's parameter groups, as HF's Trainer builds them (every release trains through it): no
        weight decay on biases and LayerNorm weights. No paper names its groups; the papers' readings keep these.
        LayerNorms are found by module type (as HF's ALL_LAYERNORM_LAYERS), not only by name: the MoCoSE heads'
        LayerNorms sit in nn.Sequential (e.g. "projection.1.weight")."""
        norm_params = {id(p) for m in self.modules() if isinstance(m, nn.LayerNorm)
                       for p in m.parameters(recurse=False)}
        decay, no_decay = [], []
        for name, param in self.named_parameters():
            if not param.requires_grad:
                continue
            is_norm = id(param) in norm_params or "LayerNorm" in name or "layer_norm" in name
            (no_decay if name.endswith("bias") or is_norm else decay).append(param)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
