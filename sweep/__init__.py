"""The orchestrator for studies of contrastive sentence embeddings; its layers, bottom first:

    sweep.text, sweep.signal_latch   helpers every layer may use (messages, the early stop-signal record)
    sweep.spec                       the study file -> a validated StudySpec, expanded into Trials
    sweep.records                    what a study writes: trial folders, trials.csv, the Optuna mirror
    sweep.run                        running a study through Ray Tune: plan, workers, signals, progress
    sweep.commands                   status, dashboard, analyze, export, fetch, slurm, doctor, dry run
    sweep.cli                        the `sweep` command line

A layer imports only from the layers above it in this list (tests/test_import_cycles.py checks it). The
public API below is what scripts and tests use; it is loaded on first use, so `import sweep` stays cheap
(the CLI installs its signal handlers before anything slow is imported).

    load_study(path) -> StudySpec            # one line naming key and line on bad input (UserError)
    run_study(spec, address=None, ...) -> int  # run or resume; the exit status (0, 1, 128 + signal)
    StudyRun(spec, train_fn).prepare()       # plan without running (the trial states a run would start from)
    TRIAL_STATUSES, TrialStatus              # what a trial's status means (trainer.vocabulary)
    export_trial(study, dest, trial_key=None, best=False)  # a trial's model, sentence-transformers
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "load_study": "sweep.spec",
    "StudySpec": "sweep.spec",
    "Trial": "sweep.spec",
    "run_study": "sweep.run.runner",
    "StudyRun": "sweep.run.runner",
    "TRIAL_STATUSES": "trainer.vocabulary",
    "TrialStatus": "trainer.vocabulary",
    "export_trial": "sweep.commands.export",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'sweep' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value
