"""`sweep run --address` on a real multi-node Ray cluster whose worker nodes share no disk with the driver
(tests/cluster/netns_cluster.py: network and mount namespaces, root only; skipped elsewhere with the reason).

What a lab with three servers and no shared disk expects: every trial folder lands whole on the driver,
keep_weights holds cluster-wide, a node without the data is left out before it gets a trial (and one that
joins later is checked before its first), a node that dies costs its trials a retry, not a result, and
nothing stays behind on the workers.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest

from tests.cluster.netns_cluster import WorkerSpec, netns_cluster_fixture
from tests.deadlines import scaled
from tests.helpers import Driver, fake_env, read_csv, reported_steps, trial_progress, write_study

pytestmark = pytest.mark.slow
netns_cluster = netns_cluster_fixture("netns_cluster")
STAGING = Path(tempfile.gettempdir()) / "contrastive-sweep" / "staging"


def sweep(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=scaled(timeout), start_new_session=True)


def trial_files(study_dir: Path) -> dict[str, set[str]]:
    """key -> every file under trials/<key>/ (relative paths)."""
    return {d.name: {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()}
            for d in sorted((study_dir / "trials").iterdir())}


def metrics_keys(study_dir: Path) -> dict[str, list[str]]:
    out = {}
    for d in sorted((study_dir / "trials").iterdir()):
        lines = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line.strip()]
        out[d.name] = sorted({k for line in lines for k in line})
    return out


def started(driver: Driver) -> int:
    """Trials the driver has printed as started."""
    return sum("] start " in line for line in driver.lines)


def wait_for(driver: Driver, timeout: float) -> None:
    try:
        driver.finish(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the driver did not end within {scaled(timeout):.0f} s:\n{driver.out}")


def staged_leftovers(keys) -> list[Path]:
    """What the worker nodes' staging folders (under the shared /tmp here) still hold of these trials."""
    return [path for key in keys for path in STAGING.glob(f"*/{key}-*")]


def completed_once(study_dir: Path, name: str, n: int) -> None:
    """Every trial COMPLETE exactly once in Optuna and trials.csv."""
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    complete = [t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == n and len(set(complete)) == n, [(t.number, t.state.name) for t in trials]
    rows = read_csv(study_dir)
    assert len(rows) == n and {r["state"] for r in rows} == {"COMPLETE"}


def test_a_two_node_study_lands_whole_on_the_driver(tmp_path, netns_cluster, tiny_model_dir, shared_data_dir):
    # The same study on one machine and on two worker nodes that do not see the results folder.
    params = {"method": ["simcse", "mocose"], "ema.decay": [0.5, 0.9]}
    (tmp_path / "local").mkdir()
    (tmp_path / "cluster").mkdir()
    local = write_study(tmp_path / "local", "landing", tiny_model_dir, shared_data_dir, params,
                        keep_weights="all", loggers=["tensorboard"])
    run = sweep(["run", str(local)], tmp_path, dict(os.environ))  # the real trainer
    assert run.returncode == 0, run.stdout + run.stderr

    results = tmp_path / "cluster" / "results"
    cluster = netns_cluster([WorkerSpec(cpus=1, hidden=(results,)), WorkerSpec(cpus=1, hidden=(results,))])
    env = cluster.env  # the real trainer, as `local` ran
    study = write_study(tmp_path / "cluster", "landing", tiny_model_dir, shared_data_dir, params,
                        keep_weights="all", loggers=["tensorboard"])
    run = sweep(["run", str(study), "--address", cluster.address], tmp_path, env)
    assert run.returncode == 0, run.stdout + run.stderr
    one, two = tmp_path / "local" / "results" / "landing", results / "landing"
    assert trial_files(two) == trial_files(one)  # config, summary, full metrics, log, model/, trackers
    assert metrics_keys(two) == metrics_keys(one)
    assert all("model/config.json" in files for files in trial_files(two).values())
    hosts = set()
    node_ids = {n["ip"]: n["node_id"] for n in cluster.nodes() if not n["head"]}
    names = {cluster.node_ip(i): cluster.hostname(i) for i in (0, 1)}
    for key in trial_files(two):
        summary = json.loads((two / "trials" / key / "summary.json").read_text())
        assert summary["files"]["arrived"] is True
        assert summary["config"]["output_dir"] == str(two / "trials" / key)
        ip = summary["resources"]["node_ip"]
        hosts.add(ip)
        # the provenance is the worker's own: its host name and Ray node, the versions it imported
        node = summary["provenance"]["node"]
        assert node == {"hostname": names[ip], "ray_node_id": node_ids[ip]} and names[ip] != socket.gethostname()
        assert summary["provenance"]["packages"]["torch"] == importlib.metadata.version("torch")
    assert hosts <= {cluster.node_ip(0), cluster.node_ip(1)} and hosts  # ran on the worker nodes
    assert {r["weights"] for r in read_csv(two)} == {"kept"}
    assert staged_leftovers(trial_files(two)) == []  # nothing left on the nodes

    # keep_weights: best leaves exactly the best trial's model on the driver (and nothing in the workers).
    path = write_study(tmp_path / "cluster", "keep-best", tiny_model_dir, shared_data_dir, params, keep_weights="best")
    run = sweep(["run", str(path), "--address", cluster.address], tmp_path, env)
    assert run.returncode == 0, run.stdout + run.stderr
    study_dir = results / "keep-best"
    kept = [key for key, files in trial_files(study_dir).items() if "model/config.json" in files]
    rows = read_csv(study_dir)
    assert kept == [max(rows, key=lambda r: float(r["dev_stsb"]))["key"]]
    assert sorted(r["weights"] for r in rows) == ["deleted"] * 3 + ["kept"]
    assert staged_leftovers(trial_files(study_dir)) == []


@pytest.mark.parametrize("how", ["kill", "cut-then-kill"])
def test_a_lost_node_costs_a_retry_not_a_trial(tmp_path, netns_cluster, tiny_model_dir, shared_data_dir, how):
    results = tmp_path / "results"
    env_nodes = fake_env(steps=8, step_s=1.0)
    cluster = netns_cluster([WorkerSpec(cpus=1, hidden=(results,)), WorkerSpec(cpus=1, hidden=(results,))],
                            env=env_nodes)
    study = write_study(tmp_path, "lost", tiny_model_dir, shared_data_dir, {"ema.decay": [0.1, 0.3, 0.5, 0.7]})
    driver = Driver(["run", str(study), "--address", cluster.address], tmp_path, {**env_nodes, **cluster.env})
    try:
        # both nodes' trials are under way: each has reported a dev evaluation to the driver
        def both_reporting() -> bool:
            counts = reported_steps(results / "lost", "lost")
            return started(driver) >= 2 and len(counts) == 2 and min(counts) >= 1

        driver.wait_for(both_reporting, timeout=120)
        if how == "cut-then-kill":
            # node 0 cut off while the study goes on: node 1 reports two more evaluations. Counted over every trial
            # in the record, whatever its state: node 1's trial may end in between, and its successor starts at 0.
            cluster.cut_link(0)

            def evaluations() -> int:
                return sum(count for _, count in trial_progress(results / "lost", "lost"))

            before = evaluations()
            driver.wait_for(lambda: evaluations() >= before + 2, timeout=60)
        cluster.kill_node(0)
        wait_for(driver, 300)
    finally:
        if driver.proc.poll() is None:
            driver.proc.kill()
    out = driver.out
    assert driver.proc.returncode == 0, out
    lost = [line for line in out.splitlines() if "lost with its node" in line]
    assert lost and all(cluster.node_ip(0) in line for line in lost), out
    assert re.search(r"runs again from its start \(retry 1 of \d\)", out)
    completed_once(results / "lost", "lost", 4)


def test_a_node_without_the_data_is_left_out_and_one_joining_later_is_checked(tmp_path, netns_cluster,
                                                                             tiny_model_dir, shared_data_dir):
    results = tmp_path / "results"
    gate = tmp_path / "gate"  # the trials wait while it exists: the study cannot end before the late node joins
    gate.touch()
    env_nodes = fake_env(steps=4, step_s=1.0, FAKE_TRAIN_OOM_BATCH="64", FAKE_TRAIN_GATE=str(gate))
    cluster = netns_cluster([WorkerSpec(cpus=1, hidden=(results,)),
                             WorkerSpec(cpus=1, hidden=(results, shared_data_dir))], env=env_nodes)
    params = {"ema.decay": [0.1, 0.5, 0.9], "batch_size": [8, 64]}  # batch 64: out of memory, `failed`
    study = write_study(tmp_path, "nodata", tiny_model_dir, shared_data_dir, params)
    driver = Driver(["run", str(study), "--address", cluster.address], tmp_path, {**env_nodes, **cluster.env})
    try:
        driver.wait_for(lambda: started(driver) >= 1, timeout=120)
        # a third node, also without the data, joins while the study runs
        late = cluster.add_worker(WorkerSpec(cpus=1, hidden=(results, shared_data_dir)))
        # the good node is busy with the gated trial, so a pending trial is placed on the late node as it joins
        driver.wait_for(lambda: "failed its check" in driver.out, timeout=180)
        gate.unlink()
        wait_for(driver, 400)
    finally:
        if driver.proc.poll() is None:
            driver.proc.kill()
    out = driver.out
    assert driver.proc.returncode == 1, out  # the three out-of-memory trials are failures
    left_out = [line for line in out.splitlines() if "left out of this study" in line]
    assert len(left_out) == 1 and cluster.node_ip(1) in left_out[0] and "sweep data fetch" in left_out[0], out
    rows = read_csv(results / "nodata")
    assert sorted(r["status"] for r in rows) == ["failed"] * 3 + ["ok"] * 3
    study_dir = results / "nodata"
    for row in rows:
        summary = json.loads((study_dir / "trials" / row["key"] / "summary.json").read_text())
        assert summary["resources"]["node_ip"] == cluster.node_ip(0)  # every trial ran on the good node
        assert summary["resources"]["host"]
        if row["status"] == "failed":  # a failure's reason names its node
            assert summary["reason"].endswith(f"({cluster.node_ip(0)}))") and row["reason"] == summary["reason"]
    for line in out.splitlines():
        if "(log: " in line:
            assert Path(line.split("(log: ")[1].rstrip(")")).is_file()  # printed log paths exist here
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    states = [t.state.name for t in optuna.load_study(study_name="nodata", storage=storage).get_trials()]
    assert len(states) == 6  # no attempt lost to a bad node shows as a trial
    # the late node got a pending trial, failed its check there, and the trial ran on the good node
    assert any(cluster.node_ip(late) in line and "failed its check" in line for line in out.splitlines()), out


def test_a_cluster_where_no_node_has_the_data_is_refused(tmp_path, netns_cluster, tiny_model_dir, shared_data_dir):
    results = tmp_path / "results"
    cluster = netns_cluster([WorkerSpec(cpus=1, hidden=(results, shared_data_dir))])
    study = write_study(tmp_path, "refused", tiny_model_dir, shared_data_dir)
    run = sweep(["run", str(study), "--address", cluster.address], tmp_path, {**fake_env(), **cluster.env})
    assert run.returncode == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in run.stderr
    assert "no node of the Ray cluster" in errors[0] and cluster.node_ip(0) in errors[0]
    assert not (results / "refused" / "trials").exists()  # no trial was handed out


def test_with_no_node_left_the_study_says_what_it_waits_for_and_goes_on_when_one_joins(
        tmp_path, netns_cluster, tiny_model_dir, shared_data_dir):
    results = tmp_path / "results"
    env_nodes = fake_env(steps=8, step_s=1.0)
    cluster = netns_cluster([WorkerSpec(cpus=1, hidden=(results,))], env=env_nodes)
    study = write_study(tmp_path, "alone", tiny_model_dir, shared_data_dir, {"ema.decay": [0.1, 0.3]})
    driver = Driver(["run", str(study), "--address", cluster.address], tmp_path, {**env_nodes, **cluster.env})
    try:
        # the trial is under way on the only node: it has reported a dev evaluation to the driver
        driver.wait_for(lambda: started(driver) >= 1
                        and max(reported_steps(results / "alone", "alone"), default=0) >= 1, timeout=120)
        cluster.kill_node(0)  # the only worker node: nothing can take the trials now
        driver.wait_for(lambda: any(line.startswith("waiting: ") for line in driver.lines), timeout=60)
        cluster.add_worker(WorkerSpec(cpus=1, hidden=(results,)))
        wait_for(driver, 300)
    finally:
        if driver.proc.poll() is None:
            driver.proc.kill()
    out = driver.out
    assert driver.proc.returncode == 0, out
    waiting = [line for line in out.splitlines() if line.startswith("waiting: ")]
    assert len(waiting) == 1, out  # at most once a minute
    assert "each needs 1 CPU on one node" in waiting[0] and "0 CPU free" in waiting[0]
    completed_once(results / "alone", "alone", 2)
