"""The methods' rules as data: the types a rule is written in (a default that is a value, `ByFlag`, `FromKey` or
`PerModel`; a `Refusal`; a method's `MethodRules`), the papers' settings per model, and the four built-in methods'
rules. No look-up by name here: trainer.method_rules.registry holds the registered methods, and
trainer.method_rules.resolve applies their rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable, Mapping

from trainer.errors import ConfigError
from trainer.schedules import RELEASED_SCHEDULE_STEPS
from trainer.vocabulary import GS_INFONCE, MIXCSE, MOCOSE, SIMCSE


@dataclass(frozen=True)
class ByFlag:
    """The `released` default where the `released.*` flag `flag` is on, else the `paper` one. The flags are
    filled from `variant` before any default, so a flag set alone switches its own behaviour."""

    flag: str
    paper: Any
    released: Any


@dataclass(frozen=True)
class FromKey:
    """A default computed from the value of `key`, a key no rule fills: `compute(value)`."""

    key: str
    compute: Callable[[Any], Any]


# ---- per-model settings: the learning rate and batch size each paper gives for the models it names ----
BERT_BASE, BERT_LARGE, ROBERTA_BASE, ROBERTA_LARGE = "bert-base", "bert-large", "roberta-base", "roberta-large"
_FAMILY = re.compile(r"(?<![a-z0-9])(roberta|bert)-(base|large)(?![a-z0-9])")


def model_family(model: str) -> str | None:
    """Which of the papers' four models a model id or path names (its last path part: `bert-base-uncased`,
    `FacebookAI/roberta-large`, `./models/bert-large-cased`), else None (`embedded`, distilbert, a tiny test model).

    >>> [model_family(m) for m in ("bert-base-uncased", "FacebookAI/roberta-large", "distilbert-base-uncased",
    ...                            "embedded", "/models/bert-large-cased/")]
    ['bert-base', 'roberta-large', None, None, 'bert-large']
    """
    name = model.rstrip("/").rsplit("/", 1)[-1].lower()
    match = _FAMILY.search(name)
    return f"{match.group(1)}-{match.group(2)}" if match else None


@dataclass(frozen=True)
class ModelSettings:
    """The learning rate and batch size a paper trains one model with, and where it says so."""

    lr: float
    batch_size: int
    source: str


# SimCSE's Table A.1 (unsupervised): the baseline the three papers build on.
_SIMCSE_SETTINGS = {
    BERT_BASE: ModelSettings(3e-5, 64, "SimCSE Table A.1"),
    BERT_LARGE: ModelSettings(1e-5, 64, "SimCSE Table A.1"),
    ROBERTA_BASE: ModelSettings(1e-5, 512, "SimCSE Table A.1"),
    ROBERTA_LARGE: ModelSettings(3e-5, 512, "SimCSE Table A.1"),
}
# Table 1: batch 64 for all four models; the learning rate "consistent with the original method" (SimCSE's)
_GS_INFONCE_SETTINGS = {family: ModelSettings(s.lr, 64, "GS-InfoNCE Table 1 (batch 64); SimCSE Table A.1 (lr)")
                        for family, s in _SIMCSE_SETTINGS.items()}
# Implementation Details: "learning rates 3e-5 and 1e-5 ... batch size 64" for BERT-base and BERT-large
_MIXCSE_SETTINGS = {BERT_BASE: ModelSettings(3e-5, 64, "MixCSE, Implementation Details"),
                    BERT_LARGE: ModelSettings(1e-5, 64, "MixCSE, Implementation Details")}
# Section 4.1: lr 3e-5 (base) and 1e-5 (large), batch 64 (base) and 32 (large)
_MOCOSE_SETTINGS = {BERT_BASE: ModelSettings(3e-5, 64, "MoCoSE section 4.1"),
                    BERT_LARGE: ModelSettings(1e-5, 32, "MoCoSE section 4.1")}


@dataclass(frozen=True)
class Refusal:
    """A combination a method cannot run: where `when(resolved config)` holds, a ConfigError naming `key`
    with `detail`, in which {value} stands for the key's value."""

    key: str
    when: Callable[[Any], bool]
    detail: str


Keys = str | tuple[str, ...]


@dataclass(frozen=True)
class PerModel:
    """The default of `optim.lr` or `batch_size` (`field`: lr, batch_size): the run's method's setting for the
    run's model (`MethodRules.models`, `model_settings`)."""

    field: str


@dataclass(frozen=True)
class MethodRules:
    """One method's rules: its config name (filled by trainer.methods.registry when it registers the method), the
    precision under `precision: auto` on CUDA, its defaults (laid over SHARED_DEFAULTS), the learning rate and
    batch size per model its paper gives (`models`: model family -> ModelSettings, with bert-base's; SimCSE's
    Table A.1 unless declared) and its refusals."""

    name: str = ""
    cuda_precision: str = "fp32"  # precision: auto on CUDA; fp32 on any other device (CPU half precision is slower)
    defaults: Mapping[Keys, Any] = field(default_factory=dict)
    refusals: tuple[Refusal, ...] = ()
    models: Mapping[str, ModelSettings] = field(default_factory=lambda: dict(_SIMCSE_SETTINGS))
    # an EMA target and a queue of its keys: the maximum traceable distance (trainer.mtd) is defined for its runs
    traces_distance: bool = False
    # the released.* flag under which each evaluation also scores the seven STS test tasks, to report the
    # checkpoint with the best test average (the release's own selection), labelled; None: no such flag
    test_selected_flag: str | None = None

    def all_defaults(self) -> dict[Keys, Any]:
        return {**SHARED_DEFAULTS, **self.defaults}

    def precision_on(self, device_type: str, requested: str) -> str:
        """The precision a run uses on a device of this type ("cpu", "cuda", ...): the request on any device
        (the CPU runs bf16/fp16 autocast too); for auto, the release's on CUDA and fp32 elsewhere."""
        if requested != "auto":
            return requested
        return self.cuda_precision if device_type == "cuda" else "fp32"

    def tracks_test(self, config: Mapping[str, Any]) -> bool:
        """Whether each evaluation of a run of this (resolved or raw) config dict also scores the seven STS test
        tasks: selection on their average (`eval.selection: test_avg`), or the release's test-selected
        checkpoint where the method has one and its flag is on."""
        if (config.get("eval") or {}).get("selection") == "test_avg":
            return True
        if self.test_selected_flag is None:
            return False
        section, flag = self.test_selected_flag.split(".")
        return bool((config.get(section) or {}).get(flag))

    def check(self, config: Any) -> None:
        """Raise the ConfigError of the first refusal that holds for a resolved config (the shared ones first)."""
        for refusal in (*SHARED_REFUSALS, *self.refusals):
            if refusal.when(config):
                value = reduce(getattr, refusal.key.split("."), config)
                raise ConfigError(refusal.key, refusal.detail.format(value=value))


# ---- the declarations ----------------------------------------------------------------------------------
RELEASED_GAUSSIAN_COUNT = 192  # GS-InfoNCE run.sh: random_size=192, whatever the model and batch size


def released_gs_dropout(model: str) -> float:
    """GS-InfoNCE run.sh's dropout, told apart by the model's name or path: 0.1 for roberta-base/large,
    0.2 for bert-base/large and, as for BERT, any other model (run.sh names only those four).

    >>> [released_gs_dropout(m) for m in ("bert-base-uncased", "FacebookAI/roberta-large", "embedded")]
    [0.2, 0.1, 0.2]
    """
    return 0.1 if "roberta" in model.lower() else 0.2


SHARED_DEFAULTS: dict[Keys, Any] = {
    # the paper's learning rate and batch size for the model (MethodRules.models)
    "optim.lr": PerModel("lr"),
    "batch_size": PerModel("batch_size"),
    "optim.weight_decay": 0.0,
    "optim.algorithm": "adamw",  # with weight decay 0 (SimCSE, GS-InfoNCE, MixCSE) Adam and AdamW are one update
    # SimCSE Appendix A: STS-B dev "every 250 training steps"; GS-InfoNCE and MixCSE keep SimCSE's protocol. The
    # release scripts evaluate every 125
    "eval.eval_steps": ByFlag("released.dev_interval", paper=250, released=125),
    "fgsm.eps": 0.0,
    "fgsm.mode": ByFlag("released.fgsm_gradient", paper="exact", released="lagged"),
    "mix.enabled": False,
    "mix.anchors": ByFlag("released.mix_negatives", paper="symmetric", released="one_loss"),
    "dropout": 0.1,  # SimCSE's, standard HF dropout
    # the EMA schedule: only MoCoSE reads it; filled for every method so that resolved configs have one shape.
    # Paper: to eta1 = 0.95 over the run, then held; released: to 1.0 over 15000 steps, not clamped
    "ema.decay_end": ByFlag("released.ema_schedule", paper=0.95, released=1.0),
    "ema.schedule_steps": ByFlag("released.ema_schedule", paper=None, released=RELEASED_SCHEDULE_STEPS),
    "ema.hold_after_schedule": ByFlag("released.ema_schedule", paper=True, released=False),
}
SHARED_REFUSALS = (
    Refusal("optim.algorithm", lambda c: c.released.optimizer and c.optim.algorithm == "adam",
            ": expected adamw (or null) with released.optimizer, which is transformers' AdamW; got {value}"),
)

# Unsupervised SimCSE. Released code: fp16 on CUDA (`run_unsup_example.sh`).
SIMCSE_RULES = MethodRules(SIMCSE, cuda_precision="fp16")

# GS-InfoNCE: M = 3N Gaussian negatives unless set. Released code (`gsInfoNCE/run.sh`): M = 192 for every
# model and batch size, dropout 0.2 for BERT and 0.1 for RoBERTa, lambda unused, fp16.
GS_INFONCE_RULES = MethodRules(
    GS_INFONCE,
    cuda_precision="fp16",
    models=_GS_INFONCE_SETTINGS,
    defaults={
        "dropout": ByFlag("released.dropout", paper=0.1, released=FromKey("model", released_gs_dropout)),
        ("gaussian.count", "gaussian.count_per_batch"): ByFlag(
            "released.gaussian_count", paper=(None, 3.0), released=(RELEASED_GAUSSIAN_COUNT, None)),
    },
    refusals=(Refusal("gaussian.weight", lambda c: c.variant == "released" and c.gaussian.weight != 1.0,
                      ": expected 1 under variant released (the released GS-InfoNCE code parses lambda but never "
                      "uses it), got {value}"),),
)

# MixCSE: mixed negatives on unless `mix.enabled: false` (an ablation back to SimCSE); fp32.
MIXCSE_RULES = MethodRules(MIXCSE, cuda_precision="fp32", models=_MIXCSE_SETTINGS, defaults={"mix.enabled": True})

# MoCoSE: section 4.1's weight decay and validation interval ("validate the model every 100 step"), Table 9's
# best FGSM step, Algorithm 1's "Adam optimizer" (the release trains with transformers' AdamW); fp32 (the
# release has no fp16 flag).
MOCOSE_RULES = MethodRules(
    MOCOSE,
    cuda_precision="fp32",
    models=_MOCOSE_SETTINGS,
    defaults={"optim.weight_decay": 1e-6, "eval.eval_steps": 100, "fgsm.eps": 5e-9,
              "optim.algorithm": ByFlag("released.optimizer", paper="adam", released="adamw")},
    traces_distance=True,
    test_selected_flag="released.test_selected",  # mocose_tools.py keeps the best seven-task test average
    refusals=(Refusal("heads.embedding_dim",
                      lambda c: c.heads.projection_layers == 0 and c.heads.embedding_dim is not None,
                      ": a projection of 0 layers keeps the encoder's size; set heads.projection_layers >= 1 "
                      "or leave embedding_dim null"),),
)

# The released-code switches that act on one method only (the others read them as off): what a trial's evaluation
# protocol holds (trainer.summary.evaluation_protocol) and what its summary says it ran.
FLAG_METHODS: dict[str, frozenset[str]] = {
    "released.dev_on_mlp": frozenset({MIXCSE}),
    "released.eval_cutoff": frozenset({MOCOSE}),
}
