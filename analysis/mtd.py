"""Maximum traceable distance (MoCoSE section 5.7, eq. 4).

    d_trace = 1 / (1 - eta) + K / B

The first term is the mean age, in optimiser steps, of the online weights inside the EMA target
(Appendix A.12): with theta_t <- eta*theta_t + (1-eta)*theta_o, the weight of the online state from
s steps ago is (1-eta)*eta^s, whose mean s is eta/(1-eta); the paper counts 1/(1-eta). The second term
is the age in steps of the oldest key in the negative queue: B keys enter per step, so the key at
position K-1 was pushed K/B steps ago.

Two choices the paper leaves open are explicit here:
- `eta_choice` under a cosine EMA schedule: "initial" (eta0), "final" (eta1), or "mean" (the mean of
  eta over the run's steps). A constant schedule gives the same eta for all three.
- `k_choice` under queue slicing: "oldest" (K = the oldest position used, i.e. the largest slice end;
  the default, matching "age of the oldest key") or "size" (the whole queue size, ignoring slices).

>>> round(traceable_distance(0.85, 512, 64), 2)
14.67
>>> traceable_distance(0.85, 1024, 256, slices=[(0, 256), (768, 1024)])  # oldest used position 1024
10.666666666666666
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

ETA_CHOICES = ("initial", "final", "mean")
K_CHOICES = ("oldest", "size")


def traceable_distance(
    ema_decay: float,
    queue_size: int,
    batch_size: int,
    slices: Sequence[tuple[int, int]] | None = None,
    k_choice: str = "oldest",
) -> float:
    """d_trace = 1/(1-eta) + K/B, with K the oldest queue position the loss uses (see module doc)."""
    if not 0 <= ema_decay < 1:
        raise ValueError(f"ema_decay must be in [0, 1), got {ema_decay}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if k_choice not in K_CHOICES:
        raise ValueError(f"k_choice must be one of {K_CHOICES}, got {k_choice!r}")
    k = queue_size
    if slices and k_choice == "oldest":
        k = max(end for _, end in slices)
    return 1.0 / (1.0 - ema_decay) + k / batch_size


def cosine_eta(step: int, eta0: float, eta1: float, total_steps: int) -> float:
    """The cosine EMA schedule: eta0 at step 0, eta1 at step T (and after)."""
    t = min(max(step, 0), total_steps) / max(total_steps, 1)
    return eta1 - (eta1 - eta0) * (math.cos(math.pi * t) + 1.0) / 2.0


def effective_eta(
    schedule: str,
    decay: float,
    decay_end: float,
    total_steps: int | None = None,
    schedule_steps: int | None = None,
    eta_choice: str = "mean",
) -> float:
    """The eta that enters d_trace for a constant or cosine schedule (see module doc)."""
    if schedule == "constant":
        return decay
    if schedule != "cosine":
        raise ValueError(f"unknown EMA schedule {schedule!r}")
    if eta_choice == "initial":
        return decay
    if eta_choice == "final":
        return decay_end
    if eta_choice != "mean":
        raise ValueError(f"eta_choice must be one of {ETA_CHOICES}, got {eta_choice!r}")
    if not total_steps:
        raise ValueError("eta_choice='mean' under a cosine schedule needs the run's total steps")
    period = schedule_steps or total_steps
    values = [cosine_eta(s, decay, decay_end, period) for s in range(1, total_steps + 1)]
    return sum(values) / len(values)


def config_traceable_distance(
    config: dict[str, Any],
    total_steps: int | None = None,
    eta_choice: str = "mean",
    k_choice: str = "oldest",
) -> float | None:
    """d_trace of a resolved trainer config dict; None for methods without an EMA target and queue."""
    if config.get("method") != "mocose":
        return None
    ema, queue = config["ema"], config["queue"]
    slices = _parse_slices(queue.get("slices"), queue["size"])
    if total_steps is None and ema["schedule"] == "cosine" and eta_choice == "mean":
        total_steps = config.get("max_steps")
        if total_steps is None:
            eta_choice = "final"  # the run length is unknown before the corpus is read
    eta = effective_eta(ema["schedule"], ema["decay"], ema["decay_end"], total_steps, ema.get("schedule_steps"), eta_choice)
    return traceable_distance(eta, queue["size"], config["batch_size"], slices, k_choice)


def _parse_slices(slices: Iterable[str] | str | None, size: int) -> list[tuple[int, int]] | None:
    if slices is None or slices == "all" or slices == ["all"]:
        return None
    if isinstance(slices, str):
        slices = slices.split("+")
    out = []
    for text in slices:
        text = str(text).strip()
        if text == "all":
            out.append((0, size))
        else:
            start, end = text.split("-")
            out.append((int(start), int(end)))
    return out
