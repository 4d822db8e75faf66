"""Which reading of the papers made a result: the trainer's reading number, and what changed since an older one.

Every summary.json records `reading`, the trainer's READING when it ran (a summary without one was made by reading
1). When a release changes what a method computes for the same config (a paper reading corrected against its
paper), READING goes up and `reading_changes` learns, from an older summary's stored config, which of those
changes touch that run. `sweep run` then names the finished trials an older reading produced (it keeps them, or
re-runs them with --rerun-changed) and `sweep analyze` never pools them with the current reading's.

    reading_changes(summary["config"], summary_reading(summary))   # [] : the run means today what it meant then

Light (no torch): the sweep driver and the analysis import it.
"""

from __future__ import annotations

from typing import Any, Mapping

from trainer.method_rules import model_family, model_settings, registered
from trainer.vocabulary import MOCOSE

# 1: up to and including landed main 839260c.
# 2: the papers' readings corrected line by line (docs/science/): MoCoSE's eq. 3 without in-batch keys, both
#    views augmented, Adam, eq. 1's exact FGSM gradient; MixCSE's mix of normalised features and its two anchors;
#    SimCSE's STS-B dev every 250 steps under the paper reading of SimCSE, GS-InfoNCE and MixCSE; each paper's
#    learning rate and batch size per model.
# 3: MixCSE_single drops only h'_i's mixed negative (under `mix.anchors: symmetric` h'_i keeps its own loss); the
#    released MoCoSE token shuffle is the release's, one permutation of every position for the whole batch.
READING = 3


def summary_reading(summary: Mapping[str, Any]) -> int:
    """The reading that made a summary.json (1 when it records none: written before readings were numbered)."""
    value = summary.get("reading")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def reading_changes(config: dict[str, Any], reading: int) -> list[str]:
    """What the trainer now does differently, for a run of `config` (the resolved config a summary.json of
    `reading` stores), one short phrase each; [] when the run means today what it meant then."""
    if not isinstance(config, dict):
        return []
    changes: list[str] = []
    if reading < 2:
        changes += _since_reading_1(config)
    if reading < 3:
        changes += _since_reading_2(config)
    entry = registered().get(config.get("method")) if isinstance(config.get("method"), str) else None
    if entry is not None and entry.origin != "built in":  # a plugin's own readings (MethodDefinition)
        changes += entry.reading_changes(config, reading)
    return changes


def _built_in(method: Any) -> bool:
    """A method built into the trainer (the readings below are its history)."""
    entry = registered().get(method) if isinstance(method, str) else None
    return entry is not None and entry.origin == "built in"


def _simcse_family(method: Any) -> bool:
    """SimCSE and the built-in methods that only add negatives to it (GS-InfoNCE, MixCSE): no EMA target."""
    return _built_in(method) and method != MOCOSE


def _since_reading_1(config: dict[str, Any]) -> list[str]:
    method, paper = config.get("method"), config.get("variant") == "paper"
    released = config.get("released") or {}
    augment = config.get("augment") or {}
    optim = config.get("optim") or {}
    changes = []
    if method == MOCOSE and paper:
        changes.append("MoCoSE's negatives are the queue only (eq. 3), not the in-batch keys too")
        if (optim.get("weight_decay") or 0) > 0 and not released.get("optimizer"):
            changes.append("MoCoSE trains with Adam (Algorithm 1), not AdamW")
        if (config.get("fgsm") or {}).get("eps"):
            changes.append("MoCoSE's FGSM takes the current step's gradient (eq. 1), not the previous step's")
    if method == MOCOSE and (augment.get("token_shuffle") or (not released.get("cutoffs") and (
            augment.get("token_cutoff") or augment.get("feature_cutoff")))):
        changes.append("MoCoSE augments both views (Algorithm 1 line 3), not the online view only")
    mix = config.get("mix") or {}
    if paper and mix.get("enabled") and not released.get("mix_negatives"):
        changes.append("MixCSE mixes l2-normalised features")
        if mix.get("directions") == "both":
            changes.append("MixCSE's h'_i is the anchor of its own loss")
    if paper and _simcse_family(method) and (config.get("eval") or {}).get("eval_steps") == 125:
        changes.append("the paper reading evaluates STS-B dev every 250 steps, not 125")
    if model_family(str(config.get("model", ""))) is not None and _built_in(method):
        settings = model_settings(method, str(config["model"]))
        if (optim.get("lr"), config.get("batch_size")) == (3e-5, 64) != (settings.lr, settings.batch_size):
            changes.append(f"{config['model']} trains with lr {settings.lr:g} and batch {settings.batch_size} "
                           f"({settings.source}), not bert-base's")
    return changes


def _since_reading_2(config: dict[str, Any]) -> list[str]:
    method, released = config.get("method"), config.get("released") or {}
    mix = config.get("mix") or {}
    changes = []
    # a config stored before `mix.anchors` existed resolves it to symmetric now (the paper layout's default)
    if (_simcse_family(method) and mix.get("enabled") and mix.get("directions") == "single"
            and not released.get("mix_negatives") and mix.get("anchors") in (None, "symmetric")):
        changes.append("MixCSE_single keeps h'_i's own loss and drops only its mixed negative")
    # a config stored before `released.token_shuffle` existed resolves it from the variant now
    whole_batch_shuffle = released.get("token_shuffle", config.get("variant") == "released")
    if method == MOCOSE and (config.get("augment") or {}).get("token_shuffle") and whole_batch_shuffle:
        changes.append("MoCoSE's released token shuffle permutes every position, [CLS] and pads included, with one "
                       "permutation for the whole batch")
    return changes
