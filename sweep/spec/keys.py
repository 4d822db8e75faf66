"""Trial keys: a trial's stable name (results/<study>/trials/<key>/), hashed from what the study asked for.

    trial_key(config_dict, seed) -> str     # 12 hex chars over the fields the study sets (not defaults) + seed
    requested_fields(config_dict)           # those fields, by dotted key

    run_signature(resolved_config, seed)   # a key over what a run reads: two trials with one signature run alike

A key of a method's own section (a plugin's `dcl.sigma`) is asked for only where it differs from that section's
default, as any other key; a trial of another method never holds it (sweep.spec.expand), so its key is the key
of a study that never named it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from pydantic import BaseModel

from sweep.spec.values import default_config
from trainer import config as run_config  # run_config.RunConfig read at call time (tests swap it)
from trainer.config import scoped
from trainer.files import MISSING
from trainer.method_rules import method_sections

TRIAL_KEY_LENGTH = 12


def trial_key(config: dict[str, Any], seed: int) -> str:
    """First 12 hex digits of sha256 over what the user asked for: the fields of `config` (a validated,
    unresolved trainer config, nested or by dotted key) that differ from RunConfig's defaults, and the seed.

    A field added later with a default, or a changed default the study does not set, keeps the key (and
    so a finished trial stays finished); `sweep run` reports a changed resolution instead.
    """
    return key_of_requested(requested_fields(config), seed)


def key_of_requested(requested: dict[str, Any], seed: int) -> str:
    """trial_key for fields requested_fields already picked (it gives them back unchanged)."""
    canonical = json.dumps({"asked": requested, "seed": seed}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:TRIAL_KEY_LENGTH]


def requested_fields(config: dict[str, Any] | None) -> dict[str, Any]:
    """Dotted key -> value for the fields of a trainer config that differ from RunConfig's defaults
    (seed and output_dir aside: they are set per trial).

    >>> requested_fields({"queue": {"size": 1024, "initial_size": 128}, "seed": 7})
    {'queue.size': 1024}
    """
    out: dict[str, Any] = {}
    _add_differing(config or {}, _defaults(run_config.RunConfig, tuple(method_sections().items())), "", out)
    return out


def _add_differing(config: dict[str, Any], defaults: Any, prefix: str, out: dict[str, Any]) -> None:
    """requested_fields of `config`, the part of a config below `prefix` (trainer.files.flatten's dotted keys),
    against the same part of the defaults: a section equal to its defaults holds no requested field."""
    for key, value in config.items():
        default = defaults.get(key, MISSING) if isinstance(defaults, dict) else MISSING
        if isinstance(value, dict):
            if value != default:
                _add_differing(value, default, f"{prefix}{key}.", out)
            continue
        name = prefix + key
        if name in ("seed", "output_dir") or value == default:
            continue
        if name in FORMER_DEFAULTS and value == FORMER_DEFAULTS[name]:
            continue
        out[name] = value


@functools.lru_cache(maxsize=4)
def _defaults(config_class: type, sections: tuple[tuple[str, type[BaseModel]], ...]) -> dict[str, Any]:
    """RunConfig's defaults (default_config()) and those of the methods' own sections, by name (never modified).
    The arguments are the cache's key: the config class default_config() reads and the registered method sections."""
    return {**default_config(), **{name: section().model_dump(mode="json") for name, section in sections}}


def run_signature(config: dict[str, Any], seed: Any) -> str:
    """A key over what a run of `config` (a resolved trainer config, nested) reads: its fields that differ from the
    defaults, without the sections of methods other than its own (trainer.config.scoped), and `seed`. A trial
    written while another method's knob still named it (a plugin's key before keys were scoped to their method)
    has the signature of the trial that now runs it; sweep.records.resume.former_keys matches them by it."""
    return key_of_requested(requested_fields(scoped(config)), seed)


# Fields whose fixed default became a rule (null: the paper's value for the model, trainer.method_rules): a study
# that writes the former default out keeps the key its trials always had. Two trials of one study that differ
# only there (one null, one the former default, resolving differently) would share a key: `expansion` refuses it.
FORMER_DEFAULTS = {"batch_size": 64, "optim.lr": 3e-5}
