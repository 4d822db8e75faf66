"""Reading a study file: PyYAML with the line of every key path, and errors placed on those lines.

    text = read_study_text(path); data, key_lines = parse_yaml(text, path)
    raise key_lines.error(("base", "queue", "size"), "expected ...")   # "FILE:LINE: key 'base.queue.size': ..."

Everything after this reads the data the file gives, so its size is kept to the file's own: at most
MAX_DEPTH levels of nesting (deeper data overflows Python's stack in copies and checks) and at most
MAX_ALIAS_VALUES values added by aliases (a kilobyte of nested aliases expands to a billion values).
No text value holds a NUL character or half of a surrogate pair (no path, terminal or file takes them).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sweep.text import format_path, shorten
from trainer.errors import MAX_MESSAGE_CHARS, UserError, bounded_message, excerpt

MAX_FILE_BYTES = 1_000_000
MAX_DEPTH = 20  # levels of nesting; a study's deepest value (parameters.queue.slices[0][0]) is 4 deep
MAX_ALIAS_VALUES = 100_000  # values aliases may add to the file's own
_BAD_CHARACTERS = re.compile("[\0\ud800-\udfff]")
_SCALAR_WORDS = {"int": "an integer", "float": "a number", "bool": "a boolean", "timestamp": "a date",
                 "null": "null", "binary": "base64 data"}


class DuplicateKey(Exception):
    def __init__(self, path: tuple, first_line: int, line: int):
        super().__init__(path)
        self.path, self.first_line, self.line = path, first_line, line


class Refused(Exception):
    """A file whose shape is refused (too deep, aliases expanding too far, a NUL character): one message."""

    def __init__(self, path: tuple, line: int, message: str):
        super().__init__(message)
        self.path, self.line, self.message = path, line, message


class _RefusesDuplicateKeys:
    """A loader that refuses duplicate mapping keys (PyYAML would keep the last one silently).

    `mapping_paths` (filled before construction) names each mapping node's key path for the error.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self.mapping_paths: dict[int, tuple] = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` may legitimately be overridden by the keys beside it
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            line = key_node.start_mark.line + 1
            if key in first_lines:
                raise DuplicateKey(self.mapping_paths.get(id(node), ()) + (key,), first_lines[key], line)
            first_lines[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            # PyYAML's scalar constructors raise these on a malformed value it resolved by its look:
            # 2024-13-45 (a date), 0x_ (hex), !!bool maybe, an integer of 5,000 digits. Anything else is ours.
            if not isinstance(node, yaml.ScalarNode):
                raise
            word = _SCALAR_WORDS.get(node.tag.rsplit(":", 1)[-1], node.tag)
            reason = shorten(str(exc).split(": value has")[0], 80) if isinstance(exc, ValueError) else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {excerpt(node.value, 60)} as {word}" + (f" ({reason})" if reason else "")
                + "; quote it to make it a string", node.start_mark) from None


class StudyLoader(_RefusesDuplicateKeys, yaml.SafeLoader):
    """The pure-Python parser: it words every error a study file can have."""


class FastStudyLoader(_RefusesDuplicateKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """libyaml's parser (where PyYAML was built with it, as its wheels are): the same nodes and key lines,
    parsed in C (the long value lists of a 10,000-trial grid are read by every `sweep status`)."""


# YAML 1.1 reads 5e-9 (no dot) as a string; studies are full of such epsilons, so read them as floats.
for _loader in (StudyLoader, FastStudyLoader):
    _loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )


def read_study_text(path: Path) -> str:
    try:
        is_file = path.is_file()
    except (OSError, ValueError) as exc:  # a name too long for the OS, a NUL character
        raise UserError(f"{excerpt(str(path))}: cannot be a study file ({getattr(exc, 'strerror', None) or exc}); "
                        "expected the path of a study YAML file") from None
    if not is_file:
        raise UserError(f"{path}: no such study file; expected the path of a study YAML file (see studies/)")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise UserError(f"{path}:1: the study file is over {MAX_FILE_BYTES} bytes; expected a short YAML file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}:1: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a YAML file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the study file ({exc.strerror})") from None


def parse_yaml(text: str, file: str) -> tuple[Any, KeyLines]:
    """Safe-load one YAML document; the KeyLines map every key path to its 1-based line."""
    try:
        return load_with(FastStudyLoader, text, file)
    except Refused as refused:
        raise _refusal(file, refused) from None
    except (yaml.YAMLError, DuplicateKey, RecursionError):
        pass  # a file with a problem is read again by the pure-Python parser, which words the error
    try:
        return load_with(StudyLoader, text, file)
    except Refused as refused:
        raise _refusal(file, refused) from None
    except DuplicateKey as dup:
        key = format_path(dup.path)
        raise UserError(f"{file}:{dup.line}: key '{key}' is written twice (first on line {dup.first_line}); "
                        "expected each key once") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        what = exc.problem or exc.context or "unreadable"
        if exc.context and exc.problem and exc.context_mark:
            what += f" ({exc.context} started on line {exc.context_mark.line + 1})"
        raise UserError(shorten(f"{file}:{line}: not valid YAML: {what}", MAX_MESSAGE_CHARS)) from None
    except yaml.YAMLError as exc:
        raise UserError(shorten(f"{file}:1: not valid YAML: {exc}", MAX_MESSAGE_CHARS)) from None
    except RecursionError:
        raise UserError(f"{file}:1: not valid YAML: nested too deeply") from None


def _refusal(file: str, refused: Refused) -> UserError:
    key = f"key '{format_path(refused.path)}': " if refused.path else ""
    return UserError(bounded_message(f"{file}:{refused.line}: {key}{refused.message}"))


def load_with(loader_class: type, text: str, file: str) -> tuple[Any, KeyLines]:
    loader = loader_class(text)
    lines: dict[tuple, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return None, KeyLines(file, lines)
        mapping_paths: dict[int, tuple] = {}
        _Walk(lines, mapping_paths).visit(node, ())
        loader.mapping_paths = mapping_paths
        return loader.construct_document(node), KeyLines(file, lines)
    finally:
        loader.dispose()


class _Walk:
    """One pass over the composed nodes, before any value is built: the line of every key path, the mapping
    paths (for duplicate keys), and the checks on the file's shape (MAX_DEPTH, MAX_ALIAS_VALUES, characters).

    An aliased collection is walked once; its size and height are remembered and counted again wherever
    the alias is used, so the walk is linear in the file while it measures what the aliases expand to."""

    def __init__(self, lines: dict[tuple, int], mapping_paths: dict[int, tuple]):
        self.lines, self.mapping_paths = lines, mapping_paths
        self.sizes: dict[int, tuple[int, int]] = {}  # id(collection) -> (values inside it, levels below it)
        self.added = 0  # values the aliases add to those written
        self.on_path: set[int] = set()
        self.scalars: set[int] = set()  # id() of the scalars walked

    def visit(self, node: yaml.Node, path: tuple) -> tuple[int, int]:
        """(values, height) of `node` as the data will hold it, aliases expanded."""
        if id(node) in self.on_path:
            raise yaml.YAMLError(f"the alias at line {node.start_mark.line + 1} refers to itself")
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            if id(node) in self.scalars:  # an alias of a text: it weighs its length (a 500 KB text 100,000 times)
                self._add(1 + len(str(node.value)) // 100, path, node)
                return 1, 0
            self.scalars.add(id(node))
            if isinstance(node.value, str) and _BAD_CHARACTERS.search(node.value):
                bad = _BAD_CHARACTERS.search(node.value).group()
                what = "a NUL character (\\0)" if bad == "\0" else f"half of a surrogate pair ({bad!a})"
                raise Refused(path, node.start_mark.line + 1, f"the text {excerpt(node.value, 40)} holds {what}, "
                               "which no path, terminal or file takes; remove it")
            return 1, 0
        if id(node) in self.sizes:  # an alias of a collection walked before
            size, height = self.sizes[id(node)]
            self._add(size, path, node)
            self._check_depth(path, height, node)
            return size, height
        self._check_depth(path, 0, node)
        self.mapping_paths[id(node)] = path
        self.on_path.add(id(node))
        if isinstance(node, yaml.MappingNode):
            children = [((key.value if isinstance(key, yaml.ScalarNode) else "?"), key, value)
                        for key, value in node.value]
        else:
            children = [(index, item, item) for index, item in enumerate(node.value)]
        size, height = 1, 0
        for name, mark_node, child in children:
            if mark_node is not child:
                self.visit(mark_node, path + (name,))  # a key: its characters are checked too
            alias_item = mark_node is child and (id(child) in self.sizes or id(child) in self.scalars)
            # an item that is an alias has its anchor's mark: its own line is (about) its list's
            line = self.lines.get(path, 1) if alias_item else mark_node.start_mark.line + 1
            self.lines.setdefault(path + (name,), line)
            child_size, child_height = self.visit(child, path + (name,))
            size, height = size + child_size, max(height, child_height + 1)
        self.on_path.discard(id(node))
        self.sizes[id(node)] = (size, height)
        return size, height

    def _add(self, values: int, path: tuple, node: yaml.Node) -> None:
        self.added += values
        if self.added > MAX_ALIAS_VALUES:
            raise Refused(path, self._line(path, node), f"the aliases expand the file by more than "
                           f"{MAX_ALIAS_VALUES:,} values (an alias of aliases grows exponentially); "
                           "write the values out, or use fewer levels of aliases")

    def _check_depth(self, path: tuple, height: int, node: yaml.Node) -> None:
        if len(path) + height > MAX_DEPTH:
            raise Refused(path[:MAX_DEPTH], self._line(path, node), f"nested more than {MAX_DEPTH} levels deep; "
                           "expected a study file's few levels (its deepest key, a queue slice, is 4 deep)")

    def _line(self, path: tuple, node: yaml.Node) -> int:
        return self.lines.get(path, node.start_mark.line + 1)


class KeyLines:
    """The lines of a study file's key paths; turns a key path into a one-line
    "FILE:LINE: key 'a.b': message" error (a key that is not written: its section's line)."""

    def __init__(self, file: str, lines: dict[tuple, int]):
        self.file, self.lines = file, lines

    def line(self, path: tuple) -> int:
        for end in range(len(path), 0, -1):  # a key that is not written: its section's line
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1

    def error(self, path: tuple, message: str, show_key: bool = True) -> UserError:
        prefix = f"{self.file}:{self.line(path)}: "
        if show_key and path:
            # "key 'x' is unknown ..." reads as a sentence; everything else follows a colon
            prefix += f"key '{format_path(path)}'" + (" " if message.startswith("is ") else ": ")
        return UserError(bounded_message(prefix + message))
