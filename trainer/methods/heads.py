"""Heads on top of the pooled [CLS] vector.

- SimCSE: `MLPHead`, Linear(d, d) + Tanh, used only in training (evaluation uses raw [CLS]).
- MoCoSE (docs/science/mocose.md#projection-and-predictor): pooler `Linear(d, d)` initialised from BERT's pooler (no
  activation) -> projection (P layers of Linear + LayerNorm + Dropout; best P = 1), its last layer mapping d -> e ->
  predictor (Q layers, online branch only; best Q = 2: Linear + LayerNorm + Dropout, then Linear + Tanh).
  e is the embedding size the loss sees (`heads.embedding_dim`, MoCoSE Table 6a; the release's
  `out_size`): the projection output, every predictor layer and the queue all have it.
- `released_init`: the released MoCoSE heads use HF's `init_weights` (normal(0, 0.02) weights, zero
  biases, LayerNorm eps 1e-12) instead of PyTorch's defaults (Kaiming-uniform, LayerNorm eps 1e-5).
"""

from __future__ import annotations

import torch
from torch import nn


class MLPHead(nn.Module):
    """SimCSE's train-only MLP: tanh(W x + b), (.., d) -> (.., d).

    >>> MLPHead(8)(torch.zeros(2, 8)).shape
    torch.Size([2, 8])
    """

    def __init__(self, dim: int):
        super().__init__()
        # names match SimCSE's `mlp.dense` / `mlp.activation`
        self.dense = nn.Linear(dim, dim)
        self.activation = nn.Tanh()

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(features))


RELEASED_LAYER_NORM_EPS = 1e-12  # BERT's layer_norm_eps, which the released MoCoSE heads use
RELEASED_INIT_STD = 0.02  # BERT's initializer_range


def _linear_norm_dropout(dim_in: int, dim_out: int, dropout: float, eps: float) -> list[nn.Module]:
    return [nn.Linear(dim_in, dim_out), nn.LayerNorm(dim_out, eps=eps), nn.Dropout(dropout)]


def build_projection(dim: int, layers: int, dropout: float = 0.1, out_dim: int | None = None,
                     released_init: bool = False) -> nn.Module:
    """`layers` x (Linear + LayerNorm + Dropout), d -> d, the last one d -> `out_dim`; 0 -> Identity.

    >>> [type(m).__name__ for m in build_projection(8, 2)]
    ['Linear', 'LayerNorm', 'Dropout', 'Linear', 'LayerNorm', 'Dropout']
    >>> build_projection(8, 2, out_dim=4)[3].weight.shape
    torch.Size([4, 8])
    """
    if layers < 0:
        raise ValueError(f"projection layers must be >= 0, got {layers}")
    out_dim = out_dim or dim
    if layers == 0:
        if out_dim != dim:
            raise ValueError(f"a projection of 0 layers keeps the encoder's size {dim}; "
                             f"embedding size {out_dim} needs >= 1")
        return nn.Identity()
    eps = RELEASED_LAYER_NORM_EPS if released_init else 1e-5
    modules: list[nn.Module] = []
    for i in range(layers):
        modules += _linear_norm_dropout(dim, out_dim if i == layers - 1 else dim, dropout, eps)
    return _initialised(nn.Sequential(*modules), released_init)


def build_predictor(dim: int, hidden: int | None, layers: int, dropout: float = 0.1,
                    released_init: bool = False) -> nn.Module:
    """(layers - 1) x (Linear + LayerNorm + Dropout) of width `hidden`, then Linear(-> dim) + Tanh.

    `dim` is the embedding size the loss sees; `hidden` None means `dim` (the released code: every
    predictor layer is `out_size` wide). 0 -> Identity; 1 -> Linear(dim, dim) + Tanh.

    >>> [type(m).__name__ for m in build_predictor(8, 16, 2)]
    ['Linear', 'LayerNorm', 'Dropout', 'Linear', 'Tanh']
    """
    if layers < 0:
        raise ValueError(f"predictor layers must be >= 0, got {layers}")
    if layers == 0:
        return nn.Identity()
    hidden = hidden or dim
    eps = RELEASED_LAYER_NORM_EPS if released_init else 1e-5
    modules: list[nn.Module] = []
    width = dim
    for _ in range(layers - 1):
        modules += _linear_norm_dropout(width, hidden, dropout, eps)
        width = hidden
    modules += [nn.Linear(width, dim), nn.Tanh()]
    return _initialised(nn.Sequential(*modules), released_init)


@torch.no_grad()
def _initialised(module: nn.Module, released_init: bool) -> nn.Module:
    """HF BERT's `_init_weights` for the released variant; PyTorch's defaults otherwise."""
    if released_init:
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                layer.weight.normal_(0.0, RELEASED_INIT_STD)
                layer.bias.zero_()
            elif isinstance(layer, nn.LayerNorm):
                layer.weight.fill_(1.0)
                layer.bias.zero_()
    return module


def make_pooler_dense(encoder: nn.Module) -> nn.Linear:
    """Linear(d, d) initialised from the encoder's BERT pooler (`encoder.pooler.dense`) when it has one.

    Otherwise a fresh layer with BERT's own init (normal(0, initializer_range), zero bias).
    """
    config = encoder.config
    dim = config.hidden_size
    dense = nn.Linear(dim, dim)
    source = getattr(getattr(encoder, "pooler", None), "dense", None)
    with torch.no_grad():
        if isinstance(source, nn.Linear) and source.weight.shape == dense.weight.shape:
            dense.weight.copy_(source.weight)
            dense.bias.copy_(source.bias)
        else:
            dense.weight.normal_(0.0, getattr(config, "initializer_range", 0.02))
            dense.bias.zero_()
    return dense.to(device=next(encoder.parameters()).device)
