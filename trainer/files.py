"""Atomic file writes and JSON-safe values, shared by the trainer (summary.json) and the orchestrator's
results store (`sweep.store`): a reader (or a process killed mid-write) never sees a half-written file.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, fsync, then os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def json_safe(value):
    """Plain JSON types: NaN and infinities become null (strict JSON readers reject them), tuples become
    lists, numpy/torch scalars become Python numbers.

    >>> json_safe({"a": float("nan"), "b": (1, 2.5)})
    {'a': None, 'b': [1, 2.5]}
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy / torch scalars
        try:
            return json_safe(value.item())
        except (TypeError, ValueError):
            pass
    return value
