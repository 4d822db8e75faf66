"""Study specs: loading, validation errors (one line, with file/key/line), expansion, dry run."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from sweep.commands.dry_run import format_trial_table, print_dry_run, read_trial_states
from sweep.run.preflight import preflight_paths
from sweep.spec import (
    expand,
    load_study,
    search_space,
    trial_from_params,
    trial_key,
)
from tests.deadlines import scaled
from tests.helpers import REPO, first_fast, study_file
from trainer.errors import UserError

STUDIES = sorted((REPO / "studies").glob("*.yaml"))
BAD_STUDIES = REPO / "tests" / "bad_studies"
_CONSOLE_SCRIPT = Path(sys.executable).parent / "sweep"  # the installed `sweep` command
SWEEP = [str(_CONSOLE_SCRIPT)] if _CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "sweep"]

# study file -> (trials, lowest MTD, highest MTD); MTD None where no trial is MoCoSE.
def np_mean_cosine_eta(steps: int, eta0: float = 0.75, eta1: float = 0.95, period: int | None = None,
                       hold: bool = True) -> float:
    """The mean of the cosine EMA schedule over steps 1..steps, written out with NumPy."""
    t = np.arange(1, steps + 1, dtype=np.float64)
    period = period or steps
    if hold:
        t = np.minimum(t, period)
    return float(np.mean(eta1 - (eta1 - eta0) * (np.cos(np.pi * t / period) + 1) / 2))


def paper_eta_term(batch: int) -> float:
    """1/(1 - mean eta) of the paper's schedule (0.75 -> 0.95) over one epoch of wiki1m (1,000,000 sentences)."""
    return 1 / (1 - np_mean_cosine_eta(1_000_000 // batch))


RELEASED_ETA_TERM = 1 / (1 - np_mean_cosine_eta(1_000_000 // 64, 0.75, 1.0, period=15000, hold=False))
P64 = round(paper_eta_term(64) + 8, 2)  # K 512, B 64
EXPECTED_STUDIES = {
    "quickstart": (8, 6.0, 18.0),
    "mtd_grid": (36, 5.0, 42.0),
    "queue_slice": (15, round(paper_eta_term(256) + 2, 2), round(paper_eta_term(256) + 4, 2)),
    "queue_init": (60, round(paper_eta_term(64) + 2, 2), round(paper_eta_term(64) + 64, 2)),
    "ema_decay": (18, 10.0, 108.0),
    "fgsm_epsilon": (27, P64, P64),
    "batch_size": (12, round(paper_eta_term(256) + 2, 2), round(paper_eta_term(32) + 16, 2)),
    "proj_pred": (36, P64, P64),
    "predictor_dim": (15, P64, P64),
    "symmetric_collapse": (6, 9.0, 9.0),
    "gaussian_m": (24, None, None),
    "mix_lambda": (35, None, None),
    "methods": (40, *sorted([P64, round(RELEASED_ETA_TERM + 8, 2)])),
}

# malformed study file -> (line the error names, a fragment of the message)
BAD = {
    "unknown_top_level_key.yaml": (6, "key 'seed' is not a study key"),
    "unknown_parameter_key.yaml": (6, "did you mean 'queue.size'"),
    "unknown_base_key.yaml": (5, "key 'base.queue.sizes' is unknown"),
    "wrong_value_type.yaml": (7, "expected a number, got 'high'"),
    "unknown_final_task.yaml": (5, "key 'base.eval.final_tasks': unknown task 'embedded': choose from STS12"),
    "empty_final_tasks.yaml": (5, "key 'base.eval.final_tasks': an empty list names no task: leave "
                                  "eval.final_tasks out for the seven STS tasks"),
    "empty_grid.yaml": (5, "non-empty list"),
    "negative_queue_size.yaml": (5, "expected a number >= 0, got -128"),
    "bad_storage_url.yaml": (6, "key 'storage'"),
    "missing_base_model.yaml": (2, "key 'base.model' is missing"),
    "duplicate_keys.yaml": (6, "key 'base.queue.size' is written twice (first on line 5)"),
    "invalid_yaml.yaml": (6, "not valid YAML"),
    "not_a_mapping.yaml": (1, "expected a mapping of study keys"),
    "empty.yaml": (1, "empty"),
    "bad_method.yaml": (6, "expected one of grid, random, tpe, got 'bayes'"),
    "random_without_budget.yaml": (6, "needs a budget"),
    "bad_metric_name.yaml": (7, "key 'metric.name'"),
    "bad_distribution.yaml": (6, "got 'normal'"),
    "bad_constraint_syntax.yaml": (7, "invalid syntax"),
    "unsafe_constraint.yaml": (7, "function calls"),
    "unsafe_expr_value.yaml": (8, "names starting with '_'"),
    "initial_size_over_size_in_base.yaml": (6, "key 'base.queue.initial_size'"),
    "distribution_in_grid.yaml": (5, "needs method random or tpe"),
    "bad_resources.yaml": (7, "key 'resources.cpu'"),
    "bad_seeds.yaml": (6, "key 'seeds[1]'"),
    "bad_name.yaml": (1, "key 'name'"),
    "bad_keep_weights.yaml": (6, "key 'keep_weights': expected best, all, none or a number"),
    "bad_loggers.yaml": (6, "did you mean 'tensorboard'"),
    # found by generating studies (tests/sweep/spec/test_study_fuzz.py)
    "overflow_in_constraint.yaml": (7, "overflows a float (beyond 1e308)"),
    "overflow_in_expr.yaml": (6, "key 'parameters.optim.lr': expr '1000"),
    "nul_in_results_dir.yaml": (6, "key 'results_dir': the text 'a\\x00b' holds a NUL character"),
    "nested_too_deep.yaml": (4, "nested more than 20 levels deep"),
    "epochs_overflow.yaml": (5, "key 'base.epochs': expected a number <= 1000000.0, got 1e+308"),
    "results_dir_not_a_folder.yaml": (6, "key 'results_dir': the study folder '/dev/null/bad' cannot be made: "
                                         "'/dev/null' is not a folder"),
    "results_dir_in_proc.yaml": (6, "'/proc/self' is on the proc filesystem"),
    "data_dir_too_long.yaml": (5, "key 'base.data.data_dir': expected a path whose every part is at most 255 bytes"),
    "cpu_below_ray_unit.yaml": (6, "key 'resources.cpu': expected 0 or at least 0.0001"),
    "alias_bomb_in_name.yaml": (6, "key 'name.a4[7]': the aliases expand the file by more than 100,000 values"),
    "alias_bomb_in_base.yaml": (8, "key 'base.a4[7]': the aliases expand the file by more than 100,000 values"),
    "budget_over_space.yaml": (7, "key 'budget': 1,000,000,000 is more than the 2 configurations"),
    "grid_too_large.yaml": (4, "1,000,000 trials, more than the 100,000 a study plans unasked"),
    "storage_folder_missing.yaml": (6, "key 'storage': the folder 'sub' of the SQLite file does not exist"),
    "integer_too_long.yaml": (4, "not valid YAML: cannot read '9999"),
    "impossible_date.yaml": (2, "cannot read '2024-13-45' as a date (month must be in 1..12); quote it"),
    # found by tests/sweep/spec/test_study_fuzz.py
    "gpu_beyond_ray.yaml": (8, "key 'resources.gpu': expected at most 1e14 (Ray counts resources in ten-thousandths"),
    "step_too_fine.yaml": (4, "Optuna cannot sample this distribution: its step splits high - low into too many"),
    "swept_key_with_a_bad_base_value.yaml": (4, "key 'base.batch_size': expected an integer, got [64]"),
    "alias_of_a_long_text.yaml": (5, "key 'constraints[497]': the aliases expand the file by more than 100,000"),
}
# Refused by `sweep run` and its dry run, not by load_study: what the machine's folders allow.
PATH_REFUSALS = {"results_dir_not_a_folder.yaml", "results_dir_in_proc.yaml", "storage_folder_missing.yaml"}

GRID_HEAD = """\
name: t
base:
  model: embedded
  method: mocose
  batch_size: 32
"""


def load_text(tmp_path: Path, text: str) -> object:
    return load_study(study_file(tmp_path, text))


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*SWEEP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=scaled(60))


# ---- the studies shipped in studies/ -------------------------------------------------------------
def test_every_study_has_an_expectation():
    assert {p.stem for p in STUDIES} == set(EXPECTED_STUDIES)


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_study_loads_and_expands(path, capsys):
    spec = load_study(path)
    trials = expand(spec)
    count, low, high = EXPECTED_STUDIES[path.stem]
    assert len(trials) == count
    assert len({t.key for t in trials}) == count
    assert spec.description, "each study says what it reproduces"
    mtds = [t.mtd for t in trials if t.mtd is not None]
    if low is None:
        assert not mtds
    else:
        assert round(min(mtds), 2) == low and round(max(mtds), 2) == high
    print_dry_run(spec)
    out = capsys.readouterr().out
    assert re.search(rf"^trials:\s+{count} \(", out, re.M)
    mtd_line = "- (no MoCoSE trials)" if low is None else f"{low:.2f} to {high:.2f}"
    assert re.search(rf"^MTD:\s+{re.escape(mtd_line)}", out, re.M)
    for trial in trials:
        assert re.fullmatch(r"[0-9a-f]{12}", trial.key)
        assert trial.config["seed"] == trial.seed
        assert trial.key == trial_key(trial.requested, trial.seed)  # what the study set, not the resolved config


def test_quickstart_dry_run_from_the_command_line(tmp_path):
    result = run_cli("run", str(REPO / "studies" / "quickstart.yaml"), "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert re.search(r"^trials:\s+8 \(8 configurations x 1 seed; 0 combinations dropped", result.stdout, re.M)
    assert re.search(r"^MTD:\s+6\.00 to 18\.00", result.stdout, re.M)
    rows = [line for line in result.stdout.splitlines() if re.match(r"^[0-9a-f]{12}\s", line)]
    assert len(rows) == 8
    assert "ema.decay" in result.stdout and "queue.slices" in result.stdout
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_queue_init_dry_run_from_the_command_line(tmp_path):
    result = run_cli("run", str(REPO / "studies" / "queue_init.yaml"), "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^trials:\s+60 \(20 configurations x 3 seeds", result.stdout, re.M)
    low, high = EXPECTED_STUDIES["queue_init"][1:]
    assert re.search(rf"^MTD:\s+{low:.2f} to {high:.2f}", result.stdout, re.M)


def test_planning_a_study_does_not_import_torch(tmp_path):
    """The dry run, `sweep status` and a resume plan every trial (queue_init's MTD counts the corpus for
    its cosine EMA schedule) without training: torch's import was 1.2-1.8 s of each."""
    code = ("import sys\nfrom sweep.commands.dry_run import print_dry_run\nfrom sweep.spec import load_study\n"
            f"print_dry_run(load_study({str(REPO / 'studies' / 'queue_init.yaml')!r}))\n"
            "print('torch imported:', 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=scaled(120))
    assert result.returncode == 0, result.stderr
    assert re.search(r"^MTD:\s+\d", result.stdout, re.M)
    assert result.stdout.rstrip().endswith("torch imported: False")


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    # `sweep run STUDY --dry-run | head -1`: the pipe closes before (most of) the output is written; the
    # command stops as a shell tool does on SIGPIPE (141), with no traceback and no "Exception ignored".
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([*SWEEP, "run", str(REPO / "studies" / "queue_init.yaml"), "--dry-run"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=scaled(60)) == 141 and err == "", err


# ---- malformed studies ---------------------------------------------------------------------------
def test_every_bad_study_is_listed():
    assert {p.name for p in BAD_STUDIES.glob("*.yaml")} == set(BAD)
    assert (BAD_STUDIES / "empty.yaml").stat().st_size == 0


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_study_raises_one_line_user_error(name):
    line, fragment = BAD[name]
    path = BAD_STUDIES / name
    with pytest.raises(UserError) as info:
        spec = load_study(path)
        if name in PATH_REFUSALS:
            preflight_paths(spec)
    message = str(info.value)
    assert "\n" not in message and len(message) <= 600
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message


@pytest.fixture(scope="module")
def bad_study_runs(request, tmp_path_factory) -> Callable[[str, bool], tuple[subprocess.CompletedProcess, Path]]:
    """(name, dry_run) -> `sweep run FILE [--dry-run]` of that bad study in its own empty folder. The first
    call for a mode runs every bad study this session selected in that mode concurrently (process start-up
    dominates)."""
    done: dict[bool, dict[str, tuple[subprocess.CompletedProcess, Path]]] = {}
    selected = {(item.callspec.params["name"], item.callspec.params["dry_run"]) for item in request.session.items
                if item.originalname == "test_bad_study_exits_2_with_one_line_and_writes_nothing"}

    def run_all(dry_run: bool) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
        folders = {}
        for name in sorted(name for name, mode in selected if mode == dry_run):
            folder = tmp_path_factory.mktemp("bad")
            (folder / name).write_bytes((BAD_STUDIES / name).read_bytes())
            folders[name] = folder
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = pool.map(lambda name: run_cli("run", name, *(["--dry-run"] if dry_run else []),
                                                    cwd=folders[name]), folders)
            return {name: (result, folders[name]) for name, result in zip(folders, results)}

    def result(name: str, dry_run: bool) -> tuple[subprocess.CompletedProcess, Path]:
        if dry_run not in done:
            done[dry_run] = run_all(dry_run)
        return done[dry_run][name]

    return result


# Both modes stop at the same checks before anything starts, each a process of its own; the fast tier runs one
# (every bad study's message is test_bad_study_raises_one_line_user_error's, in this process), the full suite all.
@pytest.mark.parametrize("name, dry_run", first_fast(*[(name, dry_run) for dry_run in (True, False)
                                                       for name in sorted(BAD)]),
                         ids=lambda value: {True: "dry-run", False: "run"}.get(value, value))
def test_bad_study_exits_2_with_one_line_and_writes_nothing(bad_study_runs, name, dry_run):
    line, fragment = BAD[name]
    result, folder = bad_study_runs(name, dry_run)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"sweep: error: {name}:{line}: ")
    assert fragment in result.stderr
    assert sorted(p.name for p in folder.iterdir()) == [name]  # no results/, no optuna.db, no 'pwned'


YAML_CORNERS = [
    "a: 5e-9\nb: [1e-3, 2E+4, 1_000]\n",  # epsilons without a dot are floats
    "base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  x: 2\n",  # anchors, merge keys overridden beside them
    "a: yes\nb: ~\nc: 0x1f\nd: '5e-9'\ne: 2026-11-25\n",  # YAML 1.1 booleans, null, hex, quoted, dates
    "list:\n- {expr: \"queue.size // 4\"}\n- - 0-256\n  - 256-512\n",
    "# only a comment\n",
    "a:\n  b: 1\n  b: 2\n",  # a duplicate key: the error
    "a: [1, 2\nb: 3\n",  # not valid YAML: the error
]


@pytest.mark.parametrize("text", [pytest.param(p.read_text(), id=p.name)
                                  for p in sorted([*STUDIES, *BAD_STUDIES.glob("*.yaml")])]
                         + [pytest.param(text, id=f"corner{i}") for i, text in enumerate(YAML_CORNERS)])
def test_libyaml_reads_a_study_exactly_as_the_pure_python_parser(text):
    """parse_yaml reads with libyaml and falls back to the pure-Python parser for the error's wording: the
    data and the line of every key path must be what the pure-Python parser alone gives."""
    from sweep.spec import key_lines

    def read(loader):
        try:
            data, where = key_lines.load_with(loader, text, "f.yaml")
            return data, where.lines
        except (key_lines.yaml.YAMLError, key_lines.DuplicateKey) as exc:
            return "error", type(exc).__name__
        except (key_lines.Refused, RecursionError):  # too deep: libyaml's walk refuses it, Python's parser overflows
            return "error", "refused"
    assert issubclass(key_lines.FastStudyLoader, key_lines.yaml.CSafeLoader)  # PyYAML's wheels ship libyaml
    assert read(key_lines.FastStudyLoader) == read(key_lines.StudyLoader)
    try:
        parsed: object = key_lines.parse_yaml(text, "f.yaml")
    except UserError as exc:
        parsed = str(exc)
    try:
        expected: object = key_lines.load_with(key_lines.StudyLoader, text, "f.yaml")
    except (key_lines.yaml.YAMLError, key_lines.DuplicateKey, key_lines.Refused, RecursionError):
        expected = None  # parse_yaml words it; the bad-study tests check the wording
    if expected is not None:
        assert (parsed[0], parsed[1].lines) == (expected[0], expected[1].lines)
    else:
        assert isinstance(parsed, str) and parsed.startswith("f.yaml:")


def test_comment_only_file_is_empty(tmp_path):
    with pytest.raises(UserError, match=r":1: the study file is empty"):
        load_text(tmp_path, "# nothing here\n")


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such study file"):
        load_study(tmp_path / "nope.yaml")


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true') == 0",
    "queue.size.__class__ == 1",
    "(lambda: 1)() == 1",
    "[1][0] == 1",
    "queue.size ** 99 > 1",
    "open('x') == 1",
    "queue.size if True else 1",
    "queue.size in [1]",
    "queue.bogus > 1",
    "f'{queue.size}' == '1'",
])
def test_unsafe_or_unknown_constraints_are_refused(tmp_path, expression):
    text = GRID_HEAD + f"parameters:\n  queue.size: [128]\nconstraints:\n  - \"{expression}\"\n"
    with pytest.raises(UserError, match=r"study\.yaml:\d+: key 'constraints\[0\]'"):
        load_text(tmp_path, text)


@pytest.mark.parametrize("url", ["postgres://u@h/db", "sqlite://", "sqlite:///:memory:", "http://h/db",
                                 "postgresql://host", 42])
def test_bad_storage_urls(tmp_path, url):
    with pytest.raises(UserError, match="key 'storage'"):
        load_text(tmp_path, GRID_HEAD + f"storage: {url!r}\n")


@pytest.mark.parametrize("url", ["sqlite:///results/t/optuna.db", "postgresql://user@db.example/optuna",
                                 "postgresql+psycopg2://u:p@localhost:5432/optuna", "mysql+pymysql://u@h/optuna"])
def test_good_storage_urls(tmp_path, url):
    assert load_text(tmp_path, GRID_HEAD + f"storage: '{url}'\n").storage == url


def test_defaults(tmp_path):
    spec = load_text(tmp_path, GRID_HEAD)
    assert spec.seeds == [42] and spec.method == "grid" and spec.results_dir == "results"
    assert spec.metric.name == "dev_stsb" and spec.metric.goal == "maximize"
    assert spec.storage is None and spec.storage_url == "sqlite:///results/t/optuna.db"
    assert len(expand(spec)) == 1  # no parameters: the base once per seed
    assert load_text(tmp_path, GRID_HEAD + "metric: {name: uniform}\n").metric.goal == "minimize"


@pytest.mark.parametrize("extra, fragment", [
    ("resources: {cpu: 1, gpu: 1.5}\n", "resources.gpu"),
    ("resources: {cpu: 1, tpu: 1}\n", "resources.tpu"),
    ("budget: 5\n", "key 'budget'"),
    ("scheduler: {type: hyperband}\n", "scheduler.type"),
    ("scheduler: {grace_period: 0}\n", "scheduler.grace_period"),
    ("seeds: [1, 1]\n", "listed twice"),
    ("parameters:\n  queue.size: [128, 128]\n", "listed twice"),
    ("parameters:\n  seed: [1, 2]\n", "set per trial"),
    ("parameters:\n  ema.decay: 0.9\n", "a fixed value belongs in base"),
    ("parameters:\n  ema.decay: [1.5]\n", "expected a number < 1.0, got 1.5"),
    ("parameters:\n  queue.slices: [[\"0-256\"], [\"0-4096\"]]\n", "queue.slices"),
    ("parameters:\n  queue.size: [128]\n  queue.initial_size: [{expr: \"queue.size / 3\"}]\n", "gave 42.666"),
])
def test_more_bad_values(tmp_path, extra, fragment):
    with pytest.raises(UserError) as info:
        load_text(tmp_path, GRID_HEAD + extra)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("base, parameters", [
    ("  queue: {initial_size: 1024}\n", "  queue.size: [1024, 2048]\n"),
    ("  queue: {slices: [\"0-768\"]}\n", "  queue.size: [1024, 2048]\n"),
    ("  data: {max_sentences: 40}\n", "  batch_size: [16, 32]\n"),
])
def test_base_checked_together_with_the_keys_it_depends_on(tmp_path, base, parameters):
    # each base is invalid alone (K=512, B=64 by default) but fine with every swept value
    spec = load_text(tmp_path, GRID_HEAD.replace("  batch_size: 32\n", "") + base + "parameters:\n" + parameters)
    assert len(expand(spec)) == 2


def test_base_device_cuda_needs_a_gpu(tmp_path):
    with pytest.raises(UserError, match="resources.gpu is 0"):
        load_text(tmp_path, GRID_HEAD + "  device: cuda\n")
    assert load_text(tmp_path, GRID_HEAD + "  device: cuda\nresources: {cpu: 0.5, gpu: 0.25}\n").resources.gpu == 0.25


def test_nothing_is_written_by_load_and_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = study_file(tmp_path, GRID_HEAD + "parameters:\n  ema.decay: [0.5, 0.9]\n")
    print_dry_run(load_study(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


# ---- expansion -------------------------------------------------------------------------------------
def test_expansion_is_deterministic_and_keys_follow_the_config(tmp_path):
    text = GRID_HEAD + "parameters:\n  ema.decay: [0.5, 0.9]\n  queue.size: [128, 256]\nseeds: [1, 2]\n"
    first = expand(load_text(tmp_path, text))
    again = expand(load_text(tmp_path, text))
    assert [t.key for t in first] == [t.key for t in again]
    assert len({t.key for t in first}) == 8

    # seeds outermost: the first four trials cover the grid with seed 1, in the order written
    assert [t.seed for t in first] == [1] * 4 + [2] * 4
    assert [(t.params["ema.decay"], t.params["queue.size"]) for t in first[:4]] == [
        (0.5, 128), (0.5, 256), (0.9, 128), (0.9, 256)]
    assert first[0].config == {**first[4].config, "seed": 1}

    changed = expand(load_text(tmp_path, text.replace("256]", "512]")))
    same = {t.key for t in first} & {t.key for t in changed}
    assert same == {t.key for t in first if t.params["queue.size"] == 128}

    other_base = expand(load_text(tmp_path, text.replace("batch_size: 32", "batch_size: 64")))
    assert not {t.key for t in first} & {t.key for t in other_base}


def test_trial_key_ignores_dict_order():
    config = {"a": 1, "b": {"c": 2.0, "d": [1, 2]}}
    reordered = {"b": {"d": [1, 2], "c": 2.0}, "a": 1}
    assert trial_key(config, 42) == trial_key(reordered, 42)
    assert trial_key(config, 42) != trial_key(config, 43)
    assert re.fullmatch(r"[0-9a-f]{12}", trial_key(config, 42))


def test_trials_hold_resolved_configs_and_mtd(tmp_path):
    spec = load_study(REPO / "studies" / "ema_decay.yaml")
    best = next(t for t in expand(spec) if t.params["ema.decay"] == 0.85)
    assert round(best.mtd, 2) == 14.67
    assert best.config["optim"]["weight_decay"] == 1e-6  # MoCoSE's method default, filled in
    gs = expand(load_study(REPO / "studies" / "gaussian_m.yaml"))
    assert all(t.mtd is None for t in gs)


def test_queue_init_grid_uses_exprs_for_k0():
    trials = expand(load_study(REPO / "studies" / "queue_init.yaml"))
    pairs = {(t.params["queue.size"], t.params["queue.initial_size"]) for t in trials}
    expected = {(k, k0) for k in (128, 256, 512, 1024, 4096) for k0 in (0, k // 4, k // 2, k)}
    assert pairs == expected and len(expected) == 20
    assert all(t.config["queue"]["initial_size"] == t.params["queue.initial_size"] for t in trials)


def test_k0_above_k_is_dropped_not_an_error(tmp_path, capsys):
    text = GRID_HEAD + "parameters:\n  queue.size: [128, 256, 512]\n  queue.initial_size: [0, 128, 256, 512]\n"
    spec = load_text(tmp_path, text)
    pairs = [(t.params["queue.size"], t.params["queue.initial_size"]) for t in expand(spec)]
    assert pairs == [(128, 0), (128, 128), (256, 0), (256, 128), (256, 256),
                     (512, 0), (512, 128), (512, 256), (512, 512)]
    print_dry_run(spec)
    assert "9 configurations x 1 seed; 3 combinations dropped by constraints" in capsys.readouterr().out


def test_table7_grid_collapses_coinciding_k0(tmp_path, capsys):
    # K = 0 makes 0, K/4, K/2 and K the same config: 1 + 4 configurations, 3 duplicates collapsed.
    text = GRID_HEAD + """\
        parameters:
          queue.size: [0, 128]
          queue.initial_size: [0, {expr: "queue.size // 4"}, {expr: "queue.size // 2"}, {expr: "queue.size"}]
        """.replace("        ", "")
    spec = load_text(tmp_path, text)
    assert len(expand(spec)) == 5
    print_dry_run(spec)
    out = capsys.readouterr().out
    assert "5 configurations x 1 seed; 0 combinations dropped by constraints, 3 duplicates collapsed" in out


def test_exprs_see_plain_values_and_earlier_exprs(tmp_path):
    text = GRID_HEAD + """\
        parameters:
          batch_size: [16, 32]
          queue.size: [{expr: "batch_size * 8"}]
          queue.initial_size: [{expr: "queue.size // 2"}]
        """.replace("        ", "")
    trials = expand(load_text(tmp_path, text))
    assert [(t.params["queue.size"], t.params["queue.initial_size"]) for t in trials] == [(128, 64), (256, 128)]


def test_lone_expr_is_a_derived_value(tmp_path):
    text = GRID_HEAD + "parameters:\n  batch_size: [32, 64]\n  queue.size: {expr: \"batch_size * 4\"}\n"
    trials = expand(load_text(tmp_path, text))
    assert [t.config["queue"]["size"] for t in trials] == [128, 256]


def test_user_constraints_filter_combinations():
    trials = expand(load_study(REPO / "studies" / "mix_lambda.yaml"))
    configs = sorted({(t.params["mix.lam"], t.params["mix.directions"], t.params["mix.stop_grad"]) for t in trials})
    assert configs == [(0.1, "both", True), (0.2, "both", False), (0.2, "both", True), (0.2, "single", True),
                       (0.3, "both", True), (0.4, "both", True), (0.5, "both", True)]
    fgsm = expand(load_study(REPO / "studies" / "fgsm_epsilon.yaml"))
    assert sum(1 for t in fgsm if t.params["fgsm.eps"] == 0) == 3  # eps 0 runs once per seed
    assert isinstance(fgsm[1].params["fgsm.eps"], float)  # 5e-9-style YAML reads as a number


def test_constraints_see_method_defaults(tmp_path):
    # fgsm.eps is null in the file and 5e-9 (MoCoSE) or 0 (others) once the method defaults apply
    text = GRID_HEAD + "parameters:\n  method: [simcse, mocose, gs]\nconstraints:\n  - \"fgsm.eps > 0\"\n"
    assert [t.params["method"] for t in expand(load_text(tmp_path, text))] == ["mocose"]


def test_constraint_that_fails_at_run_time_names_its_line(tmp_path):
    text = GRID_HEAD + "parameters:\n  ema.decay: [0.5, 0.9]\nconstraints:\n  - \"1 // (ema.decay - 0.5) >= 0\"\n"
    with pytest.raises(UserError, match=r"study\.yaml:9: key 'constraints\[0\]'.*division by zero"):
        load_text(tmp_path, text)


def test_constraints_dropping_everything_is_an_error(tmp_path):
    text = GRID_HEAD + "parameters:\n  queue.size: [128]\nconstraints:\n  - \"queue.size > 1000\"\n"
    with pytest.raises(UserError, match="every combination is dropped"):
        load_text(tmp_path, text)


def test_queue_slices_grid():
    trials = expand(load_study(REPO / "studies" / "queue_slice.yaml"))
    slices = [t.params["queue.slices"] for t in trials[:5]]
    assert slices == [["0-512"], ["256-768"], ["512-1024"], ["0-256", "768-1024"], ["all"]]
    # the oldest position used is 512, 768, 1024, 1024, 1024 at B = 256: K/B = 2, 3, 4, 4, 4
    term = paper_eta_term(256)
    assert [round(t.mtd, 2) for t in trials[:5]] == [round(term + k, 2) for k in (2, 3, 4, 4, 4)]


def test_random_search_is_seeded_by_the_study_name(tmp_path):
    text = GRID_HEAD + """\
        parameters:
          ema.decay: {distribution: uniform, low: 0.5, high: 0.95}
          optim.lr: {distribution: loguniform, low: 1e-6, high: 1e-4}
          queue.size: {distribution: int, low: 64, high: 1024, step: 64}
          fgsm.mode: [exact, lagged]
        method: random
        budget: 7
        seeds: [1, 2]
        """.replace("        ", "")
    first = expand(load_text(tmp_path, text))
    assert [t.key for t in first] == [t.key for t in expand(load_text(tmp_path, text))]
    assert len(first) == 14 and len({t.key for t in first}) == 14
    for t in first:
        assert 0.5 <= t.params["ema.decay"] <= 0.95 and 1e-6 <= t.params["optim.lr"] <= 1e-4
        assert t.params["queue.size"] % 64 == 0
    renamed = expand(load_text(tmp_path, text.replace("name: t", "name: u")))
    assert [t.params for t in renamed] != [t.params for t in first]


def test_tpe_gives_a_search_space_and_builds_trials(tmp_path):
    text = GRID_HEAD + """\
        parameters:
          ema.decay: {distribution: uniform, low: 0.5, high: 0.95, step: 0.05}
          queue.size: {distribution: int, low: 128, high: 1024}
          queue.slices: [all, ["0-64"]]
          queue.initial_size: {expr: "queue.size // 4"}
        method: tpe
        budget: 30
        """.replace("        ", "")
    spec = load_text(tmp_path, text)
    assert expand(spec) == []
    space = search_space(spec)
    assert set(space) == {"ema.decay", "queue.size", "queue.slices"}
    assert space["queue.slices"].choices == ("all", "0-64")
    trial = trial_from_params(spec, {"ema.decay": 0.85, "queue.size": 512, "queue.slices": "0-64"}, seed=7)
    assert trial.config["queue"] == {"size": 512, "initial_size": 128, "slices": ["0-64"]}
    assert trial.seed == 7 and trial.config["seed"] == 7


# ---- dry-run table ---------------------------------------------------------------------------------
def test_dry_run_shows_the_states_sweep_run_acts_on(tmp_path, capsys):
    """The dry run reads what `sweep run` decides on (the Optuna study and the trial folders), not
    trials.csv: a trials.csv that says otherwise is ignored."""
    import optuna

    results = tmp_path / "out"
    text = (GRID_HEAD + "  ema: {schedule: constant}\n"
            + f"parameters:\n  ema.decay: [0.5, 0.9]\n  queue.size: [128, 256]\nresults_dir: {results}\n")
    spec = load_text(tmp_path, text)
    trials = expand(spec)
    print_dry_run(spec)
    assert "status" not in capsys.readouterr().out  # never ran: no status column

    (results / "t").mkdir(parents=True)
    with (results / "t" / "trials.csv").open("w", newline="") as handle:  # stale: every trial COMPLETE
        writer = csv.writer(handle)
        writer.writerow(["key", "seed", "state", "dev_stsb"])
        for trial in trials:
            writer.writerow([trial.key, 42, "COMPLETE", 80.1])
    storage = f"sqlite:///{results / 't' / 'optuna.db'}"
    study = optuna.create_study(study_name="t", storage=storage, direction="maximize")
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=80.1,
                                              user_attrs={"key": trials[0].key, "status": "ok"}))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                              user_attrs={"key": trials[1].key, "status": "error"}))
    (results / "t" / "trials" / trials[2].key).mkdir(parents=True)
    (results / "t" / "trials" / trials[2].key / "summary.json").write_text('{"status": "diverged"}')
    assert read_trial_states(spec) == {trials[0].key: "COMPLETE", trials[1].key: "FAIL->rerun",
                                       trials[2].key: "ended-not-in-optuna"}
    print_dry_run(spec)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("key"))
    assert header.split()[:5] == ["key", "seed", "ema.decay", "queue.size", "mtd"] and header.split()[-1] == "status"
    rows = {line.split()[0]: line.split() for line in out.splitlines() if re.match(r"^[0-9a-f]{12}\s", line)}
    assert rows[trials[0].key][-1] == "COMPLETE" and rows[trials[0].key][4] == "6.00"  # 1/(1-0.5) + 128/32
    assert rows[trials[1].key][-1] == "FAIL->rerun"
    assert rows[trials[2].key][-1] == "ended-not-in-optuna"
    assert rows[trials[3].key][-1] == "-"
    assert "1 COMPLETE, 1 FAIL->rerun, 1 ended-not-in-optuna, 1 not run" in out
    # the states come from the trial folders and Optuna (trials.csv above says 4 COMPLETE), and the line says so
    status = next(line for line in out.splitlines() if line.lstrip().startswith("status"))
    assert "trials.csv" not in status and f"the trial folders and the Optuna study in {results / 't'}" in status


def test_format_trial_table_without_states(tmp_path):
    spec = load_study(REPO / "studies" / "gaussian_m.yaml")
    table = format_trial_table(spec, expand(spec)[:2])
    lines = table.splitlines()
    assert lines[0].split() == ["key", "seed", "gaussian.count_per_batch", "mtd"]
    assert lines[1].split()[2:] == ["0", "-"] and lines[2].split()[2:] == ["0.5", "-"]


@pytest.mark.parametrize("text, keep, loggers", [
    ("", 1, []), ("keep_weights: best\n", 1, []), ("keep_weights: all\n", None, []),
    ("keep_weights: none\n", 0, []),
    ("keep_weights: 3\nloggers: [tensorboard, mlflow]\n", 3, ["tensorboard", "mlflow"]),
])
def test_keep_weights_and_loggers(tmp_path, text, keep, loggers):
    spec = load_text(tmp_path, "name: k\nbase:\n  model: embedded\n" + text)
    assert (spec.keep_weights, spec.loggers) == (keep, loggers)


# Rows for what the pydantic schema checks: (extra lines after GRID_HEAD, line, key, fragment).
@pytest.mark.parametrize("extra, line, key, fragment", [
    ("metric: {name: dev_stbs}\n", 6, "metric.name", "did you mean 'dev_stsb'"),
    ("metric: {nme: dev_stsb}\n", 6, "metric.nme", "is not a metric key; expected name, goal"),
    ("resources: {cpu: true}\n", 6, "resources.cpu", "expected a number, got True"),
    ("seeds: [1, true]\n", 6, "seeds[1]", "expected an integer, got True"),
    ("seeds: []\n", 6, "seeds", "non-empty list"),
    ("method: random\nbudget: true\n", 7, "budget", "expected an integer, got True"),
    ("scheduler:\n  grace_period: 3\n  max_t: 2\n", 8, "scheduler.max_t", "grace_period (3)"),
    ("results_dir: ''\n", 6, "results_dir", "non-empty string"),
    ("constraints:\n  - queue.size >= 1\n  - 5\n", 8, "constraints[1]", "expected a string, got 5"),
    ("descripton: x\n", 6, "descripton", "did you mean 'description'"),
])
def test_schema_errors_name_line_and_key(tmp_path, extra, line, key, fragment):
    path = study_file(tmp_path, GRID_HEAD + extra)
    with pytest.raises(UserError) as info:
        load_study(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: key '{key}'"), message
    assert fragment in message and "\n" not in message


def test_the_spec_package_has_no_module_over_500_lines():
    sizes = {path.name: len(path.read_text().splitlines()) for path in (REPO / "sweep" / "spec").glob("*.py")}
    assert len(sizes) >= 6 and max(sizes.values()) <= 500, sizes
