"""A study's cost in device-hours before it runs (`sweep run --dry-run`), from the bench record that
`sweep doctor --bench` keeps per device (sweep.commands.bench_record.BenchRecord).

    run_device(spec, config) -> "cuda" | "cpu"     # where a trial runs: base.device, else resources.gpu > 0
    find_records(device, local_gpu_name())          # ([BenchRecord], None), or ([], the line naming the
                                                    # command that makes the record)
    trial_cost(config, device, record)              # -> TrialCost: planned steps and evaluations, seconds
    cost_lines(spec, device, record, costs) -> [str]  # the dry run's `cost:` lines for one record
    study_cost_lines(spec, configs) -> ([str], [TrialCost])  # those of every record of the study's device

The estimate of one trial, from its plan (trainer.run_plan.RunPlan, what the trainer runs by: its steps,
evaluations, final tasks, whether test scores are tracked, its precision) and the record's run of the trial's
method at that precision:

    steps x step_seconds x (batch_size / bench batch) x size
  + dev evaluations x dev_eval_seconds x size          (the trainer's: every eval.eval_steps and at the last step;
                                                        with the seven STS test tasks tracked, those too)
  + final_eval_seconds x (STS test pairs / STS-B test pairs) x size
    (+ dev_eval_seconds x size when alignment/uniformity encode STS-B dev: eval.align_uniform_split dev)
  + setup_seconds x size                               (model, corpus and evaluation data loaded by the trainer)

Every time is then multiplied by the slowdown the bench measured with two trials sharing the device, when the
study runs more than one trial at once on it (`trials_at_once`, `sharing_slowdown`).

`size` (one factor per timing, set-up included) takes the bench's encoder to the study's model (`size_factors`):
from the CPU bench's size probe where the record has one, else by compute per token (layers x (4 h^2 + 2 h x
intermediate)); 1 when the study's model config cannot be read here. Step time linear in batch size is a
first-order estimate.
Nothing here imports torch: the GPU's name comes from `nvidia-smi`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep.commands.bench_record import RUN_TIMINGS, BenchRecord, BenchRun
from sweep.text import plural
from trainer.run_plan import RunPlan
from trainer.vocabulary import SIMCSE, STS_BENCHMARK, STS_TEST_PAIRS

BENCH_COMMAND = "sweep doctor --bench"


@dataclass
class TrialCost:
    """A trial's planned work and, with a record, its estimated device seconds (None: not estimated, `why`)."""

    steps: int | None
    evaluations: int | None  # STS-B dev evaluations; the final evaluation comes on top
    seconds: float | None = None
    parts: dict[str, float] = field(default_factory=dict)  # train, dev, final, setup (seconds)
    notes: list[str] = field(default_factory=list)
    why: str | None = None


# ---- where the trials run, and the record for it ------------------------------------------------------------
def run_device(spec: Any, config: dict[str, Any]) -> str:
    """The device type a trial of `spec` runs on: base.device when it names one, else CUDA when the study asks
    for GPUs (resources.gpu > 0), else the CPU."""
    device = str(config.get("device") or "auto")
    if device.startswith("cuda"):
        return "cuda"
    if device == "cpu":
        return "cpu"
    return "cuda" if spec.resources.gpu > 0 else "cpu"


def local_gpu_name() -> str | None:
    """This machine's first GPU as `nvidia-smi` names it (what torch.cuda.get_device_name reports), or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return names[0] if result.returncode == 0 and names else None


def find_records(device: str, gpu_name: str | None) -> tuple[list[BenchRecord], str | None]:
    """The records that apply to trials on `device` ("cuda" or "cpu") run from this machine (`gpu_name`: its
    GPU, None without one): the local GPU's or CPU's record; for CUDA trials planned on a machine without a
    GPU, every GPU record in the records folder. Without one, a line naming the command that makes it."""
    folder = BenchRecord.folder()
    if device == "cuda" and gpu_name is None:
        records = []
        for path in sorted(folder.glob("*.json")):
            try:
                record = BenchRecord.read(path)
            except (OSError, ValueError):
                continue
            if record.device == "cuda":
                records.append(record)
        if records:
            return records, None
        return [], (f"no GPU here and no GPU bench record in {folder}: run `{BENCH_COMMAND}` on a machine with "
                    f"the GPU the trials will run on, then copy the file its last line names (`written: ...`) "
                    f"into {folder} here")
    path = BenchRecord.path_for(gpu_name if device == "cuda" else None)
    what = gpu_name if device == "cuda" else "the CPU"
    # on a GPU machine the bench measures the GPU: hiding it makes the bench (and its record) the CPU's
    command = BENCH_COMMAND if device == "cuda" or gpu_name is None else f"CUDA_VISIBLE_DEVICES= {BENCH_COMMAND}"
    if not path.is_file():
        return [], f"no bench record for {what} ({path}): `{command}` makes one"
    try:
        return [BenchRecord.read(path)], None
    except (OSError, ValueError) as exc:
        return [], f"the bench record {path} cannot be read ({exc}): `{command}` writes it again"


# ---- one trial ------------------------------------------------------------------------------------------------
def final_sts_pairs(plan: RunPlan, evaluation: dict[str, Any]) -> tuple[int, bool, bool]:
    """(STS test pairs the final evaluation encodes, whether it also encodes STS-B dev, whether it has transfer
    tasks too), from the run's plan and its `eval` section. Alignment and uniformity (eval.align_uniform_split)
    encode STS-B dev, or STS-B test where it is not scored already."""
    sts, transfer = list(plan.final_sts), bool(plan.final_transfer)
    pairs = sum(STS_TEST_PAIRS[t] for t in sts)
    split = evaluation.get("align_uniform_split", "dev") if sts else None
    if split == "test" and STS_BENCHMARK not in sts:
        pairs += STS_TEST_PAIRS[STS_BENCHMARK]
    return pairs, split == "dev", transfer


def encoder_shape(model: str) -> dict[str, Any] | None:
    """The study model's config.json (layers, hidden and intermediate sizes) read from disk: the embedded
    model's folder, a local folder, or the Hugging Face cache; None when it is not here (nothing is downloaded)."""
    from trainer.errors import UserError
    from trainer.models import resolve_model_path

    try:
        path = Path(resolve_model_path(model)).expanduser()
    except UserError:
        return None
    config = path / "config.json"
    if not config.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model, "config.json")
        except Exception:  # an id the hub library refuses, or no hub library: the size is unknown
            return None
        if not isinstance(cached, str):
            return None
        config = Path(cached)
    try:
        shape = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    return shape if compute_per_token(shape) else None


def compute_per_token(shape: dict[str, Any]) -> float | None:
    """Multiply-adds per token of an encoder's layers (attention projections 4 h^2, feed-forward 2 h x i);
    the embeddings and the attention scores (short sentences) are left out."""
    try:
        hidden, layers = int(shape["hidden_size"]), int(shape["num_hidden_layers"])
        inner = int(shape.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError):
        return None
    return float(layers * (4 * hidden * hidden + 2 * hidden * inner)) or None


def _layers_text(shape: dict[str, Any]) -> str:
    return f"{shape.get('num_hidden_layers', '?')} layers x {shape.get('hidden_size', '?')}"


def bench_stand_in(method: str) -> str | None:
    """The built-in method whose bench run prices a plugin's method: the one its class extends most closely
    (SimCSE's when it extends none); None for a built-in method (the bench measures it) or an unknown name."""
    from trainer.method_rules import registered

    entries = registered()
    entry = entries.get(method)
    if entry is None or entry.origin == "built in":
        return None
    implementation = entry.implementation()
    built_in = [(name, known.implementation()) for name, known in entries.items() if known.origin == "built in"]
    bases = [(name, cls) for name, cls in built_in if issubclass(implementation, cls)]
    if not bases:
        return SIMCSE
    return min(bases, key=lambda item: implementation.__mro__.index(item[1]))[0]


def size_factors(record: BenchRecord, method: str, model: str, model_shape: dict[str, Any] | None
                 ) -> tuple[dict[str, float], str | None]:
    """Per timing (RUN_TIMINGS), the factor from the bench's encoder to the study's model (`model_shape`: its shape,
    None when unknown), and the note that says how it was scaled (None: the same size).

    With the CPU bench's size probe (the same timings at a larger shape, sweep.commands.gpu_bench.size_probe):
    its measured ratio to the main run of the same method at fp32 (any probed method's when this one was not
    probed), interpolated in log compute between the two shapes, and linear in compute past the probe's
    (where compute dominates). Without it, compute per token alone: the step and evaluation times, not the
    set-up; from a tiny encoder, whose times are mostly per-step overhead, that overstates a real encoder's."""
    same = dict.fromkeys(RUN_TIMINGS, 1.0)
    base = compute_per_token(record.encoder)
    if model_shape is None or base is None:
        return same, (f"assumes the bench's {record.shape_text()}: the size of model {model} is not known here "
                      "(its config.json is not on this machine)")
    target = compute_per_token(model_shape)
    if target == base:
        return same, None
    probe = record.size_probe
    probe_compute = compute_per_token(probe.encoder) if probe else None
    pairs: list[tuple[BenchRun, BenchRun | None]] = [(p, record.run(p.method, "fp32")) for p in (probe.runs if probe
                                                                                               else [])]
    pairs = [(p, r) for p, r in pairs if r is not None and all(getattr(p, k) for k in RUN_TIMINGS)]
    pairs.sort(key=lambda pair: pair[0].method != method)  # this method's probe first
    what = f"model {model} ({_layers_text(model_shape)}) against the bench's {record.shape_text()}"
    if not pairs or not probe_compute or probe_compute <= base:
        factors = {key: target / base for key in RUN_TIMINGS if key != "setup_seconds"}
        rough = ("; rough: a tiny encoder's times are mostly per-step overhead, so this overstates"
                 if record.encoder.get("shape") == "tiny" else "")
        return {**same, **factors}, f"{what}: times scaled by compute per token, x{target / base:.3g}{rough}"
    probed, bench_run = pairs[0]  # the same method at the probe's shape and at the bench's
    factors = {}
    for key in RUN_TIMINGS:
        ratio = float(getattr(probed, key)) / float(getattr(bench_run, key))
        if target <= base:
            factors[key] = 1.0
        elif target <= probe_compute:
            factors[key] = ratio ** (math.log(target / base) / math.log(probe_compute / base))
        else:
            factors[key] = ratio * target / probe_compute
    return factors, (f"{what}: scaled by the bench's {probed.method} fp32 run on a "
                     f"{_layers_text(probe.encoder)} encoder (a step x{factors['step_seconds']:.3g}, an "
                     f"evaluation x{factors['dev_eval_seconds']:.3g})")


def trials_at_once(spec: Any, device: str, trials: int) -> int:
    """How many of the study's `trials` run at once on one device: on CUDA 1 / resources.gpu (a fraction of a
    GPU each); on the CPU this machine's cores / resources.cpu (Ray's count of the trials it starts)."""
    if device == "cuda":
        gpu = spec.resources.gpu
        at_once = math.floor(1 / gpu + 1e-9) if 0 < gpu < 1 else 1
    else:
        cpu = spec.resources.cpu
        at_once = math.floor((os.cpu_count() or 1) / cpu + 1e-9) if cpu > 0 else 1
    return max(1, min(at_once, trials))


def sharing_slowdown(record: BenchRecord, at_once: int, device: str) -> tuple[float, str | None]:
    """The factor on each trial's time when `at_once` trials share the device: the bench's two processes sharing
    it each ran at half their aggregate throughput (2 / aggregate_vs_alone); and the note that says so."""
    if at_once <= 1:
        return 1.0, None
    where = "GPU" if device == "cuda" else "CPU"
    ratio = record.sharing.aggregate_vs_alone if record.sharing else None
    if not ratio:
        return 1.0, (f"{at_once} trials at once share the {where}, which the record did not measure (its sharing "
                     "run was skipped): each trial may take longer")
    more = "; measured with two, more at once may slow each more" if at_once > 2 else ""
    factor = max(1.0, 2 / ratio)  # two processes above twice one alone's throughput: noise, not a speed-up
    return factor, (f"{at_once} trials at once share the {where}: each trial's times x{factor:.3g}, as the bench's "
                    f"two trials sharing it ran (x{ratio:g} one alone's throughput together){more}")


def trial_cost(config: dict[str, Any], device: str, record: BenchRecord | None,
               shapes: dict[str, dict[str, Any] | None] | None = None, slowdown: float = 1.0) -> TrialCost:
    """The planned work of one trial (resolved config) and its estimated seconds from `record` (module
    docstring). `shapes`: model name -> encoder_shape, filled as
    models are looked up; `slowdown`: the factor on every time from trials sharing the device
    (`sharing_slowdown`)."""
    plan = RunPlan.of(config)  # what trainer.train will do: its steps, evaluations, final tasks, precision
    steps, evaluations = plan.total_steps, plan.evaluations
    cost = TrialCost(steps, evaluations)
    if record is None:
        return cost
    if steps is None:
        cost.why = "the run's length is unknown (no corpus installed: `sweep data fetch`)"
        return cost
    precision = plan.precision_on(device)
    compiles = plan.compiles_on(device)[0]
    run = record.run(config["method"], precision, compiled=compiles)
    stand_in = bench_stand_in(config["method"]) if run is None else None
    if stand_in is not None and (run := record.run(stand_in, precision, compiled=compiles)) is not None:
        cost.notes.append(f"{config['method']} is priced as the bench's {stand_in} run, the built-in method its class "
                          "extends (the bench measures the built-in methods)")
    if run is None:
        kind = " compiled" if compiles else ""
        cost.why = (f"the record {record.path} has no {config['method']} {precision}{kind} run with timings: "
                    f"`{BENCH_COMMAND}` measures every method x precision" + (", `--compiled` the compiled step too"
                                                                           if compiles else ""))
        return cost
    if compiles:
        cost.notes.append(f"the step runs compiled: set-up includes the bench's compile ({run.compile_seconds} s)")
    batch_ratio = config["batch_size"] / record.batch_size
    if batch_ratio != 1:
        cost.notes.append(f"batch_size {config['batch_size']} against the bench's {record.batch_size}: step time "
                          "taken as linear in batch size (a first-order estimate)")
    shapes = {} if shapes is None else shapes
    model = str(config.get("model"))
    if model not in shapes:
        shapes[model] = encoder_shape(model)
    size, note = size_factors(record, config["method"], model, shapes[model])
    if note:
        cost.notes.append(note)
    length = (config.get("data") or {}).get("max_length")
    if length and length != record.max_length:
        cost.notes.append(f"data.max_length {length} against the bench's {record.max_length}: not scaled")
    pairs, with_dev, transfer = final_sts_pairs(plan, config.get("eval") or {})
    per_pair = float(run.final_eval_seconds) / STS_TEST_PAIRS[STS_BENCHMARK]  # the bench's final task: STS-B test
    tracked = per_pair * sum(STS_TEST_PAIRS.values()) if plan.tracks_test else 0.0
    dev_each = float(run.dev_eval_seconds) + tracked
    if plan.tracks_test:
        cost.notes.append("each evaluation also scores the seven STS test tasks (tracked for test selection)")
    if transfer:
        cost.notes.append("the final evaluation's transfer tasks are not in the estimate (the bench does not "
                          "time them)")
    cost.parts = {
        "train": steps * float(run.step_seconds) * batch_ratio * size["step_seconds"],
        "dev": evaluations * dev_each * size["dev_eval_seconds"],
        "final": (per_pair * pairs * size["final_eval_seconds"]
                  + (float(run.dev_eval_seconds) * size["dev_eval_seconds"] if with_dev else 0.0)),
        "setup": float(run.setup_seconds) * size["setup_seconds"],
    }
    cost.parts = {part: seconds * slowdown for part, seconds in cost.parts.items()}
    cost.seconds = sum(cost.parts.values())
    return cost


# ---- the dry run's lines --------------------------------------------------------------------------------------
def hours_text(seconds: float) -> str:
    """Device time as hours with a readable duration beside it: '0.0194 device-hours (70 s)'."""
    if seconds < 120:
        readable = f"{seconds:.0f} s"
    elif seconds < 7200:
        readable = f"{seconds / 60:.1f} min"
    else:
        readable = f"{seconds / 3600:.1f} h"
    return f"{seconds / 3600:.3g} device-hours ({readable})"


def record_text(record: BenchRecord) -> str:
    when = record.date or time.strftime("%Y-%m-%d", time.gmtime(record.path.stat().st_mtime))
    threads = ", one thread" if record.device == "cpu" else ""
    return f"{record.path} ({str(when)[:10]}; {record.shape_text()}, batch {record.batch_size}{threads})"


def cost_lines(spec: Any, device: str, record: BenchRecord, costs: list[TrialCost], trials: int | None = None,
               upper_bound_why: str | None = None) -> list[str]:
    """The `cost:` lines for one record: where it was measured, one trial (its parts when all trials cost the
    same, else the range), the study (`trials` of them, default the count of `costs`), and the notes."""
    estimated = [c for c in costs if c.seconds is not None]
    where = record.name if device == "cuda" else "the CPU"
    lines = [f"on {where}, from the bench record {record_text(record)}"]
    if not estimated:
        lines.append(f"not estimated: {next((c.why for c in costs if c.why), 'no trial has a known length')}")
        return lines
    low, high = min(c.seconds for c in estimated), max(c.seconds for c in estimated)
    if low == high and len({tuple(sorted(c.parts.items())) for c in estimated}) == 1:
        one = estimated[0]
        parts = one.parts
        lines.append(f"per trial {hours_text(one.seconds)}: {one.steps} steps {parts['train']:.1f} s + "
                     f"{plural(one.evaluations, 'STS-B dev evaluation')} {parts['dev']:.1f} s + the final "
                     f"evaluation {parts['final']:.1f} s + set-up {parts['setup']:.1f} s")
    else:
        lines.append(f"per trial {hours_text(low)} to {hours_text(high)} (the table's device-h column)")
    if trials is None:
        total = sum(c.seconds for c in estimated)
        of = "" if len(estimated) == len(costs) else f" ({len(estimated)} of {len(costs)} trials estimated)"
        study = f"study: {plural(len(costs), 'trial')}, {hours_text(total)}{of}"
    else:  # planned from one config (TPE): its values are each parameter's first, the run chooses the others
        total = high * trials
        study = (f"study: up to {plural(trials, 'trial')}, {hours_text(total)} at each parameter's first value "
                 "(TPE chooses the values during the run)")
    if upper_bound_why:
        study += f": an upper bound ({upper_bound_why})"
    lines.append(study)
    notes = dict.fromkeys(note for c in costs for note in c.notes)
    notes.update(dict.fromkeys(c.why for c in costs if c.why and c.seconds is None))
    if device == "cuda" and spec.resources.gpu not in (0, 1):  # device-hours count trial time, not GPUs held
        gpu = spec.resources.gpu
        notes[f"each trial holds {gpu:g} GPU (resources.gpu): the study holds {total * gpu / 3600:.3g} "
              "GPU-hours"] = None
    if device == "cpu" and spec.resources.cpu > 1:
        notes[f"the bench timed one CPU thread; each trial has {spec.resources.cpu:g} (not scaled)"] = None
    lines += [f"note: {note}" for note in notes]
    return lines


def study_cost_lines(spec: Any, configs: list[dict[str, Any]], trials: int | None = None
                     ) -> tuple[list[str], list[TrialCost]]:
    """The `cost:` lines and each config's TrialCost, from the bench record(s) of the
    device the trials run on; `trials`: how many trials the study runs at most when `configs` only plans them
    (TPE: its planning config). Without a record, one line naming the command that makes one."""
    devices = {run_device(spec, config) for config in configs}
    device = "cuda" if "cuda" in devices else "cpu"
    records, advice = find_records(device, local_gpu_name())
    shapes: dict[str, Any] = {}
    bound = f"the {spec.scheduler.type} scheduler stops trials early" if spec.scheduler else None
    if not records:
        return [f"not estimated: {advice}"], [trial_cost(config, device, None) for config in configs]
    texts: list[str] = []
    first: list[TrialCost] = []
    at_once = trials_at_once(spec, device, trials or len(configs))
    for record in records:
        slowdown, shared = sharing_slowdown(record, at_once, device)
        costs = [trial_cost(config, device, record, shapes, slowdown) for config in configs]
        for cost in costs:
            cost.notes += [shared] if shared else []
        texts += cost_lines(spec, device, record, costs, trials=trials, upper_bound_why=bound)
        first = first or costs
    return texts, first
