"""Embedding-level augmentations for MoCoSE (docs/science/mocose.md#augmentations): FGSM (eq. 1), token shuffle,
token cutoff, feature cutoff. Dropout, the other augmentation, lives in the encoder. `EvaluationAugments`
leaves the cutoffs and token shuffle on at evaluation, as the released MoCoSE code does (opt-in).

FGSM perturbs the output of the word-embedding lookup:  x' = x + eps * sign(grad_x L).

Two ways to get grad_x L (config `fgsm.mode`):
- exact (paper): the gradient of the current step's loss. Per step:
      with fgsm.capture(): loss = step_loss(batch)      # clean forward, records where to attach
      loss.backward()                                    # stores sign(grad_x L)
      optimizer.zero_grad()
      with fgsm.perturb(): loss = step_loss(batch)      # same batch, x' = x + eps * sign
      loss.backward(); optimizer.step()
- lagged (released code): the sign captured in the previous step's backward, applied to both branches
  of the next step; no extra pass. Per step:
      with fgsm.perturb(), fgsm.capture(): loss = step_loss(batch)
      loss.backward(); optimizer.step()
  Batches differ in length between steps (dynamic padding): the stored sign is cropped or zero-padded
  along the sequence; a forward whose batch size differs from the stored one is not perturbed.

eps = 5e-9 is about one float32 spacing of embedding values (~1e-2 to 6e-2): rounded to float32 each entry
receives 0 to 1.5 eps and eps on average (bench/fgsm_rounding.py on the embedded model: mean 1.004 eps, 2.6% of
entries nothing), so it survives; rounded to bf16 or fp16, 98.8% and 99.9% of entries receive nothing.
`last_perturbation_norm` measures what the encoder actually received (mean L2 norm per token row):
the perturbed and clean embeddings rounded to `compute_dtype` (the autocast dtype the first layer computes
in; float32 without autocast), subtracted, less the entries a later hook on the module replaced (cutoff).
`half_precision_floor` is the smallest eps that survives such rounding for a typical embedding value; the
trainer refuses a smaller eps under fp16/bf16 autocast.

Order with the released MoCoSE cutoff (`attach(..., before_other_hooks=True)`): the release perturbs the
raw word embeddings and then cuts them in place, so cut entries stay exactly 0 and the gradient stored
for them, hence their sign, is 0. Attached after the cutoff hook instead, FGSM would add +-eps to the cut
entries.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FGSMMode = Literal["exact", "lagged"]


class FGSM:
    """x' = x + eps * sign(grad_x L) on the word-embedding output, through hooks; see the module docstring.

    >>> embedding = nn.Embedding(10, 4)
    >>> fgsm = FGSM(eps=0.1, mode="exact").attach(embedding)
    >>> ids = torch.tensor([[1, 2, 3]])
    >>> with fgsm.capture():
    ...     loss = embedding(ids).sum()
    >>> loss.backward()
    >>> with fgsm.perturb():
    ...     moved = embedding(ids) - embedding.weight[ids]
    >>> torch.allclose(moved, torch.full((1, 3, 4), 0.1))  # grad of a sum is +1 everywhere
    True
    >>> fgsm.detach()
    """

    def __init__(self, eps: float, mode: FGSMMode = "lagged"):
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        if mode not in ("exact", "lagged"):
            raise ValueError(f"mode must be 'exact' or 'lagged', got {mode!r}")
        self.eps = eps
        self.mode = mode
        self.sign: Tensor | None = None  # sign(grad_x L), shape (B, L, d) of the captured forward
        self.skipped_forwards = 0  # lagged: forwards left unperturbed because the batch size differed
        self._handles: list[Any] = []
        self._applied: tuple[Tensor, Tensor] | None = None  # (perturbed output, what survives rounding)
        self._capturing = False
        self._hooked_this_capture = False
        self._perturbing = False
        self._last_norm: Tensor | None = None  # kept as a tensor: reading it syncs the device
        self.compute_dtype: torch.dtype | None = None  # autocast dtype of the encoder's first layer, if any

    def attach(self, embedding_module: nn.Module, before_other_hooks: bool = False) -> "FGSM":
        """Hook the word-embedding module, e.g. `model.get_input_embeddings()`. Returns self.

        `before_other_hooks`: perturb ahead of the forward hooks already on the module (the released
        MoCoSE order: FGSM, then cutoff) instead of after them. The perturbation is measured after all.
        """
        if self._handles:
            raise RuntimeError("FGSM is already attached; call detach() first")
        self._handles = [embedding_module.register_forward_hook(self._on_forward, prepend=before_other_hooks),
                         embedding_module.register_forward_hook(self._measure)]
        return self

    def detach(self) -> None:
        """Remove the hooks (the stored sign is kept)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def has_sign(self) -> bool:
        return self.sign is not None

    @property
    def last_perturbation_norm(self) -> float | None:
        """Mean L2 norm per token row of the perturbation last applied (as stored, after rounding)."""
        return None if self._last_norm is None else float(self._last_norm)

    @contextmanager
    def capture(self) -> Iterator["FGSM"]:
        """Record sign(grad) of the embedding output of the first forward in this block that needs grad.

        The sign is stored when backward reaches that output (the backward may run after the block).
        Later forwards in the block (e.g. the target branch) are not recorded.
        """
        self._capturing, self._hooked_this_capture = True, False
        try:
            yield self
        finally:
            self._capturing = False

    @contextmanager
    def perturb(self) -> Iterator["FGSM"]:
        """Add eps * stored sign to the embedding output of every forward in this block."""
        self._perturbing = True
        try:
            yield self
        finally:
            self._perturbing = False

    def _on_forward(self, module: nn.Module, inputs: tuple, output: Tensor) -> Tensor:
        if self._perturbing and self.sign is not None and self.eps > 0:
            sign = self._fit_sign(output.shape)
            if sign is not None:
                perturbed = output + self.eps * sign.to(output.dtype)
                # measure what survives rounding to the dtype the encoder computes in, not the nominal
                # eps * sqrt(d): under autocast the first layer casts its input to fp16/bf16
                dtype = self.compute_dtype or output.dtype
                received = perturbed.detach().to(dtype).float() - output.detach().to(dtype).float()
                self._applied = (perturbed, received)
                output = perturbed
        if self._capturing and not self._hooked_this_capture and output.requires_grad:
            self._hooked_this_capture = True
            output.register_hook(self._store_sign)
        return output

    def _measure(self, module: nn.Module, inputs: tuple, output: Tensor) -> None:
        """After every hook on the module: entries a later hook replaced (cut to 0) received nothing."""
        if self._applied is None:
            return
        perturbed, received = self._applied
        self._applied = None
        if output is not perturbed:
            received = received.masked_fill(output.detach() != perturbed.detach(), 0.0)
        self._last_norm = received.norm(dim=-1).mean()

    def _store_sign(self, grad: Tensor) -> None:
        self.sign = grad.detach().sign()

    def _fit_sign(self, shape: torch.Size) -> Tensor | None:
        """The stored sign cropped / zero-padded along the sequence to `shape`; None to skip this forward."""
        sign = self.sign
        if sign.shape == shape:
            return sign
        if self.mode == "exact":
            raise RuntimeError(
                f"exact FGSM: the perturbed forward has shape {tuple(shape)} but the captured one had "
                f"{tuple(sign.shape)}; run both passes on the same batch"
            )
        if len(shape) != 3 or sign.shape[0] != shape[0] or sign.shape[2] != shape[2]:
            self.skipped_forwards += 1
            return None
        length = shape[1]
        if sign.shape[1] >= length:
            return sign[:, :length]
        return F.pad(sign, (0, 0, 0, length - sign.shape[1]))


def half_precision_floor(word_embeddings: Tensor, dtype: torch.dtype) -> float:
    """The smallest FGSM eps that survives rounding to `dtype` for a typical word-embedding value:
    half the spacing of `dtype`'s numbers at the embeddings' root-mean-square magnitude.

    >>> w = torch.full((10, 4), 0.05)
    >>> half_precision_floor(w, torch.bfloat16) > 5e-9 > half_precision_floor(w, torch.float32) / 10
    True
    """
    rms = float(word_embeddings.detach().float().pow(2).mean().sqrt())
    return 0.5 * torch.finfo(dtype).eps * rms


def shuffle_token_positions(
    position_ids: Tensor, attention_mask: Tensor, generator: torch.Generator | None = None
) -> Tensor:
    """Token shuffle, the paper reading of MoCoSE's "position shuffle" (ConSERT's): permute the position ids among
    the real tokens of each row, each row its own permutation.

    [CLS] (index 0) keeps position 0 and pads keep theirs. Assumes right padding (BERT's), i.e. the
    real tokens are the first `attention_mask.sum(1)` of each row. position_ids: (B, L), (1, L) or (L,);
    returns (B, L). The generator must live on the mask's device.

    >>> ids = shuffle_token_positions(torch.arange(6), torch.tensor([[1, 1, 1, 1, 0, 0]]))
    >>> ids[0, 0].item(), sorted(ids[0, 1:4].tolist()), ids[0, 4:].tolist()
    (0, [1, 2, 3], [4, 5])
    """
    mask = attention_mask.bool()
    position_ids = position_ids.expand(mask.shape)
    batch, length = mask.shape
    # sort keys: [CLS] first (-1), real tokens in random order (0..1), pads last in their order (2+j)
    keys = torch.rand(batch, length, generator=generator, device=mask.device)
    keys = torch.where(mask, keys, 2.0 + torch.arange(length, device=mask.device, dtype=keys.dtype))
    keys[:, 0] = -1.0
    order = keys.argsort(dim=1)
    return position_ids.gather(1, order)


def shuffle_all_positions(batch: int, length: int, generator: torch.Generator | None = None,
                          device: torch.device | str | None = None) -> Tensor:
    """Token shuffle as the released MoCoSE code does it: ONE random permutation of all `length` positions, [CLS]
    and pads included, shared by the `batch` sentences. Returns (batch, length) position ids, every row the same:
    the draw `takers = randperm(length)` gives position p to the token at index takers[p]. The generator must
    live on `device`.

    >>> ids = shuffle_all_positions(3, 5, torch.Generator().manual_seed(0))
    >>> sorted(ids[0].tolist()), bool((ids == ids[0]).all())
    ([0, 1, 2, 3, 4], True)
    """
    takers = torch.randperm(length, generator=generator, device=device)
    positions = torch.empty_like(takers)
    positions[takers] = torch.arange(length, device=takers.device)
    return positions.expand(batch, length)


def shuffled_positions(ids: Tensor, attention_mask: Tensor, generator: torch.Generator | None = None,
                       whole_batch: bool = False) -> Tensor:
    """The position ids a token-shuffled forward of the (B, L) batch `ids` passes to the encoder: each sentence
    its own permutation of its real tokens (`shuffle_token_positions`), or, `whole_batch`, the released MoCoSE
    code's one permutation of every position for the whole batch (`shuffle_all_positions`)."""
    if whole_batch:
        return shuffle_all_positions(ids.shape[0], ids.shape[1], generator, ids.device)
    return shuffle_token_positions(torch.arange(ids.shape[1], device=ids.device), attention_mask, generator)


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}  # a half precision's autocast dtype


def check_fgsm_precision(eps: float | None, precision: str, word_embeddings: Tensor) -> None:
    """Refuse an FGSM eps that half-precision autocast (`precision` bf16 or fp16) would round away before the
    encoder sees it: a PrecisionFloorError (one line, naming the floor and the two ways out)."""
    from trainer.errors import PrecisionFloorError

    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None or not eps:
        return
    floor = half_precision_floor(word_embeddings, dtype)
    if eps < floor:
        raise PrecisionFloorError(eps, precision, floor)


def token_cutoff(
    embeddings: Tensor, attention_mask: Tensor, rate: float, generator: torch.Generator | None = None
) -> Tensor:
    """Token cutoff: zero whole token rows of (B, L, d) embeddings, each real token with probability `rate`.

    Never [CLS] (index 0); pads are left as they are. No rescaling (as ConSERT).

    >>> out = token_cutoff(torch.ones(2, 5, 3), torch.ones(2, 5), rate=0.5, generator=torch.Generator().manual_seed(0))
    >>> out.shape, bool((out[:, 0] == 1).all())
    (torch.Size([2, 5, 3]), True)
    """
    if rate <= 0:
        return embeddings
    drop = torch.rand(attention_mask.shape, generator=generator, device=embeddings.device) < rate
    drop &= attention_mask.bool()
    drop[:, 0] = False
    return embeddings.masked_fill(drop.unsqueeze(-1), 0.0)


def feature_cutoff(embeddings: Tensor, rate: float, generator: torch.Generator | None = None) -> Tensor:
    """Feature cutoff: zero the same feature columns for every token of a row, each with probability `rate`.

    embeddings: (B, ..., d). No rescaling (as ConSERT).

    >>> out = feature_cutoff(torch.ones(2, 4, 8), rate=0.5, generator=torch.Generator().manual_seed(0))
    >>> bool((out == out[:, :1]).all())  # every token of a row lost the same columns
    True
    """
    if rate <= 0:
        return embeddings
    batch, dim = embeddings.shape[0], embeddings.shape[-1]
    drop = torch.rand(batch, dim, generator=generator, device=embeddings.device) < rate
    drop = drop.view(batch, *([1] * (embeddings.dim() - 2)), dim)
    return embeddings.masked_fill(drop, 0.0)


def fixed_count_token_cutoff(embeddings: Tensor, rate: float, generator: torch.Generator | None = None) -> Tensor:
    """Token cutoff as the released MoCoSE code does it: in every row, zero exactly max(1, int(L * rate))
    positions drawn without replacement from all L positions of the padded row ([CLS] and pads included).

    >>> out = fixed_count_token_cutoff(torch.ones(2, 10, 3), rate=0.2, generator=torch.Generator().manual_seed(0))
    >>> (out[:, :, 0] == 0).sum(dim=1).tolist()
    [2, 2]
    """
    if rate <= 0:
        return embeddings
    batch, length = embeddings.shape[:2]
    count = max(1, int(length * rate))
    order = torch.rand(batch, length, generator=generator, device=embeddings.device).argsort(dim=1)
    drop = torch.zeros(batch, length, dtype=torch.bool, device=embeddings.device)
    drop.scatter_(1, order[:, :count], True)
    return embeddings.masked_fill(drop.unsqueeze(-1), 0.0)


def fixed_count_feature_cutoff(embeddings: Tensor, rate: float, generator: torch.Generator | None = None) -> Tensor:
    """Feature cutoff as the released MoCoSE code does it: in every row, zero exactly max(1, int(d * rate))
    feature columns, the same ones for every token of the row.

    >>> out = fixed_count_feature_cutoff(torch.ones(2, 4, 100), rate=0.01, generator=torch.Generator().manual_seed(0))
    >>> (out[:, 0] == 0).sum(dim=1).tolist(), bool((out == out[:, :1]).all())
    ([1, 1], True)
    """
    if rate <= 0:
        return embeddings
    batch, dim = embeddings.shape[0], embeddings.shape[-1]
    count = max(1, int(dim * rate))
    order = torch.rand(batch, dim, generator=generator, device=embeddings.device).argsort(dim=1)
    drop = torch.zeros(batch, dim, dtype=torch.bool, device=embeddings.device)
    drop.scatter_(1, order[:, :count], True)
    return embeddings.masked_fill(drop.view(batch, *([1] * (embeddings.dim() - 2)), dim), 0.0)


class EmbeddingCutoff:
    """Token and feature cutoff (MoCoSE Table 5) through a forward hook, active only inside `on(mask)`.

    - paper reading (`released=False`): on the embedding layer's output (after positions, LayerNorm and
      dropout); each real token with probability `token_cutoff`, never [CLS] (`token_cutoff`,
      `feature_cutoff` above). MoCoSE turns it on for each view's forward, each its own draw (Algorithm 1
      line 3; `augment.branches: online` for the online view only); SimCSE for its 2N rows.
    - released MoCoSE code (`released=True`): on the word-embedding output, before positions are added;
      a fixed count of positions over the padded length, [CLS] and pads included
      (`fixed_count_token_cutoff`, `fixed_count_feature_cutoff`); MoCoSE turns it on for both branches.

    `augment` is the run config's `augment` section (token_cutoff, feature_cutoff rates).
    """

    def __init__(self, encoder: nn.Module, augment: Any, generator: torch.Generator, released: bool = False):
        self.rate_token, self.rate_feature = augment.token_cutoff, augment.feature_cutoff
        self.generator, self.released = generator, released
        self.mask: Tensor | None = None
        self.active = False
        module = encoder.get_input_embeddings() if released else encoder.embeddings
        self.handle = module.register_forward_hook(self._hook) if (self.rate_token or self.rate_feature) else None

    def _hook(self, module: nn.Module, inputs: tuple, output: Tensor) -> Tensor:
        if not self.active:
            return output
        if self.released:
            output = fixed_count_token_cutoff(output, self.rate_token, self.generator)
            return fixed_count_feature_cutoff(output, self.rate_feature, self.generator)
        if self.rate_token:
            output = token_cutoff(output, self.mask, self.rate_token, generator=self.generator)
        if self.rate_feature:
            output = feature_cutoff(output, self.rate_feature, generator=self.generator)
        return output

    @contextmanager
    def on(self, mask: Tensor | None = None, generator: torch.Generator | None = None) -> Iterator["EmbeddingCutoff"]:
        """Cut the embeddings of every forward in this block; `mask` (B, L) marks the real tokens. `generator`:
        draw from it instead of the training's own (the evaluation's cutoffs, `EvaluationAugments`)."""
        training_generator = self.generator
        self.active, self.mask = self.handle is not None, mask
        self.generator = generator or training_generator
        try:
            yield self
        finally:
            self.active, self.generator = False, training_generator


class EvaluationAugments:
    """`released.eval_cutoff`: the training's cutoffs and token shuffle left on at every evaluation, as the
    released MoCoSE code evaluates (it calls its embeddings without `sent_emb`, so they act; under its
    no_grad and eval mode, FGSM and dropout do not). Two evaluations of one batch then differ: not
    SentEval's protocol. The cutoffs and the shuffle are the run's (`released.cutoffs` and
    `released.token_shuffle` say which form: `whole_batch_shuffle` is the latter). The draws come from a
    generator of their own, so the training draws the same numbers with the switch on or off."""

    LABEL = ("cutoff and token shuffle act at every evaluation (dev and test), as the released MoCoSE code "
             "evaluates (released.eval_cutoff): scores vary between evaluations and are not SentEval's protocol")

    def __init__(self, cutoff: EmbeddingCutoff, token_shuffle: bool, generator: torch.Generator,
                 whole_batch_shuffle: bool = False):
        self.cutoff, self.token_shuffle, self.generator = cutoff, token_shuffle, generator
        self.whole_batch_shuffle = whole_batch_shuffle

    @contextmanager
    def around(self, ids: Tensor, mask: Tensor) -> Iterator[Tensor | None]:
        """Around one evaluation batch's forward: the cutoffs act inside; yields the shuffled position ids
        to pass to the encoder (None without token shuffle)."""
        positions = (shuffled_positions(ids, mask, self.generator, self.whole_batch_shuffle)
                     if self.token_shuffle else None)
        with self.cutoff.on(mask, generator=self.generator):
            yield positions
