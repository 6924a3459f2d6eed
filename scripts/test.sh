#!/usr/bin/env bash
# Set up everything the tests need (idempotent: .venv, horovod built against the venv's torch,
# chromium) and run the test suite. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh tests/unit/strategies -k dp
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
bash scripts/build_horovod.sh
bash scripts/install_system_deps.sh
# Ray, Neptune and Lightning all want to phone home; tests never touch the network.
export RAY_USAGE_STATS_ENABLED=0 NEPTUNE_MODE=debug PYTHONUNBUFFERED=1
# Two pytest-xdist workers share the suite, a whole file at a time and every Ray-cluster test on one worker
# (tests/helpers/scheduling.py): its jobs leave the cores idle a third of the time. PYTEST_WORKERS=0: one process.
workers=(-n "${PYTEST_WORKERS:-2}")
for arg in "$@"; do
  case "$arg" in *no:xdist*) workers=() ;; esac  # -p no:xdist: pytest would not know -n
done
exec .venv/bin/python -m pytest "${workers[@]}" "$@"
