"""A faster CPU inference forward for BERT-family encoders: the same function, fewer passes and FLOPs.

Evaluation encodes ~26k sentences; on a CPU nearly all of that time is the encoder's matrix products.
`FastEncoderForward` computes exactly what the transformers forward computes (post-LayerNorm encoder
layers, GELU, absolute positions) from the model's own modules and current weights, with three
changes in *how*, none in *what*:

1. Weights are packed once per `encode` call into oneDNN's blocked layout (`torch.ops.mkldnn`, the
   path torch.compile uses on CPU); query/key/value are one matrix product instead of three; the FFN's
   bias and GELU are fused into its first product (`bench/eval_speed.py --compare-hf` times it against
   transformers' own forward).
2. For the [CLS] poolers only position 0 of the last layer is needed. Its attention is folded into
   the hidden states: for head h, q_h . (W_k,h x_j + b_k,h) = (W_k,h^T q_h) . x_j + const, where the
   constant q_h . b_k,h is the same for every key j and cancels in the softmax; and
   sum_j p_j (W_v,h x_j + b_v,h) = W_v,h (sum_j p_j x_j) + b_v,h since the p_j sum to 1. So the last
   layer costs one token instead of every token: 1/L of the FLOPs saved (1/6 for MiniLM-L6).
3. Attention as two batched products over one contiguous copy of q/k/v, with an additive -inf key
   mask only when the batch has padding (length-sorted batches mostly have none); for the short
   sequences of STS this beats the flash-attention CPU kernel (bench/eval_speed.py).

Results differ from the transformers forward only by float32 rounding (max abs difference ~2e-6 on
the embedded model; tests/trainer/evaluation/test_fast_forward.py checks every pooler against the transformers forward).
`unsupported_reason(model)` says why a model falls back to the transformers forward (another
architecture, relative positions, a decoder, a non-float32 or non-CPU model); the caller then uses
the model's own forward. The packed weights are a snapshot: build a new `FastEncoderForward` after
the weights change (SentenceEncoder builds one per `encode` call, so evaluation during training always
sees the current weights).

    >>> fast = FastEncoderForward(model)                          # doctest: +SKIP
    >>> cls = fast(input_ids, attention_mask, cls_only=True)      # [B, H], the last layer at [CLS]
    >>> last, hidden = fast(input_ids, attention_mask, all_hidden=True)
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

# transformers activation name -> (oneDNN post-op, its algorithm); both GELUs are fused exactly
_ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "gelu_pytorch_tanh": ("gelu", "tanh"),
                "relu": ("relu", "")}
_LAYER_ATTRS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")


def _has_submodule(module: torch.nn.Module, dotted: str) -> bool:
    try:
        module.get_submodule(dotted)
        return True
    except AttributeError:
        return False


def unsupported_reason(model) -> str | None:
    """None when `model` can run through FastEncoderForward, else a short reason it cannot."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in ("bert", "roberta", "xlm-roberta", "camembert"):
        return f"model type {getattr(config, 'model_type', None)!r} is not BERT-like"
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return "decoder models are not supported"
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
        return f"position_embedding_type {config.position_embedding_type!r}"
    if getattr(config, "hidden_act", None) not in _ACTIVATIONS:
        return f"activation {getattr(config, 'hidden_act', None)!r}"
    if not (_has_submodule(model, "embeddings") and _has_submodule(model, "encoder.layer")):
        return "no embeddings/encoder.layer modules"
    if any(not _has_submodule(layer, attr) for layer in model.encoder.layer for attr in _LAYER_ATTRS):
        return "encoder layers are not BERT layers"
    parameter = next(model.parameters())
    if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
        return f"only float32 CPU models ({parameter.dtype} on {parameter.device.type})"
    return None


@functools.lru_cache(maxsize=1)
def onednn_usable() -> bool:
    """oneDNN's packed linear ops exist and run here (any CPU torch build with mkldnn)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(4, 4), 2)
        y = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 4), w, torch.zeros(4), "none", [], "")
        return bool(torch.all(y == 4))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


class PackedLinear:
    """y = act(x W^T + b) with W packed for oneDNN once; plain `F.linear` where oneDNN is not usable."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str | None = None,
                 onednn: bool = True, rows_hint: int = 1024):
        self.weight = weight.detach().contiguous()
        self.bias = None if bias is None else bias.detach().contiguous()
        self.post_op, self.algorithm = _ACTIVATIONS[activation] if activation else ("none", "")
        self.onednn = onednn
        if onednn:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, rows_hint)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.onednn:
            flat = x.reshape(-1, x.shape[-1])
            y = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, self.post_op, [], self.algorithm)
            return y.view(*x.shape[:-1], y.shape[-1])
        y = F.linear(x, self.weight, self.bias)
        if self.post_op == "gelu":
            return F.gelu(y, approximate=self.algorithm if self.algorithm == "tanh" else "none")
        return F.relu(y) if self.post_op == "relu" else y


class _Layer:
    """One post-LayerNorm encoder layer's weights, taken from a transformers BertLayer-like module."""

    def __init__(self, layer, activation: str, onednn: bool):
        attn = layer.attention.self
        self.qkv = PackedLinear(torch.cat([attn.query.weight, attn.key.weight, attn.value.weight]),
                                torch.cat([attn.query.bias, attn.key.bias, attn.value.bias]), onednn=onednn)
        self.query = (attn.query.weight.detach(), attn.query.bias.detach())
        self.key_weight = attn.key.weight.detach()
        self.value = (attn.value.weight.detach(), attn.value.bias.detach())
        self.out = PackedLinear(layer.attention.output.dense.weight, layer.attention.output.dense.bias, onednn=onednn)
        self.norm1 = layer.attention.output.LayerNorm
        self.ffn_in = PackedLinear(layer.intermediate.dense.weight, layer.intermediate.dense.bias, activation, onednn)
        self.ffn_out = PackedLinear(layer.output.dense.weight, layer.output.dense.bias, onednn=onednn)
        self.norm2 = layer.output.LayerNorm

    def _finish(self, context: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Attention output projection, add & norm, FFN, add & norm (BertSelfOutput, BertIntermediate, BertOutput)."""
        x = self._norm(self.out(context) + residual, self.norm1)
        return self._norm(self.ffn_out(self.ffn_in(x)) + x, self.norm2)

    @staticmethod
    def _norm(x: torch.Tensor, norm) -> torch.Tensor:
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

    def __call__(self, x: torch.Tensor, key_bias: torch.Tensor | None, heads: int) -> torch.Tensor:
        """Every position. x [B, T, H]; key_bias [B, 1, 1, T], -inf on padding (None: no padding)."""
        b, t, h = x.shape
        d = h // heads
        # One copy into [3, B*heads, T, d], then two batched products (for the short sequences of STS,
        # cheaper on CPU than scaled_dot_product_attention's flash kernel).
        q, k, v = self.qkv(x).view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4).reshape(3, b * heads, t, d)
        scores = torch.bmm(q, k.transpose(1, 2)).mul_(d ** -0.5).view(b, heads, t, t)
        if key_bias is not None:
            scores.add_(key_bias)
        context = torch.bmm(scores.softmax(-1).view(b * heads, t, t), v)
        return self._finish(context.view(b, heads, t, d).transpose(1, 2).reshape(b, t, h), x)

    def first_position(self, x: torch.Tensor, key_bias: torch.Tensor | None, heads: int) -> torch.Tensor:
        """Position 0's output only, with the key/value projections folded (module docstring, point 2)."""
        b, t, h = x.shape
        d = h // heads
        q = F.linear(x[:, 0], *self.query).view(b, heads, d)
        q_keys = torch.einsum("bnd,ndh->bnh", q, self.key_weight.view(heads, d, h)) * d ** -0.5  # W_k,h^T q_h
        scores = torch.bmm(q_keys, x.transpose(1, 2))  # [B, heads, T]
        if key_bias is not None:
            scores.add_(key_bias[:, 0])
        mixed = torch.bmm(scores.softmax(-1), x)  # sum_j p_j x_j per head: [B, heads, H]
        weight, bias = self.value
        context = torch.einsum("bnh,ndh->bnd", mixed, weight.view(heads, d, h)).reshape(b, h) + bias
        return self._finish(context, x[:, 0])


class FastEncoderForward:
    """The encoder's inference forward (see the module docstring); build after the weights last changed."""

    def __init__(self, model, onednn: bool | None = None):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"FastEncoderForward does not support this model: {reason}")
        self.model = model
        self.heads = model.config.num_attention_heads
        self.onednn = onednn_usable() if onednn is None else onednn
        self.layers = [_Layer(layer, model.config.hidden_act, self.onednn) for layer in model.encoder.layer]

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 token_type_ids: torch.Tensor | None = None, cls_only: bool = False, all_hidden: bool = False):
        """cls_only: the last layer at position 0, [B, H]. Else (last hidden state [B, T, H], the tuple of
        all hidden states, embeddings first, as transformers' `hidden_states`, or None)."""
        if token_type_ids is None and getattr(self.model.config, "type_vocab_size", 0):
            token_type_ids = torch.zeros_like(input_ids)
        x = self.model.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        # additive key mask, as the transformers forward uses: exp(-inf) = 0 weight on padding
        key_bias = None
        if not bool(attention_mask.bool().all()):
            key_bias = torch.zeros(attention_mask.shape, dtype=x.dtype, device=x.device)
            key_bias = key_bias.masked_fill_(~attention_mask.bool(), float("-inf"))[:, None, None, :]
        hidden = [x] if all_hidden else None
        for i, layer in enumerate(self.layers):
            if cls_only and i == len(self.layers) - 1:
                return layer.first_position(x, key_bias, self.heads)
            x = layer(x, key_bias, self.heads)
            if hidden is not None:
                hidden.append(x)
        return x, (tuple(hidden) if hidden is not None else None)
