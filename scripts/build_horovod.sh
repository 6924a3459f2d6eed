#!/usr/bin/env bash
# Builds horovod 0.28.1 against the torch in .venv and installs it there.
#
# Why a script: horovod's last release asks CMake for C++14, but torch>=2.1 headers need
# C++17, so the PyPI sdist does not build as released. We patch the two CMake files, build
# with Gloo (no MPI/TF/MXNet) and cache the wheel keyed by horovod, torch and Python
# versions, so only the first run on a machine pays the ~8-10 minute build.
#
# Usage: scripts/build_horovod.sh            (idempotent; seconds when cached)
#        HOROVOD_CACHE_DIR=/path scripts/build_horovod.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=${VPY:-.venv/bin/python}
HVD_VERSION=0.28.1
if $VPY -c "import horovod.torch as h; import sys; sys.exit(0 if h.gloo_built() else 1)" 2>/dev/null; then
  echo "horovod already installed with Gloo"; exit 0
fi
TORCH_VERSION=$($VPY -c "import torch; print(torch.__version__.replace('+', '_'))")
PY_TAG=$($VPY -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
CACHE=${HOROVOD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lightning_mgpu/horovod}/hvd${HVD_VERSION}-torch${TORCH_VERSION}-${PY_TAG}
mkdir -p "$CACHE"
wheel=$(ls "$CACHE"/horovod-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  command -v cmake >/dev/null || $VPY -m pip install -q "cmake<4"
  command -v g++ >/dev/null || { echo "error: g++ is needed to build horovod (apt-get install g++)" >&2; exit 1; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  $VPY -m pip download -q --no-deps --no-binary :all: "horovod==${HVD_VERSION}" -d "$work/src"
  tar xzf "$work/src/horovod-${HVD_VERSION}.tar.gz" -C "$work/src"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
    "$work/src/horovod-${HVD_VERSION}/CMakeLists.txt" "$work/src/horovod-${HVD_VERSION}/horovod/torch/CMakeLists.txt"
  grep -q 'CMAKE_CXX_STANDARD 17' "$work/src/horovod-${HVD_VERSION}/horovod/torch/CMakeLists.txt" \
    || { echo "error: could not patch horovod's CMake files for C++17" >&2; exit 1; }
  echo "building horovod ${HVD_VERSION} against torch ${TORCH_VERSION} (about 8-10 minutes on 2 cores)..."
  # The build imports torch, so it must see the venv's torch: no build isolation.
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
  HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
    $VPY -m pip wheel -q --no-deps --no-build-isolation "$work/src/horovod-${HVD_VERSION}" -w "$work/wheel"
  # Copy then rename so an interrupted build never leaves a half-written wheel in the cache.
  built=$(ls "$work"/wheel/horovod-*.whl)
  cp "$built" "$CACHE/.partial.whl" && mv "$CACHE/.partial.whl" "$CACHE/$(basename "$built")"
  wheel="$CACHE/$(basename "$built")"
fi
# --force-reinstall: after a torch upgrade the venv still holds horovod 0.28.1 built against the old
# torch, and pip skips a wheel of an installed version; --no-deps keeps it from touching torch.
$VPY -m pip install -q --force-reinstall --no-deps "$wheel"
# horovod's runtime needs (cloudpickle, psutil, pyyaml, packaging) come from PyPI as usual.
$VPY -m pip install -q "$wheel"
$VPY -c "import horovod.torch as h; assert h.gloo_built(), 'horovod was built without Gloo'; print('horovod', h.__version__ if hasattr(h,'__version__') else '', 'ok (gloo)')"
