"""Precision on any device: `precision: fp32|bf16|fp16` runs on the CPU as asked (CPU autocast,
the grad scaler on the run's own device type), so the half-precision code is reached without a GPU.

Every method x {fp32, bf16, fp16} x FGSM {none, exact, lagged}: three steps on a tiny random BERT with
finite losses; the GradScaler is built and used exactly when fp16; the first step's loss is within
FIRST_LOSS_TOL of the fp32 run's (the same weights, batch and dropout masks: only the rounding differs).
The FGSM floor refusal fires under bf16 and fp16 for eps 5e-9 and not under fp32.

STS-B dev scoring is replaced by a constant and the final evaluation is skipped (these tests are about
the step, not the evaluation), so every step can be an evaluation step and report its own loss.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import trainer.train as train_mod
from tests.helpers import first_fast
from trainer.config import RunConfig
from trainer.errors import UserError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
METHODS = ["simcse", "gs", "mix", "mocose"]
PRECISIONS = ["fp32", "bf16", "fp16"]
FGSM_EPS = 5e-3  # above both half floors of the tiny BERT's embeddings (bf16 ~8e-4), so every mode perturbs
# |first-step loss - fp32's| / fp32's, per dtype. Measured worst over the 12 runs of each (torch 2.13 CPU):
# bf16 2.25e-2 (mix, exact FGSM: its perturbation's sign comes from a bf16 gradient), 9.6e-3 without FGSM;
# fp16 6.0e-3 (simcse, exact FGSM), 2.0e-3 without. bf16 keeps 8 mantissa bits, fp16 11.
FIRST_LOSS_TOL = {"bf16": 0.03, "fp16": 0.01}
STEPS = 3


class SpyScaler(torch.amp.GradScaler):
    """torch's GradScaler, counting the scale/step calls the loop makes."""

    built: list["SpyScaler"] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.device_type = args[0] if args else kwargs.get("device")
        self.scaled = self.stepped = 0
        SpyScaler.built.append(self)

    def scale(self, outputs):
        self.scaled += 1
        return super().scale(outputs)

    def step(self, optimizer, *args, **kwargs):
        self.stepped += 1
        return super().step(optimizer, *args, **kwargs)


@pytest.fixture
def run(tiny_model_dir, shared_data_dir, tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "precision-corpus-cache"  # one tokenised corpus for the module
    monkeypatch.setattr(train_mod.DevEvaluator, "__call__", lambda self, encode: (0.5, 0.1))
    # no final evaluation: the run's plan (trainer.run_plan) and its set-up read the final tasks from here
    monkeypatch.setattr("trainer.evaluation.sts.split_tasks", lambda tasks: ([], []))
    monkeypatch.setattr(train_mod, "split_tasks", lambda tasks: ([], []))
    monkeypatch.setattr(torch.amp, "GradScaler", SpyScaler)

    def run(method: str, precision: str, fgsm: str, eps: float = FGSM_EPS, steps: int = STEPS):
        SpyScaler.built.clear()
        out = tmp_path_factory.mktemp("run")
        fgsm_block = {"eps": 0.0} if fgsm == "none" else {"eps": eps, "mode": fgsm}
        config = RunConfig.from_dict({
            "model": str(tiny_model_dir), "method": method, "precision": precision, "device": "cpu",
            "batch_size": 4, "max_steps": steps, "seed": 3,
            "data": {"data_dir": str(shared_data_dir), "cache_dir": str(cache), "max_sentences": 64},
            "eval": {"eval_steps": 1}, "queue": {"size": 16, "initial_size": 4},
            "fgsm": fgsm_block, "output_dir": str(out),
        })
        losses = []
        summary = train_mod.train(config, report=lambda metrics: losses.append(metrics["loss"]))
        assert summary.to_json()["precision"] == precision  # the precision that ran, as summary.json holds it
        assert summary.test is None  # the stand-ins above hold: no final evaluation ran
        return summary, losses, list(SpyScaler.built)

    return run


@pytest.mark.parametrize("method, fgsm", first_fast(*[  # MoCoSE with the exact FGSM first
    (method, fgsm) for method in sorted(METHODS, key=lambda m: m != "mocose") for fgsm in ("exact", "none", "lagged")]))
def test_every_precision_runs_on_cpu(run, method, fgsm):
    first = {}
    for precision in PRECISIONS:
        summary, losses, scalers = run(method, precision, fgsm)
        assert summary.status == "ok" and summary.precision == precision and summary.steps == STEPS
        assert len(losses) == STEPS and all(math.isfinite(x) for x in losses), (precision, losses)
        if precision == "fp16":  # the scaler path, on the run's own device type, every step
            assert [(s.device_type, s.scaled, s.stepped) for s in scalers] == [("cpu", STEPS, STEPS)]
        else:
            assert scalers == []
        first[precision] = losses[0]
    for precision in ("bf16", "fp16"):
        deviation = abs(first[precision] - first["fp32"]) / abs(first["fp32"])
        print(f"first-step loss {method} fgsm={fgsm} {precision}: {first[precision]:.6f} vs fp32 "
              f"{first['fp32']:.6f}, relative deviation {deviation:.2e}")
        assert deviation <= FIRST_LOSS_TOL[precision], (precision, first)
    # the half runs really computed in half precision: their first losses are not fp32's bit for bit
    assert first["bf16"] != first["fp32"]


@pytest.mark.parametrize("method", first_fast(*sorted(METHODS, key=lambda m: m != "mocose")))
def test_fgsm_floor_refusal_fires_under_half_precision_only(run, method):
    for precision in ("bf16", "fp16"):
        with pytest.raises(UserError, match=f"fgsm.eps.*{precision} autocast.*precision: fp32"):
            run(method, precision, "lagged", eps=5e-9)
    summary, losses, _ = run(method, "fp32", "lagged", eps=5e-9, steps=1)  # fp32: the MoCoSE eps runs
    assert summary.status == "ok" and summary.precision == "fp32" and len(losses) == 1


def test_auto_keeps_fp32_on_cpu_and_the_release_on_cuda():
    from trainer.methods import GSInfoNCE, MixCSE, MoCoSE, SimCSE

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    methods = (SimCSE, GSInfoNCE, MixCSE, MoCoSE)
    assert [cls.precision_on(cpu, "auto") for cls in methods] == ["fp32"] * 4
    assert [cls.precision_on(cuda, "auto") for cls in methods] == ["fp16", "fp16", "fp32", "fp32"]
    assert [cls.precision_on(cpu, p) for p in PRECISIONS for cls in methods] == [p for p in PRECISIONS for _ in methods]


def test_fp16_on_the_cpu_shows_no_scheduler_warning_for_the_steps_the_scaler_skips(run):
    """fp16's GradScaler skips the optimiser step whose gradients overflowed (its first steps); torch's
    "lr_scheduler.step() before optimizer.step()" warning for them is expected and not shown."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary, _, scalers = run("simcse", "fp16", "none")
    assert summary.status == "ok"
    assert scalers[0].get_scale() < 2.0 ** 16  # the scaler did skip a step (its scale came down from 2^16)
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)], [str(w.message) for w in caught]
