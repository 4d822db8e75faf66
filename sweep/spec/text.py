"""Small helpers of the study layer: how values and key paths are written, dicts by dotted key."""

from __future__ import annotations

import copy
import difflib
from typing import Any


def dotted_get(data: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """data["a"]["b"] for "a.b"; `default` when a part is missing or its parent is not a mapping.

    >>> dotted_get({"queue": {"size": 512}}, "queue.size"), dotted_get({}, "queue.size", 0)
    (512, 0)
    """
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts by dotted key: {"queue": {"size": 512}} -> {"queue.size": 512}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


MISSING = object()  # dotted_get's default when "absent" must differ from a stored None


def pop_dotted(data: dict[str, Any], dotted: str) -> None:
    *sections, last = dotted.split(".")
    parent = dotted_get(data, ".".join(sections)) if sections else data
    if isinstance(parent, dict):
        parent.pop(last, None)


_IMMUTABLE = (str, int, float, bool, type(None))


def copy_plain(value: Any) -> Any:
    """copy.deepcopy for configs and YAML data (dicts, lists, scalars), several times faster: expanding a
    10,000-trial study copies a config per trial. Anything else is handed to copy.deepcopy.

    >>> a = {"queue": {"slices": [["0-256"]]}}; b = copy_plain(a); b["queue"]["slices"][0].append("x"); a
    {'queue': {'slices': [['0-256']]}}
    """
    kind = type(value)
    if kind is dict:
        return {key: copy_plain(item) for key, item in value.items()}
    if kind is list:
        return [copy_plain(item) for item in value]
    if kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


def overlay(defaults: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """`defaults` with `values` written over it, section by section (a null section keeps defaults)."""
    out = copy_plain(defaults)
    for key, value in values.items():
        if isinstance(out.get(key), dict):
            if isinstance(value, dict):
                out[key] = overlay(out[key], value)
        else:
            out[key] = copy_plain(value)
    return out


def is_expr(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == ["expr"]


def format_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "+".join(format_value(v) for v in value)
    if is_expr(value):
        return f"{{expr: {value['expr']}}}"
    return str(value)


def format_path(path: tuple) -> str:
    """('seeds', 1) -> 'seeds[1]'; ('base', 'queue', 'size') -> 'base.queue.size'."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def suggestion(word: Any, choices: Any) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def type_name(value: Any) -> str:
    names = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def shorten(text: Any, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters with "..." (for one-line messages)."""
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def hide_password(url: str) -> str:
    """The URL with a password in it replaced by *** (database and tracking URLs in messages and files).

    >>> hide_password("postgresql://me:s3cret@db:5432/optuna"), hide_password("sqlite:///m.db")
    ('postgresql://me:***@db:5432/optuna', 'sqlite:///m.db')
    """
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if not parsed.password:
        return url
    return parsed._replace(netloc=parsed.netloc.replace(f":{parsed.password}@", ":***@", 1)).geturl()
