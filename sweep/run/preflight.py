"""Checks before Ray starts a trial, so that a study that cannot run says why in one line (exit 2)
instead of hanging (no GPU) or failing every trial one by one (a model or data file that is not there).

    preflight_paths(spec)               # `sweep run` and its dry run: the study folder can be made, a SQLite
                                        # storage's folder exists (nothing is written to find out)
    preflight_resources(spec, address)  # local: this machine's CPUs/GPUs; --address: the cluster's nodes
    preflight_inputs(trials)            # every distinct model (tokenizer + config), data directory, corpus
"""

from __future__ import annotations

import glob
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from trainer.errors import UserError, excerpt

# Filesystems that hold no folders of ours: mkdir fails there (ENOENT in /proc, EPERM in /sys), even as root.
_PSEUDO_FILESYSTEMS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs", "tracefs", "securityfs",
                       "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs", "nsfs",
                       "autofs", "hugetlbfs", "rpc_pipefs"}


def preflight_paths(spec: Any) -> None:
    """The study's results folder can be made (or is a writable folder) and a SQLite storage's folder exists
    or is made by the run (the study folder or above it): `sweep run --dry-run` refuses what `sweep run`
    would fail on after writing, e.g. results_dir: /dev/null, /proc/self, or storage: sqlite:///sub/o.db
    without sub/. Reads only; a UserError on the key's line."""
    where = spec.where()
    study_dir = Path(spec.study_dir)
    problem = folder_problem(study_dir)
    if problem:
        raise where.error(("results_dir",), f"the study folder {excerpt(str(study_dir), 120)} cannot be made: "
                          f"{problem}; set results_dir to a folder you can write")
    if not spec.storage or not spec.storage.startswith("sqlite"):
        return
    from sqlalchemy.engine import make_url

    database = Path(make_url(spec.storage).database)
    folder = database.parent
    made_by_run = os.path.abspath(study_dir) == os.path.abspath(folder) or \
        os.path.abspath(folder) in (os.path.abspath(p) for p in study_dir.parents)
    try:
        exists = folder.exists()
        kind = os.stat(database).st_mode if database.exists() else None
    except OSError as exc:
        raise where.error(("storage",), f"cannot look at {excerpt(str(database), 120)}: {exc.strerror}; "
                          "fix the storage path") from None
    if kind is not None and not stat.S_ISREG(kind):
        raise where.error(("storage",), f"{excerpt(str(database), 120)} is not a file; expected the path of a "
                          "SQLite database file (new or an Optuna storage)")
    if not exists and not made_by_run:
        raise where.error(("storage",), f"the folder {excerpt(str(folder), 120)} of the SQLite file does not "
                          f"exist; create it first (mkdir -p {excerpt(str(folder), 120)}) or name a file in an "
                          "existing folder")
    problem = folder_problem(folder) if exists else None
    if problem:
        raise where.error(("storage",), f"the SQLite file's folder {excerpt(str(folder), 120)} cannot be "
                          f"written: {problem}")


def folder_problem(folder: Path) -> str | None:
    """Why `folder` cannot be made (with its parents, as mkdir -p) and written in, or None. Reads only: the
    nearest existing ancestor must be a folder this process may write, on a filesystem that holds files."""
    current = folder
    while True:
        try:
            mode = os.stat(current).st_mode
        except FileNotFoundError:
            if os.path.islink(current):
                return f"{excerpt(str(current), 120)} is a link to nothing"
            if current.parent == current:
                return f"{excerpt(str(current), 120)} does not exist"
            current = current.parent
            continue
        except NotADirectoryError:  # a part of the path is a file: the parent's check names it
            current = current.parent
            continue
        except OSError as exc:  # a name too long, a loop of links, no permission to look
            return f"{excerpt(str(current), 120)}: {exc.strerror}"
        break
    if not stat.S_ISDIR(mode):
        return f"{excerpt(str(current), 120)} is not a folder"
    filesystem, read_only = _mount_of(current)
    if filesystem in _PSEUDO_FILESYSTEMS:
        return f"{excerpt(str(current), 120)} is on the {filesystem} filesystem, which holds no folders of ours"
    if read_only:
        return f"{excerpt(str(current), 120)}: Read-only file system"  # the OS's own words (EROFS)
    if not os.access(current, os.W_OK | os.X_OK):
        return f"{excerpt(str(current), 120)} is not writable by this user"
    return None


def _mount_of(path: Path) -> tuple[str | None, bool]:
    """(filesystem type, read-only) of the mount holding `path` (Linux's /proc/self/mountinfo); (None, False)
    where that cannot be read."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None, False
    best: tuple[int, str | None, bool] = (-1, None, False)
    for line in lines:
        fields = line.split()
        if "-" not in fields[6:] or len(fields) < 6:
            continue
        point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best[0]:
            filesystem = fields[fields.index("-", 6) + 1]
            best = (len(point), filesystem, "ro" in fields[5].split(","))
    return best[1], best[2]


def preflight_resources(cpu: float, gpu: float, nodes: list[dict[str, float]] | None = None,
                        where: str = "this machine") -> None:
    """One trial asks for `cpu` CPUs and `gpu` GPUs; some node (default: this machine) must have them.

    >>> preflight_resources(1, 0, [{"CPU": 2.0}])  # fits; asking gpu=1 of it raises a UserError
    """
    if nodes is None:
        nodes = [{"CPU": float(os.cpu_count() or 1), "GPU": float(_local_gpus())}]
    most_gpus = max((node.get("GPU", 0.0) for node in nodes), default=0.0)
    most_cpus = max((node.get("CPU", 0.0) for node in nodes), default=0.0)
    if gpu > most_gpus:
        have = "no GPU" if most_gpus == 0 else f"at most {most_gpus:g} GPU(s) on one node"
        raise UserError(f"resources: a trial asks for {gpu:g} GPU but {where} has {have} (Ray would wait forever); "
                        "set resources: {gpu: 0} in the study (and base.device: auto or cpu), or run with "
                        "--address on a cluster with GPUs")
    if cpu > most_cpus:
        raise UserError(f"resources: a trial asks for {cpu:g} CPUs but {where} has at most {most_cpus:g} on one "
                        f"node (Ray would wait forever); set resources.cpu to {most_cpus:g} or less")


def cluster_nodes() -> list[dict[str, float]]:
    """The resources of each live node of the connected Ray cluster."""
    import ray

    return [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]


def preflight_inputs(configs: Iterable[dict[str, Any]]) -> None:
    """Every distinct model loads (tokenizer and config), every data directory and corpus is there, and every
    MTEB task (eval.mteb) is known and its data cached or reachable."""
    from trainer.data import corpus_path, data_dir, manifest, verified_path
    from trainer.evaluation.mteb_tasks import check_tasks
    from trainer.models import check_model

    configs = list(configs)
    for model in sorted({c["model"] for c in configs}):
        check_model(model)
    check_tasks(sorted({task for c in configs for task in (c.get("eval") or {}).get("mteb") or ()}))
    for root, corpus in sorted({(str(data_dir(c["data"]["data_dir"])), c["data"]["corpus"] or "")
                                for c in configs}):
        for relative in manifest():
            if relative.startswith("senteval/"):
                verified_path(data_dir(root), relative)
        corpus_path(data_dir(root), corpus or None)


def _local_gpus() -> int:
    """NVIDIA GPUs on this machine as Ray counts them when it starts here: CUDA_VISIBLE_DEVICES if set,
    else the /dev/nvidiaN devices (no torch or Ray import: this check runs in a second)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    return len(glob.glob("/dev/nvidia[0-9]*"))
