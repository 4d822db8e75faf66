"""EMA target branch for MoCoSE (eq. 2; methods.md section 2).

    theta_target <- eta * theta_target + (1 - eta) * theta_online      after every optimiser step

eta = 0 copies the online weights (the symmetric, collapsing case of Appendix A.2); eta -> 1 freezes
the target.

>>> online = torch.nn.Linear(2, 2)
>>> target = make_target(online)
>>> with torch.no_grad():
...     _ = online.weight.add_(1.0)
>>> ema_update(target, online, decay=0.0)
>>> torch.equal(target.weight, online.weight)
True
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from analysis.mtd import cosine_eta

SCHEDULES = ("constant", "cosine")


def ema_decay_at(step: int, schedule: str, decay: float, decay_end: float, total_steps: int) -> float:
    """eta at `step`: `decay` when constant; cosine from eta0 = `decay` at step 0 to eta1 = `decay_end` at T.

        eta(t) = eta1 - (eta1 - eta0) * (cos(pi * t / T) + 1) / 2,   t clamped to [0, T]

    The paper's text ramps 0.75 -> 0.95 over the run. The released MoCoSE code is the special case
    eta1 = 1.0 and T = 15000 steps.

    >>> [round(ema_decay_at(t, "cosine", 0.75, 0.95, 100), 3) for t in (0, 50, 100, 200)]
    [0.75, 0.85, 0.95, 0.95]
    >>> ema_decay_at(7, "constant", 0.85, 0.95, 100)
    0.85
    """
    if schedule == "constant":
        return decay
    if schedule == "cosine":
        return cosine_eta(step, decay, decay_end, total_steps)
    raise ValueError(f"EMA schedule must be one of {SCHEDULES}, got {schedule!r}")


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, decay: float) -> None:
    """theta_t <- decay * theta_t + (1 - decay) * theta_o for every parameter; buffers are copied.

    `target` and `online` must have the same architecture (parameters in the same order).
    """
    target_params = list(target.parameters())
    online_params = list(online.parameters())
    if len(target_params) != len(online_params):
        raise ValueError(f"target has {len(target_params)} parameters, online {len(online_params)}")
    if target_params:
        if decay == 0.0:
            torch._foreach_copy_(target_params, online_params)  # exact copy, no rounding
        else:
            # one fused kernel over all tensors: lerp(t, o, w) = t + w * (o - t) with w = 1 - decay
            torch._foreach_lerp_(target_params, online_params, 1.0 - decay)
    for target_buffer, online_buffer in zip(target.buffers(), online.buffers()):
        target_buffer.copy_(online_buffer)


def make_target(online: nn.Module) -> nn.Module:
    """A deep copy of `online` with gradients off: the EMA target branch.

    Call it before attaching hooks to `online` (e.g. `FGSM.attach`): a deep copy copies module hooks.
    """
    target = copy.deepcopy(online)
    target.requires_grad_(False)
    return target
