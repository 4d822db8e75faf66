"""A trial's folder lands whole in the driver's results folder, wherever on a Ray cluster the trial ran.

Owns: where a trial writes (`output_place`: the driver's trial folder when the trial's node sees it, else a
staging folder on that node), the receiver on the driver's node (TrialFolderReceiver, a Ray actor that
needs no CPU), and the sender (`send_trial_folder`, run by the trial's worker before its last report).

Why: most lab clusters share no disk, and since Ray 2.7 Tune copies nothing to the head. Without this a
trial that ran on another node left its log, its full metrics and its model on that node. The files go
through Ray itself: the sender reads each file CHUNK_BYTES at a time and hands each chunk to the receiver
as an actor call (Ray's object store carries it between the nodes), with at most IN_FLIGHT chunks under
way, so a bert-base model (~440 MB) is never held whole by the sender, the receiver or the driver (whose
process never sees the data). The receiver writes each file under trials/<key>/.incoming-<attempt>/,
hashing it as it arrives, and moves it into place only when its size and sha256 equal what the sender
read; a file that arrives damaged or partly is never used. Only once every file is in place does the
sender delete its staging folder and report the trial's verdict, so a trial counts as ended only when its
files are on the driver (sweep.run.worker).

Whether the node sees the driver's folder (one machine, or a shared disk) is tested, not assumed: the
driver writes a fresh token into results/<study>/.driver-token at each run, and a trial that reads the same
token there writes in place, as on one machine.

    receiver, files = start_receiver(study_dir, reference, verdicts)  # driver (sweep.run.runner), --address
    place = output_place(job)          # worker (job: its sweep.run.job.TrialJob): (folder to write, staged?)
    outcome = send_trial_folder(job.files, job.key, folder)  # worker, after the trainer returned
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from sweep.run.job import TrialJob
from sweep.run.node_checks import NAMESPACE, fence_node, node_problem

# Bytes a call; chunks under way at once (sender side): the memory a transfer holds is their product.
CHUNK_BYTES = 8 * 1024 * 1024
IN_FLIGHT = 4
TOKEN_FILE = ".driver-token"
INCOMING = ".incoming-"
# Where a trial writes on a node that does not see the driver's results folder (forwarded to the workers).
STAGING_ENV = "SWEEP_STAGING_DIR"
# Files sent last: the log is still being written while the others go.
SEND_LAST = ("log.txt",)
# Files not sent: the driver writes the trial's summary.json itself, with how its files travelled
# (sweep.run.trial_events), so it is written once on each node that holds it.
NOT_SENT = ("summary.json",)


# ---- the driver's side ------------------------------------------------------------------------------
def new_token(study_dir: Path) -> str:
    """A fresh token in results/<study>/.driver-token: a node that reads it there shares the driver's disk."""
    token = uuid.uuid4().hex
    from trainer.files import write_text_atomic

    write_text_atomic(Path(study_dir) / TOKEN_FILE, token + "\n")
    return token


def start_receiver(study_dir: Path, reference: dict[str, str], verdicts: dict[str, str | None]
                   ) -> tuple[Any, dict[str, Any]]:
    """Start the receiver on the driver's node; (its handle, the `files` entry of every job). `reference`:
    the driver's versions; `verdicts`: the nodes checked already (sweep.run.node_checks)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = new_token(study_dir)
    name = f"sweep-files-{token[:12]}"
    here = ray.get_runtime_context().get_node_id()
    actor = ray.remote(TrialFolderReceiver).options(
        name=name, namespace=NAMESPACE, num_cpus=0, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote(str(study_dir), reference, verdicts)
    ray.get(actor.ping.remote(), timeout=120)
    return actor, {"receiver": name, "token": token, "study_dir": str(study_dir)}


class TrialFolderReceiver:
    """Writes trial files arriving chunk by chunk into results/<study>/trials/<key>/ (module docstring).

    Runs as a Ray actor with one thread: Ray runs one sender's calls in the order it sent them, so each
    file's chunks arrive in order and are hashed as they are written.

        receiver = TrialFolderReceiver("/results/quickstart")
        receiver.begin("k1", "a1")
        receiver.chunk("k1", "a1", "summary.json", b"{}", first=True)
        receiver.end_file("k1", "a1", "summary.json", 2, hashlib.sha256(b"{}").hexdigest())  # None: whole
        receiver.commit("k1", "a1", ["summary.json"])     # trials/k1/summary.json
    """

    def __init__(self, study_dir: str, reference: dict[str, str] | None = None,
                 verdicts: dict[str, str | None] | None = None):
        self.study_dir = Path(study_dir)
        self.open_files: dict[tuple[str, str, str], tuple[Any, Any, int]] = {}  # handle, sha256, bytes
        # sweep.run.node_checks: the driver's versions, and each checked node's verdict (None: fit)
        self.reference = reference or {}
        self.verdicts = dict(verdicts or {})
        self.fences: list[Any] = []

    def ping(self) -> str:
        return socket.gethostname()

    def pid(self) -> int:
        return os.getpid()

    def verdict(self, node_id: str) -> tuple[bool, str | None]:
        """(checked yet?, its problem or None)."""
        return node_id in self.verdicts, self.verdicts.get(node_id)

    def judge(self, node_id: str, report: dict[str, Any]) -> str | None:
        """A node that joined after the driver's check reports itself: its problem (fenced off) or None."""
        if node_id in self.verdicts:
            return self.verdicts[node_id]
        problem = node_problem(report, self.reference)
        self.verdicts[node_id] = problem
        if problem:
            import ray

            resources = next((n.get("Resources") or {} for n in ray.nodes() if n.get("NodeID") == node_id), {})
            self.fences.append(fence_node(node_id, resources))  # placed once the failing attempt lets go
        return problem

    def _incoming(self, key: str, attempt: str) -> Path:
        return self.study_dir / "trials" / _safe_name(key) / f"{INCOMING}{_safe_name(attempt)}"

    def begin(self, key: str, attempt: str) -> None:
        """A new attempt of `key`: what earlier attempts left half-sent is removed."""
        self._drop_incoming(key)
        self._incoming(key, attempt).mkdir(parents=True)

    def chunk(self, key: str, attempt: str, relative: str, data: bytes, first: bool) -> None:
        slot = (key, attempt, relative)
        if first:
            self._close(slot)
            path = self._incoming(key, attempt) / _safe_relative(relative)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.open_files[slot] = (open(path, "wb"), hashlib.sha256(), 0)
        handle, digest, size = self.open_files[slot]
        handle.write(data)
        digest.update(data)
        self.open_files[slot] = (handle, digest, size + len(data))

    def end_file(self, key: str, attempt: str, relative: str, size: int, sha256: str) -> str | None:
        """None when the file arrived whole (its size and sha256 are the sender's), else what is wrong."""
        slot = (key, attempt, relative)
        if slot not in self.open_files:
            return f"{relative}: no data arrived"
        handle, digest, got = self.open_files.pop(slot)
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        if got != size:
            return f"{relative}: {got} of {size} bytes arrived"
        if digest.hexdigest() != sha256:
            return f"{relative}: arrived damaged (sha256 differs from the sender's)"
        return None

    def commit(self, key: str, attempt: str, files: list[str]) -> None:
        """Every file of the attempt arrived whole: move them into trials/<key>/ (a folder such as model/
        replaces the one there), then remove the attempt's incoming folder."""
        incoming = self._incoming(key, attempt)
        trial_dir = incoming.parent
        tops = sorted({_safe_relative(f).parts[0] for f in files})
        for top in tops:
            source, target = incoming / top, trial_dir / top
            if source.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            os.replace(source, target)
        shutil.rmtree(incoming, ignore_errors=True)

    def discard(self, key: str, attempt: str) -> None:
        for slot in [s for s in self.open_files if s[:2] == (key, attempt)]:
            self._close(slot)
        shutil.rmtree(self._incoming(key, attempt), ignore_errors=True)

    def _drop_incoming(self, key: str) -> None:
        for slot in [s for s in self.open_files if s[0] == key]:
            self._close(slot)
        trial_dir = self.study_dir / "trials" / _safe_name(key)
        if trial_dir.is_dir():
            for path in trial_dir.glob(f"{INCOMING}*"):
                shutil.rmtree(path, ignore_errors=True)

    def _close(self, slot: tuple[str, str, str]) -> None:
        entry = self.open_files.pop(slot, None)
        if entry is not None:
            entry[0].close()


def _safe_name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"not a plain name: {name!r}")
    return name


def _safe_relative(relative: str) -> PurePosixPath:
    """A path inside the trial folder (no absolute path, no '..'): a sender never writes elsewhere."""
    path = PurePosixPath(relative)
    if path.is_absolute() or not path.parts or any(p in ("", ".", "..") for p in path.parts):
        raise ValueError(f"not a path inside a trial folder: {relative!r}")
    return path


# ---- the trial's side --------------------------------------------------------------------------------
def output_place(job: TrialJob) -> tuple[Path, bool]:
    """Where this trial writes: (the driver's trial folder, False) on one machine (no `files` in the job) or when
    this node sees the driver's results folder (its token file holds this run's token), else (a fresh staging
    folder on this node, True)."""
    trial_dir = Path(job.trial_dir)
    files = job.files
    if not files or _sees_driver_folder(Path(files["study_dir"]), files["token"]):
        return trial_dir, False
    root = Path(os.environ.get(STAGING_ENV) or Path(tempfile.gettempdir()) / "contrastive-sweep" / "staging")
    run_dir = root / files["token"][:12]
    for earlier in run_dir.glob(f"{job.key}-*"):  # an attempt of this trial killed on this node
        shutil.rmtree(earlier, ignore_errors=True)
    staging = run_dir / f"{job.key}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    return staging, True


def _sees_driver_folder(study_dir: Path, token: str) -> bool:
    try:
        return (study_dir / TOKEN_FILE).read_text().strip() == token
    except OSError:
        return False


def send_trial_folder(files: dict[str, Any], key: str, folder: Path, tries: int = 2) -> dict[str, Any]:
    """Send every file under `folder` but NOT_SENT to the driver's receiver as trials/<key>/...; delete `folder`
    once they are in place. Returns {"arrived": True, "files": n, "bytes": b, "seconds": s} or {"arrived": False,
    "problem": ...} (the staging folder is then kept, and named in the problem)."""
    import ray

    problem = "not sent"
    started = time.perf_counter()
    for _ in range(tries):
        try:
            receiver = ray.get_actor(files["receiver"], namespace=NAMESPACE)
            count, size = _send_once(receiver, key, folder)
        except Exception as exc:  # the receiver or the driver's node gone, a damaged file, a full disk there
            problem = " ".join(str(exc).split())[:300]
            continue
        shutil.rmtree(folder, ignore_errors=True)
        _remove_if_empty(folder.parent)
        return {"arrived": True, "files": count, "bytes": size, "seconds": round(time.perf_counter() - started, 3)}
    return {"arrived": False, "problem": f"{problem} (the files stay on {socket.gethostname()} in {folder})"}


def _send_once(receiver: Any, key: str, folder: Path) -> tuple[int, int]:
    import ray

    attempt = uuid.uuid4().hex[:12]
    paths = sorted((p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() not in NOT_SENT),
                   key=lambda p: (p.name in SEND_LAST, p.relative_to(folder).as_posix()))
    ray.get(receiver.begin.remote(key, attempt))
    under_way: list[Any] = []
    checks: list[Any] = []
    total = 0
    for path in paths:
        relative = path.relative_to(folder).as_posix()
        digest, size = hashlib.sha256(), 0
        with open(path, "rb") as handle:
            first = True
            while True:
                data = handle.read(CHUNK_BYTES)
                if data or first:
                    under_way.append(receiver.chunk.remote(key, attempt, relative, data, first))
                    digest.update(data)
                    size += len(data)
                    first = False
                if len(under_way) >= IN_FLIGHT:
                    done, under_way = ray.wait(under_way, num_returns=1)
                    ray.get(done)
                if len(data) < CHUNK_BYTES:
                    break
        checks.append(receiver.end_file.remote(key, attempt, relative, size, digest.hexdigest()))
        total += size
    ray.get(under_way)
    problems = [p for p in ray.get(checks) if p]
    if problems:
        receiver.discard.remote(key, attempt)
        raise OSError("; ".join(problems[:3]))
    ray.get(receiver.commit.remote(key, attempt, [p.relative_to(folder).as_posix() for p in paths]))
    return len(paths), total


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
