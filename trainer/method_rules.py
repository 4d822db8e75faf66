"""Each method's config rules: the defaults it fills into the keys left null, the combinations it refuses,
and the precision it runs under `precision: auto`. The method objects (trainer.methods) inherit them.

    rules = method_rules("mocose")   # MoCoSERules: weight decay 1e-6, eval every 100 steps, FGSM eps 5e-9
    rules.fill_defaults(data)        # a config dict, changed in place
    rules.check(config)              # raises ConfigError naming the key

Kept apart from the nn.Module side and free of torch, so a sweep driver resolves thousands of configs
without importing torch (about 2 s of a study's start, before the first trial can run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from trainer.errors import ConfigError
from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, SIMCSE

if TYPE_CHECKING:  # types only: trainer.config imports this module to resolve defaults
    import torch

    from trainer.config import RunConfig


class MethodRules:
    """The rules every method shares; a method overrides the class values or extends the two hooks."""

    name: ClassVar[str]
    cuda_precision: ClassVar[str] = "fp32"  # the release's precision on CUDA (precision: auto)
    weight_decay: ClassVar[float] = 0.0
    eval_steps: ClassVar[int] = 125
    fgsm_eps: ClassVar[float] = 0.0

    @classmethod
    def fill_defaults(cls, data: dict[str, Any]) -> None:
        """Fill the keys left null with this method's defaults; `data` is a config dict, changed in place."""
        if data["optim"]["weight_decay"] is None:
            data["optim"]["weight_decay"] = cls.weight_decay
        if data["eval"]["eval_steps"] is None:
            data["eval"]["eval_steps"] = cls.eval_steps
        if data["fgsm"]["eps"] is None:
            data["fgsm"]["eps"] = cls.fgsm_eps
        if data["mix"]["enabled"] is None:
            data["mix"]["enabled"] = False
        if data["dropout"] is None:
            data["dropout"] = 0.1  # SimCSE's, standard HF dropout
        ema = data["ema"]  # only MoCoSE reads it; filled for every method so configs have one shape
        released = data["released"]["ema_schedule"]
        if ema["decay_end"] is None:
            ema["decay_end"] = 1.0 if released else 0.95
        if ema["schedule_steps"] is None and released:
            from trainer.schedules import RELEASED_SCHEDULE_STEPS

            ema["schedule_steps"] = RELEASED_SCHEDULE_STEPS
        if ema["hold_after_schedule"] is None:
            ema["hold_after_schedule"] = not released

    @classmethod
    def check(cls, config: RunConfig) -> None:
        """Refuse combinations this method cannot run (raise UserError naming the key)."""

    @classmethod
    def precision_on(cls, device: torch.device, requested: str) -> str:
        """The precision a run uses: the request on any device (the CPU runs bf16/fp16 autocast too); for
        auto, the release's on CUDA and fp32 elsewhere (CPU half precision is slower than fp32)."""
        if requested != "auto":
            return requested
        return cls.cuda_precision if device.type == "cuda" else "fp32"


class SimCSERules(MethodRules):
    """Unsupervised SimCSE. Released code: fp16 on CUDA (`run_unsup_example.sh`)."""

    name = SIMCSE
    cuda_precision = "fp16"


RELEASED_GAUSSIAN_COUNT = 192  # run.sh: random_size=192, whatever the model and batch size


def released_gs_dropout(model: str) -> float:
    """GS-InfoNCE run.sh's dropout, told apart by the model's name or path: 0.1 for roberta-base/large,
    0.2 for bert-base/large and, as for BERT, any other model (run.sh names only those four).

    >>> [released_gs_dropout(m) for m in ("bert-base-uncased", "FacebookAI/roberta-large", "embedded")]
    [0.2, 0.1, 0.2]
    """
    return 0.1 if "roberta" in model.lower() else 0.2


class GSInfoNCERules(SimCSERules):
    """GS-InfoNCE: M = 3N Gaussian negatives unless set. Released code (`gsInfoNCE/run.sh`): M = 192 for every
    model and batch size, dropout 0.2 for BERT and 0.1 for RoBERTa, lambda unused, fp16."""

    name = GS_INFONCE
    cuda_precision = "fp16"

    @classmethod
    def fill_defaults(cls, data: dict[str, Any]) -> None:
        gaussian, released = data["gaussian"], data["released"]
        if gaussian["count"] is None and gaussian["count_per_batch"] is None:
            if released["gaussian_count"]:
                gaussian["count"] = RELEASED_GAUSSIAN_COUNT
            else:
                gaussian["count_per_batch"] = 3.0  # the paper: M = 3 x batch size
        if data["dropout"] is None:
            data["dropout"] = released_gs_dropout(data["model"]) if released["dropout"] else 0.1
        super().fill_defaults(data)

    @classmethod
    def check(cls, config: RunConfig) -> None:
        if config.variant == "released" and config.gaussian.weight != 1.0:
            raise ConfigError("gaussian.weight", ": expected 1 under variant released (the released GS-InfoNCE "
                              f"code parses lambda but never uses it), got {config.gaussian.weight}")


class MixCSERules(SimCSERules):
    """MixCSE: mixed negatives on unless `mix.enabled: false` (an ablation back to SimCSE); fp32."""

    name = MIXCSE
    cuda_precision = "fp32"

    @classmethod
    def fill_defaults(cls, data: dict[str, Any]) -> None:
        if data["mix"]["enabled"] is None:
            data["mix"]["enabled"] = True
        super().fill_defaults(data)


class MoCoSERules(MethodRules):
    """MoCoSE: the release's weight decay, validation interval and Table 9's best FGSM step; fp32."""

    name = MOCOSE
    cuda_precision = "fp32"  # the release has no fp16 flag
    weight_decay = 1e-6
    eval_steps = 100  # "validate every 100 steps"
    fgsm_eps = 5e-9  # Table 9's best

    @classmethod
    def check(cls, config: RunConfig) -> None:
        heads = config.heads
        if heads.projection_layers == 0 and heads.embedding_dim is not None:
            raise ConfigError("heads.embedding_dim", ": a projection of 0 layers keeps the encoder's size; set "
                              "heads.projection_layers >= 1 or leave embedding_dim null")


RULES: dict[str, type[MethodRules]] = {cls.name: cls for cls in (SimCSERules, GSInfoNCERules, MixCSERules, MoCoSERules)}


def method_rules(name: str) -> type[MethodRules]:
    """The config rules for a method name (`simcse`, `gs`, `mix`, `mocose`)."""
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(RULES)}") from None
