#!/usr/bin/env bash
# The formatter, the linter and the type checker, as CI runs them (configured in pyproject.toml: 120 columns, one
# annotation spelling; mypy over the whole library, as [tool.mypy] says).
# Set up first (idempotent).
#   bash scripts/lint.sh           all three
#   bash scripts/lint.sh --fix     the formatter and the linter rewrite instead of checking
#   bash scripts/lint.sh --style   the formatter and the linter only (seconds)
#   bash scripts/lint.sh --types   the type checker only (about 100 s on a fresh clone, seconds with its cache)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
case "${1:-}" in
  --fix)
    .venv/bin/ruff format .
    exec .venv/bin/ruff check --fix . ;;
  --types)
    exec .venv/bin/mypy ;;
esac
.venv/bin/ruff format --check .
.venv/bin/ruff check .
if [ "${1:-}" != "--style" ]; then
  exec .venv/bin/mypy
fi
