"""Experiment trackers (study key `loggers: [mlflow, wandb]`, sweep/run/trackers.py), each read back.

End to end (slow): a real MLflow tracking server on loopback (SQLite backend in a temporary folder) and W&B in
offline mode record one tiny real study; MLflow is read back with MlflowClient, W&B from the offline run's
own transaction log (run-<id>.wandb), and both are compared with the trainer's files (metrics.jsonl,
summary.json), not with what the callbacks were given. A second study with the fake trainer loses its
MLflow server mid-study and must still end complete. The fast tests cover the checks before Tune starts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweep.commands.export import export_trial
from sweep.records.history import compare_specs
from sweep.run.runner import run_study
from sweep.run.trackers import StudyResults, logger_callbacks, mlflow_problem
from sweep.spec import load_study
from tests.deadlines import scaled
from tests.helpers import REPO, fake_env, fake_study, free_port, hand_made_study, read_csv, study_file, write_study


# ---- helpers --------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def driver_environment(monkeypatch):
    """The variables logger_callbacks sets in the driver's environment are restored after each test."""
    for name in ("WANDB_MODE", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
        monkeypatch.delenv(name)


class MlflowServer:
    """`mlflow server` on a free loopback port, SQLite backend and artifacts in `folder`, in its own session."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job-runner processes
        self.log = open(folder / "server.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", port, "--workers", "1",
             "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--default-artifact-root",
             str(folder / "artifacts")], stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + scaled(90)
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (folder / "server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=scaled(1)).close()
                return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise AssertionError("mlflow server did not answer within 90 s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(scaled(15))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(scaled(5))
        self.log.close()


def wandb_records(path: Path) -> list:
    """The records of an offline W&B run file (run-<id>.wandb): a ":W&B" header, then LevelDB's log format
    (32 KiB blocks; each chunk has a 7-byte header crc32, length, type FULL/FIRST/MIDDLE/LAST) holding
    protobuf `Record`s."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    records, pos, pending = [], 7, b""
    while pos < len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero padding up to the block's end
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            pending = chunk
        else:
            pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_run(folder: Path) -> dict:
    """run record, config (key -> value) and summary (key -> last value) of one offline run folder."""
    records = wandb_records(next(folder.glob("run-*.wandb")))
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    summary: dict = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "summary":
            for u in record.summary.update:
                summary[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
    return {"run": run, "config": config, "summary": summary}


# ---- end to end: one tiny real study tracked by MLflow and W&B (offline), then exported (slow) --------------
@pytest.mark.slow
def test_mlflow_and_wandb_hold_every_trial_with_its_curve_and_final_scores(tmp_path, tiny_model_dir,
                                                                          shared_data_dir, monkeypatch):
    from mlflow import MlflowClient

    server = MlflowServer(tmp_path / "mlflow")
    try:
        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.delenv("WANDB_PROJECT", raising=False)
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        # the tiny BERT: what is checked is what the trackers hold, not the scores (with the embedded
        # MiniLM the STS-B evaluations took 75 of each trial's 90 s, and this test 140-220 s)
        path = write_study(tmp_path, "tracked", tiny_model_dir, shared_data_dir,
                           parameters={"ema.decay": [0.5, 0.9]}, keep_weights="all", loggers=["mlflow", "wandb"],
                           tracking={"mlflow_uri": server.url})
        spec = load_study(path)
        started = time.monotonic()
        assert run_study(spec, max_concurrent=2) == 0
        print(f"study with MLflow and W&B: {time.monotonic() - started:.1f} s")
        study_dir = Path(spec.study_dir)
        rows = {row["key"]: row for row in read_csv(study_dir)}
        assert len(rows) == 2
        trial_files = {}
        for key in rows:
            lines = (study_dir / "trials" / key / "metrics.jsonl").read_text().splitlines()
            metrics = [json.loads(line) for line in lines]
            summary = json.loads((study_dir / "trials" / key / "summary.json").read_text())
            assert summary["status"] == "ok" and [m["step"] for m in metrics] == [3, 6]
            trial_files[key] = (metrics, summary)

        # MLflow: one experiment named after the study, one run per trial
        client = MlflowClient(tracking_uri=server.url)
        experiment = client.get_experiment_by_name("tracked")
        assert experiment is not None
        runs = client.search_runs([experiment.experiment_id])
        assert sorted(r.data.tags["sweep.key"] for r in runs) == sorted(rows)
        mlflow_ids = {}
        for run in runs:
            key = run.data.tags["sweep.key"]
            metrics, summary = trial_files[key]
            mlflow_ids[key] = run.info.run_id
            assert run.info.run_name == key and run.info.status == "FINISHED"
            assert run.data.tags["sweep.seed"] == rows[key]["seed"] == "1"
            assert run.data.params["params/ema.decay"] == rows[key]["ema.decay"]
            assert run.data.params["config/ema/decay"] == rows[key]["ema.decay"]
            assert run.data.params["seed"] == "1"
            curve = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "dev_stsb")]
            assert curve == [(m["step"], pytest.approx(m["dev_stsb"], rel=1e-9)) for m in metrics]
            final = run.data.metrics
            assert final["test/STSBenchmark"] == pytest.approx(summary["test"]["STSBenchmark"], rel=1e-9)
            assert "test/avg" not in final and "avg" not in summary["test"]  # STS-B test alone: no average
            assert final["best_dev_stsb"] == pytest.approx(summary["best_dev_stsb"], rel=1e-9)
            assert not [name for name in final if name.startswith("config/")]  # the config is params, not metrics

        # W&B: one offline run per trial in results/<study>/wandb/, grouped by the study name
        folders = sorted((study_dir / "wandb").glob("offline-run-*"))
        assert len(folders) == 2, folders
        wandb_ids = {}
        for folder in folders:
            written = wandb_run(folder)
            key = written["run"].display_name
            metrics, summary = trial_files[key]
            wandb_ids[key] = written["run"].run_id
            assert folder.name.endswith(f"-{written['run'].run_id}")
            assert written["run"].run_group == "tracked" and written["run"].project == "tracked"
            config = written["config"]
            assert config["key"] == key and config["seed"] == 1
            assert config["params"] == {"ema.decay": float(rows[key]["ema.decay"])}
            assert config["config"]["ema"]["decay"] == float(rows[key]["ema.decay"])
            final = written["summary"]
            assert final["test/STSBenchmark"] == pytest.approx(summary["test"]["STSBenchmark"], rel=1e-9)
            assert "test/avg" not in final and "avg" not in summary["test"]  # STS-B test alone: no average
            assert final["best_dev_stsb"] == pytest.approx(summary["best_dev_stsb"], rel=1e-9)
            assert final["dev_stsb"] == pytest.approx(metrics[-1]["dev_stsb"], rel=1e-9)
        assert sorted(wandb_ids) == sorted(rows)

        # the exported model's card names both tracker runs of its trial
        key = sorted(rows)[0]
        dest = export_trial(study_dir, tmp_path / "model", trial_key=key)
        card = (dest / "README.md").read_text()
        assert f"| MLflow run | run `{mlflow_ids[key]}` in experiment `tracked` at {server.url}" in card
        assert f"/#/experiments/{experiment.experiment_id}/runs/{mlflow_ids[key]}" in card
        assert f"| W&B run | run `tracked/{wandb_ids[key]}` (group `tracked`), written offline to" in card
        assert f"wandb sync {study_dir.resolve() / 'wandb'}/offline-run-" in card
    finally:
        server.stop()


@pytest.mark.slow
def test_mlflow_server_lost_mid_study_is_one_warning_and_the_study_completes(tmp_path, shared_data_dir):
    server = MlflowServer(tmp_path / "mlflow")
    try:
        path = fake_study(tmp_path, "lost", shared_data_dir, decays=(0.1, 0.2, 0.3), loggers=["mlflow"],
                          tracking={"mlflow_uri": server.url})
        driver = subprocess.Popen([sys.executable, "-m", "sweep", "run", str(path), "--max-concurrent", "1"],
                                  cwd=tmp_path, env=fake_env(steps=4, step_s=1.0), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        trials_dir = tmp_path / "results" / "lost" / "trials"
        deadline = time.monotonic() + scaled(120)
        while not list(trials_dir.glob("*/trackers.json")) and time.monotonic() < deadline:
            assert driver.poll() is None
            time.sleep(0.2)
        server.stop(signal.SIGKILL)  # the first trial's MLflow run exists; the server dies while it trains
        out, err = driver.communicate(timeout=scaled(240))
    finally:
        server.stop()
    print(err)
    assert driver.returncode == 0, out + err
    rows = read_csv(tmp_path / "results" / "lost")
    assert [row["state"] for row in rows] == ["COMPLETE"] * 3
    for row in rows:
        summary = json.loads((trials_dir / row["key"] / "summary.json").read_text())
        assert summary["status"] == "ok" and summary["test"]["STSBenchmark"] > 0
    warnings = [line for line in err.splitlines() if line.startswith("sweep: warning:")]
    assert len(warnings) == 1 and "loggers: mlflow failed" in warnings[0], err
    assert "the study goes on without mlflow" in warnings[0]
    assert "Traceback" not in err


# ---- before Tune starts (fast) --------------------------------------------------------------------------
def spec_with(tmp_path: Path, **top) -> object:
    return load_study(study_file(tmp_path, {"name": "s", "base": {"model": "embedded"},
                                            "results_dir": str(tmp_path / "r"), **top}))


@pytest.mark.parametrize("uri, fragment", [
    ("http://127.0.0.1:{port}", "is not reachable"),  # nothing listens there
    ("nosuchscheme://somewhere", "refused"),  # MLflow has no store for this scheme
])
def test_unreachable_or_refused_mlflow_is_one_warning_before_tune(tmp_path, uri, fragment, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec = spec_with(tmp_path, loggers=["mlflow"], tracking={"mlflow_uri": uri.format(port=free_port())})
    said: list[str] = []
    started = time.monotonic()
    assert logger_callbacks(spec, warn=said.append) == []
    assert time.monotonic() - started < scaled(20)  # no retry loop (MLflow's retries take minutes)
    assert len(said) == 1 and said[0].startswith("loggers: mlflow: ") and fragment in said[0], said
    assert "MLFLOW_TRACKING_URI" in said[0] and "mlflow server" in said[0]  # the fix


def test_a_password_in_the_uri_is_not_shown(tmp_path, monkeypatch):
    from sweep.text import hide_password

    assert hide_password("https://me:s3cret@mlflow.lab:5000/x") == "https://me:***@mlflow.lab:5000/x"
    assert hide_password("sqlite:///m.db") == "sqlite:///m.db"
    said: list[str] = []
    spec = spec_with(tmp_path, loggers=["mlflow"], tracking={"mlflow_uri": f"http://me:s3cret@127.0.0.1:{free_port()}"})
    assert logger_callbacks(spec, warn=said.append) == []
    assert len(said) == 1 and "s3cret" not in said[0] and "me:***@127.0.0.1" in said[0], said


def test_mlflow_uri_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    said: list[str] = []
    assert logger_callbacks(spec_with(tmp_path, loggers=["mlflow"]), warn=said.append) == []
    assert len(said) == 1 and os.environ["MLFLOW_TRACKING_URI"] in said[0]


@pytest.mark.slow  # MLflow's own store, started and queried
def test_a_local_mlflow_store_answers(tmp_path):
    assert mlflow_problem(f"sqlite:///{tmp_path / 'm.db'}") is None


def test_unreachable_wandb_server_switches_to_offline_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{free_port()}")
    said: list[str] = []
    callbacks = logger_callbacks(spec_with(tmp_path, loggers=["wandb"]), warn=said.append)
    assert os.environ["WANDB_MODE"] == "offline"  # monkeypatch restores it
    assert len(callbacks) == 1 and callbacks[0].kwargs["mode"] == "offline"
    assert callbacks[0].kwargs["dir"] == str((tmp_path / "r" / "s").resolve())
    assert len(said) == 1 and "loggers: wandb:" in said[0] and "wandb sync" in said[0], said


def test_wandb_online_without_an_api_key_is_one_warning_naming_wandb_login(tmp_path, monkeypatch):
    """Ray's own W&B callback refuses to start without a key; the study would go on without W&B."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
        monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
        said: list[str] = []
        [callback] = logger_callbacks(spec_with(tmp_path, loggers=["wandb"]), warn=said.append)
        assert said == []  # the server answers: online
        callback.setup()  # Tune's first call: no exception escapes
        callback.log_trial_result(1, None, {"step": 3, "dev_stsb": 1.0})  # off: not called
    finally:
        listener.close()
    assert len(said) == 1 and said[0].startswith("loggers: wandb failed (ValueError: No WandB API key"), said
    assert "run `wandb login` (or set WANDB_API_KEY, or WANDB_MODE=offline)" in said[0]


# One trial's W&B logging actor, run as Ray runs it: `run()` until the driver's END, then what `ray.kill`
# does to an actor (SIGKILL to its child processes, then an exit without atexit hooks). Ray's queue protocol
# (_QueueItem) is Ray's own; the queue is a list here.
WANDB_ACTOR_AS_RAY_ENDS_IT = """
import json, os, signal, sys
from types import SimpleNamespace
from ray.air.integrations.wandb import _QueueItem
from sweep.run import reaper
from sweep.run.trackers import logger_callbacks

folder = sys.argv[1]
spec = SimpleNamespace(loggers=["wandb"], tracking=None, name="s", study_dir=folder)
[callback] = logger_callbacks(spec)
items = [(_QueueItem.RESULT, {"dev_stsb": 61.5, "training_iteration": 1}), (_QueueItem.END, None)]
os.makedirs(folder + "/trial")
actor = callback._logger_actor_cls(folder + "/trial", SimpleNamespace(get=lambda: items.pop(0)), [], [],
                                   id="t1", name="t1", project="s", group="s", dir=folder, mode="offline",
                                   config={"key": "t1"})
actor.run()
# What is still running below this process (sweep.run.reaper reads /proc, and skips what ends while it reads).
left = reaper.descendants(os.getpid())
print(json.dumps({"children_after_run": sorted(reaper.name(pid) for pid in left)}), flush=True)
for pid in left:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended since
        pass
os._exit(0)
"""


def test_a_wandb_run_is_written_before_ray_kills_its_logging_actor(tmp_path):
    """Ray kills a trial's W&B logging actor, and its child wandb-core, as soon as the actor's run() returns:
    run() must return only once wandb-core has written the run and exited. The run file then holds the run,
    its config and the logged result."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config")}
    proc = subprocess.run([sys.executable, "-c", WANDB_ACTOR_AS_RAY_ENDS_IT, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    report = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    assert report["children_after_run"] == [], report  # wandb-core has exited
    [folder] = (tmp_path / "wandb").glob("offline-run-*-t1")
    written = wandb_run(folder)
    assert written["run"].run_id == "t1" and written["run"].run_group == "s"
    assert written["config"]["key"] == "t1"
    assert written["summary"]["dev_stsb"] == 61.5


def test_a_failing_tracker_is_one_warning_then_off():
    calls = []

    class Flaky:
        def log_trial_result(self, iteration, trial, result):
            calls.append(result["step"])
            raise ConnectionError("server went away")

        def log_trial_end(self, trial, failed=False):
            calls.append("end")

    said: list[str] = []
    tracked = type("Tracked", (StudyResults, Flaky), {"tracker": "mlflow", "warn": staticmethod(said.append)})()
    for step in (3, 6):
        tracked.log_trial_result(step // 3, None, {"step": step, "dev_stsb": 1.0})
    tracked.log_trial_end(None)
    assert calls == [3]  # off after the first failure
    assert said == ["loggers: mlflow failed (ConnectionError: server went away); the study goes on without mlflow "
                    "(its own results are complete); check that the MLflow server answers at tracking.mlflow_uri / "
                    "MLFLOW_TRACKING_URI and re-run to track new trials"]


@pytest.mark.parametrize("logger, package", [("mlflow", "mlflow"), ("wandb", "wandb")])
def test_missing_tracker_package_is_exit_2_before_anything_starts(tmp_path, logger, package):
    """The package is hidden from the driver (sys.modules[name] = None), installed or not."""
    study_file(tmp_path, {"name": "l", "base": {"model": "embedded"}, "loggers": [logger],
                          "results_dir": str(tmp_path / "results")})
    code = f"import sys; sys.modules[{package!r}] = None; from sweep.cli import main; sys.exit(main(['run', 'l.yaml']))"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=scaled(120), env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"sweep: error: loggers: {logger} needs the {package} package, which is not "
                             f"installed; pip install 'contrastive-sweep[{logger}]' (or remove {logger} from the "
                             "study's loggers)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.yaml"]  # no results folder, no Ray


def test_tracking_section_keys_are_checked(tmp_path):
    from trainer.errors import UserError

    assert spec_with(tmp_path, tracking={"mlflow_uri": "http://h:5000"}).tracking.mlflow_uri == "http://h:5000"
    with pytest.raises(UserError, match=r"tracking.mlflow_url.*is not a tracking key.*did you mean 'mlflow_uri'"):
        spec_with(tmp_path, tracking={"mlflow_url": "http://h:5000"})


def test_adding_a_tracker_to_a_study_is_the_same_study():
    old = {"name": "s", "base": {"a": 1}, "loggers": [], "tracking": {"mlflow_uri": None, "wandb_project": None}}
    new = {**old, "loggers": ["mlflow"], "tracking": {"mlflow_uri": "http://h:5000", "wandb_project": None}}
    assert not compare_specs(old, new).any


def test_what_a_tracker_is_given():
    """Evaluation reports as they are (Tune's config left out, the trainer step as timesteps_total); the
    final summary as its numbers only; an errored trial's run ends failed."""
    from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

    logged, ended = [], []

    class Recorder:
        def log_trial_result(self, iteration, trial, result):
            logged.append(result)

        def log_trial_end(self, trial, failed=False):
            ended.append((trial.trial_id, failed))

    class Trial:
        def __init__(self, trial_id):
            self.trial_id = trial_id

    tracked = type("Tracked", (StudyResults, Recorder), {"tracker": "mlflow"})()
    ok, broken = Trial("a"), Trial("b")
    tracked.log_trial_result(1, ok, {"step": 3, "dev_stsb": 70.5, "config": {"key": "a"}, TRAINING_ITERATION: 1})
    summary = {"status": "ok", "steps": 6, "best_step": 3, "best_dev_stsb": 70.5, "align": None, "variant": "paper",
               "test": {"STSBenchmark": 68.25, "SICKRelatedness": None}, "transfer": None}
    tracked.log_trial_result(3, ok, {"sweep_summary": summary, TRAINING_ITERATION: 3, "config": {"key": "a"}})
    tracked.log_trial_result(1, broken, {"sweep_error": "RuntimeError: boom", TRAINING_ITERATION: 1})
    tracked.log_trial_end(ok)
    tracked.log_trial_end(broken)
    assert logged == [
        {"step": 3, "dev_stsb": 70.5, TRAINING_ITERATION: 1, TIMESTEPS_TOTAL: 3},
        {"test": {"STSBenchmark": 68.25}, "best_dev_stsb": 70.5, "best_step": 3,
         TRAINING_ITERATION: 3, TIMESTEPS_TOTAL: 6},
    ]
    assert ended == [("a", False), ("b", True)]


def test_model_card_names_the_trial_tracker_runs(tmp_path):
    from sweep.commands.export import model_card
    from sweep.records.store import StudyFolder

    folder = StudyFolder(hand_made_study(tmp_path, {"k1": {"dev": 70.0, "state": "COMPLETE", "weights": True},
                                                    "k2": {"dev": 60.0, "state": "COMPLETE", "weights": True}}))
    offline = folder.path / "wandb" / "offline-run-20260101_000000-abc123"
    offline.mkdir(parents=True)
    (folder.trial_dir("k1") / "trackers.json").write_text(json.dumps({
        "mlflow": {"run_id": "r1", "experiment": "hand", "experiment_id": "7", "tracking_uri": "http://h:5000"},
        "wandb": {"run_id": "abc123", "project": "p", "group": "hand", "mode": "offline", "dir": str(folder.path)}}))

    def card(key):
        return model_card("hand", folder, key, folder.read_summary(key), {}, "chosen", "avg")

    text = card("k1")
    assert ("| MLflow run | run `r1` in experiment `hand` at http://h:5000 "
            "(http://h:5000/#/experiments/7/runs/r1) |") in text
    assert (f"| W&B run | run `p/abc123` (group `hand`), written offline to {offline} "
            f"(upload: `wandb sync {offline}`) |") in text
    assert "MLflow run" not in card("k2") and "W&B run" not in card("k2")  # no tracker: no rows
