"""What `sweep run` does with each trial key, decided in one place for `sweep run`, `--dry-run` and
`sweep status` (issue 15: the dry run used to read trials.csv while the run read the folders + Optuna).

    decide(attempts, summary) -> "skip" | "record" | "run"
    trial_states(spec) -> {key: state shown}   (read-only: creates no storage, writes nothing)

- skip: Optuna holds a final attempt (COMPLETE, PRUNED, or FAIL diverged/collapsed).
- record: summary.json holds a final verdict that never reached Optuna (the driver died in between);
  the run records it in Optuna without running the trial.
- run: never ran, interrupted, or failed with an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# is_final and FINAL_FAIL_STATUSES live in sweep.store, below both this module and sweep.mirror (which reads them too).
from sweep.store import FINAL_FAIL_STATUSES, FINAL_STATUSES, StudyFolder, is_final

__all__ = ["FINAL_FAIL_STATUSES", "decide", "is_done", "is_final", "optuna_attempts", "trial_states"]


def decide(attempts: list[Any], summary: dict[str, Any] | None) -> str:
    """skip, record or run (module docstring) for one key's Optuna attempts and its summary.json."""
    if any(is_final(a) for a in attempts):
        return "skip"
    if summary is not None and summary.get("status") in FINAL_STATUSES:
        return "record"
    return "run"


def optuna_attempts(name: str, storage_url: str) -> dict[str, list[Any]] | None:
    """key -> the study's Optuna attempts, oldest first; None when the storage or study does not exist.
    A storage that cannot be read is a UserError (one line, exit 2)."""
    if storage_url.startswith("sqlite:///") and not Path(storage_url[len("sqlite:///"):]).is_file():
        return None
    import optuna

    from sweep.mirror import _hide_password, open_storage
    from trainer.errors import UserError

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(storage_url)
    try:
        frozen = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    except KeyError:
        return None
    except Exception as exc:
        raise UserError(f"cannot read the Optuna storage {_hide_password(storage_url)}: "
                        f"{' '.join(str(exc).split())[:200]} (restore or remove the storage)") from None
    out: dict[str, list[Any]] = {}
    for t in frozen:
        if t.user_attrs.get("key"):
            out.setdefault(t.user_attrs["key"], []).append(t)
    return out


def trial_states(spec: Any, keys: list[str] | None = None) -> dict[str, str] | None:
    """key -> what `sweep run` would find, one word each (a table cell): the final Optuna state (skipped:
    COMPLETE, PRUNED, FAIL/diverged, FAIL/collapsed), "ended-not-in-optuna" (recorded on the next run),
    "FAIL->rerun" / "RUNNING->rerun" for an earlier attempt that runs again, "damaged" for a summary.json
    that does not parse. Keys never run are left out. None when the study has not run here (no Optuna
    study and no trial folders)."""
    folder = StudyFolder(spec.study_dir)
    by_key = optuna_attempts(spec.name, spec.storage_url)
    trials_dir = folder.path / "trials"
    if by_key is None and not trials_dir.is_dir():
        return None
    by_key = by_key or {}
    if keys is None:
        from sweep.spec.expand import expand

        keys = [t.key for t in expand(spec)]
    states = {}
    for key in keys:
        attempts = by_key.get(key, [])
        action = decide(attempts, folder.read_summary(key))
        if action == "skip":
            last = [a for a in attempts if is_final(a)][-1]
            status = last.user_attrs.get("status")
            states[key] = last.state.name if last.state.name != "FAIL" else f"FAIL/{status}"
        elif action == "record":
            states[key] = "ended-not-in-optuna"
        elif folder.summary_problem(key):
            states[key] = "damaged"
        elif attempts:
            states[key] = f"{attempts[-1].state.name}->rerun"
    return states


def is_done(state: str | None) -> bool:
    """Whether a trial_states label means the next `sweep run` skips the trial (None: never run)."""
    return state is not None and not state.endswith("->rerun") and state != "damaged"
