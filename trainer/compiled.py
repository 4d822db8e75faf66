"""The compiled training step (`compile: auto | on | off`): each encoder's transformer layers through torch.compile.

What is compiled: the stack of transformer layers (`encoder.encoder`, BERT's and RoBERTa's `BertEncoder`) of
every encoder the step runs (`Method.step_encoders()`: the online encoder, and MoCoSE's target encoder), forward
and backward (AOTAutograd), with CUDA graphs on a GPU (mode "reduce-overhead"). The layers are where nearly all of
a step's kernels are launched. What stays eager, and why:

- the embedding layer: FGSM and the cutoffs act on its output through forward hooks that capture that output and
  its gradient, and the token shuffle passes its own position ids there;
- the pooler, the heads and the loss: a few kernels, and MoCoSE's queue read changes length while the queue fills;
- the optimiser (fused on CUDA, trainer.optim) and MoCoSE's EMA update (one multi-tensor lerp, trainer.methods.ema).

Identical to eager, by construction:

- random numbers: inductor draws dropout's masks with torch's own generator (`fallback_random`), so a compiled
  step consumes the same random stream as the eager one and gets the same masks;
- shapes: the sentence length stays dynamic (one graph for every batch width). Padding every batch to
  `data.max_length` would also give one graph, but it changes the shape of every dropout draw and so the masks:
  a padded run is a different random stream, not the eager run.

Compiling happens at set-up, not in the first step: `warm_up` runs one forward and backward of the method's loss
on a real batch with every random generator saved and restored and the gradients zeroed, so the first training
step starts from exactly the state an eager run starts from, and the compile time is measured apart (the
summary's `compile.seconds`; the bench records it as set-up). Evaluation runs eager (`eager()`): its batches are
sorted by length and run without gradients, a second set of graphs for no gain.

`auto` (`CompileRule`, torch-free: the dry run and the cost estimate apply the same rule) compiles on CUDA a run
of at least AUTO_MIN_STEPS optimiser steps, and runs eager on the CPU (where the embedded MiniLM's compiled step
measured no faster than eager, after a compile of over a minute: bench/RESULTS.md) and for shorter runs.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

# `auto` compiles a CUDA run of at least this many optimiser steps. Compiling bert-base's step takes on the order
# of a minute; a run must be long enough for the step's saving to pay that back. This is the rule's assumption
# until a GPU bench measures the break-even (compile seconds / the seconds a compiled step saves); the bench
# record's compiled rows give both figures.
AUTO_MIN_STEPS = 2000
MODES = {"cuda": "reduce-overhead", "cpu": "default"}  # torch.compile's mode per device type (inductor's)
# The compiler behind dynamo. "aot_eager" (the tests' stand-in) runs the same captured forward and backward graphs
# op by op, without generating kernels: dynamo's capture and AOTAutograd are checked in seconds, not minutes.
BACKEND = "inductor"


@dataclass(frozen=True)
class CompileRule:
    """Whether a run compiles its step, and why, from what it asked (`compile`), its device type and its length."""

    asked: str  # auto | on | off

    def decide(self, device_type: str, total_steps: int | None) -> tuple[bool, str]:
        if self.asked == "off":
            return False, "compile: off"
        if self.asked == "on":
            return True, "compile: on"
        if device_type != "cuda":
            return False, "auto: eager on the CPU, where a compiled step measured no faster (bench/RESULTS.md)"
        if total_steps is not None and total_steps < AUTO_MIN_STEPS:
            return False, f"auto: {total_steps} steps, fewer than the {AUTO_MIN_STEPS} that earn back the compile"
        return True, f"auto: a CUDA run of at least {AUTO_MIN_STEPS} steps"


def layer_stack(encoder: Any) -> Any:
    """The transformer layers of a Hugging Face encoder (`encoder.encoder`); a clear error for one without them."""
    from trainer.errors import UserError

    stack = getattr(encoder, "encoder", None)
    if stack is None or not hasattr(stack, "layer"):
        raise UserError(f"compile: on needs an encoder with a stack of transformer layers (BERT, RoBERTa); "
                        f"{type(encoder).__name__} has none: set compile: off")
    return stack


def compile_layers(encoders: list[Any], device_type: str) -> None:
    """Compile the layer stack of each encoder in place (`nn.Module.compile`: the state dict keeps its names)."""
    import torch._inductor.config as inductor_config

    inductor_config.fallback_random = True  # dropout's masks from torch's generator, as eager draws them
    options = {"mode": MODES.get(device_type, "default")} if BACKEND == "inductor" else {}
    for encoder in encoders:
        layer_stack(encoder).compile(backend=BACKEND, dynamic=True, **options)


def uncompile_layers(encoders: list[Any]) -> None:
    """Back to eager: the modules `compile_layers` compiled call their own forward again."""
    for encoder in encoders:
        layer_stack(encoder)._compiled_call_impl = None


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (a recompile adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def warm_up(step_loss: Callable[[], Any], generators: list[Any], params: list[Any]) -> float:
    """Compile by running `step_loss()` (the method's loss on a real batch) forward and backward, leaving the run's
    state as it was: every generator (torch's global ones included) restored, the gradients set to None.
    One eager forward comes first: the hooks that act once, on the first forward (trainer.models.ComputePrecision),
    run and remove themselves there, outside the graph. Returns the seconds it took."""
    import torch

    started = time.perf_counter()
    states = [g.get_state() for g in generators]
    devices = sorted({p.device.index for p in params if p.is_cuda})
    with torch.random.fork_rng(devices=devices):
        with eager(), torch.no_grad():
            step_loss()
        out = step_loss()
        out.loss.backward()
    for generator, state in zip(generators, states):
        generator.set_state(state)
    for param in params:
        param.grad = None
    if devices:
        torch.cuda.synchronize()
    return time.perf_counter() - started


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Compiled modules run their eager forward inside this block (evaluation)."""
    import torch

    with torch.compiler.set_stance("force_eager"):
        yield


def compile_step(asked: str, decision: tuple[bool, str], encoders: list[Any], device_type: str,
                 step_loss: Callable[[], Any], generators: list[Any], params: list[Any]) -> dict[str, Any]:
    """Compile the layers of `encoders` when `decision` (CompileRule's) says so, by `warm_up(step_loss, ...)`; the
    summary's `compile` block (asked, used, reason, seconds, graphs; `graphs_before` until the run ends, for
    `graphs_since`). A compile that fails under `auto` leaves the run eager and says why; under `on` it is the
    run's UserError."""
    import torch

    from trainer.errors import UserError

    use, reason = decision
    block: dict[str, Any] = {"asked": asked, "used": False, "reason": reason, "seconds": None, "graphs": None}
    if not use:
        return block
    torch.compiler.reset()  # a worker's earlier trial compiled other modules: their graphs would count against ours
    graphs_before = compiled_graphs()
    try:
        compile_layers(encoders, device_type)
        seconds = warm_up(step_loss, generators, params)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - dynamo and inductor raise many types; each ends in one line here
        uncompile_layers(encoders)
        torch.compiler.reset()
        text = str(exc).strip()
        line = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]
        if asked == "on":
            raise UserError(f"compile: on failed ({line}): set compile: off") from exc
        block["reason"] = f"auto: compiling failed ({line}); ran eager"
        return block
    block.update(used=True, seconds=round(seconds, 3), graphs_before=graphs_before)
    return block


def graphs_since(block: dict[str, Any]) -> None:
    """At the run's end: the graphs compiled since `compile_step` (recompiles included) into the block."""
    if block.get("used"):
        block["graphs"] = compiled_graphs() - block.pop("graphs_before")
