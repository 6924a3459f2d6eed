#!/usr/bin/env bash
# A converted script computes what it computed on Lightning 1.x (issue 54): the 1.x reference runs beside the
# converted runs.
#
#   bash scripts/check_upgrade_equivalence.sh                 # build the references (once), run every script, report
#   bash scripts/check_upgrade_equivalence.sh --only gan_frequency.py --keep
#   BUILD_ONLY=1 bash scripts/check_upgrade_equivalence.sh    # the references alone
#
# Two reference venvs, each its own, never the project's .venv (ignored paths; a stamp file records what each holds,
# so a second run reuses them):
#   .venv-ref-1.9  pytorch-lightning 1.9.5 + torch 2.0.1 on Python 3.11 (the base interpreter of .venv): 1.7-1.9 code,
#                  with fairscale 0.4.13 (strategy="ddp_sharded")
#   .venv-ref-1.6  pytorch-lightning 1.6.5 + torch 1.13.1 on pyenv's Python 3.10 (torch 1.13 fails at import on 3.11),
#                  with six and setuptools<70: 1.4-1.6 code (accelerator="ddp_cpu", distributed_backend=, ...)
# pip here is capped at a newer torch by a global config: PIP_CONFIG_FILE=/dev/null lifts it for these installs.
# torch 2.0.1 is the index's CUDA build (about 2.5 GB of downloads once); it runs on the CPU.
#
# Then benchmarks/upgrade_equivalence.py runs each script of tests/helpers/upgrade_equivalence: the original under its
# era's reference, the copy converted by `lightning-mgpu upgrade --write` under .venv, and compares the losses per
# step (and the final weights). Its report goes to benchmarks/results/<date>_upgrade_equivalence/. Not part of CI (the
# downloads); CI compares the converted side against the stored 1.x figures (tests/integration/upgrade/
# test_equivalence.py). Refresh those with --fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REF_ROOT=${REF_ROOT:-$ROOT}

python310() {
  local root found
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  found=$(ls -d "$root"/versions/3.10.*/bin/python 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$found" ] || found=$(command -v python3.10 || true)
  [ -n "$found" ] || { echo "check_upgrade_equivalence: no Python 3.10 (pyenv install 3.10)" >&2; exit 1; }
  echo "$found"
}

python311() {  # the interpreter .venv was made from
  .venv/bin/python -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3.11"))'
}

build() {  # build VENV INTERPRETER PACKAGES...
  local venv=$1 interp=$2; shift 2
  local spec="$*"
  if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$spec" ]; then
    echo "check_upgrade_equivalence: $venv is up to date ($spec)"
    return
  fi
  echo "check_upgrade_equivalence: building $venv ($spec)"
  rm -rf "$venv"
  "$interp" -m venv "$venv"
  PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -q --upgrade "pip<24.1"
  PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -q "$@"
  "$venv/bin/python" -c "import torch, pytorch_lightning as pl; print('check_upgrade_equivalence:', '$venv', 'torch', torch.__version__, 'pytorch_lightning', pl.__version__)"
  echo "$spec" > "$venv/.stamp"
}

build "$REF_ROOT/.venv-ref-1.9" "$(python311)" "pytorch-lightning==1.9.5" "torch==2.0.1" "numpy<2" "fairscale==0.4.13"
build "$REF_ROOT/.venv-ref-1.6" "$(python310)" "pytorch-lightning==1.6.5" "torch==1.13.1" "numpy<2" six \
  "setuptools<70" "torchmetrics<0.12"

[ -n "${BUILD_ONLY:-}" ] && exit 0
PYTHONPATH=$ROOT .venv/bin/python -m benchmarks.upgrade_equivalence \
  --ref-1.9 "$REF_ROOT/.venv-ref-1.9" --ref-1.6 "$REF_ROOT/.venv-ref-1.6" "$@"
