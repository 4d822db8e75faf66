"""The job of one trial: what the driver's trial feed (sweep.run.feed) hands the worker that runs the trial
(sweep.run.worker).

Owns: TrialJob, a frozen record of plain values (it pickles, for Ray), and its form as a Tune trial config.
Tune carries a trial's config as a dict, to the worker and to the driver's callbacks, so the feed gives Tune
`job.tune_config()` and the worker reads it back with `TrialJob.from_tune_config(config)`. That dict's keys are
also what the driver's callbacks read (sweep.run.trial_events: key, config; sweep.run.node_watch: key;
sweep.run.trackers: key, seed, trial_dir) and what the trackers log as the trial's config (MLflow params, W&B
config: the key, seed, the swept parameters under params/, the trainer config under config/). Also the keys of
what the worker reports to the driver (STEP_KEY, CURVE_KEY, SUMMARY_KEY, ERROR_KEY).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Tune reports results; the trainer's report() keys that become Optuna intermediate values.
STEP_KEY, CURVE_KEY = "step", "dev_stsb"
# The worker's last report: the trial's summary, or the error that ended it.
SUMMARY_KEY, ERROR_KEY = "sweep_summary", "sweep_error"


@dataclass(frozen=True)
class TrialJob:
    """One attempt of one trial, as the worker runs it."""

    key: str  # the trial key: results/<study>/trials/<key>/
    seed: int
    params: dict[str, Any]  # the swept values, by dotted key
    config: dict[str, Any]  # the trainer config (trainer.config.RunConfig.from_dict), output_dir included
    trial_dir: str  # the driver's trials/<key>/ folder
    cwd: str  # the driver's working directory: relative paths of the study mean what they meant there
    train_fn: str  # the train function, "module:function"
    # on a Ray cluster: the receiver of the trial's files and this run's token (sweep.run.trial_files); None on
    # one machine
    files: dict[str, Any] | None
    cpu: float  # the trial's resources, as the study asks for them (Ray's own request is set by the runner)
    gpu: float
    # the study's plugins as the worker imports them (a file's absolute path, a module's name) -> the sha256 of
    # the source the driver imported: the worker refuses a trial whose plugin source differs
    plugins: dict[str, str] = field(default_factory=dict)
    # on a cluster, each plugin file's source as the driver imported it: a node that does not see the driver's disk
    # (or holds another version of the file) imports this text; {} on one machine
    plugin_texts: dict[str, str] = field(default_factory=dict)

    def tune_config(self) -> dict[str, Any]:
        """The job as the Tune trial config (the module docstring); from_tune_config reads it back equal."""
        return {
            "key": self.key, "seed": self.seed, "params": self.params, "config": self.config,
            "trial_dir": self.trial_dir, "cwd": self.cwd, "train_fn": self.train_fn, "files": self.files,
            "resources": {"cpu": self.cpu, "gpu": self.gpu}, "plugins": self.plugins,
            "plugin_texts": self.plugin_texts,
        }

    @classmethod
    def from_tune_config(cls, config: Mapping[str, Any]) -> TrialJob:
        """The job in a Tune trial config made by tune_config (other keys are ignored); KeyError names a key
        it lacks."""
        resources = config["resources"]
        return cls(
            key=config["key"], seed=config["seed"], params=dict(config["params"]), config=dict(config["config"]),
            trial_dir=config["trial_dir"], cwd=config["cwd"], train_fn=config["train_fn"], files=config["files"],
            cpu=float(resources["cpu"]), gpu=float(resources["gpu"]), plugins=dict(config.get("plugins") or {}),
            plugin_texts=dict(config.get("plugin_texts") or {}),
        )
