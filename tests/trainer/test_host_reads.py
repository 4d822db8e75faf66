"""The inner loop is sync-free between evaluations under the GPU's host-read policy, proven on the CPU
every read of a tensor's value back to the host is counted per training step, for every
method and FGSM mode, and must be zero except the NaN/inf check on the policy's check steps.

What is counted (HostReadCounter), each a device sync on a GPU:
- Python-level reads, seen by a TorchFunctionMode: Tensor.item, tolist, numpy, cpu, __bool__, __float__,
  __int__, __index__, and nonzero (its output size depends on the data);
- reads inside torch's own code that no Python call names, seen by a TorchDispatchMode at the aten level:
  _local_scalar_dense (what item/bool/float lower to), nonzero, masked_select, unique, and indexing with a
  boolean mask (x[mask]: the output's size is the mask's count), the ops whose output size depends on data.
A read seen by both modes counts once. Not counted: `.to("cpu")`, which on a CPU-only machine cannot be
told from the loop's host-to-device copies (the loop reads values with the calls above instead).

Two reads are host-side by design and excluded, by where they come from:
- torch.optim's step counters: torch keeps `state["step"]` on the CPU unless the optimiser is capturable
  or fused, and reads it there (`_get_value`); no device is involved, on a GPU either;
- the epoch's shuffle (`torch.randperm(..., generator=<CPU generator>).tolist()`): a CPU tensor on any
  device; the test counts from step 2, inside the first epoch, so no shuffle falls in the window.
"""

from __future__ import annotations

import dataclasses
import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import trainer.train as train_mod
from tests.helpers import first_fast
from trainer.config import RunConfig
from trainer.corpus import TokenizedCorpus

pytestmark = pytest.mark.usefixtures("one_torch_thread")
aten = torch.ops.aten
READ_FUNCTIONS = {torch.Tensor.item: "item", torch.Tensor.tolist: "tolist", torch.Tensor.numpy: "numpy",
                  torch.Tensor.cpu: "cpu", torch.Tensor.__bool__: "__bool__", torch.Tensor.__float__: "__float__",
                  torch.Tensor.__int__: "__int__", torch.Tensor.__index__: "__index__",
                  torch.Tensor.nonzero: "nonzero", torch.nonzero: "nonzero"}
READ_OPS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
            aten._unique2.default, aten.unique_consecutive.default, aten.unique_dim.default}
HOST_SIDE_BY_DESIGN = ("torch/optim/",)  # see the module docstring
STEPS, EVAL_STEPS = 8, 8
# the GPU's policy (DEFERRED), with a period that falls twice inside this short run
GPU_POLICY = dataclasses.replace(train_mod.host_read_policy(torch.device("cuda")), check_every=3)


def _boolean_index(func, args) -> bool:
    """x[mask] with a boolean mask: its output size is the mask's count (a nonzero inside the kernel)."""
    return func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) and any(
        isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ()))


class HostReadCounter:
    """Counts host reads per training step; `step` is advanced by the loop's per-step batch fetch."""

    def __init__(self):
        self.step = 0
        self.reads: dict[int, list[tuple[str, str]]] = {}
        self._inside = 0
        counter = self

        class Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = READ_FUNCTIONS.get(func)
                if name is None:
                    return func(*args, **(kwargs or {}))
                counter._record(name)
                counter._inside += 1
                try:
                    return func(*args, **(kwargs or {}))
                finally:
                    counter._inside -= 1

        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if not counter._inside and (func in READ_OPS or _boolean_index(func, args)):
                    counter._record(str(func))
                return func(*args, **(kwargs or {}))

        self.modes = (Functions(), Ops())

    def _record(self, name: str) -> None:
        frames = [f for f in traceback.extract_stack()[:-2] if "/tests/trainer/test_host_reads.py" not in f.filename]
        if any(part in frames[-1].filename for part in HOST_SIDE_BY_DESIGN):
            return
        where = f"{frames[-1].filename.rsplit('/', 2)[-1]}:{frames[-1].lineno}"
        self.reads.setdefault(self.step, []).append((name, where))


@pytest.fixture
def counted_run(tiny_model_dir, shared_data_dir, tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "host-reads-corpus-cache"
    counter = HostReadCounter()
    batch = TokenizedCorpus.batch

    def counting_batch(self, indices, pad_id):  # the loop fetches one batch per step, first thing
        counter.step += 1
        return batch(self, indices, pad_id)

    monkeypatch.setattr(TokenizedCorpus, "batch", counting_batch)
    # no final evaluation: the run's plan (trainer.run_plan) and its set-up read the final tasks from here
    monkeypatch.setattr("trainer.evaluation.sts.split_tasks", lambda tasks: ([], []))
    monkeypatch.setattr(train_mod, "split_tasks", lambda tasks: ([], []))
    # STS-B dev scoring is a constant: evaluation steps are not checked, and this keeps each run ~1 s
    monkeypatch.setattr(train_mod.DevEvaluator, "__call__", lambda self, encode: (0.5, 0.1))

    def run(method: str, fgsm: str, precision: str = "fp32"):
        config = RunConfig.from_dict({
            "model": str(tiny_model_dir), "method": method, "precision": precision, "device": "cpu",
            "batch_size": 4, "max_steps": STEPS, "seed": 3,
            "data": {"data_dir": str(shared_data_dir), "cache_dir": str(cache), "max_sentences": 64},
            "eval": {"eval_steps": EVAL_STEPS}, "queue": {"size": 16, "initial_size": 4},
            "fgsm": {"eps": 0.0} if fgsm == "none" else {"eps": 5e-3, "mode": fgsm},
        })
        for mode in counter.modes:
            mode.__enter__()
        try:
            summary = train_mod.train(config, host_reads=GPU_POLICY)
        finally:
            for mode in reversed(counter.modes):
                mode.__exit__(None, None, None)
        assert summary.status == "ok" and summary.steps == STEPS
        assert summary.test is None  # the stand-ins above hold: no final evaluation ran
        return counter

    return run


def expected_reads(step: int) -> list[str]:
    if step % EVAL_STEPS == 0:
        return None  # an evaluation step: reads the loss and logs, not checked here
    return ["__bool__"] if step % GPU_POLICY.check_every == 0 else []  # the NaN/inf check


@pytest.mark.parametrize("method, fgsm", first_fast(*[  # MoCoSE with the lagged FGSM first: the most code
    (method, fgsm) for method in ("mocose", "simcse", "gs", "mix") for fgsm in ("lagged", "none", "exact")]))
def test_no_host_reads_between_checks_under_the_gpu_policy(counted_run, method, fgsm):
    counter = counted_run(method, fgsm)
    assert counter.step == STEPS
    for step in range(2, STEPS + 1):  # step 1 shuffles the epoch on the CPU generator (module docstring)
        expected = expected_reads(step)
        if expected is not None:
            assert [name for name, _ in counter.reads.get(step, [])] == expected, (step, counter.reads.get(step))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_precision_adds_only_the_grad_scalers_read(counted_run, precision):
    # bf16: no scaler, no extra read. fp16: torch.amp.GradScaler.step reads found_inf to the host every step
    # (it must know whether to skip optimizer.step); that read is torch's and is the only extra one.
    counter = counted_run("simcse", "lagged", precision)
    scaler_read = [("item", "grad_scaler.py")] if precision == "fp16" else []
    for step in range(2, STEPS + 1):
        expected = expected_reads(step)
        if expected is not None:
            got = [(name, where.split(":")[0]) for name, where in counter.reads.get(step, [])]
            assert got == scaler_read + [(name, "train.py") for name in expected], (step, got)


def test_counter_sees_each_kind_of_read():
    counter = HostReadCounter()
    x = torch.arange(4.0)
    for mode in counter.modes:
        mode.__enter__()
    try:
        x[0].item(), x.tolist(), bool(x[1]), float(x[2]), int(x[3]), x.nonzero(), x.numpy(), x.cpu()
        x[x > 1]  # a boolean-mask index: nonzero inside torch, no Python-level call
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))])
        opt.param_groups[0]["params"][0].grad = torch.ones(2)
        opt.step()  # its CPU step counter is read host-side: not counted
    finally:
        for mode in reversed(counter.modes):
            mode.__exit__(None, None, None)
    names = [name for name, _ in counter.reads[0]]
    assert names == ["item", "tolist", "__bool__", "__float__", "__int__", "nonzero", "numpy", "cpu",
                     "aten.index.Tensor"], names
