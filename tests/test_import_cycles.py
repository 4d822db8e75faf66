"""No import cycles among the project's modules, counting function-local imports: an
import inside a function still makes the two modules depend on each other, it only hides it. Imports under
`if TYPE_CHECKING:` are left out: they name a type for annotations and never run. And dependencies point
one way between the packages: sweep -> trainer, sweep -> analysis -> trainer.

Read from the source with `ast` (nothing is imported), so it costs milliseconds.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.deadlines import scaled
from tests.helpers import REPO

PACKAGES = ("sweep", "analysis", "trainer")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file (a package's __init__ counts as the package);
    imports under `if TYPE_CHECKING:` only with `type_checking`."""
    paths = {module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        tree = ast.parse(path.read_text())
        type_only = set() if type_checking else {id(n) for block in ast.walk(tree) if _is_type_checking_block(block)
                                                 for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from sweep.spec import expand` may name a submodule or a name in the package
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                if target in paths and target != name and not name.startswith(target + "."):
                    graph[name].add(target)  # a module importing its own package's __init__ is no cycle
    return graph


def _is_type_checking_block(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_function_local_cycle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_no_import_cycles_in_the_project():
    graph = import_graph()
    assert "sweep.spec.expand" in graph["sweep.spec.load"]  # the graph is read (imports seen)
    assert "trainer.models" in graph["sweep.run.preflight"]  # function-local imports are seen (in preflight_inputs)
    assert cycles(graph) == []


def test_type_checking_imports_are_left_out():
    graph = import_graph()
    assert "trainer.config" not in graph["trainer.methods.base"]  # `if TYPE_CHECKING:` only


def test_dependencies_point_one_way_between_the_packages():
    graph = import_graph()
    wrong = sorted((name, target) for name, targets in graph.items() for target in targets
                   if (name.startswith("trainer") and target.startswith(("sweep", "analysis")))
                   or (name.startswith("analysis") and target.startswith("sweep")))
    assert wrong == []


def study_run_modules() -> set[str]:
    """sweep.run.runner and every sweep module it reaches: the modules a study run is made of."""
    graph = import_graph()
    seen, todo = set(), ["sweep.run.runner"]
    while todo:
        name = todo.pop()
        if name not in seen and name.startswith("sweep"):
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


def test_the_study_run_is_split_into_modules_of_at_most_400_lines_each_saying_what_it_owns():
    paths = {module_name(p): p for p in (REPO / "sweep").rglob("*.py")}
    modules = study_run_modules()
    assert {"sweep.run.stopping", "sweep.run.ray_session", "sweep.run.feed", "sweep.run.trial_events",
            "sweep.records.mirror"} <= modules
    too_long = {name: n for name in modules if (n := len(paths[name].read_text().splitlines())) > 400}
    assert too_long == {}
    assert [name for name in modules if ast.get_docstring(ast.parse(paths[name].read_text())) is None] == []


def test_no_two_modules_import_each_other_not_even_for_types():
    graph = import_graph(type_checking=True)
    assert sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph[b]) == []


def test_no_module_of_trainer_sweep_or_analysis_is_over_500_lines():
    # one job per file: a module that grows past this has taken on a second job (split it by job)
    lengths = {str(path.relative_to(REPO)): len(path.read_text().splitlines())
               for package in PACKAGES for path in (REPO / package).rglob("*.py")}
    assert len(lengths) > 60 and any(name.startswith("analysis") for name in lengths)
    assert {name: n for name, n in lengths.items() if n > 500} == {}


def test_train_reads_as_named_phases_of_at_most_80_lines():
    tree = ast.parse((REPO / "trainer" / "train.py").read_text())
    functions = {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert {"_set_up", "_step", "_evaluate_and_select", "_final_evaluation", "_summary"} <= set(functions)
    assert {name: n for name, n in functions.items() if n > 80} == {}


# sweep/'s layers, bottom first (sweep/__init__.py): a module imports its own layer and those below only.
SWEEP_LAYERS = (("sweep.text", "sweep.signal_latch"), ("sweep.spec",), ("sweep.records",), ("sweep.run",),
                ("sweep.commands",), ("sweep.cli", "sweep.__main__", "sweep"))


def sweep_layer(name: str) -> int:
    """The layer of a sweep module: the deepest layer prefix it falls under (the package `sweep` is the top)."""
    for index, prefixes in enumerate(SWEEP_LAYERS):
        if any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes if prefix != "sweep"):
            return index
    assert name == "sweep", f"{name} is in no layer of sweep/: add its folder to SWEEP_LAYERS"
    return len(SWEEP_LAYERS) - 1


def test_sweep_layers_import_downwards_only():
    graph = import_graph()
    sweep_modules = [name for name in graph if name == "sweep" or name.startswith("sweep.")]
    upward = sorted((name, target) for name in sweep_modules for target in graph[name]
                    if (target == "sweep" or target.startswith("sweep.")) and sweep_layer(target) > sweep_layer(name))
    assert upward == []


def test_sweep_top_level_keeps_at_most_six_plain_modules():
    plain = sorted(p.stem for p in (REPO / "sweep").glob("*.py") if p.stem not in ("__init__", "__main__", "cli"))
    assert len(plain) <= 6, plain
    assert [p.name for p in (REPO / "sweep").iterdir() if p.is_dir() and not (p / "__init__.py").exists()
            and p.name != "__pycache__"] == []
    for package in ("spec", "records", "run", "commands"):
        assert ast.get_docstring(ast.parse((REPO / "sweep" / package / "__init__.py").read_text())), package


def test_the_public_api_loads_lazily_and_names_real_objects():
    code = ("import sys, sweep\nassert 'ray' not in sys.modules and 'sweep.run.runner' not in sys.modules\n"
            "print(sorted(n for n in sweep.__all__ if getattr(sweep, n) is None))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=scaled(120))
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr


# ---- each name is imported from the module that owns it ------------------------------------------------
def top_level_definitions(path: Path) -> tuple[set[str], set[str]]:
    """(names a module defines itself, names it only imports), at its top level and in its if/try blocks."""
    defined: set[str] = set()
    imported: set[str] = set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            todo += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
    return defined, imported


def borrowed_names(roots: tuple[str, ...] = ("trainer", "sweep", "analysis", "tests", "bench", "scripts")
                   ) -> list[str]:
    """`from M import name` anywhere under `roots` where M is a project module (not a package's __init__,
    the one place a name may be re-exported) that only imports `name` from elsewhere."""
    modules = {module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}
    definitions: dict[Path, tuple[set[str], set[str]]] = {}  # each source module read once
    found = []
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules):
                    continue
                source = modules[node.module]
                if source.name == "__init__.py":
                    continue
                if source not in definitions:
                    definitions[source] = top_level_definitions(source)
                defined, imported = definitions[source]
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {alias.name} from {node.module}"
                          for alias in node.names if alias.name not in defined and alias.name in imported]
    return found


def test_the_borrowed_name_finder_finds_a_re_export(tmp_path, monkeypatch):
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("from trainer.owner import NAME\n")
    (package / "owner.py").write_text("NAME = 1\n")
    (package / "shim.py").write_text("from trainer.owner import NAME  # noqa: F401\n")
    (package / "user.py").write_text("from trainer.shim import NAME\nfrom trainer.owner import NAME\n"
                                     "from trainer import NAME\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert borrowed_names(("trainer",)) == ["trainer/user.py:1: NAME from trainer.shim"]


def test_each_name_is_imported_from_the_module_that_owns_it():
    assert borrowed_names() == []


# ---- trainer/'s layout ---------------------------------------------------------------------------------
def test_trainer_shows_its_subsystems():
    plain = sorted(p.stem for p in (REPO / "trainer").glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(plain) <= 20, plain
    packages = sorted(p.name for p in (REPO / "trainer").iterdir() if (p / "__init__.py").is_file())
    assert "evaluation" in packages
    for package in packages:
        assert ast.get_docstring(ast.parse((REPO / "trainer" / package / "__init__.py").read_text())), package


def test_the_light_modules_import_no_torch():
    """The modules the sweep driver and the analysis read load no torch, and neither does `sweep run --dry-run`."""
    light = ["trainer.evaluation", "trainer.evaluation.sts", "trainer.evaluation.sts_average",
             "trainer.evaluation.transfer_data", "trainer.evaluation.cache", "trainer.evaluation.score_table",
             "trainer.schedules", "trainer.slices", "trainer.mtd", "trainer.vocabulary", "trainer.method_rules",
             "trainer.config", "trainer.summary", "trainer.run_plan"]
    study = REPO / "studies" / "quickstart.yaml"
    code = (f"import sys, importlib\nfor name in {light!r}:\n    importlib.import_module(name)\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
            "from sweep.cli import main\n"
            f"code = main(['run', {str(study)!r}, '--dry-run'])\n"
            "print(code, sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    env = {**os.environ, "SWEEP_DATA_DIR": os.environ.get("SWEEP_DATA_DIR", "")}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=scaled(120), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "[]" and lines[-1] == "0 []", result.stdout
