"""A real multi-node Ray cluster on one machine: a head node and worker nodes that share no disk.

A lab runs its sweeps on a few servers: one driver machine with the results folder and the data, and
worker machines that see neither unless someone copies it there. A Ray "cluster" of one process tree
on loopback hides every bug of that kind (a trial that opens the driver's results folder, a node without
the data set), and `ray start --address` on loopback alone cannot start two nodes with distinct IPs.
This module builds the real thing out of Linux network and mount namespaces (root only):

- a Linux bridge `swbr<id>` with address 10.A.B.1/24 in the root network namespace, where the head
  node runs (`ray start --head --num-cpus=0`), so the driver (`ray.init(address=...)`, `sweep run
  --address`) runs on the head node as it would on the lab's login machine and every trial runs on a
  worker node;
- per worker node a network namespace `sw<id>n<i>` joined to the bridge by a veth pair (host end
  `sw<id>h<i>`), address 10.A.B.(10+i), and `ray start --address=HEAD` inside it, in a private mount
  namespace (and a UTS namespace: its own host name, the network namespace's name) with a fresh tmpfs over the
  cluster's Ray temp dir (each node its own sessions, logs,
  sockets and spill files, as on separate machines) and over each path in that worker's `hidden` list
  (e.g. the driver's results folder, which then is an EMPTY folder on that node, or a data directory
  to simulate a node without the data). The venv, the source tree and the rest of the disk stay
  visible, as on machines with a shared home/NFS;
- token authentication (RAY_AUTH_MODE=token) and health-check settings that make the GCS mark a
  dead or unreachable node DEAD within seconds instead of ~30-60 s (HEALTH_CHECK_ENV).

Every address is inside namespaces this module creates: the head on the bridge, the workers in their
namespaces. No traffic leaves the machine (the default route in a worker namespace, added only while
the host does not forward IPv4, leads to the bridge address and stops there).

The cluster's own Ray temp dir is /tmp/swray<id> (passed as --temp-dir to every node; Ray's default
would be /tmp/ray, shared with every other Ray instance of the machine): torn down with the cluster.

Everything started is stopped by pid on exit (the head's session, each worker namespace's processes
from `ip netns pids` and its `ray start` process, anything else carrying the cluster's marker in its
environment), then the veths, namespaces, bridge and temp dir are removed: on a normal exit, when the
body raises, on SIGTERM of the process, and at the next start of any cluster after the owner died
by SIGKILL (a registry file /tmp/sweep-netns-cluster/<id>.json names the owner pid).

In tests:

    from tests.cluster.netns_cluster import NamespaceCluster, WorkerSpec, skip_reason

    def test_trials_write_nothing_on_the_workers(tmp_path):
        if (reason := skip_reason()) is not None:
            pytest.skip(reason)
        results = tmp_path / "results"
        with NamespaceCluster(tmp_path / "cluster", [WorkerSpec(cpus=2, hidden=(results,))] * 2) as cluster:
            subprocess.run(["sweep", "run", study, "--address", cluster.address], env=cluster.env, ...)
            cluster.kill_node(1)  # a server dies mid-sweep
            cluster.wait_for_dead(1)

or as a fixture (it skips by itself): `cluster_factory = netns_cluster_fixture("cluster_factory")` at module
level, then `cluster = cluster_factory([WorkerSpec(), WorkerSpec(hidden=(data,))])` in a test.

By hand (as root), a cluster to try `sweep run --address` on, until Ctrl-C / SIGTERM:

    .venv/bin/python tests/cluster/netns_cluster.py --workers 2 --cpus 1 --hide /path/to/results
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import ipaddress
import json
import os
import queue
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY_DIR = Path("/tmp/sweep-netns-cluster")
MARKER_VAR = "SWEEP_NETNS_CLUSTER"  # in every node process's environment: "<id>:<owner pid>"
# Ray 2.60's GCS health checks of the raylets (names from the gcs_server binary: RAY_health_check_*).
# Defaults 5000 / 3000 / 10000 / 5 mark a dead node after ~20-60 s; these after ~3-5 s for a killed node
# (refused connections) and ~10 s for one cut off (each check times out). Not lower: on a busy 2-core
# machine a raylet may be slow to answer, and a live node marked dead is not coming back.
HEALTH_CHECK_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1500",
    "RAY_health_check_failure_threshold": "4",
}
OBJECT_STORE_BYTES = 200 * 2**20  # per node (Ray's default, 30% of memory, would be ~7 GB each)
START_TIMEOUT = 120.0

_BRIDGE_RE = re.compile(r"^swbr([0-9a-f]{4})$")
_VETH_RE = re.compile(r"^sw([0-9a-f]{4})[hp]\d+$")
_NETNS_RE = re.compile(r"^sw([0-9a-f]{4})n\d+$")
_TEMP_RE = re.compile(r"^swray([0-9a-f]{4})$")


@dataclass(frozen=True)
class WorkerSpec:
    """One worker node. `cpus`/`gpus` are whole numbers (`ray start --num-cpus/--num-gpus` take ints; a
    node's fake GPUs are only a resource count). `hidden`: paths that are an empty tmpfs on this node
    (created empty on the host first if missing, since a mount needs its mount point)."""

    cpus: int = 1
    gpus: int = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    hidden: tuple[str | Path, ...] = ()
    object_store_memory: int = OBJECT_STORE_BYTES

    def __post_init__(self) -> None:
        for name in ("cpus", "gpus"):
            value = getattr(self, name)
            if float(value) != int(value) or value < 0:
                raise ValueError(f"WorkerSpec.{name} must be a whole number >= 0 (ray start takes ints): {value}")
            object.__setattr__(self, name, int(value))
        if isinstance(self.hidden, (str, Path)):
            object.__setattr__(self, "hidden", (self.hidden,))


# --- small process / network helpers ---------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat fields after the command name: [state, ppid, pgrp, session, ..., starttime at 19]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def _alive(pid: int, start_time: int | None = None) -> bool:
    """A live (not zombie) process; the same one as recorded when `start_time` is given."""
    fields = _proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _session_pids(sid: int) -> set[int]:
    out = set()
    for pid in _all_pids():
        fields = _proc_stat(pid)
        if fields and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            out.add(pid)
    return out


def _marked_pids(marker: str) -> set[int]:
    """Live processes whose environment carries MARKER_VAR=marker (every node process inherits it)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    out = set()
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(pid):
            out.add(pid)
    return out


def _netns_pids(netns: str) -> set[int]:
    done = _ip("netns", "pids", netns, check=False)
    if done.returncode != 0:
        return set()
    return {int(p) for p in done.stdout.split() if p.isdigit() and _alive(int(p))}


def _kill_until_gone(find: Callable[[], set[int]], timeout: float = 30.0) -> set[int]:
    """SIGKILL what `find` returns until it returns nothing; what is left at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = find()
        if not left or time.monotonic() > deadline:
            return left
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _links() -> list[str]:
    done = _ip("-o", "link", "show", check=False)
    names = []
    for line in done.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def _netns_list() -> list[str]:
    done = _ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _subnet_in_use(net: ipaddress.IPv4Network) -> bool:
    """Whether any address or route of the root namespace overlaps `net`."""
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        for token in _ip(*args, check=False).stdout.split():
            try:
                other = ipaddress.ip_network(token, strict=False)
            except ValueError:
                continue
            if other.version == 4 and other.prefixlen > 0 and other.overlaps(net):
                return True
    return False


# Ports every Ray node takes by default (ray._private.ray_constants: the GCS, the dashboard, the dashboard agent's
# HTTP server). A head started on one of them fails ("port 52365 ... is used by other components": seen on CI).
RAY_DEFAULT_PORTS = frozenset({6379, 8265, 52365})


def free_port() -> int:
    """A free port of the root namespace outside Ray's default worker port range (10002-19999) and Ray's default
    ports: free on every address, loopback included (tests.helpers re-exports it: the tests' one free-port
    finder)."""
    while True:
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            port = s.getsockname()[1]
        if port >= 20000 and port not in RAY_DEFAULT_PORTS:
            return port


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def _forwarding_on() -> bool:
    try:
        return Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() != "0"
    except OSError:
        return True  # unknown: add no default route


def _wait_for_line(proc: subprocess.Popen, log: Path, text: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        content = log.read_text(errors="replace") if log.exists() else ""
        if text in content:
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited with {proc.returncode}" if proc.returncode is not None else f"not up in {timeout:.0f} s"
            tail = "".join(content.splitlines(keepends=True)[-30:])
            raise RuntimeError(f"{what} {why} (log {log}):\n{tail}")
        time.sleep(0.2)


_skip_reason_cache: list[str | None] = []


def skip_reason() -> str | None:
    """None when this machine can build a NamespaceCluster (root, `ip netns add` works, a bridge and a
    veth can be made, `unshare` exists), else a one-line reason. Probed once per process."""
    if _skip_reason_cache:
        return _skip_reason_cache[0]
    reason = _probe()
    _skip_reason_cache.append(reason)
    return reason


def _probe() -> str | None:
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "a namespace cluster needs root (ip netns, mount)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found (iproute2 / util-linux)"
    name = f"swprobe{os.getpid() % 100000}"
    _ip("link", "del", name + "a", check=False)  # a probe of a killed process with the same pid
    _ip("netns", "del", name, check=False)
    try:
        done = _ip("netns", "add", name, check=False)
        if done.returncode != 0:
            return f"`ip netns add` fails: {done.stderr.strip()}"
        done = _ip("link", "add", name + "a", "type", "veth", "peer", "name", name + "b", "netns", name, check=False)
        if done.returncode != 0:
            return f"`ip link add type veth` fails: {done.stderr.strip()}"
        done = subprocess.run(["ip", "netns", "exec", name, "unshare", "-m", "-u", "--propagation", "private",
                               "hostname", name], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            return f"`unshare -m -u` in a namespace fails: {done.stderr.strip()}"
    finally:
        _ip("link", "del", name + "a", check=False)
        _ip("netns", "del", name, check=False)
    return None


# --- the registry of live clusters, and clean-up of dead owners' leftovers --------------------------------


def _registry_path(cid: str) -> Path:
    return REGISTRY_DIR / f"{cid}.json"


def _write_registry(cid: str, record: dict) -> None:
    path = _registry_path(cid)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _owner_alive(record: dict) -> bool:
    """Whether the process that registered a cluster still runs (the same process: pid and start time).
    An owner in another pid namespace (a container sharing /tmp) counts as alive: its pid means nothing here."""
    if record.get("owner_pidns", _pid_namespace()) != _pid_namespace():
        return True
    return _alive(int(record.get("owner_pid", 0)), record.get("owner_start"))


def _remove_cluster_resources(cid: str, record: dict) -> None:
    """Stop every process of cluster `cid` and remove its links, namespaces and temp dir (no registry)."""
    marker = record.get("marker")
    netns = [n for n in record.get("netns", []) if _NETNS_RE.match(n)]
    head = record.get("head_pid")

    def find() -> set[int]:
        pids: set[int] = set()
        for name in netns:
            pids |= _netns_pids(name)
        if marker:
            pids |= _marked_pids(marker)
        if head and marker and _alive(head):
            # the head's session, only while its leader is still this cluster's (pid not reused)
            if f"{MARKER_VAR}={marker}".encode() in _environ(head):
                pids |= _session_pids(head)
        return pids

    _kill_until_gone(find)
    for name in record.get("veths", []):
        if _VETH_RE.match(name):
            _ip("link", "del", name, check=False)
    for name in netns:
        _ip("netns", "del", name, check=False)
    bridge = record.get("bridge")
    if bridge and _BRIDGE_RE.match(bridge):
        _ip("link", "del", bridge, check=False)
    temp_dir = record.get("temp_dir")
    if temp_dir and _TEMP_RE.match(Path(temp_dir).name) and Path(temp_dir).parent == Path("/tmp"):
        shutil.rmtree(temp_dir, ignore_errors=True)


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def cleanup_leftovers() -> list[str]:
    """Remove what clusters of dead owners left (owner SIGKILLed, machine reboot of /tmp aside): registered
    clusters whose owner is gone, and namespaces/links/temp dirs named like ours with no registry file.
    Returns the cluster ids cleaned. Called by every NamespaceCluster start."""
    cleaned = []
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    for path in sorted(REGISTRY_DIR.glob("*.json")):
        cid = path.stem
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            # half-written by an owner that died at once, or being written right now
            if time.time() - path.stat().st_mtime < 60:
                continue
            record = {"netns": [], "veths": [], "bridge": f"swbr{cid}", "temp_dir": f"/tmp/swray{cid}"}
        else:
            if _owner_alive(record):
                continue
        _remove_cluster_resources(cid, record)
        path.unlink(missing_ok=True)
        cleaned.append(cid)
    # names of ours without a registry file (a cluster registers before it creates anything, and removes
    # its file last, so these belong to no live cluster)
    registered = {p.stem for p in REGISTRY_DIR.glob("*.json")}
    orphans: dict[str, dict] = {}
    for name in _netns_list():
        m = _NETNS_RE.match(name)
        if m and m.group(1) not in registered:
            orphans.setdefault(m.group(1), {"netns": [], "veths": []})["netns"].append(name)
    for name in _links():
        for pattern, key in ((_VETH_RE, "veths"), (_BRIDGE_RE, "bridge")):
            m = pattern.match(name)
            if m and m.group(1) not in registered:
                record = orphans.setdefault(m.group(1), {"netns": [], "veths": []})
                if key == "bridge":
                    record["bridge"] = name
                else:
                    record["veths"].append(name)
    for entry in Path("/tmp").glob("swray*"):
        m = _TEMP_RE.match(entry.name)
        if m and m.group(1) not in registered and entry.is_dir():
            orphans.setdefault(m.group(1), {"netns": [], "veths": []})["temp_dir"] = str(entry)
    for cid, record in orphans.items():
        if _registry_path(cid).exists():  # registered meanwhile: a cluster starting now
            continue
        _remove_cluster_resources(cid, record)
        cleaned.append(cid)
    return cleaned


# --- SIGTERM / exit: tear down whatever is still up ------------------------------------------------------

_OPEN: list[NamespaceCluster] = []
_sigterm_installed = False
_previous_sigterm: Callable | int | None = None


def _close_all() -> None:
    for cluster in list(_OPEN):
        try:
            cluster.close()
        except Exception as e:  # keep tearing the others down
            print(f"netns_cluster: teardown of {cluster.cid} failed: {e!r}", file=sys.stderr)


def _on_sigterm(signum, frame) -> None:
    _close_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _install_sigterm() -> None:
    global _sigterm_installed, _previous_sigterm
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _previous_sigterm = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True


atexit.register(_close_all)


# --- the cluster ----------------------------------------------------------------------------------------

_WATCH = r"""
import json, os, sys, time
from ray._raylet import GcsClient
client = GcsClient(address=sys.argv[1])
parent, last = os.getppid(), None
while os.getppid() == parent:
    try:
        infos = client.get_all_node_info(timeout=10).values()
        snap = sorted(({"ip": n.node_manager_address, "alive": n.state == 0, "head": n.is_head_node,
                        "node_id": n.node_id.hex(), "cpus": dict(n.resources_total).get("CPU", 0.0),
                        "end_ms": n.end_time_ms} for n in infos), key=lambda n: (n["ip"], n["node_id"]))
    except Exception as e:
        snap = {"error": repr(e)}
    if snap != last:
        print(json.dumps(snap), flush=True)
        last = snap
    time.sleep(float(sys.argv[2]))
"""


@dataclass
class _Node:
    index: int
    spec: WorkerSpec
    netns: str
    veth: str
    ip: str
    proc: subprocess.Popen | None = None
    killed_at: float | None = None  # time.time() of kill_node


class NamespaceCluster:
    """A Ray head in the root namespace plus one network namespace per worker node (module docstring).

    Use as a context manager; `close()` is idempotent and also runs on SIGTERM and at interpreter exit."""

    def __init__(self, workdir: Path | str, workers: int | Iterable[WorkerSpec] = (),
                 env: Mapping[str, str] | None = None):
        """`workers`: the worker nodes to start with (a count means that many `WorkerSpec()`s); `env`: the
        environment of every node and the base of `self.env` (default: this process's)."""
        self.workdir = Path(workdir)
        self.workers = [WorkerSpec() for _ in range(workers)] if isinstance(workers, int) else list(workers)
        self._base_env = dict(os.environ if env is None else env)
        self.token = uuid.uuid4().hex
        self.cid = ""
        self.head_ip = ""
        self.port = 0
        self.bridge = ""
        self.temp_dir = ""
        self.marker = ""
        self._net: ipaddress.IPv4Network | None = None
        self._nodes: list[_Node] = []
        self._head: subprocess.Popen | None = None
        self._record: dict = {}
        self._started = False
        self._closed = False

    # -- public API

    @property
    def address(self) -> str:
        """HEAD_IP:PORT for ray.init(address=...) and `sweep run --address`."""
        return f"{self.head_ip}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a driver process needs: the base environment plus the cluster's auth token."""
        return {**self._base_env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def node_ip(self, i: int) -> str:
        return self._nodes[i].ip

    def netns(self, i: int) -> str:
        return self._nodes[i].netns

    def hostname(self, i: int) -> str:
        """Worker node i's host name (its UTS namespace's: the name of its network namespace)."""
        return self._nodes[i].netns

    def node_log_dir(self, i: int) -> Path:
        """Worker node i's Ray logs, read through its `ray start` process's mount namespace (its tmpfs)."""
        node = self._nodes[i]
        return Path(f"/proc/{node.proc.pid}/root{self.temp_dir}/session_latest/logs")

    def __enter__(self) -> NamespaceCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Bring the bridge, the head and the initial workers up; wait until the GCS has them all alive."""
        if self._closed:
            raise RuntimeError("this cluster was closed; make a new NamespaceCluster")
        if self._started:
            return
        self._started = True
        reason = skip_reason()
        if reason is not None:
            raise RuntimeError(f"cannot build a namespace cluster: {reason}")
        _install_sigterm()
        _OPEN.append(self)
        try:
            cleanup_leftovers()
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._claim_id()
            self._make_bridge()
            self._start_head()
            for spec in self.workers:
                self._start_worker(spec)
            for node in self._nodes:
                _wait_for_line(node.proc, self._node_log(node), "Ray runtime started", START_TIMEOUT,
                               f"worker node {node.index} ({node.ip})")
            self.wait_for_nodes(len(self._nodes), timeout=START_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def add_worker(self, spec: WorkerSpec | None = None, *, wait: bool = True) -> int:
        """A worker node joining now; its index. With `wait`, returns once its `ray start` reported up
        (use wait_for_nodes for the GCS's view)."""
        node = self._start_worker(spec or WorkerSpec())
        if wait:
            _wait_for_line(node.proc, self._node_log(node), "Ray runtime started", START_TIMEOUT,
                           f"worker node {node.index} ({node.ip})")
        return node.index

    def kill_node(self, i: int) -> None:
        """SIGKILL every process of worker node i (all pids in its namespace, and its `ray start`): a server
        that lost power. Its namespace and address stay, so the head's health checks are refused."""
        node = self._nodes[i]
        node.killed_at = time.time()
        self._kill_node_processes(node)

    def cut_link(self, i: int) -> None:
        """Worker node i's link down (host end of its veth): its processes keep running, unreachable."""
        _ip("link", "set", self._nodes[i].veth, "down")

    def restore_link(self, i: int) -> None:
        _ip("link", "set", self._nodes[i].veth, "up")

    def nodes(self) -> list[dict]:
        """The GCS's node table now: [{ip, alive, head, node_id, cpus, end_ms}] (a node that left stays, dead)."""
        return self._watch(lambda snap: True, timeout=60, what="the node table")

    def wait_for_nodes(self, n: int, timeout: float = 120.0) -> list[dict]:
        """Wait until exactly n worker (non-head) nodes are alive in the GCS; the node table then."""
        return self._watch(lambda snap: sum(1 for x in snap if x["alive"] and not x["head"]) == n,
                           timeout, f"{n} alive worker nodes")

    def wait_for_dead(self, i: int, timeout: float = 60.0) -> float:
        """Wait until the GCS marks worker node i dead; seconds from kill_node(i) (or from this call) to the
        GCS's end time of the node."""
        since = self._nodes[i].killed_at or time.time()
        ip = self._nodes[i].ip

        def dead(snap: list[dict]) -> bool:
            mine = [x for x in snap if x["ip"] == ip]
            return bool(mine) and not any(x["alive"] for x in mine)

        snap = self._watch(dead, timeout, f"node {i} ({ip}) dead")
        end_ms = max((x["end_ms"] for x in snap if x["ip"] == ip), default=0)
        return max(0.0, (end_ms / 1000 if end_ms else time.time()) - since)

    def pids(self) -> set[int]:
        """Every live process of the cluster now: the head's session, each worker namespace's processes and
        `ray start`, and whatever else carries the cluster's marker (not the drivers a test starts)."""
        pids = set(_marked_pids(self.marker)) if self.marker else set()
        for node in self._nodes:
            pids |= _netns_pids(node.netns)
            if node.proc is not None and _alive(node.proc.pid):
                pids.add(node.proc.pid)
        return pids | self._head_pids()

    def links(self) -> list[str]:
        """The names of the cluster's bridge and host-side veths."""
        return [self.bridge, *(n.veth for n in self._nodes)] if self.bridge else []

    def leftovers(self) -> list[str]:
        """What of this cluster still exists (processes, namespaces, links, temp dir, registry file):
        empty after close()."""
        left = [f"pid {p}" for p in sorted(self.pids())]
        spaces = set(_netns_list())
        left += [f"netns {n.netns}" for n in self._nodes if n.netns in spaces]
        links = set(_links())
        left += [f"link {name}" for name in self.links() if name in links]
        if self.temp_dir and Path(self.temp_dir).exists():
            left.append(f"dir {self.temp_dir}")
        if self.cid and _registry_path(self.cid).exists():
            left.append(f"registry {_registry_path(self.cid)}")
        return left

    def close(self) -> None:
        """Stop every process by pid, then remove veths, namespaces, bridge, temp dir and registry file.
        Safe to call again, also from a signal handler while an earlier call was interrupted."""
        if self._closed:
            return
        try:
            for node in self._nodes:
                self._kill_node_processes(node)
            self._stop_head()
            if self.marker:
                _kill_until_gone(lambda: _marked_pids(self.marker))
        finally:
            for node in self._nodes:
                _ip("link", "del", node.veth, check=False)
                _ip("netns", "del", node.netns, check=False)
            if self.bridge:
                _ip("link", "del", self.bridge, check=False)
            if self.temp_dir:
                shutil.rmtree(self.temp_dir, ignore_errors=True)
            if self.cid:
                _registry_path(self.cid).unlink(missing_ok=True)
            self._closed = True
            if self in _OPEN:
                _OPEN.remove(self)

    # -- internals

    def _node_log(self, node: _Node) -> Path:
        return self.workdir / f"node{node.index}.log"

    def _node_env(self) -> dict[str, str]:
        return {**HEALTH_CHECK_ENV, **self.env, MARKER_VAR: self.marker}

    def _save(self) -> None:
        _write_registry(self.cid, self._record)

    def _claim_id(self) -> None:
        """Pick 10.A.B.0/24 unused on this machine; its id "AABB" (hex) names everything; registered at once
        (O_EXCL) so that parallel test processes never share one."""
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        rng = random.Random()
        for _ in range(200):
            a, b = rng.randint(128, 254), rng.randint(0, 255)
            net = ipaddress.IPv4Network(f"10.{a}.{b}.0/24")
            cid = f"{a:02x}{b:02x}"
            names = [*_links(), *_netns_list()]
            if _subnet_in_use(net) or any(cid in m.groups() for r in (_BRIDGE_RE, _VETH_RE, _NETNS_RE)
                                          for m in map(r.match, names) if m):
                continue
            try:
                fd = os.open(_registry_path(cid), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
            self.cid, self._net = cid, net
            self.marker = f"{cid}:{os.getpid()}"
            self.bridge = f"swbr{cid}"
            self.head_ip = str(net.network_address + 1)
            self.temp_dir = f"/tmp/swray{cid}"
            self._record = {"owner_pid": os.getpid(), "owner_start": _start_time(os.getpid()),
                            "owner_pidns": _pid_namespace(), "marker": self.marker,
                            "bridge": self.bridge, "subnet": str(net), "temp_dir": self.temp_dir, "netns": [],
                            "veths": [], "head_pid": None, "workdir": str(self.workdir)}
            with os.fdopen(fd, "w") as f:
                json.dump(self._record, f)
            return
        raise RuntimeError("no free 10.x.y.0/24 subnet found for a namespace cluster")

    def _make_bridge(self) -> None:
        # nf_call_iptables 0: traffic between two worker namespaces is switched by this bridge alone, also
        # where br_netfilter and a DROP policy of FORWARD (Docker's) would drop it
        if _ip("link", "add", self.bridge, "type", "bridge", "nf_call_iptables", "0", check=False).returncode != 0:
            _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.head_ip}/{self._net.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def _start_head(self) -> None:
        Path(self.temp_dir).mkdir(mode=0o755)
        self.port = free_port()
        cmd = [_ray_executable(), "start", "--head", "--block", "--num-cpus=0", "--num-gpus=0",
               f"--node-ip-address={self.head_ip}", f"--port={self.port}", "--include-dashboard=false",
               "--disable-usage-stats", f"--temp-dir={self.temp_dir}", f"--object-store-memory={OBJECT_STORE_BYTES}"]
        if importlib.util.find_spec("grpc") is not None:
            # Ray's client server would take port 10001, shared by every head on the machine
            cmd.append(f"--ray-client-server-port={free_port()}")
        log = self.workdir / "head.log"
        with open(log, "w") as out:
            self._head = subprocess.Popen(cmd, env=self._node_env(), cwd=self.workdir, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._record["head_pid"] = self._head.pid
        self._save()
        _wait_for_line(self._head, log, "Ray runtime started", START_TIMEOUT, f"head node ({self.address})")

    def _start_worker(self, spec: WorkerSpec) -> _Node:
        i = len(self._nodes)
        if 10 + i > 250:
            raise ValueError("at most 241 worker nodes")
        node = _Node(i, spec, f"sw{self.cid}n{i}", f"sw{self.cid}h{i}", str(self._net.network_address + 10 + i))
        peer = f"sw{self.cid}p{i}"
        hidden = []
        for path in spec.hidden:
            path = Path(path).absolute()
            path.mkdir(parents=True, exist_ok=True)  # a mount point must exist
            hidden.append(str(path.resolve()))
        self._nodes.append(node)
        self._record["netns"].append(node.netns)
        self._record["veths"].append(node.veth)
        self._save()  # registered before created: a crash in between leaves nothing unknown

        _ip("netns", "add", node.netns)
        _ip("link", "add", node.veth, "type", "veth", "peer", "name", peer, "netns", node.netns)
        _ip("link", "set", node.veth, "master", self.bridge)
        _ip("link", "set", node.veth, "up")
        _ip("-n", node.netns, "link", "set", "lo", "up")
        _ip("-n", node.netns, "addr", "add", f"{node.ip}/{self._net.prefixlen}", "dev", peer)
        _ip("-n", node.netns, "link", "set", peer, "up")
        if not _forwarding_on():
            # nothing past the bridge address is reachable: the host forwards no packet out of it
            _ip("-n", node.netns, "route", "add", "default", "via", self.head_ip)

        mounts = [f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(self.temp_dir)}"]
        mounts += [f"mount -t tmpfs tmpfs {shlex.quote(p)}" for p in hidden]
        ray_cmd = [_ray_executable(), "start", f"--address={self.address}", f"--node-ip-address={node.ip}",
                   f"--num-cpus={spec.cpus}", f"--num-gpus={spec.gpus}", "--block", "--disable-usage-stats",
                   f"--temp-dir={self.temp_dir}", f"--object-store-memory={spec.object_store_memory}"]
        if spec.resources:
            ray_cmd.append(f"--resources={json.dumps(dict(spec.resources))}")
        # its own host name too (a UTS namespace): a trial's records name the node it ran on, as on another machine
        script = (f"set -e; hostname {shlex.quote(node.netns)}; " + "; ".join(mounts) + "; exec "
                  + shlex.join(ray_cmd))
        cmd = ["ip", "netns", "exec", node.netns, "unshare", "-m", "-u", "--propagation", "private", "sh", "-c", script]
        with open(self._node_log(node), "w") as out:
            node.proc = subprocess.Popen(cmd, env=self._node_env(), cwd=self.workdir, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return node

    def _kill_node_processes(self, node: _Node) -> None:
        def find() -> set[int]:
            pids = _netns_pids(node.netns)
            if node.proc is not None and node.proc.poll() is None:
                pids.add(node.proc.pid)
            return pids

        _kill_until_gone(find)
        if node.proc is not None:
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def _stop_head(self) -> None:
        head = self._head
        if head is None:
            return
        if head.poll() is None:
            head.terminate()  # `ray start --block` stops the processes it started on SIGTERM
            try:
                head.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        _kill_until_gone(self._head_pids)
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _head_pids(self) -> set[int]:
        """The head's `ray start` while not reaped, and the processes of its session (filtered by the marker:
        once the head is reaped, its pid, the session id, could be a new process's)."""
        head = self._head
        if head is None:
            return set()
        needle = f"{MARKER_VAR}={self.marker}".encode()
        pids = {p for p in _session_pids(head.pid) if needle in _environ(p)}
        if head.poll() is None:
            pids.add(head.pid)
        return pids

    def _watch(self, done: Callable[[list[dict]], bool], timeout: float, what: str) -> list[dict]:
        """Follow the GCS's node table from a small Python subprocess (no ray.init in this process) until
        `done(table)`; the table then."""
        if not self.port:
            raise RuntimeError("the cluster is not started")
        log = open(self.workdir / "watch.log", "a")  # closed below
        proc = subprocess.Popen([sys.executable, "-c", _WATCH, self.address, "0.2"], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        last: object = None
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {what} in {timeout:.0f} s; node table: {last}")
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    continue
                if line is None:
                    raise RuntimeError(f"the node-table watcher exited ({self.workdir / 'watch.log'}); last: {last}")
                if not line.startswith(("[", "{")):
                    continue
                last = json.loads(line)
                if isinstance(last, list) and done(last):
                    return last
        finally:
            proc.kill()
            proc.wait()
            log.close()


# --- the pytest fixture factory --------------------------------------------------------------------------


def netns_cluster_fixture(name: str = "netns_cluster_factory", scope: str = "function"):
    """A pytest fixture called `name` (assign it to that module-level name in the test module) of `scope`,
    yielding make(workers=1, env=None) -> a started NamespaceCluster (`workers`: a count or WorkerSpecs); each
    is closed at the fixture's teardown, or earlier by cluster.close(). Skips when skip_reason() is not None.
    Importing the ready-made `netns_cluster_factory` into a test module works too."""
    import pytest

    @pytest.fixture(name=name, scope=scope)
    def factory(tmp_path_factory):
        reason = skip_reason()
        if reason is not None:
            pytest.skip(reason)
        clusters: list[NamespaceCluster] = []

        def make(workers: int | Iterable[WorkerSpec] = 1, env: Mapping[str, str] | None = None):
            cluster = NamespaceCluster(tmp_path_factory.mktemp("netns-cluster"), workers, env)
            clusters.append(cluster)
            cluster.start()
            return cluster

        try:
            yield make
        finally:
            for cluster in reversed(clusters):
                cluster.close()

    return factory


try:
    netns_cluster_factory = netns_cluster_fixture()
except ImportError:  # run as a script without pytest
    pass


# --- as a script -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs of each worker node (default 1)")
    parser.add_argument("--gpus", type=int, default=0, help="(fake) GPUs of each worker node")
    parser.add_argument("--hide", action="append", default=[], metavar="PATH",
                        help="a path that is an empty folder on every worker node (repeatable)")
    parser.add_argument("--workdir", type=Path, help="where the nodes' start logs go (default: a new temp dir)")
    args = parser.parse_args(argv)
    if (reason := skip_reason()) is not None:
        print(f"cannot build a namespace cluster here: {reason}", file=sys.stderr)
        return 2

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # the cluster's own handler runs first, then this one
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="netns-cluster-"))  # removed at the end
    spec = WorkerSpec(cpus=args.cpus, gpus=args.gpus, hidden=tuple(args.hide))
    print(f"starting a head and {args.workers} worker nodes (logs in {workdir}) ...", flush=True)
    try:
        with NamespaceCluster(workdir, [spec] * args.workers) as cluster:
            print(f"address: {cluster.address}")
            for i in range(args.workers):
                print(f"worker node {i}: {cluster.node_ip(i)} (netns {cluster.netns(i)}, {args.cpus} CPUs)")
            print("\nrun a sweep on it from this machine (the driver runs on the head node):")
            print(f"  RAY_AUTH_MODE=token RAY_AUTH_TOKEN={cluster.token} sweep run STUDY --address {cluster.address}")
            print("\nCtrl-C (or SIGTERM) stops the cluster.", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping the cluster ...", file=sys.stderr)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print("stopped: nodes, namespaces, links and temp dir removed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
