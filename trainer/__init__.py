"""The trainer worker: one training run from a config (SimCSE, MoCoSE, GS-InfoNCE, MixCSE).

    from trainer import RunConfig, train
    summary = train(RunConfig.from_yaml("run.yaml"), report=print)

Importing the package is light; torch and transformers load when `train` is first called.
It never imports Ray or Optuna.
"""

from trainer.config import RunConfig
from trainer.errors import UserError


def train(config, report=None, host_reads=None, on_step=None):
    """Train one model; see `trainer.train.train` (`on_step(step)` is called after each optimiser step)."""
    from trainer.train import train as _train

    return _train(config, report, host_reads=host_reads, on_step=on_step)


__all__ = ["RunConfig", "UserError", "train"]
