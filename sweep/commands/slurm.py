"""`sweep slurm STUDY`: run a study on a Slurm cluster, over as many allocations as it needs.

    slurm_command(study, nodes=1, gpus_per_node=0, cpus_per_node=None, time="4:00:00",
                  partition=None, account=None, margin=SIGNAL_MARGIN_S, dry_run=False) -> exit code

writes results/<study>/slurm/sweep.sbatch and submits it with sbatch (prints the job id; --dry-run prints
the script and submits nothing). A study whose estimate passes its `cost_limit` is refused before anything is
submitted, as `sweep run` refuses it (sweep.commands.cost_limit). The script, in each allocation:

1. starts Ray across the allocation as Ray's Slurm guide does: `ray start --head --block` on the first
   node and `ray start --address HEAD --block` on the others, each by `srun` (token authentication with a
   fresh token per allocation);
2. runs `sweep run STUDY --address HEAD` (the driver runs in the batch step, on the first node);
3. gets SIGTERM from Slurm `margin` seconds before the time limit (`#SBATCH --signal=B:TERM@margin`: to
   the batch shell only, which forwards it to the driver); the driver stops cleanly (sweep.run.stopping);
4. when the study is unfinished, requeues the job (`scontrol requeue`, `#SBATCH --requeue`); the next
   allocation resumes. After MAX_IDLE_ALLOCATIONS allocations in a row that finished no trial it stops
   with the reason in the log instead of requeueing forever.

Logs: results/<study>/slurm/allocation-<job>-<restart>.log per allocation (the script's and the
driver's output), slurm/job-<job>.out (Slurm's own), slurm/progress (idle-allocation counter).

Margin: Slurm checks time limits periodically and may send the signal up to a minute before the margin
asked for, and the driver needs up to SWEEP_STOP_GRACE_S (15 s) + Ray's shutdown after it. A margin of
180 s leaves that with room; `--time` should be well above it: at least 15 minutes (the shortest that
leaves most of an allocation for training; a bert-base trial takes ~10-60 min, and a trial cut by the
signal runs again from its start in the next allocation).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from trainer.errors import UserError

SIGNAL_MARGIN_S = 180
MAX_IDLE_ALLOCATIONS = 3
SHORTEST_SENSIBLE_TIME_S = 15 * 60


def slurm_command(study: str, nodes: int = 1, gpus_per_node: int = 0, cpus_per_node: int | None = None,
                  time: str = "4:00:00", partition: str | None = None, account: str | None = None,
                  margin: int = SIGNAL_MARGIN_S, dry_run: bool = False, many_trials: bool = False) -> int:
    """Write the sbatch script for `study` and submit it (module docstring); return 0. `many_trials`: the
    study may plan more than sweep.spec.limits.MAX_TRIALS trials (passed on to `sweep run`)."""
    from sweep.run.preflight import preflight_paths
    from sweep.spec import load_study
    from sweep.spec.limits import MAX_TRIALS

    spec = load_study(study, max_trials=None if many_trials else MAX_TRIALS)
    preflight_paths(spec)  # its slurm/ folder goes into the study folder
    if nodes < 1:
        raise UserError(f"--nodes {nodes}: expected a positive number of nodes")
    if gpus_per_node < 0 or (cpus_per_node is not None and cpus_per_node < 1):
        raise UserError("--gpus-per-node / --cpus-per-node: expected positive numbers")
    limit_s = time_limit_seconds(time)
    if margin < 1 or limit_s <= margin + 60:
        raise UserError(f"--time {time}: the time limit must exceed the stop signal's margin ({margin} s) by more "
                        f"than a minute (Slurm may signal up to a minute early); use at least "
                        f"{SHORTEST_SENSIBLE_TIME_S // 60} minutes, e.g. --time 1:00:00")
    if not dry_run:
        if spec.cost_limit is not None:  # refused here as the job's `sweep run` would refuse it, before a queue wait
            from sweep.commands.cost_limit import check_cost_limit, study_estimate

            check_cost_limit(spec, study_estimate(spec))
        _check_cluster(partition, gpus_per_node)

    folder = Path(spec.study_dir).resolve() / "slurm"
    script = sbatch_script(Path(study).resolve(), spec.name, folder, nodes=nodes, gpus_per_node=gpus_per_node,
                           cpus_per_node=cpus_per_node, time=time, partition=partition, account=account,
                           margin=margin, many_trials=many_trials)
    if dry_run:
        print(script, end="")
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sweep.sbatch"
    from trainer.files import write_text_atomic

    write_text_atomic(path, script)
    path.chmod(path.stat().st_mode | 0o100)
    done = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise UserError(f"sbatch refused the job: {' '.join(done.stderr.split())[:300]} (script: {path})")
    job_id = done.stdout.strip().split(";")[0]
    print(f"submitted job {job_id} for study {spec.name}: {path}")
    print(f"logs: {folder}/allocation-{job_id}-*.log; follow with `sweep status {spec.study_dir}`")
    return 0


def time_limit_seconds(text: str) -> int:
    """Slurm's --time formats in seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.

    >>> [time_limit_seconds(t) for t in ("30", "1:00:00", "2-0", "0-1:30", "10:30")]
    [1800, 3600, 172800, 5400, 630]
    """
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        raise UserError(f"--time {text!r}: expected a Slurm time limit such as 4:00:00, 90 (minutes) or 1-12:00:00")
    days, a, b, c = match.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if b is None:  # M
        return int(a) * 60
    if c is None:  # M:S
        return int(a) * 60 + int(b)
    return (int(a) * 60 + int(b)) * 60 + int(c)  # H:M:S


def _check_cluster(partition: str | None, gpus_per_node: int) -> None:
    """Slurm installed, the partition known, GPUs present when asked for (one-line errors, nothing submitted)."""
    if shutil.which("sbatch") is None:
        raise UserError("Slurm is not installed here (no `sbatch` on PATH): run `sweep slurm` on the cluster's "
                        "login node, or `sweep run` to run on this machine")
    partitions = _sinfo(["-h", "-o", "%P"])
    names = [p.rstrip("*") for p in partitions]
    if partition is not None and partition not in names:
        raise UserError(f"--partition {partition}: no such Slurm partition; this cluster has "
                        f"{', '.join(names) or 'none'} (see `sinfo`)")
    if gpus_per_node > 0:
        args = ["-h", "-o", "%G"] + (["-p", partition] if partition else [])
        gres = [g for g in _sinfo(args) if "gpu" in g]
        if not gres:
            where = f"partition {partition}" if partition else "this cluster"
            raise UserError(f"--gpus-per-node {gpus_per_node}: {where} has no GPUs (sinfo shows no gpu GRES); "
                            "drop --gpus-per-node or pick a GPU partition")


def _sinfo(args: list[str]) -> list[str]:
    try:
        done = subprocess.run(["sinfo", *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"cannot ask Slurm about the cluster (sinfo: {exc})") from None
    if done.returncode != 0:
        raise UserError(f"cannot ask Slurm about the cluster: {' '.join(done.stderr.split())[:200]}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def sbatch_script(study_file: Path, name: str, folder: Path, *, nodes: int, gpus_per_node: int,
                  cpus_per_node: int | None, time: str, partition: str | None, account: str | None,
                  margin: int, many_trials: bool = False) -> str:
    """The batch script (module docstring)."""
    python = sys.executable
    ray = str(Path(python).with_name("ray")) if Path(python).with_name("ray").exists() else "ray"
    header = [
        "#!/bin/bash",
        f"#SBATCH --job-name=sweep-{name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={time}",
        f"#SBATCH --signal=B:TERM@{margin}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={folder}/job-%j.out",
    ]
    if cpus_per_node:
        header.append(f"#SBATCH --cpus-per-task={cpus_per_node}")
    if gpus_per_node:
        header.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
    if partition:
        header.append(f"#SBATCH --partition={partition}")
    if account:
        header.append(f"#SBATCH --account={account}")
    resources = (f" --num-cpus={cpus_per_node}" if cpus_per_node else "") + f" --num-gpus={gpus_per_node}"
    q = shlex.quote
    body = f"""
# Written by `sweep slurm` (sweep/commands/slurm.py); resubmit with `sweep slurm`, not by editing this file.
set -u
STUDY={q(str(study_file))}
LOGS={q(str(folder))}
PYTHON={q(python)}
RAY={q(ray)}
cd {q(os.getcwd())}
mkdir -p "$LOGS"
exec >>"$LOGS/allocation-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}.log" 2>&1
say() {{ echo "[$(date '+%F %T')] sweep slurm: $*"; }}

# One Ray cluster per allocation, with a fresh token (Ray's token authentication).
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=$("$PYTHON" -c 'import uuid; print(uuid.uuid4().hex)')
export RAY_AUTH_TOKEN
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head=${{nodes[0]}}
head_ip=$(srun --overlap --nodes=1 --ntasks=1 -w "$head" hostname --ip-address | awk '{{print $1}}')
port=$((20000 + SLURM_JOB_ID % 20000))
address="$head_ip:$port"
done_before=$("$PYTHON" -m sweep.commands.slurm progress "$STUDY")
say "allocation ${{SLURM_RESTART_COUNT:-0}} of job $SLURM_JOB_ID on ${{nodes[*]}}: study at $done_before trials done"

srun --overlap --nodes=1 --ntasks=1 -w "$head" "$RAY" start --head --node-ip-address="$head_ip" --port="$port" \\
  --include-dashboard=false --disable-usage-stats{resources} --block &
ray_steps=($!)
for _ in $(seq 120); do "$RAY" status --address "$address" >/dev/null 2>&1 && break; sleep 1; done
if [ "${{#nodes[@]}}" -gt 1 ]; then
  srun --overlap --nodes=$((${{#nodes[@]}} - 1)) --ntasks=$((${{#nodes[@]}} - 1)) --exclude="$head" \\
    "$RAY" start --address="$address" --disable-usage-stats{resources} --block &
  ray_steps+=($!)
fi

# Slurm's early SIGTERM reaches this shell only (B:); pass it on to the driver, which stops cleanly.
"$PYTHON" -m sweep run "$STUDY" --address "$address"{" --many-trials" if many_trials else ""} &
driver=$!
trap 'say "SIGTERM from Slurm: stopping the driver"; kill -TERM $driver 2>/dev/null' TERM
while kill -0 $driver 2>/dev/null; do wait $driver; status=$?; done
wait $driver 2>/dev/null; status=${{status:-$?}}
trap - TERM
kill -TERM "${{ray_steps[@]}}" 2>/dev/null; wait "${{ray_steps[@]}}" 2>/dev/null

done_after=$("$PYTHON" -m sweep.commands.slurm progress "$STUDY")
say "driver exited with status $status; study at $done_after trials done"
read -r after total <<<"${{done_after/ of / }}"
read -r before _ <<<"${{done_before/ of / }}"
if [ "$after" -ge "$total" ]; then say "study finished"; rm -f "$LOGS/progress"; exit "$status"; fi
case $status in
  129|130|143|0) ;;
  *) say "not requeued: the driver ended with status $status (see above); fix it and run sweep slurm again"
     exit "$status";;
esac
idle=0
if [ "$after" -le "$before" ]; then idle=$(( $(cat "$LOGS/progress" 2>/dev/null || echo 0) + 1 )); fi
echo "$idle" > "$LOGS/progress"
if [ "$idle" -ge {MAX_IDLE_ALLOCATIONS} ]; then
  say "not requeued: $idle allocations in a row finished no trial" \
      "(a trial longer than --time minus {margin} s?); use a longer --time"
  exit 1
fi
say "study unfinished: requeueing job $SLURM_JOB_ID; the next allocation resumes it"
scontrol requeue "$SLURM_JOB_ID"
"""
    return "\n".join(header) + "\n" + body


def progress(study: str) -> str:
    """"DONE of TOTAL" trials of the study, as `sweep run` decides (sweep.records.resume); for the batch script."""
    from sweep.records.resume import is_done, trial_states
    from sweep.spec import expansion, load_study

    spec = load_study(study, max_trials=None)  # `sweep slurm` accepted its size (--many-trials) when it submitted
    keys = [t.key for t in expansion(spec).trials]
    states = trial_states(spec, keys) or {}
    done = sum(1 for key in keys if is_done(states.get(key)))
    total = spec.search.total_trials(len(keys), spec.budget, len(spec.seeds))
    return f"{done} of {total}"


if __name__ == "__main__":  # python -m sweep.commands.slurm progress STUDY (used by the batch script)
    if len(sys.argv) == 3 and sys.argv[1] == "progress":
        try:
            print(progress(sys.argv[2]))
        except UserError as exc:
            print(f"sweep: error: {exc}", file=sys.stderr)
            sys.exit(2)
    else:
        print("usage: python -m sweep.commands.slurm progress STUDY", file=sys.stderr)
        sys.exit(2)
