"""Every private name of Optuna this project uses, and why; nothing else in the project reaches past Optuna's
public API. tests/sweep/test_private_apis.py checks that each name below still exists on the installed
Optuna, and that the installed version is one of CHECKED_ON: a new Optuna fails that test until each use is
checked again and its series added.

- `optuna.storages._rdb.models`: the SQLAlchemy models of RDBStorage's tables (trials, their parameters, user and
  system attributes, values, intermediate values; TrialModel's `_datetime_start_utc` / `_datetime_complete_utc`
  columns). sweep.records.optuna_reads reads a study's trials with a few plain SELECTs over them, where Optuna's
  public read (`get_all_trials`) builds one ORM object per row. `rdb_models()` returns None where the module is
  gone, and the readers then use the public read.
- `Trial._trial_id` / `FrozenTrial._trial_id`: the storage's id of a trial, which the storage's public methods
  (`set_trial_user_attr`, `set_trial_state_values`) and `optuna.Trial(study, trial_id)` take. Optuna has no public
  getter; the public lookup (`get_trial_id_from_study_id_trial_number`) is one more query per trial.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

# the Optuna release series (major.minor) each use above was checked on; pyproject.toml caps Optuna below the next
CHECKED_ON = ("5.0",)
# the dotted names the test resolves on the installed Optuna
PRIVATE_NAMES = (
    "optuna.storages._rdb.models.TrialModel._datetime_start_utc",
    "optuna.storages._rdb.models.TrialModel._datetime_complete_utc",
    "optuna.storages._rdb.models.TrialParamModel",
    "optuna.storages._rdb.models.TrialUserAttributeModel",
    "optuna.storages._rdb.models.TrialSystemAttributeModel",
    "optuna.storages._rdb.models.TrialValueModel.stored_repr_to_value",
    "optuna.storages._rdb.models.TrialIntermediateValueModel.stored_repr_to_intermediate_value",
)


def rdb_models() -> ModuleType | None:
    """Optuna's RDB table models, or None where this Optuna has moved them."""
    try:
        from optuna.storages._rdb import models
    except ImportError:
        return None
    return models


def trial_times_utc(models: ModuleType) -> tuple[Any, Any]:
    """TrialModel's start and completion columns, stored in UTC (`_datetime_start_utc`, `_datetime_complete_utc`)."""
    return models.TrialModel._datetime_start_utc, models.TrialModel._datetime_complete_utc


def trial_id(trial: Any) -> int:
    """The storage's id of an `optuna.Trial` or a `FrozenTrial`."""
    return trial._trial_id
