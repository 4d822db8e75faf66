"""NegativeQueue against a plain Python list model (newest first) and a hand-checked example."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trainer.queue import NegativeQueue, released_read_length


class ListQueue:
    """Reference: a Python list, position 0 = newest, truncated to `size`."""

    def __init__(self, size, initial):
        self.size = size
        self.items = [(row, None) for row in initial]  # (key, push step); None = random initial key

    def push(self, keys, step):
        self.items = [(row, step) for row in keys] + self.items
        self.items = self.items[: self.size]

    def get(self, slices):
        slices = [(0, len(self.items))] if slices is None else slices
        return [item for begin, end in slices for item in self.items[begin:end]]


def assert_matches(queue, reference, step, slices=None):
    expected = reference.get(slices)
    keys = queue.get(slices)
    ages = queue.ages(step, slices)
    assert keys.shape == (len(expected), queue.dim)
    assert ages.shape == (len(expected),)
    np.testing.assert_array_equal(keys.numpy(), np.array([k for k, _ in expected]).reshape(-1, queue.dim))
    expected_ages = [math.nan if s is None else step - s for _, s in expected]
    np.testing.assert_array_equal(ages, np.array(expected_ages, dtype=np.float32))


def test_hand_checked_example():
    queue = NegativeQueue(size=5, dim=1, initial_size=2, generator=torch.Generator().manual_seed(0))
    initial = queue.get()
    assert len(queue) == 2 and initial.abs().tolist() == [[1.0], [1.0]]  # normalised 1-d vectors
    queue.push(torch.tensor([[10.0], [11.0]]), step=1)  # 10 is the newest
    queue.push(torch.tensor([[20.0], [21.0]]), step=2)
    # newest first: 20 21 | 10 11 | random; the 5th slot holds one random key, the other was dropped
    assert len(queue) == 5
    assert queue.get()[:4].flatten().tolist() == [20.0, 21.0, 10.0, 11.0]
    assert queue.get()[4].item() == initial[0].item()
    ages = queue.ages(step=4)
    assert ages[:4].tolist() == [2.0, 2.0, 3.0, 3.0] and math.isnan(ages[4].item())
    assert queue.get([(1, 3)]).flatten().tolist() == [21.0, 10.0]
    assert queue.get([(0, 1), (3, 4)]).flatten().tolist() == [20.0, 11.0]
    queue.push(torch.tensor([[30.0], [31.0], [32.0]]), step=3)
    assert queue.get().flatten().tolist() == [30.0, 31.0, 32.0, 20.0, 21.0]
    assert queue.ages(step=3).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("size,initial_size,batch", [(8, 0, 3), (8, 2, 3), (12, 12, 4), (5, 1, 7), (16, 4, 1)])
def test_fifo_order_and_ages_match_list_model(size, initial_size, batch):
    dim = 3
    queue = NegativeQueue(size, dim, initial_size, generator=torch.Generator().manual_seed(1))
    reference = ListQueue(size, queue.get().numpy())
    rng = np.random.default_rng(size + batch)
    slices = [(0, 2), (size // 2, size), (1, size + 5)]
    for step in range(1, 9):
        keys = rng.normal(size=(batch, dim)).astype(np.float32)
        queue.push(torch.from_numpy(keys), step)
        reference.push(list(keys), step)
        assert len(queue) == len(reference.items) == min(initial_size + batch * step, size)
        assert_matches(queue, reference, step + 1)
        assert_matches(queue, reference, step + 1, slices)


@pytest.mark.parametrize("size,initial_size,batch", [(512, 128, 64), (64, 0, 16), (10, 5, 3)])
def test_growth_from_initial_size_to_size(size, initial_size, batch):
    queue = NegativeQueue(size, 4, initial_size)
    assert len(queue) == initial_size
    if initial_size:
        torch.testing.assert_close(queue.get().norm(dim=1), torch.ones(initial_size))
        assert np.isnan(queue.ages(0)).all()
    fills = []
    for step in range(size // batch + 3):
        queue.push(torch.ones(batch, 4), step)
        fills.append(len(queue))
    expected = [min(initial_size + batch * (s + 1), size) for s in range(len(fills))]
    assert fills == expected
    # once full, every random initial key has been pushed out
    assert not np.isnan(queue.ages(100)).any()


def test_initial_keys_are_uniform_on_the_sphere():
    """Section 3's "randomly initialized" keys, read as the uniform distribution on the unit sphere (a standard normal,
    normalised): unit norms, no mean direction, covariance I/d (what any direction-free distribution of unit vectors
    has), and each coordinate's square Beta(1/2, (d-1)/2), of mean 1/d and variance 2(d-1)/(d^2 (d+2))."""
    count, dim = 20000, 8
    keys = NegativeQueue(count, dim, count, generator=torch.Generator().manual_seed(0)).get().double().numpy()
    np.testing.assert_allclose(np.linalg.norm(keys, axis=1), 1.0, rtol=1e-6)
    assert np.abs(keys.mean(axis=0)).max() < 4 / math.sqrt(count * dim)  # the mean's std is 1/sqrt(count d)
    np.testing.assert_allclose(keys.T @ keys / count, np.eye(dim) / dim, atol=0.01)
    squares = keys ** 2
    assert squares.var(axis=0) == pytest.approx(2 * (dim - 1) / (dim ** 2 * (dim + 2)), rel=0.1)


def test_slices_past_the_fill_return_fewer_rows():
    queue = NegativeQueue(size=10, dim=2)
    queue.push(torch.arange(8.0).view(4, 2), step=0)
    assert queue.get([(0, 10)]).shape == (4, 2)
    assert queue.get([(2, 6)]).tolist() == [[4.0, 5.0], [6.0, 7.0]]
    assert queue.get([(4, 10)]).shape == (0, 2)
    assert queue.ages(0, [(4, 10)]).shape == (0,)
    assert queue.get([]).shape == (0, 2)


def test_size_zero_is_always_empty():
    queue = NegativeQueue(size=0, dim=3)
    queue.push(torch.randn(4, 3), step=1)
    assert len(queue) == 0
    assert queue.get().shape == (0, 3)
    assert queue.get([(0, 4)]).shape == (0, 3)
    assert queue.ages(2).shape == (0,)


def test_push_detaches_and_state_dict_round_trips():
    queue = NegativeQueue(size=6, dim=2, initial_size=1)
    keys = torch.randn(4, 2, requires_grad=True)
    queue.push(keys * 2, step=3)
    assert not queue.get().requires_grad
    copy = NegativeQueue(size=6, dim=2)
    copy.load_state_dict(queue.state_dict())
    assert len(copy) == len(queue) == 5
    assert torch.equal(copy.get([(1, 4)]), queue.get([(1, 4)]))
    queue.push(torch.randn(3, 2), step=4)
    copy.load_state_dict(queue.state_dict())
    assert torch.equal(copy.get(), queue.get())


def test_buffers_follow_module_conversion():
    queue = NegativeQueue(size=4, dim=2, initial_size=2).to(torch.float64)
    queue.push(torch.ones(1, 2), step=0)
    assert queue.get().dtype == torch.float64
    # the keys are a buffer (they move with the module); push steps stay on the host (no GPU sync to read ages)
    assert set(dict(queue.named_buffers())) == {"keys"}
    assert queue.ages(1).tolist()[0] == 1.0


def test_released_initial_queue_starts_all_random_and_limits_what_is_read():
    # released MoCoSE: all K slots random; the loss reads the first min(2*K0 + pushed, K) positions
    queue = NegativeQueue(size=8, dim=2, initial_size=2, all_random=True)
    assert len(queue) == 8 and queue.real_count == 0 and np.isnan(queue.ages(1)).all()
    assert queue.get(limit=4).shape == (4, 2)
    queue.push(torch.ones(3, 2), step=1)
    assert queue.real_count == 3 and len(queue) == 8
    ages = queue.ages(2, limit=2 * 2 + 3)
    assert ages[:3].tolist() == [1.0, 1.0, 1.0] and np.isnan(ages[3:]).all() and len(ages) == 7


def release_read_lengths(size, initial_size, batch, steps):
    """The released MoCoSE queue as it is written there: a tensor of `size` random columns, a counter from
    K0; each step the loss reads counter + K0 columns if that is below K, else the whole tensor; then the
    batch is prepended (replacing the tensor when the counter is 0) and the tensor is cut to K once the
    counter exceeds K."""
    columns, counter, reads = size, initial_size, []
    for _ in range(steps):
        reads.append(counter + initial_size if counter + initial_size < size else columns)
        columns = batch if counter == 0 else columns + batch
        counter += batch
        if counter > size:
            columns = size
    return reads


@pytest.mark.parametrize("size,initial_size,batch,expected", [
    # K 512, K0 128, B 64: 256 + 64 (t-1) up to 448, then the whole tensor 512 + 64 (t-1) at steps 5-7, then K
    (512, 128, 64, [256, 320, 384, 448, 768, 832, 896, 512, 512]),
    # K 8, K0 2, B 2: 4, 6; at t = 3 2*2 + 4 = 8 is not below K and K0 + 4 <= 8: 8 + 4 = 12; t = 4: 8 + 6 = 14
    (8, 2, 2, [4, 6, 12, 14, 8, 8]),
    # K0 = 0: the first push replaces the random tensor, so the read never passes K
    (8, 0, 3, [0, 3, 6, 8, 8]),
    # K0 = K: the whole tensor of K at step 1, cut back to K after every push
    (8, 8, 2, [8, 8, 8]),
    # K0 > K/2: past K from step 2 on (8 + 2), until K0 + (t-1) B exceeds K
    (8, 5, 2, [8, 10, 8]),
])
def test_released_read_length_step_by_step(size, initial_size, batch, expected):
    got = [released_read_length(batch * t, size, initial_size) for t in range(len(expected))]
    assert got == expected
    assert release_read_lengths(size, initial_size, batch, len(expected)) == expected


def test_released_read_past_size_returns_the_dropped_random_keys():
    # K 4, K0 1, B 1: after 2 pushes the release's tensor is [b2, b1, r0, r1, r2, r3]: the ring keeps
    # b2 b1 r0 r1, and positions 4, 5 are the random keys it dropped (r2, r3); ages NaN for all random keys
    queue = NegativeQueue(size=4, dim=1, initial_size=1, generator=torch.Generator().manual_seed(0),
                          all_random=True)
    random_keys = queue.get().flatten().tolist()
    queue.push(torch.tensor([[10.0]]), step=1)
    queue.push(torch.tensor([[20.0]]), step=2)
    limit = released_read_length(queue.pushed, 4, 1)
    assert limit == 6  # 2*1 + 2 = 4 is not below K = 4 and K0 + 2 = 3 <= 4: K + 2
    assert queue.get(limit=limit).flatten().tolist() == [20.0, 10.0, *random_keys]
    ages = queue.ages(3, limit=limit)
    assert ages[:2].tolist() == [1.0, 2.0] and np.isnan(ages[2:]).all() and len(ages) == 6
    assert queue.get([(0, 2)], limit=limit).flatten().tolist() == [20.0, 10.0]  # slices stop at K
    assert queue.get(limit=3).flatten().tolist() == [20.0, 10.0, random_keys[0]]
    paper = NegativeQueue(size=4, dim=1, initial_size=1)  # never reads past size
    assert len(paper.get(limit=6)) == 1


def test_invalid_sizes_raise():
    with pytest.raises(ValueError):
        NegativeQueue(size=4, dim=2, initial_size=5)
    with pytest.raises(ValueError):
        NegativeQueue(size=-1, dim=2)
