"""What several test modules use (no test module imports another): the repository's root, study files,
a study's records, `sweep` processes and their sessions, and a Ray head on loopback. Synthetic results
folders with known answers for the analysis tests are tests/synthetic_results.py.

Heavy imports (optuna) happen inside the functions that need them: bench/ scripts import this module too.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import yaml

from tests.cluster.netns_cluster import free_port  # the one free-port finder (netns_cluster.py runs standalone)
from tests.deadlines import scaled, wait_until

if TYPE_CHECKING:
    import optuna

REPO = Path(__file__).resolve().parents[1]
# a stand-in for the GPU bench's sharing check (two extra trainer processes), for tests where it bears on nothing
BENCH_SHARING_STAND_IN = {"method": "simcse", "precision": "auto", "steps_timed": 5, "alone_sentences_per_s": 1.0,
                          "shared_sentences_per_s": [0.5, 0.5], "aggregate_sentences_per_s": 1.0,
                          "aggregate_vs_alone": 1.0}


# ---- study files --------------------------------------------------------------------------------------
# The MTEB tests need the optional extra contrastive-sweep[mteb] (scripts/setup.sh --dev installs it); CI's
# lowest-versions leg, whose scipy is older than mteb allows, runs without it.
needs_mteb = pytest.mark.skipif(importlib.util.find_spec("mteb") is None,
                                reason="mteb is not installed (the extra contrastive-sweep[mteb])")


def first_fast(*cases: Any) -> list[Any]:
    """The cases of a parametrised family, for pytest.mark.parametrize: the first runs in the fast tier, the
    others only in the whole suite (marked slow), so the fast tier runs each family's code once and the whole
    suite runs every case. A case for several arguments is a tuple."""
    return [case if i == 0 else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
            for i, case in enumerate(cases)]


def write_tiny_bert(path: Path, tokenizer_dir: Path, layers: int) -> Path:
    """A random BERT of `layers` layers x 32 units (seeded) with the tokenizer of `tokenizer_dir`, saved to `path`."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128,
        # BERT's default 0.02 makes a random 32-dim model map every sentence to nearly the same [CLS]
        # (mean pairwise cosine 0.99999 on STS-B dev), i.e. collapsed before training; 0.2 gives 0.79.
        initializer_range=0.2,
    )
    BertModel(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(path)
    return path


def study_file(folder: Path, content: dict[str, Any] | str, file_name: str | None = None) -> Path:
    """Write a study file into `folder` and return its path: a dict as YAML in the dict's own key order,
    as FOLDER/<its name>.yaml; a text as given (dedented), as FOLDER/study.yaml. `file_name` names the file."""
    if isinstance(content, dict):
        path = folder / (file_name or f"{content['name']}.yaml")
        path.write_text(yaml.safe_dump(content, sort_keys=False))
    else:
        path = folder / (file_name or "study.yaml")
        path.write_text(textwrap.dedent(content))
    return path


def write_study(tmp_path: Path, name: str, model: Path | str, data: Path, parameters: dict | None = None, *,
                description: str | None = "tiny trials for the tests", token_cache: bool = True,
                **top: object) -> Path:
    """A study of tiny trials (6 steps, 2 evaluations, STS-B test only) as a YAML file. `description=None`
    leaves the key out; `token_cache=False` leaves out data.cache_dir (TMP_PATH/../token-cache)."""
    data_section = {"corpus": str(data / "corpus" / "wiki1m_sample.txt"), "data_dir": str(data),
                    "max_sentences": 200}
    if token_cache:
        data_section["cache_dir"] = str(tmp_path.parent / "token-cache")
    spec = {
        "name": name,
        **({} if description is None else {"description": description}),
        "base": {
            "model": str(model), "method": "mocose", "pooler": "avg", "batch_size": 8, "max_steps": 6,
            "queue": {"size": 16, "initial_size": 8},
            "eval": {"eval_steps": 3, "final_tasks": ["STSBenchmark"]},
            "data": data_section,
        },
        "parameters": parameters or {"ema.decay": [0.5, 0.9], "queue.size": [16, 32]},
        "seeds": [1],
        "results_dir": str(tmp_path / "results"),
        **top,
    }
    return study_file(tmp_path, spec)


def fake_study(tmp_path: Path, name: str, shared_data_dir: Path, decays=(0.1, 0.2, 0.3), **top) -> Path:
    """A study whose trials run tests/fake_train.py (no model is loaded): write_study's tiny trials of the
    embedded model over `decays` (or `parameters`), without a description or a token cache."""
    parameters = top.pop("parameters", {"ema.decay": list(decays)})
    return write_study(tmp_path, name, "embedded", shared_data_dir, parameters, description=None,
                       token_cache=False, **top)


# ---- a study's records --------------------------------------------------------------------------------
def read_csv(study_dir: Path) -> list[dict[str, str]]:
    with open(study_dir / "trials.csv", newline="") as f:
        return list(csv.DictReader(f))


def rows(study_dir: Path) -> list[dict[str, str]]:
    try:
        with open(study_dir / "trials.csv", newline="") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def running(study_dir: Path) -> bool:
    return any(r["state"] == "RUNNING" for r in rows(study_dir))


def trial_progress(study_dir: Path, name: str) -> list[tuple[str, int]]:
    """(Optuna state, dev evaluations reported so far) of each trial in the study's Optuna record, in trial order:
    read from the record the driver writes as each trial starts, reports and ends. [] until the driver has created
    the study. Opened read-only with sqlite3 on Optuna's tables: opening it through Optuna would write (its schema
    version row) into the database the driver is still creating."""
    import sqlite3

    path = study_dir / "optuna.db"
    if not path.is_file():
        return []
    query = ("SELECT t.state, COUNT(v.trial_intermediate_value_id) FROM trials t "
             "JOIN studies s ON s.study_id = t.study_id "
             "LEFT JOIN trial_intermediate_values v ON v.trial_id = t.trial_id "
             "WHERE s.study_name = ? GROUP BY t.trial_id ORDER BY t.number")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)) as db:
            return [(state, count) for state, count in db.execute(query, (name,))]
    except sqlite3.Error:  # no tables yet, or the driver holds a write lock: nothing known yet
        return []


def reported_steps(study_dir: Path, name: str) -> list[int]:
    """For each trial RUNNING in the study's Optuna record, how many dev evaluations it has reported to the
    driver so far: "the trial is under way" (trial_progress)."""
    return [count for state, count in trial_progress(study_dir, name) if state == "RUNNING"]


def optuna_trials(name: str, storage: str) -> list[optuna.trial.FrozenTrial]:
    import optuna

    return optuna.load_study(study_name=name, storage=storage).get_trials()


def assert_complete_study(study_dir: Path, name: str, storage: str, n: int) -> list[optuna.trial.FrozenTrial]:
    """Every trial COMPLETE once in trials.csv and Optuna, with its files."""
    rows = read_csv(study_dir)
    assert len(rows) == n
    assert all(r["state"] == "COMPLETE" and r["status"] == "ok" for r in rows), rows
    trials = optuna_trials(name, storage)
    complete = Counter(t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE")
    assert complete == Counter(r["key"] for r in rows)  # one COMPLETE Optuna trial per key
    for row in rows:
        folder = study_dir / "trials" / row["key"]
        assert {"config.yaml", "metrics.jsonl", "summary.json", "log.txt"} <= {p.name for p in folder.iterdir()}
        assert json.loads((folder / "summary.json").read_text())["status"] == "ok"
        assert int(row["optuna_trial"]) in {t.number for t in trials if t.user_attrs["key"] == row["key"]}
    return trials


def hand_made_study(tmp_path: Path, trials: dict[str, dict], keep_weights: object = "best") -> Path:
    """A results folder written by hand: study.yaml, trials.csv, trials/<key>/summary.json (+ model/ when
    the trial's dict says weights=True). trials: key -> {dev, state, weights}."""
    folder = tmp_path / "results" / "hand"
    (folder).mkdir(parents=True)
    (folder / "study.yaml").write_text(yaml.safe_dump({"name": "hand", "base": {"model": "embedded"},
                                                       "keep_weights": keep_weights}))
    with open(folder / "trials.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["key", "seed", "state", "status"])
        writer.writeheader()
        for key, t in trials.items():
            writer.writerow({"key": key, "seed": 1, "state": t["state"], "status": "ok"})
            trial_dir = folder / "trials" / key
            trial_dir.mkdir(parents=True)
            summary = {"status": "ok", "best_dev_stsb": t["dev"], "best_step": 3, "steps": 6,
                       "test": {"STSBenchmark": 50.0}, "config": {"method": "mocose", "pooler": t.get("pooler", "avg")}}
            (trial_dir / "summary.json").write_text(json.dumps(summary))
            if t.get("weights"):
                (trial_dir / "model").mkdir()
                (trial_dir / "model" / "config.json").write_text("{}")
    return folder


# ---- `sweep` processes and their sessions -------------------------------------------------------------
def run_sweep(args: list[str], cwd: Path, timeout: float = 240, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess:
    """`sweep ARGS` in a subprocess (its own session, so that no Ray process outlives it); `timeout` is
    scaled (tests/deadlines.py); `env`: its environment (default: this one's)."""
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=scaled(timeout), start_new_session=True, env=env)


def fake_env(steps: int = 3, step_s: float = 0.2, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), SWEEP_TRAIN_FN="tests.fake_train:train",
               FAKE_TRAIN_STEPS=str(steps), FAKE_TRAIN_STEP_S=str(step_s))
    env.update(extra)
    return env


class Driver:
    """`sweep ARGS` in the background in its own session; its output collected by a thread."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=cwd, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait_for(self, condition, timeout: float = 150) -> None:
        """Until `condition()` holds; an AssertionError when the driver ends first or the scaled `timeout`
        passes."""
        if wait_until(condition, timeout, still_worth_waiting=lambda: self.proc.poll() is None):
            return
        if self.proc.poll() is not None:
            raise AssertionError(f"the driver ended early ({self.proc.returncode}):\n{self.out}")
        raise AssertionError(f"timed out; output so far:\n{self.out}")

    def finish(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout=scaled(timeout))
        self.reader.join(timeout=scaled(10))
        return code


def session_left(sid: int, wait: float = 10) -> list[str]:
    """Processes still alive in the driver's session after `wait` seconds (scaled; Ray agents included)."""
    deadline = time.monotonic() + scaled(wait)
    while True:
        out = subprocess.run(["ps", "-e", "-o", "pid=,sid=,stat=,args="], capture_output=True, text=True).stdout
        left = [line for line in out.splitlines()
                if int(line.split()[1]) == sid and "Z" not in line.split()[2]]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def kill_session(sid: int) -> None:
    """SIGKILL what is left in the driver's session, once, without waiting (kill_session_until_gone also
    kills the process group, and waits until nothing is left)."""
    for line in session_left(sid, wait=0):
        with_pid = int(line.split()[0])
        try:
            os.kill(with_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def session_processes(sid: int) -> list[int]:
    """The pids of session_left(sid, wait=0)."""
    return [int(line.split()[0]) for line in session_left(sid, wait=0)]


def kill_session_until_gone(sid: int) -> None:
    """SIGKILL the driver's process group and anything else left in its session (Ray's workers), until nothing
    is left; an AssertionError when something still lives after 30 s."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        left = session_processes(sid)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    raise AssertionError(f"processes of the killed driver's session still alive: {session_processes(sid)}")


def query_dashboard(storage: str) -> tuple[dict, dict]:
    """Serve optuna-dashboard's WSGI app on a loopback port in a thread; GET /api/studies and the study."""
    from optuna_dashboard import wsgi

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    server = make_server("127.0.0.1", 0, wsgi(storage), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        studies = json.load(urllib.request.urlopen(f"{base}/api/studies", timeout=scaled(30)))
        study_id = studies["study_summaries"][0]["study_id"]
        study = json.load(urllib.request.urlopen(f"{base}/api/studies/{study_id}", timeout=scaled(30)))
    finally:
        server.shutdown()
        server.server_close()
    return studies, study


# ---- a Ray head on loopback ---------------------------------------------------------------------------
@contextlib.contextmanager
def ray_head_process(cwd: Path, *extra: str, env: dict[str, str] | None = None):
    """`ray start --head --block` (2 CPUs, plus `extra` options such as --num-gpus=2) on loopback, in its own
    session, with `env` (default: this process's; the trials' workers inherit it); yields (address, the env
    with its auth token). Torn down by stopping that session only (a bare
    `ray stop` would also stop any other Ray instance of this user on the machine)."""
    port = free_port()
    env = {**(os.environ if env is None else env), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
    ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen(
        [ray, "start", "--head", f"--port={port}", "--num-cpus=2", *extra, "--include-dashboard=false",
         "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def drain() -> None:
        for line in head.stdout:
            lines.append(line)
            if "Ray runtime started" in line:
                started.set()

    threading.Thread(target=drain, daemon=True).start()
    if not started.wait(scaled(120)):
        kill_session_until_gone(head.pid)
        pytest.fail("ray start --head did not start:\n" + "".join(lines[-30:]))
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        head.terminate()  # ray start --block stops the processes it started on SIGTERM
        try:
            head.wait(timeout=scaled(30))
        except subprocess.TimeoutExpired:
            pass
        kill_session_until_gone(head.pid)


def stand_in_sync_debug_mode(monkeypatch: Any, also: tuple[str, ...] = (), every_caller: bool = False,
                             blocking_copies: bool = False) -> dict[str, Any]:
    """CUDA's sync debug mode stood in for on the CPU: once `torch.cuda.set_sync_debug_mode("error")` is called, a
    `Tensor.item()` or `bool()` made from trainer/ code (or from a function named in `also`; from anywhere with
    `every_caller`) raises as CUDA's would, until the mode is set back; `torch.cuda.synchronize` does nothing.
    `blocking_copies`: a blocking `.to("cpu")` raises too. Read-backs torch makes itself (its Adam reads its step
    count with .item() on the CPU, where CUDA keeps it on the host) are not flagged unless `every_caller`.
    Returns the mode's holder ({"now": the mode last set})."""
    import torch

    mode = {"now": 0}
    trainer_dir = str(REPO / "trainer")

    def flagged(original: Any) -> Any:
        def call(self: Any, *args: Any) -> Any:
            caller = sys._getframe(1).f_code
            if mode["now"] == "error" and (every_caller or caller.co_filename.startswith(trainer_dir)
                                           or caller.co_name in also):
                raise RuntimeError("called a synchronizing CUDA operation")
            return original(self, *args)
        return call

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda value: mode.update(now=value))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.Tensor, "item", flagged(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "__bool__", flagged(torch.Tensor.__bool__))
    if blocking_copies:
        to = torch.Tensor.to

        def to_host(self: Any, *args: Any, **kwargs: Any) -> Any:
            if mode["now"] == "error" and "cpu" in [str(a) for a in args] and not kwargs.get("non_blocking"):
                raise RuntimeError("called a synchronizing CUDA operation")
            return to(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "to", to_host)
    return mode
