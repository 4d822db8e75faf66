"""A method of one's own on a Ray cluster whose worker nodes do not see the driver's disk (tests/cluster/
netns_cluster.py, root only; skipped elsewhere with the reason): the plugin file lies only beside the study on the
driver, and each trial carries its source to the node, which imports the driver's text (checked by its sha256)
and records the driver's plugin path and digest in its provenance."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from tests.cluster.netns_cluster import WorkerSpec, netns_cluster_fixture
from tests.helpers import REPO, read_csv, run_sweep, write_study

pytestmark = pytest.mark.slow
netns_cluster = netns_cluster_fixture("netns_cluster")


def test_a_plugin_travels_to_nodes_that_do_not_see_it(tmp_path, netns_cluster, tiny_model_dir, shared_data_dir):
    folder = tmp_path / "study"  # the study, its plugin and its results: on the driver's disk only
    folder.mkdir()
    plugin = folder / "dcl.py"
    shutil.copy(REPO / "docs" / "examples" / "dcl" / "dcl.py", plugin)
    study = write_study(folder, "dcl_cluster", tiny_model_dir, shared_data_dir,
                        {"method": ["simcse", "dcl"], "dcl.sigma": [0.5]}, plugins=["dcl.py"])
    cluster = netns_cluster([WorkerSpec(cpus=1, hidden=(folder,))])
    run = run_sweep(["run", str(study), "--address", cluster.address], tmp_path, timeout=400, env=cluster.env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = folder / "results" / "dcl_cluster"
    rows = read_csv(results)
    assert sorted(r["method"] for r in rows) == ["dcl", "simcse"] and {r["state"] for r in rows} == {"COMPLETE"}
    digest = hashlib.sha256(plugin.read_bytes()).hexdigest()
    for row in rows:
        summary = json.loads((results / "trials" / row["key"] / "summary.json").read_text())
        assert summary["resources"]["node_ip"] == cluster.node_ip(0)  # ran on the node
        assert summary["provenance"]["code"]["plugins"] == {str(plugin): digest}  # the driver's file, by digest
