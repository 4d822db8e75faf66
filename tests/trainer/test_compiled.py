"""The compiled step (`compile: auto | on | off`, trainer.compiled): the rule `auto` follows, and a compiled run
against an eager one from the same state, through `train()` with inductor's CPU backend.

Compiled against eager: every method x variant x precision, 20 steps on the tiny random BERT, the mean loss of
every 5 steps compared. fp32 within 1e-5 relative; bf16 and fp16 within the bound the precision tests allow
between a half-precision run and fp32 (tests/trainer/test_precision.py FIRST_LOSS_TOL): a compiled kernel rounds
in a different order, and no closer bound is meaningful in 8 or 11 mantissa bits. Each compiled run also says
in its summary that it compiled, and how many graphs: one per call pattern of its encoders (the online encoder
with gradients; MoCoSE's target without, or with them under `released.target_gradients`), however many batch
widths its 20 steps saw. The whole matrix runs through dynamo's capture and AOTAutograd with the aot_eager
backend (the same graphs, run op by op) on a one-layer version of the tiny BERT: capture time grows with the
layers, and one layer exercises the same compiled call; inductor, which builds C++ kernels for tens of seconds per
graph here, compiles the two-layer tiny BERT for each method once in fp32 and SimCSE in bf16 and fp16, and the
six-layer embedded MiniLM. All in the slow tier.
"""

from __future__ import annotations

import pytest
import torch

import trainer.train as train_mod
from tests.helpers import write_tiny_bert
from trainer import compiled
from trainer.compiled import AUTO_MIN_STEPS, CompileRule, layer_stack
from trainer.config import RunConfig
from trainer.corpus import TokenizedCorpus
from trainer.errors import UserError
from trainer.run_plan import RunPlan

pytestmark = pytest.mark.usefixtures("one_torch_thread")
METHODS = ["simcse", "gs", "mix", "mocose"]
STEPS, WINDOW = 20, 5
FP32_TOL = 1e-5
HALF_TOL = {"bf16": 0.03, "fp16": 0.01}  # test_precision.py's FIRST_LOSS_TOL: half precision against fp32
# the tiny BERT's hidden size is 32: a batch width of 32 would share its symbol in dynamo's shapes and
# specialise the first graph; widths up to 24 keep the sentence length a shape of its own
MAX_LENGTH = 24


@pytest.mark.parametrize("asked, device, steps, compiles", [
    ("off", "cuda", 10**6, False), ("on", "cpu", 3, True),
    ("auto", "cpu", 10**6, False), ("auto", "cuda", AUTO_MIN_STEPS - 1, False), ("auto", "cuda", AUTO_MIN_STEPS, True),
])
def test_the_rule_auto_follows(asked, device, steps, compiles):
    used, reason = CompileRule(asked).decide(device, steps)
    assert used is compiles and reason
    if asked == "auto" and device == "cuda" and not compiles:
        assert f"{steps} steps, fewer than the {AUTO_MIN_STEPS}" in reason


def test_the_run_plan_reads_compile_from_the_config():
    config = RunConfig.from_dict({"method": "simcse", "max_steps": 5000, "batch_size": 8, "compile": "auto"}).resolved()
    assert RunPlan.of(config).compiles_on("cuda")[0] and not RunPlan.of(config).compiles_on("cpu")[0]
    off = RunConfig.from_dict({"method": "simcse", "max_steps": 5000, "batch_size": 8, "compile": "off"}).resolved()
    assert RunPlan.of(off).compiles_on("cuda") == (False, "compile: off")


def test_an_encoder_without_a_layer_stack_is_refused_with_the_fix():
    with pytest.raises(UserError, match="has none: set compile: off"):
        layer_stack(torch.nn.Linear(2, 2))


@pytest.fixture(scope="module")
def one_layer_model_dir(tmp_path_factory, embedded_model_dir):
    """The tiny BERT with one layer: the aot_eager matrix's model."""
    return write_tiny_bert(tmp_path_factory.mktemp("one-layer-bert"), embedded_model_dir, layers=1)


@pytest.fixture
def run(tiny_model_dir, shared_data_dir, tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "compiled-corpus-cache"
    monkeypatch.setattr(train_mod.DevEvaluator, "__call__", lambda self, encode: (0.5, 0.1))
    # no final evaluation: the run's plan and its set-up read the final tasks from here
    monkeypatch.setattr("trainer.evaluation.sts.split_tasks", lambda tasks: ([], []))
    monkeypatch.setattr(train_mod, "split_tasks", lambda tasks: ([], []))
    widths = set()
    batch = TokenizedCorpus.batch

    def counting_batch(self, indices, pad_id):
        ids, mask = batch(self, indices, pad_id)
        widths.add(ids.shape[1])
        return ids, mask

    monkeypatch.setattr(TokenizedCorpus, "batch", counting_batch)

    def run(method: str, variant: str, precision: str, compile: str, model=None):
        overrides = {}
        if method == "mocose" and variant == "released":  # the test-selected state: scoring, not the step
            overrides["released"] = {"test_selected": False}
        if method == "mocose" and precision != "fp32":  # MoCoSE's eps 5e-9 is refused in half precision
            overrides["fgsm"] = {"eps": 5e-3}  # above both half floors, as tests/trainer/test_precision.py
        config = RunConfig.from_dict({
            "model": str(model or tiny_model_dir), "method": method, "variant": variant, "precision": precision,
            "device": "cpu", "batch_size": 4, "max_steps": STEPS, "seed": 3, "compile": compile,
            "data": {"data_dir": str(shared_data_dir), "cache_dir": str(cache), "max_sentences": 200,
                     "max_length": MAX_LENGTH},
            "eval": {"eval_steps": WINDOW}, "queue": {"size": 16, "initial_size": 4}, **overrides,
        })
        losses: list[float] = []
        widths.clear()
        summary = train_mod.train(config, report=lambda metrics: losses.append(metrics["loss"]))
        assert summary.status == "ok" and summary.test is None
        return summary, losses, set(widths)

    return run


def test_a_short_cpu_run_under_auto_runs_eager_and_says_why(run):
    summary, _, _ = run("simcse", "paper", "fp32", "auto")
    assert summary.compile == {"asked": "auto", "used": False, "seconds": None, "graphs": None,
                                  "reason": CompileRule("auto").decide("cpu", STEPS)[1]}


def assert_same_losses(eager: list[float], compiled: list[float], precision: str) -> None:
    assert len(eager) == len(compiled) == STEPS // WINDOW
    tol = FP32_TOL if precision == "fp32" else HALF_TOL[precision]
    worst = max(abs(e - c) / abs(e) for e, c in zip(eager, compiled))
    assert worst <= tol, f"compiled against eager: {worst:.2e} relative, above {tol:.0e} ({eager} vs {compiled})"


MATRIX = [(m, v, p) for m in METHODS for v in ("paper", "released") for p in ("fp32", "bf16", "fp16")]
# inductor's kernels take tens of seconds to build per graph on 2 cores: each method once, and the half precisions
INDUCTOR = [(m, "paper", "fp32") for m in METHODS] + [("simcse", "paper", "bf16"), ("simcse", "paper", "fp16")]


def check_compiled_run(run, method, variant, precision, model=None):
    eager_summary, eager, eager_widths = run(method, variant, precision, "off", model=model)
    summary, compiled, widths = run(method, variant, precision, "on", model=model)
    assert_same_losses(eager, compiled, precision)
    assert summary.precision == eager_summary.precision == precision
    block = summary.compile
    assert block["used"] is True and block["seconds"] > 0
    # one graph per call pattern of the encoders (MoCoSE: online and target), not one per batch width
    assert widths == eager_widths and len(widths) >= 2  # a graph of one width would have recompiled
    assert block["graphs"] == (2 if method == "mocose" else 1), block


@pytest.mark.slow
@pytest.mark.no_cover  # coverage's tracer slows dynamo's Python-level tracing several times over (CI's 1,919 s)
@pytest.mark.parametrize("method, variant, precision", MATRIX)
def test_a_compiled_run_equals_the_eager_run(run, method, variant, precision, one_layer_model_dir, monkeypatch):
    """Every method x variant x precision through dynamo's capture and AOTAutograd (the aot_eager backend)."""
    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")
    check_compiled_run(run, method, variant, precision, model=one_layer_model_dir)


@pytest.mark.slow
@pytest.mark.no_cover
@pytest.mark.parametrize("method, variant, precision", INDUCTOR)
def test_a_run_compiled_by_inductor_equals_the_eager_run(run, method, variant, precision):
    check_compiled_run(run, method, variant, precision)


@pytest.mark.slow
@pytest.mark.no_cover
def test_the_embedded_model_compiled_equals_eager(run, embedded_model_dir):
    _, eager, _ = run("simcse", "paper", "fp32", "off", model=embedded_model_dir)
    summary, compiled_losses, _ = run("simcse", "paper", "fp32", "on", model=embedded_model_dir)
    assert_same_losses(eager, compiled_losses, "fp32")
    assert summary.compile["graphs"] == 1


@pytest.mark.parametrize("written, value", [("off", "off"), ("on", "on"), ("'off'", "off"), ("auto", "auto")])
def test_compile_on_and_off_as_yaml_writes_them(tmp_path, written, value):
    """YAML 1.1 reads a bare on/off as a boolean; `compile: off`, as the docs and the refusal advise, means off."""
    from sweep.spec import load_study
    from sweep.spec.expand import expand

    path = tmp_path / "study.yaml"
    path.write_text(f"name: c\nbase: {{model: embedded, max_steps: 2, compile: {written}}}\n")
    (trial,) = expand(load_study(path))
    assert RunConfig.from_dict(trial.config).compile == value
    assert RunConfig.from_dict({"compile": written == "on"}).compile == ("on" if written == "on" else "off")
