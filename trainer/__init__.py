"""The trainer worker: one training run from a config (SimCSE, MoCoSE, GS-InfoNCE, MixCSE).

    from trainer import RunConfig, train
    summary = train(RunConfig.from_yaml("run.yaml"), report=print)

Importing the package is light; torch and transformers load when `train` is first called.
It never imports Ray or Optuna.
"""

from trainer.config import RunConfig
from trainer.errors import UserError


def train(config, report=None, host_reads=None, on_step=None):
    """Train one model as `config` (a `RunConfig`) says and return its summary; `trainer.train.train` is the
    function this calls (imported here on first use, so that `import trainer` needs no torch).

    `report(metrics)` receives each evaluation's metrics as a dict while the run goes on (the sweep passes
    them to Ray Tune and Optuna); `on_step(step)` is called after each optimiser step; `host_reads` sets how
    often the loss is read back for the NaN/inf check (default: the device's). A config mistake raises
    `UserError`; a run that diverges or collapses is not an error: the summary's `status` says so.
    """
    from trainer.train import train as _train

    return _train(config, report, host_reads=host_reads, on_step=on_step)


__all__ = ["RunConfig", "UserError", "train"]
