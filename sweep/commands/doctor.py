"""`sweep doctor`: what a user runs first on a new machine.

    environment_checks() -> [Check]   # torch and its CUDA build, GPUs and their memory, Ray, Optuna,
                                      # transformers, the data directory, the model cache: ok / note / PROBLEM + fix
    doctor_command(bench=False, ...)  # prints the checklist; `--bench` adds the GPU self-check
                                      # (sweep.commands.gpu_bench)
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweep.commands.bench_report import bench_table, failed_verdicts
from sweep.commands.gpu_bench import PRECISIONS, run_bench
from trainer.errors import UserError
from trainer.method_rules import built_in_methods


@dataclass
class Check:
    """One line of the checklist: state "ok", "note" (worth knowing, not a problem) or "PROBLEM" (+ fix)."""

    state: str
    what: str
    fix: str = ""

    def line(self) -> str:
        text = f"  {self.state:<8} {self.what}"
        return f"{text}; fix: {self.fix}" if self.fix else text


# ---- the checklist -------------------------------------------------------------------------------------
def environment_checks(data_dir: str | None = None, ray_start: bool = True) -> list[Check]:
    checks = [Check("ok", f"python {platform.python_version()} ({sys.executable})")]
    checks += _torch_checks()
    missing = set()
    for package, extra in (("ray", "ray[tune]"), ("optuna", "optuna"), ("transformers", "transformers")):
        try:
            module = __import__(package)
            checks.append(Check("ok", f"{package} {getattr(module, '__version__', '?')}"))
        except ImportError as exc:
            missing.add(package)
            checks.append(Check("PROBLEM", f"{package} cannot be imported ({exc})", f"pip install '{extra}'"))
    checks += _data_checks(data_dir)
    checks += _model_checks()
    if ray_start and "ray" not in missing:  # without Ray (a trainer-only machine) there is no head to start
        checks += ray_checks()
    return checks


RAY_PROBE_SECONDS = 120  # the local head's start-and-stop; Ray's own start-up gives up after 60 s


def ray_checks() -> list[Check]:
    """Whether a local Ray head can start here: a virtual-memory cap (ulimit -v), the free space of Ray's temp
    folder, and a real start-and-stop in a process of its own under RAY_PROBE_SECONDS (its leftovers killed)."""
    from sweep.run.ray_start import VM_CAP_FIX, address_limit_text, ray_temp_dir, temp_dir_problem

    checks = []
    folder = ray_temp_dir()
    if temp_dir_problem(folder) is None:
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        checks.append(Check("ok", f"Ray's temp folder {folder}: {shutil.disk_usage(existing).free / 2**30:.1f} GiB "
                                  "free"))
    problem = _probe_ray_start()
    cap = address_limit_text()
    if cap is not None:
        started = problem is None
        checks.append(Check("note" if started else "PROBLEM", f"a virtual-memory limit of {cap} is set (ulimit -v)",
                            "" if started else VM_CAP_FIX))
    if problem is None:
        checks.append(Check("ok", "a local Ray head starts and stops"))
    else:
        checks.append(Check("PROBLEM", f"a local Ray head does not start: {problem['cause']}", problem["fix"]))
    return checks


def _probe_ray_start() -> dict[str, str] | None:
    """None when a local Ray head starts and stops in a child process (`python -m sweep.run.ray_start`), else
    its cause and fix. This process reaps the child's orphans meanwhile (child_subreaper) and kills whatever of
    it is left at the end."""
    import subprocess

    from sweep.run.reaper import descendants, kill_all
    from sweep.run.stopping import child_subreaper

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with child_subreaper():
        before = set(descendants(os.getpid()))
        process = subprocess.Popen([sys.executable, "-m", "sweep.run.ray_start"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            out, _ = process.communicate(timeout=RAY_PROBE_SECONDS)
            lines = out.strip().splitlines()
            answer = json.loads(lines[-1]) if lines else {
                "cause": f"the start-and-stop process exited with {process.returncode} and said nothing",
                "fix": "run `python -m sweep.run.ray_start` to see its output"}
        except subprocess.TimeoutExpired:
            answer = {"cause": f"it did not start within {RAY_PROBE_SECONDS} s",
                      "fix": f"look at Ray's log under {ray_temp_dir_text()}"}
        finally:
            kill_all({pid: start for pid, start in descendants(os.getpid()).items() if pid not in before}, grace=1.0)
            process.wait()
    return answer


def ray_temp_dir_text() -> str:
    """Where the local head's logs are, for a probe that did not answer."""
    from sweep.run.ray_start import ray_temp_dir

    return str(ray_temp_dir() / "session_latest" / "logs")


def _torch_checks() -> list[Check]:
    try:
        import torch
    except ImportError as exc:
        return [Check("PROBLEM", f"torch cannot be imported ({exc})",
                      "install the torch build for your machine (https://pytorch.org/get-started/locally/)")]
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    checks = [Check("ok", f"torch {torch.__version__} ({build})")]
    nvidia = sorted(glob.glob("/dev/nvidia[0-9]*")) or ([] if shutil.which("nvidia-smi") is None else ["nvidia-smi"])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not torch.cuda.is_available():
        if nvidia and not torch.version.cuda:
            checks.append(Check("PROBLEM", "this machine has an NVIDIA GPU but torch is a CPU-only build",
                                "install the torch build for your CUDA driver (see `nvidia-smi`, then "
                                "https://pytorch.org/get-started/locally/)"))
        elif nvidia:
            checks.append(Check("PROBLEM", f"torch ({build}) sees no GPU although {nvidia[0]} exists "
                                f"(CUDA_VISIBLE_DEVICES={visible!r})",
                                "check `nvidia-smi` (driver newer than the torch build's CUDA) and "
                                "CUDA_VISIBLE_DEVICES"))
        else:
            checks.append(Check("note", "no GPU: trials run on the CPU (studies need resources: {gpu: 0})"))
        return checks
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        free, total = torch.cuda.mem_get_info(index)
        bf16 = "bf16 yes" if props.major >= 8 else "bf16 no (fp16 only)"  # bf16 needs Ampere (8.0) or newer
        checks.append(Check("ok", f"GPU {index}: {props.name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB "
                                  f"free), compute capability {props.major}.{props.minor}, {bf16}"))
        if free < 0.5 * total:
            checks.append(Check("note", f"GPU {index}: {(total - free) / 2**30:.1f} GiB already in use by other "
                                        "processes; trials sharing it may run out of memory"))
    if visible is not None:
        checks.append(Check("note", f"CUDA_VISIBLE_DEVICES={visible} (Ray sets it per trial itself)"))
    return checks


def _data_checks(explicit: str | None) -> list[Check]:
    from trainer.data import corpus_path, data_dir, manifest, verified_path

    root = data_dir(explicit)
    if not root.is_dir():
        return [Check("PROBLEM", f"data directory {root} does not exist",
                      "run `sweep data fetch` (or `--from DIR` with a local mirror), or set SWEEP_DATA_DIR")]
    checks = []
    bad = []
    senteval = [relative for relative in manifest() if relative.startswith("senteval/")]
    for relative in senteval:
        try:
            verified_path(root, relative)
        except UserError as exc:
            bad.append(str(exc))
    if bad:
        checks.append(Check("PROBLEM", f"data directory {root}: {len(bad)} of {len(senteval)} evaluation files "
                            f"missing or altered (first: {bad[0].split(':')[0]})",
                            f"run `sweep data fetch --dest {root}`"))
    else:
        checks.append(Check("ok", f"data directory {root}: the {len(senteval)} evaluation files verified"))
    try:
        corpus = corpus_path(root, None, note=False)
        checks.append(Check("ok" if "sample" not in corpus.name else "note", f"training corpus {corpus}" + (
            " (the sample: paper studies need `sweep data fetch --corpus full`)" if "sample" in corpus.name else "")))
    except UserError as exc:
        checks.append(Check("PROBLEM", f"no training corpus ({exc})", "run `sweep data fetch --corpus full`"))
    return checks


def _model_checks() -> list[Check]:
    """Whether the paper studies' model (bert-base-uncased) is in the HF cache, and where it is not, whether a trial
    could download it: not under HF_HUB_OFFLINE, nor where the hub cannot be reached (trainer.models.hub_reachable,
    the probe every load by HF id follows)."""
    checks = []
    try:
        from huggingface_hub import constants, try_to_load_from_cache

        from trainer.models import hub_reachable

        cache = constants.HF_HUB_CACHE
        if constants.is_offline_mode():
            no_downloads = "HF_HUB_OFFLINE: no downloads"
        elif not hub_reachable():
            no_downloads = f"the hub at {constants.ENDPOINT} cannot be reached from this machine: no downloads"
        else:
            no_downloads = ""
        cached = try_to_load_from_cache("bert-base-uncased", "config.json")
        where = f"model cache {cache}" + (f" ({no_downloads})" if no_downloads else "")
        if isinstance(cached, str):
            checks.append(Check("ok", f"{where}: bert-base-uncased is cached"))
        elif no_downloads:
            checks.append(Check("note", f"{where}: bert-base-uncased is not cached and cannot be downloaded here; "
                                        "the paper studies need it: on a machine with network run `hf download "
                                        "bert-base-uncased --cache-dir hub-copy`, then copy the folder "
                                        f"hub-copy/models--bert-base-uncased into {cache} on this machine"))
        else:
            checks.append(Check("note", f"{where}: bert-base-uncased not cached yet (downloaded by the first trial; "
                                        "on nodes without network, use a local folder as base.model)"))
    except ImportError as exc:
        checks.append(Check("PROBLEM", f"huggingface_hub cannot be imported ({exc})", "pip install transformers"))
    try:
        from trainer.models import resolve_model_path

        checks.append(Check("ok", f"model 'embedded' (all-MiniLM-L6-v2) at {resolve_model_path('embedded')}"))
    except UserError as exc:
        checks.append(Check("note", str(exc)))
    return checks


def doctor_command(bench: bool = False, tiny: bool = False, json_path: str | None = None,
                   data_dir: str | None = None, methods: str | None = None, precisions: str | None = None,
                   steps: int = 20, probe: bool = True, compiled: bool = False) -> int:
    """Print the checklist (and the bench, written as JSON to `json_path`, by default with --bench to the
    device's record, BenchRecord.path); 0 when nothing is a problem and every bench verdict holds
    (bench_report.failed_verdicts), 1 otherwise. `probe`: the CPU bench's size probe; `compiled`: the bench's
    compiled rows too (both run_bench's)."""
    chosen_methods = _choices(methods, built_in_methods(), "--methods")
    chosen_precisions = _choices(precisions, PRECISIONS, "--precisions")
    if steps < 1:
        raise UserError("--steps: expected a positive integer")
    checks = environment_checks(data_dir)
    print("sweep doctor")
    for check in checks:
        print(check.line())
    problems = sum(check.state == "PROBLEM" for check in checks)
    print(f"{problems} problem(s)" if problems else "no problems found")
    out: dict[str, Any] = {"checks": [vars(c) for c in checks], "problems": problems}
    if bench:
        print(flush=True)
        report = run_bench(tiny=tiny, methods=chosen_methods, precisions=chosen_precisions, steps=steps,
                           data_dir=data_dir, say=lambda text: print(text, flush=True), probe=probe,
                           compiled=compiled)
        print()
        print(bench_table(report))  # each failed verdict on a line of its own, "FAILED <verdict>"
        out["bench"] = report.to_json()
        out["failed_verdicts"] = failed_verdicts(report)
    if bench or json_path:
        from trainer.files import write_text_atomic

        json_path = json_path or str(report.path)
        write_text_atomic(json_path, json.dumps(out, indent=2) + "\n")
        print(f"written: {json_path}")
    return 1 if problems or out.get("failed_verdicts") else 0


def _choices(text: str | None, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    if text is None:
        return allowed
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [c for c in chosen if c not in allowed]
    if unknown or not chosen:
        raise UserError(f"{option}: unknown {', '.join(unknown) or 'empty list'}; expected a comma-separated "
                        f"list of {', '.join(allowed)}")
    return chosen
