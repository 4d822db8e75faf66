"""The test suite's layout: tests/ mirrors the packages (trainer/, sweep/, analysis/, plus e2e/ for the slow
end-to-end tests), and no test module imports another: what several of them use is in tests/helpers.py.

Read from the source with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

TESTS = REPO / "tests"
# the modules under tests/ a test module may import: the helpers, the fake trainer, the import hook and the
# namespace cluster (conftest.py's fixtures come by name, never by import)
IMPORTABLE = {"tests.helpers", "tests.fake_train", "tests.signal_at_import", "tests.cluster.netns_cluster"}
FOLDERS = {"trainer", "sweep", "analysis", "e2e"}


def all_test_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def local_modules() -> set[str]:
    """Every module under tests/, by its dotted name (tests.e2e.test_stop, tests.helpers, ...)."""
    names = {module_name(p) for p in TESTS.rglob("*.py") if p.name != "__init__.py"}
    return names | {module_name(p.parent) for p in TESTS.rglob("__init__.py")}


def imported_names(path: Path, package: str) -> set[str]:
    """What a module imports anywhere in its file (function-local imports too), absolute or relative,
    as dotted names: `from tests import helpers` gives tests and tests.helpers."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return names


def test_no_test_module_imports_another_test_module():
    local = local_modules()
    # bare names, as the flat tests/ folder on sys.path once allowed (`from test_stop import ...`)
    bare = {path.stem for path in all_test_modules()} | {"analysis_fixtures", "cluster", "conftest", "helpers"}
    found = {}
    for path in all_test_modules():
        package = module_name(path.parent)
        imported = imported_names(path, package)
        wrong = sorted(name for name in imported
                       if (name in local and name not in IMPORTABLE and name != "tests")
                       or name.split(".")[0] in bare)
        if wrong:
            found[str(path.relative_to(REPO))] = wrong
    assert found == {}, "import from tests.helpers instead: " + repr(found)


def test_the_helpers_import_no_test_module():
    imported = imported_names(TESTS / "helpers.py", "tests")
    assert not {name for name in imported if name in local_modules() and name not in IMPORTABLE}


def test_test_modules_live_in_the_package_folders():
    folders = {path.parent.relative_to(TESTS).as_posix() for path in all_test_modules()}
    assert folders <= FOLDERS | {"."}, folders
    for folder in FOLDERS:
        assert (TESTS / folder / "__init__.py").is_file(), folder  # distinct module names: tests.<folder>.test_x
    assert (TESTS / "__init__.py").is_file()

