"""FGSM (exact and lagged) on a tiny embedding model, and the shape-preserving augmentations."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from trainer.augment import (
    FGSM,
    EmbeddingCutoff,
    feature_cutoff,
    shuffle_token_positions,
    shuffled_positions,
    token_cutoff,
)

EPS = 2.0**-6  # a power of two: with weights on a 2^-8 grid, x + eps*sign and its difference are exact


def tiny_embedding(vocab=20, dim=8, seed=0):
    torch.manual_seed(seed)
    embedding = nn.Embedding(vocab, dim)
    with torch.no_grad():
        embedding.weight.copy_(torch.round(embedding.weight * 256) / 256)
    return embedding


def make_loss(dim, seed=1):
    """A non-linear loss of the embedding output, so the gradient depends on where it is taken."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(dim, dim, generator=generator)

    def loss_fn(x):
        return torch.tanh(x @ weight).pow(2).sum() + x[..., 0].sum()

    return loss_fn


def reference_sign(loss_fn, x):
    """sign(grad_x L) computed on a plain leaf tensor, independently of the hooks."""
    x = x.detach().clone().requires_grad_(True)
    loss_fn(x).backward()
    return x.grad.sign()


def lookup(embedding, ids):
    return embedding.weight.detach()[ids]


@pytest.mark.parametrize("batch,length,dim", [(1, 1, 2), (2, 5, 8), (4, 9, 16)])
def test_exact_mode_moves_embeddings_by_eps_sign_grad(batch, length, dim):
    embedding = tiny_embedding(dim=dim)
    loss_fn = make_loss(dim)
    ids = torch.randint(0, 20, (batch, length), generator=torch.Generator().manual_seed(batch))
    fgsm = FGSM(EPS, mode="exact").attach(embedding)

    with fgsm.capture():
        loss = loss_fn(embedding(ids))
    assert not fgsm.has_sign  # stored by the backward, not the forward
    loss.backward()
    expected_sign = reference_sign(loss_fn, lookup(embedding, ids))
    assert fgsm.has_sign and torch.equal(fgsm.sign, expected_sign)

    embedding.zero_grad()
    with fgsm.perturb():
        perturbed = embedding(ids)
    assert torch.equal(perturbed - lookup(embedding, ids), EPS * expected_sign)
    rows = expected_sign.reshape(-1, dim).abs().sum(dim=1).sqrt() * EPS
    assert fgsm.last_perturbation_norm == pytest.approx(rows.mean().item(), rel=1e-6)

    # the second backward sees the perturbed input: its gradient is the loss gradient at x + eps*sign
    loss_fn(perturbed).backward()
    x = (lookup(embedding, ids) + EPS * expected_sign).requires_grad_(True)
    loss_fn(x).backward()
    expected_weight_grad = torch.zeros_like(embedding.weight).index_add_(0, ids.flatten(), x.grad.reshape(-1, dim))
    torch.testing.assert_close(embedding.weight.grad, expected_weight_grad)

    # outside perturb() nothing changes; the stored sign stays for the next step
    assert torch.equal(embedding(ids), lookup(embedding, ids))
    fgsm.detach()


def test_exact_mode_rejects_a_different_batch():
    embedding = tiny_embedding()
    fgsm = FGSM(EPS, mode="exact").attach(embedding)
    with fgsm.capture():
        embedding(torch.zeros(2, 4, dtype=torch.long)).sum().backward()
    with fgsm.perturb(), pytest.raises(RuntimeError):
        embedding(torch.zeros(2, 5, dtype=torch.long))


def test_lagged_mode_applies_previous_sign_to_both_branches_with_crop_and_pad():
    dim = 8
    embedding = tiny_embedding(dim=dim)
    loss_fn = make_loss(dim)
    generator = torch.Generator().manual_seed(0)
    fgsm = FGSM(EPS, mode="lagged").attach(embedding)

    def step(ids):
        """One lagged step: online forward with grad, target forward without, backward."""
        with fgsm.perturb(), fgsm.capture():
            online = embedding(ids)
            with torch.no_grad():
                target = embedding(ids)
        loss_fn(online).backward()
        return online.detach(), target

    # step 1: no sign yet, nothing applied; the backward stores sign(grad) of step 1's input
    ids1 = torch.randint(0, 20, (3, 5), generator=generator)
    online, target = step(ids1)
    assert torch.equal(online, lookup(embedding, ids1)) and fgsm.last_perturbation_norm is None
    sign1 = reference_sign(loss_fn, lookup(embedding, ids1))
    assert torch.equal(fgsm.sign, sign1)

    # step 2: shorter batch -> step 1's sign cropped, applied to online and target alike
    ids2 = torch.randint(0, 20, (3, 3), generator=generator)
    online, target = step(ids2)
    assert torch.equal(online - lookup(embedding, ids2), EPS * sign1[:, :3])
    assert torch.equal(target - lookup(embedding, ids2), EPS * sign1[:, :3])
    # the new sign is the gradient at step 2's (perturbed) input
    sign2 = reference_sign(loss_fn, lookup(embedding, ids2) + EPS * sign1[:, :3])
    assert torch.equal(fgsm.sign, sign2)

    # step 3: longer batch -> step 2's sign zero-padded along the sequence
    ids3 = torch.randint(0, 20, (3, 6), generator=generator)
    online, _ = step(ids3)
    moved = online - lookup(embedding, ids3)
    assert torch.equal(moved[:, :3], EPS * sign2) and torch.equal(moved[:, 3:], torch.zeros(3, 3, dim))

    # step 4: a different batch size (the last, smaller batch) -> not perturbed
    ids4 = torch.randint(0, 20, (2, 6), generator=generator)
    online, target = step(ids4)
    assert torch.equal(online, lookup(embedding, ids4)) and torch.equal(target, lookup(embedding, ids4))
    assert fgsm.skipped_forwards == 2


def test_capture_records_only_the_first_forward():
    dim = 4
    embedding = tiny_embedding(dim=dim)
    fgsm = FGSM(EPS).attach(embedding)
    first = torch.tensor([[1, 2]])
    with fgsm.capture():
        a = embedding(first)
        b = embedding(torch.tensor([[3, 4]]))
    (a.sum() - 5 * b.sum()).backward()
    assert torch.equal(fgsm.sign, torch.ones(1, 2, dim))  # from a (+1), not b (-5)


def test_detach_and_zero_eps_leave_embeddings_alone():
    embedding = tiny_embedding()
    ids = torch.tensor([[1, 2, 3]])
    fgsm = FGSM(EPS).attach(embedding)
    with fgsm.capture():
        embedding(ids).sum().backward()
    fgsm.detach()
    with fgsm.perturb():
        assert torch.equal(embedding(ids), lookup(embedding, ids))
    zero = FGSM(0.0).attach(embedding)
    zero.sign = torch.ones(1, 3, 8)
    with zero.perturb():
        assert torch.equal(embedding(ids), lookup(embedding, ids))
    with pytest.raises(ValueError):
        FGSM(-1.0)
    with pytest.raises(ValueError):
        FGSM(1.0, mode="other")


def test_paper_eps_is_measured_not_assumed():
    """eps = 5e-9 is below bf16 resolution of typical embedding values: the measured norm says so."""
    embedding = nn.Embedding(10, 16).to(torch.bfloat16)
    with torch.no_grad():
        embedding.weight.normal_(0.0, 0.02)
    fgsm = FGSM(5e-9).attach(embedding)
    fgsm.sign = torch.ones(1, 3, 16, dtype=torch.bfloat16)
    with fgsm.perturb():
        embedding(torch.tensor([[1, 2, 3]]))
    assert fgsm.last_perturbation_norm == 0.0


class WordEmbeddingEncoder(nn.Module):
    """All EmbeddingCutoff asks of an encoder: its word-embedding module."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    def get_input_embeddings(self):
        return self.embedding


@pytest.mark.parametrize("fgsm_first", [True, False], ids=["released-order", "cutoff-first"])
def test_fgsm_with_the_released_cutoff_perturbs_only_uncut_entries(fgsm_first):
    """The released MoCoSE order: perturb the raw word embeddings, then cut. By hand, with every embedding
    value 1/4 and loss = sum(c * output) for a fixed +-1 pattern c (so d loss / d output = c):
    step 1 (no sign yet): output = 1/4 where not cut, 0 where cut; stored sign = c, 0 where cut (the cut
    stops the gradient), while cut-first stores c everywhere;
    step 2: output = 1/4 + eps * c where cut in neither step, 1/4 where cut only in step 1, exactly 0
    where cut in step 2; cut-first gives 1/4 + eps * c or +-eps (cut entries carry the perturbation)."""
    dim, batch, length = 8, 3, 4
    embedding = nn.Embedding(20, dim)
    with torch.no_grad():
        embedding.weight.fill_(0.25)
    rates = SimpleNamespace(token_cutoff=0.25, feature_cutoff=0.25)
    cutoff = EmbeddingCutoff(WordEmbeddingEncoder(embedding), rates, torch.Generator().manual_seed(0), released=True)
    fgsm = FGSM(EPS, mode="lagged").attach(embedding, before_other_hooks=fgsm_first)
    index = torch.arange(batch)[:, None, None] + torch.arange(length)[None, :, None] + torch.arange(dim)
    c = torch.where(index % 2 == 0, 1.0, -1.0)
    ids = torch.arange(batch * length).view(batch, length)

    def step():
        with cutoff.on(), fgsm.perturb(), fgsm.capture():
            out = embedding(ids)
        (out * c).sum().backward()
        return out.detach()

    out1 = step()
    cut1 = out1 == 0
    assert torch.equal(out1, torch.where(cut1, 0.0, 0.25))
    # per sentence: max(1, int(4 * 1/4)) = 1 token row of 8 and max(1, int(8 * 1/4)) = 2 feature columns of 4
    # tokens, overlapping in 2 entries: 8 + 8 - 2 = 14 of 32 entries cut
    assert cut1.sum(dim=(1, 2)).tolist() == [14, 14, 14]
    assert torch.equal(fgsm.sign, torch.where(cut1, 0.0, c) if fgsm_first else c)

    out2 = step()
    cut2 = out2.abs() < 0.125  # 0 or +-eps where cut, 1/4 +- eps or 1/4 elsewhere
    assert cut2.sum(dim=(1, 2)).tolist() == [14, 14, 14]
    if fgsm_first:
        expected = torch.where(cut2, 0.0, 0.25 + EPS * torch.where(cut1, 0.0, c))
        received = EPS * (~cut1 & ~cut2).sum(dim=-1).float().sqrt()  # per token row
    else:
        expected = torch.where(cut2, 0.0, 0.25) + EPS * c
        received = torch.full((batch, length), EPS * dim**0.5)
    assert torch.equal(out2, expected)
    assert fgsm.last_perturbation_norm == pytest.approx(received.mean().item(), rel=1e-6)
    fgsm.detach()


# ---- token shuffle / cutoff -------------------------------------------------------------------
def random_mask(batch, length, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length  # one full row
    return torch.tensor((np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)), lengths


@pytest.mark.parametrize("batch,length", [(1, 1), (3, 5), (16, 32)])
@pytest.mark.parametrize("ids_shape", ["batch", "single", "flat"])
def test_shuffle_token_positions_permutes_real_tokens_only(batch, length, ids_shape):
    mask, lengths = random_mask(batch, length, seed=batch + length)
    positions = torch.arange(length)
    given = {"batch": positions.expand(batch, length), "single": positions[None], "flat": positions}[ids_shape]
    shuffled = shuffle_token_positions(given, mask, generator=torch.Generator().manual_seed(0))
    assert shuffled.shape == (batch, length)
    for row, n in zip(shuffled.tolist(), lengths):
        assert row[0] == 0  # [CLS]
        assert sorted(row[:n]) == list(range(n))
        assert row[n:] == list(range(n, length))  # pads keep their positions


def test_shuffle_actually_shuffles_and_is_reproducible():
    mask = torch.ones(8, 32, dtype=torch.long)
    positions = torch.arange(32).expand(8, 32)
    first = shuffle_token_positions(positions, mask, torch.Generator().manual_seed(5))
    again = shuffle_token_positions(positions, mask, torch.Generator().manual_seed(5))
    assert torch.equal(first, again)
    assert not torch.equal(first, positions)


def release_position_ids_shuffle(position_ids, generator):
    """The released MoCoSE code's `position_ids_shuffle` (xbdxwyh/mocose, mocose.py#L153-L159) restated, with the
    generator its global `torch.randperm` draws from made explicit: for each row, draw a permutation of the row's
    length, then write the row's k-th position id at index perm[k]."""
    shuffled = torch.zeros_like(position_ids)
    for row in range(position_ids.shape[0]):
        perm = torch.randperm(position_ids[row].nelement(), generator=generator)
        for k, index in enumerate(perm):
            shuffled[row][index] = position_ids[row][k]
    return shuffled


@pytest.mark.parametrize("batch,length", [(1, 1), (3, 5), (16, 32)])
@pytest.mark.parametrize("seed", [0, 7])
def test_the_whole_batch_shuffle_is_the_releases_position_ids_shuffle(batch, length, seed):
    """`released.token_shuffle`: what the release's embeddings pass to `position_ids_shuffle` by default is its
    (1, L) buffer `arange(max_position_embeddings)[None, :L]`; one call permutes it once, and the (1, L, d)
    position embeddings it selects are added to every sentence of the (B, L, d) batch. From the same generator
    state, the project's positions are that permutation in every row, [CLS] and pads included."""
    mask, _ = random_mask(batch, length, seed=seed + length)
    ids = torch.randint(1000, 2000, (batch, length)) * mask
    buffer = torch.arange(512).expand((1, -1))  # the release's registered position_ids buffer
    expected = release_position_ids_shuffle(buffer[:, :length], torch.Generator().manual_seed(seed))
    ours = shuffled_positions(ids, mask, torch.Generator().manual_seed(seed), whole_batch=True)
    assert ours.shape == (batch, length)
    assert torch.equal(ours, expected.expand(batch, length))


def test_the_whole_batch_shuffle_moves_cls_and_pads_and_the_per_sentence_one_does_not():
    """The two readings of MoCoSE's "position shuffle" on one padded batch, over many draws: the release's moves
    [CLS] off position 0 and gives pads real tokens' positions; the per-sentence shuffle never does either."""
    mask, lengths = random_mask(6, 12, seed=3)
    ids = torch.ones(6, 12, dtype=torch.long)
    generator = torch.Generator().manual_seed(1)
    whole = torch.stack([shuffled_positions(ids, mask, generator, whole_batch=True) for _ in range(50)])
    per_sentence = torch.stack([shuffled_positions(ids, mask, generator) for _ in range(50)])
    assert (whole[:, :, 0] != 0).any()  # [CLS] moved
    assert (per_sentence[:, :, 0] == 0).all()
    short = int(np.argmin(lengths))  # a padded row: its pads take positions below its length in some draw
    assert lengths[short] < 12
    assert (whole[:, short, lengths[short]:] < lengths[short]).any()
    assert (per_sentence[:, short, lengths[short]:] == torch.arange(lengths[short], 12)).all()
    assert all(torch.equal(draw, draw[:1].expand_as(draw)) for draw in whole)  # one permutation per batch
    assert any(not torch.equal(draw[0], draw[1]) for draw in per_sentence)  # one per sentence


@pytest.mark.parametrize("batch,length,dim", [(2, 4, 3), (16, 32, 8)])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_token_cutoff_zeroes_whole_real_tokens_but_never_cls_or_pads(batch, length, dim, rate):
    mask, lengths = random_mask(batch, length, seed=7)
    embeddings = torch.rand(batch, length, dim) + 1.0  # no zero values of its own
    out = token_cutoff(embeddings, mask, rate, generator=torch.Generator().manual_seed(0))
    assert out.shape == embeddings.shape
    dropped = (out == 0).all(dim=-1)
    assert torch.equal((out == 0).any(dim=-1), dropped)  # whole rows or nothing
    assert torch.equal(out[~dropped], embeddings[~dropped])
    assert not dropped[:, 0].any()
    assert not (dropped & (mask == 0)).any()


def test_token_cutoff_rate_and_gradient():
    embeddings = torch.ones(64, 64, 4, requires_grad=True)
    out = token_cutoff(embeddings, torch.ones(64, 64), 0.3, generator=torch.Generator().manual_seed(1))
    fraction = (out[:, 1:] == 0).all(dim=-1).float().mean().item()
    assert fraction == pytest.approx(0.3, abs=0.03)
    out.sum().backward()
    assert embeddings.grad is not None
    same = torch.randn(2, 3, 4)
    assert token_cutoff(same, torch.ones(2, 3), 0.0) is same


@pytest.mark.parametrize("batch,length,dim", [(2, 4, 3), (16, 32, 64)])
@pytest.mark.parametrize("rate", [0.01, 0.1, 0.5])
def test_feature_cutoff_drops_the_same_columns_for_every_token(batch, length, dim, rate):
    embeddings = torch.rand(batch, length, dim) + 1.0
    out = feature_cutoff(embeddings, rate, generator=torch.Generator().manual_seed(2))
    assert out.shape == embeddings.shape
    dropped = out == 0
    assert torch.equal(dropped, dropped[:, :1].expand_as(dropped))
    assert torch.equal(out[~dropped], embeddings[~dropped])


def test_feature_cutoff_rate():
    out = feature_cutoff(torch.ones(128, 2, 256), 0.1, generator=torch.Generator().manual_seed(3))
    assert (out[:, 0] == 0).float().mean().item() == pytest.approx(0.1, abs=0.01)
    same = torch.randn(2, 3, 4)
    assert feature_cutoff(same, 0.0) is same
