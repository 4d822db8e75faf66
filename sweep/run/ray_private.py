"""Every private name of Ray this project uses, and why; nothing else in sweep/ reaches past Ray's public API.
tests/sweep/test_private_apis.py checks that each name in PRIVATE_NAMES still exists on the installed Ray and
that the installed version is one of CHECKED_ON: a new Ray fails that test until each use is checked again.

- `ray._private.worker.print_to_stdstream` (route_cluster_errors_to_log): the printer of the lines the cluster
  sends to the driver. Wrapped so that the raylet's messages (a node marked dead) go to ray.log and the terminal
  gets the sweep's own one line.
- `ray.air._internal.usage.tag_callbacks` (skip_tracker_imports_in_tune_usage_tag): Tune's usage tag, which
  imports every tracker integration to name its callbacks. Wrapped to skip the tag where it would import an
  installed tracker the study does not use.
- `WandbLoggerCallback._logger_actor_cls` (wandb_logger_actor): the actor class that writes a trial's W&B run.
  Subclassed so that each run is finished and flushed before Ray kills the actor (sweep.run.trackers).
- `ray.shutdown`'s own code object (sweep.run.ray_session.shutdown_ray): a profile hook re-asserts the driver's
  signal handlers before each call ray.shutdown makes, because the core worker's destructor resets SIGTERM.
  This reads only `inspect.unwrap(ray.shutdown).__code__`, a public function's code, and relies on how its body
  is written.

Each wrapper does nothing where its name is gone.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
from typing import Any

# the Ray release series (major.minor) each use above was checked on; pyproject.toml caps Ray below the next
CHECKED_ON = ("2.60",)
# the dotted names the test resolves on the installed Ray
PRIVATE_NAMES = (
    "ray._private.worker.print_to_stdstream",
    "ray.air._internal.usage.tag_callbacks",
    "ray.air.integrations.wandb.WandbLoggerCallback._logger_actor_cls",
)


def route_cluster_errors_to_log(logger: logging.Logger) -> None:
    """The cluster's error messages to the driver ("The node with node id ... has been marked dead ...",
    printed by Ray as `(raylet) ...` whatever log_to_driver says) go to ray.log: the terminal gets our one
    line naming the node and the trials that run again (sweep.run.node_watch). Ray's printer is looked up by
    name at each message, so wrapping it is enough; nothing changes if Ray renames it."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return
    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is None or hasattr(printer, "__wrapped__"):
        return

    @functools.wraps(printer)
    def to_log_if_from_the_cluster(data: dict, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict) and data.get("pid") == "raylet":
            for line in data.get("lines") or []:
                logger.warning("(cluster) %s", line)
            return None
        return printer(data, *args, **kwargs)

    ray_worker.print_to_stdstream = to_log_if_from_the_cluster


# Packages Ray Tune's callback usage tag imports (through its W&B, MLflow, Comet and Aim integrations).
TRACKER_PACKAGES = ("wandb", "mlflow", "comet_ml", "aim")


def skip_tracker_imports_in_tune_usage_tag() -> None:
    """Keep Ray Tune from importing wandb and mlflow for its usage statistics when a study logs to neither.

    Before the first trial, Tune tags its usage statistics with the callbacks a run was given
    (ray.air._internal.usage.tag_callbacks). To know its own callbacks' class names it imports its W&B,
    MLflow, Comet and Aim integrations, and they import those packages when they are installed (the
    `--dev` set-up installs wandb and mlflow): driver time before the first trial starts, for a study that uses
    neither. The tag is recorded as before when the packages are already imported (a study with
    `loggers: [wandb]` or `[mlflow]`) or not installed; otherwise it is skipped. Nothing changes if Ray renames
    or moves the function (this then does nothing)."""
    try:
        from ray.air._internal import usage
    except ImportError:
        return
    tag_callbacks = getattr(usage, "tag_callbacks", None)
    if tag_callbacks is None or hasattr(tag_callbacks, "__wrapped__"):
        return

    @functools.wraps(tag_callbacks)
    def tag_unless_it_imports_a_tracker(callbacks: Any) -> Any:
        if any(would_import(package) for package in TRACKER_PACKAGES):
            return False  # what tag_callbacks returns when it records nothing
        return tag_callbacks(callbacks)

    usage.tag_callbacks = tag_unless_it_imports_a_tracker


def would_import(package: str) -> bool:
    """True when `package` is installed but not imported yet."""
    if package in sys.modules:
        return False
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def wandb_logger_actor(callback_cls: Any, mixin: type) -> None:
    """Make the W&B logger callback class `callback_cls` start its runs' actors as `mixin` over Ray's own actor
    class (its private `_logger_actor_cls`)."""
    actor = callback_cls._logger_actor_cls
    callback_cls._logger_actor_cls = type(actor.__name__, (mixin, actor), {})
