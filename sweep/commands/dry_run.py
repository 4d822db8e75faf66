"""What `sweep run --dry-run` prints: the study, what its trials train on and how each ends (the corpus, the
final evaluation and its cost next to the training's), its cost in device-hours from the device's bench record
(sweep.commands.cost), its trials (with states if it ran before, planned steps and evaluations), MTD."""

from __future__ import annotations

import sys
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from sweep.commands.cost import TrialCost, run_device, study_cost_lines
from sweep.spec.expand import expansion, planning_config
from sweep.spec.schema import StudySpec, Trial
from sweep.text import format_value, is_expr, one_line, plural
from trainer.errors import UserError
from trainer.files import flatten
from trainer.method_rules import method_label, traces_distance
from trainer.run_plan import RunPlan
from trainer.vocabulary import STS_BENCHMARK, STS_TASKS, STS_TEST_PAIRS, TrialState

if TYPE_CHECKING:
    from trainer.summary import Summary

# A training sentence costs a few encodings (two views forward, then backward), an evaluated one a single
# forward pass: a final evaluation of EVALUATION_DOMINATES times the sentences a trial trains on is most of the trial.
EVALUATION_DOMINATES = 20


def read_trial_states(spec: StudySpec, summaries: dict[str, Summary | None] | None = None) -> dict[str, str] | None:
    """key -> what `sweep run` would do with it (sweep.records.resume.trial_states: the trial folders and the
    Optuna study, as the run decides); None when the study has not run here. `summaries` gets the summaries read."""
    from sweep.records.resume import trial_states

    try:
        return trial_states(spec, summaries=summaries)
    except UserError as exc:  # e.g. a PostgreSQL storage out of reach: the dry run still shows the trials
        print(f"note: trial states unknown: {exc}", file=sys.stderr)
        return None


def weights_rerun(spec: StudySpec, trials: list[Trial], states: dict[str, str],
                  summaries: dict[str, Summary | None]) -> list[str]:
    """The finished trials `sweep run` runs again to save the weights the study now keeps
    (sweep.run.plan.weights_to_restore), from their summaries (`summaries`, those read_trial_states read; a trial
    folder's summary.json where it read none), their folders and the recorded study.yaml."""
    from sweep.records.history import keep_weights_changed
    from sweep.records.store import StudyFolder
    from sweep.run.opening import weights_on_disk
    from sweep.run.plan import weights_to_restore

    if spec.keep_weights == 0:
        return []
    folder = StudyFolder(spec.study_dir)
    ended = {}
    for trial in trials:
        if states.get(trial.key) in (TrialState.COMPLETE, "ended-not-in-optuna"):
            summary = summaries[trial.key] if trial.key in summaries else folder.read_summary(trial.key)
            if summary is not None:
                ended[trial.key] = summary
    return weights_to_restore(spec, ended, weights_on_disk(spec, folder, ended, keep_weights_changed(spec)))


def format_trial_table(spec: StudySpec, trials: list[Trial], states: dict[str, str] | None = None,
                       costs: list[TrialCost] | None = None) -> str:
    """A plain-text table: key, seed, one column per swept parameter, MTD, with `costs` (one per trial) the
    planned steps, STS-B dev evaluations and, where estimated, device-hours; and status when `states`."""
    estimated = costs is not None and any(c.seconds is not None for c in costs)
    cost_headers = ([] if costs is None else ["steps", "dev evals"]) + (["device-h"] if estimated else [])
    headers = ["key", "seed", *spec.parameters, "mtd", *cost_headers] + (["status"] if states is not None else [])
    rows = []
    for index, trial in enumerate(trials):
        row = [trial.key, str(trial.seed)]
        # "-": a key another method's trials read (a plugin's own knob), absent from this trial
        row += [format_value(trial.params[key]) if key in trial.params else "-" for key in spec.parameters]
        row.append("-" if trial.mtd is None else f"{trial.mtd:.2f}")
        if costs is not None:
            cost = costs[index]
            row += ["-" if cost.steps is None else str(cost.steps), "-" if cost.evaluations is None
                    else str(cost.evaluations)]
            if estimated:
                row.append("-" if cost.seconds is None else f"{cost.seconds / 3600:.3g}")
        if states is not None:
            row.append(states.get(trial.key, "-"))
        rows.append(row)
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    mtd = 2 + len(spec.parameters)
    numeric = {1, *range(mtd, mtd + 1 + len(cost_headers))}  # seed, mtd and the costs read better right-aligned
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
    search = spec.search
    # the configs the study is planned with: its expanded trials', or tpe's before its first ask
    configs = [t.config for t in expansion(spec).trials] if search.expands else [planning_config(spec)]
    for text in corpus_lines(configs):
        line("corpus", text)
    for text in final_eval_lines(configs):
        line("eval", text)
    for text in mteb_lines(configs):
        line("mteb", text)
    for text in training_lines(configs, [t.requested for t in expansion(spec).trials] if search.expands else None,
                               spec.base):
        line("training", text)
    for text in compile_lines(spec, configs):
        line("compile", text)
    for text in seed_count_lines(spec, configs):
        line("seeds", text)
    if not search.expands:
        total = search.total_trials(0, spec.budget, len(spec.seeds))
        line("trials", f"up to {spec.budget} per seed x {plural(len(spec.seeds), 'seed')} = "
                       f"{total}, chosen by TPE during the run")
        for text in study_cost_lines(spec, configs, trials=total)[0]:
            line("cost", text)
        for text in _limit_lines(spec):
            line("limit", text)
        line("space", "")
        for key, values in spec.parameters.items():
            out.append(f"  {key}: {_describe_parameter(values)}")
        return "\n".join(out)

    planned = expansion(spec)
    trials = planned.trials
    wanted = search.configurations(spec.budget)  # random: its budget; a grid: every combination (None)
    line("trials", f"{len(trials)} ({plural(planned.configurations, 'configuration')} x "
                   f"{plural(len(spec.seeds), 'seed')}; {plural(planned.dropped, search.unit)} dropped by "
                   f"constraints, {plural(planned.duplicates, 'duplicate')} collapsed)"
                   + (f"; only {planned.configurations} distinct configurations for budget {spec.budget}"
                      if wanted is not None and planned.configurations < wanted else ""))
    mtds = [t.mtd for t in trials if t.mtd is not None]
    if mtds:
        line("MTD", f"{min(mtds):.2f} to {max(mtds):.2f} ({len(mtds)} of {len(trials)} trials)")
    elif any(traces_distance(t.config.get("method")) for t in trials):
        line("MTD", "- (the mean eta of a cosine schedule needs the run's length: install the corpus, "
                    "`sweep data fetch`, or set max_steps)")
    else:
        line("MTD", "- (no MoCoSE trials)")
    summaries: dict[str, Summary | None] = {}  # each trial's summary.json, read once
    states = read_trial_states(spec, summaries)
    if states is not None:
        restore = weights_rerun(spec, trials, states, summaries)
        for key in restore:
            states[key] = "weights->rerun"
        if restore:
            keep = spec.to_dict()["keep_weights"]
            line("weights", f"`sweep run` runs {plural(len(restore), 'finished trial')} again to save the weights "
                            f"keep_weights: {keep} keeps (deleted when better trials ended, or never saved)")
        for text in other_code_lines(spec, states, summaries):
            line("code", text)
        from sweep.records.resume import FORMER_MARK

        former = sum(1 for state in states.values() if state.endswith(FORMER_MARK))
        if former:
            line("keys", f"{plural(former, 'finished trial')} ended under a key that also named a knob its method does "
                         "not read: `sweep run` records each under the key shown, without running it again")
        counts: dict[str, int] = {}
        for trial in trials:
            state = states.get(trial.key, "not run")
            counts[state] = counts.get(state, 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        line("status", f"{summary} (from the trial folders and the Optuna study in {Path(spec.study_dir)})")
    texts, costs = study_cost_lines(spec, [t.config for t in trials])
    for text in texts:
        line("cost", text)
    for text in _limit_lines(spec):
        line("limit", text)
    out.append("")
    out.append(format_trial_table(spec, trials, states, costs))
    return "\n".join(out)


def other_code_lines(spec: StudySpec, states: dict[str, str],
                     summaries: Mapping[str, Summary | None] = MappingProxyType({})) -> list[str]:
    """The finished trials that ran on another code state than this one (sweep.records.resume.other_code_states,
    from `summaries` where read already), each marked in `states`, and one line saying what `sweep run` does with
    them."""
    from sweep.records.resume import is_done, other_code_states
    from trainer.provenance import code_state, short_commit

    other = other_code_states(spec, [key for key, state in states.items() if is_done(state)], summaries)
    for key in other:
        states[key] = f"{states[key]} (other code)"
    if not other:
        return []
    states_run = ", ".join(sorted(set(other.values())))
    return [f"{plural(len(other), 'finished trial')} ran on another code state ({states_run}) than this one "
            f"({short_commit({'code': code_state()})}): `sweep run` keeps them and `sweep analyze` analyses them "
            "apart; --rerun-changed runs them again"]


def seed_count_lines(spec: StudySpec, configs: list[dict[str, Any]]) -> list[str]:
    """The smallest paired difference the study's seeds resolve in the score its final evaluation gives (the
    seven-task average, else its first STS task), and the seeds `analysis.target_difference` needs
    (analysis.seeds): with the spread of the study's finished trials where it has some, else the study's
    analysis.seed_spread, else the sourced default."""
    from analysis.seeds import Spread, default_spread, seed_lines

    score = paired_score(configs)
    if score is None:
        return ["no STS test score in the final evaluation: no paired difference to size"]
    spread = None
    if Path(spec.study_dir, "trials").is_dir():
        from analysis.report import finished_spread

        spread = finished_spread(spec.study_dir, score)
    if spread is None and spec.analysis.seed_spread is not None:
        spread = Spread(spec.analysis.seed_spread, "the study's analysis.seed_spread")
    return seed_lines(spread or default_spread(score), len(spec.seeds), score, spec.analysis.target_difference)


def paired_score(configs: list[dict[str, Any]]) -> str | None:
    """The score `sweep analyze` pairs the trials on: the seven-task average where every trial's final
    evaluation scores all seven STS tasks, else the first STS task they all score; None without one."""
    from trainer.evaluation.sts_average import AVG

    shared = set(STS_TASKS)
    for config in configs:
        shared &= set(RunPlan.of(config).final_sts)
    if shared == set(STS_TASKS):
        return AVG
    return next((task for task in (STS_BENCHMARK, *STS_TASKS) if task in shared), None)


def compile_lines(spec: StudySpec, configs: list[dict[str, Any]]) -> list[str]:
    """Whether the trials' steps run compiled (`compile`, trainer.compiled) on the device they run on, and why: one
    text per decision, with its count when they differ."""
    groups: dict[str, int] = {}
    for config in configs:
        used, reason = RunPlan.of(config).compiles_on(run_device(spec, config))
        text = f"{'compiled' if used else 'eager'} ({reason})"
        groups[text] = groups.get(text, 0) + 1
    return [text + (f", {plural(count, 'trial')}" if len(groups) > 1 else "") for text, count in groups.items()]


def training_lines(configs: list[dict[str, Any]], requested: list[dict[str, Any]] | None,
                   base: dict[str, Any]) -> list[str]:
    """The learning rate and batch size the trials train with, one text per (method, model): the paper's values
    for the model (trainer.method_rules.model_settings, with where the paper gives them) or the study's own;
    a note where a paper reading runs on the embedded model, which no paper starts from. `requested`: each
    config's fields the study set (None: tpe, whose base is all there is before its asks)."""
    from trainer.method_rules import model_settings

    asked = requested if requested is not None else [flatten(base)] * len(configs)
    groups: dict[tuple[str, str, str], int] = {}
    for config, fields in zip(configs, asked):
        method, model = config["method"], config["model"]
        source = model_settings(method, model).source
        own = [name for name in ("optim.lr", "batch_size") if name in fields]
        if len(own) == 2:
            source = "both set by the study"
        elif own:
            source = f"{'batch_size' if own == ['optim.lr'] else 'lr'}: {source}; {own[0]}: the study's"
        key = (f"{method_label(method)} on {model}: lr {config['optim']['lr']:g}, batch {config['batch_size']}",
               source, model)
        groups[key] = groups.get(key, 0) + 1
    texts = [f"{what} ({source})" + (f", {plural(count, 'trial')}" if len(groups) > 1 else "")
             for (what, source, _), count in groups.items()]
    if any(c["model"] == "embedded" and c["variant"] == "paper" for c in configs):
        texts.append("model embedded (all-MiniLM-L6-v2, already trained contrastively on sentence pairs) is no "
                     "paper's starting point: a paper reading on it checks the pipeline, not a paper's table")
    return texts


def _limit_lines(spec: StudySpec) -> list[str]:
    """The study's cost_limit against its estimate (sweep.run.cost_limit); [] without a limit."""
    if spec.cost_limit is None:
        return []
    from sweep.commands.cost_limit import limit_lines, study_estimate

    return limit_lines(spec, study_estimate(spec))


def corpus_lines(configs: list[dict[str, Any]]) -> list[str]:
    """Which corpus the trials train on, one text per distinct data setting (with its trial count when the
    trials differ): the full wiki1m, the corpus sample or data.corpus's file, its path and how many of its
    sentences a trial reads; a data directory without a corpus says what the run would say."""
    from trainer.data import FULL_CORPUS, SAMPLE_CORPUS, corpus_path, count_sentences, data_dir

    groups: dict[tuple[Any, Any, Any], int] = {}
    for config in configs:
        data = config.get("data") or {}
        key = (data.get("data_dir"), data.get("corpus"), data.get("max_sentences"))
        groups[key] = groups.get(key, 0) + 1
    texts = []
    for (directory, corpus, limit), count in groups.items():
        root = data_dir(directory)
        try:
            path = corpus_path(root, corpus, note=False)  # as the trial resolves it, in this environment
            sentences = count_sentences(path)
        except UserError as exc:
            text = f"none: {exc}"
        else:
            kind = {root / FULL_CORPUS: "the full wiki1m", root / SAMPLE_CORPUS: "the corpus sample"}.get(path)
            text = f"{kind} {path}" if kind else f"{path} (data.corpus)"
            text += (f", the first {min(limit, sentences):,} of its {sentences:,} sentences (data.max_sentences)"
                     if limit else f", {sentences:,} sentences")
            if corpus is None and path == root / SAMPLE_CORPUS:
                text += (f"; data.corpus is not set and the full wiki1m is not installed in {root} "
                         "(`sweep data fetch --corpus full` installs it; `data.corpus: wiki1m` insists on it)")
        texts.append(text + (f" ({plural(count, 'trial')})" if len(groups) > 1 else ""))
    return texts


def final_eval_lines(configs: list[dict[str, Any]]) -> list[str]:
    """What each trial's final evaluation covers, one text per distinct eval.final_tasks (with its trial count
    when the trials differ): the tasks, the STS test pairs it encodes and, beside them, the sentences the trial
    trains on (steps x batch_size); the seven-task evaluation of a short run says it costs far more than the
    training, and how to evaluate STS-B alone."""
    from trainer.run_plan import RunPlan

    groups: dict[tuple[str, ...], list[int | None]] = {}  # final tasks -> sentences each trial trains on
    plans: dict[tuple[str, ...], RunPlan] = {}
    for config in configs:
        tasks = tuple((config.get("eval") or {}).get("final_tasks") or ())
        plan = RunPlan.of(config)
        plans.setdefault(tasks, plan)
        steps = plan.total_steps
        groups.setdefault(tasks, []).append(steps * config["batch_size"] if steps else None)
    texts = []
    for tasks, trained in groups.items():
        sts, transfer = list(plans[tasks].final_sts), list(plans[tasks].final_transfer)
        if len(sts) == len(STS_TASKS):
            what = f"the seven STS tasks ({', '.join(sts)})"
        else:
            what = ", ".join(sts) if sts else "no STS task"
        text = what + ("" if tasks else " (eval.final_tasks is not set)")
        if transfer:
            text += f" and the transfer tasks {', '.join(dict.fromkeys(transfer))}"
        pairs = sum(STS_TEST_PAIRS[task] for task in sts)
        known = [n for n in trained if n is not None]
        most = max(known, default=None)
        text += f" at the end of every trial: {pairs:,} STS test pairs, {2 * pairs:,} sentences to encode"
        if most is not None:
            least = min(known)
            span = f"{least:,}" if least == most else f"{least:,} to {most:,}"
            text += f"; each trial trains on {span} sentences (steps x batch_size)"
        if len(sts) == len(STS_TASKS) and most is not None and 2 * pairs >= EVALUATION_DOMINATES * most:
            text += (": the seven-task evaluation costs far more than this short training; eval.final_tasks: "
                     f"[{STS_BENCHMARK}] scores STS-B test alone ({STS_TEST_PAIRS[STS_BENCHMARK]:,} pairs)")
        texts.append(text + (f" ({plural(len(trained), 'trial')})" if len(groups) > 1 else ""))
    return texts


def mteb_lines(configs: list[dict[str, Any]]) -> list[str]:
    """The MTEB tasks the trials score after their final tasks (eval.mteb), each with the samples it evaluates
    (trainer.evaluation.mteb_tasks.task_samples), and how many trials run them; [] without any."""
    per_trial = [tuple((config.get("eval") or {}).get("mteb") or ()) for config in configs]
    tasks = sorted({task for names in per_trial for task in names})
    if not tasks:
        return []
    from trainer.evaluation.mteb_tasks import task_samples

    try:
        sizes = task_samples(tasks)
    except UserError as exc:
        return [str(exc)]
    what = ", ".join(f"{task} ({'size unknown' if sizes[task] is None else f'{sizes[task]:,} test samples'})"
                     for task in tasks)
    trials = sum(1 for names in per_trial if names)
    known = sum(n for n in sizes.values() if n is not None)
    return [f"{what} after the final tasks of {plural(trials, 'trial')}, through mteb: {known:,} samples per "
            "trial to score (not in the device-hour estimate)"]


def _describe_parameter(values: Any) -> str:
    if isinstance(values, list):
        return ", ".join(f"{{expr: {v['expr']}}}" if is_expr(v) else format_value(v) for v in values)
    kind = values["distribution"]
    if kind == "categorical":
        return "categorical " + ", ".join(format_value(v) for v in values["choices"])
    step = f" step {values['step']}" if values.get("step") else ""
    return f"{kind} [{format_value(values['low'])}, {format_value(values['high'])}]{step}"
