"""MoCoSE (Cao et al., ACL Findings 2022; docs/science/mocose.md): an EMA target branch, a predictor and a
negative queue, in the paper's reading or the released code's (`released.*`, docs/science/paper-vs-released.md).

Online branch: embeddings -> encoder -> pooler Linear(d, d) on [CLS] (from BERT's pooler, no activation)
-> projection (P layers, to the embedding size e) -> predictor (Q layers). Target branch: the SAME
embedding layer (one module object), then EMA copies of encoder, pooler and projection. Both views are
augmented (Algorithm 1 line 3, v_o, v_t <- E_a(B), E_a(B)): dropout, FGSM on the shared word embeddings, and
the token shuffle and cutoffs when on, each view its own draw (`augment.branches: online` keeps them to the
online view). Loss (eq. 3): InfoNCE of each online query against the target key of its own sentence and the
queue (`released.in_batch_negatives`: the other in-batch keys too). After every optimiser step: the EMA update
(eq. 2), then the batch's target keys z_t enter the queue (Algorithm 1 line 9 writes "enqueue(Q, v_t)", the
augmented input; the queue holds keys of the loss's space, as eq. 3's l, section 1's "update it using the output
of target branch" and section 3's queue that "stores the key vectors" say).

Released-code behaviours (each its own `released.*` key):
- in_batch_negatives: the other in-batch keys are negatives beside the queue (`InfoNCEWithQueue`).
- ema_schedule: eta0 -> 1.0 over T = 15000 steps, not clamped after T (config `ema.*` resolved so); the
  update after optimiser step s uses eta(s + 1), as the release's counter runs one ahead
  (`trainer.schedules.ema_schedule_step`).
- initial_queue: all K slots random from the start; the loss reads what the release reads
  (`trainer.queue.released_read_length`): 2*K0 + (t-1)*B keys at step t while that is below K, then,
  until the release truncates its tensor, the whole tensor (K plus the keys pushed since, more than K).
- target_gradients: the target output is not detached; target encoder and pooler stay frozen, so the
  optimiser also updates the target projection between EMA updates, and the shared embedding layer gets
  gradient through both branches.
- heads_init: projection/predictor init normal(0, 0.02), zero bias, LayerNorm eps 1e-12.
- cutoffs: token/feature cutoff on both branches' word embeddings, a fixed count (see EmbeddingCutoff),
  after FGSM's perturbation (the trainer attaches FGSM ahead of the cutoff hook).
- token_shuffle: one permutation of all L positions of the padded batch, [CLS] and pads included, for every
  sentence of the batch, each view its own draw (`shuffle_all_positions`); off, each sentence its own
  permutation of its real tokens.
- test_selected: the loop also reports the checkpoint with the best seven-task test average, labelled.
- eval_cutoff (off unless set, not part of variant released): the cutoffs and token shuffle also act at
  every evaluation, as the release's evaluation forward leaves them on (`EvaluationAugments`).
"""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from trainer.augment import EmbeddingCutoff, EvaluationAugments, shuffled_positions
from trainer.losses.mocose import mocose_loss
from trainer.methods.base import Method, StepOutput
from trainer.methods.ema import ema_update
from trainer.methods.heads import build_predictor, build_projection, make_pooler_dense
from trainer.mtd import TraceableDistanceMeter, config_eta, config_traceable_distance
from trainer.queue import NegativeQueue, released_read_length
from trainer.schedules import ema_decay_at, ema_schedule_step
from trainer.slices import parse_slices
from trainer.vocabulary import MOCOSE

if TYPE_CHECKING:  # the config type for annotations only
    from trainer.config import RunConfig


class MoCoSE(Method):
    """Defaults and refusals: trainer.method_rules.MOCOSE_RULES."""

    name = MOCOSE

    def __init__(self, encoder: nn.Module, config: RunConfig, generator: torch.Generator,
                 device_generator: torch.Generator):
        super().__init__(encoder, config, generator, device_generator)
        heads, released = config.heads, config.released
        dim = encoder.config.hidden_size
        self.embedding_dim = heads.embedding_dim or dim
        self.pooler_dense = make_pooler_dense(encoder)
        self.projection = build_projection(dim, heads.projection_layers, config.dropout, self.embedding_dim,
                                           released.heads_init)
        self.predictor = build_predictor(self.embedding_dim, heads.predictor_hidden_dim, heads.predictor_layers,
                                         config.dropout, released.heads_init)
        # Target branch: EMA copies of encoder, pooler, projection; the embedding layer is SHARED (the very
        # same module object: the EMA never touches it and the optimiser trains it once).
        self.target_encoder = copy.deepcopy(encoder)
        self.target_encoder.embeddings = encoder.embeddings
        self.target_pooler_dense = copy.deepcopy(self.pooler_dense)
        self.target_projection = copy.deepcopy(self.projection)
        self.target_gradients = bool(released.target_gradients)
        self.target_encoder.requires_grad_(False)
        self.target_pooler_dense.requires_grad_(False)
        self.target_projection.requires_grad_(self.target_gradients)  # released: trained by the optimiser
        encoder.embeddings.requires_grad_(True)

        queue = config.queue
        self.queue = NegativeQueue(queue.size, self.embedding_dim, queue.initial_size, generator=generator,
                                   all_random=bool(released.initial_queue))
        self.slices = parse_slices(queue.slices, queue.size) if queue.slices else None
        self.oldest_position = max(end for _, end in self.slices) if self.slices else queue.size
        self.cutoff = EmbeddingCutoff(encoder, config.augment, device_generator, released=bool(released.cutoffs))
        self.meter = TraceableDistanceMeter()
        self.total_steps: int | None = None
        self.eta = self._eta_at(0)

    # ---- the two branches ------------------------------------------------------------------------------
    def online(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> Tensor:
        h = self.pooler_dense(self.cls(self.encoder, ids, mask, position_ids))
        return self.predictor(self.projection(h))

    def target(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> Tensor:
        with torch.set_grad_enabled(self.target_gradients and torch.is_grad_enabled()):
            h = self.target_pooler_dense(self.cls(self.target_encoder, ids, mask, position_ids))
            return self.target_projection(h)

    def queue_limit(self) -> int | None:
        """Released initial queue: how many positions the release's loss reads (past K while it drains)."""
        if not self.config.released.initial_queue:
            return None
        return released_read_length(self.queue.pushed, self.queue.size, self.config.queue.initial_size)

    def loss(self, ids: Tensor, mask: Tensor, position_ids: Tensor | None = None) -> StepOutput:
        """`position_ids`: the online view's token shuffle; the target view draws its own (both views)."""
        both_views = self.config.augment.branches == "both"
        with self.cutoff.on(mask):
            q = self.online(ids, mask, position_ids).float()
            if self.cutoff.released:  # the release cuts both branches' word embeddings
                k = self.target(ids, mask, self.target_positions(ids, mask, both_views)).float()
        if not self.cutoff.released:
            target_positions = self.target_positions(ids, mask, both_views)
            with self.cutoff.on(mask) if both_views else contextlib.nullcontext():
                k = self.target(ids, mask, target_positions).float()
        queue_keys = self.queue.get(self.slices, self.queue_limit())
        loss = mocose_loss(q, k, queue_keys, self.config.temperature,
                           in_batch_negatives=bool(self.config.released.in_batch_negatives),
                           extra_logits=self.negatives(q, k))
        return StepOutput(loss, keys=k.detach())

    def token_positions(self, ids: Tensor, mask: Tensor, generator: torch.Generator) -> Tensor | None:
        """One view's token shuffle: each sentence its own permutation of its real tokens (the paper reading), or
        with `released.token_shuffle` the release's one permutation of every position for the whole batch; None
        without `augment.token_shuffle`."""
        if not self.config.augment.token_shuffle:
            return None
        return shuffled_positions(ids, mask, generator, whole_batch=bool(self.config.released.token_shuffle))

    def target_positions(self, ids: Tensor, mask: Tensor, both_views: bool) -> Tensor | None:
        """The target view's own token shuffle (None without one, or when only the online view is shuffled)."""
        return self.token_positions(ids, mask, self.device_generator) if both_views else None

    # ---- after the optimiser step: the traceable distance, the EMA update, the queue push ------------
    def _eta_at(self, step: int) -> float:
        """eta of the EMA update after optimiser step `step` (0: before the first step)."""
        ema = self.config.ema
        period = ema.schedule_steps or self.total_steps or 1  # T: the run's length unless set
        t = ema_schedule_step(step, bool(self.config.released.ema_schedule))
        return ema_decay_at(t, ema.schedule, ema.decay, ema.decay_end, period, ema.hold_after_schedule)

    def start(self, total_steps: int) -> None:
        self.total_steps = total_steps
        self.eta = self._eta_at(0)

    @torch.no_grad()
    def after_step(self, step: int, out: StepOutput) -> None:
        ages = self.queue.ages(step, self.slices, self.queue_limit())
        self.meter.observe(step, ages, queue_full=self.queue.real_count >= self.oldest_position)
        self.eta = self._eta_at(step)
        self.update_target(self.eta)
        self.meter.ema_updated(self.eta)
        self.queue.push(out.keys, step)  # newest keys: the target outputs of this batch

    def online_modules(self) -> list[nn.Module]:
        return [self.encoder, self.pooler_dense, self.projection]

    def target_modules(self) -> list[nn.Module]:
        return [self.target_encoder, self.target_pooler_dense, self.target_projection]

    @torch.no_grad()
    def update_target(self, decay: float) -> None:
        """MoCoSE eq. 2 on the encoder, the pooler and the projection (the shared embeddings stay as they are)."""
        for target, online in zip(self.target_modules(), self.online_modules()):
            ema_update(target, online, decay)

    # ---- reports -----------------------------------------------------------------------------------------
    def log_values(self) -> dict[str, Any]:
        return {"eta": self.eta, "queue_fill": len(self.queue), **self.meter.current()}

    def summary_fields(self, steps_run: int) -> dict[str, Any]:
        # the etas of the steps run, each on the planned period (a run that ends early keeps its schedule)
        config = self.config.to_dict()
        return {"mtd": {
            "formula": config_traceable_distance(config, self.total_steps, eta_choice="mean", steps_run=steps_run),
            "eta": config_eta(config, self.total_steps, "mean", steps_run),
            "eta_choice": "constant" if self.config.ema.schedule == "constant" else "mean",
            "queue_k": self.oldest_position,
            "batch_size": self.config.batch_size,
            **self.meter.summary(),
        }}

    def checkpoint_modules(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder, "pooler_dense": self.pooler_dense}

    def step_encoders(self) -> list[nn.Module]:
        return [self.encoder, self.target_encoder]

    def eval_mlp(self) -> nn.Module | None:
        return self.pooler_dense  # the release's "cls_after_pooler": the pooler dense, no activation

    def evaluation_augments(self, generator: torch.Generator) -> EvaluationAugments | None:
        if not self.config.released.eval_cutoff:
            return None
        return EvaluationAugments(self.cutoff, self.config.augment.token_shuffle, generator,
                                  whole_batch_shuffle=bool(self.config.released.token_shuffle))
