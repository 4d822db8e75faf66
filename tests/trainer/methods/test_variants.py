"""Paper versus released-code variants (docs/science/paper-vs-released.md), precision, and the measured traceable
distance (section 9), each against an independent reference: hand-written formulas, NumPy, or a list
model of the queue, never the trainer's own output."""

from __future__ import annotations

import math
import pickle
import sys

import numpy as np
import pytest
import torch
from torch import nn

import trainer.train as train_mod
from tests.helpers import first_fast
from trainer.augment import check_fgsm_precision
from trainer.config import RunConfig
from trainer.errors import PrecisionFloorError, UserError
from trainer.methods import GSInfoNCE, MixCSE, MoCoSE, SimCSE, method_class
from trainer.methods.heads import build_predictor, build_projection
from trainer.mtd import TraceableDistanceMeter
from trainer.queue import NegativeQueue
from trainer.schedules import ema_decay_at

pytestmark = pytest.mark.usefixtures("one_torch_thread")
B, K, K0 = 8, 32, 4


@pytest.fixture
def make_config(tiny_model_dir, shared_data_dir, tmp_path):
    def make(method: str = "mocose", **overrides) -> RunConfig:
        base = {
            "model": str(tiny_model_dir), "method": method, "batch_size": B, "max_steps": 5, "device": "cpu",
            "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 200},
            "eval": {"eval_steps": 5, "final_tasks": ["STSBenchmark"]},
            "queue": {"size": K, "initial_size": K0}, "fgsm": {"eps": 0.0},
        }
        return RunConfig.from_dict(base).override(overrides)

    return make


def patch_everywhere(monkeypatch, name, replacement_for):
    for key, module in list(sys.modules.items()):
        if key.startswith("trainer") and module is not None and callable(getattr(module, name, None)):
            monkeypatch.setattr(module, name, replacement_for(getattr(module, name)))


# ---- the variant switch and its per-behaviour keys ---------------------------------------------------
def test_variant_released_switches_every_flag_and_each_flag_alone_overrides_it():
    paper = RunConfig.from_dict({"method": "mocose"}).resolved()
    released = RunConfig.from_dict({"method": "mocose", "variant": "released"}).resolved()
    assert not any(paper.to_dict()["released"].values())
    flags = released.to_dict()["released"]
    # every flag but eval_cutoff, which makes the evaluation random and is switched on only by its own key
    assert all(value for flag, value in flags.items() if flag != "eval_cutoff") and flags["eval_cutoff"] is False
    one = RunConfig.from_dict({"method": "mocose", "released": {"initial_queue": True}}).resolved()
    assert one.released.initial_queue and not one.released.ema_schedule
    all_but_one = RunConfig.from_dict({"method": "mocose", "variant": "released",
                                       "released": {"target_gradients": False}}).resolved()
    assert all_but_one.released.ema_schedule and not all_but_one.released.target_gradients


def test_released_ema_schedule_values_at_0_half_t_t_and_2t():
    config = RunConfig.from_dict({"method": "mocose", "variant": "released", "ema": {"decay": 0.8}}).resolved()
    ema = config.ema
    assert (ema.decay_end, ema.schedule_steps, ema.hold_after_schedule) == (1.0, 15000, False)
    T, eta0 = 15000, 0.8

    def released(t):  # the released code: 1 - (1 - eta0) * (cos(pi t / T) + 1) / 2, t never clamped
        return 1 - (1 - eta0) * (math.cos(math.pi * t / T) + 1) / 2

    got = [ema_decay_at(t, ema.schedule, ema.decay, ema.decay_end, ema.schedule_steps, ema.hold_after_schedule)
           for t in (0, T // 2, T, 2 * T)]
    assert got == pytest.approx([0.8, 0.9, 1.0, 0.8])
    assert got == pytest.approx([released(t) for t in (0, T // 2, T, 2 * T)])
    # the paper's reading holds eta1 after T
    paper = RunConfig.from_dict({"method": "mocose", "ema": {"schedule_steps": 100}}).resolved().ema
    assert ema_decay_at(200, paper.schedule, paper.decay, paper.decay_end, 100, paper.hold_after_schedule) == 0.95
    # decay_end 1.0 is accepted (it was refused before), above 1 is not
    with pytest.raises(UserError, match="ema.decay_end"):
        RunConfig.from_dict({"ema": {"decay_end": 1.5}})


def test_released_initial_queue_keys_seen_at_steps_1_to_k_over_b_plus_1(make_config, monkeypatch):
    """The released queue: all K slots random; the loss reads what the release reads. Checked against a list
    model of the release's queue tensor: each step's keys prepended, the list cut back to K only once its
    count (K0 + pushed) exceeds K; the loss reads the first count + K0 columns while that is below K, else
    the whole list, which then holds more than K keys."""
    seen, initial = [], {}
    real_init = NegativeQueue.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        initial["keys"] = self.keys.clone()

    monkeypatch.setattr(NegativeQueue, "__init__", init)

    def replacement_for(real):
        def spy(q, k, queue_keys, *args, **kwargs):
            seen.append({"queue": queue_keys.detach().clone(), "keys": k.detach().clone()})
            return real(q, k, queue_keys, *args, **kwargs)
        return spy

    patch_everywhere(monkeypatch, "mocose_loss", replacement_for)
    steps = K // B + 1
    summary = train_mod.train(make_config(max_steps=steps, **{"released.initial_queue": True}))
    assert summary.status == "ok"
    random_keys = initial["keys"]
    assert random_keys.shape == (K, 32) and torch.allclose(random_keys.norm(dim=1), torch.ones(K))
    release_columns, count = list(random_keys), K0  # the release's queue tensor (newest first), queue_size
    for t, call in enumerate(seen, start=1):
        expected = release_columns[: count + K0] if count + K0 < K else release_columns
        assert call["queue"].shape[0] == len(expected), t
        torch.testing.assert_close(call["queue"], torch.stack(expected))
        release_columns, count = list(call["keys"]) + release_columns, count + B
        if count > K:
            release_columns = release_columns[:K]
    # by hand: 2*K0 + (t-1)*B = 8, 16, 24; at t = 4 that sum reaches K = 32 while K0 + 3B = 28 <= K: the whole
    # tensor, K + 3B = 56; after the 4th push K0 + 4B = 36 > K cuts it to K
    assert [c["queue"].shape[0] for c in seen] == [8, 16, 24, 56, 32]
    # the paper's reading: K0 random keys, real keys in front, growing to K
    seen.clear()
    train_mod.train(make_config(max_steps=steps))
    assert [c["queue"].shape[0] for c in seen] == [4, 12, 20, 28, 32]


def _own_target_parameters(method):
    """(name, parameter) of the target branch, without the embedding layer it shares with the online one."""
    shared = {id(p) for p in method.encoder.embeddings.parameters()}
    prefixes = ("encoder", "pooler", "projection")
    return [(f"{prefix}.{name}", p) for module, prefix in zip(method.target_modules(), prefixes)
            for name, p in module.named_parameters() if id(p) not in shared]


@pytest.mark.parametrize("released", [False, True])
def test_target_gradients(make_config, monkeypatch, released):
    """Released: the optimiser also moves the target projection between EMA updates (so it departs from
    the EMA formula); the EMA copies of encoder and pooler never get an optimiser update."""
    records = []
    real = MoCoSE.update_target

    def spy(self, decay):
        named = _own_target_parameters(self)
        before = [p.detach().clone() for _, p in named]
        real(self, decay)
        records.append({"names": [n for n, _ in named], "before": before,
                        "after": [p.detach().clone() for _, p in named],
                        "projection_grad": all(p.requires_grad for p in self.target_projection.parameters())})

    monkeypatch.setattr(MoCoSE, "update_target", spy)
    positives = []
    patch_everywhere(monkeypatch, "mocose_loss",
                     lambda real: lambda q, k, *a, **kw: positives.append(k.requires_grad) or real(q, k, *a, **kw))
    config = make_config(max_steps=3, collapse_threshold=1.0, **{"released.target_gradients": released,
                                                                 "ema.schedule": "constant", "ema.decay": 0.9})
    assert train_mod.train(config).status == "ok"
    assert all(p is released for p in positives)  # the target output carries a gradient only when released
    for previous, current in zip(records, records[1:]):
        # between two EMA updates, target parameters change only by the optimiser: compare what the last
        # update produced with what the next one started from
        moved = {name for name, a, b in zip(current["names"], previous["after"], current["before"])
                 if not torch.equal(a, b)}
        assert not any(n.startswith(("encoder.", "pooler.")) for n in moved)
        assert bool(moved) is released and all(n.startswith("projection.") for n in moved)
    assert all(r["projection_grad"] is released for r in records)


@pytest.mark.parametrize("released", [False, True])
def test_released_ema_update_after_step_s_uses_eta_of_s_plus_1(make_config, monkeypatch, released):
    """The release advances its EMA counter before computing eta and updates at the start of the next
    forward: the update after optimiser step s uses eta(s+1); the paper's reading uses eta(s). A short T = 4
    over 6 steps crosses T (the unclamped cosine swings back)."""
    decays = []
    real = MoCoSE.update_target
    monkeypatch.setattr(MoCoSE, "update_target", lambda self, decay: decays.append(decay) or real(self, decay))
    config = make_config(max_steps=6, **{"released.ema_schedule": released, "ema.decay": 0.5, "ema.decay_end": 1.0,
                                         "ema.schedule_steps": 4, "ema.hold_after_schedule": False})
    summary = train_mod.train(config)
    # eta(t) = 1 - (1 - 0.5) (cos(pi t / 4) + 1) / 2 by hand: cos(pi/4) = sqrt(2)/2 gives (6 - sqrt 2) / 8
    r = math.sqrt(2)
    eta = {1: (6 - r) / 8, 2: 0.75, 3: (6 + r) / 8, 4: 1.0, 5: (6 + r) / 8, 6: 0.75, 7: (6 - r) / 8}
    expected = [eta[s + 1] for s in range(1, 7)] if released else [eta[s] for s in range(1, 7)]
    assert decays == pytest.approx(expected, abs=1e-12)
    assert summary.released["ema_schedule"] is released
    assert summary.mtd["eta"] == pytest.approx(sum(expected) / 6, abs=1e-12)  # the mean of the etas used


@pytest.mark.parametrize("released", [False, True])
def test_released_cutoffs_attach_fgsm_ahead_of_the_cutoff(make_config, monkeypatch, released):
    """Released: FGSM perturbs the word embeddings before the cutoff hook on the same module runs (the unit
    behaviour is tests/trainer/test_augment.py's); the paper's cutoff sits on the embedding layer's output."""
    from trainer.augment import FGSM

    orders = []
    real_attach = FGSM.attach

    def attach(self, module, before_other_hooks=False):
        attached = real_attach(self, module, before_other_hooks)
        orders.append([hook.__qualname__ for hook in module._forward_hooks.values()])
        return attached

    monkeypatch.setattr(FGSM, "attach", attach)
    summary = train_mod.train(make_config(max_steps=2, **{"released.cutoffs": released, "augment.token_cutoff": 0.25,
                                                          "fgsm.eps": 1e-3}))
    assert summary.status == "ok" and summary.released["cutoffs"] is released
    if released:
        assert orders == [["FGSM._on_forward", "EmbeddingCutoff._hook", "FGSM._measure"]]
    else:
        assert orders == [["FGSM._on_forward", "FGSM._measure"]]


def test_embedding_dim_sets_projection_predictor_and_queue_width(tiny_model_dir):
    config = RunConfig.from_dict({"model": str(tiny_model_dir), "heads": {"embedding_dim": 16},
                                  "queue": {"size": 8, "initial_size": 2}}).resolved()
    encoder, _ = train_mod.load_encoder(config.model, dropout=config.dropout)
    method = MoCoSE(encoder, config, torch.Generator(), torch.Generator())
    assert method.queue.keys.shape == (8, 16)
    ids = torch.randint(1000, 2000, (3, 7))
    mask = torch.ones_like(ids)
    assert method.online(ids, mask).shape == (3, 16) and method.target(ids, mask).shape == (3, 16)
    widths = {m.out_features for m in method.predictor.modules() if isinstance(m, nn.Linear)}
    assert widths == {16}  # every predictor layer is embedding_dim wide (the release's out_size)
    hidden = RunConfig.from_dict({"model": str(tiny_model_dir),
                                  "heads": {"embedding_dim": 16, "predictor_hidden_dim": 64}})
    method = MoCoSE(encoder, hidden.resolved(), torch.Generator(), torch.Generator())
    assert [m.out_features for m in method.predictor.modules() if isinstance(m, nn.Linear)] == [64, 16]
    with pytest.raises(UserError, match="heads.embedding_dim"):
        RunConfig.from_dict({"heads": {"embedding_dim": 16, "projection_layers": 0}}).resolved()


def test_heads_init_statistics():
    torch.manual_seed(0)
    released = [build_projection(512, 1, out_dim=512, released_init=True),
                build_predictor(512, None, 2, released_init=True)]
    paper = [build_projection(512, 1, out_dim=512), build_predictor(512, None, 2)]
    for module in released:
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                w = layer.weight.detach().numpy()
                assert abs(w.mean()) < 1e-3 and w.std() == pytest.approx(0.02, rel=0.02)
                assert not layer.bias.detach().numpy().any()
            if isinstance(layer, nn.LayerNorm):
                assert layer.eps == 1e-12
    for module in paper:  # PyTorch's default: Kaiming-uniform, std 1/sqrt(3 * fan_in); LayerNorm eps 1e-5
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                assert layer.weight.detach().numpy().std() == pytest.approx(1 / math.sqrt(3 * 512), rel=0.02)
            if isinstance(layer, nn.LayerNorm):
                assert layer.eps == 1e-5


def test_released_cutoffs_cut_both_branches_at_the_word_embeddings(make_config, monkeypatch):
    """Released: a fixed count of positions, [CLS] and pads included, on the word-embedding output of BOTH
    branches; paper: the embedding-layer output of both views too (Algorithm 1 line 3), each its own draw;
    `augment.branches: online` keeps the cutoff to the online view."""
    cuts = []
    import trainer.augment as augment

    real = augment.fixed_count_token_cutoff
    monkeypatch.setattr(augment, "fixed_count_token_cutoff",
                        lambda e, rate, g=None: cuts.append(e.shape) or real(e, rate, g))
    train_mod.train(make_config(max_steps=2, **{"released.cutoffs": True, "augment.token_cutoff": 0.2}))
    assert len(cuts) == 4  # two steps x (online + target)
    cuts.clear()
    paper_cuts = []
    real_paper = augment.token_cutoff
    monkeypatch.setattr(augment, "token_cutoff", lambda e, m, rate, generator=None: paper_cuts.append(1)
                        or real_paper(e, m, rate, generator=generator))
    train_mod.train(make_config(max_steps=2, **{"augment.token_cutoff": 0.2}))
    assert cuts == [] and len(paper_cuts) == 4  # two steps x (online + target)
    paper_cuts.clear()
    train_mod.train(make_config(max_steps=2, **{"augment.token_cutoff": 0.2, "augment.branches": "online"}))
    assert len(paper_cuts) == 2  # online only


EVAL_BATCH = ["a man is playing a guitar .", "two dogs run across the snow", "the stock market fell sharply today"]


@pytest.mark.parametrize("cutoffs", [False, True])
@pytest.mark.parametrize("eval_cutoff", [False, True])
def test_eval_cutoff_makes_two_evaluations_of_one_batch_differ_only_when_on(tiny_model_dir, eval_cutoff, cutoffs):
    """released.eval_cutoff: the cutoffs (either form) and token shuffle act at evaluation, as in the MoCoSE
    release, so encoding the same batch twice gives two answers; off, evaluation is deterministic."""
    config = RunConfig.from_dict({
        "model": str(tiny_model_dir), "device": "cpu", "queue": {"size": K, "initial_size": K0},
        "augment": {"token_cutoff": 0.2, "feature_cutoff": 0.1, "token_shuffle": True},
        "released": {"eval_cutoff": eval_cutoff, "cutoffs": cutoffs}}).resolved()
    encoder, tokenizer = train_mod.load_encoder(config.model, dropout=config.dropout)
    method = MoCoSE(encoder, config, torch.Generator(), torch.Generator())
    augments = method.evaluation_augments(torch.Generator().manual_seed(0))
    assert (augments is not None) is eval_cutoff
    for encode in train_mod.evaluation_encoders(method, tokenizer, torch.device("cpu"), augments):
        first, second = encode(EVAL_BATCH), encode(EVAL_BATCH)
        assert (not np.array_equal(first, second)) is eval_cutoff


def test_eval_cutoff_is_labelled_and_leaves_the_training_draws_alone(make_config):
    """On: the summary says so; the training's losses are those of the same run with it off (the evaluation
    draws from its own generator). variant: released leaves it off."""
    augment = {"augment.token_cutoff": 0.2, "augment.token_shuffle": True, "eval.eval_steps": 1, "max_steps": 2}
    on = train_mod.train(make_config(**augment, **{"released.eval_cutoff": True}))
    off = train_mod.train(make_config(**augment))
    assert on.released["eval_cutoff"] is True and "not SentEval's protocol" in on.eval_cutoff
    assert off.released["eval_cutoff"] is False and off.eval_cutoff is None
    assert [h["loss"] for h in on.history] == [h["loss"] for h in off.history]
    assert RunConfig.from_dict({"variant": "released"}).resolved().released.eval_cutoff is False


@pytest.mark.parametrize("selection, restored_step", [("dev", 2), ("test_avg", 3)])
def test_test_selected_checkpoint_is_reported_labelled_and_used_only_on_request(make_config, monkeypatch,
                                                                                 selection, restored_step):
    devs = iter([0.5, 0.7, 0.6])  # dev picks step 2
    tests = iter([70.0, 60.0, 80.0])  # the test average picks step 3
    monkeypatch.setattr(train_mod.DevEvaluator, "__call__", lambda self, encode: (next(devs), 0.5))
    real_evaluate = train_mod.evaluate_sts
    step = {"now": 0}

    def fake_evaluate(encode, root, tasks=None, align_uniform_split="dev"):
        if align_uniform_split is None and list(tasks) == list(train_mod.STS_TASKS):  # the per-evaluation test pass
            value = next(tests)
            step["now"] += 1
            return type("R", (), {"scores": {t: value for t in tasks}, "avg": value})()
        return real_evaluate(encode, root, tasks, align_uniform_split)

    # Tag each snapshot with the step it was taken at, and record which one the final evaluation restores.
    real_snapshot, real_restore = train_mod.snapshot_checkpoint, train_mod.restore_checkpoint
    taken, restored = {}, []

    def tagged_snapshot(method):
        state = real_snapshot(method)
        taken[id(state)] = step["now"]
        return state

    def recorded_restore(method, state):
        restored.append(taken[id(state)])
        real_restore(method, state)

    monkeypatch.setattr(train_mod, "evaluate_sts", fake_evaluate)
    monkeypatch.setattr(train_mod, "snapshot_checkpoint", tagged_snapshot)
    monkeypatch.setattr(train_mod, "restore_checkpoint", recorded_restore)
    summary = train_mod.train(make_config(max_steps=3, **{"eval.eval_steps": 1, "released.test_selected": True,
                                                          "eval.selection": selection}))
    assert summary.best_step == 2 and summary.selection.split(":")[0] == selection
    assert restored == [restored_step]  # the final test figures come from this checkpoint
    assert summary.test_selected["step"] == 3 and summary.test_selected["test"]["avg"] == 80.0
    assert "TEST" in summary.test_selected["label"]
    assert [h["test_avg"] for h in summary.history] == [70.0, 60.0, 80.0]


@pytest.mark.parametrize("method, overrides", first_fast(
    ("mocose", {"released.test_selected": True}), ("mocose", {}), ("simcse", {"released.test_selected": True}),
    ("gs", {"released.test_selected": True}), ("mix", {"released.test_selected": True}),
    ("simcse", {"eval.selection": "test_avg"}),
))
def test_the_dry_runs_test_tracking_rule_is_what_train_does(make_config, monkeypatch, method, overrides):
    """Whether each evaluation also scores the seven STS test tasks: the run plan's rule (what sweep's cost estimate
    counts) against a real run, whose per-evaluation test passes are counted."""
    from trainer.run_plan import RunPlan

    real_evaluate, passes = train_mod.evaluate_sts, []

    def counting(encode, root, tasks=None, align_uniform_split="dev"):
        if align_uniform_split is None and list(tasks) == list(train_mod.STS_TASKS):
            passes.append(1)
            return type("R", (), {"scores": {t: 70.0 for t in tasks}, "avg": 70.0})()
        return real_evaluate(encode, root, tasks, align_uniform_split)

    monkeypatch.setattr(train_mod, "evaluate_sts", counting)
    config = make_config(method, max_steps=2, **{"eval.eval_steps": 1, **overrides})
    train_mod.train(config)
    assert RunPlan.of(config.resolved()).tracks_test == (len(passes) == 2)  # one pass per evaluation, or none
    assert len(passes) in (0, 2)


def test_precision_defaults_follow_each_release():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    methods = (SimCSE, GSInfoNCE, MoCoSE, MixCSE)
    assert [cls.precision_on(cuda, "auto") for cls in methods] == ["fp16", "fp16", "fp32", "fp32"]
    assert MoCoSE.precision_on(cuda, "bf16") == "bf16"
    assert all(cls.precision_on(cpu, "auto") == "fp32" for cls in (SimCSE, MoCoSE))


def test_fgsm_below_half_precision_resolution_is_refused():
    config = RunConfig.from_dict({"method": "mocose"}).resolved()  # eps 5e-9
    embeddings = torch.full((100, 8), 0.04)
    with pytest.raises(UserError, match="fgsm.eps.*precision: fp32") as refused:
        check_fgsm_precision(config.fgsm.eps, "bf16", embeddings)
    # typed, so that a caller able to run without FGSM (the GPU bench) need not read the message
    assert isinstance(refused.value, PrecisionFloorError) and refused.value.key == "fgsm.eps"
    assert (refused.value.eps, refused.value.precision) == (5e-9, "bf16") and refused.value.floor > 5e-9
    crossed = pickle.loads(pickle.dumps(refused.value))  # as from a bench's child process
    assert type(crossed) is PrecisionFloorError and str(crossed) == str(refused.value) and crossed.key == "fgsm.eps"
    with pytest.raises(UserError, match="fgsm.eps"):
        check_fgsm_precision(config.fgsm.eps, "fp16", embeddings)
    check_fgsm_precision(config.fgsm.eps, "fp32", embeddings)  # fp32: no refusal
    big = config.override({"fgsm.eps": 1e-3})
    check_fgsm_precision(big.fgsm.eps, "bf16", embeddings)


def test_fgsm_norm_is_what_the_compute_dtype_receives():
    from trainer.augment import FGSM

    embedding = nn.Embedding(10, 4)
    with torch.no_grad():
        embedding.weight.fill_(0.05)
    fgsm = FGSM(eps=5e-9, mode="exact").attach(embedding)
    ids = torch.tensor([[1, 2]])
    with fgsm.capture():
        loss = embedding(ids).sum()
    loss.backward()
    with fgsm.perturb():
        embedding(ids)
    float32_norm = fgsm.last_perturbation_norm
    fgsm.compute_dtype = torch.bfloat16
    with fgsm.perturb():
        embedding(ids)
    # independent: 0.05 + 5e-9 rounds back to 0.05 in bf16 (spacing ~2.4e-4) but not in fp32 (~3.7e-9)
    assert torch.tensor(0.05 + 5e-9, dtype=torch.bfloat16) == torch.tensor(0.05, dtype=torch.bfloat16)
    assert float32_norm > 0 and fgsm.last_perturbation_norm == 0.0


def test_gs_and_mix_released_defaults():
    gs = RunConfig.from_dict({"method": "gs", "variant": "released"}).resolved()
    assert gs.dropout == 0.2 and gs.gaussian.count == 192 and gs.gaussian.count_per_batch is None  # run.sh
    assert RunConfig.from_dict({"method": "gs"}).resolved().dropout == 0.1
    with pytest.raises(UserError, match="gaussian.weight"):
        RunConfig.from_dict({"method": "gs", "variant": "released", "gaussian": {"weight": 2.0}}).resolved()
    mix = RunConfig.from_dict({"method": "mix", "variant": "released"}).resolved()
    assert mix.released.mix_negatives and mix.released.dev_on_mlp and mix.mix.hard_negative_weight == 0.0


@pytest.mark.parametrize("model, dropout", [
    ("bert-base-uncased", 0.2), ("bert-large-uncased", 0.2), ("roberta-base", 0.1), ("roberta-large", 0.1),
    ("FacebookAI/roberta-base", 0.1), ("/models/google-bert/bert-base-uncased", 0.2), ("/models/RoBERTa-large", 0.1),
])
@pytest.mark.parametrize("batch", [32, 64, 128])
def test_gs_released_noise_count_and_dropout_follow_run_sh(model, dropout, batch):
    """run.sh: random_size=192 whatever the model and batch size; dropout 0.2 for BERT, 0.1 for RoBERTa.
    The paper's reading: M = 3N, dropout 0.1. Each behaviour has its own key."""
    def resolve(**extra):
        return RunConfig.from_dict({"method": "gs", "model": model, "batch_size": batch, **extra}).resolved()

    def m_and_dropout(config):
        return config.gaussian_count(), config.dropout

    assert m_and_dropout(resolve(variant="released")) == (192, dropout)
    assert m_and_dropout(resolve()) == (3 * batch, 0.1)
    assert m_and_dropout(resolve(released={"gaussian_count": True})) == (192, 0.1)
    assert m_and_dropout(resolve(released={"dropout": True})) == (3 * batch, dropout)
    assert resolve(variant="released", gaussian={"count": 7}).gaussian_count() == 7  # an explicit M is kept
    assert resolve(variant="released", dropout=0.3).dropout == 0.3


def test_released_optimizer_is_on_for_every_method_and_recorded(make_config):
    """`released.optimizer`: transformers 4.x AdamW (its math: tests/trainer/test_optim.py) under variant released for
    every method; torch's AdamW in the paper's reading; the resolved flag is in summary.json."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from trainer.optim import TransformersAdamW

    for method in ("simcse", "gs", "mix", "mocose"):
        assert RunConfig.from_dict({"method": method, "variant": "released"}).resolved().released.optimizer
        assert not RunConfig.from_dict({"method": method}).resolved().released.optimizer
    used = []
    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: used.append(type(opt)))
    try:
        for flag in (True, False):
            summary = train_mod.train(make_config("simcse", max_steps=1, **{"released.optimizer": flag}))
            assert summary.released["optimizer"] is flag and summary.released["gaussian_count"] is False
    finally:
        handle.remove()
    assert used == [TransformersAdamW, torch.optim.AdamW]


def test_mixcse_dev_head_and_layout(tiny_model_dir):
    for variant, pooler, layout in (("paper", None, "paper"), ("released", "cls", "released")):
        config = RunConfig.from_dict({"model": str(tiny_model_dir), "method": "mix", "variant": variant}).resolved()
        encoder, _ = train_mod.load_encoder(config.model, dropout=config.dropout)
        method = method_class("mix")(encoder, config, torch.Generator(), torch.Generator())
        dev_pooler, mlp = method.dev_head()
        assert dev_pooler == pooler and (mlp is method.mlp if pooler else mlp is None)
        assert method.negatives.mix_layout == layout


def np_mix_row_loss(anchors, positives, mixes, tau):
    """One InfoNCE of the paper's L_mix, row by row in float64: -log exp(c(a_i, p_i)/tau) / (sum_j exp(c(a_i, p_j)/
    tau) + sum over the row's mixes of exp(c(a_i, m)/tau)); `mixes[i]` lists row i's mixed negatives."""
    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    total = 0.0
    for i in range(len(anchors)):
        terms = np.array([cos(anchors[i], p) / tau for p in positives] + [cos(anchors[i], m) / tau for m in mixes[i]])
        total += np.log(np.exp(terms - terms.max()).sum()) + terms.max() - terms[i]
    return total / len(anchors)


def np_paper_mix(z, lam, i):
    """The paper's mix of row i with row i+1 of l2-normalised features."""
    u = z / np.linalg.norm(z, axis=1, keepdims=True)
    mixed = lam * u[i] + (1 - lam) * u[(i + 1) % len(z)]
    return mixed / np.linalg.norm(mixed)


@pytest.mark.parametrize("anchors, directions, anchor_losses", [
    ("symmetric", "both", "mean"), ("symmetric", "single", "mean"), ("one_loss", "both", "mean"),
    ("one_loss", "single", "mean"), *first_fast(("symmetric", "single", "sum"), ("symmetric", "both", "sum"))])
def test_mixcse_step_is_the_papers_loss_with_either_reading_of_the_two_anchors(tiny_model_dir, monkeypatch, anchors,
                                                                              directions, anchor_losses):
    """The MixCSE method object's loss on a real batch against the paper's formulas written out on the two views it
    encoded: symmetric (h'_i the anchor of its own loss, the two averaged, or added with `anchor_losses: sum`; the
    paper reading's default) or one_loss (h'_i's mixed negative one more column of h_i's row). MixCSE_single
    (`directions: single`, "we only construct a hard negative for h_i") drops h'_i's mixed negative and nothing
    else: under symmetric h'_i keeps its own loss."""
    config = RunConfig.from_dict({"model": str(tiny_model_dir), "method": "mix", "device": "cpu",
                                  "mix": {"anchors": anchors, "directions": directions,
                                          "anchor_losses": anchor_losses}}).resolved()
    encoder, tokenizer = train_mod.load_encoder(config.model, dropout=config.dropout)
    method = MixCSE(encoder, config, torch.Generator(), torch.Generator())
    views = {}
    real = MixCSE.two_views

    def keep(self, *args):
        views["z"] = real(self, *args)
        return views["z"]

    monkeypatch.setattr(MixCSE, "two_views", keep)
    batch = tokenizer(EVAL_BATCH + ["a cat sleeps on the sofa"], padding=True, return_tensors="pt")
    loss = method.loss(batch["input_ids"], batch["attention_mask"]).loss.item()
    z1, z2 = (v.detach().double().numpy() for v in views["z"])
    n, lam = len(z1), config.mix.lam
    m2 = [np_paper_mix(z2, lam, i) for i in range(n)]  # mixes of the positives h'
    m1 = [np_paper_mix(z1, lam, i) for i in range(n)]  # mixes of the anchors h
    second_mixes = [[m] for m in m1] if directions == "both" else [[] for _ in m1]  # h'_i's: none when single
    if anchors == "symmetric":
        first = np_mix_row_loss(z1, z2, [[m] for m in m2], 0.05)
        second = np_mix_row_loss(z2, z1, second_mixes, 0.05)
        expected = (first + second) / 2 if anchor_losses == "mean" else first + second
    else:  # row i of h: its own mix and h'_i's, the latter compared with h'_i (its logit c(h'_i, m1_i)/tau)
        def cos(a, b):
            return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

        expected = 0.0
        for i in range(n):
            terms = np.array([cos(z1[i], p) / 0.05 for p in z2] + [cos(z1[i], m2[i]) / 0.05]
                             + [cos(z2[i], m) / 0.05 for m in second_mixes[i]])
            expected += (np.log(np.exp(terms - terms.max()).sum()) + terms.max() - terms[i]) / n
    assert loss == pytest.approx(expected, rel=1e-5)


# ---- the measured traceable distance --------------------------------------------------------------------
def brute_force_ema_age(etas: list[float]) -> float:
    """Mean age of the online weights inside the target after len(etas) updates, from the weights
    themselves: w_s = (1 - eta_s) * prod_{u > s} eta_u for the online state of step s, w_0 = prod eta."""
    t = len(etas)
    total = 0.0
    for s in range(0, t + 1):
        weight = (1.0 if s == 0 else 1.0 - etas[s - 1]) * math.prod(etas[s:])
        total += weight * (t - s)
    return total


def test_ema_age_recursion_matches_the_brute_force_sum():
    rng = np.random.default_rng(0)
    etas = list(rng.uniform(0.5, 0.99, size=40))
    meter = TraceableDistanceMeter()
    for t, eta in enumerate(etas, start=1):
        meter.ema_updated(eta)
        assert meter.ema_age == pytest.approx(brute_force_ema_age(etas[:t]), rel=1e-12)


@pytest.mark.parametrize("eta,size,batch", [(0.85, 64, 8), (0.5, 32, 4), (0.9, 48, 16)])
def test_measured_distance_of_a_constant_eta_run_tends_to_the_formula(eta, size, batch):
    queue, meter = NegativeQueue(size, 2, initial_size=8), TraceableDistanceMeter()
    for step in range(1, 10001):
        meter.observe(step, queue.ages(step), queue_full=queue.real_count >= size)
        meter.ema_updated(eta)
        queue.push(torch.zeros(batch, 2), step)
    summary = meter.summary()
    assert summary["queue_age_max"] == size / batch
    # the average includes the first steps' shorter EMA age, which fades as the run gets longer
    assert summary["measured"] == pytest.approx(1 / (1 - eta) + size / batch, rel=1e-3)
    assert summary["ema_age"] == pytest.approx(1 / (1 - eta), rel=1e-3)
    assert meter.current()["ema_age"] == pytest.approx(1 / (1 - eta), rel=1e-4)


def test_final_tasks_may_include_transfer_tasks(make_config):
    """eval.final_tasks mixes STS and transfer names; the summary carries `transfer` and its mode."""
    summary = train_mod.train(make_config("simcse", max_steps=2, **{
        "eval.eval_steps": 2, "eval.final_tasks": ["STSBenchmark", "TREC"], "eval.transfer_mode": "fasttest"}))
    assert summary.status == "ok" and set(summary.test) == {"STSBenchmark"}
    assert set(summary.transfer) == {"TREC", "avg"} and summary.transfer_mode == "fasttest"
    assert 0 < summary.transfer["TREC"] <= 100 and summary.transfer["avg"] == summary.transfer["TREC"]
    with pytest.raises(UserError, match="unknown task 'STS17'"):
        train_mod.train(make_config("simcse", **{"eval.final_tasks": ["STS17"]}))


# ---- MoCoSE's paper reading: eq. 3's negatives, both views augmented (Algorithm 1) -------------------------
def np_eq3(q, k, queue, tau):
    """MoCoSE eq. 3 written out in float64: -log exp(c(q_i, k_i)/tau) / (exp(c(q_i, k_i)/tau) + sum over the
    queue of exp(c(q_i, l)/tau)), c the cosine; the mean over the batch."""
    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)
    q, k = unit(q.astype(np.float64)), unit(k.astype(np.float64))
    positive = np.sum(q * k, axis=1) / tau
    if len(queue):
        negatives = q @ unit(queue.astype(np.float64)).T / tau
        terms = np.concatenate([positive[:, None], negatives], axis=1)
    else:
        terms = positive[:, None]
    top = terms.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(terms - top).sum(axis=1)) + top[:, 0] - positive))


@pytest.mark.parametrize("in_batch", [False, True])
def test_mocose_steps_follow_eq_3_and_an_empty_queue_starts_at_exactly_zero(make_config, monkeypatch, in_batch):
    """Table 7's "w.o. init." (queue.initial_size 0) is a valid run: under eq. 3 its first step sees an empty
    queue and its loss is exactly 0; every step's loss is eq. 3 on the step's own q, k and queue. With
    released.in_batch_negatives the first step's loss is the in-batch InfoNCE, about log N."""
    seen = []

    def replacement_for(real):
        def spy(q, k, queue_keys, *args, **kwargs):
            loss = real(q, k, queue_keys, *args, **kwargs)
            seen.append((q.detach().numpy().copy(), k.detach().numpy().copy(),
                         queue_keys.detach().numpy().copy(), loss.item()))
            return loss
        return spy

    patch_everywhere(monkeypatch, "mocose_loss", replacement_for)
    summary = train_mod.train(make_config(max_steps=3, **{"queue.initial_size": 0, "eval.eval_steps": 3,
                                                          "released.in_batch_negatives": in_batch}))
    assert summary.status == "ok" and summary.reason is None and len(seen) == 3
    q, k, queue, loss = seen[0]
    assert queue.shape[0] == 0
    if in_batch:
        assert loss == pytest.approx(math.log(B), rel=0.5)
        return
    assert loss == 0.0
    assert [len(queue) for _, _, queue, _ in seen] == [0, B, 2 * B]
    for q, k, queue, loss in seen:
        assert loss == pytest.approx(np_eq3(q, k, queue, 0.05), rel=1e-5, abs=1e-7)
    assert summary.history[0]["loss"] == pytest.approx(np.mean([loss for *_, loss in seen]), rel=1e-5)


def test_mocose_paper_reading_augments_both_views_each_its_own_draw(make_config, monkeypatch):
    """Algorithm 1 line 3 (v_o, v_t <- E_a(B), E_a(B)): the token shuffle reaches the target encoder too, with a
    permutation of its own; `augment.branches: online` leaves the target view unshuffled."""
    import trainer.methods.base as base

    positions = []  # (target?, position ids) of every encoder forward
    real_cls = base.Method.cls

    def cls(self, encoder, ids, mask, position_ids=None):
        positions.append((encoder is not self.encoder, None if position_ids is None else position_ids.clone()))
        return real_cls(self, encoder, ids, mask, position_ids)

    monkeypatch.setattr(base.Method, "cls", cls)
    train_mod.train(make_config(max_steps=2, **{"augment.token_shuffle": True}))
    online = [p for target, p in positions if not target]
    target = [p for target, p in positions if target]
    assert len(online) == len(target) == 2 and all(p is not None for p in online + target)
    assert any(not torch.equal(a, b) for a, b in zip(online, target))  # each view its own permutation
    positions.clear()
    train_mod.train(make_config(max_steps=2, **{"augment.token_shuffle": True, "augment.branches": "online"}))
    assert [p is None for target, p in positions if target] == [True, True]


@pytest.mark.parametrize("method, released", [("mocose", False), ("mocose", True), ("simcse", True)])
def test_token_shuffle_is_per_sentence_or_the_releases_one_permutation_for_the_batch(make_config, monkeypatch,
                                                                                      method, released):
    """MoCoSE's paper reading: every encoder forward gets each sentence's own permutation of its real tokens, [CLS]
    at 0 and pads in place. `released.token_shuffle` (MoCoSE's release): one permutation of every position for
    the whole batch, [CLS] and pads included, each view its own draw. SimCSE's shuffle is per sentence whatever
    the flag (the flag is MoCoSE's)."""
    import trainer.methods.base as base

    seen = []  # (position ids, mask) of every training forward
    real_cls = base.Method.cls

    def cls(self, encoder, ids, mask, position_ids=None):
        seen.append((position_ids.clone(), mask.clone()))
        return real_cls(self, encoder, ids, mask, position_ids)

    monkeypatch.setattr(base.Method, "cls", cls)
    train_mod.train(make_config(method, max_steps=2, **{"augment.token_shuffle": True,
                                                        "released.token_shuffle": released}))
    whole_batch = released and method == "mocose"
    assert len(seen) == (4 if method == "mocose" else 2)  # MoCoSE: the online and the target view of each step
    for positions, mask in seen:
        length = positions.shape[1]
        for row, real in zip(positions.tolist(), mask.sum(dim=1).tolist()):
            assert sorted(row) == list(range(length))
            if not whole_batch:
                assert row[0] == 0 and sorted(row[:real]) == list(range(real))
                assert row[real:] == list(range(real, length))
        assert torch.equal(positions, positions[:1].expand_as(positions)) is whole_batch
    if whole_batch:
        assert any(int(positions[0, 0]) != 0 for positions, _ in seen)  # [CLS] moved in some forward
        assert not torch.equal(seen[0][0], seen[1][0])  # the online and the target view: two draws
