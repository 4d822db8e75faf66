"""`sweep doctor --bench`: the GPU self-check (the checklist is sweep.commands.doctor's).

    run_bench(tiny=False) -> BenchRecord  # each method x precision, ~20 trainer steps on a random-weight encoder
                                      # (bert-base-sized on CUDA, tiny on the CPU or with --tiny), after an
                                      # untimed 2-step warm-up; on the CPU also each method at fp32 on a
                                      # MiniLM-L6-sized one (size_probe)

What a report says (its table and its failed verdicts) is sweep.commands.bench_report's.

The bench trains through `trainer.train.train` (the same loop as a trial), passing the precision in the run config
and reporting the precision the run's summary.json says it used, so a device that does not honour a precision
shows it. Per run:
- steady steps/s and sentences/s: steps 2 to steps - 1 (StepClock). The first step pays the run's first-use
  costs (a precision's kernels are loaded on first call), which on a GPU outweigh a step many times over; the
  summary's rate over all steps is kept as all_steps_per_s;
- the seconds of a step (steady), of the STS-B dev evaluation, of the final evaluation (STS-B test) and of the
  set-up (the rest of the run's wall time, the first step's excess included): `run_timings`, what
  `sweep run --dry-run` estimates a study's cost from;
- peak memory (CUDA: torch.cuda.max_memory_allocated; not measured on the CPU);
- on CUDA, a second run whose steps after the first evaluation run under torch.cuda.set_sync_debug_mode("error"),
  switched on through the trainer's `on_step` hook: the first synchronising operation raises. Sync-free when that
  is the next evaluation's loss read-back, else the line that synced;
- the mean training loss over the steps against fp32's (same seed, same batches).
Then the aggregate throughput of two trials sharing the device (two processes, their steady steps: StepClock; on
the CPU on the size probe's encoder) against one alone. It prints a markdown table and writes JSON; it stops
starting runs after BENCH_BUDGET_S (10 minutes) and lists what it skipped. Without a GPU it says plainly that no
GPU was measured.
"""

from __future__ import annotations

import contextlib
import json
import linecache
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from sweep.commands.bench_record import BenchRecord, BenchRun, Sharing, SizeProbe, SyncVerdict
from trainer.errors import PrecisionFloorError
from trainer.method_rules import built_in_methods
from trainer.summary import Summary
from trainer.vocabulary import STS_BENCHMARK

BENCH_BUDGET_S = 600.0  # the whole bench, sharing test included
BENCH_MAX_LENGTH = 32  # tokens per training sentence (the trainer's default)
PRECISIONS = ("fp32", "bf16", "fp16")
NO_GPU_NOTE = ("no GPU was measured: this ran on the CPU with a tiny random encoder, so the figures only show that "
               "the bench runs; run `sweep doctor --bench` on a CUDA machine for GPU figures")
# encoder configs (random weights: no network); bert-base-uncased's shape and a tiny one for the CPU / CI
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512)
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128, initializer_range=0.2)
# The embedded model's shape (all-MiniLM-L6-v2, what CPU studies train). The CPU bench also runs each method at
# fp32 on an encoder of this shape (the size probe): the tiny encoder's times are mostly per-step overhead, so
# `sweep run --dry-run` scales them to a real encoder by this measured ratio, not by compute alone.
PROBE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
             max_position_embeddings=512)
PROBE_STEPS = 10  # at most, per probe run
PROBE_FOLDER = "probe-encoder"  # in the bench's temporary folder
PROBE_RESERVE_S = 60.0  # the time left that the first probe run needs to start (later ones: the longest so far)
NO_GPU_SYNC = SyncVerdict(sync_free=None, first_sync="not checked: no GPU (sync debug mode is CUDA's)")


def write_encoder(folder: Path, shape: dict[str, Any]) -> Path:
    """A random-weight BERT of `shape` with the embedded model's WordPiece tokenizer (no network)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    from trainer.models import resolve_model_path

    hf_logging.disable_progress_bar()  # "Writing model shards" on the terminal says nothing here
    torch.manual_seed(0)
    BertModel(BertConfig(**shape)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model_path("embedded")).save_pretrained(folder)
    return folder


def bench_run_config(model: Path, method: str, precision: str, steps: int, batch: int, device: str,
                data_dir: str | None, cache: Path) -> dict[str, Any]:
    """A trainer config: `steps` training steps, one evaluation (STS-B dev) at the end, STS-B test (alignment and
    uniformity on its pairs: the final evaluation encodes STS-B test and nothing else)."""
    return {"model": str(model), "method": method, "precision": precision, "device": device, "batch_size": batch,
            "max_steps": steps, "seed": 1, "pooler": "cls",
            # a random-weight encoder embeds every sentence alike (mean pairwise cosine near 1 at bert-base depth):
            # the collapse check would end the run at its first evaluation, before what the bench times
            "collapse_threshold": 1.0,
            "eval": {"eval_steps": steps, "final_tasks": [STS_BENCHMARK], "align_uniform_split": "test"},
            "data": {"data_dir": data_dir, "max_sentences": batch * steps, "max_length": BENCH_MAX_LENGTH,
                     "cache_dir": str(cache)}}


def _train(config: dict[str, Any], on_step: Callable[[int], None] | None = None,
           check_every: int | None = None) -> Summary:
    """One training run; `check_every`: steps between the loop's NaN/inf read-backs (None: the device's)."""
    from trainer.config import RunConfig
    from trainer.train import HostReadPolicy, train

    host_reads = HostReadPolicy("sync check", check_every) if check_every else None
    return train(RunConfig.from_dict(config), host_reads=host_reads, on_step=on_step)


def measure_run(config: dict[str, Any], cuda: bool, keep: Callable[[Summary], None] | None = None) -> BenchRun:
    """One run's row (the config's method and precision asked): the precision it ran, its status, steady steps/s
    and sentences/s (StepClock), the summary's rate over all steps, peak memory, the training loss over its steps,
    and run_timings. `keep(summary)`: handed the trainer's summary."""
    import torch

    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    clock = StepClock(config["max_steps"] - 1, cuda=cuda, stop=False)
    summary = _train(config, on_step=clock.on_step)
    if keep is not None:
        keep(summary)
    history = summary.history or [{}]
    batch = config["batch_size"]
    steady = clock.step_seconds
    over_all_steps = summary.sentences_per_s  # steps x batch / train_seconds (unrounded), evaluations excluded
    return BenchRun(
        method=config["method"], precision_asked=config["precision"],
        precision_ran=summary.precision, device=summary.device, steps=summary.steps, status=summary.status,
        steps_per_s=round(1.0 / steady, 3) if steady else None,
        sentences_per_s=round(batch / steady, 2) if steady else None,
        all_steps_per_s=round(over_all_steps / batch, 3) if over_all_steps else None,
        peak_memory_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
        loss=history[0].get("loss"), **run_timings(summary, batch, steady),
    )


def measure_at_precision(config: dict[str, Any], cuda: bool) -> BenchRun:
    """measure_run; where the trainer refuses the config's FGSM eps at its precision (MoCoSE's 5e-9 in bf16 or
    fp16: PrecisionFloorError), the same run without FGSM, `config` changed to match and the row's `note` saying
    so. Any other refusal is raised."""
    try:
        return measure_run(config, cuda)
    except PrecisionFloorError as refused:
        config["fgsm"] = {**config.get("fgsm", {}), "eps": 0.0}
        return measure_run(config, cuda).replace(
            note=f"fgsm.eps 0 ({refused.eps:g} is refused in {refused.precision}: below its resolution)")


def run_timings(summary: Summary, batch: int, step_seconds: float | None = None) -> dict[str, float | None]:
    """What a dry run's cost estimate reads from a bench run (sweep.commands.cost), from the trainer's summary:
    seconds per optimiser step (`step_seconds`, the steady step's, when given; else the summary's mean over all
    steps, the first included), per STS-B dev evaluation, for the final evaluation (STS-B test), and the rest of
    the run's wall time (set-up: model, corpus, evaluation data, and the first steps' time above the steady
    rate), so that the four add up to the run's wall time either way."""
    rate, evaluations = summary.sentences_per_s, len(summary.history or ())
    if step_seconds is None:
        step_seconds = batch / rate if rate else None
    steps = summary.steps or 0
    train = step_seconds * steps if step_seconds is not None else summary.train_seconds or 0.0
    timed = train + (summary.eval_seconds or 0.0) + (summary.final_eval_seconds or 0.0)
    wall = summary.wall_time_s
    return {
        "step_seconds": round(step_seconds, 6) if step_seconds is not None else None,
        "dev_eval_seconds": round(summary.eval_seconds / evaluations, 4) if evaluations else None,
        "final_eval_seconds": summary.final_eval_seconds,
        "setup_seconds": round(max(0.0, wall - timed), 2) if wall is not None else None,
    }


def sync_check(config: dict[str, Any], steps: int) -> SyncVerdict:
    """CUDA: the `steps` training steps after a first evaluation run under set_sync_debug_mode("error"), from
    the step after it on (the evaluation copies the best state to the host: a sync of its own), so the first
    synchronising call raises. Sync-free when that call is the next evaluation's loss read-back, at the end of
    the window: the trainer marks that read (trainer.train.deliberate_host_read), so the verdict reads the
    error, not the source line. So the run evaluates at steps `steps` and 2 x `steps` only, and its NaN/inf
    read-back comes with that evaluation (it is deliberate, every 25 steps in a real run, and would otherwise fall
    inside the window). The mode is switched on through the trainer's `on_step` hook once the first evaluation's step is
    done (SyncWindow), which changes nothing else."""
    import torch

    from trainer.train import LOSS_READ_BACK, train

    warm = steps
    config = {**config, "max_steps": warm + steps, "eval": {**config["eval"], "eval_steps": warm}}
    window = SyncWindow(warm, entry=train)
    try:
        summary = _train(config, on_step=window.on_step, check_every=warm + steps)
    except RuntimeError as exc:
        torch.cuda.set_sync_debug_mode(0)
        if "synchroniz" not in str(exc):
            raise
        torch.cuda.synchronize()
        seconds = time.perf_counter() - (window.start if window.start is not None else time.perf_counter())
        where, step = window.site(exc.__traceback__)
        # sync-free: the first sync of the window is the loop's own loss read-back, which ends it
        free = step == warm + steps and getattr(exc, "host_read", None) == LOSS_READ_BACK
        return SyncVerdict(sync_free=free, first_sync=where, at_step=step,
                           steps_per_s=round(steps / seconds, 3) if free and seconds > 0 else None)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    if window.start is None:  # the run ended at or before its first evaluation: the window never opened
        return SyncVerdict(sync_free=None, first_sync=f"not checked: the run ended at step {summary.steps} "
                                                      f"({summary.status}: {summary.reason})")
    return SyncVerdict(sync_free=None, first_sync="no synchronising call was flagged (not expected: the evaluation "
                                                  "reads the loss back)")


class SyncWindow:
    """The sync check's view of a run, through the trainer's `on_step` hook: sync debug mode "error" is switched
    on (and the clock started) once step `warm`, the first evaluation's, is done; and the step in progress is
    known when a synchronising call raises. `entry` is the trainer's entry point (trainer.train.train): the
    function it calls is the training loop."""

    def __init__(self, warm: int, entry: Callable[..., Any]):
        self.warm, self.entry = warm, entry
        self.done = 0  # the last step done
        self.start: float | None = None  # time.perf_counter() when the mode was switched on

    def on_step(self, step: int) -> None:
        self.done = step
        if step == self.warm:
            import torch

            torch.cuda.synchronize()
            self.start = time.perf_counter()
            torch.cuda.set_sync_debug_mode("error")

    def site(self, tb: Any) -> tuple[str, int | None]:
        """Where a synchronising call came from: the line of the training loop that led to it, plus the
        innermost project line when that is elsewhere ("trainer/train.py:227: <code> (via ...)"), and the
        step in progress then (None when the call was not made in the loop)."""
        root = str(Path(__file__).resolve().parents[2])
        loop, inner, called_by_entry = "", "", False
        while tb is not None:
            frame = tb.tb_frame
            filename = frame.f_code.co_filename
            if filename.startswith(root):
                code = linecache.getline(filename, tb.tb_lineno).strip()
                inner = f"{os.path.relpath(filename, root)}:{tb.tb_lineno}: {code}"
                if called_by_entry:
                    loop = inner
            called_by_entry = frame.f_code is self.entry.__code__
            tb = tb.tb_next
        step = self.done + 1 if loop else None
        if loop and inner != loop:
            return f"{loop} (via {inner})", step
        return loop or inner, step


class StepsTimed(Exception):
    """Raised through the trainer by StepClock once its steps are timed: the run ends there."""


class StepClock:
    """A run's steady training speed, through the trainer's `on_step` hook: the steps after the first (which
    pays the run's first-use costs) up to `last` (before the evaluation at the run's end) are timed (on CUDA
    with a device synchronisation at both ends, the only two the clock adds), then, with `stop`, the run is
    stopped (StepsTimed). `step_seconds`: the mean timed step, None until `last` is done (or if last < 2)."""

    def __init__(self, last: int, cuda: bool, stop: bool = True):
        self.last, self.cuda, self.stop = last, cuda, stop
        self.start: float | None = None
        self.seconds: float | None = None

    @property
    def step_seconds(self) -> float | None:
        return self.seconds / (self.last - 1) if self.seconds and self.last > 1 else None

    def on_step(self, step: int) -> None:
        if step not in (1, self.last):
            return
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        if step == 1:
            self.start = time.perf_counter()
        elif self.start is not None:
            self.seconds = time.perf_counter() - self.start
            if self.stop:
                raise StepsTimed


def sharing_check(config: dict[str, Any], encoder: str) -> Sharing:
    """Aggregate sentences/s of two trials (processes) sharing the device, against one alone: each process's
    steady speed (StepClock), so that the processes' start-up is not what is compared. `encoder`: the shape name
    of the encoder they train."""
    def start() -> subprocess.Popen:
        env = dict(os.environ) if config["device"] != "cpu" else {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.Popen([sys.executable, "-m", "sweep.commands.gpu_bench", "--one-run", json.dumps(config)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def result(proc: subprocess.Popen) -> float:
        out, err = proc.communicate(timeout=BENCH_BUDGET_S)
        if proc.returncode != 0:
            raise RuntimeError(f"a bench process failed: {err.strip().splitlines()[-1:] or proc.returncode}")
        return float(json.loads(out.strip().splitlines()[-1])["sentences_per_s"])

    alone = result(start())
    pair = [start(), start()]
    together = [result(p) for p in pair]
    return Sharing(method=config["method"], precision=config["precision"], steps_timed=config["max_steps"] - 2,
                   alone_sentences_per_s=alone, shared_sentences_per_s=together,
                   aggregate_sentences_per_s=round(sum(together), 2),
                   aggregate_vs_alone=round(sum(together) / alone, 3) if alone else None, encoder=encoder)


def run_bench(tiny: bool = False, methods: tuple[str, ...] | None = None, precisions: tuple[str, ...] = PRECISIONS,
              steps: int = 20, data_dir: str | None = None, budget_s: float = BENCH_BUDGET_S,
              say: Callable[[str], None] = print, probe: bool = True, compiled: bool = False) -> BenchRecord:
    """The bench (module docstring). `probe`: on the CPU, also the size probe, which only `sweep run --dry-run`'s
    CPU estimates use; False leaves it out (the report's size_probe stays None): scripts/device_check.sh's CPU
    mode, which rehearses the GPU path, where no probe runs. `compiled`: after each eager method x precision run,
    the same run with the compiled step (`compile: on`), its row marked `compiled`, with the compile's seconds and
    graphs, its loss against the eager run's and, on CUDA, the sync check of the compiled step."""
    methods = methods or built_in_methods()  # the bench measures the built-in methods (plugins: priced as them)
    import torch

    from trainer.data import data_dir as resolve_data_dir

    started = time.monotonic()
    cuda = torch.cuda.is_available()
    tiny = tiny or not cuda
    device = "cuda" if cuda else "cpu"
    usable = list(precisions)  # on the CPU too: the run's summary says which precision it actually used
    if cuda and "bf16" in usable and not torch.cuda.is_bf16_supported():
        usable.remove("bf16")
        report_skip = ["bf16: this GPU does not support it"]
    else:
        report_skip = []
    batch = 16 if tiny else 64
    root = str(resolve_data_dir(data_dir))
    threads = torch.get_num_threads()
    if not cuda:
        # a tiny model's ops take microseconds: OpenMP's start-up and oversubscription on a shared CPU would be
        # most of what is timed (one thread gives the same results)
        torch.set_num_threads(1)
    header: dict[str, Any] = {  # what the record says before anything is measured
        "device": device, "gpu": torch.cuda.get_device_name(0) if cuda else None, "gpu_measured": cuda and not tiny,
        "note": None if cuda and not tiny else (NO_GPU_NOTE if not cuda else
                                                "--tiny: a tiny encoder, not bert-base; the figures are not "
                                                "representative"),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "encoder": {"shape": "tiny" if tiny else "bert-base", **(TINY if tiny else BERT_BASE)},
        "batch_size": batch, "max_length": BENCH_MAX_LENGTH, "final_tasks": [STS_BENCHMARK],
        "threads": 1 if not cuda else None, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "steps": steps, "budget_s": budget_s, "not_supported": report_skip,
    }
    runs: list[BenchRun] = []  # each row typed as it is measured
    skipped: list[str] = []
    probed: SizeProbe | None = None
    sharing: Sharing | None = None
    with tempfile.TemporaryDirectory(prefix="sweep-doctor-") as tmp:
        model = write_encoder(Path(tmp) / "encoder", TINY if tiny else BERT_BASE)
        cache = Path(tmp) / "cache"
        longest = 0.0  # the longest method x precision so far: no run starts that would end past the budget
        warm = False
        for method in methods:
            fp32_loss = None
            for precision in usable:
                if time.monotonic() - started + longest > budget_s:
                    skipped.append(f"{method} {precision}")
                    continue
                run_started = time.monotonic()
                if not warm:  # the process's first-use costs (allocators, kernels, thread pools), untimed
                    say("bench: warm-up (2 steps, not timed) ...")
                    _train(bench_run_config(model, method, "fp32", 2, batch, device, root, cache))
                    warm = True
                config = bench_run_config(model, method, precision, steps, batch, device, root, cache)
                say(f"bench: {method} {precision} ...")
                run = measure_at_precision(config, cuda)
                if precision == "fp32":
                    fp32_loss = run.loss
                elif fp32_loss is not None and run.loss is not None and fp32_loss:
                    run = run.replace(loss_vs_fp32=round(abs(run.loss - fp32_loss) / abs(fp32_loss), 5))
                runs.append(run.replace(sync=sync_check(config, steps) if cuda else NO_GPU_SYNC))
                longest = max(longest, time.monotonic() - run_started)
                if compiled:
                    if time.monotonic() - started + longest > budget_s:
                        skipped.append(f"{method} {precision} compiled")
                        continue
                    say(f"bench: {method} {precision} compiled ...")
                    runs.append(compiled_run(run, config, cuda, steps))
                    longest = max(longest, (time.monotonic() - run_started) / 2)
        shape, share_steps = header["encoder"]["shape"], steps
        if probe and not cuda:
            probe_started = time.monotonic()
            probed = size_probe(Path(tmp), methods, min(steps, PROBE_STEPS), batch, root,
                                lambda: budget_s - (time.monotonic() - started), say)
            if probed.runs:  # trials share the CPU as real encoders do, not as the tiny one's overhead does
                model, shape, share_steps = Path(tmp) / PROBE_FOLDER, probed.encoder["shape"], probed.steps
                longest = (time.monotonic() - probe_started) / len(probed.runs)
        if time.monotonic() - started + 2 * longest > budget_s:  # one alone, then two at once
            skipped.append("sharing")
        else:
            say(f"bench: two trials sharing one device ({shape} encoder) ...")
            shared = bench_run_config(model, "simcse", "auto", max(share_steps, 3), batch, device, root, cache)
            sharing = sharing_check(shared, shape)
    torch.set_num_threads(threads)
    return BenchRecord(**header, runs=runs, sharing=sharing, size_probe=probed, skipped=skipped,
                       elapsed_s=round(time.monotonic() - started, 1))


def compiled_run(eager: BenchRun, config: dict[str, Any], cuda: bool, steps: int) -> BenchRun:
    """The bench run `eager` again with the compiled step: its row, marked `compiled`, with the compile's seconds and
    graphs (the trainer's summary), the loss against the eager run's and the sync check on CUDA."""
    config = {**config, "compile": "on"}
    summaries: list[Summary] = []
    run = measure_run(config, cuda, keep=summaries.append)
    block = summaries[0].compile or {}
    loss_vs_eager = (round(abs(run.loss - eager.loss) / abs(eager.loss), 7)
                     if eager.loss and run.loss is not None else None)
    return run.replace(compiled=True, note=eager.note, compile_seconds=block.get("seconds"),
                       compile_graphs=block.get("graphs"), loss_vs_eager=loss_vs_eager,
                       sync=sync_check(config, steps) if cuda else NO_GPU_SYNC)


def size_probe(tmp: Path, methods: tuple[str, ...], steps: int, batch: int, root: str,
               time_left: Callable[[], float], say: Callable[[str], None]) -> SizeProbe:
    """The CPU bench's runs at PROBE's shape: each method at fp32, `steps` steps, timed as the main runs
    (`run_timings`); a run starts only while `time_left()` exceeds the longest one so far (PROBE_RESERVE_S
    before the first), the others are listed as skipped."""
    encoder = {"shape": "MiniLM-L6-sized", **PROBE}
    runs: list[BenchRun] = []
    skipped: list[str] = []
    model = None
    longest = 0.0
    for method in methods:
        if time_left() < (longest or PROBE_RESERVE_S):
            skipped.append(f"{method} fp32")
            continue
        run_started = time.monotonic()
        model = model or write_encoder(tmp / PROBE_FOLDER, PROBE)
        say(f"bench: {method} fp32 on a {encoder['shape']} encoder (size probe) ...")
        config = bench_run_config(model, method, "fp32", steps, batch, "cpu", root, tmp / "probe-cache")
        runs.append(measure_run(config, cuda=False))
        longest = max(longest, time.monotonic() - run_started)
    return SizeProbe(encoder=encoder, steps=steps, runs=runs, skipped=skipped)


def _one_run(config_json: str) -> None:
    """`python -m sweep.commands.gpu_bench --one-run CONFIG`: one bench run in this process, stopped once its
    steady steps are timed (StepClock: steps 2 to max_steps - 1); prints {"sentences_per_s": ...} as JSON."""
    config = json.loads(config_json)
    window = StepClock(config["max_steps"] - 1, cuda=config["device"] != "cpu")
    with contextlib.redirect_stdout(sys.stderr):
        try:
            _train(config, on_step=window.on_step)
        except StepsTimed:
            pass
    if not window.seconds:
        sys.exit("the run ended before its timed steps (diverged or collapsed)")
    print(json.dumps({"sentences_per_s": round((window.last - 1) * config["batch_size"] / window.seconds, 2)}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one-run":
        _one_run(sys.argv[2])
    else:
        sys.exit("usage: python -m sweep.commands.gpu_bench --one-run CONFIG_JSON (internal; run `sweep doctor`)")
