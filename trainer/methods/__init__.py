"""Methods: one object per method (solo-learn's shape), found by name in a registry, so the training loop never
asks which it runs; the same registry holds a researcher's own methods (plugins).

    method_class("simcse")          # the nn.Module class of a registered method (trainer.method_rules)

Each method class (`base.Method`, the public base class of the built-in methods and of plugins) owns its modules,
computes its loss on a batch (`loss`), does what follows the optimiser step (`after_step`: the EMA update and
the queue push for MoCoSE), and reports its log values and summary fields. What it declares (name, label,
config section, rules, readings) is registered and read without torch in trainer.method_rules, so the sweep
driver resolves configs without importing torch: this package's own names (Method, SimCSE, ...) are imported on
first use. `plugins` imports a researcher's plugin files and modules (torch-free itself).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Method": "trainer.methods.base", "NegativeBlocks": "trainer.methods.base", "StepOutput": "trainer.methods.base",
    "SimCSE": "trainer.methods.simcse", "GSInfoNCE": "trainer.methods.simcse", "MixCSE": "trainer.methods.simcse",
    "MoCoSE": "trainer.methods.mocose",
}


def method_class(name: str) -> type:
    """The nn.Module class of a registered method (`simcse`, `gs`, `mix`, `mocose`, a plugin's); an unknown name
    raises the registry's ValueError."""
    from trainer.method_rules import method_entry

    return method_entry(name).implementation()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trainer.methods' has no attribute {name!r}")


__all__ = ["GSInfoNCE", "Method", "MixCSE", "MoCoSE", "NegativeBlocks", "SimCSE", "StepOutput", "method_class"]
