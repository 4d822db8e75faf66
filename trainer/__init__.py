"""The trainer worker: one training run from a config (SimCSE, MoCoSE, GS-InfoNCE, MixCSE).

    from trainer import RunConfig, train
    summary = train(RunConfig.from_yaml("run.yaml"), report=print)

Importing the package is light; torch and transformers load when `train` is first called.
It never imports Ray or Optuna.
"""

from trainer.config import RunConfig
from trainer.errors import UserError


def train(config, report=None):
    """Train one model; see `trainer.train.train`."""
    from trainer.train import train as _train

    return _train(config, report)


__all__ = ["RunConfig", "UserError", "train"]
