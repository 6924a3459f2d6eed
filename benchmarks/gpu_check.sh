#!/usr/bin/env bash
# The one command for a machine with one or more NVIDIA GPUs: set up, run every gpu-marked test (nccl where there are
# two or more GPUs, AMP, real NVML, dp on real devices), then the GPU variants of the benchmark suite, whose report
# lands under benchmarks/results/<date>_<N>x<GPU>/. Without a visible GPU it says what it skipped and exits 0.
#
#   bash benchmarks/gpu_check.sh                     # extra arguments go to python -m benchmarks.run, e.g. --quick
#   GPU_CHECK_TESTS="tests/integration/strategies/horovod" bash benchmarks/gpu_check.sh --only real_models
#                                                    # some gpu-marked tests, some benchmarks
#
# With horovod installed it also asks NCCL whether two Horovod workers may share one GPU
# (benchmarks/probe_horovod_shared_gpu.py; the answer lands in the report folder). For horovod's GPU tests, install a
# build with NCCL first: python -m lightning_mgpu build-horovod --gpu (docs/horovod.md).
#
# A node without network (most cluster compute nodes) cannot run the set-up: point LIGHTNING_MGPU_PYTHON at an
# interpreter that already has CUDA torch, Lightning and the test tools (a cluster module, a container's python):
#
#   LIGHTNING_MGPU_PYTHON=python3 bash benchmarks/gpu_check.sh
#
# The repository is then imported from here (PYTHONPATH), and a missing package is named before anything runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${LIGHTNING_MGPU_PYTHON:-}" ]; then
  PY=$LIGHTNING_MGPU_PYTHON
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" - <<'EOF'
import importlib.util, sys
# What the package and the gpu-marked tests import; pytest's config uses the timeout plugin.
need = {"torch": "torch", "lightning": "lightning", "torchdata": "torchdata", "threadpoolctl": "threadpoolctl",
        "pytest": "pytest", "pytest_timeout": "pytest-timeout",
        "tqdm": "tqdm", "matplotlib": "matplotlib", "pynvml": "nvidia-ml-py", "psutil": "psutil"}
missing = [pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None]
if missing:
    sys.exit(f"gpu_check: {sys.executable} lacks {', '.join(missing)}. Install them into it"
             f" (pip install {' '.join(missing)}), or leave LIGHTNING_MGPU_PYTHON unset to set up .venv here.")
EOF
else
  bash scripts/setup_env.sh
  PY=.venv/bin/python
fi
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "$gpus" = "0" ]; then
  echo "gpu_check: no CUDA GPU visible (CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES-unset}'); skipped: the gpu-marked tests and the GPU suite."
  exit 0
fi
echo "gpu_check: $gpus GPU(s): $("$PY" -c "import torch; print(', '.join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))")"
status=0
# Tests of several ranks run them on one shared GPU when there are fewer GPUs than ranks (tests/helpers/shared_gpu.py);
# their parity and memory figures go to this folder's shared_gpu.md.
report="benchmarks/results/$(date +%Y-%m-%d)_${gpus}x$("$PY" -c "import torch; print(torch.cuda.get_device_name(0).split()[1])")_tests"
rm -f "$report/shared_gpu.jsonl"
# Three test files at a time (xdist, one file per worker): the shared-GPU runs are mostly process start-up.
parallel=$("$PY" -c "import importlib.util as u; print('-n 3 --dist loadfile' if u.find_spec('xdist') else '-p no:xdist')")
# shellcheck disable=SC2086
LIGHTNING_MGPU_REPORT_DIR="$report" "$PY" -m pytest -m gpu -q -p no:cacheprovider $parallel -rA --durations=15 ${GPU_CHECK_TESTS:-tests} || status=$?
[ -f "$report/shared_gpu.jsonl" ] && "$PY" -m benchmarks.shared_gpu_report "$report"
# Two Horovod workers on one GPU: NCCL's answer, whatever it is, is the figure (bounded: a refusal may hang).
horovodrun="$(dirname "$PY")/horovodrun"
[ -x "$horovodrun" ] || horovodrun=$(command -v horovodrun || true)
if [ "$gpus" = "1" ] && [ -n "$horovodrun" ] && "$PY" -c "import horovod.torch" 2>/dev/null; then
  mkdir -p "$report"
  rm -f "$report/horovod_shared_gpu.jsonl"
  timeout 120 "$horovodrun" -np 2 -H localhost:2 --gloo "$PY" -m benchmarks.probe_horovod_shared_gpu \
    "$report/horovod_shared_gpu.jsonl" >"$report/horovod_shared_gpu.txt" 2>&1 || echo "exit status $?" >>"$report/horovod_shared_gpu.txt"
  echo "gpu_check: two horovod workers on one GPU: $report/horovod_shared_gpu.txt"
fi
"$PY" -m benchmarks.run --gpu "$@" || status=$?
exit "$status"
