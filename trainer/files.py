"""Records on disk, for the whole project: writing them safely (one atomic-write helper, one JSON-safe conversion)
and reaching into nested records and configs by dotted key (`dotted_get`, `dotted_holds`, `dotted_put`,
`dotted_pop`, `flatten`: "queue.size" is data["queue"]["size"]).

The trainer (summary.json, metrics.jsonl), the orchestrator (`sweep.records.store`, `sweep.records.mirror`) and the
analysis (figures, tables) all write through `write_atomic` / `write_text_atomic`: a reader (or a
process killed mid-write) never sees a half-written file. `json_safe` makes any result plain JSON; `path_text`
checks that a path is one the OS can take.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer.errors import excerpt


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc/self/status).

    >>> 0 <= current_umask() <= 0o777
    True
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: the classic two calls (briefly changes it for the process)
    os.umask(mask)
    return mask


def apply_umask_modes(folder: str | Path) -> None:
    """Give every file under `folder` the mode a plain open() gives (0666 less the umask). For folders that
    libraries write with modes of their own: safetensors creates its weights file 0600, which would keep a
    group sharing the results folder from reading a kept or exported model."""
    mode = 0o666 & ~current_umask()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, mode)


def write_atomic(path: str | Path, write: Callable[[Path], Any], fsync: bool = True) -> Path:
    """Call `write(temporary_path)` for a temporary file beside `path`, then move it into place.

    The temporary file is removed when `write` raises (the old `path`, if any, stays as it was). The
    file gets the mode a plain open() would give it (0666 less the umask), not mkstemp's 0600, so a
    group sharing the results folder can read it.
    >>> write_atomic(Path(tempfile.mkdtemp()) / "x.txt", lambda tmp: tmp.write_text("hi")).read_text()
    'hi'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        if fsync:
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8, newlines as given) to `path` atomically."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline=""))


def json_safe(value: Any) -> Any:
    """Plain JSON data: NaN and infinities become null (strict JSON readers reject them), numpy and torch
    scalars become numbers, tuples lists, keys strings, anything else its str().

    >>> json_safe({"a": float("nan"), 1: (2, float("inf"))})
    {'a': None, '1': [2, None]}
    """
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
        return json_safe(value.tolist())
    return str(value)


# ---- nested dicts by dotted key ("queue.size" is data["queue"]["size"]): the project's one set of helpers ----
MISSING = object()  # dotted_get's default when "absent" must differ from a stored None


def dotted_get(data: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """data["a"]["b"] for "a.b"; `default` when a part is missing or its parent is not a mapping.

    >>> dotted_get({"queue": {"size": 512}}, "queue.size"), dotted_get({}, "queue.size", 0)
    (512, 0)
    """
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def dotted_holds(data: Mapping[str, Any], key: str) -> bool:
    """Whether `data` says something at `key`: the key itself, or a parent that is not a mapping (`mtd: null`
    holds "mtd.formula").

    >>> dotted_holds({"mtd": None}, "mtd.formula"), dotted_holds({"mtd": {}}, "mtd.formula")
    (True, False)
    """
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping):
            return True
        if part not in node:
            return False
        node = node[part]
    return True


def dotted_put(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `key`, making the sections on the way that are missing.

    >>> d = {}; dotted_put(d, "provenance.code.commit", "abc"); d
    {'provenance': {'code': {'commit': 'abc'}}}
    """
    *sections, last = key.split(".")
    for part in sections:
        data = data.setdefault(part, {})
    data[last] = value


def dotted_pop(data: dict[str, Any], key: str) -> None:
    """Remove `key` if it is there; nothing otherwise."""
    *sections, last = key.split(".")
    parent = dotted_get(data, ".".join(sections)) if sections else data
    if isinstance(parent, dict):
        parent.pop(last, None)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict by dotted key: {"queue": {"size": 512}} -> {"queue.size": 512}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def path_text(value: str) -> str:
    """A path the OS can take: no NUL character, no part over NAME_MAX (255 bytes), at most PATH_MAX - 1 bytes
    (4095). Otherwise opening it fails with 'File name too long' deep in a run instead of here."""
    if "\0" in value:
        raise ValueError(f"expected a path without NUL characters, got {excerpt(value)}")
    try:
        encoded = os.fsencode(value)
    except UnicodeEncodeError:
        raise ValueError(f"expected a path of valid characters, got {excerpt(value)}") from None
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > 255:
        raise ValueError(f"expected a path whose every part is at most 255 bytes (one part has {longest}), "
                         f"got {excerpt(value)}")
    if len(encoded) > 4095:
        raise ValueError(f"expected a path of at most 4095 bytes (this one has {len(encoded)}), got {excerpt(value)}")
    if value.startswith("~"):
        try:
            Path(value).expanduser()
        except RuntimeError:  # ~name of a user this machine does not know
            raise ValueError(f"expected ~/..., ~user/... of a known user, or a path without ~, got {excerpt(value)}"
                             ) from None
    return value
