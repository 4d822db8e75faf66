#!/usr/bin/env bash
# Create .venv and install the project with its test extras. torch is installed first and pinned
# (torch==2.13.0, a CPU build) so that no dependency pulls a multi-GB CUDA build; on a GPU machine,
# install the torch build for your CUDA first and this script keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[dev]'
