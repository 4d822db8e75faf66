"""What made a number: the `provenance` block of summary.json, built by the process that ran the trial.

    provenance(device, precision, corpus_file, data_root) -> {
        "code":     {"version", "commit", "dirty", "diff_sha256", "untracked", "plugins", "source_sha256", "source"},
        "packages": {"python", "torch", "transformers", "sentence-transformers", "numpy", "scipy", "ray", "optuna"},
        "device":   {"type", "name", "cpu", "cpu_cores", and on CUDA "memory_gib", "driver", "cuda", "cudnn",
                     "capability"},
        "precision": the precision the run used (fp32, bf16, fp16),
        "node":     {"hostname"} (the sweep's worker adds "ray_node_id"),
        "data":     {"corpus": {"file", "sha256", "from"}, "evaluation": {"sha256", "files"}},
    }

`code.commit` is the git commit of the checkout this module was imported from (`source: "git checkout"`), with
`dirty` when its tracked files differ from that commit or files git does not track lie under the project's
packages (trainer/, sweep/, analysis/), `diff_sha256` the sha256 of the tracked difference (`git diff HEAD`) and
`untracked` those files' paths; from an installed package (no checkout) the commit is None and `source` says so.
`plugins` is each plugin file the process imported (trainer.methods.plugins) -> the sha256 of its source.
`source_sha256` is one digest of the source that ran beyond the commit: the packages' tracked difference, their
untracked files and the plugins' sources; None when there is none. Two runs of one commit whose source differs
have different `source_sha256`: their code state (`code_state_label`) differs, and the analysis, `sweep status`
and the resume tell them apart. The
corpus's sha256 is the data manifest's where it lists the file, else computed once and kept in
<cache dir>/sha256.json by the file's path, size and mtime. The evaluation data's sha256 is one digest over
the manifest's entries of the SentEval files (which the evaluation verifies against the manifest as it reads
them). What does not change within a process (code, packages, device, host) is computed once per process.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

PROJECT_PACKAGES = ("trainer", "sweep", "analysis")  # the folders whose untracked files are part of the code
PACKAGES = ("torch", "transformers", "sentence-transformers", "numpy", "scipy", "ray", "optuna")
PROJECT = "contrastive-sweep"
_ROOT = Path(__file__).resolve().parents[1]


def provenance(device: Any, precision: str, corpus_file: Path | None, data_root: Path | None,
               cache_dir: Path | None = None) -> dict[str, Any]:
    """The provenance block (module docstring) for a run on `device` (a torch.device) in `precision`."""
    return {
        "code": code_state(),
        "packages": package_versions(),
        "device": device_description(str(device)),
        "precision": precision,
        "node": {"hostname": socket.gethostname()},
        "data": {"corpus": corpus_digest(corpus_file, data_root, cache_dir) if corpus_file else None,
                 "evaluation": evaluation_digest()},
    }


def code_state() -> dict[str, Any]:
    """The project's version, the git state of the code this process imported and the plugins it imported
    (module docstring)."""
    state = dict(_checkout_state())
    from trainer.methods.plugins import loaded_plugin_digests

    plugins = loaded_plugin_digests()
    state["plugins"] = plugins
    parts = [state.pop("_packages_diff_sha256", None) or "", *state.get("_untracked_digests", [])]
    state.pop("_untracked_digests", None)
    parts += [f"plugin {path} {digest}" for path, digest in sorted(plugins.items())]
    state["source_sha256"] = hashlib.sha256("\n".join(parts).encode()).hexdigest() if any(parts) else None
    return state


@lru_cache(maxsize=1)
def _checkout_state() -> dict[str, Any]:
    """The git part of code_state, once per process (a run does not see the checkout change under it)."""
    version = _version(PROJECT)
    if not (_ROOT / ".git").exists():
        return {"version": version, "commit": None, "dirty": None, "diff_sha256": None, "untracked": [],
                "source": "installed from a package, no checkout"}
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"version": version, "commit": None, "dirty": None, "diff_sha256": None, "untracked": [],
                "source": "git checkout that git cannot read"}
    diff = _git("diff", "HEAD", "--binary", strip=False) or ""
    packages_diff = _git("diff", "HEAD", "--binary", "--", *PROJECT_PACKAGES, strip=False) or ""
    listed = _git("ls-files", "--others", "--exclude-standard", "-z", "--", *PROJECT_PACKAGES, strip=False) or ""
    untracked = sorted(path for path in listed.split("\0") if path and not path.endswith((".pyc", "/")))
    digests = [f"untracked {path} {_file_sha256(_ROOT / path)}" for path in untracked]
    return {"version": version, "commit": commit, "dirty": bool(diff or untracked),
            "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None, "untracked": untracked,
            "source": "git checkout",
            "_packages_diff_sha256": hashlib.sha256(packages_diff.encode()).hexdigest() if packages_diff else None,
            "_untracked_digests": digests}


def _file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _git(*args: str, strip: bool = True) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() if strip else out.stdout


def _version(package: str) -> str | None:
    if package == "torch" and (build := _torch_build()):
        return build
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _torch_build() -> str | None:
    """torch's own version string, build tag included (2.15.0+cu132 where PyPI's distribution says 2.15.0), read
    from the installed torch/version.py without importing torch; None where it cannot be read."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return found.group(1) if found else None


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str | None]:
    """Python's version and each of PACKAGES' installed version (None: not installed)."""
    return {"python": platform.python_version(), **{name: _version(name) for name in PACKAGES}}


@lru_cache(maxsize=4)
def device_description(device: str) -> dict[str, Any]:
    """The device as a user names it: the CPU's model and cores; on CUDA also the GPU's name, memory, driver,
    CUDA and cuDNN versions and compute capability."""
    described: dict[str, Any] = {"type": device.split(":")[0], "cpu": cpu_model(), "cpu_cores": os.cpu_count()}
    if not device.startswith("cuda"):
        described["name"] = described["cpu"]
        return described
    import torch

    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    described.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                     capability=f"{props.major}.{props.minor}", cuda=torch.version.cuda,
                     cudnn=torch.backends.cudnn.version(), driver=_nvidia_driver())
    return described


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    try:
        return Path("/proc/driver/nvidia/version").read_text().split("Kernel Module")[1].split()[0]
    except (OSError, IndexError):
        return None


def corpus_digest(path: Path, data_root: Path | None, cache_dir: Path | None) -> dict[str, Any]:
    """The corpus file's name and sha256: the manifest's when it lists the file (and the file's size agrees),
    else computed and kept in `cache_dir`/sha256.json, keyed by path, size and mtime."""
    from trainer.data import manifest, sha256_file

    stat = path.stat()
    if data_root is not None:
        try:
            relative = path.resolve().relative_to(data_root.resolve()).as_posix()
        except ValueError:
            relative = None
        entry = manifest().get(relative) if relative else None
        if entry is not None and entry[0] == stat.st_size:
            return {"file": path.name, "sha256": entry[1], "from": "manifest"}
    cache = (cache_dir or path.parent) / "sha256.json"
    key = f"{path.resolve()}|{stat.st_size}|{int(stat.st_mtime)}"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = sha256_file(path)
        try:
            from trainer.files import write_text_atomic

            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(cache, json.dumps(known, indent=1) + "\n")
        except OSError:
            pass  # a read-only cache folder: computed again next time
    return {"file": path.name, "sha256": known[key], "from": "computed"}


@lru_cache(maxsize=1)
def evaluation_digest() -> dict[str, Any]:
    """One sha256 over the data manifest's lines of the SentEval files: the evaluation data as verified."""
    from trainer.data import manifest

    lines = sorted(f"{path}\t{size}\t{sha}" for path, (size, sha) in manifest().items()
                   if path.startswith("senteval/"))
    return {"sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(), "files": len(lines)}


def short_commit(block: dict[str, Any] | None) -> str | None:
    """The code state as trials.csv, the analysis and `sweep status` compare it: the commit's 12 hex digits, then
    "+" and the first 8 of `source_sha256` when source beyond the commit ran (changes, untracked files under the
    packages, plugins); a record written before `source_sha256` existed shows "+dirty" for a changed tree. None
    without a commit.

    >>> short_commit({"code": {"commit": "0123456789abcdef", "dirty": True, "source_sha256": "fedcba9876543210"}})
    '0123456789ab+fedcba98'
    >>> short_commit({"code": {"commit": "0123456789abcdef", "dirty": True}})
    '0123456789ab+dirty'
    """
    code = (block or {}).get("code") or {}
    if not code.get("commit"):
        return None
    if code.get("source_sha256"):
        return code["commit"][:12] + "+" + code["source_sha256"][:8]
    return code["commit"][:12] + ("+dirty" if code.get("dirty") else "")


def other_code_state(recorded: dict[str, Any] | None) -> str | None:
    """The code state (short_commit) a run's provenance block records when the source beyond its commit differs
    from this process's (code_state: the packages' changes and untracked files, the plugins imported); None when it
    is the same, or the record predates `source_sha256`, or either side has no checkout."""
    code = (recorded or {}).get("code") or {}
    here = code_state()
    if "source_sha256" not in code or not code.get("commit") or not here.get("commit"):
        return None
    return short_commit(recorded) if code["source_sha256"] != here["source_sha256"] else None
