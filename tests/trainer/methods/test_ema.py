"""EMA update against NumPy, and the decay schedule's end points."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from trainer.methods.ema import ema_update
from trainer.schedules import ema_decay_at


def small_model(seed, dim=6):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.LayerNorm(dim), nn.Linear(dim, 3))


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.85, 0.99])
@pytest.mark.parametrize("dim", [2, 6, 33])
def test_ema_update_matches_numpy(decay, dim):
    online, target = small_model(0, dim), small_model(1, dim)
    online(torch.randn(8, dim))  # training-mode forward: BatchNorm running stats (buffers) change
    before = [p.detach().numpy().copy() for p in target.parameters()]
    online_values = [p.detach().numpy().copy() for p in online.parameters()]
    ema_update(target, online, decay)
    for new, old, source in zip(target.parameters(), before, online_values):
        np.testing.assert_allclose(new.detach().numpy(), decay * old + (1 - decay) * source, rtol=1e-6, atol=1e-7)
    for target_buffer, online_buffer in zip(target.buffers(), online.buffers()):
        assert torch.equal(target_buffer, online_buffer)


def test_decay_zero_makes_target_equal_online():
    online, target = small_model(0), small_model(1)
    ema_update(target, online, 0.0)
    for a, b in zip(target.state_dict().values(), online.state_dict().values()):
        assert torch.equal(a, b)


def test_repeated_updates_converge_geometrically():
    online, target = nn.Linear(3, 3), nn.Linear(3, 3)
    start = target.weight.detach().clone()
    for _ in range(5):
        ema_update(target, online, 0.5)
    expected = 0.5**5 * start + (1 - 0.5**5) * online.weight.detach()
    torch.testing.assert_close(target.weight.detach(), expected)


def np_cosine_eta(t, eta0, eta1, total):
    t = min(max(t, 0), total)
    return eta1 - (eta1 - eta0) * (np.cos(np.pi * t / total) + 1) / 2


@pytest.mark.parametrize("eta0,eta1,total", [(0.75, 0.95, 100), (0.5, 0.99, 15000), (0.85, 1.0, 15000), (0.9, 0.9, 7)])
def test_cosine_schedule_end_points_and_midpoint(eta0, eta1, total):
    def at(step):
        return ema_decay_at(step, "cosine", eta0, eta1, total)

    assert at(0) == pytest.approx(eta0)
    assert at(total) == pytest.approx(eta1)
    assert at(total / 2) == pytest.approx((eta0 + eta1) / 2)
    assert at(-5) == pytest.approx(eta0) and at(total * 3) == pytest.approx(eta1)  # clamped
    for step in np.linspace(0, total, 9).astype(int):
        assert at(int(step)) == pytest.approx(np_cosine_eta(int(step), eta0, eta1, total), abs=1e-12)
    values = [at(s) for s in range(0, total + 1, max(total // 50, 1))]
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:]))  # monotone ramp


def test_released_code_schedule_is_the_eta1_one_special_case():
    # released MoCoSE: eta_t = 1 - (1 - eta0) * (cos(pi t / T) + 1) / 2, T = 15000
    for step in (0, 3000, 7500, 15000):
        expected = 1 - (1 - 0.75) * (math.cos(math.pi * step / 15000) + 1) / 2
        assert ema_decay_at(step, "cosine", 0.75, 1.0, 15000) == pytest.approx(expected)


def test_constant_schedule_and_unknown_schedule():
    assert ema_decay_at(0, "constant", 0.85, 0.95, 10) == 0.85
    assert ema_decay_at(10**6, "constant", 0.85, 0.95, 10) == 0.85
    with pytest.raises(ValueError):
        ema_decay_at(0, "linear", 0.85, 0.95, 10)
