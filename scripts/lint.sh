#!/usr/bin/env bash
# The formatter, the linter and the type checker, as CI runs them (configured in pyproject.toml: 120 columns, one
# annotation spelling; mypy over the whole library, as [tool.mypy] says).
# Set up first (idempotent). `bash scripts/lint.sh --fix` rewrites instead of checking.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
if [ "${1:-}" = "--fix" ]; then
  .venv/bin/ruff format .
  exec .venv/bin/ruff check --fix .
fi
.venv/bin/ruff format --check .
.venv/bin/ruff check .
exec .venv/bin/mypy
