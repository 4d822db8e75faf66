"""The MoCoSE negative queue: a FIFO of recent target keys, ordered by age (methods.md section 2).

Conceptually the keys are a list with position 0 = the newest key. `push` puts a batch in front (batch
row 0 becomes position 0), the queue grows up to `size` and then drops the oldest keys. At
construction `initial_size` (K0) slots already hold random standard-normal, L2-normalised vectors; they
sit behind every real key and are the first to be dropped.

It is stored as a ring buffer (registered buffers, so `.to(device)` moves it): a push writes B rows
and moves the start pointer, instead of concatenating the whole queue every step.

>>> q = NegativeQueue(size=4, dim=2)
>>> q.push(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), step=1)
>>> q.push(torch.tensor([[2.0, 0.0], [0.0, 2.0], [3.0, 3.0]]), step=2)
>>> len(q), q.get().tolist()  # newest first; the oldest key [0, 1] was dropped
(4, [[2.0, 0.0], [0.0, 2.0], [3.0, 3.0], [1.0, 0.0]])
>>> q.get([(1, 2), (3, 9)]).tolist()  # positions 1 and 3 (9 is past the fill: skipped)
[[0.0, 2.0], [1.0, 0.0]]
>>> q.ages(step=5).tolist()
[3.0, 3.0, 3.0, 4.0]
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

Slices = Sequence[tuple[int, int]]


class NegativeQueue(torch.nn.Module):
    """FIFO of `size` keys of dimension `dim`, newest at position 0; see the module docstring."""

    def __init__(self, size: int, dim: int, initial_size: int = 0, generator: torch.Generator | None = None):
        super().__init__()
        if size < 0 or not 0 <= initial_size <= size:
            raise ValueError(f"need size >= 0 and 0 <= initial_size <= size, got size={size}, initial_size={initial_size}")
        self.size, self.dim = size, dim
        keys = torch.zeros(size, dim)
        # the step each key was pushed at; NaN marks the random initial keys (they have no age)
        push_steps = torch.full((size,), float("nan"))
        if initial_size:
            keys[:initial_size] = F.normalize(torch.randn(initial_size, dim, generator=generator), dim=-1)
        self.register_buffer("keys", keys)
        self.register_buffer("push_steps", push_steps)
        self.start = 0  # physical row of position 0 (the newest key)
        self.fill = initial_size

    def __len__(self) -> int:
        return self.fill

    @torch.no_grad()
    def push(self, keys: Tensor, step: int) -> None:
        """Put a batch of keys (B, d) in front: row 0 becomes position 0. Drops the oldest beyond `size`."""
        if self.size == 0:
            return
        keys = keys.detach()[: self.size]  # a batch larger than the queue keeps only its newest rows
        count = keys.shape[0]
        # everything already stored moves `count` positions back; the new rows fill the slots in front,
        # which are free or hold the oldest keys (dropped)
        self.start = (self.start - count) % self.size
        rows = self._rows(0, count)
        self.keys[rows] = keys.to(self.keys.dtype)
        self.push_steps[rows] = float(step)
        self.fill = min(self.fill + count, self.size)

    def get(self, slices: Slices | None = None) -> Tensor:
        """Keys at half-open position ranges (position 0 = newest), concatenated in order -> (M, d).

        None means the whole filled queue. Positions at or beyond the current fill are skipped.
        """
        return self.keys[self._index(slices)]

    def ages(self, step: int, slices: Slices | None = None) -> Tensor:
        """Ages in steps (step - push step) of the keys `get(slices)` returns; NaN for the random initial keys."""
        return float(step) - self.push_steps[self._index(slices)]

    def _rows(self, begin: int, end: int) -> Tensor:
        """Physical rows of positions begin..end-1."""
        return (self.start + torch.arange(begin, end, device=self.keys.device)) % max(self.size, 1)

    def _index(self, slices: Slices | None) -> Tensor:
        ranges = [(0, self.fill)] if slices is None else slices
        parts = [self._rows(min(begin, self.fill), min(end, self.fill)) for begin, end in ranges]
        if not parts:
            return torch.empty(0, dtype=torch.long, device=self.keys.device)
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    # the pointers are plain ints (no device sync to read them); keep them in state_dict for resuming
    def get_extra_state(self) -> dict[str, Any]:
        return {"start": self.start, "fill": self.fill}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.start, self.fill = int(state["start"]), int(state["fill"])

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, fill={self.fill}"
