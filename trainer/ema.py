"""EMA target branch for MoCoSE (eq. 2; methods.md section 2) and its decay schedules.

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
import math

import torch
from torch import nn

SCHEDULES = ("constant", "cosine")
RELEASED_SCHEDULE_STEPS = 15000  # T in the released MoCoSE code (`EMA(total_step=15000)`)


def cosine_eta(step: int, eta0: float, eta1: float, period: int, hold: bool = True) -> float:
    """The cosine ramp from eta0 (step 0) to eta1 (step `period`):

        eta(t) = eta1 - (eta1 - eta0) * (cos(pi * t / T) + 1) / 2

    `hold=True` (the paper's reading) keeps eta1 after T. `hold=False` is the released MoCoSE code, which
    never clamps t: past T the cosine swings back, reaching eta0 again at 2T.

    >>> [round(cosine_eta(t, 0.75, 0.95, 100), 3) for t in (0, 50, 100, 200)]
    [0.75, 0.85, 0.95, 0.95]
    >>> [round(cosine_eta(t, 0.75, 1.0, 100, hold=False), 3) for t in (0, 50, 100, 200)]
    [0.75, 0.875, 1.0, 0.75]
    """
    t = max(step, 0)
    if hold:
        t = min(t, period)
    return eta1 - (eta1 - eta0) * (math.cos(math.pi * t / max(period, 1)) + 1.0) / 2.0


def ema_decay_at(step: int, schedule: str, decay: float, decay_end: float, period: int, hold: bool = True) -> float:
    """eta of the `step`-th EMA update: `decay` when constant, else `cosine_eta(step, decay, decay_end, period, hold)`.

    The released MoCoSE schedule is `cosine` with decay_end 1.0, period 15000 and hold False
    (`1 - (1 - eta0) * (cos(pi t / T) + 1) / 2`, t counted from 1 at the first update).

    >>> ema_decay_at(7, "constant", 0.85, 0.95, 100)
    0.85
    """
    if schedule == "constant":
        return decay
    if schedule == "cosine":
        return cosine_eta(step, decay, decay_end, period, hold)
    raise ValueError(f"EMA schedule must be one of {SCHEDULES}, got {schedule!r}")


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, decay: float) -> None:
    """theta_t <- decay * theta_t + (1 - decay) * theta_o for every parameter; buffers are copied.

    `target` and `online` must have the same architecture (parameters in the same order). Parameters
    the two share (MoCoSE's embedding layer) are skipped: blending a tensor with itself changes nothing.
    """
    pairs = [(t, o) for t, o in zip(target.parameters(), online.parameters()) if t is not o]
    if len(list(target.parameters())) != len(list(online.parameters())):
        raise ValueError("target and online modules have different numbers of parameters")
    if pairs:
        target_params, online_params = (list(x) for x in zip(*pairs))
        if decay == 0.0:
            torch._foreach_copy_(target_params, online_params)  # exact copy, no rounding
        else:
            # one fused kernel over all tensors: lerp(t, o, w) = t + w * (o - t) with w = 1 - decay
            torch._foreach_lerp_(target_params, online_params, 1.0 - decay)
    for target_buffer, online_buffer in zip(target.buffers(), online.buffers()):
        if target_buffer is not online_buffer:
            target_buffer.copy_(online_buffer)


def make_target(online: nn.Module) -> nn.Module:
    """A deep copy of `online` with gradients off: the EMA target branch.

    Call it before attaching hooks to `online` (e.g. `FGSM.attach`): a deep copy copies module hooks.
    """
    target = copy.deepcopy(online)
    target.requires_grad_(False)
    return target
