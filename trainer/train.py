"""One training run: `train(config, report=None) -> summary`.

Read top to bottom: build the method object for the config (trainer.methods: SimCSE, GS-InfoNCE, MixCSE,
MoCoSE), load the tokenised corpus, run the optimiser loop (evaluating STS-B dev every `eval.eval_steps`
and keeping the best state), then evaluate the final tasks with the best state and return
the summary. The loop is the same for every method: the method object computes its loss on a batch and
does what follows the optimiser step (MoCoSE's EMA update and queue push); FGSM and token shuffle wrap
any method.

A NaN/inf loss ends the run with status `diverged`; a collapsed embedding space (mean pairwise cosine of
STS-B dev embeddings above `collapse_threshold`, or a constant similarity) with status `collapsed`.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from trainer import compiled
from trainer.augment import AUTOCAST_DTYPES, FGSM, EvaluationAugments, check_fgsm_precision
from trainer.config import RunConfig
from trainer.corpus import load_corpus
from trainer.data import corpus_path, data_dir
from trainer.errors import UserError
from trainer.evaluation.dev import DevEvaluator
from trainer.evaluation.encoder import SentenceEncoder
from trainer.evaluation.mteb_tasks import check_tasks, final_mteb, summary_parts
from trainer.evaluation.sts import evaluate_sts, split_tasks
from trainer.evaluation.transfer import evaluate_transfer
from trainer.evaluation.transfer_data import load_transfer_tasks
from trainer.files import apply_umask_modes, json_safe
from trainer.methods import Method, method_class
from trainer.models import ComputePrecision, load_encoder, pick_device
from trainer.optim import build_optimizer
from trainer.provenance import provenance
from trainer.run_plan import RunPlan
from trainer.summary import Summary, build_summary
from trainer.vocabulary import COLLAPSED, DIVERGED, OK, STS_TASKS

Report = Callable[[dict[str, Any]], None]
StepHook = Callable[[int], None]  # on_step(step): see `train`
SKIPPED_STEP_WARNING = r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`"  # torch's
TEST_SELECTED_LABEL = ("checkpoint with the best seven-task TEST average, as the released MoCoSE code selects; "
                       "the test data chose it, so it is not a held-out estimate")


@dataclass(frozen=True)
class HostReadPolicy:
    """How often the loop reads the running loss back to the host for the NaN/inf check. Between these
    reads (and the evaluations) the loop reads nothing from the device: on a GPU every read is a sync
    that drains the queue of kernels. The CPU has no queue to drain, so it checks every step."""

    name: str
    check_every: int  # steps between reads of the running loss


EVERY_STEP = HostReadPolicy("every_step", 1)
DEFERRED = HostReadPolicy("deferred", 25)


# What the loop's one deliberate read-back is called: a synchronising error raised inside it carries this as its
# `host_read` (the GPU bench's sync check calls a run sync-free when the first sync in its window is this one).
LOSS_READ_BACK = "the running loss read back for the NaN/inf check and the evaluation"


@contextlib.contextmanager
def deliberate_host_read(what: str) -> Iterator[None]:
    """Mark a deliberate read from the device: a RuntimeError raised inside (CUDA's sync debug mode raises one at
    a synchronising call) leaves with `host_read = what`."""
    try:
        yield
    except RuntimeError as exc:
        exc.host_read = what  # type: ignore[attr-defined]
        raise


def host_read_policy(device: torch.device) -> HostReadPolicy:
    """The policy a device gets: deferred (every 25 steps) on CUDA, every step elsewhere."""
    return DEFERRED if device.type == "cuda" else EVERY_STEP


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def snapshot_checkpoint(method: Method) -> dict[str, dict[str, torch.Tensor]]:
    """A CPU copy of the state that evaluation reads (the best checkpoint)."""
    return {name: {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
            for name, module in method.checkpoint_modules().items()}


def restore_checkpoint(method: Method, state: dict[str, dict[str, torch.Tensor]]) -> None:
    """Load a `snapshot_checkpoint` back into the method's modules."""
    modules = method.checkpoint_modules()
    for name, module_state in state.items():
        modules[name].load_state_dict(module_state)


# ---- one run, in phases: set-up, the step, evaluate-and-select, final evaluation, summary ----------------
@dataclass
class _Run:
    """What the phases of one run share: the built objects (set-up) and the state the loop updates."""

    config: RunConfig
    started: float  # time.perf_counter() when train() began
    device: torch.device
    precision: str
    provenance: dict[str, Any]  # trainer.provenance: what made the run's numbers
    host_reads: HostReadPolicy
    root: Path  # the data directory
    out_dir: Path | None
    dev: DevEvaluator
    plan: RunPlan
    final_sts: list[str]
    final_transfer: list[str]
    encoder: Any
    tokenizer: Any
    corpus: Any
    total_steps: int
    steps_per_epoch: int
    generator: torch.Generator
    device_generator: torch.Generator
    method: Method
    fgsm: FGSM | None
    autocast: Any
    compute: ComputePrecision  # the precision the step actually computed in
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler | None
    encode_eval: Callable
    encode_dev: Callable
    eval_augments: EvaluationAugments | None  # released.eval_cutoff: augmentations at evaluation too
    track_test: bool
    params: list[torch.nn.Parameter]
    compile: dict[str, Any] = field(default_factory=dict)  # summary.json's `compile` block (trainer.compiled)
    # updated by the loop
    step: int = 0
    status: str = OK
    reason: str | None = None
    best: dict[str, Any] = field(default_factory=lambda: {"dev": -math.inf, "step": 0, "state": None})
    best_test: dict[str, Any] = field(
        default_factory=lambda: {"avg": -math.inf, "step": None, "test": None, "state": None})
    history: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    final_eval_seconds: float = 0.0


def train(config: RunConfig, report: Report | None = None, host_reads: HostReadPolicy | None = None,
          on_step: StepHook | None = None) -> Summary:
    """Train one model as `config` says; returns the summary, which its caller writes as summary.json (the
    trainer's command line, trainer.__main__; the sweep's worker, with where the trial ran).

    The summary is summary.json's record (trainer.summary.Summary): `status` (ok, diverged or collapsed, with `reason`),
    the best STS-B dev score and its step, the final test scores of the best-dev state (`test`, the STS tasks'
    Spearman x 100 and their `avg`; `transfer` when asked for), MTD, the method's own fields, timings and the
    resolved config. With `config.output_dir` set, the run also writes metrics.jsonl (one line per
    evaluation) and, with `save_model`, the best-dev weights under model/.

    `report(metrics)`: called after each evaluation (every `eval.eval_steps` steps) with that evaluation's
    metrics as a JSON-safe dict (step, loss, dev_stsb, lr, eta, queue_fill, mean_cosine, fgsm_norm,
    elapsed_s and the method's own values); the sweep forwards them to Ray Tune and Optuna. None: nothing
    is called.
    `host_reads`: the NaN/inf check's policy; default the device's (`host_read_policy`).

    `on_step(step)`, for instruments such as `sweep doctor --bench`: called by the loop with the step's number
    (1-based) once that step is done, i.e. after its optimiser step and, on an evaluation step, after the
    evaluation and the best-state selection; the next step's batch is built after it returns. Not called for a
    step that ends the run early (diverged, collapsed). It runs on the loop's thread and its time counts as
    training time; None (the default) changes nothing."""
    run = _set_up(config, host_reads)
    _compile_step(run)
    with warnings.catch_warnings():
        # fp16: the scaler skips the optimiser step whose gradients overflowed (the first steps, while it
        # finds its scale), and torch then warns that the schedule stepped first. Expected, so not shown;
        # the schedule advances on a skipped step too (knowing which were skipped would read the device).
        if run.scaler is not None:
            warnings.filterwarnings("ignore", SKIPPED_STEP_WARNING, UserWarning)
        _train_loop(run, report, on_step)
    compiled.graphs_since(run.compile)
    with compiled.eager():
        final = _final_evaluation(run)
    return _summary(run, final)


def _set_up(config: RunConfig, host_reads: HostReadPolicy | None) -> _Run:
    """Resolve the config, check the data, load the model and corpus, and build the method, the optimiser
    and the evaluators. Everything process-wide a previous run in this process may have changed (a worker
    that runs trial after trial) is set again here: the seeds, grad mode, the thread count."""
    started = time.perf_counter()
    config = config.resolved()
    _reset_process_state()
    seed_everything(config.seed)
    device = pick_device(config.device)
    method_cls = method_class(config.method)
    precision = method_cls.precision_on(device, config.precision)
    root = data_dir(config.data.data_dir)
    out_dir = Path(config.output_dir) if config.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "metrics.jsonl").write_text("")  # a fresh run starts a fresh log

    dev = DevEvaluator(root)  # fails early on missing/altered data
    _, final_transfer = split_tasks(config.eval.final_tasks)  # fails early on an unknown task name
    if final_transfer:
        load_transfer_tasks(root, final_transfer)  # ... and on missing/altered transfer data
    check_tasks(config.eval.mteb, root)  # ... and on an MTEB task that is unknown or whose data is out of reach
    encoder, tokenizer = load_encoder(config.model, dropout=config.dropout)
    check_fgsm_precision(config.fgsm.eps, precision, encoder.get_input_embeddings().weight)
    cache_dir = Path(config.data.cache_dir) if config.data.cache_dir else root / "cache"
    corpus_file = corpus_path(root, config.data.corpus)
    corpus = load_corpus(corpus_file, tokenizer, config.data.max_length, config.data.max_sentences, cache_dir)
    batch = config.batch_size
    if len(corpus) < batch:
        raise UserError(f"the corpus has {len(corpus)} sentences, fewer than batch_size={batch}: lower batch_size")
    steps_per_epoch = len(corpus) // batch  # drop_last, as SimCSE's data loader
    plan = RunPlan.of(config, sentences=len(corpus))  # steps, evaluations, final tasks: what the dry run plans
    total_steps = plan.total_steps

    generator = torch.Generator().manual_seed(config.seed)
    device_generator = torch.Generator(device=device).manual_seed(config.seed)
    method = method_cls(encoder, config, generator, device_generator).to(device)
    method.train()
    method.start(total_steps)
    # attached after the method is built: MoCoSE's target is a deep copy, which would copy the hook. The
    # released MoCoSE code perturbs the raw word embeddings before its cutoff zeroes some of them
    fgsm = FGSM(config.fgsm.eps, config.fgsm.mode).attach(
        encoder.get_input_embeddings(), before_other_hooks=bool(config.released.cutoffs)) if config.fgsm.eps > 0 \
        else None
    autocast_dtype = AUTOCAST_DTYPES.get(precision)
    if fgsm is not None:
        fgsm.compute_dtype = autocast_dtype
    optimizer = build_optimizer(method.trainable_groups(config.optim.weight_decay), config.optim,
                                released=bool(config.released.optimizer))
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    warmup = config.optim.warmup_steps
    scheduler = (get_linear_schedule_with_warmup(optimizer, warmup, total_steps) if config.optim.schedule == "linear"
                 else get_constant_schedule_with_warmup(optimizer, warmup))
    eval_augments = method.evaluation_augments(torch.Generator(device=device).manual_seed(config.seed))
    encode_eval, encode_dev = evaluation_encoders(method, tokenizer, device, eval_augments)
    return _Run(
        config=config, started=started, device=device, precision=precision,
        provenance=provenance(device, precision, corpus_file, root, cache_dir),
        host_reads=host_reads or host_read_policy(device), root=root, out_dir=out_dir, dev=dev,
        plan=plan, final_sts=list(plan.final_sts), final_transfer=list(plan.final_transfer),
        encoder=encoder, tokenizer=tokenizer, corpus=corpus,
        total_steps=total_steps, steps_per_epoch=steps_per_epoch, generator=generator,
        device_generator=device_generator, method=method, fgsm=fgsm,
        autocast=torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext(),
        compute=ComputePrecision(encoder),
        optimizer=optimizer, scheduler=scheduler,
        # fp16 needs loss scaling on any device (its range underflows small gradients); bf16 has fp32's range
        scaler=torch.amp.GradScaler(device.type) if precision == "fp16" else None,
        encode_eval=encode_eval, encode_dev=encode_dev, eval_augments=eval_augments,
        track_test=plan.tracks_test,
        params=[p for g in optimizer.param_groups for p in g["params"]],
    )


def _compile_step(run: _Run) -> None:
    """`compile` (trainer.compiled.compile_step): the step's transformer layers compiled now, on a real batch."""
    decision = run.plan.compiles_on(run.device.type)
    ids, mask = run.corpus.batch(list(range(run.config.batch_size)), run.tokenizer.pad_token_id or 0) \
        if decision[0] else (None, None)
    run.compile = compiled.compile_step(
        run.config.compile, decision, run.method.step_encoders(), run.device.type,
        lambda: _step_loss(run, ids.to(run.device), mask.to(run.device)), [run.generator, run.device_generator],
        run.params)


def evaluation_encoders(method: Method, tokenizer: Any, device: torch.device,
                        augments: EvaluationAugments | None = None) -> tuple[Callable, Callable]:
    """(encode for the test tasks, encode for STS-B dev): the run's pooler and head, and the method's dev head
    where it has its own; `augments` (released.eval_cutoff) act in both, as in the release."""
    config, encoder = method.config, method.encoder
    encode_eval = SentenceEncoder(encoder, tokenizer, config.pooler, device, config.eval.batch_size,
                                  mlp=method.eval_mlp(), augments=augments).encode
    dev_pooler, dev_mlp = method.dev_head()
    encode_dev = encode_eval if dev_pooler is None else SentenceEncoder(
        encoder, tokenizer, dev_pooler, device, config.eval.batch_size, mlp=dev_mlp, augments=augments).encode
    return encode_eval, encode_dev


def _reset_process_state() -> None:
    """Grad mode, which a caller or an earlier run in this process could leave off (seeds: set next; threads:
    the evaluation lowers them only inside a try/finally)."""
    torch.set_grad_enabled(True)


def _step_loss(run: _Run, ids: torch.Tensor, mask: torch.Tensor):
    position_ids = run.method.token_positions(ids, mask, run.device_generator)  # None without a token shuffle
    with run.autocast:
        return run.method.loss(ids, mask, position_ids)


def _step(run: _Run, ids: torch.Tensor, mask: torch.Tensor):
    """One optimiser step on a batch (FGSM's perturbation around it when on); the method's after-step hook
    (MoCoSE: the EMA update and the queue push). Reads nothing back from the device."""
    fgsm, optimizer, scaler = run.fgsm, run.optimizer, run.scaler
    if fgsm is not None and run.config.fgsm.mode == "exact":
        with fgsm.capture():
            probe = _step_loss(run, ids, mask)
        probe.loss.backward()
        optimizer.zero_grad(set_to_none=True)
        perturb = fgsm.perturb()
    elif fgsm is not None:
        perturb = contextlib.ExitStack()
        perturb.enter_context(fgsm.perturb())
        perturb.enter_context(fgsm.capture())
    else:
        perturb = contextlib.nullcontext()
    with perturb:
        out = _step_loss(run, ids, mask)
    if scaler is not None:
        scaler.scale(out.loss).backward()
        scaler.unscale_(optimizer)
    else:
        out.loss.backward()
    if run.config.optim.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.params, run.config.optim.grad_clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    run.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    run.method.after_step(run.step, out)
    return out


def _train_loop(run: _Run, report: Report | None, on_step: StepHook | None = None) -> None:
    """Steps until total_steps, evaluating where the run's plan says (every eval.eval_steps and at the last step);
    ends early on a NaN/inf loss (diverged) or
    a collapsed embedding space (collapsed). The running loss stays on the device between its reads.
    `on_step(run.step)` after each step that does not end the run (see `train`)."""
    batch, pad_id = run.config.batch_size, run.tokenizer.pad_token_id or 0
    loss_sum = torch.zeros((), device=run.device)
    loss_window = 0
    order: list[int] = []
    tick = time.perf_counter()
    while run.step < run.total_steps:
        if not order:  # a new epoch: a fresh shuffle of the corpus
            order = torch.randperm(len(run.corpus), generator=run.generator).tolist()[: run.steps_per_epoch * batch]
        indices, order = order[:batch], order[batch:]
        run.step += 1
        ids, mask = run.corpus.batch(indices, pad_id)
        ids, mask = ids.to(run.device, non_blocking=True), mask.to(run.device, non_blocking=True)
        out = _step(run, ids, mask)
        loss_sum += out.loss.detach()
        loss_window += 1

        # the NaN/inf check reads the loss back only on the policy's steps (a host sync on a GPU)
        check = run.step % run.host_reads.check_every == 0
        if run.plan.evaluates_at(run.step) or (check and not torch.isfinite(loss_sum)):
            run.train_seconds += time.perf_counter() - tick
            with deliberate_host_read(LOSS_READ_BACK):
                mean_loss = (loss_sum / loss_window).item()
            loss_sum.zero_()
            loss_window = 0
            if not math.isfinite(mean_loss):
                run.status, run.reason = DIVERGED, f"loss became {mean_loss} by step {run.step}"
                break
            if run.plan.evaluates_at(run.step):
                with compiled.eager():
                    keep_going = _evaluate_and_select(run, mean_loss, report)
                if not keep_going:
                    break
            tick = time.perf_counter()
        if on_step is not None:
            on_step(run.step)
    if run.fgsm is not None:
        run.fgsm.detach()


def _evaluate_and_select(run: _Run, mean_loss: float, report: Report | None) -> bool:
    """STS-B dev (and the seven test tasks when the test-selected state is tracked), logged and reported;
    the best state kept. False when the embedding space collapsed (the run ends)."""
    config, step, method, fgsm = run.config, run.step, run.method, run.fgsm
    eval_started = time.perf_counter()
    dev_rho, mean_cos = run.dev(run.encode_dev)
    test_now = None
    if run.track_test:
        result = evaluate_sts(run.encode_eval, run.root, STS_TASKS, align_uniform_split=None)
        test_now = {**result.scores, "avg": result.avg}
    run.eval_seconds += time.perf_counter() - eval_started
    metrics = {"step": step, "loss": mean_loss,
               "dev_stsb": round(dev_rho * 100, 4) if math.isfinite(dev_rho) else None,
               "lr": run.scheduler.get_last_lr()[0], "eta": None, "queue_fill": None, **method.log_values(),
               "mean_cosine": round(mean_cos, 4),
               "fgsm_norm": fgsm.last_perturbation_norm if fgsm is not None else None,
               "elapsed_s": round(time.perf_counter() - run.started, 2)}
    if test_now is not None:
        metrics["test_avg"] = test_now["avg"]
    run.history.append(metrics)
    if run.out_dir:
        with open(run.out_dir / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps(json_safe(metrics)) + "\n")
    if report is not None:
        report(json_safe(metrics))
    if not math.isfinite(dev_rho) or mean_cos > config.collapse_threshold:
        # checked before the best-state update, so a collapsed state is never the one evaluated
        run.status = COLLAPSED
        run.reason = f"embeddings collapsed at step {step}: mean pairwise cosine {mean_cos:.4f} on STS-B dev"
        return False
    if dev_rho > run.best["dev"]:
        run.best = {"dev": dev_rho, "step": step, "state": snapshot_checkpoint(method)}
    if test_now is not None and test_now["avg"] > run.best_test["avg"]:  # strictly better, as the release
        run.best_test = {"avg": test_now["avg"], "step": step, "test": test_now,
                         "state": snapshot_checkpoint(method) if config.eval.selection == "test_avg" else None}
    return True


def _final_evaluation(run: _Run) -> dict[str, Any]:
    """The final tasks with the selected state (best STS-B dev; the best test average only on request);
    the encoder saved when asked. Nothing is evaluated when no state was ever selected."""
    config = run.config
    selected = run.best_test if config.eval.selection == "test_avg" else run.best
    if selected["state"] is not None:
        restore_checkpoint(run.method, selected["state"])
    final: dict[str, Any] = {"test": None, "sts_details": None, "transfer": None, "align": None, "uniform": None,
                             "au_split": None, "mteb": None}
    eval_started = time.perf_counter()
    if run.status == OK or selected["state"] is not None:
        if run.final_sts:
            result = evaluate_sts(run.encode_eval, run.root, run.final_sts, config.eval.align_uniform_split)
            final.update(test=result.test_scores(), sts_details=result.details, align=result.align,
                         uniform=result.uniform, au_split=result.align_uniform_split)
        if run.final_transfer:
            # the fits run on the trial's own thread budget (Ray sets it from resources.cpu), one per process
            result = evaluate_transfer(run.encode_eval, run.root, run.final_transfer, config.eval.transfer_mode,
                                       workers=torch.get_num_threads(), device=run.device)
            final["transfer"] = {**result.scores, "avg": result.avg}
        final["mteb"] = final_mteb(config.eval.mteb, run.encode_eval, run.root, run.out_dir, config.model)
    run.final_eval_seconds = time.perf_counter() - eval_started
    if config.save_model and run.out_dir and selected["state"] is not None:
        run.encoder.save_pretrained(run.out_dir / "model")
        run.tokenizer.save_pretrained(run.out_dir / "model")
        apply_umask_modes(run.out_dir / "model")
    return final


def _summary(run: _Run, final: dict[str, Any]) -> Summary:
    """summary.json (trainer.summary): the verdict, the scores, MTD and the method's own fields, timings, the
    resolved config."""
    config, best, best_test = run.config, run.best, run.best_test
    extra: dict[str, Any] = {}
    if run.track_test:
        extra["test_selected"] = {"label": TEST_SELECTED_LABEL, "step": best_test["step"], "test": best_test["test"]}
    if run.eval_augments is not None:
        extra["eval_cutoff"] = EvaluationAugments.LABEL
    extra["compile"] = run.compile
    precision = run.compute.seen or run.precision  # what the step computed in; the request if no step ran
    summary = build_summary(
        status=run.status, reason=run.reason, steps=run.step, total_steps=run.total_steps,
        variant=config.variant, precision=precision, released=dict(config.to_dict()["released"]),
        selection="dev" if config.eval.selection == "dev" else f"test_avg: {TEST_SELECTED_LABEL}",
        best_step=best["step"] if best["state"] is not None else None,
        best_dev=best["dev"] if best["state"] is not None else None,
        test=final["test"], sts_details=final["sts_details"],
        transfer=final["transfer"], transfer_mode=config.eval.transfer_mode,
        align=final["align"], uniform=final["uniform"], align_uniform_split=final["au_split"],
        **{"mtd": None, **run.method.summary_fields(run.step)},
        batch_size=config.batch_size, train_seconds=run.train_seconds, eval_seconds=run.eval_seconds,
        final_eval_seconds=run.final_eval_seconds, wall_time_s=time.perf_counter() - run.started,
        device=str(run.device), corpus_sentences=len(run.corpus), history=run.history, config=config.to_dict(),
        provenance={**run.provenance, "precision": precision, **summary_parts(final["mteb"])[1]},
        mteb=summary_parts(final["mteb"])[0],
        **extra,
    )
    return summary
