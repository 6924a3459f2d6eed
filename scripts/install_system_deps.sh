#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Chromium, to check that the dashboard
# renders. Idempotent; a no-op when chromium is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
if command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null \
    || echo "warning: could not install chromium; the dashboard browser test will be skipped" >&2
else
  echo "warning: no apt-get; install chromium yourself or the dashboard browser test is skipped" >&2
fi
