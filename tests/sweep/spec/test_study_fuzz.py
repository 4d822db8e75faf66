"""Generated study files: every one is refused with exit 2 and one line, or accepted.
Property-based, with hypothesis.

Each case is a study generated from the schema (the study keys, the trainer config's fields and types) or
one of studies/ mutated (a value replaced by an awkward one, keys added or removed, parameters, constraints
and budgets added, the YAML text itself cut, nested or given an alias bomb). It runs through the CLI entry
in this process, as `sweep run --dry-run` and as `sweep run` up to its first write (the results folder's
lock), and the test asserts:

- exit 2 with exactly one line "sweep: error: ..." and no traceback, or a study accepted (exit 0);
- the real run refuses what the dry run refuses, with the same line, and refuses more only for what this
  machine lacks (CPUs or GPUs, a model, data);
- nothing is written, and the train function is never called;
- each case within CASE_SECONDS, under an address-space limit (RLIMIT_AS) of the process's size + 2 GB.

An accepted study then runs once more, in another folder, through the run's own planning (the results
folder, Optuna's storage and distributions, trials.csv: `sweep.run.opening.open_study`), stopped before Ray starts:
it must plan without an error.

CI runs SWEEP_FUZZ_EXAMPLES (default 300) cases from a fixed seed; `SWEEP_FUZZ_EXAMPLES=10000` (and
SWEEP_FUZZ_SEED=N for another draw) is the long run. A case it finds becomes a file in tests/bad_studies/.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import faulthandler
import io
import os
import resource
import signal
import tempfile
import time
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.deadlines import scaled
from tests.helpers import REPO

EXAMPLES = int(os.environ.get("SWEEP_FUZZ_EXAMPLES", "300"))
FUZZ_SEED = int(os.environ.get("SWEEP_FUZZ_SEED", "20261125"))
CASE_SECONDS = 20.0  # a case past this fails; past 120 s the process dumps its stacks and ends (faulthandler)
MEMORY_HEADROOM = 2 << 30
TRAIN_CALLS: list[Any] = []  # SWEEP_TRAIN_FN points here: it must stay empty
OUTCOMES: collections.Counter = collections.Counter()  # what the cases came to, printed at the end (-s)

# Refusals of the real run that the dry run cannot know: what this machine has (sweep.run.preflight), and a
# database server it reaches (the dry run shows the trials with "note: trial states unknown").
MACHINE_REFUSALS = ("resources: a trial asks for", "cannot load model", "model folder", "model path",
                    "data directory", "data file", "corpus", "cannot look at", "loggers: ",
                    "cannot open Optuna storage postgresql", "cannot read the Optuna storage postgresql")


def train_spy(config: Any, report: Any = None) -> dict[str, Any]:
    TRAIN_CALLS.append(config)
    raise AssertionError("a generated study reached the train function")


# ---- what studies are made of ------------------------------------------------------------------------------
def _normalised(data: dict[str, Any]) -> dict[str, Any]:
    """A study of studies/ made cheap and runnable here: the embedded model, the corpus sample, one CPU, at
    most three values per swept key and two seeds (the mutations grow them again)."""
    data = copy.deepcopy(data)
    base = data.setdefault("base", {})
    base["model"] = "embedded"
    base.pop("device", None)
    if isinstance(base.get("data"), dict) and base["data"].get("corpus") == "wiki1m":
        base["data"]["corpus"] = "wiki1m_sample"
    data["resources"] = {"cpu": 1, "gpu": 0}
    for key, values in list((data.get("parameters") or {}).items()):
        if key == "model":
            data["parameters"][key] = ["embedded"]
        elif isinstance(values, list):
            data["parameters"][key] = values[:3]
    data["seeds"] = list(data.get("seeds") or [42])[:2]
    if data.get("budget"):
        data["budget"] = min(data["budget"], 4)
    return data


SEED_STUDIES = [_normalised(yaml.safe_load(path.read_text())) for path in sorted((REPO / "studies").glob("*.yaml"))]
STUDY_KEYS = ["name", "description", "base", "parameters", "seeds", "method", "budget", "metric", "resources",
              "scheduler", "storage", "results_dir", "constraints", "keep_weights", "reuse_workers", "loggers",
              "analysis", "tracking"]
SECTION_KEYS = ["goal", "cpu", "gpu", "type", "grace_period", "reduction_factor", "max_t", "knobs", "mlflow_uri",
                "wandb_project", "distribution", "low", "high", "step", "choices", "expr"]


def _field_names() -> list[str]:
    from trainer.config import field_names

    return [name for name in field_names() if name not in ("seed", "output_dir")]


FIELDS = _field_names()
NAMES_IN_EXPRESSIONS = ["queue.size", "queue.initial_size", "ema.decay", "batch_size", "method", "seed", "optim.lr",
                        "fgsm.eps", "mix.lam", "max_steps"]

AWKWARD_STRINGS = [
    "", " ", "x", "embedded", "mocose", "simcse", "gs", "mix", "grid", "random", "tpe", "cosine", "constant",
    "all", "0-64", "64-128", "0-4096", "0-8+8-16", "best", "none", "dev_stsb", "align", "tensorboard", "maximize",
    "asha", "released", "paper", "cpu", "cuda", "auto", "fp16", "avg", "STSBenchmark", "MR", "wiki1m_sample",
    "/dev/null", "/proc/self", "/sys", "/nonexistent-fuzz/x", "~nosuchuser-fuzz/x", "~", "x" * 300, "a/" * 2100,
    "a\x00b", "\ud800", "é", "\x1b[31m", "line\nbreak", "sqlite:///sub/o.db", "sqlite:///o.db", "sqlite://",
    "postgresql://u@127.0.0.1:1/db", "mysql://u@127.0.0.1:1/db", "http://127.0.0.1:1", "queue.size >= 1",
    "ema.decay * 2", "1/0 > 1", "1" + "0" * 400 + " / 3 > 1", "__import__('os')", "{expr: 1}", "5e-9", "1e999",
    "2024-13-45", "yes", "null", "*a", "&a", "!!binary", "%", "@", "`",
]
AWKWARD_NUMBERS = [0, 1, -1, 2, 3, 4, 8, 16, 64, 100, 128, 512, 15000, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30,
                   10**400, 0.0, -0.0, 0.5, 0.9, 0.99, 1.0, 1.5, 1e-5, 1e-4, 5e-9, 1e-300, 1e308, float("inf"),
                   float("-inf"), float("nan")]
SCALARS = st.one_of(
    st.sampled_from(AWKWARD_NUMBERS), st.sampled_from(AWKWARD_STRINGS), st.booleans(), st.none(),
    st.integers(min_value=-(10**20), max_value=10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.dates(),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(FIELDS + STUDY_KEYS + SECTION_KEYS), st.text(max_size=6)),
                    inner, max_size=3)), max_leaves=8)


def _mostly(usual: st.SearchStrategy, rare: st.SearchStrategy) -> st.SearchStrategy:
    """`usual` nine times in ten: a study with one odd value reaches the checks behind the first ones."""
    return st.sampled_from([True] * 9 + [False]).flatmap(lambda take_usual: usual if take_usual else rare)


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    """A small grammar over the study expression language, with its edges (huge numbers, division by 0)."""
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return draw(st.one_of(
            st.sampled_from(NAMES_IN_EXPRESSIONS),
            st.integers(-5, 1000).map(str),
            st.sampled_from(["0", "1e308", "0.5", "'mocose'", "True", "None", "1" + "0" * 100, "queue.bogus", "_x",
                             "2"])))
    left, right = draw(expressions(depth + 1)), draw(expressions(depth + 1))
    operator = draw(st.sampled_from(["+", "-", "*", "/", "//", "%", "==", "!=", "<", "<=", ">", ">=", "and", "or"]))
    text = f"{left} {operator} {right}"
    return f"({text})" if draw(st.booleans()) else (f"not {text}" if draw(st.integers(0, 5)) == 0 else text)


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _of_type(annotation: Any) -> st.SearchStrategy:
    """Mostly valid values of a trainer config type (a few awkward ones come from VALUES elsewhere)."""
    annotation = _unwrap(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[_of_type(arg) for arg in args])
    if origin is list:
        return st.lists(_of_type(args[0]), min_size=1, max_size=3)
    if origin is tuple:
        return st.tuples(*[_of_type(arg) for arg in args])
    if annotation is type(None):
        return st.none()
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.one_of(st.integers(0, 600), st.sampled_from([1, 2, 8, 16, 64, 128, 512, 1024]))
    if annotation is float:
        return st.one_of(st.floats(0, 1, exclude_max=True), st.sampled_from([0.0, 0.5, 0.9, 5e-9, 3e-5, 1.0, 2.0]))
    if annotation is str:
        return st.sampled_from(["embedded", "all", "0-64", "64-128", "0-8", "STSBenchmark", "wiki1m_sample", "cpu"])
    return VALUES


def _annotation(key: str) -> Any:
    from trainer.config import RunConfig

    *section, last = key.split(".")
    model = RunConfig.model_fields[section[0]].annotation if section else RunConfig
    return model.model_fields[last].annotation


def value_of(key: str) -> st.SearchStrategy:
    if key == "model":
        return st.just("embedded")
    if key.startswith("data.") and key != "data.max_length":
        return st.one_of(st.none(), st.sampled_from(["wiki1m_sample", "/dev/null", "nope", "x" * 300]))
    return st.one_of(_of_type(_annotation(key)), _of_type(_annotation(key)), _of_type(_annotation(key)), SCALARS)


@st.composite
def swept(draw: st.DrawFn, key: str, method: str) -> Any:
    """What `parameters` holds for one key: a list, a distribution or an {expr}."""
    shape = draw(st.sampled_from(["list", "list", "list", "expr", "distribution"]))
    if shape == "expr":
        return {"expr": draw(expressions())}
    if shape == "distribution":
        kind = draw(st.sampled_from(["uniform", "loguniform", "int", "categorical", "normal"]))
        if kind == "categorical":
            return {"distribution": kind, "choices": draw(st.lists(value_of(key), min_size=1, max_size=3))}
        low, high = draw(st.sampled_from(AWKWARD_NUMBERS[:20] + [0.1, 0.2])), draw(st.sampled_from(AWKWARD_NUMBERS))
        out = {"distribution": kind, "low": low, "high": high}
        if draw(st.booleans()):
            out["step"] = draw(st.sampled_from([1, 2, 0.1, 0.05, 1e-300, 0, -1]))
        return out
    values = draw(st.lists(value_of(key), min_size=0 if draw(st.integers(0, 20)) == 0 else 1, max_size=3))
    if values and draw(st.integers(0, 4)) == 0:
        values.append({"expr": draw(expressions())})
    return values


# The study keys beside name, base and parameters: usual values, their edges, sometimes anything.
TOP_LEVEL = {
    "seeds": _mostly(st.lists(st.integers(0, 5), min_size=1, max_size=3), VALUES),
    "metric": _mostly(st.fixed_dictionaries({"name": st.sampled_from(["dev_stsb", "avg", "align", "x"])}), VALUES),
    "resources": _mostly(st.fixed_dictionaries({"cpu": st.sampled_from([1, 0.5, 0.25]), "gpu": st.just(0)}),
                         st.fixed_dictionaries({"cpu": st.sampled_from([1, 0.5, 2, 3, 1e-5, 1.5e-4, 0, -1, 1e300]),
                                                "gpu": st.sampled_from([0, 0.5, 1, 1.5, 1e-5])})),
    "scheduler": st.one_of(st.none(), st.fixed_dictionaries({"type": st.just("asha")}, optional={
        "grace_period": st.integers(0, 3), "max_t": st.one_of(st.none(), st.integers(0, 5))})),
    "storage": st.sampled_from(["sqlite:///o.db", "sqlite:///o.db", "sqlite:///sub/o.db", "sqlite:////dev/null",
                                "sqlite:///results/n/optuna.db", "sqlite:///results/x.db", "sqlite:///./o.db",
                                "postgresql://u@127.0.0.1:1/db", "sqlite:///" + "s" * 300 + ".db",
                                "postgres://u@h/db"]),
    "results_dir": _mostly(st.sampled_from(["results", "out/r", ".", "r s"]),
                           st.sampled_from(["/dev/null", "/proc/self", "/sys/fuzz", "a\x00b", "study.yaml",
                                            "study.yaml/x", "~nosuchuser-fuzz", "/"])),
    "constraints": st.lists(expressions(), max_size=3),
    "keep_weights": st.sampled_from(["best", "all", "none", 2, -1, "some"]),
    "reuse_workers": st.booleans(),
    "loggers": st.lists(st.sampled_from(["tensorboard", "mlflow", "wandb", "tensorbord"]), max_size=2),
    "analysis": st.fixed_dictionaries({"knobs": st.lists(st.sampled_from(["mtd", "ema.decay", "x"]), max_size=2)}),
    "description": SCALARS,
}


@st.composite
def generated_studies(draw: st.DrawFn) -> dict[str, Any]:
    """A study drawn from the schema: its keys with values of their types, sometimes awkward ones."""
    method = draw(st.sampled_from(["grid"] * 6 + ["random"] * 3 + ["tpe"] * 2 + ["bayes"]))
    data: dict[str, Any] = {
        "name": draw(_mostly(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,12}", fullmatch=True), SCALARS)),
        "base": {"model": "embedded", "max_steps": draw(st.sampled_from([None, 30, 1000, 10**9]))},
    }
    for key in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        _set_dotted(data["base"], key, draw(value_of(key)))
    parameters = {key: draw(swept(key, method))
                  for key in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True))}
    if parameters or draw(st.booleans()):
        data["parameters"] = parameters
    if method != "grid" or draw(st.integers(0, 19)) == 0:
        data["method"] = method
        data["budget"] = draw(_mostly(st.integers(1, 6), st.sampled_from([0, 10**9, 10**400, "ten"])))
    for key in draw(st.lists(st.sampled_from(list(TOP_LEVEL)), max_size=4, unique=True)):
        data[key] = draw(TOP_LEVEL[key])
    return data


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    *sections, last = key.split(".")
    node = data
    for part in sections:
        node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
    node[last] = value


def _paths(data: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, path + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += _paths(value, path + (index,))
    return out


def _get(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


def _replacement(path: tuple) -> st.SearchStrategy:
    """A new value for the one at `path`: of the config key's type where there is one, else anything."""
    if len(path) >= 2 and path[0] == "base":
        key = ".".join(str(part) for part in path[1:3])
        if key in FIELDS or path[1] in FIELDS:
            return _mostly(value_of(key if key in FIELDS else str(path[1])), VALUES)
    if len(path) >= 2 and path[0] == "parameters" and str(path[1]) in FIELDS:
        return _mostly(value_of(str(path[1])) if len(path) > 2 else swept(str(path[1]), "grid"), VALUES)
    if path[:1] == ("name",):
        return _mostly(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True), VALUES)
    if len(path) == 1 and path[0] in TOP_LEVEL:
        return _mostly(TOP_LEVEL[path[0]], VALUES)
    return VALUES


@st.composite
def mutated(draw: st.DrawFn, data: dict[str, Any]) -> dict[str, Any]:
    """One change to a study's data: a value replaced, a key dropped or added, a parameter, a constraint."""
    data = copy.deepcopy(data)
    paths = [p for p in _paths(data) if p][::-1]  # deepest first: hypothesis favours the first choices
    operation = draw(st.sampled_from(["replace", "replace", "replace", "drop", "add", "base", "base", "parameter",
                                      "parameter", "constraint", "budget", "duplicate", "wrap"]))
    if operation in ("replace", "drop", "duplicate", "wrap") and paths:
        path = draw(st.sampled_from(paths))
        parent = _get(data, path[:-1])
        if operation == "replace":
            parent[path[-1]] = draw(_replacement(path))
        elif operation == "drop":
            del parent[path[-1]]
        elif operation == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        elif operation == "wrap":
            parent[path[-1]] = draw(st.sampled_from([[parent[path[-1]]], {"expr": parent[path[-1]]}]))
    elif operation == "add":
        mappings = [p for p in _paths(data) if isinstance(_get(data, p), dict)]
        where = _get(data, draw(st.sampled_from(mappings)))
        key = draw(st.one_of(st.sampled_from(STUDY_KEYS + FIELDS + SECTION_KEYS), st.text(max_size=8)))
        where[key] = draw(VALUES)
    elif operation == "base" and isinstance(data.get("base"), dict):
        key = draw(st.sampled_from(FIELDS))
        _set_dotted(data["base"], key, draw(value_of(key)))
    elif operation == "parameter":
        if not isinstance(data.get("parameters"), dict):
            data["parameters"] = {}
        key = draw(st.sampled_from(FIELDS))
        data["parameters"][key] = draw(swept(key, str(data.get("method", "grid"))))
    elif operation == "constraint":
        constraints = data.get("constraints") if isinstance(data.get("constraints"), list) else []
        data["constraints"] = [*constraints, draw(expressions())]
    else:
        data["method"] = draw(st.sampled_from(["random", "tpe", "grid"]))
        usual = st.none() if data["method"] == "grid" else st.integers(1, 8)
        data["budget"] = draw(_mostly(usual, st.sampled_from([None, 0, 3, 10**9])))
    return data


@st.composite
def text_mutated(draw: st.DrawFn, text: str) -> str:
    """The YAML text changed as a file can be: cut short, a line dropped or doubled, nested, an alias bomb."""
    lines = text.splitlines()
    operation = draw(st.sampled_from(["cut", "drop_line", "double_line", "nest", "alias_bomb", "garbage"]))
    if operation == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if operation in ("drop_line", "double_line") and lines:
        index = draw(st.integers(0, len(lines) - 1))
        lines[index: index + 1] = [] if operation == "drop_line" else [lines[index], lines[index]]
        return "\n".join(lines) + "\n"
    if operation == "nest":
        depth = draw(st.sampled_from([5, 19, 21, 50, 600, 1200]))
        return text + "seeds: " + "[" * depth + "1" + "]" * depth + "\n"
    if operation == "alias_bomb":
        width, levels = draw(st.integers(2, 10)), draw(st.integers(2, 9))
        bomb = "\n".join([f"  b0: &b0 [{', '.join(['x'] * width)}]"]
                         + [f"  b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * width)}]" for i in range(1, levels)])
        key = draw(st.sampled_from(["description", "name", "seeds", "zz"]))
        return "\n".join(line for line in lines if not line.startswith(f"{key}:")) + f"\n{key}:\n{bomb}\n"
    return text + draw(st.sampled_from(["\n:", "\n- x", "\n\t", "\nname: again\n", "\n...\n---\n", "\n%YAML 1.1\n",
                                        "\na: !!python/object:os.system x\n", "\n? [a]\n: 1\n"]))


def _dump(data: Any) -> str:
    try:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, UnicodeError):  # a value YAML cannot write (a lone surrogate): write it quoted
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=False)


@st.composite
def study_files(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["mutated"] * 8 + ["generated"] * 6 + ["text"] * 2 + ["tuned"] * 4))
    if kind == "generated":
        data = draw(generated_studies())
    elif kind == "tuned":  # values of the right types only: these reach the expansion, MTD and the run's checks
        data = copy.deepcopy(draw(st.sampled_from(SEED_STUDIES)))
        for _ in range(draw(st.integers(1, 3))):
            key = draw(st.sampled_from(FIELDS))
            if draw(st.booleans()):
                _set_dotted(data["base"], key, draw(_of_type(_annotation(key))))
            else:
                data.setdefault("parameters", {})[key] = draw(st.lists(_of_type(_annotation(key)), min_size=1,
                                                                       max_size=3, unique_by=repr))
    else:
        data = draw(st.sampled_from(SEED_STUDIES))
        for _ in range(draw(st.integers(1, 3))):
            data = draw(mutated(data))
    text = _dump(data)
    return draw(text_mutated(text)) if kind == "text" else text


# ---- one case: the CLI in this process ---------------------------------------------------------------------
class _WouldWrite(BaseException):
    """Raised where `sweep run` takes its results folder's lock: everything before it ran, nothing was written."""


class _Planned(BaseException):
    """Raised where `sweep run` would start Ray, after it planned the study (sweep.run.opening.open_study)."""


STOP_AT = {"where": "lock", "home": str(REPO)}  # where the run stops: "lock" (its first write) or "ray" (after
# planning, before Ray starts); "home": the folder the test process comes back to after a case

def _cli(args: list[str]) -> tuple[int | str, str, str]:
    from sweep import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str = cli.main(args)
        except _WouldWrite:
            code = "accepted"
        except _Planned:
            code = "planned"
    return code, out.getvalue(), err.getvalue()


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("sweep: error: "), err[-3000:]
    assert "Traceback" not in err and len(lines[0]) < 2100, err[-3000:]
    return lines[0]


def check_one_study(text: str) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz") as folder:
        os.chdir(folder)
        Path("study.yaml").write_text(text, encoding="utf-8", errors="replace")
        started = time.monotonic()
        faulthandler.dump_traceback_later(scaled(120), exit=True)
        try:
            dry = _cli(["run", "study.yaml", "--dry-run"])
            real = _cli(["run", "study.yaml"])
        finally:
            faulthandler.cancel_dump_traceback_later()
            os.chdir(STOP_AT["home"])
        took = time.monotonic() - started
        written = sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))
    assert written == ["study.yaml"], written
    planned = _planned(text) if real[0] == "accepted" else None
    assert TRAIN_CALLS == []
    assert took < scaled(CASE_SECONDS), took
    code, out, err = dry
    OUTCOMES["refused" if code == 2 else "accepted" if real[0] == "accepted" else "refused by the run only"] += 1
    assert code in (0, 2), (code, err[-3000:])
    if code == 2:
        line = _one_error_line(err)
        assert out == "", out[-2000:]
        assert real[0] == 2 and _one_error_line(real[2]) == line, (line, real)
    else:
        assert "Traceback" not in err, err[-3000:]
        if real[0] != "accepted":
            assert real[0] == 2, real
            line = _one_error_line(real[2])
            assert any(word in line for word in MACHINE_REFUSALS), f"refused by the run only: {line}"
    if planned is not None and planned[0] != "planned":
        assert planned[0] == 2, planned
        line = _one_error_line(planned[2])
        assert any(word in line for word in MACHINE_REFUSALS), f"refused by the run's plan only: {line}"
    elif planned is not None:
        assert "Traceback" not in planned[2] and "warning" not in planned[2].lower(), planned[2][-3000:]
    assert TRAIN_CALLS == []


def _planned(text: str) -> tuple[int | str, str, str]:
    """`sweep run` of an accepted study up to where Ray would start, in a folder of its own."""
    with tempfile.TemporaryDirectory(prefix="fuzzplan") as folder:
        os.chdir(folder)
        Path("study.yaml").write_text(text, encoding="utf-8", errors="replace")
        STOP_AT["where"] = "ray"
        faulthandler.dump_traceback_later(scaled(120), exit=True)
        try:
            return _cli(["run", "study.yaml"])
        finally:
            STOP_AT["where"] = "lock"
            faulthandler.cancel_dump_traceback_later()
            os.chdir(STOP_AT["home"])


@pytest.fixture()
def fuzz_process(monkeypatch):
    """The process set up for the cases: offline, the spy as the train function, the run stopped at its
    first write, and (after Ray and the checks are imported) an address-space limit."""
    import sweep.run.runner

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SWEEP_TRAIN_FN", f"{__name__}:train_spy")
    monkeypatch.setenv("SWEEP_DATA_DIR", os.environ.get("SWEEP_DATA_DIR") or str(REPO / ".data"))

    locked = sweep.run.runner.StudyRun.locked

    def lock_or_stop(self):
        if STOP_AT["where"] == "lock":
            raise _WouldWrite()
        return locked(self)

    def plan_only(self, address, max_concurrent):
        try:
            self.prepare()
        finally:
            if self.ledger is not None:
                self.ledger.mirror.wait_for_note(timeout=scaled(60))  # its thread writes into the folder about to go
        raise _Planned()

    monkeypatch.setattr(sweep.run.runner.StudyRun, "locked", lock_or_stop)
    monkeypatch.setattr(sweep.run.runner.StudyRun, "execute", plan_only)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    STOP_AT["home"] = os.getcwd()
    check_one_study(_dump(SEED_STUDIES[0]))  # warm up: imports, the data's checksums, the model check
    with contextlib.suppress(ImportError):  # a PostgreSQL storage's driver, mapped before the memory limit
        import psycopg2  # noqa: F401
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = int(next(line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmSize:"))) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + MEMORY_HEADROOM, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_every_study_in_studies_is_accepted(fuzz_process):
    for data in SEED_STUDIES:
        check_one_study(_dump(data))


# Cases the generator found, kept (the refused ones are files in tests/bad_studies/).
FOUND = {
    # tpe: the run planned with the base alone, invalid without its swept K (K0 1024 > the default 512), and
    # refused what the dry run accepted, with no line of the file
    "tpe base completed by a swept key": "name: t\nbase:\n  model: embedded\n  queue: {initial_size: 1024}\n"
    "parameters:\n  queue.size: {distribution: int, low: 1024, high: 2048}\nmethod: tpe\nbudget: 2\n",
    # a PostgreSQL storage out of reach (or without its driver): the dry run shows the trials with a note,
    # the run refuses it in one line when it opens the storage
    "a storage out of reach": "name: '0'\nbase:\n  model: embedded\n  max_steps: null\n"
    "storage: postgresql://u@127.0.0.1:1/db\n",
}


@pytest.mark.parametrize("name", list(FOUND))
def test_found_cases(fuzz_process, name):
    check_one_study(FOUND[name])


@pytest.mark.slow  # 300 generated studies: the full suite's (the found cases above stay in the fast tier)
def test_generated_studies_are_refused_in_one_line_or_accepted(fuzz_process):
    started = time.monotonic()
    run = seed(FUZZ_SEED)(settings(
        max_examples=EXAMPLES, deadline=None, database=None, derandomize=False, print_blob=True,
        suppress_health_check=list(HealthCheck))(given(study_files())(check_one_study)))
    OUTCOMES.clear()
    run()
    print(f"{EXAMPLES} generated studies in {time.monotonic() - started:.0f} s (seed {FUZZ_SEED}): "
          f"{dict(OUTCOMES)}")
