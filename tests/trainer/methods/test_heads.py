"""Heads: shapes, layer structure, and the forward math against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from transformers import BertConfig, BertModel

from trainer.methods.heads import MLPHead, build_predictor, build_projection, make_pooler_dense


def np_linear(x, layer):
    return x @ layer.weight.detach().numpy().T + layer.bias.detach().numpy()


def np_layer_norm(x, layer):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + layer.eps) * layer.weight.detach().numpy() + layer.bias.detach().numpy()


def layer_types(module):
    return [type(m).__name__ for m in module] if isinstance(module, nn.Sequential) else [type(module).__name__]


@pytest.mark.parametrize("dim", [1, 8, 32])
def test_mlp_head_is_tanh_linear(dim):
    head = MLPHead(dim)
    x = np.random.default_rng(dim).normal(size=(5, dim)).astype(np.float32)
    out = head(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(out, np.tanh(np_linear(x, head.dense)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layers", [0, 1, 2, 3])
@pytest.mark.parametrize("dim", [4, 16])
def test_projection_structure_and_shape(layers, dim):
    projection = build_projection(dim, layers, dropout=0.2)
    if layers == 0:
        assert isinstance(projection, nn.Identity)
    else:
        assert layer_types(projection) == ["Linear", "LayerNorm", "Dropout"] * layers
        assert all(m.p == 0.2 for m in projection if isinstance(m, nn.Dropout))
    assert projection(torch.randn(3, dim)).shape == (3, dim)


def test_projection_forward_matches_numpy_in_eval_mode():
    projection = build_projection(6, 1).eval()
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    expected = np_layer_norm(np_linear(x, projection[0]), projection[1])
    np.testing.assert_allclose(projection(torch.from_numpy(x)).detach().numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dim,hidden", [(8, 8), (8, 16), (16, 4)])
@pytest.mark.parametrize("layers", [0, 1, 2, 4])
def test_predictor_structure_widths_and_range(dim, hidden, layers):
    predictor = build_predictor(dim, hidden, layers)
    if layers == 0:
        assert isinstance(predictor, nn.Identity)
        return
    expected = ["Linear", "LayerNorm", "Dropout"] * (layers - 1) + ["Linear", "Tanh"]
    assert layer_types(predictor) == expected
    widths = [(m.in_features, m.out_features) for m in predictor if isinstance(m, nn.Linear)]
    if layers == 1:
        assert widths == [(dim, dim)]
    else:
        assert widths == [(dim, hidden)] + [(hidden, hidden)] * (layers - 2) + [(hidden, dim)]
    out = predictor(torch.randn(5, dim))
    assert out.shape == (5, dim) and out.abs().max() <= 1


def test_predictor_forward_matches_numpy_in_eval_mode():
    predictor = build_predictor(6, 10, 2).eval()
    x = np.random.default_rng(1).normal(size=(3, 6)).astype(np.float32)
    hidden = np_layer_norm(np_linear(x, predictor[0]), predictor[1])
    expected = np.tanh(np_linear(hidden, predictor[3]))
    np.testing.assert_allclose(predictor(torch.from_numpy(x)).detach().numpy(), expected, rtol=1e-4, atol=1e-5)
    assert layer_types(build_predictor(6, None, 2)) == layer_types(predictor)


def tiny_bert(pooling):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    return BertModel(config, add_pooling_layer=pooling)


def test_pooler_dense_copies_bert_pooler():
    encoder = tiny_bert(pooling=True)
    dense = make_pooler_dense(encoder)
    assert torch.equal(dense.weight, encoder.pooler.dense.weight)
    assert torch.equal(dense.bias, encoder.pooler.dense.bias)
    assert dense.weight.data_ptr() != encoder.pooler.dense.weight.data_ptr()  # a copy, trained separately


def test_pooler_dense_is_fresh_without_a_pooler():
    encoder = tiny_bert(pooling=False)
    dense = make_pooler_dense(encoder)
    assert dense.weight.shape == (16, 16)
    assert torch.equal(dense.bias, torch.zeros(16))
    assert dense.weight.std().item() == pytest.approx(encoder.config.initializer_range, rel=0.3)
