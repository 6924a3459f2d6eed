#!/usr/bin/env bash
# The formatter and the linter, as CI runs them (configured in pyproject.toml: 120 columns, one annotation spelling).
# Set up first (idempotent). `bash scripts/lint.sh --fix` rewrites instead of checking.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
if [ "${1:-}" = "--fix" ]; then
  .venv/bin/ruff format .
  exec .venv/bin/ruff check --fix .
fi
.venv/bin/ruff format --check .
exec .venv/bin/ruff check .
