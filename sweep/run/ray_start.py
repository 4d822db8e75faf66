"""Why Ray did not start, in one line: the checks `sweep run` makes before ray.init (where ray.init would take
30 s to fail, or never return), the diagnosis of a ray.init that failed, and the start-and-stop `sweep doctor`
runs. Each cause it knows is named with its fix (a virtual-memory cap, Ray's temp folder read-only or full, a
port taken, nothing or something else than Ray at --address); any other failure with the last lines of Ray's
own log and its path. `RayStartError` ends `sweep run` with exit code 3.

Imports neither Ray Tune nor the driver's modules: `sweep doctor` uses it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import UserError


class RayStartError(UserError):
    """Ray could not start here, or the cluster at --address could not be reached: exit code 3."""

    exit_code = 3


@dataclass(frozen=True)
class StartCause:
    """Why Ray did not start, and what to do about it."""

    cause: str
    fix: str

    def line(self, address: str | None) -> str:
        """The one line `sweep run` ends with."""
        where = f"reach the Ray cluster at {address}" if address else "start a local Ray instance"
        return f"cannot {where}: {self.cause}; {self.fix}"


# Below this much free space in Ray's temp folder a local head does not start (its session files, sockets and logs).
MIN_TEMP_FREE = 64 * 2**20
VM_CAP_FIX = ("Ray's raylet and object store need more: raise or remove it (ulimit -v unlimited), or run where "
              "it is not set")


def ray_temp_dir() -> Path:
    """The folder a local Ray head keeps its session in, as Ray documents it: $RAY_TMPDIR, else $TMPDIR on
    Linux, else /tmp; then ray/."""
    base = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return Path(base or "/tmp") / "ray"


def address_limit_text() -> str | None:
    """The virtual-memory cap (ulimit -v) in GiB as text, or None when there is none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else f"{soft / 2**30:.1f} GiB"


def temp_dir_problem(folder: Path) -> StartCause | None:
    """What stops a local Ray head from writing its session under `folder`: read-only, or nearly full; None
    when neither holds."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return StartCause(f"Ray's temp folder {folder} is not writable ({existing} is read-only for this user)",
                          "set RAY_TMPDIR to a writable folder")
    free = shutil.disk_usage(existing).free
    if free < MIN_TEMP_FREE:
        return StartCause(f"Ray's temp folder {folder} has {free / 2**20:.0f} MiB free, under the "
                          f"{MIN_TEMP_FREE // 2**20} MiB a local Ray head needs",
                          "free space there or set RAY_TMPDIR to a folder with more")
    return None


def ray_start_precheck(address: str | None) -> StartCause | None:
    """A cause that would make ray.init fail, found before it starts (in milliseconds, where ray.init takes 30 s
    to fail or never returns): Ray's temp folder read-only or full, RAY_GCS_SERVER_PORT taken, nothing answering
    at `address` or something that is not Ray. None when none holds."""
    if address:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or "://" in address:
            return None  # "auto", a ray:// client address: Ray's own resolution
        reply = http2_reply(host, int(port))
        if reply is None:
            return StartCause("nothing answers there (connection refused or no reply)",
                              "start the head first (`ray start --head` on it) or pass the address `ray start` "
                              "printed, HOST:PORT")
        if not reply:
            return StartCause(f"something answers on port {port} but it is not a Ray head (no gRPC reply)",
                              "pass the GCS address `ray start --head` printed, HOST:PORT")
        return None
    problem = temp_dir_problem(ray_temp_dir())
    if problem is not None:
        return problem
    port = os.environ.get("RAY_GCS_SERVER_PORT", "")
    if port.isdigit() and port_taken(int(port)):
        return StartCause(f"port {port} (RAY_GCS_SERVER_PORT) is taken by another process",
                          "stop it, or unset RAY_GCS_SERVER_PORT to let Ray pick a free port")
    return None


def port_taken(port: int) -> bool:
    """Whether a TCP port of this machine is in use (a bind on all interfaces fails)."""
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return True
    return False


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + an empty SETTINGS


def http2_reply(host: str, port: int, timeout: float = 3.0) -> bool | None:
    """Whether HOST:PORT speaks gRPC, as a Ray head's GCS does: its first frame answering HTTP/2's client preface
    is SETTINGS (type 4). None when nothing answers (refused, unreachable, or no connection within `timeout`);
    False when something accepts the connection but sends no such frame."""
    import socket

    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    with sock:
        reply = b""
        try:
            sock.sendall(HTTP2_PREFACE)
            while len(reply) < 9:
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
        except OSError:
            pass
    return len(reply) >= 9 and reply[3] == 4


def ray_start_failure(exc: BaseException, address: str | None) -> StartCause:
    """The cause of a ray.init that failed when it is one this function knows (a virtual-memory cap, Ray's temp
    folder read-only or full, a port taken, nothing answering at `address`); otherwise Ray's own message and
    the last lines of its log, with the log's path."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if address:
        if isinstance(exc, ConnectionError) or "could not find any running ray instance" in text.lower():
            return StartCause(f"nothing answers there ({text[:160]})",
                              "start the head first (`ray start --head` on it) or pass the address `ray start` "
                              "printed, HOST:PORT")
        fix = "check that the address is the head's and that it runs the same Ray version"
        if "RAY_AUTH_MODE" not in os.environ and "auth" in text.lower():
            fix = ("if the cluster uses token authentication (Ray's default for `ray start`), set RAY_AUTH_MODE=token "
                   "(the token is read from $RAY_AUTH_TOKEN or ~/.ray/auth_token)")
        return StartCause(text[:300], fix)
    cap = address_limit_text()
    if cap is not None:
        return StartCause(f"a virtual-memory limit of {cap} is set (ulimit -v)", VM_CAP_FIX)
    folder = ray_temp_dir()
    problem = temp_dir_problem(folder)
    if problem is not None:
        return problem
    port = re.search(r"port (\d+)[^.]*(?:in use|already|bind|taken)|(?:in use|bind)[^.]*port (\d+)", text, re.I)
    if port is not None:
        return StartCause(f"port {port.group(1) or port.group(2)} is taken by another process",
                          "stop it, or free the port Ray was told to use (RAY_GCS_SERVER_PORT)")
    log, tail = ray_log_tail(folder)
    if log is None:
        return StartCause(text[:200], "see Ray's own log under " + str(folder / "session_latest" / "logs"))
    return StartCause(f"{text[:200]}; Ray's log {log} ends: {tail}", "see that log for the cause")


def ray_log_tail(folder: Path, lines: int = 3) -> tuple[Path | None, str]:
    """The newest session's raylet or GCS log under Ray's temp folder and its last non-empty lines, joined on
    one line (None and "" when there is none)."""
    logs = sorted((folder / "session_latest" / "logs").glob("*.err"), key=lambda p: p.stat().st_mtime)
    logs = [p for p in logs if p.stat().st_size > 0] or sorted(
        (folder / "session_latest" / "logs").glob("raylet.out"))
    if not logs:
        return None, ""
    try:
        last = [line.strip() for line in logs[-1].read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None, ""
    return logs[-1], " | ".join(line[:160] for line in last[-lines:])


def probe_local_ray() -> StartCause | None:
    """Start a local Ray head of one CPU and stop it (what `sweep doctor` runs in a process of its own, under
    a time limit); None when it started, else why not."""
    import ray

    problem = ray_start_precheck(None)
    if problem is not None:
        return problem
    try:
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
    except Exception as exc:
        return ray_start_failure(exc, None)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    return None


def main() -> int:
    """`python -m sweep.run.ray_start`: probe_local_ray, its answer as one JSON line; exit 0 (started) or 3."""
    problem = probe_local_ray()
    print(json.dumps(None if problem is None else {"cause": problem.cause, "fix": problem.fix}), flush=True)
    return 0 if problem is None else RayStartError.exit_code


if __name__ == "__main__":
    sys.exit(main())
