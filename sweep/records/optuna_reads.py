"""Reading a study's trials back from Optuna's RDB storage fast: what `sweep status` and the resume plan
read once per command.

Optuna's own read (`RDBStorage.get_all_trials`) builds one ORM object per row. `read_trials` returns the same
FrozenTrials from five plain SELECTs over Optuna's own tables (its private table models:
sweep.records.optuna_private); it falls back to Optuna's read if a later Optuna moves them, and
tests/sweep/records/test_bookkeeping_scale.py checks it against Optuna's read field by field on the pinned version.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Collection, Iterator
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from sweep.records.optuna_private import rdb_models, trial_times_utc


def read_trials(storage: optuna.storages.RDBStorage, study_id: int,
                states: tuple[TrialState, ...] | None = None,
                user_attrs: Collection[str] | None = None) -> list[FrozenTrial]:
    """The study's trials (those in `states`, default all), in number order: what
    `storage.get_all_trials(study_id, deepcopy=False)` returns, read in five plain SELECTs over Optuna's own
    tables instead of one ORM object per row (bench/bookkeeping_scale.py measures both). Falls back to Optuna's
    read if its tables change. `user_attrs`: only these user attributes are read (a trial's full record, which
    the mirror also keeps there, is most of what a read of every trial costs); None: all."""
    try:
        with _cyclic_gc_paused():
            return _read_trials_core(storage, study_id, states, user_attrs)
    except (ImportError, AttributeError):  # a later Optuna renamed its models: its own (slower) read
        trials = storage.get_all_trials(study_id, deepcopy=False, states=states)
        return sorted(trials, key=lambda t: t.number)


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector off while a read builds its rows: they are many new dicts and values, none
    in a cycle, and each collection they would trigger scans every object the process holds (the study's
    expanded configs too). Reference counting still frees everything; the collector is back on (and runs as
    usual) afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def first_distributions(storage: optuna.storages.RDBStorage, study_id: int) -> dict[str, tuple[int, BaseDistribution]]:
    """Parameter name -> (number, distribution) of the study's first trial that has it: what a new trial's
    distribution must be compatible with. One SELECT over the parameters, not a read of every trial."""
    try:
        import sqlalchemy
        from optuna.distributions import json_to_distribution

        models = rdb_models()
        param, trial = models.TrialParamModel, models.TrialModel
        query = (sqlalchemy.select(param.param_name, trial.number, param.distribution_json)
                 .join(trial, trial.trial_id == param.trial_id).where(trial.study_id == study_id)
                 .order_by(trial.number, param.param_id))
        with storage.engine.connect() as connection:
            rows = connection.execute(query).all()
        first: dict[str, tuple[int, str]] = {}
        for name, number, text in rows:
            first.setdefault(name, (number, text))
        return {name: (number, json_to_distribution(text)) for name, (number, text) in first.items()}
    except (ImportError, AttributeError):  # a later Optuna renamed its models
        out: dict[str, tuple[int, BaseDistribution]] = {}
        for frozen in read_trials(storage, study_id):
            for name, distribution in frozen.distributions.items():
                out.setdefault(name, (frozen.number, distribution))
        return out


def _read_trials_core(storage: optuna.storages.RDBStorage, study_id: int, states: tuple[TrialState, ...] | None,
                      user_attrs: Collection[str] | None = None) -> list[FrozenTrial]:
    import datetime

    import sqlalchemy
    from optuna.distributions import json_to_distribution

    models = rdb_models()
    trial_table = models.TrialModel
    of_study = trial_table.study_id == study_id
    if states is not None:
        of_study = sqlalchemy.and_(of_study, trial_table.state.in_(states))
    ids = sqlalchemy.select(trial_table.trial_id).where(of_study)

    def local(utc: datetime.datetime | None) -> datetime.datetime | None:  # as TrialModel.datetime_start
        if utc is None:
            return None
        return utc.replace(tzinfo=datetime.timezone.utc).astimezone().replace(tzinfo=None)

    def children(model: Any, *columns: Any, keys: Collection[str] | None = None) -> list[Any]:
        query = sqlalchemy.select(model.trial_id, *columns).where(model.trial_id.in_(ids))
        if keys is not None:
            query = query.where(model.key.in_(list(keys)))
        return connection.execute(query.order_by(*[c for c in model.__table__.primary_key.columns])).all()

    with storage.engine.connect() as connection:
        rows = connection.execute(sqlalchemy.select(
            trial_table.trial_id, trial_table.number, trial_table.state, *trial_times_utc(models))
            .where(of_study).order_by(trial_table.trial_id)).all()
        fields: dict[int, dict[str, Any]] = {
            row[0]: {"number": row[1], "state": row[2], "start": local(row[3]), "complete": local(row[4]),
                     "params": {}, "distributions": {}, "user_attrs": {}, "system_attrs": {},
                     "intermediate": {}, "values": {}} for row in rows}
        for trial_id, name, value, text in children(models.TrialParamModel, models.TrialParamModel.param_name,
                                                    models.TrialParamModel.param_value,
                                                    models.TrialParamModel.distribution_json):
            distribution = json_to_distribution(text)
            fields[trial_id]["distributions"][name] = distribution
            fields[trial_id]["params"][name] = distribution.to_external_repr(value)
        for model, target, keys in ((models.TrialUserAttributeModel, "user_attrs", user_attrs),
                                    (models.TrialSystemAttributeModel, "system_attrs", None)):
            attrs = children(model, model.key, model.value_json, keys=keys)
            for (trial_id, key, _), value in zip(attrs, _json_values([text for _, _, text in attrs])):
                fields[trial_id][target][key] = value
        value_model = models.TrialValueModel
        for trial_id, objective, value, kind in children(value_model, value_model.objective, value_model.value,
                                                         value_model.value_type):
            fields[trial_id]["values"][objective] = value_model.stored_repr_to_value(value, kind)
        step_model = models.TrialIntermediateValueModel
        for trial_id, step, value, kind in children(step_model, step_model.step, step_model.intermediate_value,
                                                    step_model.intermediate_value_type):
            fields[trial_id]["intermediate"][step] = step_model.stored_repr_to_intermediate_value(value, kind)
    trials = [
        FrozenTrial(number=f["number"], state=f["state"], value=None, datetime_start=f["start"],
                    datetime_complete=f["complete"], params=f["params"], distributions=f["distributions"],
                    user_attrs=f["user_attrs"], system_attrs=f["system_attrs"], intermediate_values=f["intermediate"],
                    trial_id=trial_id, values=[f["values"][i] for i in sorted(f["values"])] or None)
        for trial_id, f in fields.items()
    ]
    return sorted(trials, key=lambda t: t.number)


def _json_values(texts: list[str]) -> list[Any]:
    """json.loads of each text (one JSON document each, as Optuna stores an attribute), parsed as one array: one
    call into the C parser instead of one per attribute. Texts that are no such documents: each on its own (its
    error raised as before)."""
    try:
        values = json.loads("[" + ",".join(texts) + "]")
    except ValueError:
        values = None
    return values if isinstance(values, list) and len(values) == len(texts) else [json.loads(t) for t in texts]


def group_by_key(trials: list[FrozenTrial]) -> dict[str, list[FrozenTrial]]:
    """Trials (in number order) grouped by their `key` user attr, oldest first; trials without one left out."""
    out: dict[str, list[FrozenTrial]] = {}
    for frozen in trials:
        key = frozen.user_attrs.get("key")
        if key:
            out.setdefault(key, []).append(frozen)
    return out
