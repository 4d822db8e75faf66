"""What several test modules use (no test module imports another): the repository's root, study files,
a study's records, `sweep` processes and their sessions, a Ray head on loopback, and synthetic results
folders with known answers for the analysis tests.

Heavy imports (optuna) happen inside the functions that need them: bench/ scripts import this module too.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import json
import math
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

import numpy as np
import pytest
import yaml

from tests.cluster.netns_cluster import free_port  # the one free-port finder (netns_cluster.py runs standalone)
from tests.deadlines import scaled, wait_until
from trainer.vocabulary import STS_TASKS

if TYPE_CHECKING:
    import optuna

REPO = Path(__file__).resolve().parents[1]


# ---- study files --------------------------------------------------------------------------------------
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
def run_sweep(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """`sweep ARGS` in a subprocess (its own session, so that no Ray process outlives it); `timeout` is
    scaled (tests/deadlines.py)."""
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=scaled(timeout), start_new_session=True)


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


# ---- synthetic results folders with known answers (the analysis tests) ----------------------------------
# Laid out as results/README.md describes: `write_results` writes trials.csv and/or
# trials/<key>/summary.json (and study.yaml) from a list of trials; the `*_study` helpers build the specific
# sweeps the analysis tests check.
# Per-task offsets from the average, roughly the shape of the papers' Table 1.
TASK_OFFSETS = (-6.0, 5.0, -2.5, 5.5, 2.0, 1.5, -5.5)
PEAK_MTD = 14.67
SEEDS = (0, 1, 2)


def base_config(method: str = "mocose", **sections: dict[str, Any]) -> dict[str, Any]:
    """A resolved trainer config dict with the fields the analysis reads."""
    config = {
        "model": "embedded", "method": method, "pooler": "cls_before_pooler", "seed": 0, "batch_size": 64,
        "max_steps": None, "epochs": 1.0, "output_dir": None,
        "ema": {"schedule": "constant", "decay": 0.85, "decay_end": 0.95, "schedule_steps": None},
        "queue": {"size": 512, "initial_size": 128, "slices": None},
        "fgsm": {"eps": 5e-9, "mode": "lagged"},
        "heads": {"projection_layers": 1, "predictor_layers": 2, "predictor_dim": None},
        "gaussian": {"count": None, "count_per_batch": None, "mu": 0.0, "sigma": 1.0, "weight": 1.0},
        "mix": {"enabled": method == "mix", "lam": 0.2, "directions": "both", "stop_grad": True},
    }
    for name, values in sections.items():
        if isinstance(values, dict):
            config[name].update(values)
        else:
            config[name] = values
    return config


def make_trial(config: dict[str, Any], seed: int, avg: float, steps: int = 200, **extra: Any) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config["seed"] = seed
    scores = {task: round(avg + offset, 4) for task, offset in zip(STS_TASKS, TASK_OFFSETS)}
    # avg exactly as the trainer defines it: the mean of the seven 2-decimal task figures
    scores["avg"] = float(np.mean([round(scores[t], 2) for t in STS_TASKS]))
    trial = {"config": config, "seed": seed, "test": scores, "steps": steps, "status": "ok", "state": "COMPLETE"}
    trial.update(extra)
    return trial


def trial_key(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def write_results(
    study_dir: Path,
    trials: list[dict[str, Any]],
    params: list[str],
    csv_file: bool = True,
    summaries: bool = True,
    slices_format: str = "plus",
) -> Path:
    """Write the trials as results/<study>/ (trials.csv, trials/<key>/summary.json, study.yaml)."""
    study_dir.mkdir(parents=True, exist_ok=True)
    study = {"name": study_dir.name, "parameters": {p: [] for p in params}}
    (study_dir / "study.yaml").write_text(yaml.safe_dump(study))
    rows = []
    for trial in trials:
        config = trial["config"]
        key = trial_key(config)
        summary = {
            "status": trial["status"], "reason": None, "steps": trial["steps"], "best_step": 100,
            "best_dev_stsb": _dev_score(trial), "test": trial["test"],
            "align": trial.get("align"), "uniform": trial.get("uniform"), "align_uniform_split": "dev",
            "mtd": {"formula": 0.0, "eta": config["ema"]["decay"], "eta_choice": "constant",
                    "queue_k": config["queue"]["size"], "batch_size": config["batch_size"],
                    "queue_age_mean": trial.get("age_mean", 4.0), "queue_age_max": trial.get("age_max", 8.0),
                    "ema_age": 1 / (1 - config["ema"]["decay"]),
                    "measured": 1 / (1 - config["ema"]["decay"]) + trial.get("age_max", 8.0)},
            "sentences_per_s": 150.0, "wall_time_s": 800.0, "config": config,
        }
        for name in ("variant", "transfer", "transfer_mode", "test_label"):  # only where the trial has them
            if name in trial:
                summary[name] = trial[name]
        if trial["state"] != "COMPLETE":
            summary = None
        if summaries and summary is not None:
            folder = study_dir / "trials" / key
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "summary.json").write_text(json.dumps(summary))
        rows.append(_csv_row(key, trial, params, slices_format))
    if csv_file:
        columns = list(dict.fromkeys(c for row in rows for c in row))
        with open(study_dir / "trials.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    return study_dir


def _csv_row(key: str, trial: dict[str, Any], params: list[str], slices_format: str) -> dict[str, Any]:
    config = trial["config"]
    slices = config["queue"]["slices"]
    if slices is None:
        slices_text = ""
    elif slices_format == "json":
        slices_text = json.dumps(slices)
    else:
        slices_text = "+".join(slices)
    row: dict[str, Any] = {"key": key, "seed": trial["seed"], "state": trial["state"], "status": trial["status"],
                           "reason": ""}
    for param in params:
        value = _dotted(config, param)
        row[param] = slices_text if param == "queue.slices" else ("" if value is None else value)
    row.update({
        "method": config["method"], "batch_size": config["batch_size"], "steps": trial["steps"],
        "ema.schedule": config["ema"]["schedule"], "ema.decay": config["ema"]["decay"],
        "ema.decay_end": config["ema"]["decay_end"], "queue.size": config["queue"]["size"],
        "queue.initial_size": config["queue"]["initial_size"], "queue.slices": slices_text,
        "mtd": 0.0,  # deliberately wrong: load_results must recompute MTD, not trust this column
        "queue_age_mean": trial.get("age_mean", 4.0), "queue_age_max": trial.get("age_max", 8.0),
        "best_step": 100, "dev_stsb": _dev_score(trial),
    })
    row.update(trial["test"] if trial["state"] == "COMPLETE" else {t: "" for t in trial["test"]})
    row.update({"align": trial.get("align", ""), "uniform": trial.get("uniform", ""),
                "sentences_per_s": 150.0, "wall_time_s": 800.0})
    return row


def _dev_score(trial: dict[str, Any]) -> float:
    """STS-B dev, 4 points above the trial's test average (its STS-B test score when it has no average)."""
    test = trial["test"]
    return test.get("avg", test["STSBenchmark"]) + 4.0


def _dotted(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node[part]
    return node


# ---- the sweeps ---------------------------------------------------------------------------------
MTD_GRID = [  # (eta, K) at B = 64: MTD = 1/(1-eta) + K/64
    (0.5, 512), (0.75, 512), (0.8, 512), (0.85, 512), (0.9, 512), (0.95, 512), (0.85, 256), (0.85, 1024),
]


def mtd_score(mtd: float, curvature: float = 8.0) -> float:
    """The known answer: a parabola in log(MTD) peaking at 77 at MTD 14.67."""
    return 77.0 - curvature * (math.log(mtd) - math.log(PEAK_MTD)) ** 2


def mtd_study(study_dir: Path, noise: float = 0.05, **write_options: Any) -> Path:
    """EMA decay x queue size at B = 64, 3 seeds; score = mtd_score(MTD) + seeded noise."""
    rng = np.random.default_rng(123)
    trials = []
    for eta, size in MTD_GRID:
        mtd = 1.0 / (1.0 - eta) + size / 64
        config = base_config(ema={"decay": eta}, queue={"size": size})
        for seed in SEEDS:
            avg = mtd_score(mtd) + rng.normal(0.0, noise)
            trials.append(make_trial(config, seed, avg, align=0.2 + 0.01 * mtd + rng.normal(0, 0.002),
                                     uniform=-2.0 - 0.02 * mtd + rng.normal(0, 0.002)))
    return write_results(study_dir, trials, ["ema.decay", "queue.size"], **write_options)


SLICES = [["0-512"], ["256-768"], ["512-1024"], ["0-256", "768-1024"], None]


def slices_study(study_dir: Path, **write_options: Any) -> Path:
    """MoCoSE Table 8's setting (K 1024, K0 128, N 256), five slices, 2 seeds, in shuffled order."""
    rng = np.random.default_rng(7)
    trials = []
    for i in (3, 0, 4, 2, 1):  # not the display order: the chart must sort
        config = base_config(batch_size=256, queue={"size": 1024, "initial_size": 128, "slices": SLICES[i]})
        for seed in (0, 1):
            trials.append(make_trial(config, seed, 75.0 + i * 0.5 + rng.normal(0, 0.1)))
    return write_results(study_dir, trials, ["queue.slices"], **write_options)


def heatmap_study(study_dir: Path) -> Path:
    """Queue size K x initial size K0 (fractions 0, 1/4, 1/2, 1 of K), 2 seeds."""
    rng = np.random.default_rng(11)
    trials = []
    for size in (256, 512, 1024):
        for fraction in (0.0, 0.25, 0.5, 1.0):
            config = base_config(queue={"size": size, "initial_size": int(size * fraction)})
            for seed in (0, 1):
                avg = 76.0 + math.log2(size / 256) * 0.3 - fraction + rng.normal(0, 0.1)
                trials.append(make_trial(config, seed, avg))
    return write_results(study_dir, trials, ["queue.size", "queue.initial_size"])


def gaussian_study(study_dir: Path) -> Path:
    """GS-InfoNCE M / N in {0.5, 1, 3}, 2 seeds (no MoCoSE trials: no MTD figures)."""
    trials = []
    for ratio, avg in ((0.5, 76.9), (1.0, 76.8), (3.0, 77.5)):
        config = base_config(method="gs", gaussian={"count_per_batch": ratio})
        for seed in (0, 1):
            trials.append(make_trial(config, seed, avg + 0.1 * seed))
    return write_results(study_dir, trials, ["gaussian.count_per_batch"])


def one_task_study(study_dir: Path, legacy_avg: bool = False, **write_options: Any) -> Path:
    """The quickstart's shape: MoCoSE over EMA decay x queue size at B = 64, 2 seeds, scored on STS-B test
    alone (`eval.final_tasks: [STSBenchmark]`), so no seven-task average. `legacy_avg` writes `avg` = the
    STS-B score, as summaries and trials.csv did before the average needed all seven tasks."""
    from trainer.evaluation.sts_average import sts_test_label

    trials = []
    for eta, size in MTD_GRID:  # K0 = K/4: Table 7's row "K/4" holds a paper value for every K
        config = base_config(ema={"decay": eta}, queue={"size": size, "initial_size": size // 4})
        for seed in (0, 1):
            stsb = round(mtd_score(1.0 / (1.0 - eta) + size / 64) + 0.1 * seed, 2)
            test = {"STSBenchmark": stsb, **({"avg": stsb} if legacy_avg else {})}
            trials.append(make_trial(config, seed, stsb, test=test, test_label=sts_test_label(test),
                                     align=0.2 + 0.001 * size, uniform=-2.0 - 0.01 * eta))
    return write_results(study_dir, trials, ["ema.decay", "queue.size"], **write_options)


# ---- stand-in results for the study files (the figure layout tests) ------------------------------------
def stand_in_study(study_file: Path, study_dir: Path, seeds: int, spread: float = 1.0) -> Path:
    """Results the study file's grid could give, without training: every configuration `sweep` expands it
    to, each over seeds 0 .. `seeds`-1. MoCoSE trials score mtd_score of their MTD, the others 76, plus a
    fixed offset per configuration (within ±0.3) and seeded noise per seed (std 0.1), both times `spread`
    about 76 (0.001: scores that differ in the third decimal). Scored on STS-B test alone where the study
    evaluates that task alone (the quickstart), else on all seven. study.yaml is the study file itself."""
    from sweep.spec import load_study  # here: bench/ imports this module without loading the spec's schema
    from sweep.spec.expand import expand
    from trainer.evaluation.sts_average import sts_test_label

    spec = load_study(study_file)
    rng = np.random.default_rng(17)
    trials = []
    for trial in (t for t in expand(spec) if t.seed == spec.seeds[0]):
        config = trial.config
        tasks = config["eval"]["final_tasks"] or STS_TASKS
        mtd = trial.mtd if config["method"] == "mocose" and trial.mtd else None
        offset = int(hashlib.sha256(trial.key.encode()).hexdigest()[:8], 16) / 2**32 * 0.6 - 0.3
        centre = (mtd_score(mtd) if mtd else 76.0) + offset
        for seed in range(seeds):
            score = round(76.0 + spread * (centre - 76.0 + rng.normal(0.0, 0.1)), 6)
            extra: dict[str, Any] = {}
            if set(tasks) == {"STSBenchmark"}:
                extra["test"] = {"STSBenchmark": score}
                extra["test_label"] = sts_test_label(extra["test"])
            ages = {"align": 0.2 + 0.01 * (mtd or 10.0) + rng.normal(0, 0.002),
                    "uniform": -2.0 - 0.02 * (mtd or 10.0) + rng.normal(0, 0.002)}
            trials.append(make_trial(config, seed, score, **ages, **extra))
    write_results(study_dir, trials, list(spec.parameters))
    shutil.copyfile(study_file, study_dir / "study.yaml")
    return study_dir
