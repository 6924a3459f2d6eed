#!/usr/bin/env bash
# Builds horovod 0.28.1 against the torch in .venv and installs it there (idempotent; seconds when cached).
#
# The build itself ships with the package: `python -m lightning_mgpu build-horovod` (C++17 patch, Gloo,
# wheel cached per horovod/torch/Python version under ~/.cache/lightning_mgpu/horovod). This wrapper runs
# it with the repository's venv.
#
# Usage: scripts/build_horovod.sh            HOROVOD_CACHE_DIR=/path scripts/build_horovod.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=${VPY:-.venv/bin/python}
# Fast path without importing the package (and torch) when horovod is already there with this version's patches
# (the level is lightning_mgpu/tools/build_horovod.py's PATCH_LEVEL; tests/unit/tools checks that they agree).
PATCH_LEVEL=2
if $VPY -c "import horovod.torch as h, sys; from horovod.runner.common.util import safe_shell_exec as s; sys.exit(0 if h.gloo_built() and getattr(s, 'LIGHTNING_MGPU_PATCH_LEVEL', 0) >= $PATCH_LEVEL else 1)" 2>/dev/null; then
  echo "horovod already installed with Gloo (patch level $PATCH_LEVEL)"; exit 0
fi
exec $VPY -m lightning_mgpu build-horovod
