"""trainer.vocabulary is the one place the project's words are written: the task names, poolers, methods and
trial statuses. These tests keep it so: the config allows exactly its poolers and methods, every status any
module writes or compares is in its table, and no other module spells out an STS task name or a second copy
of one of its lists (read from the source with `ast`, so docstrings and comments do not count).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
import subprocess
import sys
import typing

import optuna

from tests.helpers import REPO
from trainer.config import RunConfig
from trainer.method_rules import method_label, method_names, registered
from trainer.summary import Summary, analysis_row, trials_csv_row
from trainer.vocabulary import (
    FINAL_FAIL_STATUSES,
    FINAL_STATUSES,
    GS_INFONCE,
    MIXCSE,
    MOCOSE,
    POOLERS,
    RESULT_STATUSES,
    SIMCSE,
    STS_TASK_LABELS,
    STS_TASKS,
    TRAINED_STATUSES,
    TRANSFER_TASK_LABELS,
    TRANSFER_TASKS,
    TRIAL_STATUSES,
    TrialState,
    ends_for_good,
    optuna_state_name,
)

VOCABULARY = "trainer/vocabulary.py"
LISTS = {"STS_TASKS": STS_TASKS, "TRANSFER_TASKS": TRANSFER_TASKS, "POOLERS": POOLERS,
         "TRIAL_STATUSES": tuple(TRIAL_STATUSES)}


def project_sources() -> dict[str, ast.Module]:
    """Every module of the three packages, parsed, by its path from the repository root."""
    return {path.relative_to(REPO).as_posix(): ast.parse(path.read_text())
            for package in ("trainer", "sweep", "analysis") for path in sorted((REPO / package).rglob("*.py"))}


def _strings(node: ast.AST) -> set[str]:
    """The string constants of a constant or of a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {text for item in node.elts for text in _strings(item)}
    return set()


def _is_status(node: ast.AST) -> bool:
    """`status`, `x.status`, `x["status"]` or `x.get("status")`."""
    if isinstance(node, ast.Name):
        return node.id == "status"
    if isinstance(node, ast.Attribute):
        return node.attr == "status"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "status"
    return False


def status_literals(tree: ast.AST) -> set[str]:
    """The statuses a module spells out: {"status": ...}, status=..., comparisons with a status, assignments
    to one (`run.status, run.reason = "diverged", ...`) and `status` parameters' defaults."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            found |= {text for key, value in zip(node.keys, node.values)
                      if isinstance(key, ast.Constant) and key.value == "status" for text in _strings(value)}
        elif isinstance(node, ast.keyword) and node.arg == "status":
            found |= _strings(node.value)
        elif isinstance(node, ast.Compare) and any(_is_status(n) for n in (node.left, *node.comparators)):
            found |= {text for n in (node.left, *node.comparators) for text in _strings(n)}
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if _is_status(target):
                    found |= _strings(node.value)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    found |= {text for t, v in zip(target.elts, node.value.elts) if _is_status(t)
                              for text in _strings(v)}
        elif isinstance(node, ast.AnnAssign) and _is_status(node.target) and node.value is not None:
            found |= _strings(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            defaults = [*zip(positional[len(positional) - len(args.defaults):], args.defaults),
                        *zip(args.kwonlyargs, args.kw_defaults)]
            found |= {text for arg, default in defaults if arg.arg == "status" and default is not None
                      for text in _strings(default)}
    return found


# ---- what the vocabulary holds ----------------------------------------------------------------------
def test_the_vocabulary_imports_no_torch_no_optuna_and_no_project_module():
    code = ("import sys, trainer.vocabulary, trainer.summary; "
            "print(sorted(m for m in ('torch', 'optuna', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
    tree = ast.parse((REPO / VOCABULARY).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name for name in imported if name.split(".")[0] in ("trainer", "sweep", "analysis")}
    assert ast.get_docstring(tree)


def test_the_labels_cover_every_name():
    assert tuple(STS_TASK_LABELS) == STS_TASKS and tuple(TRANSFER_TASK_LABELS) == TRANSFER_TASKS
    assert all(method_label(name) != name for name in method_names())  # every registered method has a label
    assert len(set(STS_TASKS + TRANSFER_TASKS)) == 14


def test_the_config_allows_exactly_the_vocabularys_poolers_and_methods():
    fields = RunConfig.model_fields
    assert typing.get_args(fields["pooler"].annotation) == POOLERS
    assert RunConfig().pooler in POOLERS and RunConfig().method in method_names()
    assert [name for name, entry in registered().items() if entry.origin == "built in"] == [
        SIMCSE, MOCOSE, GS_INFONCE, MIXCSE]  # the built-in methods, registered as plugins are


# ---- the trial states ---------------------------------------------------------------------------------
# issue 80's grep for a state spelled out, and the same with a status after it (`f"FAIL/{status}"`)
STATE_LITERAL = re.compile(r'"(COMPLETE|PRUNED|FAIL|RUNNING|WAITING|PENDING)["/]')


def test_the_trial_states_are_spelled_out_in_the_enum_only():
    found = [(path.relative_to(REPO).as_posix(), line.strip())
             for package in ("sweep", "trainer", "analysis", "bench", "scripts")
             for path in sorted((REPO / package).rglob("*.py"))
             for line in path.read_text().splitlines() if STATE_LITERAL.search(line)]
    assert found == [(VOCABULARY, f'{state.name} = "{state.value}"') for state in TrialState]


def test_the_states_are_optunas_by_name_and_the_sweeps_pending():
    assert {state.name for state in optuna.trial.TrialState} | {"PENDING"} == {state.name for state in TrialState}
    assert {status.optuna_state for status in TRIAL_STATUSES.values()} == {
        TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL}


def test_a_state_is_its_name_wherever_it_is_written():
    """trials.csv, JSON, pandas columns and printed tables hold the same bytes as when the states were strings."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([[state] for state in TrialState])
    assert buffer.getvalue() == "".join(f"{state.name}\n" for state in TrialState)
    for state in TrialState:
        assert state == state.name and hash(state) == hash(state.name) and isinstance(state, str)
        assert str(state) == f"{state}" == f"{state:>8}".strip() == "%s" % state == state.name
        assert json.dumps({"state": state}) == json.dumps({"state": state.name})
        assert TrialState(state.name) is TrialState[state.name] is state
    assert ends_for_good(TrialState.COMPLETE, None) and ends_for_good(TrialState.FAIL, "diverged")


# ---- the trial statuses -------------------------------------------------------------------------------
def test_each_status_maps_to_an_optuna_state():
    for name, status in TRIAL_STATUSES.items():
        assert status.name == name and status.meaning
        assert optuna.trial.TrialState[status.optuna_state].is_finished()
        assert optuna_state_name(name) == status.optuna_state
    assert optuna_state_name(None) == optuna_state_name("unknown") == optuna_state_name(["ok"]) == "FAIL"


def test_the_derived_status_lists_are_the_ones_the_sweep_always_used():
    assert FINAL_STATUSES == ("ok", "diverged", "collapsed", "pruned")
    assert FINAL_FAIL_STATUSES == ("diverged", "collapsed")
    assert RESULT_STATUSES == ("ok", "diverged", "collapsed", "pruned", "dropped", "duplicate")
    assert TRAINED_STATUSES == ("ok", "diverged", "collapsed")
    assert {name: s.optuna_state for name, s in TRIAL_STATUSES.items() if s.optuna_state != "FAIL"} == {
        "ok": "COMPLETE", "pruned": "PRUNED"}


def test_a_key_ends_for_good_when_complete_pruned_or_failed_with_a_final_status():
    for status in (*TRIAL_STATUSES, None):
        assert ends_for_good("COMPLETE", status) and ends_for_good("PRUNED", status)
        assert ends_for_good("FAIL", status) == (status in ("diverged", "collapsed"))
        assert not ends_for_good("RUNNING", status)


def test_the_status_finder_sees_writes_comparisons_and_defaults():
    source = ('summary = {"status": "a"}\nrun.status, run.reason = "b", "why"\nx.update(status="c")\n'
              'if summary.get("status") in ("d", "e"): pass\nif row["status"] != "f": pass\n'
              'def fail(status="g"): pass\nstatus: str = "h"\nlabel = "not a status"\n')
    assert status_literals(ast.parse(source)) == set("abcdefgh")


def test_every_status_a_module_writes_or_compares_is_in_the_table():
    # sweep/run/node_watch.py compares Ray Tune's Trial.status (PENDING, RUNNING), not a summary's status
    used = {path: status_literals(tree) for path, tree in project_sources().items()
            if path != "sweep/run/node_watch.py"}
    unknown = {path: names - set(TRIAL_STATUSES) for path, names in used.items() if names - set(TRIAL_STATUSES)}
    assert unknown == {}


# ---- written once -----------------------------------------------------------------------------------
def test_the_sts_task_names_are_string_literals_in_the_vocabulary_only():
    found: dict[str, set[str]] = {}
    for path, tree in project_sources().items():
        names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in STS_TASKS}
        if names:
            found[path] = names
    assert found == {VOCABULARY: set(STS_TASKS)}


def test_no_module_writes_a_second_copy_of_a_vocabulary_list():
    copies = []
    for path, tree in project_sources().items():
        if path == VOCABULARY:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                continue
            written = [item.value for item in node.elts if isinstance(item, ast.Constant)]
            for name, names in LISTS.items():
                if set(written) == set(names):
                    copies.append((path, node.lineno, name, tuple(written)))
    assert copies == []


def test_no_module_but_the_registry_lists_the_methods():
    """The methods are the registry's (trainer.method_rules; the vocabulary names the built-in ones once): no other
    module writes a collection of three or more method names (as text or as the vocabulary's names) that could
    drift from it."""
    texts = {SIMCSE, MOCOSE, GS_INFONCE, MIXCSE}
    names = {"SIMCSE", "MOCOSE", "GS_INFONCE", "MIXCSE"}
    lists = []
    for path, tree in project_sources().items():
        if path in ("trainer/method_rules.py", VOCABULARY):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                written = {item.value for item in node.elts if isinstance(item, ast.Constant)} & texts
                written |= {item.id for item in node.elts if isinstance(item, ast.Name)} & names
                if len(written) >= 3:
                    lists.append((path, node.lineno, sorted(written)))
    assert lists == []


def test_both_views_of_a_summary_agree_on_the_columns_they_share():
    summary = Summary.from_json({
        "status": "ok", "reason": None, "steps": 10, "best_step": 5, "best_dev_stsb": 80.1,
        "precision": "fp32", "mtd": {"formula": 12.5, "measured": 11.0, "ema_age": 3},
        "test": {task: 70.0 for task in STS_TASKS} | {"avg": 70.0}, "transfer": {"MR": 80.0, "avg": 80.0},
        "config": {"seed": 1, "method": "mocose", "queue": {"size": 8}}})
    csv_row, analysed = trials_csv_row(summary), analysis_row(summary)
    shared = set(csv_row) & set(analysed)
    assert {name: csv_row[name] for name in shared} == {name: analysed[name] for name in shared}
    assert set(csv_row) - set(analysed) == {"mtd_measured"}
    assert {"method", "queue.size", "transfer_mode", "variant"} <= set(analysed) - set(csv_row)
