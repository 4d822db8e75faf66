"""A watcher that kills what a local Ray leaves when the `sweep run` driver dies without cleaning up
(kill -9, OOM killer): Ray's GCS and raylet die with the driver (Ray starts them with a parent-death
signal) but ray::DashboardAgent and ray::RuntimeEnvAgent, started by the raylet, do not.

    python -m sweep.run.reaper DRIVER_PID     (sweep.run.stopping.reaper_process starts it before ray.init)

Every second it notes the driver's descendants (pid + start time, from /proc: no Ray import, no psutil);
when the driver is gone it sends SIGTERM, then SIGKILL, to those still alive. A driver that ends
normally has stopped them already and ends this watcher.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(parent pid, state, start time) of a process from /proc/<pid>/stat; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), fields[0], fields[19]


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every process below `root`."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = _stat(int(entry.name))
            if info is not None and info[1] != "Z":
                parents.setdefault(info[0], []).append(int(entry.name))
                starts[int(entry.name)] = info[2]
    out, todo = {}, [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in out:
                out[child] = starts[child]
                todo.append(child)
    return out


def _alive(pid: int, started: str) -> bool:
    info = _stat(pid)
    return info is not None and info[1] != "Z" and info[2] == started


def name(pid: int) -> str:
    """The process's command name (/proc/<pid>/comm), "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kill_all(procs: dict[int, str], grace: float = 3.0) -> None:
    """SIGTERM the processes (pid -> start time) still alive, then SIGKILL those left after `grace` s."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        for pid, start in procs.items():
            if _alive(pid, start):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in procs.items()):
            time.sleep(0.1)


def alive(pid: int, started: str) -> bool:
    """Whether the process that started at `started` still runs under `pid` (not a zombie)."""
    return _alive(pid, started)


def watch(driver_pid: int, interval: float = 1.0) -> None:
    me = os.getpid()
    seen: dict[int, str] = {}
    driver = _stat(driver_pid)
    if driver is None:
        return
    while _alive(driver_pid, driver[2]):
        seen.update({pid: start for pid, start in descendants(driver_pid).items() if pid != me})
        time.sleep(interval)
    kill_all(seen)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal's group is the driver's business
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    watch(int(sys.argv[1]))
