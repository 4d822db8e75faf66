#!/usr/bin/env bash
# The main job on a fresh machine: set up, install the data, run the quickstart study (a small MoCoSE
# grid on the embedded MiniLM model, CPU), and draw its figures into results/quickstart/figures/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1
if [ -d ../shared/data/senteval ]; then
  sweep data fetch --from ../shared/data        # a local mirror beside the project
else
  sweep data fetch --corpus full                # the public archives SimCSE uses
fi
sweep run studies/quickstart.yaml
sweep analyze studies/quickstart.yaml
echo "figures: results/quickstart/figures/"
echo "the sweep command is in .venv: run '. .venv/bin/activate' in your shell before the README's other commands"
