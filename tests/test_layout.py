"""The test suite's layout: tests/ mirrors the packages (trainer/, sweep/, analysis/ and their subpackages, plus
e2e/ for the slow end-to-end tests), and no test module imports another: what several of them use is in tests/helpers.py
(and tests/synthetic_results.py).

Read from the source with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import REPO

TESTS = REPO / "tests"
PROJECT_PACKAGES = ("trainer", "sweep", "analysis")
# the modules under tests/ a test module may import: the helpers, the synthetic results, the deadlines, the fake
# trainer, the statistics written out as references, the import hook and the namespace cluster (conftest.py's
# fixtures come by name, never by import)
IMPORTABLE = {"tests.helpers", "tests.synthetic_results", "tests.deadlines", "tests.fake_train", "tests.written_out",
              "tests.signal_at_import", "tests.cluster.netns_cluster"}
# tests/<package>/ and tests/<package>/<subpackage>/ as the project's packages are laid out; e2e: the slow
# end-to-end tests; docs: the site (tests/docs)
FOLDERS = {"trainer", "sweep", "analysis", "e2e", "docs", "sweep/spec", "sweep/records", "sweep/run", "sweep/commands",
           "trainer/evaluation", "trainer/methods", "trainer/losses", "trainer/method_rules"}


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


def test_the_test_folders_mirror_the_packages():
    """Each test folder under tests/trainer, tests/sweep and tests/analysis is a package of the project, and each
    subpackage of trainer/ and sweep/ has its test folder with tests in it."""
    for package in PROJECT_PACKAGES:
        packages = {p.parent.relative_to(REPO).as_posix() for p in (REPO / package).rglob("__init__.py")}
        folders = {p.parent.relative_to(TESTS).as_posix() for p in (TESTS / package).rglob("test_*.py")}
        assert folders <= packages, sorted(folders - packages)
    for package in ("trainer", "sweep"):
        for sub in sorted((REPO / package).iterdir()):
            if (sub / "__init__.py").is_file():
                assert list((TESTS / package / sub.name).glob("test_*.py")), f"no tests/{package}/{sub.name}/"



def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_reached(path: Path) -> list[str]:
    """The project's private names a test file reaches: imported (`from trainer.train import _x`), read or
    patched through a module or object it imported from the project (`train._x`, `setattr(train, "_x", ...)`),
    or named in a dotted string (`"sweep.cli._cmd_status"`)."""
    source = path.read_text()
    tree = ast.parse(source)
    from_project: set[str] = set()  # local names bound to the project's modules and objects
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            from_project |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                             if alias.name.split(".")[0] in PROJECT_PACKAGES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PROJECT_PACKAGES:
            from_project |= {alias.asname or alias.name for alias in node.names}
            found += [f"{node.module}.{alias.name}" for alias in node.names if _is_private(alias.name)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in from_project:
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setattr" and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            if (isinstance(name, ast.Constant) and isinstance(name.value, str) and _is_private(name.value)
                    and isinstance(target, ast.Name) and target.id in from_project):
                found.append(f"{target.id}.{name.value}")
    dotted = r"[\'\"]((?:%s)\.[\w.]*\._[a-z]\w*)" % "|".join(PROJECT_PACKAGES)
    found += [match.group(1) for match in re.finditer(dotted, source)]
    return found


def test_no_test_reaches_a_private_name_of_the_project():
    # Tests use what the packages make public (sweep/__init__.py's API, the modules' public names): a
    # private name may change or go without notice, and a test leaning on it pins the code's insides.
    checked = [path for path in sorted(TESTS.rglob("*.py")) if path != Path(__file__)]  # not its own examples
    found = {str(path.relative_to(REPO)): names for path in checked if (names := private_names_reached(path))}
    assert found == {}


def test_the_private_name_check_finds_each_kind_of_reach(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("import trainer.train as train_mod\nfrom sweep import cli\nfrom sweep.spec import _hidden\n"
                    "def test(monkeypatch):\n    train_mod._DevEvaluator\n    monkeypatch.setattr(cli, '_cmd', 1)\n"
                    "    monkeypatch.setattr('sweep.cli._cmd_status', 1)\n    self._own = 1\n")
    assert private_names_reached(path) == ["sweep.spec._hidden", "train_mod._DevEvaluator", "cli._cmd",
                                           "sweep.cli._cmd_status"]
