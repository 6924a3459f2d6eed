#!/usr/bin/env bash
# The stack a user installs today: the newest torch and Lightning on the index, on Python 3.12 and 3.13.
#
#   bash scripts/check_newest.sh              # both Pythons; ~3 GB of torch (the index's CUDA build) once, pip's cache
#   PYTHONS="3.12" bash scripts/check_newest.sh
#
# For each Python (pyenv's, or python3.X on the PATH), a fresh venv (.venv-newest-3.X) gets, as a user would:
# the newest torch (pip here is capped at torch <= 2.14.1 by a global config: PIP_CONFIG_FILE=/dev/null lifts it for
# these installs alone), the newest lightning and pytorch-lightning, and the bundle's wheel with its extras and test
# tools. Then: the unit tier, the two-process fits of every strategy under both namespaces
# (tests/integration/utilities/test_namespaces.py; horovod's cases skip: its wheel is built for .venv's torch), and
# examples/train.py under ddp, dp, sharded, sharded_fsdp2 and ddp2. The versions that ran are printed at the end,
# for the README's table. Not part of .ci/run: the downloads alone take minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONS=${PYTHONS:-"3.12 3.13"}
bash scripts/setup_env.sh
.venv/bin/python -m pip install -q -c constraints.txt build
rm -rf dist-newest
.venv/bin/python -m build -q --outdir dist-newest . > /tmp/check_newest_build.log 2>&1 || { cat /tmp/check_newest_build.log; exit 1; }
wheel=$(ls dist-newest/lightning_mgpu-*.whl)

interpreter() {  # the python3.X to build a venv from
  local want=$1 found
  found=$(ls -d "$HOME"/.pyenv/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$found" ] && { echo "$found"; return; }
  command -v "python$want" || { echo "check_newest: no python$want here (pyenv install $want)" >&2; exit 1; }
}

status=0
results=()
for py in $PYTHONS; do
  V=.venv-newest-$py
  NPY=$V/bin/python
  echo "== Python $py: a fresh $V"
  rm -rf "$V"
  "$(interpreter "$py")" -m venv "$V"
  PIP_CONFIG_FILE=/dev/null $NPY -m pip install -q --upgrade pip
  # The newest of each, as `pip install` picks them today (no constraints file: that is the point).
  PIP_CONFIG_FILE=/dev/null $NPY -m pip install -q torch lightning pytorch-lightning \
    "$wheel[sharded,dev]" "ray[train]>=2.54" "neptune>=1.10,<2"
  $NPY -m pip uninstall -q -y lightning_mgpu  # the tests import the checkout
  cp tests/helpers/lightning_mgpu_test_startup.pth "$($NPY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/"
  versions=$($NPY -c "import sys, torch, lightning, pytorch_lightning; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, lightning {lightning.__version__}, pytorch_lightning {pytorch_lightning.__version__}')")
  echo "check_newest: $versions"
  part=0
  (
    export PYTHONPATH=$PWD RAY_USAGE_STATS_ENABLED=0 NEPTUNE_MODE=debug PYTHONUNBUFFERED=1
    $NPY -m pytest -q -n "${PYTEST_WORKERS:-2}" -p no:cacheprovider tests/unit "$@"
    $NPY -m pytest -q -n "${PYTEST_WORKERS:-2}" -p no:cacheprovider tests/integration/utilities/test_namespaces.py "$@"
    out=$(mktemp -d)
    for strategy in ddp dp sharded sharded_fsdp2 ddp2; do
      $NPY examples/train.py --strategy "$strategy" --max-epochs 2 --logger none --output-dir "$out/$strategy" \
        > "$out/$strategy.log" 2>&1 || { tail -30 "$out/$strategy.log"; exit 1; }
      echo "check_newest: train.py --strategy $strategy: $($NPY -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"val_acc {s['val_acc']:.3f}, world size {s['world_size']}\")" "$out/$strategy/summary.json")"
    done
    rm -rf "$out"
  ) || part=1
  if [ "$part" = 0 ]; then results+=("passed: $versions"); else results+=("FAILED: $versions"); status=1; fi
done
rm -rf dist-newest
printf 'check_newest: %s\n' "${results[@]}"
[ "$status" = 0 ] || exit 1
