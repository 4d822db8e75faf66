"""`trainer.train.train` end to end on a tiny random BERT: summaries and logs for the four methods, and
the parts of the loop docs/science/ pins down (2N rows in one forward for SimCSE; shared embeddings, EMA
after every optimiser step and the queue of target keys for MoCoSE; FGSM modes; best-dev evaluation;
linear decay; grad clipping; divergence and collapse; the corpus cache; determinism).

Runs are short (batch 8, a few steps, 200 corpus sentences, STS-B test only). Where a test needs to see
inside the loop it wraps a function `trainer.train` calls (monkeypatch), never re-implements the loop.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

import trainer.corpus as corpus_mod
import trainer.methods.mocose as mocose_mod
import trainer.train as train_mod
from tests.deadlines import scaled
from tests.helpers import REPO, first_fast
from trainer.config import RunConfig
from trainer.methods import MoCoSE, method_class
from trainer.summary import Summary

B = 8  # batch size of every run here
K, K0 = 32, 8  # queue size and initial (random) size of every MoCoSE run here
METHODS = ["simcse", "mocose", "gs", "mix"]
SUMMARY_KEYS = {"status", "reason", "steps", "total_steps", "best_step", "best_dev_stsb", "test", "align",
                "uniform", "align_uniform_split", "mtd", "sentences_per_s", "wall_time_s", "config", "history",
                "variant", "precision", "released", "selection"}
MTD_KEYS = {"formula", "eta", "eta_choice", "queue_k", "batch_size", "ema_age", "queue_age_mean", "queue_age_max",
            "measured"}
METRIC_KEYS = {"step", "loss", "dev_stsb", "lr", "eta", "queue_fill"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def make_config(tiny_model_dir, shared_data_dir, tmp_path):
    def make(method: str, **overrides) -> RunConfig:
        base = {
            "model": str(tiny_model_dir), "method": method, "batch_size": B, "max_steps": 4, "device": "cpu",
            "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 200},
            "eval": {"eval_steps": 2, "final_tasks": ["STSBenchmark"]},
            "queue": {"size": K, "initial_size": K0},
        }
        return RunConfig.from_dict(base).override(overrides)

    return make


@pytest.fixture
def encoder_forwards(monkeypatch):
    """Every training-mode forward of the loaded encoder (and of its deep copies, e.g. MoCoSE's target):
    (is the online encoder, grad enabled, rows). Evaluation forwards (eval mode) are not recorded."""
    calls: list[tuple[bool, bool, int]] = []
    real = train_mod.load_encoder

    def load(*args, **kwargs):
        encoder, tokenizer = real(*args, **kwargs)

        def hook(module, args, kwargs):
            if module.training:
                calls.append((module is encoder, torch.is_grad_enabled(), kwargs["input_ids"].shape[0]))

        encoder.register_forward_pre_hook(hook, with_kwargs=True)
        return encoder, tokenizer

    monkeypatch.setattr(train_mod, "load_encoder", load)
    return calls


def patch_everywhere(monkeypatch, name: str, replacement_for) -> None:
    """Replace the function `name` in every trainer module that binds it (the methods and losses import
    it by name), with replacement_for(real)."""
    reals = {id(getattr(m, name)): getattr(m, name) for key, m in list(sys.modules.items())
             if key.startswith("trainer") and m is not None and callable(getattr(m, name, None))}
    assert reals, f"no trainer module binds {name}"
    for key, module in list(sys.modules.items()):
        if key.startswith("trainer") and module is not None and id(getattr(module, name, None)) in reals:
            monkeypatch.setattr(module, name, replacement_for(getattr(module, name)))


@pytest.fixture
def losses(monkeypatch):
    """Every loss the loop computes (one per step; two with exact FGSM), with its anchors and positives."""
    calls: list[dict] = []

    def replacement_for(real):
        def spy(anchor, positive, *args, **kwargs):
            loss = real(anchor, positive, *args, **kwargs)
            calls.append({"loss": loss.item(), "anchor": anchor.detach().clone(),
                          "positive": positive.detach().clone()})
            return loss
        return spy

    patch_everywhere(monkeypatch, "info_nce", replacement_for)
    return calls


def wrap(monkeypatch, name: str, record: list, what=lambda args, kwargs: args):
    """Replace the trainer's <name> with a pass-through that appends what(args, kwargs) to `record`."""
    def replacement_for(real):
        def spy(*args, **kwargs):
            record.append(what(args, kwargs))
            return real(*args, **kwargs)
        return spy

    patch_everywhere(monkeypatch, name, replacement_for)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- one short run of each method ----------------------------------------------------------------
@pytest.mark.parametrize("method", first_fast(*sorted(METHODS, key=lambda m: m != "mocose")))
def test_short_run_of_each_method(method, make_config, tmp_path, encoder_forwards, monkeypatch):
    clips, gauss, mixes, queue_sizes = [], [], [], []
    real_clip = torch.nn.utils.clip_grad_norm_
    def recording_clip(params, max_norm, *a, **k):
        clips.append(max_norm)
        return real_clip(params, max_norm, *a, **k)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording_clip)
    wrap(monkeypatch, "sample_gaussian_negatives", gauss, lambda a, k: a[0])
    wrap(monkeypatch, "mix_logits", mixes)
    wrap(monkeypatch, "queue_logits", queue_sizes, lambda a, k: a[1].shape[0])

    out = tmp_path / "run"
    config = make_config(method, output_dir=str(out))
    reports: list[dict] = []
    summary = train_mod.train(config, report=reports.append)

    assert summary.status == "ok" and summary.reason is None
    assert SUMMARY_KEYS <= summary.to_json().keys()
    assert summary.steps == summary.total_steps == 4
    assert summary.config == config.resolved().to_dict()
    assert summary.device == "cpu" and summary.corpus_sentences == 200
    # test numbers for the requested tasks only, of the best-dev state
    assert set(summary.test) == {"STSBenchmark"}  # one task: no avg, which is the seven tasks' mean
    assert -100 <= summary.test["STSBenchmark"] <= 100
    assert summary.test_label.startswith("STS-B test Spearman x100 only")
    assert summary.align_uniform_split == "stsb-dev"
    assert 0 <= summary.align <= 4 and summary.uniform <= 0
    assert summary.sentences_per_s > 0 and summary.wall_time_s > 0

    # report() at every evaluation (every 2 steps), with the documented fields
    assert [r["step"] for r in reports] == [2, 4]
    for r in reports:
        assert METRIC_KEYS <= r.keys()
        assert math.isfinite(r["loss"]) and r["loss"] > 0
        assert r["dev_stsb"] is not None and -100 <= r["dev_stsb"] <= 100
    assert summary.history == reports
    best = max(reports, key=lambda r: r["dev_stsb"])
    assert summary.best_step == best["step"] and summary.best_dev_stsb == best["dev_stsb"]
    # linear decay to 0 over the run, no warm-up (lr reported after the step's scheduler update)
    assert reports[0]["lr"] == pytest.approx(config.resolved().optim.lr * 0.5)
    assert reports[1]["lr"] == pytest.approx(0.0, abs=1e-15)
    # gradient clipping at 1.0 on every step
    assert clips == [1.0] * 4

    # files in output_dir: metrics.jsonl (one line per evaluation); summary.json is its caller's to write
    assert read_jsonl(out / "metrics.jsonl") == reports
    assert not (out / "summary.json").exists()
    assert Summary.from_json(json.loads(json.dumps(summary.to_json()))) == summary

    online = [c for c in encoder_forwards if c[0]]
    assert all(grad for _, grad, _ in online)
    if method == "mocose":
        # online branch: N rows with gradient; target branch: another encoder, the same N rows, no gradient. FGSM
        # is exact under the paper reading (eq. 1): a clean forward whose gradient gives the sign, then the
        # perturbed one, so two of each per step
        assert [rows for _, _, rows in online] == [B] * 8
        target = [c for c in encoder_forwards if not c[0]]
        assert target == [(False, False, B)] * 8
        # cosine EMA schedule 0.75 -> 0.95 over the run: eta grows and ends at 0.95
        assert reports[0]["eta"] == pytest.approx(0.85) and reports[1]["eta"] == pytest.approx(0.95)
        # the queue starts with K0 random keys and gains B real keys per step, up to K
        assert queue_sizes == [8, 8, 16, 16, 24, 24, 32, 32]
        assert [r["queue_fill"] for r in reports] == [min(K0 + B * 2, K), K]
        assert summary.mtd.keys() >= MTD_KEYS
        assert summary.mtd["eta_choice"] == "mean"
        assert summary.mtd["queue_k"] == K and summary.mtd["batch_size"] == B
        assert summary.mtd["formula"] == pytest.approx(1 / (1 - summary.mtd["eta"]) + K / B)
        # FGSM is on by default (exact, eps 5e-9) and its measured norm is reported
        assert all(r["fgsm_norm"] is not None for r in reports)
        assert config.resolved().optim.weight_decay == pytest.approx(1e-6)
    else:
        # SimCSE family: the batch twice, 2N rows, in ONE forward per step
        assert [rows for _, _, rows in online] == [2 * B] * 4
        assert len(encoder_forwards) == 4
        assert all(r["eta"] is None and r["queue_fill"] is None and r["fgsm_norm"] is None for r in reports)
        assert summary.mtd is None and queue_sizes == []
    assert gauss == ([3 * B] * 4 if method == "gs" else [])  # GS-InfoNCE: M = 3N fresh noise vectors per step
    assert len(mixes) == (4 if method == "mix" else 0)


# ---- MoCoSE: shared embeddings, EMA after each step, the queue of target keys, traceable distance -------
def _spy_ema(monkeypatch, events: list, checks: list):
    real = MoCoSE.update_target

    def spy(self, decay):
        assert self.target_encoder.embeddings is self.encoder.embeddings  # the SAME embedding layer
        online = [p for m in self.online_modules() for p in m.parameters()]
        target = [p for m in self.target_modules() for p in m.parameters()]
        before = [p.detach().clone() for p in target]
        real(self, decay)
        expected = [decay * b + (1 - decay) * o.detach() for b, o in zip(before, online)]
        shared = {id(p) for p in self.encoder.embeddings.parameters()}
        own = [(t, o) for t, o in zip(target, online) if id(t) not in shared]
        checks.append({
            "decay": decay,
            "formula_error": max((t.detach() - e).abs().max().item() for t, e in zip(target, expected)),
            "equal_online": all(torch.equal(t, o) for t, o in zip(target, online)),
            "target_grad": any(t.requires_grad for t, _ in own),
            "shared_grad": all(p.requires_grad for p in self.encoder.embeddings.parameters()),
            "n_own": len(own),
        })
        events.append("ema")

    monkeypatch.setattr(MoCoSE, "update_target", spy)


def _spy_queue(monkeypatch, events: list, pushes: list):
    class RecordingQueue(mocose_mod.NegativeQueue):
        def push(self, keys, step):
            super().push(keys, step)
            pushes.append({"keys": keys.detach().clone(), "requires_grad": keys.requires_grad, "step": step,
                           "fill": len(self)})
            events.append("push")

    monkeypatch.setattr(mocose_mod, "NegativeQueue", RecordingQueue)


@pytest.fixture
def optimizer_steps():
    events: list[str] = []
    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: events.append("opt"))
    yield events
    handle.remove()


def test_mocose_ema_queue_and_traceable_distance(make_config, encoder_forwards, losses, monkeypatch, optimizer_steps):
    events = optimizer_steps
    checks, pushes, queue_sizes = [], [], []
    _spy_ema(monkeypatch, events, checks)
    _spy_queue(monkeypatch, events, pushes)
    wrap(monkeypatch, "queue_logits", queue_sizes, lambda a, k: a[1].shape[0])
    patch_everywhere(monkeypatch, "mocose_loss", lambda real: lambda *a, **k: events.append("loss") or real(*a, **k))

    eta, eps, steps = 0.75, 1e-3, 6
    config = make_config("mocose", max_steps=steps, **{"ema.schedule": "constant", "ema.decay": eta,
                                                        "fgsm.mode": "exact", "fgsm.eps": eps, "eval.eval_steps": 3})
    reports: list[dict] = []
    summary = train_mod.train(config, report=reports.append)
    assert summary.status == "ok"

    # per step: the loss (twice: exact FGSM probes the gradient first), the optimiser step, then the EMA
    # update, then the queue push
    assert events == ["loss", "loss", "opt", "ema", "push"] * steps
    # EMA: theta_t <- eta*theta_t + (1-eta)*theta_o, with the configured eta; the target branch has its
    # own (frozen) encoder/pooler/projection that moved away from the online weights
    assert [c["decay"] for c in checks] == [eta] * steps
    assert all(c["formula_error"] < 1e-6 for c in checks)
    assert all(c["n_own"] > 0 and not c["target_grad"] and c["shared_grad"] for c in checks)
    assert not any(c["equal_online"] for c in checks)
    # the queue receives the target keys of the step (the positives the loss used), detached
    positives = [call["positive"] for call in losses[1::2]]  # the second (perturbed) pass of each step
    assert len(pushes) == steps
    for push, positive in zip(pushes, positives):
        assert not push["requires_grad"]
        assert torch.equal(push["keys"], positive)
    assert [p["step"] for p in pushes] == list(range(1, steps + 1))
    # fill grows from K0 by B per step up to K; the loss sees the queue as it was before the push
    assert [p["fill"] for p in pushes] == [16, 24, 32, 32, 32, 32]
    assert queue_sizes == [8, 8, 16, 16, 24, 24, 32, 32, 32, 32, 32, 32]
    assert [r["queue_fill"] for r in reports] == [32, 32]
    assert [r["eta"] for r in reports] == [eta, eta]
    # exact FGSM: two online forwards per step (clean probe, then perturbed), plus the target forward
    assert [c for c in encoder_forwards if c[0]] == [(True, True, B)] * (2 * steps)
    assert [c for c in encoder_forwards if not c[0]] == [(False, False, B)] * (2 * steps)
    # the measured perturbation: nonzero, at most eps * sqrt(d) per token row (pads get a zero gradient)
    norms = [r["fgsm_norm"] for r in reports]
    assert all(0 < n <= eps * math.sqrt(32) * 1.001 for n in norms)

    mtd = summary.mtd
    assert mtd["eta"] == eta and mtd["eta_choice"] == "constant"
    assert mtd["formula"] == pytest.approx(1 / (1 - eta) + K / B)
    assert (mtd["queue_k"], mtd["batch_size"]) == (K, B)
    # measured ages of the real keys used: the oldest is K/B steps old once the queue is full of real keys
    # (K/B = 4: full before step 5, so steps 5 and 6 are counted)
    assert mtd["measured_steps"] == 2
    assert mtd["queue_age_max"] == pytest.approx(K / B)
    assert 1 <= mtd["queue_age_mean"] < K / B
    # EMA age in the paper's convention, from the recursion a_t = eta * (a_{t-1} + 1), a_0 = 0, by hand:
    a = [0.0]
    for _ in range(steps):
        a.append(eta * (a[-1] + 1))
    ema_ages = [a[t - 1] + 1 for t in (5, 6)]  # the target the loss of step t saw had t - 1 updates
    assert mtd["ema_age"] == pytest.approx(sum(ema_ages) / 2)
    assert mtd["measured"] == pytest.approx(sum(ema_ages) / 2 + K / B)


def test_mocose_symmetric_case_runs_and_collapse_is_reported(make_config, tmp_path, encoder_forwards, monkeypatch,
                                                              optimizer_steps):
    """eta = 0 without a predictor (MoCoSE Appendix A.2): the target is a copy of the online branch.

    On the tiny random BERT the mean pairwise cosine of STS-B dev goes from ~0.80 to ~0.99 within 4 steps
    at lr 1e-2 (so does the asymmetric default at that lr: here the high lr drives it as much as the
    symmetry), which the collapse check must report at the first evaluation and stop the run.
    """
    checks: list[dict] = []
    _spy_ema(monkeypatch, optimizer_steps, checks)
    config = make_config("mocose", max_steps=12, output_dir=str(tmp_path / "run"), collapse_threshold=0.95,
                         **{"ema.schedule": "constant", "ema.decay": 0.0, "heads.predictor_layers": 0,
                            "fgsm.eps": 0.0, "optim.lr": 1e-2, "eval.eval_steps": 4})
    reports: list[dict] = []
    summary = train_mod.train(config, report=reports.append)

    # eta = 0: after every step the target equals the online branch exactly
    assert checks and all(c["decay"] == 0.0 and c["equal_online"] for c in checks)
    assert summary.status == "collapsed"
    assert "mean pairwise cosine" in summary.reason and "step 4" in summary.reason
    assert summary.steps == 4 < summary.total_steps == 12
    assert [r["step"] for r in reports] == [4] and reports[0]["mean_cosine"] > 0.95
    assert json.loads(json.dumps(summary.to_json()))["status"] == "collapsed"
    # FGSM with eps 0 is off: nothing measured, one online forward per step
    assert all(r["fgsm_norm"] is None for r in reports)
    assert [c for c in encoder_forwards if c[0]] == [(True, True, B)] * 4


def test_fgsm_lagged_runs_with_measured_norm(make_config, encoder_forwards):
    eps = 1e-3
    config = make_config("mocose", max_steps=2, **{"fgsm.mode": "lagged", "fgsm.eps": eps})
    summary = train_mod.train(config)
    assert summary.status == "ok"
    # lagged: no extra pass; the sign captured in step 1's backward perturbs step 2
    assert [c for c in encoder_forwards if c[0]] == [(True, True, B)] * 2
    assert 0 < summary.history[-1]["fgsm_norm"] <= eps * math.sqrt(32) * 1.001


# ---- divergence ------------------------------------------------------------------------------------------
def test_huge_learning_rate_diverges_with_a_status_not_an_exception(make_config, tmp_path):
    config = make_config("simcse", max_steps=30, output_dir=str(tmp_path / "run"),
                         **{"optim.lr": 1e8, "optim.grad_clip": 0.0, "eval.eval_steps": 1000})
    summary = train_mod.train(config)
    assert summary.status == "diverged"
    assert "loss became" in summary.reason
    # on the CPU the loss is checked every step, so the run stops at the first non-finite one
    assert summary.steps < summary.total_steps
    assert f"by step {summary.steps}" in summary.reason
    assert summary.test is None and summary.best_step is None
    written = json.loads(json.dumps(summary.to_json(), allow_nan=False))  # strict JSON: no NaN
    assert written["status"] == "diverged"


# ---- the on_step hook (sweep doctor --bench) -------------------------------------------------------------
def test_on_step_follows_each_optimiser_step_and_its_evaluation(make_config, monkeypatch):
    monkeypatch.setattr(train_mod.DevEvaluator, "__call__", lambda self, encode: (0.5, 0.1))
    events: list = []
    handle = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: events.append("optimiser step"))
    try:
        summary = train_mod.train(make_config("simcse", max_steps=4, **{"eval.eval_steps": 2}),
                                  report=lambda metrics: events.append(f"evaluation {metrics['step']}"),
                                  on_step=events.append)
    finally:
        handle.remove()
    assert summary.status == "ok" and summary.steps == 4
    assert events == ["optimiser step", 1, "optimiser step", "evaluation 2", 2,
                      "optimiser step", 3, "optimiser step", "evaluation 4", 4]
    # not called for the step that ends a run early
    events.clear()
    diverging = make_config("simcse", max_steps=30, **{"optim.lr": 1e8, "optim.grad_clip": 0.0,
                                                       "eval.eval_steps": 1000})
    summary = train_mod.train(diverging, on_step=events.append)
    assert summary.status == "diverged" and events == list(range(1, summary.steps))


# ---- evaluation with the best-dev state ----------------------------------------------------------------
def test_final_evaluation_uses_the_best_dev_state(make_config, monkeypatch):
    scripted = iter([0.2, 0.9, 0.1])  # STS-B dev Spearman at steps 1, 2, 3: best at step 2
    states: list[dict] = []

    def fake_dev(self, encode):
        states.append({k: v.clone() for k, v in encode.__self__.model.state_dict().items()})
        return next(scripted), 0.5

    monkeypatch.setattr(train_mod.DevEvaluator, "__call__", fake_dev)
    final_states: list[dict] = []
    real_evaluate = train_mod.evaluate_sts

    def evaluate(encode, *args, **kwargs):
        final_states.append({k: v.clone() for k, v in encode.__self__.model.state_dict().items()})
        return real_evaluate(encode, *args, **kwargs)

    monkeypatch.setattr(train_mod, "evaluate_sts", evaluate)
    summary = train_mod.train(make_config("simcse", max_steps=3, **{"eval.eval_steps": 1, "optim.lr": 1e-3}))

    assert [h["dev_stsb"] for h in summary.history] == [20.0, 90.0, 10.0]
    assert summary.best_step == 2 and summary.best_dev_stsb == 90.0
    assert len(final_states) == 1
    final = final_states[0]
    assert all(torch.equal(final[k], states[1][k]) for k in final)
    assert not all(torch.equal(final[k], states[2][k]) for k in final)  # not the last state


def test_the_summary_keeps_the_per_subset_sts_details(make_config, tmp_path):
    # README: per-subset Pearson/Spearman, their mean and wmean are kept; summary.json holds them as sts_details
    out = tmp_path / "run"
    summary = train_mod.train(make_config("simcse", max_steps=2, output_dir=str(out),
                                          **{"eval.final_tasks": ["STS13", "STSBenchmark"]}))
    written = json.loads(json.dumps(summary.to_json()))
    assert written["sts_details"] == summary.sts_details
    details = written["sts_details"]
    assert set(details) == {"STS13", "STSBenchmark"}
    sts13 = details["STS13"]
    assert set(sts13["subsets"]) == {"FNWN", "headlines", "OnWN"}
    for subset in sts13["subsets"].values():
        assert set(subset) == {"pearson", "spearman", "n"} and subset["n"] > 0
    for metric in ("pearson", "spearman"):
        values = [subset[metric] for subset in sts13["subsets"].values()]
        weights = [subset["n"] for subset in sts13["subsets"].values()]
        assert sts13[metric]["mean"] == pytest.approx(np.mean(values))
        assert sts13[metric]["wmean"] == pytest.approx(np.average(values, weights=weights))
    assert sts13["n"] == sum(subset["n"] for subset in sts13["subsets"].values())
    for task in ("STS13", "STSBenchmark"):  # the headline score is the details' Spearman "all", x100
        assert written["test"][task] == float("%.2f" % (details[task]["spearman"]["all"] * 100))


# ---- weight decay groups -----------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["mocose", "simcse"])
def test_no_weight_decay_on_biases_and_layer_norms(method, make_config):
    config = make_config(method).resolved()
    encoder, _ = train_mod.load_encoder(config.model, dropout=config.dropout)
    model = method_class(method)(encoder, config, torch.Generator(), torch.Generator())
    decay_group, no_decay_group = model.trainable_groups(config.optim.weight_decay)
    assert decay_group["weight_decay"] == config.optim.weight_decay and no_decay_group["weight_decay"] == 0.0
    norms = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    trainable = {id(p): name for name, p in model.named_parameters() if p.requires_grad}
    decay = {id(p) for p in decay_group["params"]}
    no_decay = {id(p) for p in no_decay_group["params"]}
    assert decay | no_decay == set(trainable) and not decay & no_decay  # each trainable parameter once
    for pid, name in trainable.items():
        should_skip = name.endswith("bias") or pid in norms
        assert (pid in no_decay) == should_skip, name
    if method == "mocose":
        # the heads' LayerNorms (inside nn.Sequential, named e.g. projection.1.weight) are excluded too
        assert {id(p) for p in model.projection.parameters()} & norms <= no_decay
        assert {id(p) for p in model.predictor.parameters()} & norms
        # the EMA target branch is not optimised, except the shared embedding layer (online's own)
        target_only = {id(p) for p in model.target_encoder.parameters()} - {id(p) for p in encoder.parameters()}
        assert target_only and not target_only & (decay | no_decay)


# ---- a fixed small corpus: the loss decreases, the run is deterministic, the corpus cache is reused ------
def test_loss_decreases_deterministic_and_cache_reused(make_config, shared_data_dir, tmp_path, losses, monkeypatch):
    lines = (shared_data_dir / "corpus" / "wiki1m_sample.txt").read_text(encoding="utf-8").splitlines()
    corpus = tmp_path / "corpus16.txt"
    corpus.write_text("\n".join(lines[:16]) + "\n", encoding="utf-8")
    reads: list[int] = []
    real_read = corpus_mod.read_sentences
    monkeypatch.setattr(corpus_mod, "read_sentences", lambda *a, **k: reads.append(1) or real_read(*a, **k))

    cache_dir = tmp_path / "shared-cache"
    config = make_config("simcse", max_steps=30, **{
        "data.corpus": str(corpus), "data.max_sentences": None, "data.cache_dir": str(cache_dir),
        "optim.lr": 1e-3, "eval.eval_steps": 1000})

    first = train_mod.train(config)
    first_losses = [c["loss"] for c in losses]
    cache_files = list(cache_dir.glob("corpus-*.npz"))
    assert len(reads) == 1 and len(cache_files) == 1
    stamp = cache_files[0].stat().st_mtime_ns

    losses.clear()
    second = train_mod.train(config)
    second_losses = [c["loss"] for c in losses]

    # the second run read the tokenised corpus from the cache: no re-reading / re-tokenising, no rewrite
    assert len(reads) == 1
    assert list(cache_dir.glob("corpus-*.npz")) == cache_files and cache_files[0].stat().st_mtime_ns == stamp
    assert first.corpus_sentences == second.corpus_sentences == 16

    # the same seed on CPU: the identical loss at every step, the identical results
    assert len(first_losses) == 30
    assert first_losses == second_losses
    assert first.test == second.test and first.history[-1]["loss"] == second.history[-1]["loss"]

    # SimCSE learns on 16 sentences (2 batches an epoch) at lr 1e-3: the loss goes down. Per-step losses
    # are noisy (dropout views), so compare the means of the first and last 10 steps.
    head, tail = np.mean(first_losses[:10]), np.mean(first_losses[-10:])
    assert tail < 0.85 * head, (head, tail)


# ---- a run in a reused process (sweep's reuse_workers) equals the same run in a fresh process ----------
def _results(summary: dict) -> dict:
    """A summary without what differs between two runs of one config: timings and paths."""
    timing = ("train_seconds", "eval_seconds", "final_eval_seconds", "wall_time_s", "sentences_per_s", "elapsed_s")
    out = {k: v for k, v in summary.items() if k not in timing and k != "config"}
    out["history"] = [{k: v for k, v in entry.items() if k not in timing} for entry in summary["history"]]
    return out


@pytest.mark.slow  # three trainings and a subprocess
def test_a_run_after_another_in_one_process_equals_a_fresh_run(make_config, tmp_path):
    import subprocess

    import yaml

    run_a = make_config("mocose", **{"fgsm.eps": 1e-3, "fgsm.mode": "lagged", "seed": 7,
                                     "output_dir": str(tmp_path / "fresh")})
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(run_a.to_dict()))
    alone = subprocess.run([sys.executable, "-m", "trainer", str(tmp_path / "a.yaml")], capture_output=True, text=True,
                           env={**__import__("os").environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
                           timeout=scaled(300), check=False)
    assert alone.returncode == 0, alone.stderr[-2000:]
    fresh = json.loads((tmp_path / "fresh" / "summary.json").read_text())

    # this process: another method, precision and seed first, then state a caller might leave behind
    threads = torch.get_num_threads()
    train_mod.train(make_config("gs", precision="bf16", seed=3, **{"fgsm.eps": 1e-2, "fgsm.mode": "exact"}))
    assert torch.get_num_threads() == threads  # the evaluation's single-thread spells are undone
    torch.manual_seed(12345)
    np.random.seed(12345)
    torch.set_grad_enabled(False)
    try:
        reused = train_mod.train(run_a.override({"output_dir": str(tmp_path / "reused")}))
    finally:
        torch.set_grad_enabled(True)
    assert _results(reused.to_json()) == _results(fresh)


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)], ids=["umask-022", "umask-077"])
def test_saved_weights_get_the_users_umask(make_config, tmp_path, umask, mode):
    """Every file of a kept model/ gets the mode a plain open() gives, the weights too (safetensors creates
    its file 0600 whatever the umask)."""
    config = make_config("simcse", save_model=True, output_dir=str(tmp_path / "out"))
    before = os.umask(umask)
    try:
        train_mod.train(config)
    finally:
        os.umask(before)
    files = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out" / "model").iterdir()}
    assert "model.safetensors" in files and set(files.values()) == {mode}, files
