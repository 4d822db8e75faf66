"""The safe expression language of study files (constraints and `expr` values).

A small subset of Python read with `ast` and never passed to eval(): numbers, strings, True/False/None,
dotted trainer keys, + - * / // %, comparisons (chainable) and and/or/not.

>>> evaluate("queue.size // 4 >= 128", {"queue": {"size": 512}})
True
"""

from __future__ import annotations

import ast
import functools
import operator
from typing import Any, Callable

from sweep.text import shorten, suggestion
from trainer.config import field_names
from trainer.errors import excerpt
from trainer.files import dotted_get

MAX_EXPRESSION_CHARS = 500

_BINARY_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_COMPARISONS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_NODE_WORDS = {
    ast.Call: "function calls", ast.Subscript: "indexing", ast.Lambda: "lambdas", ast.IfExp: "if/else",
    ast.List: "lists", ast.Tuple: "tuples", ast.Dict: "dicts", ast.Set: "sets", ast.Pow: "**",
    ast.ListComp: "comprehensions", ast.GeneratorExp: "generators", ast.NamedExpr: ":=",
    ast.Starred: "*", ast.JoinedStr: "f-strings",
}
_EXPRESSION_HELP = ("only numbers, strings, True/False/None, dotted trainer keys, + - * / // %, "
                    "comparisons and and/or/not are allowed")


def check_expression(text: Any) -> ast.expr:
    """Parse and vet an expression when the file loads; ValueError says what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"expected an expression string, got {excerpt(text)}")
    try:
        tree, names = compile_expression(text)
    except ValueError as exc:
        raise ValueError(f"'{shorten(text, 80)}': {exc}") from None
    known = field_names()
    for name in names:
        if name not in known:
            raise ValueError(f"'{shorten(text, 80)}': '{shorten(name, 60)}' is not a trainer config key"
                             + suggestion(name, known))
    return tree


def evaluate(text: str, config: dict[str, Any]) -> Any:
    """The value of a (vetted) expression over a trainer config dict; ValueError on a run-time problem."""
    return _evaluate(compile_expression(text)[0], functools.partial(dotted_get, config))


@functools.lru_cache(maxsize=256)
def compile_expression(text: str) -> tuple[ast.expr, tuple[str, ...]]:
    """Parse `text` and refuse every construct outside the safe subset; returns (tree, dotted names)."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"longer than {MAX_EXPRESSION_CHARS} characters; expected a short expression")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        where = f"at column {exc.offset}" if exc.offset else "at the end"
        raise ValueError(f"{exc.msg} {where}; expected an expression like "
                         "'queue.initial_size <= queue.size'") from None
    names: list[str] = []
    _vet(tree, names)
    return tree, tuple(names)


def _vet(node: ast.AST, names: list[str]) -> None:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, type(None))):
            raise ValueError(f"the constant {node.value!r} is not allowed; {_EXPRESSION_HELP}")
        return
    if isinstance(node, (ast.Name, ast.Attribute)):
        names.append(_dotted_name(node))
        return
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _vet(value, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        _vet(node.operand, names)
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPERATORS:
        _vet(node.left, names)
        _vet(node.right, names)
        return
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
        _vet(node.left, names)
        for comparator in node.comparators:
            _vet(comparator, names)
        return
    what = _NODE_WORDS.get(type(getattr(node, "op", node)), type(node).__name__)
    raise ValueError(f"{what} ('{ast.unparse(node)[:60]}') not allowed; {_EXPRESSION_HELP}")


def _dotted_name(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise ValueError(f"'{ast.unparse(node)[:60]}' is not a dotted trainer key; {_EXPRESSION_HELP}")
    parts.append(node.id)
    name = ".".join(reversed(parts))
    if any(part.startswith("_") for part in parts):
        raise ValueError(f"names starting with '_' ('{name}') are not allowed; {_EXPRESSION_HELP}")
    return name


def _evaluate(node: ast.AST, lookup: Callable[[str], Any]) -> Any:
    """Evaluate a vetted tree; ValueError on a run-time problem (types, division by zero)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Name, ast.Attribute)):
        return lookup(_dotted_name(node))
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        result: Any = is_and
        for value in node.values:
            result = _evaluate(value, lookup)
            if bool(result) != is_and:  # short-circuit exactly like Python
                return result
        return result
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, lookup)
        if isinstance(node.op, ast.Not):
            return not operand
        operand = _number(operand)
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _number(_evaluate(node.left, lookup)), _number(_evaluate(node.right, lookup))
        try:
            return _BINARY_OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError(f"division by zero in '{shorten(ast.unparse(node), 80)}'") from None
        except OverflowError:  # an integer of 400 digits met a float (10**400 / 3, 10**400 * 0.5)
            raise ValueError(f"'{shorten(ast.unparse(node), 40)}' overflows a float (beyond 1e308); expected "
                             "smaller numbers") from None
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, lookup)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, lookup)
            try:
                if not _COMPARISONS[type(op)](left, right):
                    return False
            except TypeError:
                raise ValueError(f"cannot compare {excerpt(left, 60)} with {excerpt(right, 60)}") from None
            left = right
        return True
    raise ValueError(f"'{ast.unparse(node)}' is not allowed")  # unreachable after _vet


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"arithmetic needs numbers, got {excerpt(value, 60)}")
    return value
