"""Small helpers of the study layer: how values and key paths are written, and plain copies of configs."""

from __future__ import annotations

import copy
import difflib
from typing import Any

from trainer.errors import dotted_loc, excerpt, printable

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


def format_value_excerpt(value: Any, limit: int = 80) -> str:
    """format_value for a message: at most `limit` characters, in time bounded by `limit` (a list of a
    million queue slices, a 1 MB string), e.g. "0-256+768-1024" or "x+x+x+x+x+x+x+x+...(1000000 values)"."""
    if isinstance(value, list):
        parts = [format_value_excerpt(v, limit) if not isinstance(v, (list, dict)) else excerpt(v, limit)
                 for v in value[:8]]
        text = "+".join(parts) + (f"+...({len(value)} values)" if len(value) > 8 else "")
    elif isinstance(value, dict) and not is_expr(value):
        text = excerpt(value, limit)
    elif isinstance(value, str):
        text = value[: limit + 1]
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        text = excerpt(value)
    else:
        text = format_value(value)
    return shorten(text, limit)


def format_path(path: tuple) -> str:
    """('seeds', 1) -> 'seeds[1]'; ('base', 'queue', 'size') -> 'base.queue.size' (trainer.errors.dotted_loc),
    each key shown printable and at most 60 characters long (a key of 1 MB: its first 60 characters)."""
    return dotted_loc(tuple(part if isinstance(part, int) else printable(shorten(part, 60)) for part in path))


def suggestion(word: Any, choices: Any) -> str:
    word = str(word) if not isinstance(word, str) else word
    if len(word) > 100:  # no key is that long (and difflib is quadratic in it)
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1)
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
    text = one_line(str(text)[: 4 * limit + 100])  # whitespace runs shrink: a little more than needed is enough
    return text if len(text) <= limit else text[: limit - 3] + "..."


def count_text(count: int) -> str:
    """A count for a message: 1,000,000; past a trillion "about 10^N" (a product of list lengths can have
    more digits than Python prints).

    >>> count_text(1_000_000), count_text(3 ** 1000)
    ('1,000,000', 'about 10^477')
    """
    if count < 10**12:
        return f"{count:,}"
    return f"about 10^{int(count.bit_length() * 0.30103) if count.bit_length() > 3000 else len(str(count)) - 1}"


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
