"""The plan of one `sweep run`: which trials the study has, which of them already ended, which run now.

Owns: StudyPlan, the state a run shares with its trial feed and trial events (the spec, the results
folder, the Optuna mirror, trials.csv, the trials to run, the keeper of saved weights, the progress
line), and `prepare()`, which writes study.yaml, opens the Optuna study, sorts every planned trial into
done and to run, and prints the plan.

The resume rule is sweep.records.resume's (skip, record or run each key, shared with `--dry-run` and `sweep
status`; trials ended under a former key): Optuna trials left RUNNING/WAITING by a dead driver first become FAIL
("interrupted"); a key that runs again does so as a new Optuna trial, so each key ends final exactly once.

Weights the study keeps again (`weights_to_restore`): when `keep_weights` changed since the study last ran,
every finished trial the new value keeps (all, or the top k by the study metric) that ended ok but has no
trials/<key>/model/ (its weights were deleted when better trials ended, or never saved under
`keep_weights: none`) runs again with its own config, as a new Optuna trial of the same key, and saves them.
Each such trial is marked (trials/<key>/weights.wanted) until its weights are back, so a run stopped before
then runs it on the next `sweep run`; a trial whose re-run was stopped gets its summary.json back from
Optuna first (the re-run had cleared it). The study file a run reads is recorded as the Optuna study's user
attribute `study_file`, which `sweep export` names when it tells how to get a trial's weights back.
"""

from __future__ import annotations

import math
import subprocess
from collections import deque
from pathlib import Path
from typing import Any, Mapping

from sweep.records.history import keep_weights_changed, record_change
from sweep.records.mirror import OptunaMirror, infer_distributions, rebuild_storage
from sweep.records.resume import FormerKeys, decide, take_former_keys
from sweep.records.seed_means import SeedMeans, asks_made, tpe_known_trials, uses_seed_means
from sweep.records.store import StudyFolder, TrialsTable, is_final, sweep_state
from sweep.records.weights import WeightKeeper
from sweep.run.progress import Progress
from sweep.spec import StudySpec, Trial, expansion, planning_config
from sweep.text import hide_password, plural
from trainer.files import flatten
from trainer.methods.plugins import plugin_digests, plugin_sources
from trainer.provenance import code_state, other_code_state, short_commit
from trainer.summary import metric_value, older_reading, summary_from_attrs
from trainer.vocabulary import OK, TrialState

WEIGHTS_WANTED = "weights.wanted"  # trials/<key>/<this>: the trial runs again until its weights are back
REPLACED = "replaced"  # trials/<key>/summary.json.replaced-<time>: a finished trial's record before its re-run


class StudyPlan:
    """The trials of one run of a study and what is known about them (see the module docstring)."""

    def __init__(self, spec: StudySpec, train_fn: str, rerun_changed: bool = False, rebuild_storage: bool = False,
                 change: Any = None):
        """`change`: the sweep.records.history.StudyChange when this run extends the recorded study (prepare()
        records it), else None."""
        self.spec = spec
        self.train_fn = train_fn
        self.rerun_changed = rerun_changed
        self.changed: dict[str, list[str]] = {}  # finished key -> fields its config now resolves differently
        self.older_reading: dict[str, list[str]] = {}  # finished key -> what the current reading does differently
        self.other_code: dict[str, str] = {}  # finished key -> the other code state it ran on (short_commit)
        # the study's plugins as every worker imports them -> the sha256 of each one's source, checked there
        self.plugins = plugin_digests(spec.plugin_sources())
        self.plugin_texts = plugin_sources(spec.plugin_sources())  # for nodes that do not see the driver's disk
        self.replacing: set[str] = set()  # finished keys that run again (--rerun-changed): their files set aside
        self.restoring: list[str] = []  # finished keys that run again to save the weights the study now keeps
        self.folder = StudyFolder(spec.study_dir)
        self.storage_url = spec.storage or self.folder.default_storage()
        self.param_names = list(spec.parameters)
        self.trials: dict[str, Trial] = {}  # key -> trial, every trial of this run (known so far)
        # the trials to hand out, in order: the feed takes each from the left, so a hand-out costs O(1)
        self.to_run: deque[Trial] = deque()
        self.asks_left = 0  # tpe: Optuna asks still to make (each runs once per seed)
        self.asked: dict[str, int] = {}  # tpe: key -> number of the asked Optuna trial it starts as
        self.seed_means: Any = None  # tpe with several seeds: sweep.records.seed_means.SeedMeans
        self.handed_out: set[str] = set()  # keys given to Tune and not ended yet
        self.mirror: Any = None  # sweep.records.mirror.OptunaMirror, opened by prepare()
        self.table: TrialsTable | None = None
        self.progress: Progress | None = None
        self.keeper = WeightKeeper(self.folder, spec.keep_weights, spec.metric.name, spec.metric.goal)
        self.change = change
        self.progress_note = ""
        self.rebuild_storage = rebuild_storage  # an unreadable SQLite storage is rebuilt from the records
        # the `files` of each job (sweep.run.trial_files) and the node watch on a cluster (use_cluster); else None
        self.files: dict[str, Any] | None = None
        self.node_watch: Any = None
        self.cost_limit: Any = None  # sweep.run.cost_limit.CostLimit when the study has a cost_limit
        self.former = FormerKeys()  # ended trials moved to the keys that now name their runs (prepare())

    def use_cluster(self, files: dict[str, Any], node_watch: Any) -> None:
        """The run is on a Ray cluster: every job from now on carries `files` (where its worker sends the trial's
        files: sweep.run.trial_files), and `node_watch` (sweep.run.node_watch.NodeWatch) names a lost trial's node."""
        self.files = files
        self.node_watch = node_watch

    # ---- plan -----------------------------------------------------------------------------------
    def prepare(self) -> int:
        """Write study.yaml, open the Optuna study, sort the trials into done and to run, write
        trials.csv; return how many trials this run will run."""
        rebuild_storage(self.storage_url, self.rebuild_storage, self.spec.path or "STUDY", self.spec.search,
                        self.folder.set_aside)
        keep_changed = keep_weights_changed(self.spec)  # read before study.yaml records the new value
        self.folder.path.mkdir(parents=True, exist_ok=True)  # the default SQLite storage lives in it
        planned = self._planned_trials()
        distributions = self._distributions(planned)
        commit = git_commit()
        # Optuna checks the distributions first: a study it refuses leaves study.yaml and its history as they were
        self.mirror = OptunaMirror(self.spec, self.storage_url, distributions,
                                   common_attrs={"driver_commit": commit} if commit else {})
        if uses_seed_means(self.spec):
            self.seed_means = SeedMeans(self.spec, self.mirror.storage, distributions)
        if self.change is not None:
            record_change(self.folder, self.change, extend=bool(self.change.changed))
            grown = ", ".join(self.change.added + self.change.changed)
            self.progress_note = f"study {self.spec.name} extended: {grown}"
        self.folder.write_study_yaml(self.spec)
        self._record_study_file()
        stale = self.mirror.fail_interrupted()
        self.table = TrialsTable(self.folder, self.param_names)
        ended: dict[str, dict[str, Any]] = {}  # key -> summary.json of each trial that already ended
        skipped = self._resume(planned, ended) - self._restore_weights(ended, keep_changed)
        for key, state in self.keeper.scan(ended).items():
            self.table.update(key, weights=state)
        self.table.write()

        total = len(self.to_run) + self.asks_left * len(self.spec.seeds)
        self.progress = Progress(total, self.spec.metric.name, self.spec.metric.goal, skipped=skipped)
        self._print_plan(skipped, len(stale))
        for key, row in self.table.rows.items():
            if row["state"] == TrialState.COMPLETE:
                self.progress.offer_best(key, number_or_none(row.get(self.spec.metric.name)))
        return total

    def configs_planned(self) -> list[dict[str, Any]]:
        """Every config the study plans, before anything is resumed (tpe: as configs_to_run)."""
        if self.spec.search.expands:
            return [t.config for t in self._planned_trials()]
        return self.configs_to_run()

    def configs_to_run(self) -> list[dict[str, Any]]:
        """The configs this run will start (tpe: the base with each model the study may choose)."""
        if self.spec.search.expands:
            return [t.config for t in self.to_run]
        values = self.spec.parameters.get("model", [])
        models = values.get("choices", []) if isinstance(values, dict) else [v for v in values if isinstance(v, str)]
        base = planning_config(self.spec)  # the base alone may be no config: a swept key completes it
        return [base] + [{**base, "model": model} for model in models]

    def _planned_trials(self) -> list[Trial]:
        if not self.spec.search.expands:
            return []  # tpe: its trials are asked during the run
        # The expansion's own trials, not expand()'s copies: the plan never edits one (the feed copies a
        # trial's config into its job), so a resume copies no config it does not hand out.
        return list(expansion(self.spec).trials)

    def _distributions(self, planned: list[Trial]) -> dict[str, Any]:
        """Optuna distributions of the swept parameters: the sampler's (random, tpe: the spec's search space), and
        for grid values and derived (expr) values, ranges/choices inferred from the expanded trials."""
        space = self.spec.search.distributions(self.spec)
        rest = [name for name in self.param_names if name not in space]
        space.update(infer_distributions(planned, rest))
        return space

    def _resume(self, planned: list[Trial], ended: dict[str, dict[str, Any]]) -> int:
        """Sort planned trials into done (skipped) and to run; return how many were skipped. The summary of
        each trial that ended is added to `ended`."""
        by_key = self.mirror.trials_by_key()
        self.former = take_former_keys(self.folder, planned, by_key)  # moved to their keys first: recorded below
        skipped = 0
        if not self.spec.search.expands:  # tpe: the trials of its asks in earlier runs
            planned = tpe_known_trials(self.spec, by_key, self.seed_means)
        for trial in planned:
            self.trials[trial.key] = trial
            row = self.table.add(trial)
            attempts = by_key.get(trial.key, [])
            final = [a for a in attempts if is_final(a)]
            summary, problem = self.folder.read_summary_checked(trial.key)  # one read of summary.json
            if problem:
                self._damaged_summary(trial.key, problem, final[-1] if final else None)
                summary = self.folder.read_summary(trial.key)  # restored from Optuna, or set aside
            if summary is None and final and self._rerun_was_stopped(trial.key):
                summary = self._summary_of_stopped_rerun(trial.key, final[-1])
            action = decide(attempts, summary)  # the one decision, shared with --dry-run and status
            changed = self._changed_fields(trial, summary) if action in ("skip", "record") else []
            older = older_reading(summary) if action in ("skip", "record") else []
            other_code = other_code_state((summary or {}).get("provenance")) if action in ("skip", "record") else None
            if changed:
                self.changed[trial.key] = changed
            if older:
                self.older_reading[trial.key] = older
            if other_code:
                self.other_code[trial.key] = other_code
            if (changed or older or other_code) and self.rerun_changed:
                self.replacing.add(trial.key)
                self.to_run.append(trial)
            elif action == "skip":
                last = final[-1]
                row.update(state=sweep_state(last.state), optuna_trial=last.number)
                if summary is not None:
                    self.table.set_summary(trial.key, summary)
                    ended[trial.key] = summary
                else:
                    row.update(status=last.user_attrs.get("status"), reason=last.user_attrs.get("reason"))
                skipped += 1
            elif action == "record":
                number, state = self.mirror.add_finished(trial, summary, self.folder.read_metrics(trial.key))
                row.update(state=state, optuna_trial=number)
                self.table.set_summary(trial.key, summary)
                ended[trial.key] = summary
                skipped += 1
            else:
                self.to_run.append(trial)
        if not self.spec.search.expands:  # tpe: `budget` asks in all, each run once per seed
            self.asks_left = max(0, (self.spec.budget or 1) - asks_made(by_key, self.seed_means))
        if self.seed_means is not None:  # seeds that ended before: their configurations told when complete
            self.seed_means.tell_ended(self.table.rows, ended)
        return skipped

    def _record_study_file(self) -> None:
        """The study file this run reads, as the Optuna study's user attribute study_file: `sweep export`
        names it in its advice (the results folder's study.yaml is the record of the last run, not recorded)."""
        if not self.spec.path:
            return
        path = str(Path(self.spec.path).resolve())
        if path != str(self.folder.study_yaml) and self.mirror.study.user_attrs.get("study_file") != path:
            self.mirror.study.set_user_attr("study_file", path)

    def _restore_weights(self, ended: dict[str, dict[str, Any]], keep_changed: bool) -> int:
        """Put the finished trials weights_to_restore names back to run, each marked until its weights are
        back; return how many. A kept trial whose weights are back loses its mark."""
        # a trial that would now resolve differently runs again only with --rerun-changed (it saves them then)
        restore = [key for key in weights_to_restore(self.spec, self.folder, ended, keep_changed)
                   if key not in self.changed and key not in self.older_reading and key not in self.other_code]
        for key in restore:
            (self.folder.trial_dir(key) / WEIGHTS_WANTED).touch()
            self.to_run.append(self.trials[key])  # an ended trial is in neither to_run nor changed
        for key in kept_trials(self.spec, ended):
            if self.folder.model_dir(key).is_dir():
                (self.folder.trial_dir(key) / WEIGHTS_WANTED).unlink(missing_ok=True)
        self.restoring = restore
        return len(restore)

    def _summary_of_stopped_rerun(self, key: str, final: Any) -> dict[str, Any] | None:
        """A finished trial whose re-run was stopped (the re-run cleared its files): its summary.json back from
        the final Optuna attempt, so that it stays recorded as it was and runs again when asked."""
        if sweep_state(final.state) is not TrialState.COMPLETE:
            return None
        self.folder.write_summary(key, summary_from_attrs(dict(final.user_attrs)))
        if (self.folder.trial_dir(key) / WEIGHTS_WANTED).is_file():
            print(f"trial {key}: its re-run for its weights was stopped; results restored from Optuna trial "
                  f"{final.number}, the re-run starts again", flush=True)
        else:
            print(f"trial {key}: its re-run (--rerun-changed) was stopped; results restored from Optuna trial "
                  f"{final.number}", flush=True)
        return self.folder.read_summary(key)

    def _changed_fields(self, trial: Trial, summary: Mapping[str, Any] | None) -> list[str]:
        """Fields whose value in the config the trial ran with differs from how it resolves now.

        The config the trial ran with is the one its summary.json records (already read, so a resume parses
        no finished trial's config.yaml), else its config.yaml.
        A field the stored config lacks (added by a later release, with a default) does not count.
        """
        stored = (summary or {}).get("config")
        if not isinstance(stored, dict):
            stored = self.folder.read_config(trial.key)
        if stored is None:
            return []
        if _without_run_fields(stored) == _without_run_fields(trial.config):
            return []  # the common case: one dict comparison, nothing flattened
        before, now = flatten(stored), flatten(trial.config)
        return sorted(k for k in now if k in before and k not in RUN_FIELDS and before[k] != now[k])

    def set_aside_for_rerun(self, key: str) -> None:
        """A finished trial handed out to run again (`replacing`): its summary.json and metrics.jsonl kept as
        <name>.replaced-<time> beside the new ones (the attempt's start clears the trial's files)."""
        for path in (self.folder.summary_path(key), self.folder.metrics_path(key)):
            if path.is_file():
                self.folder.set_aside(path, REPLACED)

    def _rerun_was_stopped(self, key: str) -> bool:
        """Whether a finished trial without summary.json had started a re-run that never ended: one for its
        weights (marked), or one that set its files aside (--rerun-changed)."""
        trial_dir = self.folder.trial_dir(key)
        return (trial_dir / WEIGHTS_WANTED).is_file() or any(trial_dir.glob(f"summary.json.{REPLACED}-*"))

    def _damaged_summary(self, key: str, problem: str, final: Any) -> None:
        """A summary.json that does not parse: never read as "no result". When Optuna holds the trial's
        final attempt, the file is set aside and rebuilt from that attempt's user attributes (the key stays
        done); otherwise the trial's folder is set aside and the trial runs again."""
        path = self.folder.summary_path(key)
        if final is not None:
            aside = self.folder.set_aside(path)
            self.folder.write_summary(key, summary_from_attrs(dict(final.user_attrs)))
            print(f"trial {key}: {path} {problem}; kept as {aside.name}, results restored from Optuna trial "
                  f"{final.number}", flush=True)
        else:
            aside = self.folder.set_aside(self.folder.trial_dir(key))
            print(f"trial {key}: {path} {problem}; its folder kept as {aside}, the trial runs again", flush=True)

    def _print_plan(self, skipped: int, stale: int) -> None:
        spec = self.spec
        parts = [f"study {spec.name}: {len(self.trials) + self.asks_left * len(spec.seeds)} trials"]
        if skipped:
            parts.append(f"{skipped} already ended (skipped)")
        if stale:
            parts.append(f"{stale} left running by an earlier driver marked FAIL (interrupted)")
        parts.append(f"{self.progress.total} to run")
        self.progress.say(", ".join(parts))
        if self.changed:
            fields = ", ".join(sorted({f for fs in self.changed.values() for f in fs}))
            what = ("re-running them (--rerun-changed)" if self.rerun_changed else
                    "their results are kept; add --rerun-changed to re-run them")
            self.progress.say(f"study {spec.name}: {len(self.changed)} finished trials would now resolve "
                              f"differently ({fields}); {what}")
        if self.older_reading:
            changes = "; ".join(dict.fromkeys(c for cs in self.older_reading.values() for c in cs))
            what = ("re-running them, their old results kept beside as *.replaced-* (--rerun-changed)"
                    if self.rerun_changed else "their results are kept and sweep analyze analyses them apart; "
                    "add --rerun-changed to re-run them")
            self.progress.say(f"study {spec.name}: {plural(len(self.older_reading), 'finished trial')} ran under an "
                              f"older reading of the papers ({changes}); {what}")
        if self.other_code:
            what = ("re-running them, their old results kept beside as *.replaced-* (--rerun-changed)"
                    if self.rerun_changed else "their results are kept and sweep analyze analyses them apart; "
                    "add --rerun-changed to re-run them")
            self.progress.say(f"study {spec.name}: {plural(len(self.other_code), 'finished trial')} ran on another "
                              f"code state ({', '.join(sorted(set(self.other_code.values())))}) than this one "
                              f"({short_commit({'code': code_state()})}); {what}")
        if self.former.adopted:
            self.progress.say(f"study {spec.name}: {self.former.describe()}")
        if self.restoring:
            self.progress.say(f"study {spec.name}: running {plural(len(self.restoring), 'finished trial')} again "
                              f"to save the weights keep_weights: {spec.to_dict()['keep_weights']} keeps (deleted "
                              "when better trials ended, or never saved)")
        if self.progress_note:
            self.progress.say(self.progress_note + " (see study_history.yaml)")
        self.progress.say(f"results: {self.folder.path}  optuna: {hide_password(self.storage_url)}")


def kept_trials(spec: StudySpec, ended: dict[str, dict[str, Any]]) -> list[str]:
    """The ended trials whose weights the study's keep_weights keeps: every trial that ended ok with a value of
    the study metric (`all`), or the top k of them (the one that ended first on a tie, as
    sweep.records.weights.WeightKeeper ranks them); `ended`: key -> summary.json, in trial order."""
    if spec.keep_weights == 0:
        return []
    sign = -1.0 if spec.metric.goal == "maximize" else 1.0
    scored = []
    for key, summary in ended.items():
        value = metric_value(summary, spec.metric.name) if summary.get("status") == OK else None
        if value is not None:
            scored.append((value, key))
    scored.sort(key=lambda item: sign * item[0])  # stable: ties stay in trial order
    return [key for _, key in (scored if spec.keep_weights is None else scored[:spec.keep_weights])]


def weights_to_restore(spec: StudySpec, folder: StudyFolder, ended: dict[str, dict[str, Any]],
                       keep_changed: bool) -> list[str]:
    """The finished trials `sweep run` runs again to save their weights (the module docstring): the kept
    trials (kept_trials) with a best-dev state and no trials/<key>/model/, when keep_weights changed since
    the study last ran (`keep_changed`) or when a run stopped before their weights were back. Read-only."""
    return [key for key in kept_trials(spec, ended)
            if ended[key].get("best_step") is not None and not folder.model_dir(key).is_dir()
            and (keep_changed or (folder.trial_dir(key) / WEIGHTS_WANTED).is_file())]


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


def number_or_none(value: Any) -> float | None:
    """`value` as a finite float, or None (a trials.csv cell may be empty, text or nan)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# Config fields the trial feed sets for the run (sweep.run.feed.TrialFeed.next_job), not part of what the trial
# computes: where its files go and whether it saves its encoder (the study's keep_weights). A change of
# either never makes a finished trial "resolve differently".
RUN_FIELDS = ("output_dir", "save_model")


def _without_run_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if key not in RUN_FIELDS}
