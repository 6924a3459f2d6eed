#!/usr/bin/env bash
# Creates .venv in the repo root and installs the pinned stack. Idempotent: a second run
# only checks that the pins are satisfied. Torch goes in first, on its own, because any
# later package that depends on torch would otherwise pull a CUDA build (several GB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
# The tests' start-up hook: runs tests/helpers/process_startup.py in a process that names it in
# LIGHTNING_MGPU_TEST_STARTUP (tests/conftest.py sets it), and nothing in any other.
cp tests/helpers/lightning_mgpu_test_startup.pth "$($VPY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/"
stamp=.venv/.lightning_mgpu_setup
want="$(cat constraints.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
$VPY -m pip install -q --upgrade pip wheel "setuptools<81" "uv==0.13.9"
# uv installs the stack: it downloads and unpacks in parallel and compiles the bytecode as pip does, about 85 s on a
# fresh 2-core machine where pip takes 185 s (the same versions: constraints.txt pins every package). uv does not read
# pip's configuration, so it is handed pip's find-links (where this machine keeps its torch wheels). Where uv fails
# (an index or a network it cannot use), pip does the same install.
find_links=()
for link in ${PIP_FIND_LINKS:-} $($VPY -m pip config get global.find-links 2>/dev/null || true); do
  find_links+=(--find-links "$link")
done
install() {
  if .venv/bin/uv pip install --python "$VPY" -q --compile-bytecode "${find_links[@]}" "$@"; then
    return
  fi
  echo "setup_env.sh: uv could not install $*; pip installs it" >&2
  $VPY -m pip install -q "$@"
}
# On CPU machines this index serves the CPU build of the pinned torch; on GPU machines the
# same pin resolves to the CUDA build.
install "torch==$(grep "^torch==" constraints.txt | cut -d= -f3)"
install -c constraints.txt -e ".[lightning,sharded,ray,neptune,dev]"
# The second Lightning distribution, beside the first as users often have it: the tests run the bundle under both
# namespaces. Its dependencies are lightning's own, already here.
install --no-deps -c constraints.txt pytorch-lightning
echo "$want" > "$stamp"
