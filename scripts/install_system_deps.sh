#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Chromium (the dashboard renders in a real browser) and
# iproute2 (`ip netns`: the two-node tests run torchrun agents in two network namespaces). Idempotent: installs
# only what is missing.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
if command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "warning: could not install ${missing[*]}; on CI the tests that need them fail" >&2
else
  echo "warning: no apt-get; install ${missing[*]} yourself (on CI the tests that need them fail)" >&2
fi
