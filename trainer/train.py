"""One training run: `train(config, report=None) -> summary`.

Read top to bottom: build the model for the method, load the tokenised corpus, run the optimiser loop
(evaluating STS-B dev every `eval.eval_steps` and keeping the best state), then evaluate the seven STS
tasks and alignment/uniformity with the best state and return (and write) the summary.

Methods (methods.md sections 1-5):
- simcse: 2N rows (each sentence twice) in ONE forward pass, dropout views, [CLS] -> train-only MLP,
  InfoNCE over in-batch pairs.
- gs: SimCSE + M Gaussian negatives per step (GS-InfoNCE).
- mix: SimCSE + mixed hard negatives (MixCSE).
- mocose: online branch (encoder -> pooler dense -> projection -> predictor) on N rows with gradients,
  EMA target branch (shared embedding layer, EMA copies of encoder/pooler/projection) on the same N rows
  without gradients, negatives = other in-batch keys + the negative queue; Gaussian and mixed negatives
  can be added (`gaussian.*`, `mix.enabled`).
A NaN/inf loss ends the run with status `diverged`; a collapsed embedding space (mean pairwise cosine of
STS-B dev embeddings above `collapse_threshold`, or a constant similarity) with status `collapsed`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn

from analysis.mtd import config_traceable_distance, effective_eta
from trainer.augment import FGSM, feature_cutoff, shuffle_token_positions, token_cutoff
from trainer.config import RunConfig, parse_slices
from trainer.corpus import load_corpus
from trainer.data import corpus_path, data_dir
from trainer.ema import ema_decay_at, ema_update
from trainer.files import write_text_atomic
from trainer.evaluation import EmbeddingCache, SentenceEncoder, cosine_scores, evaluate_sts, load_task
from trainer.heads import MLPHead, build_predictor, build_projection, make_pooler_dense
from trainer.losses.gaussian import gaussian_logits, sample_gaussian_negatives
from trainer.losses.infonce import info_nce
from trainer.losses.mix import mix_logits
from trainer.losses.mocose import queue_logits
from trainer.models import load_encoder, pick_device
from trainer.queue import NegativeQueue

Report = Callable[[dict[str, Any]], None]


# ---- the model ----------------------------------------------------------------------------------
class ContrastiveModel(nn.Module):
    """The encoder and the heads one method trains. `embed_for_training` returns what the loss sees."""

    def __init__(self, encoder: nn.Module, config: RunConfig):
        super().__init__()
        self.encoder = encoder
        self.method = config.method
        dim = encoder.config.hidden_size
        if self.method == "mocose":
            heads = config.heads
            self.pooler_dense = make_pooler_dense(encoder)  # Linear(d,d), no activation, from BERT's pooler
            self.projection = build_projection(dim, heads.projection_layers, config.dropout)
            self.predictor = build_predictor(dim, heads.predictor_dim or dim, heads.predictor_layers, config.dropout)
            # Target branch: EMA copies of encoder, pooler, projection; the embedding layer is SHARED (the
            # very same module object, so the EMA never touches it and it gets gradients from the online
            # branch only).
            self.target_encoder = copy.deepcopy(encoder)
            self.target_encoder.embeddings = encoder.embeddings
            self.target_pooler_dense = copy.deepcopy(self.pooler_dense)
            self.target_projection = copy.deepcopy(self.projection)
            for module in self.target_modules():
                module.requires_grad_(False)
            encoder.embeddings.requires_grad_(True)
        else:
            self.mlp = MLPHead(dim)  # SimCSE's train-only MLP over [CLS]

    def online_modules(self) -> list[nn.Module]:
        return [self.encoder, self.pooler_dense, self.projection]

    def target_modules(self) -> list[nn.Module]:
        return [self.target_encoder, self.target_pooler_dense, self.target_projection]

    def cls(self, encoder: nn.Module, ids, mask, position_ids=None) -> torch.Tensor:
        out = encoder(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                      position_ids=position_ids, return_dict=True)
        return out.last_hidden_state[:, 0]

    def online(self, ids, mask, position_ids=None) -> torch.Tensor:
        h = self.pooler_dense(self.cls(self.encoder, ids, mask, position_ids))
        return self.predictor(self.projection(h))

    @torch.no_grad()
    def target(self, ids, mask) -> torch.Tensor:
        h = self.target_pooler_dense(self.cls(self.target_encoder, ids, mask))
        return self.target_projection(h)

    def two_views(self, ids, mask, position_ids=None) -> tuple[torch.Tensor, torch.Tensor]:
        """SimCSE: the batch twice in one forward of 2N rows; two dropout views through the MLP."""
        n = ids.shape[0]
        pos = None if position_ids is None else torch.cat([position_ids, position_ids])
        z = self.mlp(self.cls(self.encoder, torch.cat([ids, ids]), torch.cat([mask, mask]), pos))
        return z[:n], z[n:]

    @torch.no_grad()
    def update_target(self, decay: float) -> None:
        for target, online in zip(self.target_modules(), self.online_modules()):
            ema_update(target, online, decay)


class _EmbeddingAugmenter:
    """Token/feature cutoff on the embedding-layer output of the online forward only (MoCoSE Table 5)."""

    def __init__(self, embeddings: nn.Module, config: RunConfig, generator: torch.Generator):
        self.rate_token, self.rate_feature = config.augment.token_cutoff, config.augment.feature_cutoff
        self.generator, self.mask, self.active = generator, None, False
        self.handle = embeddings.register_forward_hook(self._hook) if (self.rate_token or self.rate_feature) else None

    def _hook(self, module, inputs, output):
        if not self.active:
            return output
        if self.rate_token:
            output = token_cutoff(output, self.mask, self.rate_token, generator=self.generator)
        if self.rate_feature:
            output = feature_cutoff(output, self.rate_feature, generator=self.generator)
        return output

    @contextlib.contextmanager
    def on(self, mask):
        self.active, self.mask = self.handle is not None, mask
        try:
            yield
        finally:
            self.active = False


# ---- helpers -----------------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _autocast(device: torch.device, precision: str):
    """fp32 on the CPU; on CUDA, bf16 autocast for "auto"/"bf16", fp16 for "fp16", none for "fp32"."""
    dtype = {"auto": torch.bfloat16, "bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if device.type != "cuda" or dtype is None:
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=dtype)


def _param_groups(model: ContrastiveModel, weight_decay: float) -> list[dict]:
    # As HF's Trainer (used by SimCSE and MoCoSE): no weight decay on biases and LayerNorm weights.
    # LayerNorms are found by module type (as HF's ALL_LAYERNORM_LAYERS), not only by name: the MoCoSE
    # heads' LayerNorms sit in nn.Sequential and are named e.g. "projection.1.weight".
    norm_params = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters(recurse=False)}
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        is_norm = id(param) in norm_params or "LayerNorm" in name or "layer_norm" in name
        (no_decay if name.endswith("bias") or is_norm else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


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


# ---- the run ------------------------------------------------------------------------------------------
def train(config: RunConfig, report: Report | None = None) -> dict[str, Any]:
    """Train one model as `config` says; returns the summary (also written to config.output_dir if set)."""
    started = time.perf_counter()
    config = config.resolved()
    seed_everything(config.seed)
    device = pick_device(config.device)
    root = data_dir(config.data.data_dir)
    out_dir = Path(config.output_dir) if config.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "metrics.jsonl").write_text("")  # a fresh run starts a fresh log

    dev = _DevEvaluator(root)  # fails early on missing/altered data
    encoder, tokenizer = load_encoder(config.model, dropout=config.dropout)
    corpus = load_corpus(corpus_path(root, config.data.corpus), tokenizer, config.data.max_length,
                         config.data.max_sentences, Path(config.data.cache_dir) if config.data.cache_dir else root / "cache")
    batch = config.batch_size
    if len(corpus) < batch:
        from trainer.errors import UserError
        raise UserError(f"the corpus has {len(corpus)} sentences, fewer than batch_size={batch}: lower batch_size")
    steps_per_epoch = len(corpus) // batch  # drop_last, as SimCSE's data loader
    total_steps = config.max_steps or max(1, int(config.epochs * steps_per_epoch))
    eval_steps = config.eval.eval_steps

    model = ContrastiveModel(encoder, config).to(device)
    model.train()
    dim = encoder.config.hidden_size
    generator = torch.Generator().manual_seed(config.seed)
    device_generator = torch.Generator(device=device).manual_seed(config.seed)
    queue = None
    slices = None
    if config.method == "mocose":
        queue = NegativeQueue(config.queue.size, dim, config.queue.initial_size, generator=generator).to(device)
        slices = parse_slices(config.queue.slices, config.queue.size) if config.queue.slices else None
    fgsm = FGSM(config.fgsm.eps, config.fgsm.mode).attach(encoder.get_input_embeddings()) if config.fgsm.eps > 0 else None
    augmenter = _EmbeddingAugmenter(encoder.embeddings, config, device_generator)
    n_gauss = config.gaussian_count()
    use_mix = bool(config.mix.enabled)

    optimizer = torch.optim.AdamW(_param_groups(model, config.optim.weight_decay), lr=config.optim.lr,
                                  betas=tuple(config.optim.betas), eps=config.optim.eps)
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    scheduler = (get_linear_schedule_with_warmup(optimizer, config.optim.warmup_steps, total_steps)
                 if config.optim.schedule == "linear" else get_constant_schedule_with_warmup(optimizer, config.optim.warmup_steps))
    scaler = torch.amp.GradScaler("cuda") if device.type == "cuda" and config.precision == "fp16" else None
    autocast = _autocast(device, config.precision)
    eta_period = config.ema.schedule_steps or total_steps
    pad_id = tokenizer.pad_token_id or 0
    encode_eval = SentenceEncoder(encoder, tokenizer, config.pooler, device, config.eval.batch_size,
                                  mlp=getattr(model, "mlp", None)).encode

    def loss_for(ids, mask, step: int) -> torch.Tensor:
        """The method's loss on one batch (a pure function of the embeddings it computes)."""
        position_ids = None
        if config.augment.token_shuffle:
            base = torch.arange(ids.shape[1], device=device).expand_as(ids)
            position_ids = shuffle_token_positions(base, mask, generator=device_generator)
        with autocast:
            if config.method == "mocose":
                with augmenter.on(mask):
                    anchor = model.online(ids, mask, position_ids)
                positive = model.target(ids, mask)
                extra = [queue_logits(anchor.float(), queue.get(slices), config.temperature)] if len(queue) else []
            else:
                with augmenter.on(torch.cat([mask, mask])):
                    anchor, positive = model.two_views(ids, mask, position_ids)
                extra = []
        anchor, positive = anchor.float(), positive.float()
        if n_gauss:
            noise = sample_gaussian_negatives(n_gauss, dim, config.gaussian.mu, config.gaussian.sigma,
                                              generator=device_generator, device=device, dtype=anchor.dtype)
            extra.append(gaussian_logits(anchor, noise, config.temperature, config.gaussian.weight))
        if use_mix:
            extra += mix_logits(anchor, positive, config.mix.lam, config.temperature,
                                config.mix.directions, config.mix.stop_grad)
        loss_for.positive = positive
        return info_nce(anchor, positive, config.temperature, extra)

    # running statistics kept on the device: reading them is a host sync, done only at evaluations
    loss_sum = torch.zeros((), device=device)
    age_sum = torch.zeros((), device=device, dtype=torch.float64)
    age_count = torch.zeros((), device=device, dtype=torch.float64)
    age_max = torch.zeros((), device=device, dtype=torch.float64)
    best = {"dev": -math.inf, "step": 0, "state": None}
    status, reason = "ok", None
    history: list[dict[str, Any]] = []
    train_seconds, eval_seconds = 0.0, 0.0
    eta = ema_decay_at(0, config.ema.schedule, config.ema.decay, config.ema.decay_end, eta_period)
    step = 0
    order: list[int] = []
    loss_window = 0

    def snapshot() -> dict[str, torch.Tensor]:
        keep = {"encoder": encoder.state_dict()}
        if hasattr(model, "mlp"):
            keep["mlp"] = model.mlp.state_dict()
        return {part: {k: v.detach().to("cpu", copy=True) for k, v in sd.items()} for part, sd in keep.items()}

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
                probe = loss_for(ids, mask, step)
            probe.backward()
            optimizer.zero_grad(set_to_none=True)
            perturb = fgsm.perturb()
        elif fgsm is not None:
            perturb = contextlib.ExitStack()
            perturb.enter_context(fgsm.perturb())
            perturb.enter_context(fgsm.capture())
        else:
            perturb = contextlib.nullcontext()
        with perturb:
            if queue is not None and len(queue):
                ages = queue.ages(step, slices)
                real = ages[~torch.isnan(ages)]
                if real.numel():
                    age_sum += real.sum().double()
                    age_count += real.numel()
                    age_max = torch.maximum(age_max, real.max().double())
            loss = loss_for(ids, mask, step)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        if config.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], config.optim.grad_clip)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if config.method == "mocose":
            eta = ema_decay_at(step, config.ema.schedule, config.ema.decay, config.ema.decay_end, eta_period)
            model.update_target(eta)
            queue.push(loss_for.positive.detach(), step)  # newest keys: the target outputs of this batch
        loss_sum += loss.detach()
        loss_window += 1

        last = step == total_steps
        # A NaN/inf loss is looked for every step on the CPU (free) and every 25 steps on a GPU, where
        # reading it back is a host sync that would stall the inner loop.
        check_every = 25 if device.type == "cuda" else 1
        if step % eval_steps == 0 or last or (step % check_every == 0 and not torch.isfinite(loss_sum)):
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
            dev_rho, mean_cos = dev(encode_eval)
            eval_seconds += time.perf_counter() - eval_started
            metrics = {"step": step, "loss": mean_loss, "dev_stsb": round(dev_rho * 100, 4) if math.isfinite(dev_rho) else None,
                       "lr": scheduler.get_last_lr()[0], "eta": eta if config.method == "mocose" else None,
                       "queue_fill": len(queue) if queue is not None else None, "mean_cosine": round(mean_cos, 4),
                       "fgsm_norm": fgsm.last_perturbation_norm if fgsm is not None else None,
                       "elapsed_s": round(time.perf_counter() - started, 2)}
            history.append(metrics)
            if out_dir:
                with open(out_dir / "metrics.jsonl", "a") as handle:
                    handle.write(json.dumps(_json_safe(metrics)) + "\n")
            if report is not None:
                report(_json_safe(metrics))
            if not math.isfinite(dev_rho) or mean_cos > config.collapse_threshold:
                # checked before the best-state update, so a collapsed state is never the one evaluated
                status = "collapsed"
                reason = f"embeddings collapsed at step {step}: mean pairwise cosine {mean_cos:.4f} on STS-B dev"
                break
            if dev_rho > best["dev"]:
                best = {"dev": dev_rho, "step": step, "state": snapshot()}
            tick = time.perf_counter()

    if fgsm is not None:
        fgsm.detach()
    # ---- final evaluation with the best-dev state ----
    if best["state"] is not None:
        encoder.load_state_dict(best["state"]["encoder"])
        if "mlp" in best["state"]:
            model.mlp.load_state_dict(best["state"]["mlp"])
    test = None
    align = uniform = None
    au_split = None
    if status == "ok" or best["state"] is not None:
        result = evaluate_sts(encode_eval, root, config.eval.final_tasks, config.eval.align_uniform_split)
        test = {**result.scores, "avg": result.avg}
        align, uniform, au_split = result.align, result.uniform, result.align_uniform_split
    if config.save_model and out_dir and best["state"] is not None:
        encoder.save_pretrained(out_dir / "model")
        tokenizer.save_pretrained(out_dir / "model")

    age_n = age_count.item()
    mtd = None
    if config.method == "mocose":
        cfg = config.to_dict()
        mtd = {
            "formula": config_traceable_distance(cfg, total_steps, eta_choice="mean"),
            "eta": effective_eta(config.ema.schedule, config.ema.decay, config.ema.decay_end, total_steps,
                                 config.ema.schedule_steps, "mean"),
            "eta_choice": "constant" if config.ema.schedule == "constant" else "mean",
            "queue_k": max(e for _, e in slices) if slices else config.queue.size,
            "batch_size": batch,
            "age_mean": age_sum.item() / age_n if age_n else None,
            "age_max": age_max.item() if age_n else None,
        }
    summary = {
        "status": status, "reason": reason, "steps": step, "total_steps": total_steps,
        "best_step": best["step"] if best["state"] is not None else None,
        "best_dev_stsb": round(best["dev"] * 100, 4) if best["state"] is not None else None,
        "test": test, "align": align, "uniform": uniform, "align_uniform_split": au_split, "mtd": mtd,
        "sentences_per_s": round(step * batch / train_seconds, 2) if train_seconds > 0 else None,
        "train_seconds": round(train_seconds, 2), "eval_seconds": round(eval_seconds, 2),
        "wall_time_s": round(time.perf_counter() - started, 2),
        "device": str(device), "corpus_sentences": len(corpus), "history": history,
        "config": config.to_dict(),
    }
    summary = _json_safe(summary)
    if out_dir:
        write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2))
    return summary
