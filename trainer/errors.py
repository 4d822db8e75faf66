"""User-facing errors.

A `UserError` is a mistake the user can fix (a missing data file, an unknown model, a bad config
value). Command-line entry points print its message on one line and exit with code 2; they never
show a traceback for it. Programming errors stay ordinary exceptions.
"""

from __future__ import annotations

import difflib
import re
import reprlib
from typing import Any


class UserError(Exception):
    """A problem the user can fix; the message says what is wrong and how to fix it."""

    exit_code = 2


class ConfigError(UserError):
    """A bad run-config value: "config key 'queue.size': expected ..., got ...".

    `key` (dotted) and `detail` (": expected ..." or " is unknown; ...") let the study loader place the
    same complaint on the line of its YAML file without reading the message back.
    """

    def __init__(self, key: str, detail: str):
        super().__init__(f"config key '{key}'{detail}")
        self.key, self.detail = key, detail

    def __reduce__(self):  # rebuilt from its fields, not its message, when it crosses processes (pickle)
        return type(self), (self.key, self.detail)


class PrecisionFloorError(ConfigError):
    """An FGSM eps (`fgsm.eps`) below what half-precision autocast can represent next to the model's word
    embeddings (`floor`): the perturbation would round away before the encoder sees it. A caller that can run
    without FGSM (the GPU bench's half-precision rows) catches this class; the message is for the user."""

    def __init__(self, eps: float, precision: str, floor: float):
        super().__init__("fgsm.eps", f": {eps:g} is below what {precision} autocast can represent next to this "
                                     f"model's word embeddings (~{floor:.1e}), so the perturbation would never reach "
                                     f"the encoder; set precision: fp32 (the MoCoSE release runs in fp32) or "
                                     f"fgsm.eps >= {floor:.1e}")
        self.eps, self.precision, self.floor = eps, precision, floor

    def __reduce__(self):
        return type(self), (self.eps, self.precision, self.floor)


# Error messages quote what the user wrote, but never all of it: a study value may be a 1 MB string or a list
# of a million items, and a message is one line. reprlib stops early at these sizes, so the cost is bounded too.
_EXCERPT = reprlib.Repr()
_EXCERPT.maxlevel, _EXCERPT.maxstring, _EXCERPT.maxother, _EXCERPT.maxlong = 3, 60, 60, 40
_EXCERPT.maxlist = _EXCERPT.maxtuple = _EXCERPT.maxdict = _EXCERPT.maxset = _EXCERPT.maxfrozenset = 5
EXCERPT_CHARS = 100
MAX_MESSAGE_CHARS = 600  # a one-line error, however long the key or value it names


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """repr(value), cut to at most `limit` characters, in time bounded by `limit` (not by the value's size).

    >>> excerpt("x" * 10_000)[:12], len(excerpt(list(range(10**6)))) < 40, excerpt(10**400)
    ("'xxxxxxxxxxx", True, 'an integer of 401 digits')
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        # repr of an int is quadratic in its length and refused past 4300 digits (sys.int_max_str_digits)
        digits = len(str(value)) if value.bit_length() < 14000 else int(value.bit_length() * 0.30103) + 1
        return f"an integer of {digits} digits"
    text = _EXCERPT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str) -> str:
    """`text` with control characters written as escapes (\\x1b, \\x00): a message must not drive the terminal.

    >>> printable("a\\x1b[31mb")
    'a\\\\x1b[31mb'
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def bounded_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` on one line, at most `limit` characters: a middle part is cut, so that the file, the key
    (at the start) and the fix (at the end) stay. Every message quotes values as excerpts already; this
    is the guarantee for the ones that do not.

    >>> len(bounded_message("f.yaml:1: " + "x" * 5000 + " expected y")) <= MAX_MESSAGE_CHARS
    True
    """
    if len(text) > 4 * limit:
        text = text[: 2 * limit] + " " + text[-2 * limit:]
    text = printable(" ".join(text.split()))
    if len(text) <= limit:
        return text
    head = (limit - 5) * 2 // 3
    return text[:head] + " ... " + text[-(limit - 5 - head):]


def expected_text(error: dict[str, Any]) -> str:
    """What a pydantic v2 error (one item of `ValidationError.errors()`) asked for, in words.

    >>> expected_text({"type": "greater_than_equal", "ctx": {"ge": 2}, "input": 1})
    'expected a number >= 2, got 1'
    """
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    words = {
        "int_type": "an integer", "int_from_float": "an integer", "int_parsing": "an integer",
        "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
        "bool_type": "true or false", "bool_parsing": "true or false", "string_type": "a string",
        "list_type": "a list", "tuple_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
        "model_attributes_type": "a mapping", "none_required": "null",
        "greater_than": f"a number > {ctx.get('gt')}", "greater_than_equal": f"a number >= {ctx.get('ge')}",
        "less_than": f"a number < {ctx.get('lt')}", "less_than_equal": f"a number <= {ctx.get('le')}",
        "literal_error": "one of " + ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", "")))),
        "string_pattern_mismatch": f"text matching {ctx.get('pattern')}",
        "string_too_short": "a non-empty string", "too_short": "a non-empty list",
        "too_long": f"at most {ctx.get('max_length')} values",
    }
    if kind == "missing":
        return "is missing"
    if kind == "value_error":  # a validator's own words
        return " ".join(str(ctx.get("error", error.get("msg", ""))).split())
    return f"expected {words.get(kind, error.get('msg', kind))}, got {excerpt(value)}"


def dotted_loc(loc: tuple) -> str:
    """pydantic's error location as the key a user writes: ('seeds', 1) -> 'seeds[1]'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def config_error(error: dict[str, Any], known_keys: list[str], section: str = "") -> ConfigError:
    """A pydantic error from the run config (or one of its sections) as a ConfigError naming the key."""
    loc = tuple(p for p in (section, *error["loc"]) if p != "")
    if error["type"] in ("missing", "too_short") and isinstance(loc[-1], int):  # optim.betas: [0.9]
        return ConfigError(dotted_loc(loc[:-1]), f": expected more values, got {excerpt(error['input'])}")
    key = ".".join(p for p in loc if isinstance(p, str))
    if error["type"] == "extra_forbidden":
        prefix = key.rsplit(".", 1)[0] + "." if "." in key else ""
        known = sorted({n[len(prefix):].split(".")[0] for n in known_keys if n.startswith(prefix)})
        close = difflib.get_close_matches(key[len(prefix):], known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return ConfigError(key, f" is unknown{hint}; known keys here: {', '.join(known)}")
    return ConfigError(key, ": " + expected_text(error))


def suggestion_text(word: str, choices: list[str]) -> str:
    """" (did you mean 'x'?)" for the closest of `choices` to a mistyped `word`, else "".

    >>> suggestion_text("dlc", ["simcse", "dcl"])
    " (did you mean 'dcl'?)"
    """
    if len(word) > 100:  # no name is that long (and difflib is quadratic in it)
        return ""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
