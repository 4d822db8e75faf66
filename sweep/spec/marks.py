"""Reading a study file: PyYAML with a line mark for every key path, and errors placed on those lines.

    text = read_study_text(path); data, marks = parse_yaml(text, path)
    raise marks.error(("base", "queue", "size"), "expected ...")   # "FILE:LINE: key 'base.queue.size': ..."
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sweep.spec.text import format_path, one_line
from trainer.errors import UserError

MAX_FILE_BYTES = 1_000_000


class _DuplicateKey(Exception):
    def __init__(self, path: tuple, first_line: int, line: int):
        super().__init__(path)
        self.path, self.first_line, self.line = path, first_line, line


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
                raise _DuplicateKey(self.mapping_paths.get(id(node), ()) + (key,), first_lines[key], line)
            first_lines[key] = line
        return super().construct_mapping(node, deep=deep)


class _StudyLoader(_RefusesDuplicateKeys, yaml.SafeLoader):
    """The pure-Python parser: it words every error a study file can have."""


class _FastStudyLoader(_RefusesDuplicateKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """libyaml's parser (where PyYAML was built with it, as its wheels are): the same nodes and line marks,
    ~5x faster on the long value lists of a 10,000-trial grid (a quarter of `sweep status` there)."""


# YAML 1.1 reads 5e-9 (no dot) as a string; studies are full of such epsilons, so read them as floats.
for _loader in (_StudyLoader, _FastStudyLoader):
    _loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )


def read_study_text(path: Path) -> str:
    if not path.is_file():
        raise UserError(f"{path}: no such study file; expected the path of a study YAML file (see studies/)")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise UserError(f"{path}:1: the study file is over {MAX_FILE_BYTES} bytes; expected a short YAML file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}:1: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a YAML file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the study file ({exc.strerror})") from None


def parse_yaml(text: str, file: str) -> tuple[Any, Marks]:
    """Safe-load one YAML document; the Marks map every key path to its 1-based line."""
    try:
        return _load(_FastStudyLoader, text, file)
    except (yaml.YAMLError, _DuplicateKey, RecursionError):
        pass  # a file with a problem is read again by the pure-Python parser, which words the error
    try:
        return _load(_StudyLoader, text, file)
    except _DuplicateKey as dup:
        key = format_path(dup.path)
        raise UserError(f"{file}:{dup.line}: key '{key}' is written twice (first on line {dup.first_line}); "
                        "expected each key once") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        what = exc.problem or exc.context or "unreadable"
        if exc.context and exc.problem and exc.context_mark:
            what += f" ({exc.context} started on line {exc.context_mark.line + 1})"
        raise UserError(one_line(f"{file}:{line}: not valid YAML: {what}")) from None
    except yaml.YAMLError as exc:
        raise UserError(one_line(f"{file}:1: not valid YAML: {exc}")) from None
    except RecursionError:
        raise UserError(f"{file}:1: not valid YAML: nested too deeply") from None


def _load(loader_class: type, text: str, file: str) -> tuple[Any, Marks]:
    loader = loader_class(text)
    lines: dict[tuple, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Marks(file, lines)
        mapping_paths: dict[int, tuple] = {}
        _record_lines(node, (), lines, mapping_paths, set())
        loader.mapping_paths = mapping_paths
        return loader.construct_document(node), Marks(file, lines)
    finally:
        loader.dispose()


def _record_lines(node: yaml.Node, path: tuple, lines: dict[tuple, int], mapping_paths: dict[int, tuple],
                  on_path: set[int]) -> None:
    if id(node) in on_path:
        raise yaml.YAMLError(f"the alias at line {node.start_mark.line + 1} refers to itself")
    if id(node) in mapping_paths or not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        return  # scalars have nothing inside; an aliased collection is recorded once (no blow-up)
    mapping_paths[id(node)] = path
    on_path.add(id(node))
    if isinstance(node, yaml.MappingNode):
        children = [((key.value if isinstance(key, yaml.ScalarNode) else "?"), key, value) for key, value in node.value]
    else:
        children = [(index, item, item) for index, item in enumerate(node.value)]
    for name, mark_node, child in children:
        lines.setdefault(path + (name,), mark_node.start_mark.line + 1)
        _record_lines(child, path + (name,), lines, mapping_paths, on_path)
    on_path.discard(id(node))


class Marks:
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
        return UserError(one_line(prefix + message))
