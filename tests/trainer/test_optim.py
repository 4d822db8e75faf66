"""transformers 4.x AdamW (`released.optimizer`) against a hand-written NumPy reference of its update."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trainer.optim import TransformersAdamW, build_optimizer

SHAPES = [(3,), (4, 5)]
BETAS = (0.9, 0.999)


def numpy_transformers_adamw(params, grads_per_step, lrs, betas, eps, weight_decay):
    """transformers 4.x AdamW (correct_bias=True), written out: per step t from 1,
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    p -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps);  then  p -= lr wd p."""
    b1, b2 = betas
    params = [p.copy() for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            params[i] = params[i] - lr * math.sqrt(1 - b2**t) / (1 - b1**t) * m[i] / (np.sqrt(v[i]) + eps)
            params[i] = params[i] - lr * weight_decay * params[i]
    return params


def run_torch(optimizer_cls, params, grads_per_step, lrs, eps, weight_decay):
    tensors = [torch.tensor(p, requires_grad=True) for p in params]
    optimizer = optimizer_cls(tensors, lr=lrs[0], betas=BETAS, eps=eps, weight_decay=weight_decay)
    for grads, lr in zip(grads_per_step, lrs):
        for group in optimizer.param_groups:
            group["lr"] = lr  # as a scheduler sets it
        for tensor, g in zip(tensors, grads):
            tensor.grad = torch.tensor(g)
        optimizer.step()
    return [t.detach().numpy() for t in tensors]


def problem(seed, steps=6, grad_scale=1.0):
    """float64 parameters of SHAPES, a gradient per step, a decaying learning rate."""
    rng = np.random.default_rng(seed)
    params = [rng.normal(size=shape) for shape in SHAPES]
    grads = [[grad_scale * rng.normal(size=shape) for shape in SHAPES] for _ in range(steps)]
    lrs = [1e-2 * (1 - t / steps) + 1e-3 for t in range(steps)]
    return params, grads, lrs


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("eps", [1e-8, 1e-3])
def test_transformers_adamw_matches_numpy_over_several_steps(weight_decay, eps):
    params, grads, lrs = problem(seed=7)
    expected = numpy_transformers_adamw(params, grads, lrs, BETAS, eps, weight_decay)
    got = run_torch(TransformersAdamW, params, grads, lrs, eps, weight_decay)
    for g, e, start in zip(got, expected, params):
        assert g.shape == start.shape
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14)
        assert not np.allclose(g, start)  # the parameters did move


def test_first_step_by_hand():
    # t = 1, lr 0.5, eps 0.01, wd 0.2, g = 2, p = 3: m = 0.1 g = 0.2, v = 0.001 g^2 = 0.004, sqrt(v) = 0.0632456;
    # step = 0.5 * sqrt(0.001) / 0.1 * 0.2 / (0.0632456 + 0.01) = 0.0316228 / 0.0732456 = 0.4317365;
    # p = (3 - 0.4317365) * (1 - 0.5 * 0.2) = 2.3114372. torch's AdamW: 3 * 0.9 - 0.5 * 2 / (2 + 0.01) = 2.2024876
    param = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    param.grad = torch.tensor([2.0], dtype=torch.float64)
    TransformersAdamW([param], lr=0.5, betas=BETAS, eps=0.01, weight_decay=0.2).step()
    assert param.item() == pytest.approx(2.3114372, abs=1e-7)
    other = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    other.grad = torch.tensor([2.0], dtype=torch.float64)
    torch.optim.AdamW([other], lr=0.5, betas=BETAS, eps=0.01, weight_decay=0.2).step()
    assert other.item() == pytest.approx(2.2024876, abs=1e-7)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_torch_adamw_differs_from_it(weight_decay):
    """torch's AdamW puts eps beside the bias-corrected sqrt(v) and decays before the update: with gradients
    near eps the two land measurably apart, so the comparison above can fail."""
    params, grads, lrs = problem(seed=3, grad_scale=1e-8)
    expected = numpy_transformers_adamw(params, grads, lrs, BETAS, 1e-8, weight_decay)
    torch_adamw = run_torch(torch.optim.AdamW, params, grads, lrs, 1e-8, weight_decay)
    ours = run_torch(TransformersAdamW, params, grads, lrs, 1e-8, weight_decay)
    for t, o, e in zip(torch_adamw, ours, expected):
        np.testing.assert_allclose(o, e, rtol=1e-12, atol=1e-14)
        assert np.abs(t - e).max() > 1e-3


def test_parameters_without_gradient_and_the_state_are_per_parameter():
    a = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    optimizer = TransformersAdamW([a, b], lr=0.1)
    a.grad = torch.ones(2, dtype=torch.float64)
    optimizer.step()  # b has no gradient: untouched, no state
    assert torch.equal(b, torch.zeros(2, dtype=torch.float64)) and b not in optimizer.state
    b.grad = torch.ones(2, dtype=torch.float64)
    optimizer.step()
    assert optimizer.state[a]["step"] == 2 and optimizer.state[b]["step"] == 1
    # a constant gradient 1: every step moves by lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps) with
    # m = 1 - b1^t, v = 1 - b2^t: lr / (1 + eps / sqrt(1 - b2^t)), eps 1e-6
    def move(t):
        return 0.1 / (1 + 1e-6 / math.sqrt(1 - 0.999**t))

    np.testing.assert_allclose(a.detach().numpy(), -(move(1) + move(2)), rtol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), -move(1), rtol=1e-12)


def test_build_optimizer_picks_the_class_and_keeps_the_groups():
    from trainer.config import RunConfig

    optim = RunConfig(method="simcse").resolved().optim
    w, bias = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    groups = [{"params": [w], "weight_decay": 1e-6}, {"params": [bias], "weight_decay": 0.0}]
    released = build_optimizer(groups, optim, released=True)
    assert type(released) is TransformersAdamW
    assert [g["weight_decay"] for g in released.param_groups] == [1e-6, 0.0]
    assert released.defaults["eps"] == optim.eps == 1e-8 and released.defaults["correct_bias"] is True
    paper = build_optimizer(groups, optim, released=False)
    assert optim.algorithm == "adamw" and type(paper) is torch.optim.AdamW
    assert not paper.defaults["fused"]  # fused only on CUDA: CPU runs keep the default implementation's numbers
    mocose = RunConfig(method="mocose").resolved().optim  # Algorithm 1: "Optimizer: Adam optimizer"
    adam = build_optimizer(groups, mocose, released=False)
    assert mocose.algorithm == "adam" and type(adam) is torch.optim.Adam
    assert [g["weight_decay"] for g in adam.param_groups] == [1e-6, 0.0]


def numpy_adam_l2(theta, grads, lr, betas, eps, weight_decay):
    """Adam (Kingma and Ba, Algorithm 1) on the gradient plus weight_decay * theta (L2 regularisation), written
    from the definition: m, v the bias-corrected moments, theta -= lr * m_hat / (sqrt(v_hat) + eps)."""
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * theta
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        theta = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
    return theta


@pytest.mark.parametrize("weight_decay", [0.0, 1e-6, 0.1])
def test_the_paper_readings_adam_is_adam_with_l2_weight_decay(weight_decay):
    """MoCoSE's paper reading (optim.algorithm adam, Algorithm 1 and section 4.1's weight decay) against Adam
    with L2 regularisation written out; with weight decay 0 it is also AdamW's update."""
    from trainer.config import RunConfig

    rng = np.random.default_rng(0)
    start = rng.normal(size=5)
    grads = [rng.normal(size=5) for _ in range(4)]
    optim = RunConfig(method="mocose", optim={"lr": 1e-2}).resolved().optim
    for algorithm in ("adam", "adamw"):
        theta = torch.nn.Parameter(torch.tensor(start, dtype=torch.float64))
        optimizer = build_optimizer([{"params": [theta], "weight_decay": weight_decay}],
                                    optim.model_copy(update={"algorithm": algorithm}), released=False)
        for g in grads:
            theta.grad = torch.tensor(g, dtype=torch.float64)
            optimizer.step()
        expected = numpy_adam_l2(start, grads, 1e-2, (0.9, 0.999), 1e-8, weight_decay)
        same = algorithm == "adam" or weight_decay == 0.0
        assert np.allclose(theta.detach().numpy(), expected, rtol=1e-10, atol=1e-13) is same
