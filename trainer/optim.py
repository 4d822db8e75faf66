"""The optimiser of a run: torch's Adam or AdamW (`optim.algorithm`, the paper's reading) or the AdamW the
releases trained with (`released.optimizer`).

Adam and AdamW differ only in the weight decay: Adam adds wd * theta to the gradient before the moments (L2
regularisation, torch.optim.Adam's `weight_decay`); AdamW shrinks the weights apart from the moments. With weight
decay 0 the two are one update. MoCoSE's Algorithm 1 names "Adam optimizer" with section 4.1's weight decay 1e-6.

All four releases train through the `Trainer` of their pinned transformers 4.x, whose default optimiser
is transformers' own `AdamW` (correct_bias=True). Its step differs from `torch.optim.AdamW` in two places
(docs/science/paper-vs-released.md#optimiser-all-releases): eps is added to sqrt(v) before the bias correction is
folded into the step size, and the weight decay is applied after the Adam update, to the updated weights.
transformers 5 no longer ships that class, so `TransformersAdamW` writes it out.

    optimizer = build_optimizer(method.trainable_groups(wd), config.optim, released=config.released.optimizer)
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch
from torch import Tensor


class TransformersAdamW(torch.optim.Optimizer):
    """transformers 4.x `AdamW` (as its `Trainer` builds it). Per parameter theta with gradient g, at its
    t-th step (t from 1), with the group's lr, betas (b1, b2), eps and weight decay wd:

        m_t = b1 * m_{t-1} + (1 - b1) * g
        v_t = b2 * v_{t-1} + (1 - b2) * g^2
        theta <- theta - lr * sqrt(1 - b2^t) / (1 - b1^t) * m_t / (sqrt(v_t) + eps)
        theta <- theta - lr * wd * theta                      (on the updated theta)

    (`correct_bias=False` drops the factor sqrt(1 - b2^t) / (1 - b1^t).) torch's AdamW instead decays
    first, theta <- theta * (1 - lr * wd), and divides by sqrt(v_t / (1 - b2^t)) + eps: in its terms the
    eps here is eps * sqrt(1 - b2^t), about 0.03 eps at t = 1, and the decay here also shrinks the update
    by a factor (1 - lr * wd).
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
                 correct_bias: bool = True):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"need lr >= 0, eps >= 0 and betas in [0, 1), got lr={lr}, eps={eps}, betas={betas}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "correct_bias": correct_bias}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            # parameters at the same step share the bias correction: update them together (foreach kernels)
            by_step: dict[int, list[Tensor]] = defaultdict(list)
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("TransformersAdamW does not support sparse gradients")
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["step"] += 1
                by_step[state["step"]].append(param)
            for step, params in by_step.items():
                self._update(params, group, step)
        return loss

    def _update(self, params: list[Tensor], group: dict[str, Any], step: int) -> None:
        """One step of the docstring's update for parameters that are all at their `step`-th step."""
        beta1, beta2 = group["betas"]
        lr, weight_decay = group["lr"], group["weight_decay"]
        grads = [p.grad for p in params]
        exp_avgs = [self.state[p]["exp_avg"] for p in params]
        exp_avg_sqs = [self.state[p]["exp_avg_sq"] for p in params]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denominators, group["eps"])  # eps before the bias correction
        step_size = lr
        if group["correct_bias"]:
            step_size = lr * math.sqrt(1.0 - beta2**step) / (1.0 - beta1**step)
        torch._foreach_addcdiv_(params, exp_avgs, denominators, value=-step_size)
        if weight_decay > 0.0:  # decoupled decay, after the update
            torch._foreach_add_(params, params, alpha=-lr * weight_decay)


def build_optimizer(groups: list[dict[str, Any]], optim: Any, released: bool) -> torch.optim.Optimizer:
    """The run's optimiser over parameter `groups` (each with its weight decay): transformers 4.x AdamW when
    `released` (`released.optimizer`), else torch's Adam or AdamW as `optim.algorithm` says. `optim` is the
    resolved run config's `optim` section.

    On CUDA torch's Adam and AdamW are their fused kernels: the same update in a few launches per step, and the
    ones that take fp16's loss scaling on the device (GradScaler hands them the inf/NaN flag), where the default
    implementation makes GradScaler read that flag back to the host at every step. TransformersAdamW has no
    fused form: with fp16 on CUDA that read-back stays."""
    if released:
        return TransformersAdamW(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)
    params = [p for group in groups for p in group["params"]]
    on_cuda = bool(params) and all(p.is_cuda for p in params)
    kind = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[optim.algorithm]
    return kind(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps, fused=on_cuda or None)
