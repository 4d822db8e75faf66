"""Every node of a Ray cluster is checked, from the node itself, before it runs a trial of the study.

Owns: the node's report (`node_report`: the data directory installed and verified, the corpus, every model
of the study loadable, and the versions of this project's code, torch, transformers, Ray and Python),
the verdict against the driver's own versions (`node_problem`), the check of every node present before
Tune starts (`check_nodes`), the fence that keeps a failed node out of the study (`fence_node`: an actor
holding all of the node's CPUs and GPUs, so Ray places no trial there), and the check a trial makes on a
node that joined later (`check_this_node`, at the start of the trial's worker).

Why: a node without the data fails every trial it is given in seconds, and one bad node swallows a study;
a node with other code or other torch/transformers versions silently changes the science. A node that
fails is left out with one line naming it (host and address) and the fix; the study goes on on the others,
and refuses (exit 2) only when no node is left (README "On a Ray cluster"). A trial whose node fails the
check when the trial starts there ends that attempt at once (NodeUnfit); Tune runs it again elsewhere, and
that attempt does not count against the trial's retries (sweep.run.trial_events).

    bad = check_nodes(configs, cpu=1, gpu=0, say=print)   # driver, before Tune; fences the bad nodes
"""

from __future__ import annotations

import functools
import hashlib
import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from sweep.run.job import TrialJob
from trainer.errors import UserError

# The Ray namespace of the study's named actors (the receiver of trial files: sweep.run.trial_files).
NAMESPACE = "contrastive-sweep"
# Distributions whose versions must be the driver's on every node (different versions change the science).
VERSIONED = ("contrastive-sweep", "torch", "transformers", "ray")
# Seconds the driver waits for every node's report (a node starts a worker process and loads tokenizers).
CHECK_TIMEOUT_S = 180.0
# The packages whose source is the project's code on a node.
CODE_PACKAGES = ("trainer", "sweep")


class NodeUnfit(RuntimeError):
    """This trial's node failed its check: the attempt ends at once and Tune runs the trial elsewhere."""


@functools.lru_cache(maxsize=1)
def software_versions() -> dict[str, str]:
    """This process's versions: the project's code (a hash of its source), its distributions, Python."""
    versions = {"python": platform.python_version(), "code": code_fingerprint()}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def code_fingerprint() -> str:
    """sha256 (12 hex digits) over the project's Python source: the same commit gives the same value."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[2]
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def node_report(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run on the node being checked: who it is, its versions, and what its inputs lack (a UserError's line)."""
    import ray

    from sweep.run.preflight import preflight_inputs

    problem = None
    try:
        preflight_inputs(configs)
    except UserError as exc:
        problem = str(exc)
    except Exception as exc:  # a check that crashes is a failed check, said in one line
        problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return {"host": socket.gethostname(), "ip": ray.util.get_node_ip_address(), "versions": software_versions(),
            "problem": problem}


def node_problem(report: dict[str, Any], reference: dict[str, str]) -> str | None:
    """What is wrong with a node, one line with the fix (None: fit to run trials)."""
    if report.get("problem"):
        return report["problem"]
    versions = report.get("versions") or {}
    if versions.get("code") != reference.get("code"):
        return (f"it runs other code of this project (source hash {versions.get('code')}, the driver's "
                f"{reference.get('code')}): install the driver's commit on it")
    differ = [f"{name} {versions.get(name)} (driver {reference.get(name)})" for name in ("python", *VERSIONED)
              if versions.get(name) != reference.get(name)]
    if differ:
        return f"other versions: {', '.join(differ)}: install the driver's versions on it (the same image or lock file)"
    return None


def describe(node: dict[str, Any]) -> str:
    """'host (address)' of a ray.nodes() entry."""
    return f"{node.get('NodeManagerHostname') or '?'} ({node.get('NodeManagerAddress') or '?'})"


def trial_nodes(cpu: float, gpu: float) -> list[dict[str, Any]]:
    """The live nodes with room for one trial (a head started with 0 CPUs runs no trial and is not checked)."""
    import ray

    nodes = []
    for node in ray.nodes():
        resources = node.get("Resources") or {}
        if node.get("Alive") and resources.get("CPU", 0.0) >= cpu and resources.get("GPU", 0.0) >= gpu:
            nodes.append(node)
    return nodes


def check_nodes(configs: list[dict[str, Any]], cpu: float, gpu: float, say: Callable[[str], None],
                where: str) -> tuple[dict[str, str | None], list[Any]]:
    """Check every node that could run a trial, in parallel, from the node itself. A node that fails is
    named on one line and fenced off; returns ({node id: problem or None}, the fences to keep alive). A
    UserError (exit 2) when no node passes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = trial_nodes(cpu, gpu)
    if not nodes:
        return {}, []  # nothing to check: preflight_resources names what the cluster lacks
    reference = software_versions()
    remote = ray.remote(num_cpus=0, max_retries=0)(node_report)
    refs = {}
    for node in nodes:
        pinned = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        refs[node["NodeID"]] = remote.options(scheduling_strategy=pinned).remote(configs)
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
    verdicts: dict[str, str | None] = {}
    for node in nodes:
        ref = refs[node["NodeID"]]
        if ref not in ready:
            problem = f"it did not answer the check within {CHECK_TIMEOUT_S:.0f} s: check that its Ray node is healthy"
        else:
            try:
                problem = node_problem(ray.get(ref), reference)
            except Exception as exc:  # the node died, or its worker could not start
                problem = f"its check failed: {' '.join(str(exc).split())[:200]}"
        verdicts[node["NodeID"]] = problem
    bad = [node for node in nodes if verdicts[node["NodeID"]]]
    if len(bad) == len(nodes):
        lines = "; ".join(f"node {describe(n)}: {verdicts[n['NodeID']]}" for n in bad)
        raise UserError(f"no node of {where} can run the study's trials: {lines}")
    fences = []
    for node in bad:
        say(f"node {describe(node)} left out of this study: {verdicts[node['NodeID']]}")
        fences.append(fence_node(node["NodeID"], node.get("Resources") or {}))
    for fence in fences:
        ray.get(fence.ready.remote(), timeout=60)
    return verdicts, fences


class _Fence:
    """Holds all of a node's CPUs and GPUs while the study runs, so Ray places no trial on that node."""

    def ready(self) -> bool:
        return True


def fence_node(node_id: str, resources: dict[str, float]) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(_Fence).options(
        num_cpus=resources.get("CPU", 0.0), num_gpus=resources.get("GPU", 0.0), max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote()


def check_this_node(job: TrialJob) -> None:
    """In a trial's worker on a cluster: the driver's receiver knows this node's verdict, or this trial checks
    the node now (its own config) and the receiver judges it against the driver's versions. A failed node
    is fenced off by the receiver and this attempt ends with NodeUnfit naming the node."""
    import ray

    receiver = ray.get_actor(job.files["receiver"], namespace=NAMESPACE)
    node_id = ray.get_runtime_context().get_node_id()
    known, problem = ray.get(receiver.verdict.remote(node_id))
    if not known:
        problem = ray.get(receiver.judge.remote(node_id, node_report([job.config])))
    if problem:
        raise NodeUnfit(f"node {socket.gethostname()} ({ray.util.get_node_ip_address()}) failed its check: {problem}")
