"""One object per method, in a registry (solo-learn's shape): the training loop never asks which it runs.

    METHODS = {"simcse": SimCSE, "gs": GSInfoNCE, "mix": MixCSE, "mocose": MoCoSE}

Each method class owns its modules, computes its loss on a batch (`loss`), does what follows the optimiser
step (`after_step`: the EMA update and the queue push for MoCoSE), and reports its log values and summary
fields. See `base.Method`. Its config defaults, refusals and precision are declared apart, as data, in
trainer.method_rules (no torch, so a sweep driver resolves configs without it); the class finds them by
its `name` (`Method.rules()`).
"""

from __future__ import annotations

from trainer.method_rules import method_rules
from trainer.methods.base import Method, NegativeBlocks, StepOutput
from trainer.methods.mocose import MoCoSE
from trainer.methods.simcse import GSInfoNCE, MixCSE, SimCSE

METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (SimCSE, GSInfoNCE, MixCSE, MoCoSE)}


def method_class(name: str) -> type[Method]:
    """The registered class for a method name (`simcse`, `gs`, `mix`, `mocose`); an unknown name raises
    method_rules' ValueError."""
    return METHODS[method_rules(name).name]


__all__ = ["METHODS", "Method", "MoCoSE", "GSInfoNCE", "MixCSE", "NegativeBlocks", "SimCSE", "StepOutput",
           "method_class"]
