"""What `sweep run` does with each trial key, decided in one place for `sweep run`, `--dry-run` and
`sweep status`, all from the trial folders and Optuna.

    decide(attempts, summary) -> "skip" | "record" | "run"
    trial_states(spec) -> {key: state shown}   (read-only: creates no storage, writes nothing)
    other_code_states(spec, keys) -> {key: the other code state a finished trial ran on}
    former_keys(folder, keys, trials, by_key) -> FormerKeys   (ended trials a knob they never read still keyed)
    take_former_keys(folder, planned, by_key) -> FormerKeys   (`sweep run`: moved to the keys of their runs)

- skip: Optuna holds a final attempt (COMPLETE, PRUNED, or FAIL diverged/collapsed).
- record: summary.json holds a final verdict that never reached Optuna (the driver died in between);
  the run records it in Optuna without running the trial.
- run: never ran, interrupted, or failed with an error.

A trial that ended under a key that named another method's knob (written before a method's own keys were scoped to
its trials: a SimCSE trial of `method: [simcse, dcl] x dcl.sigma: [...]` once ran, and was keyed, once per
dcl.sigma) is the same run as the planned trial it now matches by trainer config and seed (sweep.spec.keys.
run_signature): that trial is done, not run again. `sweep run` moves the folder to the new key (its old key in
trials/<key>/former_key) and records it in Optuna under the new key; the repeats of the same run (one per value of
the knob it never read) go to superseded/<old key>/, kept but out of the analysis. The dry run and `sweep status`
count such a trial as done already.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

# is_final lives in sweep.records.store, below both this module and sweep.records.mirror (which reads it
# too); which statuses are final is trainer.vocabulary's.
from sweep.records.store import StudyFolder, is_final, sweep_state
from sweep.text import plural
from trainer.provenance import other_code_state
from trainer.summary import Summary
from trainer.vocabulary import FINAL_FAIL_STATUSES, FINAL_STATUSES, TrialState

__all__ = ["FINAL_FAIL_STATUSES", "FormerKeys", "decide", "former_keys", "is_done", "is_final", "optuna_attempts",
           "other_code_states", "take_former_keys", "trial_states"]


def decide(attempts: list[Any], summary: Mapping[str, Any] | None) -> str:
    """skip, record or run (module docstring) for one key's Optuna attempts and its summary.json."""
    if any(is_final(a) for a in attempts):
        return "skip"
    if summary is not None and summary.status in FINAL_STATUSES:
        return "record"
    return "run"


def optuna_attempts(name: str, storage_url: str) -> dict[str, list[Any]] | None:
    """key -> the study's Optuna attempts, oldest first; None when the storage or study does not exist.
    A storage that cannot be read is a UserError (one line, exit 2)."""
    trials = optuna_trials(name, storage_url, "restore or remove the storage")
    if trials is None:
        return None
    from sweep.records.optuna_reads import group_by_key

    return group_by_key(trials)


def optuna_trials(name: str, storage_url: str, way_out: str) -> list[Any] | None:
    """The study's Optuna trials in number order (sweep.records.optuna_reads.read_trials); None when the storage or the
    study does not exist (a missing SQLite file is not created). A storage that cannot be read is a
    UserError (one line, exit 2) ending with `way_out`."""
    if storage_url.startswith("sqlite:///") and not Path(storage_url[len("sqlite:///"):]).is_file():
        return None
    import optuna

    from sweep.records.mirror import open_storage
    from sweep.records.optuna_reads import read_trials
    from sweep.text import hide_password
    from trainer.errors import UserError

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(storage_url)  # a UserError when the storage cannot be opened
    try:
        return read_trials(storage, storage.get_study_id_from_name(name))
    except KeyError:
        return None  # the storage holds no such study (yet)
    except Exception as exc:  # sqlalchemy: "file is not a database", a server gone, ...
        raise UserError(f"cannot read the Optuna storage {hide_password(storage_url)}: "
                        f"{' '.join(str(exc).split())[:200]} ({way_out})") from None


def trial_states(spec: Any, keys: list[str] | None = None, by_key: dict[str, list[Any]] | None = None,
                 problems: dict[str, str] | None = None,
                 summaries: dict[str, Summary | None] | None = None) -> dict[str, str] | None:
    """key -> what `sweep run` would find, one word each (a table cell): the final Optuna state (skipped:
    COMPLETE, PRUNED, FAIL/diverged, FAIL/collapsed), "ended-not-in-optuna" (recorded on the next run),
    "FAIL->rerun" / "RUNNING->rerun" for an earlier attempt that runs again, "damaged" for a summary.json
    that does not parse; a trial that ended under its former key (former_keys) has its state there and FORMER_MARK.
    Keys never run are left out. None when the study has not run here (no Optuna
    study and no trial folders). `by_key`: the attempts (optuna_attempts) when the caller read them already.
    `problems`, when given, gets key -> StudyFolder.summary_problem for each key whose summary.json is damaged;
    `summaries`, when given, the summary read from each trial folder (folder name -> Summary, None where unusable),
    so that a caller reads none of them again."""
    folder = StudyFolder(spec.study_dir)
    if by_key is None:
        by_key = optuna_attempts(spec.name, spec.storage_url)
    trials_dir = folder.path / "trials"
    if by_key is None and not trials_dir.is_dir():
        return None
    by_key = by_key or {}
    from sweep.spec.expand import expansion

    planned = expansion(spec).trials if keys is None else None
    if keys is None:
        keys = [t.key for t in planned]  # keys only: no copy of each trial's config
    former = former_keys(folder, keys, lambda: planned if planned is not None else expansion(spec).trials,
                         by_key).adopted
    states = {}
    for key in keys:
        source = former.get(key, key)  # a trial ended under its former key is what `sweep run` will record
        attempts = by_key.get(source, [])
        summary, problem = folder.read_summary_checked(source)  # one read for both
        if problem and problems is not None:
            problems[key] = problem
        if summaries is not None:
            summaries[source] = summary
        action = decide(attempts, summary)
        if action == "skip":
            last = [a for a in attempts if is_final(a)][-1]
            status = last.user_attrs.get("status")
            state = sweep_state(last.state)
            states[key] = state if state is not TrialState.FAIL else f"{state}/{status}"
        elif action == "record":
            states[key] = "ended-not-in-optuna"
        elif problem:
            states[key] = "damaged"
        elif attempts:
            states[key] = f"{sweep_state(attempts[-1].state)}->rerun"
        if key in former and key in states:
            states[key] += FORMER_MARK
    return states


def other_code_states(spec: Any, keys: list[str], summaries: Mapping[str, Summary | None] = MappingProxyType({})
                      ) -> dict[str, str]:
    """Finished key -> the code state (trainer.provenance.short_commit) it ran on, for each of `keys` whose recorded
    source beyond its commit (the packages' changes and untracked files, the plugins) differs from this process's:
    what `sweep run` keeps, or re-runs with --rerun-changed, and `sweep analyze` analyses apart. `summaries`: those
    trial_states read already (by folder name)."""
    folder = StudyFolder(spec.study_dir)
    found = {}
    for key in keys:
        summary = summaries[key] if key in summaries else folder.read_summary(key)
        state = other_code_state(summary.provenance) if summary is not None else None
        if state is not None:
            found[key] = state
    return found


FORMER_KEY = "former_key"  # trials/<key>/<this>: the key the trial ended under
SUPERSEDED = "superseded"  # results/<study>/<this>/<former key>/: a run repeated under another value of a knob it
# never read, kept out of the analysis
FORMER_MARK = " (former key)"  # trial_states: the state of a trial that ended under its former key


@dataclass(frozen=True)
class FormerKeys:
    """Ended trials a knob of another method still named (module docstring). `adopted`: planned key -> the former
    key of the ended trial that is its run; `repeats`: former key -> the planned key of a run it repeats (another
    value of a knob it never read); `knobs`: the keys that named them and name them no more."""

    adopted: dict[str, str] = field(default_factory=dict)
    repeats: dict[str, str] = field(default_factory=dict)
    knobs: tuple[str, ...] = ()

    def describe(self) -> str:
        """What `sweep run` did with them, in one line."""
        repeats = (f"; {plural(len(self.repeats), 'repeat')} of them (the same run under another value) moved to "
                   f"{SUPERSEDED}/" if self.repeats else "")
        return (f"{plural(len(self.adopted), 'finished trial')} recorded under the keys of the runs they are, no "
                f"longer named by {', '.join(self.knobs)}, which their method does not read (trials/<key>/"
                f"{FORMER_KEY} holds the old key){repeats}")


def former_keys(folder: StudyFolder, keys: Iterable[str], trials: Callable[[], Iterable[Any]],
                by_key: Mapping[str, list[Any]]) -> FormerKeys:
    """The ended trials under trials/ whose key the study no longer plans but whose run (trainer config and seed:
    sweep.spec.keys.run_signature) is that of a planned trial that never ran. `keys`: planned keys already known;
    `trials()` gives every planned sweep.spec.Trial, called only when a folder is under none of `keys`. The first
    such folder in key order is the planned trial's record; the others repeat it."""
    trials_dir = folder.path / "trials"
    if not trials_dir.is_dir():
        return FormerKeys()
    folders = {path.name for path in trials_dir.iterdir() if path.is_dir()}
    if not folders - set(keys):  # every folder is a planned trial's (a study resumed as planned)
        return FormerKeys()
    planned = list(trials())
    if not planned:  # tpe: its trials are Optuna's asks, keyed as they are drawn
        return FormerKeys()
    ended = [key for key in sorted(folders - {t.key for t in planned})
             if decide(by_key.get(key, []), folder.read_summary(key)) != "run"]
    if not ended:
        return FormerKeys()
    from sweep.spec.keys import requested_fields, run_signature
    from trainer.config import scoped

    unrun = {run_signature(t.config, t.seed): t.key for t in planned
             if t.key not in folders and not by_key.get(t.key)}
    adopted: dict[str, str] = {}
    repeats: dict[str, str] = {}
    knobs: set[str] = set()
    for key in ended:
        config = folder.read_config(key)
        new = unrun.get(run_signature(config, config.get("seed"))) if config else None
        if new is None:
            continue
        if new in adopted:
            repeats[key] = new
        else:
            adopted[new] = key
        knobs.update(set(requested_fields(config)) - set(requested_fields(scoped(config))))
    return FormerKeys(adopted, repeats, tuple(sorted(knobs)))


def take_former_keys(folder: StudyFolder, planned: list[Any], by_key: Mapping[str, list[Any]]) -> FormerKeys:
    """former_keys, acted on (`sweep run`, before it sorts the planned trials): each adopted folder moved to its new
    key with the old key in trials/<key>/former_key, so that the run records it under that key instead of running
    it; each repeat moved to superseded/<former key>/."""
    found = former_keys(folder, [t.key for t in planned], lambda: planned, by_key)
    for new, old in found.adopted.items():
        os.replace(folder.trial_dir(old), folder.trial_dir(new))
        (folder.trial_dir(new) / FORMER_KEY).write_text(old + "\n")
    if found.repeats:
        (folder.path / SUPERSEDED).mkdir(exist_ok=True)
    for old in found.repeats:
        os.replace(folder.trial_dir(old), folder.path / SUPERSEDED / old)
    return found


def is_done(state: str | None) -> bool:
    """Whether a trial_states label means the next `sweep run` skips the trial (None: never run)."""
    return state is not None and not state.endswith("->rerun") and state != "damaged"
