"""Study spec: one YAML file -> a validated `StudySpec`, expanded into `Trial`s.

INTERFACE CONTRACT (the runner consumes it):

    load_study(path) -> StudySpec           # raises trainer.errors.UserError (one line, names key+line);
                                            # over limits.MAX_TRIALS trials only with max_trials=None
    expand(spec) -> list[Trial]             # deterministic order; constraints applied
    expansion(spec).trials                  # the same trials, shared and cached: read them, never edit them
    trial_key(config_dict, seed) -> str     # 12 hex chars over the fields the study sets (not defaults) + seed
    spec.search -> SearchMethod             # Grid() | Random() | Tpe(): what `method:` means (sweep.spec.search)

Modules: key_lines (YAML with the line of every key, and the file's shape: depth, aliases, characters), keys (trial
keys: what the study asked for, hashed), schema
(pydantic models), load (load_study), values (base and parameters against the trainer config), expressions (the safe
evaluator), limits (a study's size before it is built: a grid's combinations, a budget's space), search (the search
methods as objects: `spec.search` is Grid, Random or Tpe, asked what the study's `method:` means), expand (trials,
keys).
The dry run's table, which reads the study's records, is a command: sweep.commands.dry_run.

and beside it: `search_space(spec)` (Optuna distributions for random/tpe), `trial_from_params(spec,
params, seed)` (one Trial from values a sampler chose), `planning_config(spec)` (the config a tpe study is
planned with before its first ask).

The bottom layer of sweep/ (above trainer/ and sweep.text): it imports no other part of sweep.

The study file's keys, distributions, expressions, expansion order and trial keys: docs/study-file.md.
"""

from sweep.spec.expand import (
    expand,
    expansion,
    keep_expansion,
    planning_config,
    trial_from_params,
)
from sweep.spec.keys import requested_fields, trial_key
from sweep.spec.load import load_study
from sweep.spec.schema import LOWER_IS_BETTER, Metric, Resources, Scheduler, StudySpec, Trial
from sweep.spec.search import Grid, Random, SearchMethod, Tpe, search_method, search_space

__all__ = [
    "LOWER_IS_BETTER", "Grid", "Metric", "Random", "Resources", "Scheduler", "SearchMethod", "StudySpec", "Tpe",
    "Trial", "expand", "expansion", "keep_expansion", "load_study", "planning_config", "requested_fields",
    "search_method", "search_space", "trial_from_params", "trial_key",
]
