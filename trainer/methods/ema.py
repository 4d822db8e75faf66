"""EMA target branch for MoCoSE (eq. 2; docs/science/mocose.md#ema-target-branch) and its decay schedules.

    theta_target <- eta * theta_target + (1 - eta) * theta_online      after every optimiser step

eta = 0 copies the online weights (the symmetric, collapsing case of Appendix A.2); eta -> 1 freezes
the target.

>>> online, target = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
>>> ema_update(target, online, decay=0.0)
>>> torch.equal(target.weight, online.weight)
True
"""

from __future__ import annotations

import torch
from torch import nn


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

