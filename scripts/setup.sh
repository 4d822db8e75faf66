#!/usr/bin/env bash
# Create .venv and install the project: what `sweep run` needs, or with --dev the test and tracker tooling
# too (pytest, ruff, hypothesis, mlflow, wandb, tensorboard, psycopg2; mteb, the extra the MTEB tests need).
# torch is installed first, by pip
# and pinned (torch==2.13.0, a CPU build, which pip finds on this machine's disk; uv does not look there
# and would download a multi-GB CUDA build); on a GPU machine, install the torch build for your CUDA
# first and this script keeps it. The rest is installed by uv, from PyPI: half pip's time on a fresh
# machine (bench/LOG.md, "Set-up"); pip does it if uv cannot be installed. Both write the installed
# modules' bytecode (uv only when asked: --compile-bytecode), so that no process compiles Ray, Tune or Optuna
# from source at start-up where the environment sets PYTHONDONTWRITEBYTECODE: a sweep starts a driver, Ray's
# helpers and a worker per trial, each importing them (bench/LOG.md, "Bytecode and workers").
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
case "${1:-}" in
  --dev) extras="[dev,mteb]" ;;
  "") ;;
  *) echo "usage: bash scripts/setup.sh [--dev]" >&2; exit 2 ;;
esac
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
if python -m pip install -q uv; then
  uv pip install -q --compile-bytecode -e ".$extras"
else
  python -m pip install -q -e ".$extras"
fi
