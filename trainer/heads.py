"""Heads on top of the pooled [CLS] vector.

- SimCSE: `MLPHead`, Linear(d, d) + Tanh, used only in training (evaluation uses raw [CLS]).
- MoCoSE (methods.md section 2): pooler `Linear(d, d)` initialised from BERT's pooler (no activation)
  -> projection (P layers of Linear + LayerNorm + Dropout; best P = 1)
  -> predictor (Q layers, online branch only; best Q = 2: Linear + LayerNorm + Dropout, then Linear + Tanh).
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


def _linear_norm_dropout(dim_in: int, dim_out: int, dropout: float) -> list[nn.Module]:
    return [nn.Linear(dim_in, dim_out), nn.LayerNorm(dim_out), nn.Dropout(dropout)]


def build_projection(dim: int, layers: int, dropout: float = 0.1) -> nn.Module:
    """`layers` x (Linear(d, d) + LayerNorm + Dropout); 0 -> Identity.

    >>> [type(m).__name__ for m in build_projection(8, 2)]
    ['Linear', 'LayerNorm', 'Dropout', 'Linear', 'LayerNorm', 'Dropout']
    """
    if layers < 0:
        raise ValueError(f"projection layers must be >= 0, got {layers}")
    if layers == 0:
        return nn.Identity()
    modules: list[nn.Module] = []
    for _ in range(layers):
        modules += _linear_norm_dropout(dim, dim, dropout)
    return nn.Sequential(*modules)


def build_predictor(dim: int, hidden: int | None, layers: int, dropout: float = 0.1) -> nn.Module:
    """(layers - 1) x (Linear + LayerNorm + Dropout) of width `hidden`, then Linear(-> dim) + Tanh.

    0 -> Identity; 1 -> Linear(dim, dim) + Tanh. `hidden` None means `dim`.

    >>> [type(m).__name__ for m in build_predictor(8, 16, 2)]
    ['Linear', 'LayerNorm', 'Dropout', 'Linear', 'Tanh']
    """
    if layers < 0:
        raise ValueError(f"predictor layers must be >= 0, got {layers}")
    if layers == 0:
        return nn.Identity()
    hidden = hidden or dim
    modules: list[nn.Module] = []
    width = dim
    for _ in range(layers - 1):
        modules += _linear_norm_dropout(width, hidden, dropout)
        width = hidden
    modules += [nn.Linear(width, dim), nn.Tanh()]
    return nn.Sequential(*modules)


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
