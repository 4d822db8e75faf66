"""The namespace cluster of tests/cluster/netns_cluster.py: nodes with their own addresses and disks,
a node killed and marked dead, nothing left after (slow; root only, skipped elsewhere)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.netns_cluster import WorkerSpec, netns_cluster_fixture
from tests.deadlines import scaled

pytestmark = pytest.mark.slow

cluster_factory = netns_cluster_fixture("cluster_factory")

# On each worker node: the node's IP as Ray sees it, the hidden folder's entries, and whether the hidden
# folder and the cluster's Ray temp dir are mount points there (the node's own tmpfs).
DRIVER = r"""
import json, os, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

address, folder, temp_dir, *ips = sys.argv[1:]
ray.init(address=address, logging_level="ERROR")

@ray.remote(num_cpus=1)
def probe():
    return {"ip": ray.util.get_node_ip_address(), "folder": sorted(os.listdir(folder)),
            "folder_mounted": os.path.ismount(folder), "temp_mounted": os.path.ismount(temp_dir)}

node_ids = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_ids[ip], soft=False)).remote()
        for ip in ips]
print("RESULT " + json.dumps(dict(zip(ips, ray.get(refs, timeout=PROBE_TIMEOUT_S)))))
"""


def test_nodes_have_their_own_address_and_disk_and_a_killed_node_is_marked_dead(tmp_path, cluster_factory):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "driver-only.txt").write_text("on the driver's disk")
    cluster = cluster_factory([WorkerSpec(cpus=1), WorkerSpec(cpus=1, hidden=(folder,))])
    ips = [cluster.node_ip(0), cluster.node_ip(1)]
    assert ips[0] != ips[1] and cluster.address.startswith(cluster.head_ip + ":")

    driver = DRIVER.replace("PROBE_TIMEOUT_S", repr(scaled(120)))  # the deadline, scaled here: the driver runs alone
    done = subprocess.run([sys.executable, "-c", driver, cluster.address, str(folder), cluster.temp_dir, *ips],
                          env=cluster.env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(180),
                          start_new_session=True)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    # each task ran on its node, with that node's namespace address
    assert [seen[ip]["ip"] for ip in ips] == ips
    # node 0 sees the driver's folder; on node 1 it is an empty folder of its own; both have their own temp dir
    assert seen[ips[0]]["folder"] == ["driver-only.txt"] and not seen[ips[0]]["folder_mounted"]
    assert seen[ips[1]]["folder"] == [] and seen[ips[1]]["folder_mounted"]
    assert seen[ips[0]]["temp_mounted"] and seen[ips[1]]["temp_mounted"]
    assert sorted(p.name for p in folder.iterdir()) == ["driver-only.txt"]

    cluster.kill_node(0)
    # seconds from the kill to the GCS's end time of the node
    marked_after = cluster.wait_for_dead(0, timeout=scaled(30))
    assert marked_after < scaled(30)
    alive = [n["ip"] for n in cluster.nodes() if n["alive"] and not n["head"]]
    assert alive == [ips[1]]
    print(f"node killed -> marked dead by the GCS after {marked_after:.1f} s")

    links, spaces, pids = cluster.links(), [cluster.netns(0), cluster.netns(1)], cluster.pids()
    assert len(links) == 3 and len(pids) >= 6  # head: ray start, GCS, raylet, agents...; node 1: as many
    cluster.close()  # the fixture's close after the test is then a no-op
    assert cluster.leftovers() == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not [name for name in spaces if name in listed.split()]
    listed = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert not [name for name in links if f" {name}:" in listed or f" {name}@" in listed]
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists() and _state(pid) not in ("Z", "X")]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "X"
