"""A study's expansion kept on disk (results/<study>/expansion.json), so that the next `sweep run` of the same
study reads its trials back instead of building and validating every trainer config again (seconds for 10,000
trials).

The file is a cache, nothing more: it is used only when its digest matches the one computed now, over everything
an expansion depends on (`digest`): the study's content and the trainer's defaults (the in-memory cache's
fingerprint), the source of the trainer and of sweep.spec, the source file of every registered method (plugins
and installed packages too) and the versions of Python and pydantic. Anything else, a missing, damaged or stale
file, means the expansion is built as before; deleting the file is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path

from sweep.spec.schema import StudySpec, Trial

EXPANSION_FILE = "expansion.json"
_PACKAGES = (Path(__file__).resolve().parents[2] / "trainer", Path(__file__).resolve().parent)


def digest(fingerprint: str) -> str:
    """What an expansion depends on, as one sha256 (module docstring); `fingerprint`: the study's content and the
    trainer's defaults, as sweep.spec.expand keys its in-memory cache."""
    from pydantic import VERSION

    from trainer.method_rules import registered

    methods = sorted((name, entry.origin, _file_digest(entry.source_file)) for name, entry in registered().items())
    parts = [fingerprint, code_digest(), json.dumps(methods), sys.version, VERSION]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def read(spec: StudySpec, wanted: str) -> tuple[list[Trial], int, int, int] | None:
    """The stored expansion of `spec` (trials, configurations, dropped, duplicates) when its digest is `wanted`;
    None when there is none, it is unreadable or it was made from anything else."""
    path = Path(spec.study_dir) / EXPANSION_FILE
    if read_digest(path) != wanted:
        return None
    try:
        data = json.loads(path.read_text())
        trials = [Trial(key=key, seed=seed, params=params, config=config, mtd=mtd, requested=requested)
                  for key, seed, params, config, mtd, requested in data["trials"]]
        return trials, data["configurations"], data["dropped"], data["duplicates"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write(spec: StudySpec, wanted: str, trials: list[Trial], configurations: int, dropped: int,
          duplicates: int) -> None:
    """Keep the expansion of `spec` (made under digest `wanted`) in its results folder, which must exist, unless it
    is there already; written whole (a temporary file renamed). An expansion whose values JSON would not give back
    exactly (a tuple, a date) is not kept."""
    folder = Path(spec.study_dir)
    path = folder / EXPANSION_FILE
    if not folder.is_dir() or read_digest(path) == wanted:
        return
    rows = [[t.key, t.seed, t.params, t.config, t.mtd, t.requested] for t in trials]
    try:
        text = json.dumps({"digest": wanted, "configurations": configurations, "dropped": dropped,
                           "duplicates": duplicates, "trials": rows})
    except (TypeError, ValueError):
        return
    if json.loads(text)["trials"] != rows:
        return
    temporary = path.with_name(f".{EXPANSION_FILE}.{os.getpid()}")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    except OSError:  # a cache: a folder that takes no more data loses nothing by its absence
        temporary.unlink(missing_ok=True)


def read_digest(path: Path) -> str | None:
    """The digest a stored expansion was made under (read from the file's start), None without one."""
    try:
        with open(path) as handle:
            head = handle.read(120)
    except OSError:
        return None
    prefix = '{"digest": "'
    return head[len(prefix):len(prefix) + 64] if head.startswith(prefix) else None


@lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 over the source of the trainer and of sweep.spec, file by file in a fixed order."""
    hasher = hashlib.sha256()
    for package in _PACKAGES:
        for path in sorted(package.rglob("*.py")):
            hasher.update(str(path.relative_to(package.parent)).encode())
            hasher.update(path.read_bytes())
    return hasher.hexdigest()


def _file_digest(path: str | None) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""
    except OSError:
        return "unreadable"
