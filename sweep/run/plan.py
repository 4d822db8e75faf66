"""The plan of one `sweep run`, a value: which trials the study has, which of them already ended, which run now.

    plan = plan_study(spec, attempts, summaries, distributions=...)   # pure: reads no file, opens no storage
    plan.to_run, plan.done, plan.to_record, plan.changed, ...         # a frozen StudyPlan

`attempts` is key -> the key's Optuna attempts, oldest first (FrozenTrial-like: state, number, user_attrs,
params); `summaries` key -> its trial's summary.json as read (None: no file). sweep.run.opening reads both, opens
the records, and acts on the plan; the run's progress is sweep.run.ledger's.

The trials: a grid or random study's expansion; a tpe study's trials are its asks, so the plan holds those of
earlier runs (every seed of each configuration asked before: the study's own asked trials, and `configurations`,
the parameter sets asked in its seed-means study) and `asks_left`, the asks still to make.

The resume rule is sweep.records.resume.decide's (skip, record or run each key, shared with `--dry-run` and
`sweep status`). A finished trial that would now resolve differently (`changed`), ran under an older reading of
the papers (`older_reading`) or on another code state (`other_code`) is kept, or, with `rerun_changed`, run again
(`replacing`).

Weights the study keeps again (`restoring`): when keep_weights changed since the study last ran, every finished
trial the new value keeps (all, or the top k by the study metric) that ended ok with a best-dev state but has no
trials/<key>/model/ runs again with its own config and saves them; so does one marked weights.wanted (a re-run
for its weights that a stop cut short). `weights` tells the plan what the folders hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from sweep.records.resume import decide
from sweep.spec import StudySpec, Trial, expansion, planning_config, trial_from_params
from trainer.files import flatten
from trainer.provenance import other_code_state
from trainer.summary import Summary, metric_value, older_reading
from trainer.vocabulary import OK

WEIGHTS_WANTED = "weights.wanted"  # trials/<key>/<this>: the trial runs again until its weights are back
REPLACED = "replaced"  # trials/<key>/summary.json.replaced-<time>: a finished trial's record before its re-run

# Config fields the trial feed sets for the run (sweep.run.ledger.Ledger.next_job), not part of what the trial
# computes: where its files go and whether it saves its encoder (the study's keep_weights). A change of either
# never makes a finished trial "resolve differently".
RUN_FIELDS = ("output_dir", "save_model")


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class WeightsOnDisk:
    """What the trial folders hold about saved weights: `saved`, keys with trials/<key>/model/; `wanted`, keys
    marked weights.wanted; `keep_changed`, whether keep_weights changed since the study last ran."""

    saved: frozenset[str] = frozenset()
    wanted: frozenset[str] = frozenset()
    keep_changed: bool = False


@dataclass(frozen=True)
class StudyPlan:
    """One run's plan (module docstring). Read it; nothing changes it (the ledger copies what it hands out)."""

    trials: Mapping[str, Trial]  # key -> trial: every trial known when planning, in the study's order
    to_run: tuple[Trial, ...]  # what the run hands out, in order (the re-runs for weights last)
    done: tuple[str, ...]  # keys that ended before (Optuna holds their verdict, or it is recorded now)
    to_record: tuple[str, ...]  # of `done`: verdicts summary.json holds and Optuna does not (the driver died)
    ended: Mapping[str, Summary]  # key -> summary of each trial in `done` that has one, in trial order
    changed: Mapping[str, tuple[str, ...]] = field(default_factory=_frozen)  # key -> fields resolving differently
    older_reading: Mapping[str, tuple[str, ...]] = field(default_factory=_frozen)  # key -> what the reading changed
    other_code: Mapping[str, str] = field(default_factory=_frozen)  # key -> the other code state it ran on
    replacing: frozenset[str] = frozenset()  # finished keys that run again (--rerun-changed)
    restoring: tuple[str, ...] = ()  # finished keys that run again to save the weights the study keeps
    asks_left: int = 0  # tpe: Optuna asks still to make (each runs once per seed)
    seeds: int = 1
    distributions: Mapping[str, Any] = field(default_factory=_frozen)  # the Optuna study's, by parameter

    @property
    def skipped(self) -> int:
        """Trials that ended before and do not run now."""
        return len(self.done) - len(self.restoring)

    @property
    def total(self) -> int:
        """Trials this run will run (a tpe ask runs once per seed)."""
        return len(self.to_run) + self.asks_left * self.seeds


def plan_study(spec: StudySpec, attempts: Mapping[str, Sequence[Any]], summaries: Mapping[str, Summary | None], *,
               distributions: Mapping[str, Any] | None = None, configurations: Sequence[Mapping[str, Any]] = (),
               stored_configs: Mapping[str, dict[str, Any] | None] | None = None,
               weights: WeightsOnDisk = WeightsOnDisk(), rerun_changed: bool = False) -> StudyPlan:
    """The plan of a run of `spec` from its records (module docstring). `stored_configs`: key -> the trial's
    config.yaml, for a finished trial whose summary holds no config. Pure: the same records give the same plan."""
    trials: dict[str, Trial] = {}
    to_run: list[Trial] = []
    done: list[str] = []
    to_record: list[str] = []
    ended: dict[str, Summary] = {}
    changed: dict[str, tuple[str, ...]] = {}
    older: dict[str, tuple[str, ...]] = {}
    other_code: dict[str, str] = {}
    replacing: set[str] = set()
    for trial in planned_trials(spec, attempts, configurations):
        key = trial.key
        trials[key] = trial
        summary = summaries.get(key)
        action = decide(list(attempts.get(key, ())), summary)  # the one decision, shared with --dry-run and status
        if action != "run":
            stored = summary.config if summary is not None and isinstance(summary.config, dict) else None
            fields = changed_fields(trial, stored if stored is not None else (stored_configs or {}).get(key))
            reading = older_reading(summary)
            code = other_code_state(summary.provenance) if summary is not None else None
            if fields:
                changed[key] = tuple(fields)
            if reading:
                older[key] = tuple(reading)
            if code:
                other_code[key] = code
            if (fields or reading or code) and rerun_changed:
                replacing.add(key)
                to_run.append(trial)
                continue
            done.append(key)
            if action == "record":
                to_record.append(key)
            if summary is not None:
                ended[key] = summary
        else:
            to_run.append(trial)
    # a trial that would now resolve differently runs again only with --rerun-changed (it saves its weights then)
    restoring = tuple(key for key in weights_to_restore(spec, ended, weights)
                      if key not in changed and key not in older and key not in other_code)
    to_run.extend(trials[key] for key in restoring)
    asks_left = 0
    if not spec.search.expands:  # tpe: `budget` asks in all, each run once per seed
        asks_left = max(0, (spec.budget or 1) - asks_made(attempts, configurations))
    return StudyPlan(
        trials=_frozen(trials), to_run=tuple(to_run), done=tuple(done), to_record=tuple(to_record),
        ended=_frozen(ended), changed=_frozen(changed), older_reading=_frozen(older), other_code=_frozen(other_code),
        replacing=frozenset(replacing), restoring=restoring, asks_left=asks_left, seeds=len(spec.seeds),
        distributions=_frozen(distributions))


def planned_trials(spec: StudySpec, attempts: Mapping[str, Sequence[Any]] = MappingProxyType({}),
                   configurations: Sequence[Mapping[str, Any]] = ()) -> list[Trial]:
    """The trials a run of `spec` knows before it starts: the expansion's (grid, random), or every seed of each
    configuration tpe asked in earlier runs (its own asked trials in `attempts`, then `configurations`)."""
    if spec.search.expands:
        # The expansion's own trials: the plan never edits one (the ledger copies a trial's config into its job),
        # so a resume copies no config it does not hand out.
        return list(expansion(spec).trials)
    names = list(spec.parameters)
    asked = [dict(tries[0].params) for tries in attempts.values() if tries and tries[0].user_attrs.get("asked")]
    known: dict[str, Trial] = {}
    for params in [*asked, *configurations]:
        params = {name: params[name] for name in names if name in params}
        for seed in spec.seeds:
            trial = trial_from_params(spec, params, seed)
            if trial is not None:
                known.setdefault(trial.key, trial)
    return list(known.values())


def asks_made(attempts: Mapping[str, Sequence[Any]], configurations: Sequence[Any]) -> int:
    """How many configurations tpe has asked for so far (the refused asks not counted)."""
    own = {t.number for tries in attempts.values() for t in tries if t.user_attrs.get("asked")}
    return len(own) + len(configurations)


def planned_configs(spec: StudySpec) -> list[dict[str, Any]]:
    """Every config the study plans, before anything is resumed (tpe: its planning config with each model the
    study may choose), for the checks of a study's inputs before its folder exists."""
    if spec.search.expands:
        return [t.config for t in planned_trials(spec)]
    return tpe_configs(spec)


def tpe_configs(spec: StudySpec) -> list[dict[str, Any]]:
    """The configs a tpe study may start: its planning config, and that config with each model it may choose."""
    values = spec.parameters.get("model", [])
    models = values.get("choices", []) if isinstance(values, dict) else [v for v in values if isinstance(v, str)]
    base = planning_config(spec)  # the base alone may be no config: a swept key completes it
    return [base] + [{**base, "model": model} for model in models]


def changed_fields(trial: Trial, stored: dict[str, Any] | None) -> list[str]:
    """Fields whose value in the config the trial ran with (`stored`: its summary's, else its config.yaml)
    differs from how it resolves now. A field the stored config lacks (added by a later release, with a default)
    does not count."""
    if stored is None:
        return []
    if _without_run_fields(stored) == _without_run_fields(trial.config):
        return []  # the common case: one dict comparison, nothing flattened
    before, now = flatten(stored), flatten(trial.config)
    return sorted(k for k in now if k in before and k not in RUN_FIELDS and before[k] != now[k])


def kept_trials(spec: StudySpec, ended: Mapping[str, Summary]) -> list[str]:
    """The ended trials whose weights the study's keep_weights keeps: every trial that ended ok with a value of
    the study metric (`all`), or the top k of them (the one that ended first on a tie, as
    sweep.records.weights.WeightKeeper ranks them); `ended`: key -> summary.json, in trial order."""
    if spec.keep_weights == 0:
        return []
    sign = -1.0 if spec.metric.goal == "maximize" else 1.0
    scored = []
    for key, summary in ended.items():
        value = metric_value(summary, spec.metric.name) if summary.status == OK else None
        if value is not None:
            scored.append((value, key))
    scored.sort(key=lambda item: sign * item[0])  # stable: ties stay in trial order
    return [key for _, key in (scored if spec.keep_weights is None else scored[:spec.keep_weights])]


def weights_to_restore(spec: StudySpec, ended: Mapping[str, Summary], weights: WeightsOnDisk) -> list[str]:
    """The finished trials `sweep run` runs again to save their weights (module docstring): the kept trials with
    a best-dev state and no saved model, when keep_weights changed or when a run stopped before they were back."""
    return [key for key in kept_trials(spec, ended)
            if ended[key].best_step is not None and key not in weights.saved
            and (weights.keep_changed or key in weights.wanted)]


def _without_run_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if key not in RUN_FIELDS}
