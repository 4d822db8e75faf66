"""Study spec: one YAML file -> a validated `StudySpec`, expanded into `Trial`s.

INTERFACE CONTRACT (the runner consumes it):

    load_study(path) -> StudySpec           # raises trainer.errors.UserError (one line, names key+line);
                                            # over limits.MAX_TRIALS trials only with max_trials=None
    expand(spec) -> list[Trial]             # deterministic order; constraints applied
    expansion(spec).trials                  # the same trials, shared and cached: read them, never edit them
    trial_key(config_dict, seed) -> str     # 12 hex chars over the fields the study sets (not defaults) + seed

Modules: marks (YAML with line marks, and the file's shape: depth, aliases, characters), schema (pydantic
models), load (load_study), values (base and parameters against the trainer config), expressions (the safe
evaluator), limits (a study's size before it is built: trials, a budget's space), expand (trials, keys),
dry_run (the table).

and beside it: `search_space(spec)` (Optuna distributions for random/tpe), `trial_from_params(spec,
params, seed)` (one Trial from values a sampler chose), `planning_config(spec)` (the config a tpe study is
planned with before its first ask), `read_trial_states(spec)`,
`format_trial_table(spec, trials, states)` and `print_dry_run(spec)`.

A study file (every key but `name` and `base` is optional)::

    name: queue_init                  # slug: letters, digits, - and _; results go to <results_dir>/<name>/
    description: Table 7 of MoCoSE ...
    base:                             # a trainer config (trainer/config.py); `model` is required,
      model: bert-base-uncased        # `seed` and `output_dir` are set per trial and may not appear
      method: mocose
    parameters:                       # dotted trainer config key -> values
      queue.size: [128, 256, 512]     # grid: a list of values, swept in the order written
      queue.initial_size:             # a value may be computed from the others:
        - 0                           #   {expr: "..."} is evaluated after the plain values of the
        - {expr: "queue.size // 4"}   #   trial are set (exprs in the order written, each seeing the
        - {expr: "queue.size"}        #   ones before it); the result is checked like a plain value
      ema.decay: {distribution: uniform, low: 0.5, high: 0.99}   # random/tpe only, see below
      optim.lr: {expr: "..."}         # a lone {expr} mapping is a derived (not swept) value
    seeds: [42, 43, 44]               # default [42]
    method: grid                      # grid (lists only) | random | tpe (both need `budget`)
    budget: 20                        # configurations to sample (random) or to try (tpe), per seed
    metric: {name: dev_stsb, goal: maximize}   # dev_stsb avg STS12..STS16 STSBenchmark SICKRelatedness
                                               # align uniform (these two default to minimize)
    resources: {cpu: 4, gpu: 1}       # per trial; fractions allowed (gpu: 0.5); gpu > 1 must be whole
    scheduler: {type: asha, grace_period: 1, reduction_factor: 3, max_t: null}   # or null (default)
    storage: postgresql://user@host/db   # Optuna URL (sqlite, postgresql[+driver], mysql[+driver]);
                                         # default sqlite:///<results_dir>/<name>/optuna.db
    results_dir: results              # default "results" (relative to the working directory)
    analysis: {knobs: [mtd]}          # figures `sweep analyze` draws beyond those the swept
                                      # parameters call for (analysis/knobs.py); changes no trial
    constraints:                      # combinations for which any is false are dropped
      - "queue.initial_size <= queue.size"
      - "mix.lam == 0.2 or mix.directions == 'both'"

Distributions: `{distribution: uniform|loguniform, low, high}` (uniform may add `step`),
`{distribution: int, low, high, step?}`, `{distribution: categorical, choices: [...]}`. Under random and
tpe a plain list means "choose one of these".

Expressions (constraints and `expr` values) are a small safe subset of Python, read with `ast` and
never passed to eval(): numbers, strings, True/False/None, dotted trainer keys (`queue.size`,
`method`), + - * / // %, comparisons (== != < <= > >=, chainable), and/or/not. Anything else (calls,
indexing, attributes that are not trainer keys, names starting with `_`) is refused when the file loads.
`expr` values see the trial's config before the method defaults are filled in (`optim.weight_decay`,
`fgsm.eps` may be null there); constraints see it after, whenever the combination is a valid config.

Built-in constraint: a combination whose queue.initial_size exceeds queue.size is dropped silently
(Table 7 crosses K0 with K); the same values in `base` alone are an error.

Queue slices are lists of half-open position ranges or "all": `queue.slices: [["0-512"],
["0-256", "768-1024"], all]` sweeps three slicings.

Expansion order: seeds outermost, then the cartesian product of the parameters in the order written
(last key fastest), so the first len(configurations) trials cover the whole grid once with the first
seed; later seeds add repeats. Random draws `budget` distinct configurations with an RNG seeded from
the study name (the same file always gives the same trials), then crosses them with the seeds. TPE is
driven during the run by Optuna's sampler through Ray Tune (`search_space`, `trial_from_params`).
Combinations that resolve to the same trainer config are collapsed to the first.

Trial keys: a key hashes what the study asks for (the fields of the trial's config that differ from
RunConfig's defaults, and the seed), not the resolved config, so a release that adds a field or
changes a default keeps finished trials finished (`sweep run` names the fields that now resolve
differently; `--rerun-changed` re-runs those trials).
"""

from sweep.spec.dry_run import format_trial_table, print_dry_run, read_trial_states
from sweep.spec.expand import (
    expand,
    expansion,
    planning_config,
    requested_fields,
    search_space,
    trial_from_params,
    trial_key,
)
from sweep.spec.load import load_study
from sweep.spec.schema import LOWER_IS_BETTER, Metric, Resources, Scheduler, StudySpec, Trial
from sweep.spec.text import dotted_get

__all__ = [
    "LOWER_IS_BETTER", "Metric", "Resources", "Scheduler", "StudySpec", "Trial", "dotted_get", "expand", "expansion",
    "format_trial_table", "load_study", "planning_config", "print_dry_run", "read_trial_states", "requested_fields",
    "search_space", "trial_from_params", "trial_key",
]
