"""The bench record: what `sweep doctor --bench` measured on one device, written by sweep.commands.gpu_bench
(`run_bench` builds it), printed by sweep.commands.bench_report and read by `sweep run --dry-run`'s cost estimate
(sweep.commands.cost). One file per device, the latest bench of that device:

    BenchRecord.folder()                 # $SWEEP_BENCH_DIR, default ~/.cache/contrastive-sweep/bench
    record.path                          # <folder>/<device>.json: the GPU's name (`NVIDIA H100 80GB HBM3` ->
                                         # nvidia-h100-80gb-hbm3) or cpu
    BenchRecord.path_for(gpu_name)       # the same, before a record exists (None: the CPU's)
    BenchRecord.read(path)               # the record in a file `sweep doctor --bench` wrote (ValueError if none)
    record.run(method, precision)        # the run the estimate reads: BenchRun with its four timings, or None
    record.run(method, precision, compiled=True)   # ... its compiled row (setup_seconds includes the compile)

The file is `sweep doctor`'s JSON: its checklist, and the record under "bench". Every field is declared here, and
a field the model does not declare is refused, so a writer and its readers cannot drift apart unnoticed. The
writer builds each row typed as it measures it (`replace` gives a checked, changed copy); `to_json` and `read` are
the record's one boundary with plain data.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

RECORDS_ENV = "SWEEP_BENCH_DIR"
DEFAULT_RECORDS = "~/.cache/contrastive-sweep/bench"
RECORD_VERSION = 1
# The timings a run needs for an estimate (sweep.commands.gpu_bench.run_timings)
RUN_TIMINGS = ("step_seconds", "dev_eval_seconds", "final_eval_seconds", "setup_seconds")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def replace(self, **changes: Any) -> Any:
        """A checked copy with `changes` (fields by name; a name the record does not declare is refused)."""
        return type(self).model_validate({**dict(self), **changes})


class SyncVerdict(_Record):
    """CUDA's sync check of a run (sweep.commands.gpu_bench.sync_check): `sync_free` None when not checked, and
    then `first_sync` says why; else the first synchronising call, at step `at_step`."""

    sync_free: bool | None
    first_sync: str | None = None
    at_step: int | None = None
    steps_per_s: float | None = None


class BenchRun(_Record):
    """One method x precision run of the bench (sweep.commands.gpu_bench.measure_run)."""

    method: str
    precision_asked: str
    precision_ran: str | None = None  # what the trainer's summary says the step computed in
    device: str | None = None
    steps: int | None = None
    status: str | None = None
    steps_per_s: float | None = None  # steady: steps 2 to steps - 1
    sentences_per_s: float | None = None
    all_steps_per_s: float | None = None  # over every step, the first included
    peak_memory_mib: float | None = None  # CUDA only
    loss: float | None = None  # the mean training loss over the run's steps
    step_seconds: float | None = None
    dev_eval_seconds: float | None = None
    final_eval_seconds: float | None = None
    setup_seconds: float | None = None
    loss_vs_fp32: float | None = None  # relative distance of the mean loss to the fp32 run's (same seed)
    note: str | None = None
    sync: SyncVerdict | None = None
    compiled: bool = False  # the step ran compiled (`compile: on`, trainer.compiled); setup_seconds includes it
    compile_seconds: float | None = None  # the compile, at set-up (the summary's compile.seconds)
    compile_graphs: int | None = None  # graphs compiled over the run (one per encoder call when none recompiles)
    loss_vs_eager: float | None = None  # compiled rows: relative distance of the mean loss to the eager run's

    def timed(self) -> bool:
        """Whether the run has the four timings an estimate needs."""
        return all(getattr(self, key) is not None for key in RUN_TIMINGS)


class Sharing(_Record):
    """Two trials (processes) sharing the device against one alone, their steady sentences/s."""

    method: str
    precision: str
    steps_timed: int
    alone_sentences_per_s: float
    shared_sentences_per_s: list[float]
    aggregate_sentences_per_s: float
    aggregate_vs_alone: float | None
    encoder: str  # the shape name of the encoder they trained


class SizeProbe(_Record):
    """The CPU bench's runs at a real encoder's shape (MiniLM-L6-sized), each method at fp32."""

    encoder: dict[str, Any]  # BERT config of the random encoder, with its `shape` name
    steps: int
    runs: list[BenchRun] = []
    skipped: list[str] = []


class BenchRecord(_Record):
    """One device's bench (module docstring)."""

    version: int = RECORD_VERSION
    device: str  # cuda | cpu
    gpu: str | None = None  # torch.cuda.get_device_name
    gpu_measured: bool = False  # False: no GPU, or a tiny encoder on one (--tiny)
    note: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    encoder: dict[str, Any]  # BERT config of the random encoder, with its `shape` name
    batch_size: int
    max_length: int
    final_tasks: list[str] = []
    threads: int | None = None  # the CPU bench's torch threads (1); None on CUDA
    date: str | None = None  # UTC, ISO 8601
    steps: int | None = None  # per run
    budget_s: float | None = None
    runs: list[BenchRun] = []
    sharing: Sharing | None = None
    size_probe: SizeProbe | None = None
    skipped: list[str] = []  # runs left out to stay within budget_s
    not_supported: list[str] = []
    elapsed_s: float | None = None
    _read_from: Path | None = PrivateAttr(default=None)  # the file read() read it from

    @property
    def name(self) -> str:
        """The device as the record names it: the GPU's name, or "cpu"."""
        return self.gpu or self.device

    @property
    def path(self) -> Path:
        """Where the record is kept: the file it was read from, else its device's file in folder()."""
        return self._read_from or self.path_for(self.gpu if self.device == "cuda" else None)

    @staticmethod
    def folder() -> Path:
        return Path(os.environ.get(RECORDS_ENV) or DEFAULT_RECORDS).expanduser()

    @classmethod
    def path_for(cls, gpu_name: str | None) -> Path:
        name = re.sub(r"[^a-z0-9]+", "-", (gpu_name or "cpu").lower()).strip("-")
        return cls.folder() / f"{name or 'device'}.json"

    @classmethod
    def read(cls, path: Path) -> BenchRecord:
        """The record in the file at `path` (`sweep doctor --bench`'s JSON, or the record alone); ValueError when
        it holds none or one this version cannot read."""
        data = json.loads(path.read_text())
        bench = data.get("bench", data) if isinstance(data, dict) else None
        if not isinstance(bench, dict) or not isinstance(bench.get("runs"), list):
            raise ValueError("no bench runs in it")
        try:
            record = cls.model_validate(bench)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"not a bench record of this version ({where}: {first['msg']})") from None
        record._read_from = path
        return record

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def run(self, method: str, precision: str, compiled: bool = False) -> BenchRun | None:
        """The run of `method` at the asked `precision` (compiled or eager), when it has every timing an estimate
        needs."""
        for run in self.runs:
            if run.method == method and run.precision_asked == precision and run.compiled == compiled:
                return run if run.timed() else None
        return None

    def shape_text(self) -> str:
        layers = f"{self.encoder.get('num_hidden_layers', '?')} layers x {self.encoder.get('hidden_size', '?')}"
        return f"{self.encoder.get('shape', '?')} encoder ({layers})"
