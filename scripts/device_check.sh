#!/usr/bin/env bash
# The one command to check a locked-down GPU machine, run from the checkout root with the bundle that
# scripts/device_bundle.sh built beside it (.device-bundle/ by default):
#
#   scripts/device_check.sh OUT_DIR [--bundle DIR] [--python PYTHON] [--budget SECONDS] [--cpu] [--site DIR]
#
# 1. installs the bundle's wheels into a private folder (pip from the bundle's own pip wheel, --no-index,
#    --target; the machine's packages are never touched) and puts it, with the embedded-model stand-in, on
#    PYTHONPATH; SWEEP_DATA_DIR is the bundle's data, downloads are off;
# 2. imports everything the device path imports: a module the bundle lacks stops the check here, named;
# 3. within the budget (default 480 s, from the start of this script; each part under `timeout`, a part that
#    cannot start in what is left is listed as skipped, one cut off by the timeout as cut off):
#    (b) scripts/device_agreement.py train: a tiny encoder, 20 fp32 steps, same batches, GPU against CPU,
#        every step's loss within 1e-4 relative;
#    (c) scripts/device_agreement.py sts: the seven STS tasks on one random-weight encoder, GPU against CPU,
#        within 0.01 per task;
#    (a) `sweep doctor --bench` (bert-base shape on CUDA: every method at fp32, bf16, fp16, the sync-free check,
#        peak memory, two trials sharing the GPU against one), its own budget set to what is left;
# 4. writes OUT_DIR/device_check.json (every figure, the versions, the device), OUT_DIR/device_check.md (the
#    tables) and OUT_DIR/device_check.log (all output).
#
# Without a GPU (or with --cpu) it runs in CPU mode: the bench's tiny encoder on the CPU (without the size
# probe of `sweep doctor --bench` on a CPU: the GPU path has none), and (b) and (c)
# compare the CPU with the CPU; the JSON and the table say so.
# Exit 0: every part ran (or was skipped for time) and agreed; 1: a part failed or disagreed; 2: usage or
# bundle problem; 3: the bundle lacks a module the device path imports.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUNDLE="$ROOT/.device-bundle"
PY=python3
BUDGET=480
CPU_MODE=0
SITE=""
OUT_DIR=""
usage() { echo "usage: scripts/device_check.sh OUT_DIR [--bundle DIR] [--python PYTHON] [--budget SECONDS] [--cpu] [--site DIR]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="${2:?}"; shift 2 ;;
    --python) PY="${2:?}"; shift 2 ;;
    --budget) BUDGET="${2:?}"; shift 2 ;;
    --site) SITE="${2:?}"; shift 2 ;;
    --cpu) CPU_MODE=1; shift ;;
    -h|--help|-*) usage ;;
    *) [ -z "$OUT_DIR" ] || usage; OUT_DIR="$1"; shift ;;
  esac
done
[ -n "$OUT_DIR" ] || usage
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "device_check: --budget expects whole seconds" >&2; exit 2; }
START=$(date +%s)
DEADLINE=$((START + BUDGET))
mkdir -p "$OUT_DIR" && OUT_DIR="$(cd "$OUT_DIR" && pwd)"
BUNDLE="$(cd "$BUNDLE" 2>/dev/null && pwd)" && [ -f "$BUNDLE/bundle.json" ] || {
  echo "device_check: no bundle at ${BUNDLE:-?} (build it with scripts/device_bundle.sh, or pass --bundle DIR)" >&2; exit 2; }
command -v "$PY" >/dev/null || { echo "device_check: no python at $PY (pass --python)" >&2; exit 2; }
PARTS="$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX")"
KEEP_SITE=1
if [ -z "$SITE" ]; then SITE="$PARTS/site"; KEEP_SITE=0; fi
trap 'rm -rf "$PARTS"' EXIT
: >"$OUT_DIR/device_check.log"
exec > >(tee -a "$OUT_DIR/device_check.log") 2>&1
AGREE="$ROOT/scripts/device_agreement.py"

now() { date +%s; }
left() { echo $((DEADLINE - $(now))); }
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$PARTS/status.tsv"; }
# run_part NAME LEAST_SECONDS COMMAND...: run it under `timeout` with what is left of the budget, or skip it
run_part() {
  local name="$1" least="$2"; shift 2
  local remaining; remaining=$(left)
  if [ "$remaining" -lt "$least" ]; then
    echo "== $name: skipped, ${remaining} s of the budget left (it needs about ${least} s)"
    record "$name" skipped "" "" "budget spent: ${remaining} s left, needs about ${least} s"
    return 0
  fi
  echo "== $name (at most ${remaining} s)"
  local began; began=$(now)
  timeout -k 10 "$remaining" "$@"
  local rc=$?
  local took=$(( $(now) - began ))
  case $rc in
    0) record "$name" ran 0 "$took" "" ;;
    124|137) record "$name" "cut off" "$rc" "$took" "stopped at the end of the ${BUDGET} s budget" ;;
    1) if [ -f "$PARTS/$name.json" ]; then record "$name" ran 1 "$took" "outside the tolerance"
       else record "$name" failed 1 "$took" "exit status 1"; fi ;;
    *) record "$name" failed "$rc" "$took" "exit status $rc" ;;
  esac
  return $rc
}

report() {
  echo "== report"
  (cd "$PARTS" && "$PY" "$AGREE" report --parts "$PARTS" --out-dir "$OUT_DIR" --bundle "$BUNDLE" \
      --budget "$BUDGET" --elapsed "$(( $(now) - START ))")
}

# ---- install into the private folder -------------------------------------------------------------------------
PIP_WHEEL="$(ls "$BUNDLE"/tools/pip-*.whl 2>/dev/null | head -n 1)"
[ -n "$PIP_WHEEL" ] || { echo "device_check: the bundle has no pip wheel in tools/: rebuild it" >&2; exit 2; }
mkdir -p "$SITE" && SITE="$(cd "$SITE" && pwd)"
# no pip configuration or PIP_* variables of this machine: only the bundle's wheels, only into SITE
UNSET=()
for name in $(env | grep -o '^PIP_[A-Z_]*'); do UNSET+=(-u "$name"); done
run_part install 5 env "${UNSET[@]+"${UNSET[@]}"}" PIP_CONFIG_FILE=/dev/null PYTHONNOUSERSITE=1 \
  "$PY" "$PIP_WHEEL/pip" install -q --no-index --no-deps --disable-pip-version-check --no-warn-script-location \
  --find-links "$BUNDLE/wheels" --target "$SITE" --upgrade "$BUNDLE"/wheels/*.whl \
  || { echo "device_check: installing the bundle failed"; report; exit 2; }

export PYTHONPATH="$SITE:$BUNDLE/embedded${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
export SWEEP_DATA_DIR="$BUNDLE/data" SWEEP_DEVICE_SITE="$SITE" SWEEP_DEVICE_BUNDLE="$BUNDLE"
export SWEEP_BENCH_DIR="$PARTS/bench-records" HF_HOME="$PARTS/hf" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false PYTHONNOUSERSITE=1 PYTHONUNBUFFERED=1
[ "$CPU_MODE" = 1 ] && export CUDA_VISIBLE_DEVICES=""
cd "$PARTS"  # a neutral folder: the project is imported from the private folder, not from the checkout

run_part imports 5 "$PY" "$AGREE" imports --out "$PARTS/imports.json"
case $? in
  0) ;;
  3) report; echo "device_check: stopped: the bundle lacks a module (above)"; exit 3 ;;
  *) report; echo "device_check: stopped: the imports failed"; exit 1 ;;
esac

run_part train_agreement 30 "$PY" "$AGREE" train --out "$PARTS/train_agreement.json"
run_part sts_agreement 45 "$PY" "$AGREE" sts --out "$PARTS/sts_agreement.json"
# the bench keeps 20 s of the budget back for its own start and end; its runs stop before the rest is spent
BENCH_BUDGET=$(( $(left) - 20 ))
run_part bench 60 "$PY" "$AGREE" bench --budget "$BENCH_BUDGET" --out "$PARTS/bench.json"

report
status=$?
[ "$KEEP_SITE" = 1 ] || rm -rf "$SITE"
exit $status
