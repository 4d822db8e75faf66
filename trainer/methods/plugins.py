"""A researcher's own methods: the `plugins:` of a study (files, relative to the study file's folder, or
importable modules) imported, and the methods they define registered (trainer.method_rules.register_method), in
the driver and in every worker, before any config names them.

    load_plugins(["dcl.py", "my_pkg.methods"], Path("studies"))   # -> the MethodEntry of each method defined
    plugin_digests(["/abs/dcl.py"])                              # -> {"/abs/dcl.py": sha256 of its source}

A plugin file is imported once per process and content: the same file again is the same module; a changed file
is imported again and its methods registered anew. Every failure is one UserError line naming the plugin and, where
there is one, FILE:LINE (a missing file or module, an exception or a syntax error on import, no method defined, a
wrong declaration). Light: torch comes in only with a plugin that imports it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from trainer.errors import UserError
from trainer.method_rules import MethodDefinition, MethodEntry, register_method


class PluginNotFound(UserError):
    """A plugin item that names no file or module, or one that defines no method: the study's line is the place
    to fix (the other failures name the plugin's own FILE:LINE)."""


# a plugin file's resolved path -> (the sha256 of its source, its module, its source) as imported
_PLUGIN_MODULES: dict[str, tuple[str, Any, str]] = {}


def is_plugin_file(spec: str) -> bool:
    """A `plugins:` item names a file (ends in .py or holds a /), else an importable module."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def resolved_plugin(spec: str, folder: Path) -> str:
    """A `plugins:` item as the workers import it: a file's absolute path (relative to `folder`), a module as is."""
    return str((folder / Path(spec).expanduser()).resolve()) if is_plugin_file(spec) else spec


def load_plugins(specs: list[str], folder: Path | None = None) -> list[MethodEntry]:
    """Import each plugin (a file, relative to `folder`, or a module) and register the methods it defines; the
    entries, in order. A UserError on one line, FILE:LINE where there is one: a missing file or module, an
    exception on import, a file that defines no method, a wrong declaration."""
    entries: list[MethodEntry] = []
    for spec in specs:
        if is_plugin_file(spec):
            path = Path(resolved_plugin(spec, folder or Path.cwd()))
            entries += _register(_import_file(path, spec), spec, str(path))
        else:
            entries += _register(_import_module(spec), spec, spec)
    return entries


def _register(module: Any, spec: str, origin: str) -> list[MethodEntry]:
    """Register the methods a plugin module defines, as coming from `origin` (its file's path on the driver)."""
    found = [obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, MethodDefinition)
             and obj.__module__ == module.__name__ and "name" in obj.__dict__]
    if not found:
        raise PluginNotFound(f"plugin {spec}: defines no method; expected a class with a `name` that "
                             "subclasses trainer.methods.Method (or trainer.method_rules.MethodDefinition)")
    return [register_method(definition, origin) for definition in found]


def plugin_sources(specs: list[str]) -> dict[str, str]:
    """Each plugin file (resolved) -> its source as this process imported it: what a trial carries to a node
    that does not see the driver's disk (load_checked_plugins)."""
    sources = {}
    for spec in specs:
        imported = _PLUGIN_MODULES.get(spec) if is_plugin_file(spec) else None
        if imported is not None:
            sources[spec] = imported[2]
    return sources


def plugin_digests(specs: list[str]) -> dict[str, str]:
    """Each resolved plugin item (resolved_plugin) -> the sha256 of its source: a file's as this process imported it
    (as it is now when not imported), a module's file as it is now."""
    digests = {}
    for spec in specs:
        if is_plugin_file(spec):
            imported = _PLUGIN_MODULES.get(spec)
            digests[spec] = imported[0] if imported is not None else _sha256(Path(spec))
        else:
            module = sys.modules.get(spec)
            path = getattr(module, "__file__", None)
            digests[spec] = _sha256(Path(path)) if path else "unknown"
    return digests


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _import_file(path: Path, spec: str) -> Any:
    if not path.is_file():
        raise PluginNotFound(f"plugin {spec}: no such file ({path}); plugin files are relative to the study "
                             "file's folder")
    source = path.read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    known = _PLUGIN_MODULES.get(str(path))
    if known is not None and known[0] == digest:
        return known[1]
    name = f"contrastive_sweep_plugin_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise UserError(f"{_failing_line(exc, path)}: plugin {spec} failed on import: {_one_line(exc)}") from None
    _PLUGIN_MODULES[str(path)] = (digest, module, source.decode("utf-8", errors="replace"))
    return module


def _import_module(spec: str) -> Any:
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and spec.startswith(exc.name):
            raise PluginNotFound(f"plugin {spec}: no module of that name on this Python's path; name a file "
                                 "(dcl.py) or install the package that holds it") from None
        raise UserError(f"plugin {spec} failed on import: {_one_line(exc)}") from None
    except Exception as exc:
        found = importlib.util.find_spec(spec)
        file = found.origin if found is not None else None
        place = _failing_line(exc, Path(file)) + ": " if file else ""
        raise UserError(f"{place}plugin {spec} failed on import: {_one_line(exc)}") from None


def _failing_line(exc: BaseException, path: Path) -> str:
    """FILE:LINE of the deepest frame of `exc` in `path` (a SyntaxError's own line), else the file alone."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{path}:{exc.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if Path(frame.filename).resolve() == path.resolve()]
    return f"{path}:{lines[-1]}" if lines else str(path)


def _one_line(exc: BaseException) -> str:
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return f"{type(exc).__name__}: {' '.join(str(text).split())}"[:300]


def loaded_plugin_digests() -> dict[str, str]:
    """Each plugin this process registered, by where the driver found it (a file's path, a module's name, an entry
    point) -> the sha256 of the source imported (a module's file as it is now): what trainer.provenance records of
    the researcher's code, the same on every node whichever copy of the file a node imported."""
    from trainer.method_rules import plugin_entries

    imported = {path: digest for path, (digest, _, _) in _PLUGIN_MODULES.items()}
    sources = {entry.origin: entry.source_file for entry in plugin_entries() if entry.source_file}
    return {origin: imported.get(path) or _sha256(Path(path)) for origin, path in sorted(sources.items())}


def load_checked_plugins(expected: dict[str, str], sources: dict[str, str] | None = None) -> None:
    """Import the plugins a driver imported (a file's absolute path or a module's name -> the sha256 of its source
    there) and check that this process runs the same source. A file this node does not hold, or holds in another
    version (another copy, or edited since the driver started), is imported from `sources` (the driver's text,
    plugin_sources) written to a folder of this node's temp dir; a UserError naming the plugin otherwise."""
    for spec, digest in expected.items():
        if not is_plugin_file(spec):
            _register(_import_module(spec), spec, spec)
            here = plugin_digests([spec])[spec]
        else:
            path = Path(spec)
            if _sha256(path) != digest:
                path = _shipped_copy(spec, digest, (sources or {}).get(spec))
            _register(_import_file(path, spec), spec, spec)
            here = _PLUGIN_MODULES[str(path)][0]
        if here != digest:
            raise UserError(f"plugin {spec}: this node's source (sha256 {here[:12]}) is not the one the driver "
                            f"imported ({digest[:12]}); install the same version on every node")


def _shipped_copy(spec: str, digest: str, source: str | None) -> Path:
    """The driver's source of a plugin file, written once per digest under this node's temp dir."""
    if source is None or hashlib.sha256(source.encode()).hexdigest() != digest:
        raise UserError(f"plugin {spec}: this node does not hold the source the driver imported (sha256 "
                        f"{digest[:12]}) and the trial carries none; start `sweep run` again")
    folder = Path(tempfile.gettempdir()) / "contrastive-sweep-plugins" / digest[:16]
    path = folder / Path(spec).name
    if _sha256(path) != digest:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{path.name}.{os.getpid()}"
        partial.write_text(source, encoding="utf-8")
        os.replace(partial, path)
    return path
