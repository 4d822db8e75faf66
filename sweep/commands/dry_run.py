"""What `sweep run --dry-run` prints: the study, its trials (with states if it ran before), MTD."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sweep.spec.expand import expansion
from sweep.spec.schema import StudySpec, Trial
from sweep.text import format_value, is_expr, one_line, plural
from trainer.errors import UserError


def read_trial_states(spec: StudySpec) -> dict[str, str] | None:
    """key -> what `sweep run` would do with it (sweep.records.resume.trial_states: the trial folders and the
    Optuna study, as the run decides); None when the study has not run here."""
    from sweep.records.resume import trial_states

    try:
        return trial_states(spec)
    except UserError as exc:  # e.g. a PostgreSQL storage out of reach: the dry run still shows the trials
        print(f"note: trial states unknown: {exc}", file=sys.stderr)
        return None


def format_trial_table(spec: StudySpec, trials: list[Trial], states: dict[str, str] | None = None) -> str:
    """A plain-text table: key, seed, one column per swept parameter, MTD, and status when `states`."""
    headers = ["key", "seed", *spec.parameters, "mtd"] + (["status"] if states is not None else [])
    rows = []
    for trial in trials:
        row = [trial.key, str(trial.seed)]
        row += [format_value(trial.params.get(key)) for key in spec.parameters]
        row.append("-" if trial.mtd is None else f"{trial.mtd:.2f}")
        if states is not None:
            row.append(states.get(trial.key, "-"))
        rows.append(row)
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    numeric = {1, len(headers) - 1 - (states is not None)}  # seed and mtd read better right-aligned
    out = []
    for row in [headers, *rows]:
        cells = [cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def print_dry_run(spec: StudySpec) -> None:
    """What `sweep run --dry-run` shows: the study, its trials (with states if it ran before), MTD."""
    print(_dry_run_text(spec))


def _dry_run_text(spec: StudySpec) -> str:
    out: list[str] = []

    def line(label: str, text: str) -> None:
        out.append(f"{label + ':':<11}{text}")

    line("study", spec.name + (f"  ({spec.path})" if spec.path else ""))
    if spec.description:
        line("about", one_line(spec.description))
    swept = " x ".join(spec.parameters) or "no parameters"
    line("method", f"{spec.method} over {swept}; {plural(len(spec.seeds), 'seed')} {spec.seeds}; "
                   f"metric {spec.metric.name} ({spec.metric.goal})")
    scheduler = "none (every trial runs to the end)"
    if spec.scheduler:
        scheduler = (f"{spec.scheduler.type} (grace {spec.scheduler.grace_period}, reduction "
                     f"{spec.scheduler.reduction_factor}, max_t {spec.scheduler.max_t or 'all evaluations'})")
    line("resources", f"{format_value(spec.resources.cpu)} cpu, {format_value(spec.resources.gpu)} gpu per trial; "
                      f"scheduler {scheduler}")
    line("storage", spec.storage_url)
    line("results", f"{spec.study_dir}/")
    if spec.method == "tpe":
        line("trials", f"up to {spec.budget} per seed x {plural(len(spec.seeds), 'seed')} = "
                       f"{spec.budget * len(spec.seeds)}, chosen by TPE during the run")
        line("space", "")
        for key, values in spec.parameters.items():
            out.append(f"  {key}: {_describe_parameter(values)}")
        return "\n".join(out)

    planned = expansion(spec)
    trials = planned.trials
    unit = "combination" if spec.method == "grid" else "sample"
    line("trials", f"{len(trials)} ({plural(planned.configurations, 'configuration')} x "
                   f"{plural(len(spec.seeds), 'seed')}; {plural(planned.dropped, unit)} dropped by "
                   f"constraints, {plural(planned.duplicates, 'duplicate')} collapsed)"
                   + (f"; only {planned.configurations} distinct configurations for budget {spec.budget}"
                      if spec.method == "random" and planned.configurations < (spec.budget or 0) else ""))
    mtds = [t.mtd for t in trials if t.mtd is not None]
    if mtds:
        line("MTD", f"{min(mtds):.2f} to {max(mtds):.2f} ({len(mtds)} of {len(trials)} trials)")
    elif any(t.config.get("method") == "mocose" for t in trials):
        line("MTD", "- (the mean eta of a cosine schedule needs the run's length: install the corpus, "
                    "`sweep data fetch`, or set max_steps)")
    else:
        line("MTD", "- (no MoCoSE trials)")
    states = read_trial_states(spec)
    if states is not None:
        counts: dict[str, int] = {}
        for trial in trials:
            state = states.get(trial.key, "not run")
            counts[state] = counts.get(state, 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        line("status", f"{summary} (from the trial folders and the Optuna study in {Path(spec.study_dir)})")
    out.append("")
    out.append(format_trial_table(spec, trials, states))
    return "\n".join(out)


def _describe_parameter(values: Any) -> str:
    if isinstance(values, list):
        return ", ".join(f"{{expr: {v['expr']}}}" if is_expr(v) else format_value(v) for v in values)
    kind = values["distribution"]
    if kind == "categorical":
        return "categorical " + ", ".join(format_value(v) for v in values["choices"])
    step = f" step {values['step']}" if values.get("step") else ""
    return f"{kind} [{format_value(values['low'])}, {format_value(values['high'])}]{step}"
