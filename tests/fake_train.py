"""A fast stand-in for trainer.train (`SWEEP_TRAIN_FN=tests.fake_train:train`): no model, no data.

Each trial "trains" for $FAKE_TRAIN_STEPS steps of $FAKE_TRAIN_STEP_S seconds, reporting dev_stsb after
each step, and returns a summary whose score is a function of the config (so results can be checked).
A config with optim.lr >= 1 "diverges"; a model path containing "raise" raises.

    >>> train(RunConfig.from_dict({...}), report=print)   # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from typing import Any


def train(config: Any, report: Any = None) -> dict[str, Any]:
    steps = int(os.environ.get("FAKE_TRAIN_STEPS", "3"))
    step_s = float(os.environ.get("FAKE_TRAIN_STEP_S", "0.2"))
    data = config.to_dict()
    if "raise" in str(data.get("model")):
        raise RuntimeError("the fake trainer was asked to raise")
    lr = float((data.get("optim") or {}).get("lr") or 0.0)
    score = 50.0 + 10.0 * float((data.get("ema") or {}).get("decay") or 0.0) + int(data.get("seed") or 0) / 100
    for step in range(1, steps + 1):
        time.sleep(step_s)
        if report is not None:
            report({"step": step, "loss": 1.0 / step, "dev_stsb": score * step / steps})
    if lr >= 1.0:
        return {"status": "diverged", "reason": "diverged: loss became nan", "steps": steps}
    return {"status": "ok", "reason": None, "steps": steps, "best_step": steps, "best_dev_stsb": score,
            "test": {"STSBenchmark": score - 1, "avg": score - 1}}
