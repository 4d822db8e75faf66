"""Queue slices (MoCoSE Table 8): which positions of the age-ordered negative queue the loss reads.

Kept free of torch so that configs and the dry run can parse slices without loading it.
"""

from __future__ import annotations

from typing import Sequence


def parse_slices(slices: Sequence[str] | str | None, size: int) -> list[tuple[int, int]]:
    """Queue slices as half-open (start, end) position ranges (position 0 = the newest key).

    Accepts a list of "a-b" strings or "all", or one string joined with "+" (MoCoSE Table 8 writes
    "0-256 + 768-1024"). The one slice parser of the project: the config, the trainer and the MTD
    formula all call it.

    >>> parse_slices(["0-256", "768-1024"], 1024)
    [(0, 256), (768, 1024)]
    >>> parse_slices("0-256+768-1024", 1024)
    [(0, 256), (768, 1024)]
    >>> parse_slices("all", 512)
    [(0, 512)]
    """
    if slices is None or slices == "all" or slices == ["all"]:
        return [(0, size)]
    if isinstance(slices, str):
        slices = [s.strip() for s in slices.split("+")]
    out: list[tuple[int, int]] = []
    for text in slices:
        text = str(text).strip()
        if text == "all":
            out.append((0, size))
            continue
        try:
            start_s, end_s = text.split("-")
            start, end = int(start_s), int(end_s)
        except ValueError:
            raise ValueError(f"slices like '0-256' (half-open position ranges) or 'all', got '{text}'") from None
        if not 0 <= start < end <= size:
            raise ValueError(f"slice '{text}' within [0, queue.size={size}] with start < end")
        out.append((start, end))
    return out
