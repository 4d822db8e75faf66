"""trainer.evaluation.fast_forward against the transformers forward (an independent implementation of the same
function).

Every pooler, BERT and RoBERTa layouts, oneDNN-packed and plain products, both GELUs, the folded
[CLS]-only last layer, weights changing between calls, and the fall-back for models it does not support.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainer.evaluation.encoder import SentenceEncoder
from trainer.evaluation.fast_forward import FastEncoderForward, PackedLinear, onednn_usable, unsupported_reason
from trainer.vocabulary import POOLERS

SENTENCES = [
    "a man is playing the guitar .",
    "the woman is slicing a big red tomato on the kitchen table while the cat watches .",
    "two",
    "children are playing football in a park near the river",
    "a dog runs .",
]
ONEDNN = [True, False] if onednn_usable() else [False]


def random_model(kind: str = "bert", layers: int = 3, **overrides):
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

    torch.manual_seed(3)
    common = dict(vocab_size=30522, hidden_size=48, num_hidden_layers=layers, num_attention_heads=4,
                  intermediate_size=96, max_position_embeddings=130, initializer_range=0.2)
    common.update(overrides)
    if kind == "roberta":
        model = RobertaModel(RobertaConfig(pad_token_id=1, **common))
    else:
        model = BertModel(BertConfig(**common))
    with torch.no_grad():  # transformers initialises biases to zero; a forgotten bias must show
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.2)
    return model.eval()


@pytest.fixture(scope="module")
def tokenizer(embedded_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_model_dir)


def batch(tokenizer, sentences, pad_id=0):
    ids = tokenizer(sentences)["input_ids"]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, seq in enumerate(ids):
        input_ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return input_ids, mask


def hf_reference(model, input_ids, mask, pad_id=0):
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True, return_dict=True)


@pytest.mark.parametrize("onednn", ONEDNN)
@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_hidden_states_and_cls_match_transformers(tokenizer, kind, onednn, act):
    model = random_model(kind, hidden_act=act)
    pad_id = model.config.pad_token_id
    input_ids, mask = batch(tokenizer, SENTENCES, pad_id)
    ref = hf_reference(model, input_ids, mask)
    fast = FastEncoderForward(model, onednn=onednn)
    assert fast.onednn == onednn
    last, hidden = fast(input_ids, mask, all_hidden=True)
    real = mask.bool()
    assert len(hidden) == len(ref.hidden_states) == 4
    for got, want in zip(hidden, ref.hidden_states):
        torch.testing.assert_close(got[real], want[real], rtol=0, atol=2e-5)
    torch.testing.assert_close(last[real], ref.last_hidden_state[real], rtol=0, atol=2e-5)
    # the folded [CLS]-only last layer equals position 0 of the full last layer
    cls = fast(input_ids, mask, cls_only=True)
    assert cls.shape == (len(SENTENCES), 48)
    torch.testing.assert_close(cls, ref.last_hidden_state[:, 0], rtol=0, atol=2e-5)


def test_padding_does_not_change_cls(tokenizer):
    """A sentence alone and the same sentence padded to a longer batch give the same [CLS]."""
    model = random_model()
    fast = FastEncoderForward(model)
    input_ids, mask = batch(tokenizer, SENTENCES)
    together = fast(input_ids, mask, cls_only=True)
    for row, sentence in enumerate(SENTENCES):
        alone = fast(*batch(tokenizer, [sentence]), cls_only=True)
        torch.testing.assert_close(together[row], alone[0], rtol=0, atol=2e-5)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("pooler", POOLERS)
def test_every_pooler_matches_the_transformers_forward(tokenizer, pooler, fast):
    model = random_model()
    encoder = SentenceEncoder(model, tokenizer, pooler, "cpu", batch_size=2, fast=fast)
    assert encoder.uses_fast_forward() == fast
    got = encoder.encode(SENTENCES)
    input_ids, mask = batch(tokenizer, SENTENCES)
    ref = hf_reference(model, input_ids, mask)
    m = mask.unsqueeze(-1).float()
    hs = ref.hidden_states
    want = {
        "cls_before_pooler": ref.last_hidden_state[:, 0],
        "cls": ref.pooler_output,
        "avg": (ref.last_hidden_state * m).sum(1) / m.sum(1),
        "avg_first_last": ((hs[1] + hs[-1]) / 2 * m).sum(1) / m.sum(1),
        "avg_top2": ((hs[-1] + hs[-2]) / 2 * m).sum(1) / m.sum(1),
    }[pooler]
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-5)


def test_new_weights_are_seen_by_the_next_encode(tokenizer):
    """Packed weights are a snapshot per encode call: evaluation during training sees the current weights."""
    model = random_model()
    encoder = SentenceEncoder(model, tokenizer, "cls_before_pooler", "cpu")
    before = encoder.encode(SENTENCES)
    with torch.no_grad():
        model.encoder.layer[-1].output.dense.weight.mul_(1.5)
        model.encoder.layer[0].attention.self.key.weight.add_(0.1)
    after = encoder.encode(SENTENCES)
    reference = SentenceEncoder(model, tokenizer, "cls_before_pooler", "cpu", fast=False).encode(SENTENCES)
    assert np.abs(after - before).max() > 1e-2
    np.testing.assert_allclose(after, reference, rtol=0, atol=2e-5)


def test_embedded_model_matches_the_transformers_forward(tokenizer, embedded_model_dir):
    from trainer.models import load_encoder

    model, _ = load_encoder(str(embedded_model_dir))
    for pooler in ("cls_before_pooler", "avg"):
        fast = SentenceEncoder(model, tokenizer, pooler, "cpu").encode(SENTENCES)
        slow = SentenceEncoder(model, tokenizer, pooler, "cpu", fast=False).encode(SENTENCES)
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["gelu", "gelu_new", "relu", None])
@pytest.mark.parametrize("onednn", ONEDNN)
def test_packed_linear_matches_linear_and_activation(onednn, algorithm):
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 7, 40), torch.randn(24, 40), torch.randn(24)
    y = F.linear(x, w, b)
    want = {"gelu": F.gelu(y), "gelu_new": F.gelu(y, approximate="tanh"), "relu": F.relu(y), None: y}[algorithm]
    got = PackedLinear(w, b, algorithm, onednn=onednn)(x)
    assert got.shape == (2, 7, 24)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_unsupported_models_fall_back_to_their_own_forward(tokenizer):
    from transformers import DistilBertConfig, DistilBertModel

    relative = random_model(position_embedding_type="relative_key")
    assert "relative_key" in unsupported_reason(relative)
    distil = DistilBertModel(DistilBertConfig(vocab_size=30522, dim=32, n_layers=1, n_heads=2, hidden_dim=64)).eval()
    assert "not BERT-like" in unsupported_reason(distil)
    assert "float32" in unsupported_reason(random_model().to(torch.bfloat16))
    with pytest.raises(ValueError, match="does not support"):
        FastEncoderForward(distil)
    for model in (relative, distil):
        encoder = SentenceEncoder(model, tokenizer, "cls_before_pooler", "cpu")
        assert not encoder.uses_fast_forward()
        got = encoder.encode(SENTENCES[:3])
        for row, sentence in enumerate(SENTENCES[:3]):
            with torch.no_grad():
                enc = tokenizer(sentence, return_tensors="pt")
                enc.pop("token_type_ids") if model is distil else None
                want = model(**enc).last_hidden_state[0, 0].numpy()
            np.testing.assert_allclose(got[row], want, rtol=0, atol=2e-5)


def test_encode_restores_threads_and_mode_even_when_a_batch_fails(tokenizer, monkeypatch):
    """Batches run one per core with single-threaded ops; the caller's settings come back afterwards."""
    model = random_model().train()
    caller = torch.get_num_threads()
    torch.set_num_threads(2)  # a known value, whatever earlier tests left behind
    try:
        _check_restored(model, tokenizer, monkeypatch)
    finally:
        torch.set_num_threads(caller)


def _check_restored(model, tokenizer, monkeypatch):
    encoder = SentenceEncoder(model, tokenizer, "avg", "cpu", batch_size=2)
    seen = []

    def spy(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    original = FastEncoderForward.__call__
    monkeypatch.setattr(FastEncoderForward, "__call__", spy)
    encoder.encode(SENTENCES)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2 and model.training

    def boom(self, *args, **kwargs):
        raise RuntimeError("batch failed")

    monkeypatch.setattr(FastEncoderForward, "__call__", boom)
    with pytest.raises(RuntimeError, match="batch failed"):
        encoder.encode(SENTENCES)
    assert torch.get_num_threads() == 2 and model.training
