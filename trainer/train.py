"""One training run: `train(config, report=None) -> summary`.

Read top to bottom: build the method object for the config (trainer.methods: SimCSE, GS-InfoNCE, MixCSE,
MoCoSE), load the tokenised corpus, run the optimiser loop (evaluating STS-B dev every `eval.eval_steps`
and keeping the best state), then evaluate the final tasks with the best state and return (and write)
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from scipy.stats import spearmanr

from trainer.augment import FGSM, half_precision_floor, shuffle_token_positions
from trainer.config import RunConfig
from trainer.corpus import load_corpus
from trainer.data import corpus_path, data_dir
from trainer.errors import UserError
from trainer.evaluation import (
    TASKS,
    EmbeddingCache,
    SentenceEncoder,
    cosine_scores,
    evaluate_sts,
    load_task,
    split_tasks,
)
from trainer.files import json_safe, write_text_atomic
from trainer.methods import Method, method_class
from trainer.models import load_encoder, pick_device

Report = Callable[[dict[str, Any]], None]
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
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


def host_read_policy(device: torch.device) -> HostReadPolicy:
    """The policy a device gets: deferred (every 25 steps) on CUDA, every step elsewhere."""
    return DEFERRED if device.type == "cuda" else EVERY_STEP


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


class _DevEvaluator:
    """STS-B dev Spearman (model selection) and the collapse check, on one set of dev embeddings."""

    def __init__(self, root: Path):
        self.pairs = load_task(root, "STSBenchmark", "dev")[0]

    def __call__(self, encode) -> tuple[float, float]:
        cache = EmbeddingCache(encode, self.pairs.sent1 + self.pairs.sent2)
        sims = cosine_scores(cache(self.pairs.sent1), cache(self.pairs.sent2))
        emb = torch.nn.functional.normalize(torch.from_numpy(np.nan_to_num(cache.emb)).double(), dim=-1)
        n = emb.shape[0]
        mean_cos = ((emb.sum(0).pow(2).sum() - n) / (n * (n - 1))).item()  # mean off-diagonal cosine
        rho = float(spearmanr(sims, self.pairs.gold)[0]) if np.ptp(sims) > 0 else float("nan")
        return rho, mean_cos


def _snapshot(method: Method) -> dict[str, dict[str, torch.Tensor]]:
    """A CPU copy of the state that evaluation reads (the best checkpoint)."""
    return {name: {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
            for name, module in method.checkpoint_modules().items()}


def _restore(method: Method, state: dict[str, dict[str, torch.Tensor]]) -> None:
    modules = method.checkpoint_modules()
    for name, module_state in state.items():
        modules[name].load_state_dict(module_state)


def _check_fgsm_precision(config: RunConfig, precision: str, word_embeddings: torch.Tensor) -> None:
    """Refuse an FGSM eps that half-precision autocast would round away before the encoder sees it."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None or not config.fgsm.eps:
        return
    floor = half_precision_floor(word_embeddings, dtype)
    if config.fgsm.eps < floor:
        raise UserError(
            f"config key 'fgsm.eps': {config.fgsm.eps:g} is below what {precision} autocast can represent next to "
            f"this model's word embeddings (~{floor:.1e}), so the perturbation would never reach the encoder; "
            f"set precision: fp32 (the MoCoSE release runs in fp32) or fgsm.eps >= {floor:.1e}")


def train(config: RunConfig, report: Report | None = None, host_reads: HostReadPolicy | None = None) -> dict[str, Any]:
    """Train one model as `config` says; returns the summary (also written to config.output_dir if set).
    `host_reads`: the NaN/inf check's policy; default the device's (`host_read_policy`)."""
    started = time.perf_counter()
    config = config.resolved()
    seed_everything(config.seed)
    device = pick_device(config.device)
    method_cls = method_class(config.method)
    precision = method_cls.precision_on(device, config.precision)
    host_reads = host_reads or host_read_policy(device)
    root = data_dir(config.data.data_dir)
    out_dir = Path(config.output_dir) if config.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "metrics.jsonl").write_text("")  # a fresh run starts a fresh log

    dev = _DevEvaluator(root)  # fails early on missing/altered data
    final_sts, final_transfer = split_tasks(config.eval.final_tasks)  # fails early on an unknown task name
    if final_transfer:
        from trainer.transfer import load_transfer_tasks

        load_transfer_tasks(root, final_transfer)  # ... and on missing/altered transfer data
    encoder, tokenizer = load_encoder(config.model, dropout=config.dropout)
    _check_fgsm_precision(config, precision, encoder.get_input_embeddings().weight)
    cache_dir = Path(config.data.cache_dir) if config.data.cache_dir else root / "cache"
    corpus = load_corpus(corpus_path(root, config.data.corpus), tokenizer, config.data.max_length,
                         config.data.max_sentences, cache_dir)
    batch = config.batch_size
    if len(corpus) < batch:
        raise UserError(f"the corpus has {len(corpus)} sentences, fewer than batch_size={batch}: lower batch_size")
    steps_per_epoch = len(corpus) // batch  # drop_last, as SimCSE's data loader
    total_steps = config.max_steps or max(1, int(config.epochs * steps_per_epoch))
    eval_steps = config.eval.eval_steps

    generator = torch.Generator().manual_seed(config.seed)
    device_generator = torch.Generator(device=device).manual_seed(config.seed)
    method = method_cls(encoder, config, generator, device_generator).to(device)
    method.train()
    method.start(total_steps)
    # attached after the method is built: MoCoSE's target is a deep copy, which would copy the hook
    fgsm = None
    if config.fgsm.eps > 0:
        fgsm = FGSM(config.fgsm.eps, config.fgsm.mode).attach(encoder.get_input_embeddings())
    autocast_dtype = AUTOCAST_DTYPES.get(precision)
    if fgsm is not None:
        fgsm.compute_dtype = autocast_dtype
    autocast = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()

    optimizer = torch.optim.AdamW(method.trainable_groups(config.optim.weight_decay), lr=config.optim.lr,
                                  betas=tuple(config.optim.betas), eps=config.optim.eps)
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    warmup = config.optim.warmup_steps
    scheduler = (get_linear_schedule_with_warmup(optimizer, warmup, total_steps) if config.optim.schedule == "linear"
                 else get_constant_schedule_with_warmup(optimizer, warmup))
    # fp16 needs loss scaling on any device (its range underflows small gradients); bf16 has fp32's range
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    pad_id = tokenizer.pad_token_id or 0
    encode_eval = SentenceEncoder(encoder, tokenizer, config.pooler, device, config.eval.batch_size,
                                  mlp=method.eval_mlp()).encode
    dev_pooler, dev_mlp = method.dev_head()
    encode_dev = encode_eval if dev_pooler is None else SentenceEncoder(
        encoder, tokenizer, dev_pooler, device, config.eval.batch_size, mlp=dev_mlp).encode
    track_test = config.eval.selection == "test_avg" or method.reports_test_selected()

    def step_loss(ids: torch.Tensor, mask: torch.Tensor):
        position_ids = None
        if config.augment.token_shuffle:
            base = torch.arange(ids.shape[1], device=device).expand_as(ids)
            position_ids = shuffle_token_positions(base, mask, generator=device_generator)
        with autocast:
            return method.loss(ids, mask, position_ids)

    # running statistics kept on the device: reading them is a host sync, done only at evaluations
    loss_sum = torch.zeros((), device=device)
    best = {"dev": -math.inf, "step": 0, "state": None}
    best_test: dict[str, Any] = {"avg": -math.inf, "step": None, "test": None, "state": None}
    status, reason = "ok", None
    history: list[dict[str, Any]] = []
    train_seconds, eval_seconds = 0.0, 0.0
    step = 0
    order: list[int] = []
    loss_window = 0
    params = [p for g in optimizer.param_groups for p in g["params"]]

    tick = time.perf_counter()
    while step < total_steps:
        if not order:  # a new epoch: a fresh shuffle of the corpus
            order = torch.randperm(len(corpus), generator=generator).tolist()[: steps_per_epoch * batch]
        indices, order = order[:batch], order[batch:]
        step += 1
        ids, mask = corpus.batch(indices, pad_id)
        ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)

        if fgsm is not None and config.fgsm.mode == "exact":
            with fgsm.capture():
                probe = step_loss(ids, mask)
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
            out = step_loss(ids, mask)
        if scaler is not None:
            scaler.scale(out.loss).backward()
            scaler.unscale_(optimizer)
        else:
            out.loss.backward()
        if config.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, config.optim.grad_clip)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        method.after_step(step, out)
        loss_sum += out.loss.detach()
        loss_window += 1

        last = step == total_steps
        # the NaN/inf check reads the loss back only on the policy's steps (a host sync on a GPU)
        check = step % host_reads.check_every == 0
        if step % eval_steps == 0 or last or (check and not torch.isfinite(loss_sum)):
            train_seconds += time.perf_counter() - tick
            mean_loss = (loss_sum / loss_window).item()
            loss_sum.zero_()
            loss_window = 0
            if not math.isfinite(mean_loss):
                status, reason = "diverged", f"loss became {mean_loss} by step {step}"
                break
            if step % eval_steps != 0 and not last:
                tick = time.perf_counter()
                continue
            eval_started = time.perf_counter()
            dev_rho, mean_cos = dev(encode_dev)
            test_now = None
            if track_test:
                result = evaluate_sts(encode_eval, root, TASKS, align_uniform_split=None)
                test_now = {**result.scores, "avg": result.avg}
            eval_seconds += time.perf_counter() - eval_started
            metrics = {"step": step, "loss": mean_loss,
                       "dev_stsb": round(dev_rho * 100, 4) if math.isfinite(dev_rho) else None,
                       "lr": scheduler.get_last_lr()[0], "eta": None, "queue_fill": None, **method.log_values(),
                       "mean_cosine": round(mean_cos, 4),
                       "fgsm_norm": fgsm.last_perturbation_norm if fgsm is not None else None,
                       "elapsed_s": round(time.perf_counter() - started, 2)}
            if test_now is not None:
                metrics["test_avg"] = test_now["avg"]
            history.append(metrics)
            if out_dir:
                with open(out_dir / "metrics.jsonl", "a") as handle:
                    handle.write(json.dumps(json_safe(metrics)) + "\n")
            if report is not None:
                report(json_safe(metrics))
            if not math.isfinite(dev_rho) or mean_cos > config.collapse_threshold:
                # checked before the best-state update, so a collapsed state is never the one evaluated
                status = "collapsed"
                reason = f"embeddings collapsed at step {step}: mean pairwise cosine {mean_cos:.4f} on STS-B dev"
                break
            if dev_rho > best["dev"]:
                best = {"dev": dev_rho, "step": step, "state": _snapshot(method)}
            if test_now is not None and test_now["avg"] > best_test["avg"]:  # strictly better, as the release
                best_test = {"avg": test_now["avg"], "step": step, "test": test_now,
                             "state": _snapshot(method) if config.eval.selection == "test_avg" else None}
            tick = time.perf_counter()

    if fgsm is not None:
        fgsm.detach()
    # ---- final evaluation with the selected state (STS-B dev; the test average only on request) ----
    selected = best_test if config.eval.selection == "test_avg" else best
    if selected["state"] is not None:
        _restore(method, selected["state"])
    test = transfer = None
    align = uniform = au_split = None
    if status == "ok" or selected["state"] is not None:
        if final_sts:
            result = evaluate_sts(encode_eval, root, final_sts, config.eval.align_uniform_split)
            test = {**result.scores, "avg": result.avg}
            align, uniform, au_split = result.align, result.uniform, result.align_uniform_split
        if final_transfer:
            from trainer.transfer import evaluate_transfer

            # the fits run on the trial's own thread budget (Ray sets it from resources.cpu), one per process
            result = evaluate_transfer(encode_eval, root, final_transfer, config.eval.transfer_mode,
                                       workers=torch.get_num_threads(), device=device)
            transfer = {**result.scores, "avg": result.avg}
    if config.save_model and out_dir and selected["state"] is not None:
        encoder.save_pretrained(out_dir / "model")
        tokenizer.save_pretrained(out_dir / "model")

    summary = {
        "status": status, "reason": reason, "steps": step, "total_steps": total_steps,
        "variant": config.variant, "precision": precision,
        "released": {flag: value for flag, value in config.to_dict()["released"].items()},
        "selection": "dev" if config.eval.selection == "dev" else f"test_avg: {TEST_SELECTED_LABEL}",
        "best_step": best["step"] if best["state"] is not None else None,
        "best_dev_stsb": round(best["dev"] * 100, 4) if best["state"] is not None else None,
        "test": test, "transfer": transfer, "transfer_mode": config.eval.transfer_mode if transfer else None,
        "align": align, "uniform": uniform, "align_uniform_split": au_split,
        "mtd": None, **method.summary_fields(step),
        "sentences_per_s": round(step * batch / train_seconds, 2) if train_seconds > 0 else None,
        "train_seconds": round(train_seconds, 2), "eval_seconds": round(eval_seconds, 2),
        "wall_time_s": round(time.perf_counter() - started, 2),
        "device": str(device), "corpus_sentences": len(corpus), "history": history,
        "config": config.to_dict(),
    }
    if track_test:
        summary["test_selected"] = {"label": TEST_SELECTED_LABEL, "step": best_test["step"], "test": best_test["test"]}
    summary = json_safe(summary)
    if out_dir:
        write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2))
    return summary
