"""The EMA decay schedules of MoCoSE (eq. 2; docs/science/mocose.md#schedules, paper-vs-released.md), as plain
functions.

Kept free of torch: the trainer, the MTD formula (trainer/mtd.py), the dry run and the analysis all
compute eta with these.
"""

from __future__ import annotations

import math

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


def mean_cosine_eta(first: int, last: int, eta0: float, eta1: float, period: int, hold: bool = True) -> float:
    """The mean of `cosine_eta(t, eta0, eta1, period, hold)` over the steps t = first..last (first >= 0), in
    closed form: the same number as summing the steps (to ~1e-15), in constant time and memory for any run
    length.

    The sum of cos(pi t / T) over t = a..b is sin(n pi / 2T) / sin(pi / 2T) * cos((a + b) pi / 2T), n = b - a + 1;
    both arguments are reduced modulo 4T as integers first, so that huge step counts stay exact.

    >>> round(mean_cosine_eta(1, 100, 0.75, 0.95, 100), 12) == round(sum(cosine_eta(t, 0.75, 0.95, 100)
    ...       for t in range(1, 101)) / 100, 12)
    True
    """
    if last < first:
        raise ValueError(f"expected at least one step, got {first}..{last}")
    scale = max(period, 1)

    def cos_sum(a: int, b: int) -> float:
        if b < a:
            return 0.0
        ratio = math.sin(math.pi * ((b - a + 1) % (4 * scale)) / (2 * scale)) / math.sin(math.pi / (2 * scale))
        return ratio * math.cos(math.pi * ((a + b) % (4 * scale)) / (2 * scale))

    if hold:  # t is held at the period's end: cos(pi T / T) for every step past it
        cap = max(period, 0)
        held = max(0, last - max(first, cap + 1) + 1)
        total = cos_sum(first, min(last, cap)) + held * math.cos(math.pi * cap / scale)
    else:
        total = cos_sum(first, last)
    return eta1 - (eta1 - eta0) * (total / (last - first + 1) + 1.0) / 2.0


def ema_schedule_step(step: int, released: bool) -> int:
    """The schedule step t whose eta the EMA update after optimiser step `step` uses.

    The paper's reading: t = step. The released MoCoSE code: t = step + 1. Its EMA advances the counter
    before computing eta and runs at the start of `forward`, so the update at forward 1 uses t = 1 on a
    target just copied from the online branch (a no-op, not repeated here) and the update at forward
    s + 1, the first after optimiser step s, uses t = s + 1.

    >>> [ema_schedule_step(s, released) for released in (False, True) for s in (1, 2)]
    [1, 2, 2, 3]
    """
    return step + 1 if released else step


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
