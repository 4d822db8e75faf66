"""MTD (MoCoSE eq. 4) against values computed by hand and with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tests.deadlines import scaled
from trainer.mtd import config_traceable_distance, effective_eta, traceable_distance
from trainer.schedules import cosine_eta


def mocose(schedule="constant", decay=0.85, decay_end=0.95, schedule_steps=None, size=512, slices=None, batch=64,
           max_steps=None):
    return {
        "method": "mocose", "batch_size": batch, "max_steps": max_steps,
        "ema": {"schedule": schedule, "decay": decay, "decay_end": decay_end, "schedule_steps": schedule_steps},
        "queue": {"size": size, "initial_size": 128, "slices": slices},
    }


def test_paper_best_point():
    # 1/(1-0.85) + 512/64 = 6.666... + 8 = 14.67 (MoCoSE section 5.7)
    assert round(traceable_distance(0.85, 512, 64), 2) == 14.67
    assert round(config_traceable_distance(mocose()), 2) == 14.67


def test_slices_use_the_oldest_position():
    # the loss uses positions up to 1024, so K = 1024: 6.667 + 1024/256 = 10.667
    assert traceable_distance(0.85, 1024, 256, slices=[(0, 256), (768, 1024)]) == pytest.approx(1 / 0.15 + 4.0)
    # a slice ending before the queue's end: K is its end, not the queue size
    assert traceable_distance(0.85, 1024, 256, slices=[(0, 512)]) == pytest.approx(1 / 0.15 + 2.0)
    config = mocose(size=1024, batch=256, slices=["0-256", "768-1024"])
    assert config_traceable_distance(config) == pytest.approx(1 / 0.15 + 4.0)
    two_slices = mocose(size=1024, batch=256, slices="0-256+768-1024")
    assert config_traceable_distance(two_slices) == pytest.approx(1 / 0.15 + 4.0)


def test_k_choice_size_ignores_slices():
    assert traceable_distance(0.85, 2048, 256, slices=[(0, 512)], k_choice="size") == pytest.approx(1 / 0.15 + 8.0)
    config = mocose(size=2048, batch=256, slices=["0-512"])
    assert config_traceable_distance(config, k_choice="size") == pytest.approx(1 / 0.15 + 8.0)
    assert config_traceable_distance(config, k_choice="oldest") == pytest.approx(1 / 0.15 + 2.0)


def test_cosine_schedule_initial_final_mean():
    config = mocose(schedule="cosine", decay=0.75, decay_end=0.95)
    assert config_traceable_distance(config, total_steps=200, eta_choice="initial") == pytest.approx(1 / 0.25 + 8.0)
    assert config_traceable_distance(config, total_steps=200, eta_choice="final") == pytest.approx(1 / 0.05 + 8.0)
    # "mean": eta averaged over steps 1..T, then 1/(1 - mean eta); independent numpy computation
    t = np.arange(1, 201) / 200
    eta = 0.95 - (0.95 - 0.75) * (np.cos(np.pi * t) + 1) / 2
    expected = 1 / (1 - eta.mean()) + 8.0
    assert config_traceable_distance(config, total_steps=200, eta_choice="mean") == pytest.approx(expected, rel=1e-12)
    # max_steps stands in for the run length when none is passed
    assert config_traceable_distance(mocose(schedule="cosine", decay=0.75, max_steps=200)) == pytest.approx(expected)


def test_cosine_schedule_shorter_than_the_run_stays_at_the_end_value():
    config = mocose(schedule="cosine", decay=0.75, decay_end=0.95, schedule_steps=100)
    steps = np.arange(1, 201)
    t = np.minimum(steps, 100) / 100
    eta = 0.95 - 0.2 * (np.cos(np.pi * t) + 1) / 2
    assert config_traceable_distance(config, total_steps=200) == pytest.approx(1 / (1 - eta.mean()) + 8.0)
    assert cosine_eta(0, 0.75, 0.95, 100) == pytest.approx(0.75)
    assert cosine_eta(50, 0.75, 0.95, 100) == pytest.approx(0.85)
    assert cosine_eta(150, 0.75, 0.95, 100) == pytest.approx(0.95)


def test_constant_schedule_ignores_eta_choice():
    for choice in ("initial", "final", "mean"):
        assert effective_eta("constant", 0.9, 0.99, None, None, choice) == 0.9


def test_unknown_run_length_gives_no_mean_formula():
    # without the run's length the mean eta cannot be computed; no silent fall-back to another choice
    # (the dry run passes the length it reads from the corpus, as the trainer does)
    config = mocose(schedule="cosine", decay=0.75, decay_end=0.95)
    assert config_traceable_distance(config) is None
    assert config_traceable_distance(config, eta_choice="final") == pytest.approx(1 / 0.05 + 8.0)


def test_methods_without_ema_and_queue_have_none():
    for method in ("simcse", "gs", "mix"):
        assert config_traceable_distance({"method": method, "batch_size": 64}) is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: traceable_distance(1.0, 512, 64),
        lambda: traceable_distance(-0.1, 512, 64),
        lambda: traceable_distance(0.85, 512, 0),
        lambda: traceable_distance(0.85, 512, 64, k_choice="newest"),
        lambda: effective_eta("linear", 0.8, 0.9, 100),
        lambda: effective_eta("cosine", 0.8, 0.9, 100, eta_choice="median"),
        lambda: effective_eta("cosine", 0.8, 0.9, None, eta_choice="mean"),
        lambda: config_traceable_distance(mocose(slices=["0-256-512"])),
    ],
)
def test_bad_inputs_raise(call):
    with pytest.raises(ValueError):
        call()


# ---- the mean eta of a cosine schedule in closed form (planning never pays per step) ----------------------
def numpy_mean_eta(total_steps: int, eta0: float, eta1: float, period: int | None, hold: bool, released: bool) -> float:
    """The mean over the updates after steps 1..total_steps, each eta written out (what the trainer applies and
    what planning summed step by step before): the released code's update after step s uses eta(s + 1)."""
    period = period or total_steps
    t = np.arange(1, total_steps + 1, dtype=np.float64) + (1 if released else 0)
    if hold:
        t = np.minimum(t, period)
    eta = eta1 - (eta1 - eta0) * (np.cos(np.pi * t / max(period, 1)) + 1) / 2
    return float(np.mean(eta))


RUN_LENGTHS = [1, 2, 3, 7, 30, 100, 480, 3906, 7812, 15624, 15625, 15626, 31250, 46875]


@pytest.mark.parametrize("total_steps", RUN_LENGTHS)
@pytest.mark.parametrize("period", [None, 1, 2, 99, 100, 15000])
@pytest.mark.parametrize("hold, released", [(True, False), (False, True), (True, True), (False, False)])
def test_mean_eta_in_closed_form_matches_the_steps_written_out(total_steps, period, hold, released):
    for eta0, eta1 in [(0.75, 0.95), (0.75, 1.0), (0.0, 0.99), (0.9, 0.5), (0.5, 0.5)]:
        expected = numpy_mean_eta(total_steps, eta0, eta1, period, hold, released)
        got = effective_eta("cosine", eta0, eta1, total_steps, period, "mean", hold=hold, released_counter=released)
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-14)
        if got < 1 and expected < 1:  # what the dry run and the summary show of it: the same digits
            d_got, d_expected = traceable_distance(got, 512, 64), traceable_distance(expected, 512, 64)
            assert d_got == pytest.approx(d_expected, rel=1e-11)


def test_mean_eta_of_a_billion_steps_is_planned_in_constant_time_and_memory():
    import time
    import tracemalloc

    tracemalloc.start()
    started = time.perf_counter()
    for steps in (10**9, 10**18, 2**63 - 1):
        eta = effective_eta("cosine", 0.75, 0.95, steps, None, "mean")
        assert eta == pytest.approx(0.85, abs=1e-6)  # the cosine's mean over its own period
        held = effective_eta("cosine", 0.75, 0.95, steps, 15000, "mean")  # held at 0.95 after 15,000 steps
        assert held == pytest.approx(0.95, abs=1e-5)
        assert 0.75 <= effective_eta("cosine", 0.75, 1.0, steps, 15000, "mean", hold=False, released_counter=True) <= 1
    took = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # a bound against the runaway (the sum built a list of 10^9 floats: minutes, then MemoryError), not a timing
    assert took < scaled(1.0) and peak < 100_000, (took, peak)


def test_a_planned_run_of_a_billion_steps_has_its_mtd():
    config = {**mocose(schedule="cosine", decay=0.5, decay_end=0.95, max_steps=10**9),
              "released": {"ema_schedule": False}}
    config["ema"]["hold_after_schedule"] = True
    assert config_traceable_distance(config) == pytest.approx(1 / (1 - 0.725) + 8.0, rel=1e-8)
