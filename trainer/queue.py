"""The MoCoSE negative queue: a FIFO of recent target keys, ordered by age (docs/science/mocose.md#negative-queue).

Conceptually the keys are a list with position 0 = the newest key. `push` puts a batch in front (batch
row 0 becomes position 0), the queue grows up to `size` and then drops the oldest keys. At
construction `initial_size` (K0) slots already hold random standard-normal, L2-normalised vectors; they
sit behind every real key and are the first to be dropped. With `all_random=True` (the released MoCoSE
code) all `size` slots start random; which of them the loss sees is then the caller's `limit`, which may
pass `size` (`released_read_length`): positions from `size` on hold the random keys already dropped.

It is stored as a ring buffer (registered buffers, so `.to(device)` moves it): a push writes B rows
and moves the start pointer, instead of concatenating the whole queue every step. The step each key
was pushed at is kept on the host (a NumPy array), so measuring the keys' ages never syncs a GPU.

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

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

Slices = Sequence[tuple[int, int]]


class NegativeQueue(torch.nn.Module):
    """FIFO of `size` keys of dimension `dim`, newest at position 0; see the module docstring."""

    def __init__(self, size: int, dim: int, initial_size: int = 0, generator: torch.Generator | None = None,
                 all_random: bool = False):
        super().__init__()
        if size < 0 or not 0 <= initial_size <= size:
            raise ValueError(f"need size >= 0 and 0 <= initial_size <= size, "
                             f"got size={size}, initial_size={initial_size}")
        self.size, self.dim = size, dim
        random_count = size if all_random else initial_size
        keys = torch.zeros(size, dim)
        if random_count:
            keys[:random_count] = F.normalize(torch.randn(random_count, dim, generator=generator), dim=-1)
        self.register_buffer("keys", keys)
        self.all_random = all_random
        if all_random:  # the released code keeps every random key behind the real ones until it truncates
            self.register_buffer("initial_keys", keys.clone())
        # the step each physical row was pushed at; NaN marks the random initial keys (they have no age)
        self.push_steps = np.full(size, np.nan)
        self.start = 0  # physical row of position 0 (the newest key)
        self.fill = random_count
        self.pushed = 0  # real keys pushed so far (they may have been dropped since)

    def __len__(self) -> int:
        return self.fill

    @property
    def real_count(self) -> int:
        """How many positions, from 0, hold real (pushed) keys."""
        return min(self.pushed, self.size)

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
        self.keys[self._rows(0, count)] = keys.to(self.keys.dtype)
        self.push_steps[(self.start + np.arange(count)) % self.size] = float(step)
        self.fill = min(self.fill + count, self.size)
        self.pushed += count

    def get(self, slices: Slices | None = None, limit: int | None = None) -> Tensor:
        """Keys at half-open position ranges (position 0 = newest), concatenated in order -> (M, d).

        None means the whole filled queue. Positions at or beyond the current fill, or beyond `limit`,
        are skipped. With `all_random`, a `limit` past `size` (no slices) also reads the dropped random
        keys that follow position size - 1 (see `_dropped_random`).
        """
        ranges = self._ranges(slices, limit)
        parts = [self._rows(begin, end) for begin, end in ranges]
        keys = self.keys[torch.cat(parts) if len(parts) > 1 else parts[0]] if parts else self.keys[:0]
        begin, end = self._dropped_random(slices, limit)
        return torch.cat([keys, self.initial_keys[begin:end]]) if end > begin else keys

    def ages(self, step: int, slices: Slices | None = None, limit: int | None = None) -> np.ndarray:
        """Ages in steps (step - push step) of the keys `get(slices, limit)` returns; NaN for random keys."""
        ranges = self._ranges(slices, limit)
        rows = [(self.start + np.arange(begin, end)) % self.size for begin, end in ranges]
        begin, end = self._dropped_random(slices, limit)
        ages = float(step) - self.push_steps[np.concatenate(rows)] if rows else np.empty(0)
        return np.concatenate([ages, np.full(end - begin, np.nan)]) if end > begin else ages

    def _dropped_random(self, slices: Slices | None, limit: int | None) -> tuple[int, int]:
        """Indices [begin, end) into `initial_keys` of the positions size..limit-1 (empty unless all_random).

        All-random, the queue reads as the real keys (newest first) followed by every initial random key
        in its original order, so position p >= size holds initial key p - pushed; the ring buffer keeps
        only the first size - pushed of them.
        """
        if not self.all_random or slices is not None or limit is None or limit <= self.size:
            return 0, 0
        begin = max(self.size - self.pushed, 0)
        return begin, max(min(limit - self.pushed, self.size), begin)

    def _ranges(self, slices: Slices | None, limit: int | None) -> list[tuple[int, int]]:
        end = self.fill if limit is None else min(self.fill, limit)
        ranges = [(0, end)] if slices is None else slices
        return [(min(b, end), min(e, end)) for b, e in ranges if min(b, end) < min(e, end)]

    def _rows(self, begin: int, end: int) -> Tensor:
        """Physical rows of positions begin..end-1."""
        return (self.start + torch.arange(begin, end, device=self.keys.device)) % max(self.size, 1)

    # the pointers are plain ints (no device sync to read them); keep them in state_dict for resuming
    def get_extra_state(self) -> dict[str, Any]:
        return {"start": self.start, "fill": self.fill, "pushed": self.pushed, "push_steps": self.push_steps.tolist()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.start, self.fill = int(state["start"]), int(state["fill"])
        self.pushed = int(state.get("pushed", 0))
        if "push_steps" in state:
            self.push_steps = np.asarray(state["push_steps"], dtype=np.float64)

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, fill={self.fill}"


def released_read_length(pushed: int, size: int, initial_size: int) -> int:
    """How many queue keys the released MoCoSE loss reads once `pushed` real keys have entered
    (docs/science/paper-vs-released.md#mocose-queue-read-past-k).

    The release keeps the queue as one tensor whose K = `size` columns all start random, counts its fill
    from K0 = `initial_size`, and prepends each batch's keys, cutting the tensor back to K only once the
    count exceeds K. Its loss reads the first count + K0 columns while that is below K, else the whole
    tensor. With P = `pushed` (the count is K0 + P):

        stored(P) = K + P   while K0 + P <= K, else K
        read(P)   = 2*K0 + P   if 2*K0 + P < K, else stored(P)

    so between 2*K0 + P = K and K0 + P = K it reads past K: K plus the keys pushed so far (real keys first,
    then all K random ones). K0 = 0 is the exception: the first push replaces the random tensor by the
    batch, so stored(P) = min(P, K) and the read never passes K.

    >>> [released_read_length(p, 512, 128) for p in range(0, 576, 64)]  # B = 64: steps 1-9
    [256, 320, 384, 448, 768, 832, 896, 512, 512]
    """
    if 2 * initial_size + pushed < size:
        return 2 * initial_size + pushed
    if initial_size == 0:
        return min(pushed, size)
    return size + pushed if initial_size + pushed <= size else size
