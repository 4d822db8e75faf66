"""What moving a trial's folder to the driver costs (sweep.run.trial_files): seconds and memory for a bert-base-sized
`model/` (a random-weight bert-base config: ~440 MB of safetensors), sent through Ray to the receiver actor.

    python bench/trial_files.py [--runs 3] [--keep DIR]

It starts a local Ray, the receiver (as `sweep run --address` does), writes a random bert-base model into a
staging folder with a log and a summary, and sends it with `send_trial_folder`, the function a trial's worker
runs. Printed per run: seconds, MB/s, the peak private memory (RssAnon, sampled every 10 ms) gained during the
send by this process (the sender: a trial's worker on its node) and by the receiver actor's process. Here the
sender and the driver are the same process (the bench's own); in a study the driver process only calls
nothing: the chunks go from the worker's node to the receiver's through Ray's object store.
On one machine the object store is local: a real cluster adds the network's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import table  # bench/table.py, beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def anon_kb(pid: int) -> int:
    """The process's private memory (RssAnon). Not VmRSS: that also counts the pages of Ray's shared-memory
    object store the process has mapped (RssShmem), which belong to the node's store, not the process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


class PeakMemory(threading.Thread):
    """Samples the private memory of some processes every 10 ms; .gained(pid) = peak - start, in MB."""

    def __init__(self, pids: list[int]):
        super().__init__(daemon=True)
        self.start_kb = {pid: anon_kb(pid) for pid in pids}
        self.peak_kb = dict(self.start_kb)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.01):
            for pid in self.peak_kb:
                self.peak_kb[pid] = max(self.peak_kb[pid], anon_kb(pid))

    def gained(self, pid: int) -> float:
        return (self.peak_kb[pid] - self.start_kb[pid]) / 1024


def write_model(folder: Path) -> int:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(folder / "model")  # bert-base-uncased's shape, random weights
    (folder / "log.txt").write_text("=== trial bench\n" * 1000)
    (folder / "summary.json").write_text(json.dumps({"status": "ok"}))
    lines = (json.dumps({"step": i, "loss": 1.0 / i}) + "\n" for i in range(1, 200))
    (folder / "metrics.jsonl").write_text("".join(lines))
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    table.add_record_argument(parser)
    args = parser.parse_args()

    import ray

    from sweep.run.trial_files import CHUNK_BYTES, IN_FLIGHT, send_trial_folder, start_receiver

    work = Path(tempfile.mkdtemp(prefix="bench-trial-files-"))
    source = work / "source"
    size = write_model(source)
    print(f"folder: {size / 1e6:.1f} MB in {sum(1 for p in source.rglob('*') if p.is_file())} files; "
          f"chunk {CHUNK_BYTES >> 20} MiB, {IN_FLIGHT} under way", flush=True)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        actor, files = start_receiver(work / "study", {}, {})
        receiver_pid = ray.get(actor.pid.remote())
        for run in range(1, args.runs + 1):
            staging = work / "staging" / f"k{run}-x"
            shutil.copytree(source, staging)
            me = os.getpid()
            peak = PeakMemory([me, receiver_pid])
            peak.start()
            started = time.perf_counter()
            outcome = send_trial_folder(files, f"k{run}", staging)
            seconds = time.perf_counter() - started
            peak.done.set()
            peak.join()
            assert outcome["arrived"] and outcome["seconds"] <= seconds, outcome
            arrived = work / "study" / "trials" / f"k{run}" / "model" / "model.safetensors"
            assert arrived.stat().st_size == (source / "model" / "model.safetensors").stat().st_size
            print(f"run {run}: {seconds:.2f} s, {size / 1e6 / seconds:.0f} MB/s; peak private memory gained: "
                  f"sender (= driver here) {peak.gained(me):.0f} MB, receiver actor {peak.gained(receiver_pid):.0f} MB",
                  flush=True)
            shutil.rmtree(work / "study" / "trials" / f"k{run}")
            rows.append({"run": run, "mb": round(size / 1e6, 1), "seconds": round(seconds, 2),
                         "sender_peak_mb": round(peak.gained(me)),
                         "receiver_peak_mb": round(peak.gained(receiver_pid))})
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    table.record(__file__, rows, args.record)


if __name__ == "__main__":
    main()
