"""Opening a study for a run: its records opened and read, the plan made from them, and the records brought in
line with the plan.

    ledger = open_study(spec, train_fn, rerun_changed=False, rebuild=False, change=None)

In order: the Optuna storage checked (an unreadable SQLite file rebuilt with `rebuild`), the Optuna study opened
with the study's distributions (Optuna checks them first: a study it refuses leaves study.yaml and its history as
they were), an extension recorded in the study's history, study.yaml written, trials a dead driver left RUNNING
marked FAIL ("interrupted"); then every planned trial's records read: its Optuna attempts, its summary.json (one
read; a damaged one restored from Optuna, or its folder set aside and the trial run again; one cleared by a
re-run that was stopped restored from Optuna), trials ended under a former key moved to their keys
(sweep.records.resume.take_former_keys). sweep.run.plan.plan_study makes the plan from them; verdicts Optuna lacks
are recorded, trials.csv written, re-runs for weights marked (trials/<key>/weights.wanted until their weights
are back), and the plan printed. The study file a run reads is recorded as the Optuna study's user attribute
`study_file`, which `sweep export` names when it tells how to get a trial's weights back.
"""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from sweep.records.history import keep_weights_changed, record_change
from sweep.records.mirror import OptunaMirror, infer_distributions, rebuild_storage
from sweep.records.resume import FormerKeys, decide, take_former_keys
from sweep.records.seed_means import SeedMeans, uses_seed_means
from sweep.records.store import StudyFolder, TrialsTable, is_final, sweep_state
from sweep.records.weights import WeightKeeper
from sweep.run.ledger import Ledger, number_or_none
from sweep.run.plan import (
    REPLACED,
    WEIGHTS_WANTED,
    StudyPlan,
    WeightsOnDisk,
    kept_trials,
    plan_study,
    planned_trials,
)
from sweep.run.progress import Progress
from sweep.spec import StudySpec, Trial, keep_expansion
from sweep.text import hide_password, plural
from trainer.methods.plugins import plugin_digests, plugin_sources
from trainer.provenance import code_state, short_commit
from trainer.summary import Summary, summary_from_attrs
from trainer.vocabulary import OK, TrialState

# The user attributes of the study's Optuna trials that planning reads (sweep.records.resume.decide, the plan's tpe
# asks, trials.csv's rows); a trial's full record is read where it is restored from Optuna (read_summaries).
PLANNING_ATTRS = ("status", "reason", "asked")


def open_study(spec: StudySpec, train_fn: str, rerun_changed: bool = False, rebuild: bool = False,
               change: Any = None) -> Ledger:
    """Open the study's records, plan the run and return its ledger (module docstring). `change`: the
    sweep.records.history.StudyChange when this run extends the recorded study, else None."""
    # What is alive now (the study and its expanded trials) is left out of the collections the reads trigger, which
    # would otherwise scan it each time; the collector sees it again once the study is open.
    gc.freeze()
    try:
        return _open(spec, train_fn, rerun_changed, rebuild, change)
    finally:
        gc.unfreeze()


def _open(spec: StudySpec, train_fn: str, rerun_changed: bool, rebuild: bool, change: Any) -> Ledger:
    folder = StudyFolder(spec.study_dir)
    rebuild_storage(spec.storage_url, rebuild, spec.path or "STUDY", spec.search, folder.set_aside)
    keep_changed = keep_weights_changed(spec)  # read before study.yaml records the new value
    folder.path.mkdir(parents=True, exist_ok=True)  # the default SQLite storage lives in it
    planned = planned_trials(spec)  # tpe: none yet (its asks are read from Optuna below)
    distributions = study_distributions(spec, planned)
    commit = git_commit()
    mirror = OptunaMirror(spec, spec.storage_url, distributions,
                          common_attrs={"driver_commit": commit} if commit else {})
    seed_means = SeedMeans(spec, mirror.storage, distributions) if uses_seed_means(spec) else None
    note = ""
    if change is not None:
        record_change(folder, change, extend=bool(change.changed))
        note = f"study {spec.name} extended: {', '.join(change.added + change.changed)}"
    folder.write_study_yaml(spec)
    keep_expansion(spec)  # the next run of this study reads its trials back (sweep.spec.expansion_file)
    _record_study_file(spec, folder, mirror)
    stale = mirror.fail_interrupted()

    attempts = mirror.trials_by_key(user_attrs=PLANNING_ATTRS)
    former = take_former_keys(folder, planned, attempts)  # moved to their keys first: recorded below
    configurations = [params for _, params in seed_means.asked()] if seed_means is not None else []
    if not spec.search.expands:
        planned = planned_trials(spec, attempts, configurations)
    summaries = read_summaries(folder, planned, attempts, mirror.full_user_attrs)
    plan = plan_study(spec, attempts, summaries, distributions=distributions, configurations=configurations,
                      stored_configs=_stored_configs(folder, planned, attempts, summaries),
                      weights=weights_on_disk(spec, folder, summaries, keep_changed, every_ok=rerun_changed),
                      rerun_changed=rerun_changed)

    table = TrialsTable(folder, list(spec.parameters))
    _record_done(plan, attempts, folder, mirror, table)
    if seed_means is not None:  # seeds that ended before: their configurations told when complete
        seed_means.tell_ended(table.rows, dict(plan.ended))
    for key in plan.restoring:
        (folder.trial_dir(key) / WEIGHTS_WANTED).touch()
    for key in kept_trials(spec, plan.ended):  # a kept trial whose weights are back loses its mark
        if folder.model_dir(key).is_dir():
            (folder.trial_dir(key) / WEIGHTS_WANTED).unlink(missing_ok=True)
    keeper = WeightKeeper(folder, spec.keep_weights, spec.metric.name, spec.metric.goal)
    for key, state in keeper.scan(dict(plan.ended)).items():
        table.update(key, weights=state)
    table.write()

    progress = Progress(plan.total, spec.metric.name, spec.metric.goal, skipped=plan.skipped)
    _print_plan(spec, plan, progress, rerun_changed, len(stale), former, note, folder)
    for key, row in table.rows.items():
        if row["state"] == TrialState.COMPLETE:
            progress.offer_best(key, number_or_none(row.get(spec.metric.name)))
    return Ledger(spec, plan, folder, mirror, table, progress, keeper, seed_means, train_fn,
                  plugin_digests(spec.plugin_sources()), plugin_sources(spec.plugin_sources()))


def _record_done(plan: StudyPlan, attempts: Mapping[str, Sequence[Any]], folder: StudyFolder, mirror: OptunaMirror,
                 table: TrialsTable) -> None:
    """Every planned trial's trials.csv row; a trial that ended before gets its verdict (a verdict Optuna lacks is
    recorded there first), in the study's order."""
    done, to_record = set(plan.done), set(plan.to_record)
    for key, trial in plan.trials.items():
        row = table.add(trial)
        if key not in done:
            continue
        summary = plan.ended.get(key)
        if key in to_record:
            number, state = mirror.add_finished(trial, summary, folder.read_metrics(key))
            row.update(state=state, optuna_trial=number)
            table.set_summary(key, summary)
            continue
        last = [a for a in attempts[key] if is_final(a)][-1]
        row.update(state=sweep_state(last.state), optuna_trial=last.number)
        if summary is not None:
            table.set_summary(key, summary)
        else:
            row.update(status=last.user_attrs.get("status"), reason=last.user_attrs.get("reason"))


def study_distributions(spec: StudySpec, planned: Sequence[Trial]) -> dict[str, Any]:
    """Optuna distributions of the swept parameters: the sampler's (random, tpe: the spec's search space), and
    for grid values and derived (expr) values, ranges/choices inferred from the planned trials."""
    space = spec.search.distributions(spec)
    rest = [name for name in spec.parameters if name not in space]
    space.update(infer_distributions(list(planned), rest))
    return space


def read_summaries(folder: StudyFolder, planned: Sequence[Trial], attempts: Mapping[str, Sequence[Any]],
                   user_attrs: Callable[[Any], dict[str, Any]] = lambda attempt: dict(attempt.user_attrs)
                   ) -> dict[str, Summary | None]:
    """key -> each planned trial's summary.json (one read each), None where it has none. A damaged file is never
    read as "no result": with a final attempt in Optuna it is set aside and rebuilt from that attempt's user
    attributes (`user_attrs`: all of them, of an attempt read with only some), the key staying done; without one,
    the trial's folder is set aside and the trial runs again. A finished trial whose re-run was stopped (the re-run
    cleared its files) gets its summary back from Optuna."""
    summaries: dict[str, Summary | None] = {}
    for trial in planned:
        key = trial.key
        final = [a for a in attempts.get(key, ()) if is_final(a)]
        summary, problem = folder.read_summary_checked(key)
        if problem:
            _damaged_summary(folder, key, problem, final[-1] if final else None, user_attrs)
            summary = folder.read_summary(key)  # restored from Optuna, or set aside
        if summary is None and final and _rerun_was_stopped(folder, key):
            summary = _summary_of_stopped_rerun(folder, key, final[-1], user_attrs)
        summaries[key] = summary
    return summaries


def weights_on_disk(spec: StudySpec, folder: StudyFolder, summaries: Mapping[str, Summary | None],
                    keep_changed: bool, every_ok: bool = False) -> WeightsOnDisk:
    """What the folders hold about the weights of the trials the study keeps (sweep.run.plan.WeightsOnDisk): of
    the ones kept_trials picks among `summaries` (the plan's ended trials are these unless --rerun-changed
    takes some out, when `every_ok` looks at every trial that ended ok)."""
    if spec.keep_weights == 0:
        return WeightsOnDisk(keep_changed=keep_changed)
    present = {key: summary for key, summary in summaries.items() if summary is not None}
    keys = [key for key, s in present.items() if s.status == OK] if every_ok else kept_trials(spec, present)
    return WeightsOnDisk(saved=frozenset(key for key in keys if folder.model_dir(key).is_dir()),
                         wanted=frozenset(key for key in keys if (folder.trial_dir(key) / WEIGHTS_WANTED).is_file()),
                         keep_changed=keep_changed)


def _stored_configs(folder: StudyFolder, planned: Sequence[Trial], attempts: Mapping[str, Sequence[Any]],
                    summaries: Mapping[str, Summary | None]) -> dict[str, dict[str, Any] | None]:
    """key -> config.yaml of each finished trial whose summary holds no config (the plan compares them)."""
    out = {}
    for trial in planned:
        summary = summaries.get(trial.key)
        if summary is not None and isinstance(summary.config, dict):
            continue
        if decide(list(attempts.get(trial.key, ())), summary) != "run":
            out[trial.key] = folder.read_config(trial.key)
    return out


def _record_study_file(spec: StudySpec, folder: StudyFolder, mirror: OptunaMirror) -> None:
    """The study file this run reads, as the Optuna study's user attribute study_file: `sweep export`
    names it in its advice (the results folder's study.yaml is the record of the last run, not recorded)."""
    if not spec.path:
        return
    path = str(Path(spec.path).resolve())
    if path != str(folder.study_yaml) and mirror.study.user_attrs.get("study_file") != path:
        mirror.study.set_user_attr("study_file", path)


def _rerun_was_stopped(folder: StudyFolder, key: str) -> bool:
    """Whether a finished trial without summary.json had started a re-run that never ended: one for its
    weights (marked), or one that set its files aside (--rerun-changed)."""
    trial_dir = folder.trial_dir(key)
    return (trial_dir / WEIGHTS_WANTED).is_file() or any(trial_dir.glob(f"summary.json.{REPLACED}-*"))


def _summary_of_stopped_rerun(folder: StudyFolder, key: str, final: Any,
                              user_attrs: Callable[[Any], dict[str, Any]]) -> Summary | None:
    """A finished trial whose re-run was stopped: its summary.json back from the final Optuna attempt, so that
    it stays recorded as it was and runs again when asked."""
    if sweep_state(final.state) is not TrialState.COMPLETE:
        return None
    folder.write_summary(key, summary_from_attrs(user_attrs(final)))
    if (folder.trial_dir(key) / WEIGHTS_WANTED).is_file():
        print(f"trial {key}: its re-run for its weights was stopped; results restored from Optuna trial "
              f"{final.number}, the re-run starts again", flush=True)
    else:
        print(f"trial {key}: its re-run (--rerun-changed) was stopped; results restored from Optuna trial "
              f"{final.number}", flush=True)
    return folder.read_summary(key)


def _damaged_summary(folder: StudyFolder, key: str, problem: str, final: Any,
                     user_attrs: Callable[[Any], dict[str, Any]]) -> None:
    path = folder.summary_path(key)
    if final is not None:
        aside = folder.set_aside(path)
        folder.write_summary(key, summary_from_attrs(user_attrs(final)))
        print(f"trial {key}: {path} {problem}; kept as {aside.name}, results restored from Optuna trial "
              f"{final.number}", flush=True)
    else:
        aside = folder.set_aside(folder.trial_dir(key))
        print(f"trial {key}: {path} {problem}; its folder kept as {aside}, the trial runs again", flush=True)


def _print_plan(spec: StudySpec, plan: StudyPlan, progress: Progress, rerun_changed: bool, stale: int,
                former: FormerKeys, note: str, folder: StudyFolder) -> None:
    say = progress.say
    parts = [f"study {spec.name}: {len(plan.trials) + plan.asks_left * len(spec.seeds)} trials"]
    if plan.skipped:
        parts.append(f"{plan.skipped} already ended (skipped)")
    if stale:
        parts.append(f"{stale} left running by an earlier driver marked FAIL (interrupted)")
    parts.append(f"{progress.total} to run")
    say(", ".join(parts))
    rerun = "re-running them, their old results kept beside as *.replaced-* (--rerun-changed)"
    kept = "their results are kept and sweep analyze analyses them apart; add --rerun-changed to re-run them"
    if plan.changed:
        fields = ", ".join(sorted({f for fs in plan.changed.values() for f in fs}))
        what = ("re-running them (--rerun-changed)" if rerun_changed else
                "their results are kept; add --rerun-changed to re-run them")
        say(f"study {spec.name}: {len(plan.changed)} finished trials would now resolve differently ({fields}); {what}")
    if plan.older_reading:
        changes = "; ".join(dict.fromkeys(c for cs in plan.older_reading.values() for c in cs))
        say(f"study {spec.name}: {plural(len(plan.older_reading), 'finished trial')} ran under an older reading of "
            f"the papers ({changes}); {rerun if rerun_changed else kept}")
    if plan.other_code:
        say(f"study {spec.name}: {plural(len(plan.other_code), 'finished trial')} ran on another code state "
            f"({', '.join(sorted(set(plan.other_code.values())))}) than this one "
            f"({short_commit({'code': code_state()})}); {rerun if rerun_changed else kept}")
    if former.adopted:
        say(f"study {spec.name}: {former.describe()}")
    if plan.restoring:
        say(f"study {spec.name}: running {plural(len(plan.restoring), 'finished trial')} again to save the weights "
            f"keep_weights: {spec.to_dict()['keep_weights']} keeps (deleted when better trials ended, or never saved)")
    if note:
        say(note + " (see study_history.yaml)")
    say(f"results: {folder.path}  optuna: {hide_password(spec.storage_url)}")


_GIT_COMMIT: list[str | None] = []


def git_commit() -> str | None:
    """The project's git commit (with "-dirty" for uncommitted changes), or None outside a checkout."""
    if not _GIT_COMMIT:
        repo = Path(__file__).resolve().parents[2]
        try:
            out = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=40"],
                                 capture_output=True, text=True, timeout=10)
            _GIT_COMMIT.append(out.stdout.strip() or None if out.returncode == 0 else None)
        except (OSError, subprocess.SubprocessError):
            _GIT_COMMIT.append(None)
    return _GIT_COMMIT[0]
