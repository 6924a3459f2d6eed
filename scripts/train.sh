#!/usr/bin/env bash
# The main job: set up .venv (idempotent) and train the digits classifier with ddp on 2
# processes (gloo on CPU). Extra arguments go to examples/train.py, e.g.
#   bash scripts/train.sh --strategy sharded --max-epochs 4
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
if printf '%s\n' "$@" | grep -qx -- 'horovod'; then
  bash scripts/build_horovod.sh
fi
exec .venv/bin/python examples/train.py "$@"
