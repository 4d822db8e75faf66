"""Checks before Ray starts a trial, so that a study that cannot run says why in one line (exit 2)
instead of hanging (no GPU) or failing every trial one by one (a model or data file that is not there).

    preflight_resources(spec, address)  # local: this machine's CPUs/GPUs; --address: the cluster's nodes
    preflight_inputs(trials)            # every distinct model (tokenizer + config), data directory, corpus
"""

from __future__ import annotations

import glob
import os
from typing import Any, Iterable

from trainer.errors import UserError


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
    """Every distinct model loads (tokenizer and config), and every data directory and corpus is there."""
    from trainer.data import corpus_path, data_dir, manifest, verified_path
    from trainer.models import check_model

    configs = list(configs)
    for model in sorted({c["model"] for c in configs}):
        check_model(model)
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
