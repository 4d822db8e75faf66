#!/usr/bin/env bash
# A CI version leg: a virtual environment of its own (.venv-LEG) with torch held at the main leg's build and the
# other core packages at the lowest versions pyproject.toml's ranges allow (`lowest`) or the newest they admit
# (`newest`), then the fast tier in it. Prints the versions it tested; fails when the install or a test fails.
#
#     bash .ci/version_leg.sh lowest|newest
set -euo pipefail
cd "$(dirname "$0")/.."
leg="${1:?usage: bash .ci/version_leg.sh lowest|newest}"
torch_version=$(.venv/bin/python -c "import torch; print(torch.__version__)")
venv=".venv-$leg"
rm -rf "$venv"
python3 -m venv "$venv"
pins="$(mktemp)"
.venv/bin/python .ci/version_legs.py "$leg" "$torch_version" > "$pins"
# torch by pip, which finds the main leg's build on this machine's disk; the rest by uv (the main leg's), which
# keeps that torch: the pins hold it at its version
"$venv/bin/python" -m pip install -q "torch==$torch_version"
upgrade=""
[ "$leg" = newest ] && upgrade="--upgrade"
.venv/bin/python -m uv pip install -q --python "$venv/bin/python" $upgrade -c "$pins" -e ".[dev]"
echo "version leg $leg:"
"$venv/bin/python" .ci/version_legs.py versions | sed 's/^/  /'
"$venv/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider
