"""The objectives against independent NumPy computations (float64), over several sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.losses import (
    cosine_logits,
    gaussian_logits,
    gs_infonce_loss,
    info_nce,
    mix_logits,
    mixcse_loss,
    mixcse_symmetric_loss,
    mixed_negative_logits,
    mixed_negatives,
    mocose_loss,
    paired_nce,
    queue_logits,
    sample_gaussian_negatives,
    simcse_loss,
)

TAU = 0.05


pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIZES = [(1, 3), (2, 4), (5, 8), (16, 32)]  # (N, d)


# ---- NumPy references -------------------------------------------------------------------------
def np_unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def np_cos(a, b):
    return np_unit(a) @ np_unit(b).T


def np_cross_entropy(logits):
    """mean_i -log softmax(logits_i)[i], stable."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_z - shifted[np.arange(len(logits)), np.arange(len(logits))]))


def np_mix(z, lam, raw=False):
    """MixCSE's mix of row i with row i+1: of the l2-normalised rows (the paper), or of the rows as they are
    (`raw`, the released code), normalised after."""
    u = z if raw else np_unit(z)
    return np_unit(lam * u + (1 - lam) * np.roll(u, -1, axis=0))


def np_mix_blocks(z1, z2, lam, tau, directions, layout, mix_source1=None, mix_source2=None):
    """MixCSE's extra blocks in the released code's N x N layouts, entry by entry, its raw mixes. The mix
    sources default to z1, z2."""
    n = len(z1)
    m2 = np_mix(z2 if mix_source2 is None else mix_source2, lam, raw=True)
    m1 = np_mix(z1 if mix_source1 is None else mix_source1, lam, raw=True)
    block_b = np.zeros((n, n))
    block_c = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            # B: anchor vs mixed positives; the mix holding (1-lam) of z2_i is at k = i-1
            block_b[i, k] = 0.0 if (k + 1) % n == i else np_cos(z1[i:i + 1], m2[k:k + 1])[0, 0] / tau
            if layout == "released":
                # C[i, j] = cos(m1_i, z2_j); m1_i holds (1-lam) of z1_{i+1}, the anchor of z2_{i+1}
                block_c[i, k] = 0.0 if k == (i + 1) % n else np_cos(m1[i:i + 1], z2[k:k + 1])[0, 0] / tau
            else:
                block_c[i, k] = 0.0 if (k + 1) % n == i else np_cos(z2[i:i + 1], m1[k:k + 1])[0, 0] / tau
    return [block_b] if directions == "single" else [block_b, block_c]


def np_mix_loss(z1, z2, lam, tau, directions, layout, mix_source1=None, mix_source2=None):
    blocks = np_mix_blocks(z1, z2, lam, tau, directions, layout, mix_source1, mix_source2)
    return np_cross_entropy(np.concatenate([np_cos(z1, z2) / tau, *blocks], axis=1))


def random_pair(n, d, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(n, d))


def t(x, requires_grad=False):
    return torch.tensor(x, dtype=torch.float64, requires_grad=requires_grad)


# ---- core -------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,m,d", [(1, 1, 3), (4, 7, 5), (16, 9, 32), (3, 0, 4)])
def test_cosine_logits_match_numpy(n, m, d):
    rng = np.random.default_rng(n * 100 + m)
    a, b = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    out = cosine_logits(t(a), t(b), TAU)
    assert out.shape == (n, m)
    np.testing.assert_allclose(out.numpy(), np_cos(a, b) / TAU if m else np.zeros((n, 0)), rtol=1e-10, atol=1e-10)


def test_cosine_logits_zero_vector_is_finite():
    out = cosine_logits(torch.zeros(2, 3), torch.ones(2, 3), TAU)
    assert torch.isfinite(out).all() and (out == 0).all()


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("tau", [0.05, 1.0])
def test_simcse_loss_matches_numpy(n, d, tau):
    z1, z2 = random_pair(n, d, seed=n)
    loss = simcse_loss(t(z1), t(z2), tau)
    assert loss.item() == pytest.approx(np_cross_entropy(np_cos(z1, z2) / tau), rel=1e-9)


def test_info_nce_is_one_direction():
    z1, z2 = random_pair(6, 4, seed=1)
    forward = info_nce(t(z1), t(z2), TAU).item()
    assert forward == pytest.approx(np_cross_entropy(np_cos(z1, z2) / TAU), rel=1e-9)
    assert forward != pytest.approx(np_cross_entropy(np_cos(z2, z1) / TAU), rel=1e-6)


def test_info_nce_half_precision_inputs_give_float32_loss():
    z = torch.randn(4, 8, dtype=torch.bfloat16)
    assert info_nce(z, z, TAU).dtype == torch.float32


# ---- GS-InfoNCE -------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d", SIZES)
def test_gs_with_no_noise_equals_simcse_exactly(n, d):
    z1, z2 = torch.randn(n, d), torch.randn(n, d)
    empty = torch.empty(0, d)
    assert gaussian_logits(z1, empty, TAU).shape == (n, 0)
    for weight in (1.0, 0.3):
        assert torch.equal(gs_infonce_loss(z1, z2, empty, TAU, weight), simcse_loss(z1, z2, TAU))


@pytest.mark.parametrize("n,d,m", [(1, 3, 1), (4, 8, 12), (16, 32, 48)])
@pytest.mark.parametrize("weight", [0.25, 1.0, 4.0])
def test_gs_loss_matches_numpy_weighted_denominator(n, d, m, weight):
    z1, z2 = random_pair(n, d, seed=m)
    noise = np.random.default_rng(7).normal(size=(m, d))
    pos = np.exp(np_cos(z1, z2) / TAU)
    denominator = pos.sum(axis=1) + weight * np.exp(np_cos(z1, noise) / TAU).sum(axis=1)
    expected = float(np.mean(-np.log(np.diag(pos) / denominator)))
    loss = gs_infonce_loss(t(z1), t(z2), t(noise), TAU, weight)
    assert loss.item() == pytest.approx(expected, rel=1e-9)


def test_gs_weight_must_be_positive():
    with pytest.raises(ValueError):
        gaussian_logits(torch.ones(2, 3), torch.ones(2, 3), TAU, weight=0.0)


def test_gaussian_negatives_distribution_and_reproducibility():
    def draw():
        return sample_gaussian_negatives(4000, 16, mu=0.5, sigma=2.0, generator=torch.Generator().manual_seed(3))

    noise = draw()
    assert noise.shape == (4000, 16)
    assert noise.mean().item() == pytest.approx(0.5, abs=0.05)
    assert noise.std().item() == pytest.approx(2.0, abs=0.05)
    assert torch.equal(noise, draw())
    assert sample_gaussian_negatives(0, 16).shape == (0, 16)
    assert sample_gaussian_negatives(3, 4, dtype=torch.float64).dtype == torch.float64


# ---- MixCSE -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("raw", [False, True])
def test_mixed_negatives_match_numpy(n, d, raw):
    z, _ = random_pair(n, d, seed=n + 5)
    np.testing.assert_allclose(mixed_negatives(t(z), 0.2, raw_features=raw).numpy(), np_mix(z, 0.2, raw),
                               rtol=1e-10, atol=1e-12)


def test_the_paper_mixes_normalised_features_whatever_their_norms():
    """The paper's h~'_{i,j} = (lam h'_i + (1 - lam) h'_j) / ||.|| of l2-normalised features, written out for an
    anchor aligned with its positive (norm 1) and another positive orthogonal to it (norm 2): the anchor-mix
    cosine is lam / sqrt(lam^2 + (1 - lam)^2) = 0.2425 at lam 0.2 (the paper's eq. 2). Mixing the raw rows (the
    release) gives 0.2 / sqrt(0.2^2 + 1.6^2) = 0.1240 instead: the longer row takes more of the mix."""
    lam = 0.2
    anchor = np.array([[1.0, 0.0, 0.0]])
    positives = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])  # h'_i, then h'_j = h'_{i+1}
    h_prime = positives / np.linalg.norm(positives, axis=1, keepdims=True)
    mix = lam * h_prime[0] + (1 - lam) * h_prime[1]
    paper = float(anchor[0] @ (mix / np.linalg.norm(mix)))
    assert paper == pytest.approx(lam / np.sqrt(lam**2 + (1 - lam) ** 2)) and round(paper, 4) == 0.2425
    code = mixed_negative_logits(t(np.vstack([anchor, anchor])), t(positives), lam, temperature=1.0)
    assert code[0, 0].item() == pytest.approx(paper, rel=1e-12)
    raw = mixed_negative_logits(t(np.vstack([anchor, anchor])), t(positives), lam, 1.0, raw_features=True)
    assert round(raw[0, 0].item(), 4) == 0.1240
    # random rows of unequal norms: the code's mix equals the formula on the normalised rows, not on the raw ones
    z = np.random.default_rng(3).normal(size=(6, 5)) * np.array([[0.5], [1.0], [2.0], [3.0], [0.3], [1.7]])
    got = mixed_negatives(t(z), lam).numpy()
    for i in range(6):
        a, b = z[i] / np.linalg.norm(z[i]), z[(i + 1) % 6] / np.linalg.norm(z[(i + 1) % 6])
        expected = (lam * a + (1 - lam) * b) / np.linalg.norm(lam * a + (1 - lam) * b)
        np.testing.assert_allclose(got[i], expected, rtol=1e-12)
    assert not np.allclose(got, np_mix(z, lam, raw=True))


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("directions", ["both", "single"])
@pytest.mark.parametrize("layout", ["released", "transposed"])
def test_mix_logit_layout_matches_numpy(n, d, directions, layout):
    z1, z2 = random_pair(n, d, seed=n + 11)
    blocks = mix_logits(t(z1), t(z2), 0.2, TAU, directions, layout=layout, raw_features=True)
    expected = np_mix_blocks(z1, z2, 0.2, TAU, directions, layout)
    assert len(blocks) == len(expected) == (2 if directions == "both" else 1)
    for block, reference in zip(blocks, expected):
        assert block.shape == (n, n)
        np.testing.assert_allclose(block.numpy(), reference, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n", [3, 6])
def test_mix_masked_entries_are_zero_and_the_rest_are_not(n):
    z1, z2 = torch.randn(n, 8), torch.randn(n, 8) + 3.0  # shifted: no cosine is exactly 0
    rows = torch.arange(n)
    block_b, block_c = mix_logits(z1, z2)
    assert (block_b[rows, (rows - 1) % n] == 0).all()
    assert (block_c[rows, (rows + 1) % n] == 0).all()  # released layout
    assert (block_b != 0).sum() == (block_c != 0).sum() == n * n - n
    _, transposed_c = mix_logits(z1, z2, layout="transposed")
    assert (transposed_c[rows, (rows - 1) % n] == 0).all()
    # the paper's own hard negatives (the diagonals) agree in both layouts
    torch.testing.assert_close(torch.diagonal(block_c), torch.diagonal(transposed_c))


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("directions", ["both", "single"])
@pytest.mark.parametrize("layout", ["released", "transposed"])
def test_mixcse_loss_matches_numpy(n, d, directions, layout):
    z1, z2 = random_pair(n, d, seed=n + 23)
    loss = mixcse_loss(t(z1), t(z2), 0.2, TAU, directions, layout=layout, raw_features=True)
    assert loss.item() == pytest.approx(np_mix_loss(z1, z2, 0.2, TAU, directions, layout), rel=1e-9)
    assert loss.shape == ()


def np_numeric_grad(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        plus, minus = x.copy(), x.copy()
        plus[index] += h
        minus[index] -= h
        grad[index] = (f(plus) - f(minus)) / (2 * h)
    return grad


@pytest.mark.parametrize("n,d", [(2, 3), (4, 3), (5, 4)])
@pytest.mark.parametrize("directions", ["both", "single"])
@pytest.mark.parametrize("layout", ["released", "transposed"])
def test_mix_stop_gradient(n, d, directions, layout):
    """With stop-gradient, z1/z2 get gradient only as anchors/positives: the mixes act as constants."""
    z1, z2 = random_pair(n, d, seed=n * d)
    tau = 0.5  # a mild temperature keeps the finite differences accurate
    a, b = t(z1, True), t(z2, True)
    mixcse_loss(a, b, 0.2, tau, directions, stop_grad=True, layout=layout, raw_features=True).backward()
    frozen2 = np_numeric_grad(lambda x: np_mix_loss(z1, x, 0.2, tau, directions, layout, z1, z2), z2)
    frozen1 = np_numeric_grad(lambda x: np_mix_loss(x, z2, 0.2, tau, directions, layout, z1, z2), z1)
    np.testing.assert_allclose(b.grad.numpy(), frozen2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(a.grad.numpy(), frozen1, rtol=1e-5, atol=1e-7)

    # without stop-gradient the mixes carry gradient too
    a, b = t(z1, True), t(z2, True)
    mixcse_loss(a, b, 0.2, tau, directions, stop_grad=False, layout=layout, raw_features=True).backward()
    free2 = np_numeric_grad(lambda x: np_mix_loss(z1, x, 0.2, tau, directions, layout), z2)
    np.testing.assert_allclose(b.grad.numpy(), free2, rtol=1e-5, atol=1e-7)
    assert not np.allclose(free2, frozen2, rtol=1e-3, atol=1e-6)


def test_mix_rejects_unknown_options():
    z = torch.randn(3, 4)
    with pytest.raises(ValueError):
        mix_logits(z, z, directions="three")
    with pytest.raises(ValueError):
        mix_logits(z, z, layout="other")
    with pytest.raises(ValueError):
        mixcse_symmetric_loss(z, z, directions="three")
    with pytest.raises(ValueError):
        mixcse_symmetric_loss(z, z, anchor_losses="max")


# ---- MoCoSE -----------------------------------------------------------------------------------
def np_mocose_eq3(q, key, queue, tau):
    """MoCoSE eq. 3 (Algorithm 1 line 6) row by row, in cosines: -log exp(s(q_i, k_i)) / (exp(s(q_i, k_i)) +
    sum over the queue of exp(s(q_i, l))), s = cos / tau; the other in-batch keys are not in it."""
    total = 0.0
    for i in range(len(q)):
        positive = np_cos(q[i:i + 1], key[i:i + 1])[0, 0] / tau
        negatives = np_cos(q[i:i + 1], queue)[0] / tau if len(queue) else np.zeros(0)
        terms = np.concatenate([[positive], negatives])
        total += -(positive - (terms.max() + np.log(np.exp(terms - terms.max()).sum())))
    return total / len(q)


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("k", [0, 1, 7, 64])
def test_mocose_loss_matches_numpy(n, d, k):
    q, key = random_pair(n, d, seed=n + k)
    queue = np.random.default_rng(k).normal(size=(k, d))
    loss = mocose_loss(t(q), t(key), t(queue), TAU)  # the paper's eq. 3
    assert loss.item() == pytest.approx(np_mocose_eq3(q, key, queue, TAU), rel=1e-9, abs=1e-12)
    # the released code's: the other in-batch keys are negatives too
    logits = np.concatenate([np_cos(q, key), np_cos(q, queue) if k else np.zeros((n, 0))], axis=1) / TAU
    released = mocose_loss(t(q), t(key), t(queue), TAU, in_batch_negatives=True)
    assert released.item() == pytest.approx(np_cross_entropy(logits), rel=1e-9)
    assert queue_logits(t(q), t(queue), TAU).shape == (n, k)


def test_mocose_empty_queue_gives_exactly_zero_and_no_gradient():
    """Eq. 3 with an empty queue (Table 7's "w.o. init.", K0 = 0, first step): the positive alone in its own
    denominator, -log 1 = 0, whatever q and k are; the release's in-batch form gives about log N."""
    q = torch.randn(8, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(8, 16, dtype=torch.float64)
    loss = mocose_loss(q, k, torch.empty(0, 16, dtype=torch.float64))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.count_nonzero(q.grad) == 0
    released = mocose_loss(q, k, torch.empty(0, 16, dtype=torch.float64), in_batch_negatives=True)
    assert released.item() > 1.0


def test_mocose_extra_blocks_append_in_either_form():
    q, k = torch.randn(5, 8), torch.randn(5, 8)
    assert torch.equal(mocose_loss(q, k, torch.empty(0, 8), in_batch_negatives=True), simcse_loss(q, k))
    noise = torch.randn(9, 8)
    with_noise = mocose_loss(q, k, torch.empty(0, 8), in_batch_negatives=True,
                             extra_logits=[cosine_logits(q, noise, TAU)])
    assert torch.equal(with_noise, gs_infonce_loss(q, k, noise))
    paired = mocose_loss(q, k, torch.empty(0, 8), extra_logits=[cosine_logits(q, noise, TAU)])
    assert torch.equal(paired, paired_nce(q, k, TAU, [cosine_logits(q, noise, TAU)]))
    assert paired.item() == pytest.approx(np_mocose_eq3(q.double().numpy(), k.double().numpy(),
                                                        noise.double().numpy(), TAU), rel=1e-5)


def test_mocose_accepts_float32_queue_with_bfloat16_queries():
    q = torch.randn(4, 8, dtype=torch.bfloat16)
    assert torch.isfinite(mocose_loss(q, q, torch.randn(6, 8)))


# ---- optimisation sanity ----------------------------------------------------------------------
OBJECTIVES = {
    "simcse": lambda z1, z2, g: simcse_loss(z1, z2),
    "gs": lambda z1, z2, g: gs_infonce_loss(z1, z2, sample_gaussian_negatives(24, z1.shape[1], generator=g)),
    "mix": lambda z1, z2, g: mixcse_loss(z1, z2),
    "mix-single": lambda z1, z2, g: mixcse_loss(z1, z2, directions="single"),
    "mocose": lambda z1, z2, g: mocose_loss(z1, z2.detach(), torch.randn(32, z1.shape[1], generator=g)),
}


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_loss_decreases_with_adam(name):
    generator = torch.Generator().manual_seed(0)
    z1 = torch.nn.Parameter(torch.randn(8, 16, generator=generator))
    z2 = torch.nn.Parameter(torch.randn(8, 16, generator=generator))
    optimizer = torch.optim.Adam([z1, z2], lr=0.05)
    losses = []
    for _ in range(30):
        loss = OBJECTIVES[name](z1, z2, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


# ---- MixCSE: the paper's layout (one mixed negative per anchor and direction), hard_negative_weight ----
def np_mix_infonce(anchors, positives, mixes, tau, weight=0.0):
    """One direction of the paper's L_mix, row by row: -log exp(s(a_i, p_i)) / (sum_j exp(s(a_i, p_j)) +
    exp(s(a_i, mix_i) + weight)), s = cos / tau."""
    total = 0.0
    for i in range(len(anchors)):
        terms = [np_cos(anchors[i:i + 1], positives[j:j + 1])[0, 0] / tau for j in range(len(anchors))]
        terms.append(np_cos(anchors[i:i + 1], mixes[i:i + 1])[0, 0] / tau + weight)
        terms = np.array(terms)
        total += -(terms[i] - (terms.max() + np.log(np.exp(terms - terms.max()).sum())))
    return total / len(anchors)


def np_symmetric_mix_loss(z1, z2, lam, tau, weight=0.0):
    """The paper's two anchors: h_i against the h'_j with the mix of h'_i, h'_{i+1}; h'_i against the h_j with
    the mix of h_i, h_{i+1}; the mean of the two."""
    return (np_mix_infonce(z1, z2, np_mix(z2, lam), tau, weight)
            + np_mix_infonce(z2, z1, np_mix(z1, lam), tau, weight)) / 2


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("weight", [0.0, 0.7])
def test_mixcse_symmetric_loss_matches_numpy(n, d, weight):
    z1, z2 = random_pair(n, d, seed=n + 53)
    z2 = z2 * np.linspace(0.5, 2.0, n)[:, None]  # rows of unequal norms
    loss = mixcse_symmetric_loss(t(z1), t(z2), 0.2, TAU, hard_negative_weight=weight)
    assert loss.item() == pytest.approx(np_symmetric_mix_loss(z1, z2, 0.2, TAU, weight), rel=1e-9)


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("directions", ["both", "single"])
@pytest.mark.parametrize("anchor_losses", ["mean", "sum"])
def test_mixcse_single_keeps_the_second_anchors_loss_without_its_mix(n, d, directions, anchor_losses):
    """MixCSE_single ("we only construct a hard negative for h_i") under the two-anchor reading: h_i's InfoNCE
    with its mixed negative and h'_i's own InfoNCE against the h_j, with the mix of h_i, h_{i+1} (both) or with
    none (single); the two averaged (mean) or added (sum)."""
    z1, z2 = random_pair(n, d, seed=n + 61)
    z1 = z1 * np.linspace(2.0, 0.5, n)[:, None]  # rows of unequal norms
    first = np_mix_infonce(z1, z2, np_mix(z2, 0.2), TAU)
    second = (np_mix_infonce(z2, z1, np_mix(z1, 0.2), TAU) if directions == "both"
              else np_cross_entropy(np_cos(z2, z1) / TAU))  # h'_i against every h_j, no mixed negative
    expected = (first + second) / 2 if anchor_losses == "mean" else first + second
    loss = mixcse_symmetric_loss(t(z1), t(z2), 0.2, TAU, directions=directions, anchor_losses=anchor_losses)
    assert loss.item() == pytest.approx(expected, rel=1e-9)


def test_the_symmetric_and_one_loss_readings_differ():
    """h'_i as an anchor of its own (the paper's reading) is not its mix as one more column of h_i's row: the
    one-loss reading never puts h'_i's in-batch negatives in a denominator, so the gradient on z2 moves."""
    z1, z2 = random_pair(8, 16, seed=8)
    grads = []
    for loss_fn in (lambda a, b: mixcse_loss(a, b, 0.2, TAU, "both", layout="paper"),
                    lambda a, b: mixcse_symmetric_loss(a, b, 0.2, TAU)):
        a, b = t(z1, True), t(z2, True)
        loss_fn(a, b).backward()
        grads.append(b.grad.numpy())
    one_loss, symmetric = grads
    assert np.linalg.norm(symmetric - one_loss) > 0.1 * np.linalg.norm(one_loss)


@pytest.mark.parametrize("n,d", [(2, 3), (4, 3)])
def test_mixcse_symmetric_stop_gradient(n, d):
    """Stop-gradient: the mixes act as constants in both halves (finite differences with the mixes frozen)."""
    z1, z2 = random_pair(n, d, seed=n * d + 1)
    tau, lam = 0.5, 0.2
    a, b = t(z1, True), t(z2, True)
    mixcse_symmetric_loss(a, b, lam, tau).backward()
    m1, m2 = np_mix(z1, lam), np_mix(z2, lam)

    def frozen(x1, x2):
        return (np_mix_infonce(x1, x2, m2, tau) + np_mix_infonce(x2, x1, m1, tau)) / 2

    np.testing.assert_allclose(a.grad.numpy(), np_numeric_grad(lambda x: frozen(x, z2), z1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.grad.numpy(), np_numeric_grad(lambda x: frozen(z1, x), z2), rtol=1e-5, atol=1e-7)

def np_paper_mix_loss(z1, z2, lam, tau, directions, weight=0.0):
    """The paper's L_mix row by row: denominator += exp(cos(h_i, m'_i)/tau) (+ exp(cos(h'_i, m_i)/tau))."""
    n = len(z1)
    m2, m1 = np_mix(z2, lam), np_mix(z1, lam)  # of the normalised features
    total = 0.0
    for i in range(n):
        terms = [np_cos(z1[i:i + 1], z2[j:j + 1])[0, 0] / tau for j in range(n)]
        terms.append(np_cos(z1[i:i + 1], m2[i:i + 1])[0, 0] / tau + weight)
        if directions == "both":
            terms.append(np_cos(z2[i:i + 1], m1[i:i + 1])[0, 0] / tau + weight)
        terms = np.array(terms)
        total += -(terms[i] - (terms.max() + np.log(np.exp(terms - terms.max()).sum())))
    return total / n


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("directions", ["both", "single"])
@pytest.mark.parametrize("weight", [0.0, 0.7])
def test_mixcse_paper_layout_matches_numpy(n, d, directions, weight):
    z1, z2 = random_pair(n, d, seed=n + 41)
    blocks = mix_logits(t(z1), t(z2), 0.2, TAU, directions, layout="paper", hard_negative_weight=weight)
    assert [b.shape for b in blocks] == [(n, 1)] * (2 if directions == "both" else 1)
    loss = mixcse_loss(t(z1), t(z2), 0.2, TAU, directions, layout="paper", hard_negative_weight=weight)
    assert loss.item() == pytest.approx(np_paper_mix_loss(z1, z2, 0.2, TAU, directions, weight), rel=1e-9)


@pytest.mark.parametrize("n", [3, 5])
def test_hard_negative_weight_is_added_to_the_released_diagonals_only(n):
    z1, z2 = random_pair(n, 6, seed=n)
    plain = mix_logits(t(z1), t(z2), 0.2, TAU, "both", layout="released")
    weighted = mix_logits(t(z1), t(z2), 0.2, TAU, "both", layout="released", hard_negative_weight=0.5)
    for a, b in zip(plain, weighted):
        np.testing.assert_allclose((b - a).numpy(), 0.5 * np.eye(n), atol=1e-12)
